"""What the provider adapters share: HTTP error classification, Retry-After, SSE, keys.

Adapters classify failures (setting `retryable`); they never retry. The run loop
retries under `Agent(max_attempts=...)`, honouring `retry_after`.
"""

from __future__ import annotations

import asyncio
import codecs
import datetime
import email.utils
import json
import math
import os
import re
import time
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Iterator, Sequence
from contextlib import aclosing, contextmanager
from dataclasses import replace
from types import TracebackType
from typing import Any, Self, cast

import httpx
from pydantic_core import from_json

from golem.errors import (
    AuthenticationError,
    BadRequest,
    Overloaded,
    ProviderConnectionError,
    ProviderError,
    ProviderTimeout,
    RateLimited,
    ResponseFormatError,
)
from golem.messages import Message, ServerToolBlock, ThinkingBlock, ToolCall
from golem.model import Delta, ModelResponse, ThinkingDelta, ToolCallDelta

__all__ = [
    "ASSISTANT_MEDIA_TEXT",
    "CHAT_AUDIO_PREFIX",
    "FOREIGN_PART_PREFIXES",
    "MAX_BODY",
    "MAX_ERROR_BODY",
    "MAX_RETRY_AFTER",
    "MAX_TOKEN_COUNT",
    "RESPONSES_IMAGE_PREFIX",
    "RESPONSES_REASONING_PREFIX",
    "RUN_SEPARATOR",
    "HTTPModel",
    "LoopBoundClient",
    "RequestTag",
    "WholeBody",
    "api_key_from_env",
    "args_json",
    "body_text",
    "deltas_of",
    "error_details",
    "error_from_response",
    "finite_seconds",
    "in_order",
    "is_json",
    "iter_sse",
    "json_object",
    "json_text",
    "named_calls",
    "object_text",
    "parse_event_data",
    "parse_json_body",
    "post_json",
    "post_sse",
    "raise_for_status",
    "rate_limit_reset",
    "raw_json",
    "read_body",
    "read_error_body",
    "refuse_html",
    "refuse_no_answer",
    "request_id_of",
    "retry_after_seconds",
    "run_start",
    "sse_block",
    "sse_events",
    "token_count",
    "translate_transport_errors",
    "unique_call_id",
    "unique_calls",
]


RESPONSES_REASONING_PREFIX = "openai-responses/"
"""Starts the `ThinkingBlock.signature` of an OpenAI Responses reasoning item. Only that
adapter replays such a block; the others recognise it as foreign and leave it out."""


CHAT_AUDIO_PREFIX = "openai-chat-audio/"
"""Starts the `Part.signature` of an OpenAI Chat Completions audio answer: the prefix, the
audio's `expires_at` (Unix seconds, empty when not given), "/", its `id`. Only that adapter
sends it back (as the assistant message's `audio.id`); the others leave it out."""

RESPONSES_IMAGE_PREFIX = "openai-responses-image/"
"""Starts the `Part.signature` of an image an OpenAI Responses `image_generation_call` made:
the prefix and the call's ID. Only that adapter reads it; the others leave it out."""

FOREIGN_PART_PREFIXES = (CHAT_AUDIO_PREFIX, RESPONSES_IMAGE_PREFIX)
"""The `Part.signature`s of OpenAI answers: no thought signature for Gemini."""

ASSISTANT_MEDIA_TEXT = "Media of your previous answer (this API takes media only from the user):"
"""Opens the user message that carries an assistant message's media (a Gemini image
model's pictures) to an API that refuses media in assistant turns (ADR 0060)."""

RUN_SEPARATOR = "\n\n"
"""Joins text runs that a provider's server-side tool blocks separate (ADR 0018, 0028)."""

_RAW_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def raw_json(value: Any) -> str:
    """A provider object as the compact JSON text kept in `Citation.raw` / `ServerToolBlock.raw`
    (numbers past a float's range or `int()`'s digit limit written as `args_json` writes them)."""
    return args_json(value, _RAW_ENCODER)


_HUGE = {"\x00+\x00": "1e999", "\x00-\x00": "-1e999", "\x00n\x00": "null"}


def args_json(value: Any, encoder: json.JSONEncoder) -> str:
    """Tool-call arguments that arrived as a JSON value, as JSON text (`encoder` must refuse
    NaN and infinities: `allow_nan=False`).

    A number beyond the range of a float (`1e400`) was read as an infinity, which JSON
    cannot spell: it is written `1e999` (a JSON number every reader takes as the same
    infinity), never as the `Infinity` that no JSON parser accepts. An integer too long to
    convert (over 4300 digits) is written as it came.
    """
    try:
        return encoder.encode(value)
    except (ValueError, TypeError):
        longs: list[str] = []
        text = encoder.encode(_mark_huge(value, longs))
        for mark, number in _HUGE.items():
            text = text.replace(encoder.encode(mark), number)
        for i, digits in enumerate(longs):
            text = text.replace(encoder.encode(f"\x00#{i}\x00"), digits, 1)
        return text


def _mark_huge(value: Any, longs: list[str]) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "\x00n\x00" if math.isnan(value) else "\x00+\x00" if value > 0 else "\x00-\x00"
    if isinstance(value, _LongInt):
        longs.append(value.text)
        return f"\x00#{len(longs) - 1}\x00"
    if isinstance(value, list):
        return [_mark_huge(v, longs) for v in value]
    if isinstance(value, dict):
        return {k: _mark_huge(v, longs) for k, v in value.items()}
    return value


def object_text(value: Any) -> str | None:
    """`value` when it is text holding a JSON object (tool-call arguments a proxy sent as a
    string where the API sends an object), else None."""
    if isinstance(value, str) and value.lstrip().startswith("{") and json_object(value):
        return value
    return None


def json_object(raw: str) -> dict[str, Any] | None:
    """The JSON object `raw` holds (a kept provider block), or None when it holds none."""
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def run_start(content: str, pos: int) -> int:
    """Where the text run that follows a server-side block at `pos` starts: past the
    `RUN_SEPARATOR` golem put there when it joined the runs (text before the block exists)."""
    if pos > 0 and content.startswith(RUN_SEPARATOR, pos):
        return pos + len(RUN_SEPARATOR)
    return pos


def in_order(
    m: Message, blocks: Sequence[tuple[ServerToolBlock, dict[str, Any]]]
) -> Iterator[ThinkingBlock | slice | dict[str, Any]]:
    """The thinking blocks, text spans (`slice`s of `m.content`) and server-side `blocks`
    of an assistant message in the order they arrived, for an adapter to send back.

    Before each block: the thinking blocks that preceded it, then the text before it (past
    the run separator golem added). Then the rest of the thinking and of the text. Empty
    spans are skipped; tool calls are the caller's to add after.
    """
    thinking = pos = 0
    for b, block in blocks:
        yield from m.thinking[thinking : max(thinking, b.thinking_before)]
        thinking = max(thinking, b.thinking_before)
        if b.at > pos:
            end = min(b.at, len(m.content))
            if run_start(m.content, pos) < end:
                yield slice(run_start(m.content, pos), end)
            pos = max(pos, end)
        yield block
    yield from m.thinking[thinking:]
    if run_start(m.content, pos) < len(m.content):
        yield slice(run_start(m.content, pos), len(m.content))


def unique_call_id(call_id: str, seen: set[str]) -> str:
    """`call_id`, renamed `<id>_2`, `<id>_3`, ... when a call of the same response already
    has it, and recorded in `seen`. An empty ID is returned as is (the adapters fill it).

    Results are paired with calls by ID, and the APIs reject a conversation whose calls
    share one, so a response that repeats an ID would break the next request.
    """
    if not call_id:
        return call_id
    unique, n = call_id, 1
    while unique in seen:
        n += 1
        unique = f"{call_id}_{n}"
    seen.add(unique)
    return unique


def named_calls(provider: str, calls: list[ToolCall]) -> list[ToolCall]:
    """`calls`, when each has a name.

    Raises:
        ResponseFormatError: a call has no name (a damaged answer: no tool can run it, and
            the API would refuse it sent back); retryable, as sampling again usually helps.
    """
    for call in calls:
        if not call.name:
            raise ResponseFormatError(
                f"{provider} answered with a tool call without a name "
                f"(id {call.id!r}, arguments {call.args[:100]!r})",
                provider=provider,
                retryable=True,
            )
    return calls


def refuse_no_answer(provider: str, response: ModelResponse, reason: str) -> ModelResponse:
    """`response`, unless it stopped for a reason golem does not know (`finish_reason`
    "other": vLLM's `abort`, a router's `error`, a newer API's stop) and holds nothing: no
    text, call, media or server-side block.

    Raises:
        ResponseFormatError: no answer came; retryable (sampling again usually answers),
            carrying the answer's usage.
    """
    m = response.message
    if (
        response.finish_reason != "other"
        or m.content
        or m.tool_calls
        or m.parts
        or any(b.type != "container" for b in m.server_tools)
    ):
        return response
    error = ResponseFormatError(
        f"{provider} stopped ({reason[:100]!r}) without an answer",
        provider=provider,
        retryable=True,
    )
    error.usage = response.usage
    raise error


def unique_calls(calls: list[ToolCall]) -> list[ToolCall]:
    """`calls` with repeated IDs renamed by `unique_call_id` (the list itself when none is)."""
    ids = [c.id for c in calls if c.id]
    if len(set(ids)) == len(ids):
        return calls
    seen: set[str] = set()
    out = []
    for c in calls:
        call_id = unique_call_id(c.id, seen)
        out.append(c if call_id == c.id else replace(c, id=call_id))
    return out


def api_key_from_env(explicit: str | None, env_names: tuple[str, ...], provider: str) -> str:
    """Return `explicit`, else the first set environment variable of `env_names`.

    Raises:
        AuthenticationError: no key was given or found; the message names the variables.
    """
    if explicit:
        return explicit
    for name in env_names:
        value = os.environ.get(name)
        if value:
            return value
    names = " or ".join(env_names)
    raise AuthenticationError(
        f"no {provider} API key: pass api_key=... or set {names}. "
        "To run offline, use golem.testing.ScriptedModel instead.",
        provider=provider,
    )


def retry_after_seconds(headers: httpx.Headers, now: float | None = None) -> float | None:
    """Seconds to wait as the response asks: `retry-after-ms`, else `Retry-After` (seconds,
    or an HTTP date in any of RFC 9110's three forms: IMF-fixdate, RFC 850, asctime; a date
    without a zone is GMT, as the RFC says), else, for a rate limit, the `x-ratelimit-reset-*`
    headers (`rate_limit_reset`). `now` is the clock for dates (tests).

    A value that is not a finite number (`inf`, `nan`, `1e400`) is no answer (None): a run
    would sleep forever on it. A negative one, or a date past, is 0; a longer one than
    `MAX_RETRY_AFTER` is that bound.
    """
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
    """Seconds until the exhausted rate limit resets; None when no header says.

    Read from OpenAI's `x-ratelimit-reset-requests` / `-tokens` (durations: `1s`, `6m0s`,
    `20ms`) and Anthropic's `anthropic-ratelimit-{requests,tokens,input-tokens,
    output-tokens}-reset` and `anthropic-priority-{input,output}-tokens-reset` (RFC 3339
    times, against `now`): the latest reset among the limits whose `*-remaining` is 0, or
    any limit's when no remaining count is given. Bounded like `retry_after_seconds`; a
    time past is 0.
    """
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
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt ]([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]{1,9})?"
    r"([Zz]|[+-][0-9]{2}:[0-9]{2})?"
)


def _rfc3339_wait(text: str, now: float) -> float | None:
    """Seconds from `now` to the RFC 3339 time `text` (`2025-08-21T12:40:59Z`, a fraction and
    an offset allowed; no offset is UTC), 0 for a time past, None when it is no such time."""
    match = _RFC3339.fullmatch(text)
    if match is None:
        return None
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    zone = match.group(8) or "Z"
    offset = 0
    if zone not in ("Z", "z"):
        hours, minutes = int(zone[1:3]), int(zone[4:6])
        if hours > 23 or minutes > 59:
            return None
        offset = (hours * 60 + minutes) * (-1 if zone[0] == "-" else 1)
    if second > 60:  # 60: a leap second, read as the second before
        return None
    try:
        when = datetime.datetime(
            year, month, day, hour, minute, min(second, 59), tzinfo=datetime.UTC
        )
    except ValueError:  # month 13, day 31 of April, hour 24, year 0
        return None
    seconds = when.timestamp() - offset * 60 + float(match.group(7) or 0)
    return max(0.0, seconds - now)


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


def token_count(value: Any) -> int:
    """A usage count as reported: a non-negative int; an integral number written as a float
    or as digits (`12.0`, `"12"`, what some compatible servers send) is read; anything else
    (null, a negative or fractional number, a boolean, text) is 0, so that no count can
    lower a run's totals or pass for a number it is not. A count beyond `MAX_TOKEN_COUNT`
    is that bound: a usage limit still trips, and the totals stay exact as floats and fit
    a 64-bit column."""
    if value.__class__ is int:
        count = value
    elif isinstance(value, float) and value.is_integer():
        count = int(value)
    elif isinstance(value, str) and value.isascii() and value.strip().isdigit():
        digits = value.strip().lstrip("0")  # spaces and leading zeros are no magnitude
        count = int(digits or "0") if len(digits) < 20 else MAX_TOKEN_COUNT
    elif isinstance(value, _LongInt):  # over 4300 digits
        return 0 if value.text.startswith("-") else MAX_TOKEN_COUNT
    else:
        return 0
    return count if 0 <= count <= MAX_TOKEN_COUNT else 0 if count < 0 else MAX_TOKEN_COUNT


MAX_TOKEN_COUNT = 2**53 - 1
"""The largest usage count an adapter reports (JSON's largest exact integer)."""


def finite_seconds(text: str, per_second: float = 1.0) -> float | None:
    """`text` (a number of seconds, or of `1 / per_second` units) as seconds, at least 0;
    None when it is not a finite number."""
    try:
        value = float(text) / per_second
    except ValueError:
        return None
    return max(0.0, value) if math.isfinite(value) else None


def _error_object(body: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The parsed body and its error object (the body itself when it has no `error` object),
    when the body is JSON (a list's first item for Gemini's `[{"error": ...}]`)."""
    if not body.lstrip().startswith(("{", "[")):
        return None, None
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None, None
    if isinstance(data, list) and data:
        data = data[0]
    if not isinstance(data, dict):
        return None, None
    err = data.get("error", data)
    return data, err if isinstance(err, dict) else None


def _text(value: Any) -> str:
    """A short identifier from an error object: text or an integer, else ""."""
    if isinstance(value, str):
        return value[:200]
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return ""


def error_details(body: str, headers: httpx.Headers) -> dict[str, str]:
    """`error_type`, `error_code` and `request_id` of an error answer, as far as it gives them:
    the error object's `type` (Gemini: `status`) and `code` (Gemini: the `reason` of an
    `ErrorInfo` detail; never a bare HTTP status), the `x-request-id` / `request-id` header
    or the body's `request_id`."""
    data, err = _error_object(body)
    kind = code = ""
    if err is not None:
        kind = _text(err.get("type")) or _text(err.get("status"))
        raw_code = err.get("code")
        code = "" if isinstance(raw_code, int) else _text(raw_code)
        if not code:
            details = err.get("details")
            for d in details if isinstance(details, list) else ():
                if isinstance(d, dict) and isinstance(d.get("reason"), str):
                    code = d["reason"][:200]
                    break
    request_id = ""
    for name in _REQUEST_ID_HEADERS:
        request_id = headers.get(name, "")
        if request_id:
            break
    if not request_id and data is not None:
        request_id = _text(data.get("request_id"))
    return {"error_type": kind, "error_code": code, "request_id": request_id[:200]}


_REQUEST_ID_HEADERS = ("x-request-id", "request-id", "x-goog-request-id", "cf-ray")
"""Where the providers name a request for their support: OpenAI, Anthropic, Google, and a
Cloudflare proxy's ray ID when nothing else does."""


def _error_text(body: str, err: dict[str, Any] | None) -> str:
    """The provider's own error message when the body is the usual JSON error shape, else
    the body's first characters (an HTML page's text, a proxy's plain text)."""
    if err is not None:
        msg = err.get("message")
        if isinstance(msg, str):
            return msg[:2000]
    data, _ = _error_object(body)
    if data is not None and isinstance(data.get("error"), str):
        return str(data["error"])[:2000]
    text = body.strip()
    if text.startswith("<"):
        text = " ".join(_TAGS.sub(" ", _without_code(text)).split())
    return text[:500].rstrip()


_TAGS = re.compile(r"<[^<>]*>")
"""A markup tag (no `<` inside: each character is looked at a bounded number of times)."""


def _without_code(page: str) -> str:
    """An HTML page without its `<script>` and `<style>` elements (an unclosed one runs to
    the end), in one pass over the page."""
    lower = page.lower()
    out: list[str] = []
    pos = 0
    found = {"<script": lower.find("<script"), "<style": lower.find("<style")}
    while True:
        for opening, at in found.items():  # each searched again only once passed
            if 0 <= at < pos:
                found[opening] = lower.find(opening, pos)
        starts = [i for i in found.values() if i >= 0]
        if not starts:
            out.append(page[pos:])
            return " ".join(out)
        start = min(starts)
        out.append(page[pos:start])
        closing = "</script" if lower.startswith("<script", start) else "</style"
        end = lower.find(closing, start)
        if end < 0:
            return " ".join(out)
        close = lower.find(">", end)
        pos = len(page) if close < 0 else close + 1


def error_from_response(
    provider: str, status: int, headers: httpx.Headers, body: str
) -> ProviderError:
    """Classify a non-2xx HTTP response into the `ProviderError` tree, carrying the
    provider's error type, code and request ID (`error_details`).

    401/403 `AuthenticationError`; 429 `RateLimited`; 408 `ProviderTimeout`; 5xx (and
    Anthropic's 529) `Overloaded`; any other status `BadRequest`, retryable for 409 (a
    conflict, OpenAI's and Anthropic's lock timeouts). An `x-should-retry: true|false`
    header (OpenAI, Anthropic) overrides whether the error is retryable.
    """
    body = body[:MAX_ERROR_BODY]
    details = error_details(body, headers)
    _, err = _error_object(body)
    detail = _error_text(body, err)
    tags = ", ".join(v for v in (details["error_type"], details["error_code"]) if v)
    if details["request_id"]:
        tags = (
            f"{tags}, request {details['request_id']}"
            if tags
            else f"request {details['request_id']}"
        )
    message = f"{provider} returned HTTP {status}" + (f" ({tags})" if tags else "")
    message += f": {detail}" if detail else ": (no body)"
    kw: dict[str, Any] = {"status_code": status, "body": body, "provider": provider, **details}
    should = headers.get("x-should-retry", "").strip().lower()
    if should in ("true", "false"):
        kw["retryable"] = should == "true"
    error: ProviderError
    if status in (401, 403):
        error = AuthenticationError(message, **kw)
    elif status == 429:
        wait = retry_after_seconds(headers)
        error = RateLimited(
            message, retry_after=wait if wait is not None else rate_limit_reset(headers), **kw
        )
    elif status == 408:
        error = ProviderTimeout(message, **kw)
    elif status >= 500:  # includes Anthropic's 529 "overloaded"
        error = Overloaded(message, retry_after=retry_after_seconds(headers), **kw)
    else:
        kw.setdefault("retryable", status == 409)
        error = BadRequest(message, **kw)
    return error


MAX_ERROR_BODY = 65536
"""Bytes of an error answer's body that are read and kept (`ProviderError.body`): a proxy's
page or a runaway body is cut there, never read whole."""


async def read_error_body(response: httpx.Response) -> str:
    """The first `MAX_ERROR_BODY` bytes of an unsuccessful streamed `response`, as text
    (UTF-8, invalid bytes replaced); the rest is not read (the response is closed)."""
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in response.aiter_bytes():
            chunks.append(chunk)
            size += len(chunk)
            if size >= MAX_ERROR_BODY:
                break
    except httpx.TransportError:
        pass  # a failure's body cut short: what came is still the best account of it
    finally:
        await response.aclose()
    return b"".join(chunks)[:MAX_ERROR_BODY].decode("utf-8-sig", errors="replace")


async def raise_for_status(
    response: httpx.Response,
    provider: str,
    classify: Callable[[int, httpx.Headers, str], ProviderError] | None = None,
) -> None:
    """Raise the classified error of an unsuccessful (not 2xx) streamed `response`, its body
    read up to `MAX_ERROR_BODY` bytes; `classify(status, headers, body)` is the provider's
    own (default `error_from_response`)."""
    if response.is_success:
        return
    body = await read_error_body(response)
    if classify is None:
        raise error_from_response(provider, response.status_code, response.headers, body)
    raise classify(response.status_code, response.headers, body)


def request_id_of(headers: httpx.Headers) -> str:
    """The ID the provider gave the request (`x-request-id`, `request-id`, ...), or ""."""
    for name in _REQUEST_ID_HEADERS:
        value = headers.get(name)
        if value:
            return str(value)[:200]
    return ""


class RequestTag:
    """Names the request in a `ProviderError` raised while its answer is read (an error
    event mid-stream, an error object in a 200 body): `with tag:` sets the error's
    `request_id` when it has none, and adds it to the message. The ID is looked up only
    then (a header lookup costs microseconds a successful answer need not spend)."""

    __slots__ = ("headers",)

    def __init__(self, headers: httpx.Headers | None = None) -> None:
        self.headers = headers

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if isinstance(exc, ProviderError) and self.headers is not None and not exc.request_id:
            request_id = request_id_of(self.headers)
            if not request_id:
                return
            exc.request_id = request_id
            if len(exc.args) == 1 and isinstance(exc.args[0], str):
                exc.args = (f"{exc.args[0]} (request {request_id})",)


async def read_body(response: httpx.Response, provider: str) -> str:
    """The text of a successful streamed `response` (see `body_text`), read whole up to
    `MAX_BODY` bytes.

    Raises:
        ResponseFormatError: the body is longer than `MAX_BODY` (not read further).
    """
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_BODY:
            await response.aclose()
            raise ResponseFormatError(
                f"{provider} answered with a body longer than {MAX_BODY} bytes", provider=provider
            )
    return b"".join(chunks).decode("utf-8-sig", errors="replace")


MAX_BODY = 256 * 1024 * 1024
"""Bytes of a successful answer (one JSON body, or one stream event) read at most: beyond
it the answer is refused rather than read into memory without end."""


@contextmanager
def translate_transport_errors(provider: str) -> Iterator[None]:
    """Map httpx transport failures to `ProviderTimeout` / `ProviderConnectionError`."""
    try:
        yield
    except httpx.TimeoutException as exc:
        raise ProviderTimeout(f"{provider} request timed out: {exc}", provider=provider) from exc
    except httpx.TransportError as exc:
        raise ProviderConnectionError(
            f"{provider} could not be reached: {exc!r}", provider=provider
        ) from exc
    except httpx.DecodingError as exc:
        # a body its Content-Encoding does not decode (corrupt gzip, brotli, ...): the transfer
        # was damaged, another attempt may get it whole
        raise ResponseFormatError(
            f"{provider} sent a body that could not be decoded: {exc}",
            provider=provider,
            retryable=True,
        ) from exc
    except httpx.RequestError as exc:  # too many redirects, and whatever httpx adds
        raise ProviderConnectionError(
            f"{provider} could not be reached: {exc!r}", provider=provider
        ) from exc


async def refuse_html(response: httpx.Response, provider: str) -> None:
    """Refuse a successful answer to a streamed request that is an HTML page (a proxy's or a
    captive portal's): read as an event stream it holds no event, and would pass for a
    connection dropped before the answer.

    Raises:
        ResponseFormatError: the content type is `text/html`.
    """
    if "text/html" in response.headers.get("content-type", ""):
        page = await read_error_body(response)
        raise ResponseFormatError(
            f"{provider} answered a stream with an HTML page: {page[:200]!r}",
            provider=provider,
            body=page,
        )


def body_text(response: httpx.Response) -> str:
    """The text of a read JSON body: UTF-8 whatever charset the header declares (JSON is
    UTF-8, RFC 8259; a proxy's `charset=iso-8859-1` would garble every non-ASCII character),
    a leading byte order mark skipped."""
    return response.content.decode("utf-8-sig", errors="replace")


def parse_json_body(provider: str, text: str, what: str = "a body") -> dict[str, Any]:
    """Parse a JSON object (a response body, a stream event), else raise `ResponseFormatError`.

    pydantic-core's parser (a dependency already) is 2-4x faster than `json.loads` on stream
    events; NaN and Infinity are refused, as in strict JSON. A lone surrogate escape
    (`"\\ud83d"`: half an emoji, which models do emit) is read as U+FFFD rather than
    losing the whole answer.
    """
    try:
        data = from_json(text, allow_inf_nan=False)
    except ValueError as exc:
        data = _with_lone_surrogates(text)
        if data is None:
            if not text.strip():  # nothing came: a transfer cut short, another may be whole
                raise ResponseFormatError(
                    f"{provider} returned {what} that is empty", provider=provider, retryable=True
                ) from exc
            raise ResponseFormatError(
                f"{provider} returned {what} that is not JSON: {text[:200]!r}", provider=provider
            ) from exc
    if not isinstance(data, dict):
        raise ResponseFormatError(
            f"{provider} returned {what} that is not a JSON object: {text[:200]!r}",
            provider=provider,
        )
    return data


def parse_event_data(provider: str, data: str) -> dict[str, Any] | None:
    """A stream event's JSON object (see `parse_json_body`), or None for an event without
    data (`data:` alone, a proxy's keep-alive), which carries nothing."""
    try:
        return parse_json_body(provider, data, "a stream event")
    except ResponseFormatError:
        if not data.strip():
            return None
        raise


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _with_lone_surrogates(text: str) -> Any:
    """`text` parsed by `json.loads` when the fast parser refused it for what JSON allows:
    lone surrogate escapes (each replaced by U+FFFD), integers too long for Python's
    conversion limit (kept as `_LongInt`, written back digit for digit by `args_json`).
    None when it is not JSON (or has neither)."""
    escapes = "\\u" in text
    if not escapes and _LONG_DIGITS.search(text) is None:
        return None
    try:
        value = json.loads(text, parse_constant=_refuse_constant, parse_int=_parse_int)
    except (ValueError, RecursionError):
        return None
    return _scrub(value) if escapes else value


_LONG_DIGITS = re.compile(r"[0-9]{4301}")
"""A run of more digits than `int()` converts by default (`sys.get_int_max_str_digits`)."""


class _LongInt:
    """An integer of the JSON text too long to convert, as written."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def json_text(value: Any, *, ensure_ascii: bool = True) -> str:
    """`json.dumps` of a parsed body for an error message or an error's `body`: an integer
    too long to convert (`_LongInt`) is written as its digits (quoted), never a `TypeError`."""
    return json.dumps(value, ensure_ascii=ensure_ascii, default=_long_int_text)


def _long_int_text(value: Any) -> str:
    if isinstance(value, _LongInt):
        return value.text
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _parse_int(text: str) -> int | _LongInt:
    try:
        return int(text)
    except ValueError:
        return _LongInt(text)


def _scrub(value: Any) -> Any:
    if isinstance(value, str):
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    if isinstance(value, dict):
        return {_scrub(k): _scrub(v) for k, v in value.items()}
    return value


async def iter_sse(
    response: httpx.Response, provider: str | None = None
) -> AsyncIterator[tuple[str, str]]:
    """Yield `(event, data)` for each server-sent event of a streaming response.

    Events are cut from the decoded text at blank lines, not line by line: one event costs
    one split, whatever its number of lines. Yields what `sse_events` yields for the lines.
    A byte order mark at the start of the stream is skipped, as the SSE standard says; a
    last event that the stream cut off in the middle of its JSON is dropped.

    Raises:
        ResponseFormatError: with a `provider` named, a stream that yielded no event and
            whose first line is no event-stream field (`data`, `event`, `id`, `retry`) or
            comment: a proxy's plain-text page, quoted, retryable. An event longer than
            `MAX_BODY`.
    """
    head = ""  # the stream's first line, to quote when it holds no event
    heading = True
    yielded = False
    buffer = ""
    cr = False  # the last chunk ended in "\r": the next may start with its "\n"
    start = True  # no text yet: a BOM may come first
    # an event stream is UTF-8 whatever charset the header declares (the SSE standard);
    # the decoder keeps a character cut between chunks for the next one
    decode = codecs.getincrementaldecoder("utf-8")("replace").decode
    async for chunk in response.aiter_bytes():
        text = decode(chunk)
        if start and text:
            start = False
            if text[0] == "\ufeff":
                text = text[1:]
        if cr:
            text, cr = "\r" + text, False
        if "\r" in text:
            if text.endswith("\r"):
                text, cr = text[:-1], True
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        if not text:
            continue
        if heading:  # until the first line is whole
            head += text[:200]
            heading = len(head) < 200 and "\n" not in head
        # only the new text (and the newline before it) can complete an event
        complete = "\n\n" in text or (text[0] == "\n" and buffer.endswith("\n"))
        buffer += text
        if not complete:
            if len(buffer) > MAX_BODY:
                raise ResponseFormatError(
                    f"{provider} sent a stream event longer than {MAX_BODY} bytes",
                    provider=provider or "",
                )
            continue
        *blocks, buffer = buffer.split("\n\n")
        for block in blocks:
            item = sse_block(block)
            if item is not None:
                yielded = True
                yield item
    buffer += decode(b"", True)  # a character the stream cut off: U+FFFD
    if cr:  # the stream ended in "\r": a line ending
        buffer += "\n"
    *blocks, buffer = buffer.split("\n\n")
    for block in blocks:
        item = sse_block(block)
        if item is not None:
            yielded = True
            yield item
    if buffer.strip("\n"):
        item = _whole(sse_block(buffer.strip("\n")))
        if item is not None:
            yield item
            return
    if provider and not yielded and head.strip() and not _SSE_START.match(head.lstrip("\n")):
        if head.lstrip().startswith(("{", "[")) and buffer.strip():
            try:
                from_json(buffer)
            except ValueError:
                pass
            else:  # one JSON document under another content type: the answer, unstreamed
                raise WholeBody(buffer)
        raise ResponseFormatError(
            f"{provider} answered a stream with text that is no event stream: {head!r}",
            provider=provider,
            retryable=True,
        )


class WholeBody(Exception):
    """Raised by `iter_sse` (with a provider named) for a "stream" that is one JSON document
    served under another content type (`text/event-stream`, `text/plain`, an upper-case
    `APPLICATION/JSON`): `text` is the answer, to read as the unstreamed body it is."""

    def __init__(self, text: str) -> None:
        super().__init__("the stream is one JSON document")
        self.text = text


def is_json(response: httpx.Response) -> bool:
    """Whether the content type says JSON (`application/json`, any case and parameters)."""
    return "application/json" in response.headers.get("content-type", "").lower()


_SSE_START = re.compile(r"(?:data|event|id|retry)(?::|\n|$)|:")
"""How an event stream's first line starts: a field name, or a comment."""


def _whole(item: tuple[str, str] | None) -> tuple[str, str] | None:
    """The event the stream ended in, without the blank line that ends an event: kept when
    its data is whole (JSON, or Chat Completions' `[DONE]`), dropped when it was cut off
    (the SSE standard drops any such event; a lenient reader keeps a whole one). A cut event is a connection that closed
    early, which the adapters report as a retryable "stream ended" error, not as an
    unreadable event."""
    if item is None or item[1].strip() == "[DONE]":
        return item
    try:
        from_json(item[1])
    except ValueError:
        return item if _with_lone_surrogates(item[1]) is not None else None
    return item


def sse_block(block: str) -> tuple[str, str] | None:
    """`(event, data)` of one event's lines (`\n`-separated), or None when it has no data."""
    if block.startswith("data:") and "\n" not in block:  # the common one-line event
        value = block[5:]
        return "", value[1:] if value.startswith(" ") else value
    event = ""
    data: list[str] = []
    for line in block.split("\n"):
        if not line or line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            data.append(value)
        elif name == "event":
            event = value
    return (event, "\n".join(data)) if data else None


class LoopBoundClient:
    """The `httpx.AsyncClient` an adapter sends with.

    An injected client is used as is and never closed. Otherwise the adapter owns one
    client per event loop: pooled connections belong to the loop that opened them, so
    a new loop (each `asyncio.run`, each `run_sync`) gets a new client, and a client is
    closed when its loop shuts down its async generators, or by `aclose()`.
    """

    __slots__ = ("_closer", "_injected", "_loop", "_own", "_timeout")

    def __init__(self, injected: httpx.AsyncClient | None, timeout: float) -> None:
        self._injected = injected
        self._timeout = timeout
        self._own: httpx.AsyncClient | None = None
        self._loop: weakref.ref[asyncio.AbstractEventLoop] | None = None
        self._closer: AsyncGenerator[None, None] | None = None

    async def get(self) -> httpx.AsyncClient:
        """The client to use on the running event loop."""
        if self._injected is not None:
            return self._injected
        loop = asyncio.get_running_loop()
        own = self._own
        if own is None or own.is_closed or self._loop is None or self._loop() is not loop:
            own = httpx.AsyncClient(timeout=self._timeout)
            closer = _close_with_loop(own)
            await closer.asend(None)
            self._own, self._loop, self._closer = own, weakref.ref(loop), closer
        return own

    async def aclose(self) -> None:
        """Close the client this adapter created on the running loop (never an injected one)."""
        own, self._own = self._own, None
        closer, self._closer = self._closer, None
        if (
            own is not None
            and self._loop is not None
            and self._loop() is asyncio.get_running_loop()
        ):
            await own.aclose()
        if (
            closer is not None
            and self._loop is not None
            and self._loop() is asyncio.get_running_loop()
        ):
            await closer.aclose()


async def post_json(
    clients: LoopBoundClient,
    url: str,
    content: bytes,
    headers: dict[str, str],
    timeout: httpx.Timeout,
    provider: str,
    tag: RequestTag | None = None,
) -> dict[str, Any]:
    """POST `content` and return the JSON object of a successful response; `tag` is given
    the response's request ID (for errors the caller finds in the body).

    Raises:
        ProviderError: the failure classified (`error_from_response`, transport errors,
            `ResponseFormatError` for a body that is not a JSON object).
    """
    client = await clients.get()
    with translate_transport_errors(provider):
        request = client.build_request(
            "POST", url, content=content, headers=headers, timeout=timeout
        )
        resp = await client.send(request, stream=True)
        try:
            if not resp.is_success:
                await raise_for_status(resp, provider)
            text = await read_body(resp, provider)
        finally:
            await resp.aclose()
    if tag is None:
        tag = RequestTag()
    tag.headers = resp.headers
    with tag:
        return parse_json_body(provider, text)


async def post_sse(
    clients: LoopBoundClient,
    url: str,
    content: bytes,
    headers: dict[str, str],
    timeout: httpx.Timeout,
    provider: str,
    tag: RequestTag | None = None,
) -> AsyncGenerator[tuple[str, str], None]:
    """POST `content` and yield the `(event, data)` pairs of the streamed response; `tag`
    is given the response's request ID (for errors the caller finds in the events).

    Close it (`contextlib.aclosing`) to stop early: that closes the response.

    A JSON answer (`application/json`: an error object from a proxy, or a server that
    ignored `stream: true`) is yielded whole, as the data of one event.

    Raises:
        ProviderError: as `post_json`; a connection lost mid-stream is a retryable
            `ProviderConnectionError` ("stream ended before the response completed").
    """
    client = await clients.get()
    with translate_transport_errors(provider):
        async with client.stream(
            "POST", url, content=content, headers=headers, timeout=timeout
        ) as resp:
            await raise_for_status(resp, provider)
            if tag is not None:
                tag.headers = resp.headers
            await refuse_html(resp, provider)
            if is_json(resp):
                # not a stream (a proxy's error, or a server that ignored `stream: true`):
                # the whole body is one event for the adapter's parser
                yield "", await read_body(resp, provider)
                return
            events = cast(AsyncGenerator[tuple[str, str], None], iter_sse(resp, provider))
            try:
                async with aclosing(events):
                    async for item in events:
                        yield item
            except WholeBody as whole:
                yield "", whole.text
            except httpx.TimeoutException:
                raise
            except httpx.TransportError as exc:
                raise ProviderConnectionError(
                    f"{provider} stream ended before the response completed: {exc!r}",
                    provider=provider,
                    retryable=True,
                ) from exc


class HTTPModel:
    """Base of the adapters: owns their `LoopBoundClient` and closes it.

    `await model.aclose()` or `async with model:` closes the client the model created
    (an injected `http_client` is left open).
    """

    model: str
    """The model name sent with each request."""
    provider: str
    """Who serves the model, as OpenTelemetry's `gen_ai.provider.name` spells it."""
    _clients: LoopBoundClient

    @property
    def model_name(self) -> str:
        """`model`, under the name `FallbackModel` and `ModelResponse` use."""
        return self.model

    async def aclose(self) -> None:
        """Close the HTTP client this model created (an injected client is left open)."""
        await self._clients.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


async def _close_with_loop(client: httpx.AsyncClient) -> AsyncGenerator[None, None]:
    """Parks until the event loop shuts down its async generators, then closes `client`."""
    try:
        yield
    finally:
        await client.aclose()


def deltas_of(response: ModelResponse) -> list[Delta]:
    """Deltas that replay a complete response (for a server that ignores `stream: true`)."""
    m = response.message
    out: list[Delta] = []
    if m.thinking:
        out.append(
            Delta(thinking=[ThinkingDelta(index=i, text=t.text) for i, t in enumerate(m.thinking)])
        )
    if m.content:
        out.append(Delta(content=m.content))
    if m.tool_calls:
        out.append(
            Delta(
                tool_calls=[
                    ToolCallDelta(
                        index=i, id=c.id, name=c.name, args_fragment=c.args, signature=c.signature
                    )
                    for i, c in enumerate(m.tool_calls)
                ]
            )
        )
    return out


def sse_events(lines: Iterable[str]) -> Iterator[tuple[str, str]]:
    """Split raw server-sent-event lines into `(event, data)` pairs (sync form of `iter_sse`)."""
    decoder = _SSEDecoder()
    first = True
    for line in lines:
        if first:
            first = False
            line = line.removeprefix("\ufeff")
        item = decoder.feed(line)
        if item is not None:
            yield item
    item = _whole(decoder.flush())
    if item is not None:
        yield item


class _SSEDecoder:
    """Incremental SSE decoding: one line in, at most one `(event, data)` out."""

    __slots__ = ("data", "event")

    def __init__(self) -> None:
        self.event = ""
        self.data: list[str] = []

    def feed(self, line: str) -> tuple[str, str] | None:
        line = line.rstrip("\r\n")
        if not line:
            return self.flush()
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "event":
            self.event = value
        elif name == "data":
            self.data.append(value)
        return None

    def flush(self) -> tuple[str, str] | None:
        item = (self.event, "\n".join(self.data)) if self.data else None
        self.event, self.data = "", []
        return item
