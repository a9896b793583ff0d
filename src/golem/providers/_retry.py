"""How long a provider asks to be left alone: `Retry-After` (seconds or an HTTP date),
`retry-after-ms`, and the rate-limit reset headers (Go durations, RFC 3339 times)."""

from __future__ import annotations

import datetime
import email.utils
import math
import re
import time

import httpx

__all__ = ["MAX_RETRY_AFTER", "finite_seconds", "rate_limit_reset", "retry_after_seconds"]


def retry_after_seconds(headers: httpx.Headers, now: float | None = None) -> float | None:
    """Seconds to wait as the response asks: `retry-after-ms`, else `Retry-After` (seconds,
    or an HTTP date in any of RFC 9110's three forms: IMF-fixdate, RFC 850, asctime; a date
    without a zone is GMT, as the RFC says), else, for a rate limit, the `x-ratelimit-reset-*`
    headers (`rate_limit_reset`). `now` is the clock for dates (tests)."""
    ms = headers.get("retry-after-ms")
    if ms:
        seconds = finite_seconds(ms, 1000.0)
        if seconds is not None:
            return min(seconds, MAX_RETRY_AFTER)
    value = headers.get("retry-after")
    if not value:
        return None
    value = value.strip()
    first = value.partition(",")[0].strip()  # a header sent twice arrives joined by ", "
    seconds = finite_seconds(first) if _NUMBER.fullmatch(first) else None
    if seconds is None:
        seconds = _http_date_wait(value, time.time() if now is None else now)
        if seconds is None and value.count(",") >= 3:  # two dates, each with its comma
            seconds = _http_date_wait(
                ",".join(value.split(",")[:2]), time.time() if now is None else now
            )
    return None if seconds is None else min(seconds, MAX_RETRY_AFTER)


MAX_RETRY_AFTER = 86400.0
"""The longest wait (seconds) a provider's `Retry-After` is read as: a date in the year 9999
or a count of 10^12 seconds is a broken header, not a plan. `Agent(max_retry_wait=...)`
decides whether a run waits that long."""


_NUMBER = re.compile(
    r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?(?:inf|infinity|nan)", re.I
)


def _http_date_wait(value: str, now: float) -> float | None:
    """Seconds from `now` to the HTTP date `value` (0 for a date past), None when unreadable."""
    try:
        parts = email.utils.parsedate_tz(value)
    except (TypeError, ValueError, IndexError):
        return None
    if parts is None:
        return None
    try:
        # `mktime_tz` reads a date without a zone (asctime) as local time; HTTP dates are GMT
        when = email.utils.mktime_tz((*parts[:9], parts[9] or 0))
    except (OverflowError, ValueError):
        return None
    return max(0.0, when - now)


def rate_limit_reset(headers: httpx.Headers, now: float | None = None) -> float | None:
    """Seconds until the exhausted rate limit resets; None when no header says."""
    waits = []
    for reset_name, remaining_name, absolute in _RESET_HEADERS:
        reset = headers.get(reset_name)
        if not reset:
            continue
        remaining = headers.get(remaining_name)
        if remaining is not None and remaining.strip() not in ("0", ""):
            continue
        if absolute:
            seconds = _rfc3339_wait(reset.strip(), time.time() if now is None else now)
        else:
            seconds = _duration(reset.strip())
        if seconds is not None:
            waits.append(seconds)
    return min(max(waits), MAX_RETRY_AFTER) if waits else None


_RESET_HEADERS = tuple(
    [
        (f"x-ratelimit-reset-{k}", f"x-ratelimit-remaining-{k}", False)
        for k in ("requests", "tokens")
    ]
    + [
        (f"{family}-{k}-reset", f"{family}-{k}-remaining", True)
        for family, kinds in (
            ("anthropic-ratelimit", ("requests", "tokens", "input-tokens", "output-tokens")),
            ("anthropic-priority", ("input-tokens", "output-tokens")),
        )
        for k in kinds
    ]
)
"""`(reset, remaining, reset is a time)` of each rate limit a provider reports."""


_RFC3339 = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:(?:[0-5][0-9]|(60))(?:\.[0-9]{1,9})?"
    r"(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])?"
)
"""An RFC 3339 time (a leap second, 60, is read as the second before)."""


def _rfc3339_wait(text: str, now: float) -> float | None:
    """Seconds from `now` to the RFC 3339 time `text` (no offset is UTC), 0 for a time past,
    None when it is no such time."""
    match = _RFC3339.fullmatch(text)
    if match is None:
        return None
    if match.group(1):
        text = text[: match.start(1)] + "59" + text[match.end(1) :]
    try:
        when = datetime.datetime.fromisoformat(text.upper())
    except ValueError:  # month 13, day 31 of April, hour 24, year 0
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return max(0.0, when.timestamp() - now)


_DURATION = re.compile(r"(?:([0-9]+(?:\.[0-9]*)?)(h|ms|m|s))+?")


_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def _duration(text: str) -> float | None:
    """A Go duration (`6m0s`, `1.5s`, `20ms`) or a bare number of seconds, as seconds."""
    if _NUMBER.fullmatch(text):
        return finite_seconds(text)
    if not text or len(text) > 40:
        return None
    total, pos = 0.0, 0
    for match in _DURATION.finditer(text):
        if match.start() != pos:
            return None
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    return total if pos == len(text) and pos else None


def finite_seconds(text: str, per_second: float = 1.0) -> float | None:
    """`text` (a number of seconds, or of `1 / per_second` units) as seconds, at least 0;
    None when it is not a finite number."""
    try:
        value = float(text) / per_second
    except ValueError:
        return None
    return max(0.0, value) if math.isfinite(value) else None
