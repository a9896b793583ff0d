"""The unit test of golem.providers._retry: how long a provider asks to be left alone, as
`RateLimited.retry_after` and `Overloaded.retry_after` read it (also through each adapter's
HTTP path): `Retry-After` in seconds or as an HTTP date, `retry-after-ms`, Gemini's
`RetryInfo`, and — for a 429 without either — the reset of the exhausted rate limit
(OpenAI's Go durations, Anthropic's RFC 3339 times). A wait that is not a finite number is
no answer; every wait is bounded by `MAX_RETRY_AFTER`.
"""

from __future__ import annotations

import datetime
import json
import os
import time
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from golem.errors import RateLimited
from golem.providers._retry import MAX_RETRY_AFTER, rate_limit_reset, retry_after_seconds
from tests.support.adapters import MODELS
from tests.support.errors import ERROR_BODIES, fail_with, http_date_forms

NOW = 1_755_780_000.0  # 2025-08-21T12:40:00Z
DATES_NOW = 1_764_800_000.0  # 2025-12-03: the clock of the dates written below


def _at(seconds: float) -> str:
    """The RFC 3339 time `seconds` after `NOW`, as Anthropic writes it."""
    when = datetime.datetime.fromtimestamp(NOW + seconds, datetime.UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _anthropic_limits(**remaining_and_reset: tuple[str, str]) -> dict[str, str]:
    headers = {}
    for kind, (remaining, reset) in remaining_and_reset.items():
        name = kind.replace("_", "-")
        headers[f"anthropic-ratelimit-{name}-remaining"] = remaining
        headers[f"anthropic-ratelimit-{name}-reset"] = reset
    return headers


_ANTHROPIC_429 = json.dumps(
    {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": "Number of request tokens has exceeded"},
    }
).encode()


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        # the exhausted limit's reset, not the others'
        (
            _anthropic_limits(
                requests=("49", _at(5)), tokens=("0", _at(42)), input_tokens=("0", _at(42))
            ),
            42.0,
        ),
        (_anthropic_limits(output_tokens=("0", _at(17))), 17.0),
        # several exhausted: the latest
        (_anthropic_limits(requests=("0", _at(3)), input_tokens=("0", _at(60))), 60.0),
        # no remaining count given: any reset
        ({"anthropic-ratelimit-tokens-reset": _at(9)}, 9.0),
        # nothing exhausted: no answer (the run backs off as usual)
        (_anthropic_limits(requests=("10", _at(30))), None),
        # fractions, offsets, lower case, a space for the T
        ({"anthropic-ratelimit-tokens-reset": "2025-08-21T12:40:07.250Z"}, 7.25),
        ({"anthropic-ratelimit-tokens-reset": "2025-08-21T14:40:08+02:00"}, 8.0),
        ({"anthropic-ratelimit-tokens-reset": "2025-08-21T10:10:08-02:30"}, 8.0),
        ({"anthropic-ratelimit-tokens-reset": "2025-08-21t12:40:08z"}, 8.0),
        ({"anthropic-ratelimit-tokens-reset": "2025-08-21 12:40:08Z"}, 8.0),
        ({"anthropic-ratelimit-tokens-reset": "2025-08-21T12:40:08"}, 8.0),  # no zone: UTC
        ({"anthropic-ratelimit-tokens-reset": "2025-08-21T12:40:60Z"}, 59.0),  # leap second
        # past: 0; far ahead: the bound
        ({"anthropic-ratelimit-tokens-reset": "2025-08-21T12:39:00Z"}, 0.0),
        ({"anthropic-ratelimit-tokens-reset": "9999-12-31T23:59:59Z"}, MAX_RETRY_AFTER),
        # no time: no answer
        ({"anthropic-ratelimit-tokens-reset": "2025-13-21T12:40:08Z"}, None),
        ({"anthropic-ratelimit-tokens-reset": "2025-04-31T12:40:08Z"}, None),
        ({"anthropic-ratelimit-tokens-reset": "2025-08-21T24:40:08Z"}, None),
        ({"anthropic-ratelimit-tokens-reset": "2025-08-21T12:40:08+24:00"}, None),
        ({"anthropic-ratelimit-tokens-reset": "2025-08-21T12:40:08+01:60"}, None),
        ({"anthropic-ratelimit-tokens-reset": "0000-01-01T00:00:00Z"}, None),
        ({"anthropic-ratelimit-tokens-reset": "soon"}, None),
        ({"anthropic-ratelimit-tokens-reset": "2025-08-21"}, None),
        # Priority Tier limits
        (
            {
                "anthropic-priority-input-tokens-remaining": "0",
                "anthropic-priority-input-tokens-reset": _at(12),
            },
            12.0,
        ),
        # OpenAI's durations and Anthropic's times together: the latest exhausted
        (
            {
                "x-ratelimit-remaining-tokens": "0",
                "x-ratelimit-reset-tokens": "6s",
                **_anthropic_limits(tokens=("0", _at(20))),
            },
            20.0,
        ),
        # OpenAI's Go durations
        (
            {
                "x-ratelimit-remaining-requests": "99",
                "x-ratelimit-reset-requests": "120ms",
                "x-ratelimit-remaining-tokens": "0",
                "x-ratelimit-reset-tokens": "6m0s",
            },
            360.0,
        ),
        ({"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1.5s"}, 1.5),
        ({"x-ratelimit-reset-tokens": "1h2m3s"}, 3723.0),
        ({"x-ratelimit-reset-tokens": "20ms"}, 0.02),
        ({"x-ratelimit-reset-tokens": "7"}, 7.0),
        ({"x-ratelimit-reset-tokens": "9999999h"}, MAX_RETRY_AFTER),
        ({"x-ratelimit-reset-tokens": "soon"}, None),
        ({"x-ratelimit-reset-tokens": "5x"}, None),
        ({"x-ratelimit-remaining-tokens": "10", "x-ratelimit-reset-tokens": "5s"}, None),
        ({}, None),
    ],
)
def test_rate_limit_resets_are_read(
    headers: dict[str, str], expected: float | None
) -> None:
    """Before: the `anthropic-ratelimit-*-reset` headers were not read (None for all)."""
    assert rate_limit_reset(httpx.Headers(headers), now=NOW) == expected


@settings(deadline=None)
@given(
    st.one_of(
        st.text(max_size=40),
        st.from_regex(
            r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,12})?"
            r"([Zz]|[+-][0-9]{2}:[0-9]{2})?",
            fullmatch=True,
        ),
    ),
    st.sampled_from(["0", "", "3", None]),
)
def test_any_anthropic_reset_is_none_or_a_bounded_wait(value: str, remaining: str | None) -> None:
    headers = {"anthropic-ratelimit-requests-reset": value}
    if remaining is not None:
        headers["anthropic-ratelimit-requests-remaining"] = remaining
    try:
        parsed = httpx.Headers(headers)
    except (UnicodeEncodeError, ValueError):
        return  # not a header httpx sends
    wait = rate_limit_reset(parsed, now=NOW)
    assert wait is None or 0.0 <= wait <= MAX_RETRY_AFTER


@settings(deadline=None)
@given(st.integers(min_value=0, max_value=86_000))
def test_every_http_date_form_is_read_as_gmt(ahead: int) -> None:
    for form in http_date_forms(NOW + ahead):
        assert retry_after_seconds(httpx.Headers({"retry-after": form}), now=NOW) == ahead, form


def test_a_date_without_a_zone_is_gmt_whatever_the_local_zone() -> None:
    before = os.environ.get("TZ")
    os.environ["TZ"] = "America/New_York"
    time.tzset()
    try:
        asctime = list(http_date_forms(time.time() + 3000))[2]
        wait = retry_after_seconds(httpx.Headers({"retry-after": asctime}))
    finally:
        if before is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = before
        time.tzset()
    assert wait is not None
    assert 0 < wait <= 3001  # local time read it 5 h (18,000 s) off


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "Sun, 06 Nov 1994 08:49:37 GMT"}, 0.0),  # past
        ({"retry-after": "Sunday, 06-Nov-94 08:49:37 GMT"}, 0.0),
        ({"retry-after": "Sun Nov  6 08:49:37 1994"}, 0.0),
        ({"retry-after": "Fri, 31 Dec 9999 23:59:59 GMT"}, MAX_RETRY_AFTER),
        ({"retry-after": "1e12"}, MAX_RETRY_AFTER),
        ({"retry-after": "99999999999999999999"}, MAX_RETRY_AFTER),
        ({"retry-after-ms": "1e15"}, MAX_RETRY_AFTER),
        ({"retry-after": " 30 "}, 30.0),
        ({"retry-after": "2.5"}, 2.5),
        ({"retry-after": "-5"}, 0.0),
        ({"retry-after-ms": "1500", "retry-after": "100"}, 1.5),
        ({"retry-after-ms": "soon", "retry-after": "100"}, 100.0),
        ({"retry-after": "1_000"}, None),  # Python's float() reads it; no server writes it
        ({"retry-after": "0x10"}, None),
        ({"retry-after": "30, 40"}, 30.0),  # the header sent twice, joined
        ({"retry-after": "Thu, 04 Dec 2025 00:13:40 GMT, Thu, 04 Dec 2025 00:15:00 GMT"}, 7220.0),
        ({"retry-after": "Mon, 99 Foo 2025 99:99:99 GMT"}, None),
        ({"retry-after": ""}, None),
        ({"retry-after": "1.5"}, 1.5),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, 0.0),  # a date past
        ({"retry-after-ms": "250"}, 0.25),
        ({"retry-after-ms": "nan", "retry-after": "2"}, 2.0),  # the next header answers
        # not a finite number: no answer
        *[
            ({header: value}, None)
            for header in ("retry-after", "retry-after-ms")
            for value in ("inf", "Infinity", "-inf", "nan", "NaN", "1e400", "-1e400")
        ],
    ],
)
def test_retry_after_values_are_bounded(headers: dict[str, str], expected: float | None) -> None:
    assert retry_after_seconds(httpx.Headers(headers), now=DATES_NOW) == expected


@settings(deadline=None)
@given(st.one_of(st.text(max_size=60), st.text(st.characters(min_codepoint=32, max_codepoint=126))))
def test_any_retry_after_is_none_or_a_bounded_wait(value: str) -> None:
    try:
        headers = httpx.Headers({"retry-after": value, "retry-after-ms": value})
    except (ValueError, UnicodeEncodeError):
        return  # not a header httpx sends
    alone = [httpx.Headers({name: value}) for name in ("retry-after", "retry-after-ms")]
    for h in (headers, *alone):
        wait = retry_after_seconds(h, now=NOW)
        assert wait is None or 0.0 <= wait <= MAX_RETRY_AFTER




def _gemini_quota(retry_delay: str) -> bytes:
    """Gemini's 429 body asking to retry after `retry_delay`."""
    info = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": retry_delay}
    error = {"code": 429, "status": "RESOURCE_EXHAUSTED", "message": "quota", "details": [info]}
    return json.dumps({"error": error}).encode()


_HOUR = (datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)).strftime(
    "%Y-%m-%dT%H:%M:%SZ"
)
_ANTHROPIC_EXHAUSTED = {
    "anthropic-ratelimit-requests-remaining": "40",
    "anthropic-ratelimit-requests-reset": datetime.datetime.now(datetime.UTC).isoformat(),
    "anthropic-ratelimit-input-tokens-remaining": "0",
    "anthropic-ratelimit-input-tokens-reset": _HOUR,
}
_OPENAI_EXHAUSTED = {
    "x-ratelimit-remaining-tokens": "0",
    "x-ratelimit-reset-tokens": "6m0s",
    "x-ratelimit-remaining-requests": "10",
    "x-ratelimit-reset-requests": "1s",
}
_OPENAI_429 = json.dumps(ERROR_BODIES["openai-chat"][0]).encode()
_FAR = _anthropic_limits(tokens=("0", "2999-01-01T00:00:00Z"))


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("api", "status", "body", "headers", "wait"),
    [
        # a 429 without retry-after (a proxy dropped it) waits for the exhausted limit; the
        # header wins when there is one (before: the run backed off into the same limit)
        ("anthropic", 429, _ANTHROPIC_429, _ANTHROPIC_EXHAUSTED, (3000.0, 3600.0)),
        ("anthropic", 429, _ANTHROPIC_429, {**_ANTHROPIC_EXHAUSTED, "retry-after": "7"}, 7.0),
        *[
            (api, 429, _OPENAI_429, headers, wait)
            for api in ("openai-chat", "openai-responses")
            for headers, wait in [(_OPENAI_EXHAUSTED, 360.0), ({**_OPENAI_EXHAUSTED, "retry-after": "2"}, 2.0)]
        ],
        # reset headers give no wait to other errors
        *[("anthropic", status, _ANTHROPIC_429, _FAR, None) for status in (500, 529, 400)],
        # a wait that never ends is no answer; one too long is the bound
        *[(api, 429, b"{}", {"retry-after": v}, None) for api in sorted(MODELS) for v in ("inf", "1e400")],
        ("gemini", 429, _gemini_quota("1e400s"), {}, None),
        ("gemini", 429, _gemini_quota("1e12s"), {}, MAX_RETRY_AFTER),
    ],
)
async def test_the_wait_an_error_answer_asks_for(
    api: str, status: int, body: bytes, headers: dict[str, str], wait: Any, stream: bool
) -> None:
    error = await fail_with(
        api, status, body, stream=stream, headers={"content-type": "application/json", **headers}
    )
    got = getattr(error, "retry_after", None)
    if isinstance(wait, tuple):
        assert got is not None
        assert wait[0] < got <= wait[1]
    else:
        assert got == wait
    assert isinstance(error, RateLimited) or status != 429
