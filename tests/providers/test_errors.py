"""Unhappy answers through each adapter's HTTP path (ADR 0074), and what a run does with them.

Each provider's real error body, every documented status, bodies that are not JSON (HTML and
plain-text proxy pages), empty and endless bodies, errors inside a 200 answer or mid-stream,
transport failures: each ends in a named `ProviderError` carrying the status, the provider's
error type and code and the request ID, streamed or not; a run retries as the answer says and
ends with that error as its cause.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from golem import Agent
from golem.errors import (
    AuthenticationError,
    BadRequest,
    Overloaded,
    ProviderConnectionError,
    ProviderError,
    ProviderTimeout,
    RateLimited,
    ResponseFormatError,
    Stage,
)
from golem.model import Delta
from golem.providers import MAX_ERROR_BODY, MAX_RETRY_AFTER
from golem.result import RunError
from tests.support.adapters import DONE, MODELS, REQUEST, send
from tests.support.errors import ERROR_BODIES, fail_with, http_date_forms
from tests.support.events import as_terminal, responses_status, sse
from tests.support.recordings import all_interactions, needs_recordings

APIS = list(MODELS)
BOTH = pytest.mark.parametrize("stream", [False, True])
OVER_APIS = pytest.mark.parametrize("api", APIS)

CLASSES: dict[int, tuple[type[ProviderError], bool]] = {
    400: (BadRequest, False),
    401: (AuthenticationError, False),
    403: (AuthenticationError, False),
    404: (BadRequest, False),
    408: (ProviderTimeout, True),
    409: (BadRequest, True),
    413: (BadRequest, False),
    422: (BadRequest, False),
    429: (RateLimited, True),
    **{status: (Overloaded, True) for status in (500, 502, 503, 504, 529)},
}


@BOTH
@pytest.mark.parametrize("status", sorted(CLASSES))
@OVER_APIS
async def test_each_status_is_a_named_error_with_type_code_and_request_id(
    api: str, status: int, stream: bool
) -> None:
    body, kind, code = ERROR_BODIES[api]
    headers = {"content-type": "application/json", "x-request-id": "req_header"}
    error = await fail_with(api, status, json.dumps(body).encode(), stream=stream, headers=headers)
    expected, retryable = CLASSES[status]
    assert type(error) is expected, error
    assert (error.status_code, error.retryable) == (status, retryable)
    assert (error.error_type, error.error_code, error.request_id) == (kind, code, "req_header")
    assert error.provider in ("openai", "anthropic", "gemini")
    assert str(error).startswith(f"{error.provider} returned HTTP {status} ({kind}")
    assert "req_header" in str(error)
    assert error.body == json.dumps(body)


@BOTH
async def test_anthropic_request_id_comes_from_its_header_else_from_the_body(stream: bool) -> None:
    body = json.dumps(ERROR_BODIES["anthropic"][0]).encode()
    error = await fail_with("anthropic", 529, body, stream=stream, headers={"request-id": "req_h"})
    assert error.request_id == "req_h"
    assert (await fail_with("anthropic", 529, body, stream=stream)).request_id == "req_011CVbody"


@needs_recordings
@OVER_APIS
async def test_every_recorded_error_answer_carries_its_type_and_code(api: str) -> None:
    answers = [it for it in all_interactions(api) if it.status >= 400]
    assert answers or api == "gemini", f"no recorded error answer for {api}"
    for it in answers:
        for stream in (False, True):
            error = await fail_with(
                api, it.status, it.body.encode(), stream=stream, headers=it.headers
            )
            err = it.json["error"]
            assert error.status_code == it.status
            assert (error.error_type, error.error_code) == (err.get("type") or "", err.get("code") or "")
            assert error.request_id == it.json.get("request_id", "")
            assert err["message"][:100] in str(error)


PAGES = [
    (
        "text/html",
        b"<html><head><title>502 Bad Gateway</title><style>b{}</style></head>"
        b"<body><center><h1>502 Bad Gateway</h1></center><hr><center>nginx</center></body></html>",
        "502 Bad Gateway",
    ),
    (
        "text/plain",
        b"upstream connect error or disconnect/reset before headers. reset reason: "
        b"connection failure",
        "upstream connect error",
    ),
    ("text/plain; charset=utf-8", b"error code: 1015", "error code: 1015"),
    ("application/json", b"", "(no body)"),
    ("", b"", "(no body)"),
    ("application/json", b'{"error": "upstream timeout"}', "upstream timeout"),
    ("application/xml", b"<Error><Code>Throttling</Code></Error>", "Throttling"),
]


@BOTH
@pytest.mark.parametrize(("ctype", "page", "quoted"), PAGES)
@OVER_APIS
async def test_an_error_page_that_is_not_json_is_quoted_as_text(
    api: str, ctype: str, page: bytes, quoted: str, stream: bool
) -> None:
    headers = {"content-type": ctype} if ctype else {}
    error = await fail_with(api, 502, page, stream=stream, headers=headers)
    assert type(error) is Overloaded
    assert error.retryable
    assert quoted in str(error)
    assert "<" not in str(error).partition(": ")[2]  # no markup in the message


class Endless(httpx.AsyncByteStream):
    """A body that never ends (one piece again and again), counting what was read of it."""

    def __init__(self, piece: bytes, limit: int = 64 * MAX_ERROR_BODY) -> None:
        self.piece = piece
        self.limit = limit  # a bound, should the adapter read on
        self.read = 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while self.read < self.limit:
            self.read += len(self.piece)
            yield self.piece


@BOTH
@OVER_APIS
async def test_a_huge_error_body_is_not_read_whole(api: str, stream: bool) -> None:
    body = Endless(b'{"error": {"message": "' + b"x" * 4096)
    error = await fail_with(api, 500, body, stream=stream, headers={"content-type": "text/plain"})
    assert type(error) is Overloaded
    assert body.read <= MAX_ERROR_BODY + 4096 + 64
    assert len(error.body) <= MAX_ERROR_BODY
    assert len(str(error)) < 1000


MAX_ANSWER = 256 * 1024 * 1024
"""The bound of a successful body (docs/guides/providers.md); one stream event's: test_sse.py."""


@BOTH
@OVER_APIS
async def test_an_answer_longer_than_the_bound_is_refused_unread(api: str, stream: bool) -> None:
    body = Endless(b'{"x": "' + b"a" * 2**20, limit=2 * MAX_ANSWER)  # one MiB piece, repeated
    error = await fail_with(
        api, 200, body, stream=stream, headers={"content-type": "application/json"}
    )
    assert type(error) is ResponseFormatError
    assert f"longer than {MAX_ANSWER} bytes" in str(error)
    assert body.read <= MAX_ANSWER + 2**20 + 64


@pytest.mark.parametrize(
    ("ctype", "page"),
    [
        ("text/plain", b"upstream connect error or disconnect/reset before headers"),
        ("text/plain; charset=utf-8", b"Service Unavailable\n"),
        ("text/event-stream", b"502 Bad Gateway\r\n"),
        ("application/json", b""),
    ],
)
@OVER_APIS
async def test_a_200_page_answering_a_stream_is_a_retryable_error_quoting_it(
    api: str, ctype: str, page: bytes
) -> None:
    error = await fail_with(api, 200, page, stream=True, headers={"content-type": ctype})
    assert isinstance(error, ResponseFormatError | ProviderConnectionError)
    assert type(error) is ResponseFormatError or not page
    assert error.retryable
    assert page.decode().strip()[:20] in str(error)


@BOTH
@pytest.mark.parametrize(("value", "retryable"), [("true", True), ("false", False)])
@pytest.mark.parametrize("status", [400, 429, 500])
async def test_x_should_retry_decides_whether_the_error_is_retried(
    status: int, value: str, retryable: bool, stream: bool
) -> None:
    body = json.dumps(ERROR_BODIES["anthropic"][0]).encode()
    headers = {"x-should-retry": value}
    error = await fail_with("anthropic", status, body, stream=stream, headers=headers)
    assert error.retryable is retryable


IN_BODY: dict[str, dict[str, Any]] = {
    "openai-chat": {"error": {"message": "upstream failed", "type": "server_error", "code": None}},
    "openai-responses": responses_status(
        "failed", error={"code": "server_error", "message": "upstream failed"}
    ),
    "anthropic": {"type": "error", "error": {"type": "api_error", "message": "upstream failed"}},
    "gemini": {"error": {"code": 500, "message": "upstream failed", "status": "INTERNAL"}},
}
IN_STREAM = {
    "openai-chat": {"error": {"message": "upstream failed", "type": "server_error"}},
    "openai-responses": {"type": "error", "code": "server_error", "message": "upstream failed",
                         "param": None, "sequence_number": 1},
    "anthropic": IN_BODY["anthropic"],
    "gemini": IN_BODY["gemini"],
}


@BOTH
@OVER_APIS
async def test_an_error_inside_a_200_answer_names_the_request(api: str, stream: bool) -> None:
    headers = {"request-id" if api == "anthropic" else "x-request-id": "req_200"}
    named = api in ("openai-responses", "anthropic")
    body = sse([IN_STREAM[api]], named=named) if stream else json.dumps(IN_BODY[api])
    headers["content-type"] = "text/event-stream" if stream else "application/json"
    error = await fail_with(api, 200, body.encode(), stream=stream, headers=headers)
    assert type(error) is Overloaded
    assert error.retryable
    assert error.request_id == "req_200"
    assert "req_200" in str(error)
    assert "upstream failed" in str(error)
    assert {error.error_type, error.error_code} & {"server_error", "api_error", "INTERNAL"}
    assert error.error_type != "error"


@settings(deadline=None)
@given(
    api=st.sampled_from(APIS),
    stream=st.booleans(),
    status=st.integers(min_value=300, max_value=999),
    body=st.one_of(
        st.binary(max_size=300),
        st.text(max_size=300).map(str.encode),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=20),
            lambda inner: (
                st.lists(inner, max_size=3)
                | st.dictionaries(
                    st.sampled_from(["error", "type", "code", "message", "status", "details",
                                     "request_id", "reason"]),
                    inner,
                    max_size=4,
                )
            ),
            max_leaves=12,
        ).map(lambda v: json.dumps(v).encode()),
    ),
    ctype=st.sampled_from(["application/json", "text/html", "text/plain", "", "text/event-stream"]),
    retry=st.sampled_from(["", "5", "-1", "nan", "1e400", "Wed, 21 Oct 2015 07:28:00 GMT", "x"]),
    request_id=st.sampled_from(["", "req_1"]),
)
def test_any_error_answer_is_a_named_provider_error(
    api: str, stream: bool, status: int, body: bytes, ctype: str, retry: str, request_id: str
) -> None:
    headers = {"content-type": ctype, "retry-after": retry, "x-request-id": request_id}
    headers = {k: v for k, v in headers.items() if v}
    error = asyncio.run(fail_with(api, status, body, stream=stream, headers=headers))
    assert error.status_code == status or (api == "gemini" and error.status_code is not None)
    assert len(error.body) <= MAX_ERROR_BODY
    assert error.request_id == request_id or (not request_id and error.request_id)
    wait = getattr(error, "retry_after", None)
    assert wait is None or 0.0 <= wait <= MAX_RETRY_AFTER
    assert str(error)


@pytest.mark.parametrize(
    "ctype",
    [
        "text/event-stream",
        "text/event-stream; charset=utf-8",
        "text/plain",
        "application/octet-stream",
        "APPLICATION/JSON",
        "Application/Json; Charset=UTF-8",
        "",
    ],
)
@OVER_APIS
async def test_a_json_answer_to_a_stream_under_another_content_type_is_read(
    api: str, ctype: str
) -> None:
    body = json.dumps(DONE[api])
    streamed = await send(api, body, stream=True, ctype=ctype or "x/unknown")
    assert "".join(d.content for d in streamed if isinstance(d, Delta)) == "ok"
    assert streamed[-1] == (await send(api, body, stream=False))[-1]


@pytest.mark.parametrize("ctype", ["text/event-stream", "text/plain", "APPLICATION/JSON"])
@OVER_APIS
async def test_an_error_object_answering_a_stream_under_another_content_type_is_classified(
    api: str, ctype: str
) -> None:
    body = json.dumps(ERROR_BODIES[api][0]).encode()
    error = await fail_with(api, 200, body, stream=True, headers={"content-type": ctype})
    assert type(error) in (RateLimited, Overloaded)
    assert error.retryable


_CODES = {
    "server_error": Overloaded,
    "rate_limit_exceeded": RateLimited,
    "vector_store_timeout": ProviderTimeout,
    **dict.fromkeys(
        [
            "invalid_prompt", "invalid_image", "invalid_image_format", "invalid_base64_image",
            "invalid_image_url", "image_too_large", "image_too_small", "image_parse_error",
            "image_content_policy_violation", "invalid_image_mode", "image_file_too_large",
            "unsupported_image_media_type", "empty_image_file", "failed_to_download_image",
            "image_file_not_found",
        ],
        BadRequest,
    ),
}


def _failed(error: dict[str, Any] | None, stream: bool) -> str:
    return as_terminal("response.failed", responses_status("failed", error=error), stream)


IN_200: list[tuple[str, bool | None, str, type[ProviderError], str, bool | None]] = [
    # (api, streamed (None: both), body, class, quoted, retryable (None: the class's))
    ("gemini", False, json.dumps({"error": {"code": 503, "message": "The model is overloaded.",
                                            "status": "UNAVAILABLE"}}), Overloaded, "overloaded", None),
    ("gemini", False, json.dumps({"candidates": [{"finishReason": "MISSING_THOUGHT_SIGNATURE",
                                                  "index": 0}]}),
     BadRequest, "MISSING_THOUGHT_SIGNATURE", False),  # the request is to blame
    ("anthropic", None, json.dumps({"type": "error", "error": {"type": "overloaded_error",
                                                                "message": "Busy"}}),
     Overloaded, "Busy", True),
    # an error object without `"type": "error"` (a proxy's, OpenAI-style): once "no content list"
    ("anthropic", None, json.dumps({"error": {"message": "slow down", "type": "rate_limit_exceeded",
                                              "code": "429"}}), RateLimited, "slow down", None),
    ("anthropic", None, json.dumps({"error": {"type": "overloaded_error", "message": "busy"}}),
     Overloaded, "busy", None),
    ("anthropic", None, json.dumps({"error": {"message": "bad key", "code": 401}}),
     AuthenticationError, "bad key", None),
    ("openai-chat", False, json.dumps({"error": {"message": "You exceeded your current quota",
                                                 "type": "insufficient_quota"}}),
     RateLimited, "quota", None),
    ("openai-chat", False, json.dumps({"object": "error", "message": "max_tokens too large",
                                       "type": "BadRequestError", "code": 400}),
     BadRequest, "max_tokens", None),
    ("openai-chat", False, json.dumps({"error": {"message": "Provider returned error",
                                                 "code": 502}}),
     Overloaded, "Provider returned error", None),
    ("openai-responses", None, "<failed without error>", Overloaded, "failed", True),
    ("openai-responses", None, "<failed rate_limit_exceeded>", RateLimited, "Rate limit reached",
     None),
    ("openai-responses", False, json.dumps(responses_status("cancelled")), ProviderError,
     "cancelled", False),
    ("openai-responses", False, json.dumps(responses_status("queued")), ResponseFormatError,
     "queued", None),
    ("openai-responses", False, json.dumps(responses_status("in_progress")), ResponseFormatError,
     "in_progress", None),
    ("openai-responses", True, sse([{"type": "error", "code": "server_error",
                                      "message": "The server had an error", "param": None,
                                      "sequence_number": 3}], named=True),
     Overloaded, "The server had an error", None),  # the documented flat shape
    *[
        # every documented failure code: a bad prompt or image was an `Overloaded`, retried
        ("openai-responses", True, _failed({"code": code, "message": f"failed: {code}"}, True),
         kind, code, kind is not BadRequest)
        for code, kind in _CODES.items()
    ],
]


def _in_200_rows() -> list[Any]:
    rows = []
    limited = {"code": "rate_limit_exceeded", "message": "Rate limit reached"}
    for api, streamed, body, cls, quoted, retryable in IN_200:
        for stream in (False, True) if streamed is None else (streamed,):
            sent = {"<failed without error>": lambda s: _failed(None, s),
                    "<failed rate_limit_exceeded>": lambda s: _failed(limited, s)}.get(body)
            rows.append(pytest.param(api, stream, sent(stream) if sent else body, cls, quoted,
                                     retryable, id=f"{api}-{quoted[:20]}-{stream}"))
    return rows


@pytest.mark.parametrize(("api", "stream", "body", "cls", "quoted", "retryable"), _in_200_rows())
async def test_an_error_answered_with_status_200_is_classified(
    api: str, stream: bool, body: str, cls: type[ProviderError], quoted: str,
    retryable: bool | None,
) -> None:
    with pytest.raises(ProviderError) as caught:
        events = body.startswith(("event:", "data:"))
        await send(api, body, stream=stream, ctype=None if events else "application/json")
    assert type(caught.value) is cls
    assert quoted in str(caught.value)
    if retryable is not None:
        assert caught.value.retryable is retryable


GEMINI_ERRORS = [
    # (status, error, headers, class, retry_after, error type and code)
    (400, {"code": 400, "message": "API key not valid. Please pass a valid API key.",
           "status": "INVALID_ARGUMENT",
           "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                        "reason": "API_KEY_INVALID", "domain": "googleapis.com"}]},
     {"x-request-id": "g1"}, AuthenticationError, None, ("INVALID_ARGUMENT", "API_KEY_INVALID")),
    (429, {"code": 429, "message": "You exceeded your current quota.",
           "status": "RESOURCE_EXHAUSTED",
           "details": [{"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": []},
                       {"@type": "type.googleapis.com/google.rpc.RetryInfo",
                        "retryDelay": "37s"}]},
     {}, RateLimited, 37.0, None),
    (429, {"code": 429, "message": "slow", "status": "RESOURCE_EXHAUSTED"}, {}, RateLimited, None,
     None),
    (429, {"code": 429, "message": "slow", "status": "RESOURCE_EXHAUSTED"}, {"retry-after": "7"},
     RateLimited, 7.0, None),
]


@BOTH
@pytest.mark.parametrize(("status", "error", "headers", "cls", "wait", "kind"), GEMINI_ERRORS)
async def test_gemini_errors_are_classified_by_their_reason_and_retry_info(
    status: int,
    error: dict[str, Any],
    headers: dict[str, str],
    cls: type[ProviderError],
    wait: float | None,
    kind: tuple[str, str] | None,
    stream: bool,
) -> None:
    body = json.dumps({"error": error}).encode()
    raised = await fail_with("gemini", status, body, stream=stream, headers=headers)
    assert type(raised) is cls
    assert error["message"] in str(raised)
    assert getattr(raised, "retry_after", None) == wait
    if kind:  # a rejected key keeps its reason and the request
        assert (raised.error_type, raised.error_code, raised.request_id) == (*kind, "g1")


@pytest.mark.parametrize(
    ("api", "body"),
    [
        ("openai-chat", b"[1, 2]"),
        ("openai-chat", b'{"choices": []}'),
        ("openai-chat", b'{"object": "x"}'),
        ("openai-chat", b"<html>502 Bad Gateway</html>"),
        ("anthropic", b'{"content": ['),
        ("anthropic", b'{"type": "message", "content": "text"}'),
        ("gemini", b"{oops"),
        ("gemini", b"[1, 2]"),
    ],
)
async def test_an_unreadable_200_body_is_a_final_format_error(api: str, body: bytes) -> None:
    headers = {"content-type": "application/json"}
    error = await fail_with(api, 200, body, stream=False, headers=headers)
    assert type(error) is ResponseFormatError
    assert not error.retryable


@pytest.mark.parametrize(
    "page",
    [
        "<" * MAX_ERROR_BODY,
        "<script" * (MAX_ERROR_BODY // 7),
        "<style>" + "<a" * (MAX_ERROR_BODY // 2),
        "<p>" + "<b" * (MAX_ERROR_BODY // 2),
        "<script></script>x" * (MAX_ERROR_BODY // 18),
    ],
    ids=["angles", "scripts", "unclosed-style", "unclosed-tags", "many-scripts"],
)
async def test_a_hostile_error_page_is_read_in_linear_time(page: str) -> None:
    # quadratic scanning of 64 KiB took minutes; this returns at once (no clock asserted:
    # a regression shows as a test that does not end)
    headers = {"content-type": "text/html"}
    error = await fail_with("openai-chat", 502, page.encode(), stream=False, headers=headers)
    assert isinstance(error, Overloaded)
    if page.startswith("<script></script>"):
        assert str(error).startswith("openai returned HTTP 502: x x x x")


async def test_an_error_page_keeps_its_text_without_code() -> None:
    page = (
        "<html><head><script>var a = '<b>';</script><STYLE>p{color:red}</STYLE>"
        "<title>Rate limited</title></head><body><h1>Error 1015</h1><p>You are being rate "
        "limited.</p><script>unclosed"
    )
    error = await fail_with("openai-chat", 429, page.encode(), stream=False)
    assert str(error) == "openai returned HTTP 429: Rate limited Error 1015 You are being rate limited."


# --------------------------------------------------------------------------- mid-stream


FIRST_DELTA = {
    "openai-chat": sse([{"choices": [{"index": 0, "delta": {"content": "Hel"}}]}]),
    "openai-responses": sse(
        [{"type": "response.output_text.delta", "output_index": 0, "delta": "Hel"}], named=True
    ),
    "anthropic": sse(
        [
            {"type": "message_start", "message": {"model": "m", "usage": {}}},
            {"type": "content_block_start", "index": 0,
             "content_block": {"type": "text", "text": ""}},
            {"type": "content_block_delta", "index": 0,
             "delta": {"type": "text_delta", "text": "Hel"}},
        ],
        named=True,
    ),
    "gemini": sse([{"candidates": [{"content": {"role": "model", "parts": [{"text": "Hel"}]}}]}]),
}
"""A stream's start that yields one delta, "Hel", in each API."""


def _anthropic_event(kind: str) -> str:
    error = {"type": "error", "error": {"type": kind, "message": "Overloaded"}}
    return sse([error], named=True)


STREAM_ERRORS = [
    # (api, what follows the first delta, class, status, message; None: the class's retryable)
    *[("openai-chat", sse([event]), cls, None, text) for event, cls, text in [
        ({"error": {"message": "slow down", "type": "rate_limit_exceeded"}}, RateLimited,
         "slow down"),
        ({"object": "error", "message": "bad", "type": "BadRequestError", "code": 400}, BadRequest,
         "bad"),
        ({"error": {"message": "no", "type": "invalid_request_error",
                    "code": "context_length_exceeded"}}, BadRequest, "no"),
        ({"error": {"message": "Overloaded", "code": 502}}, Overloaded, "Overloaded"),
        ({"error": {"message": "The server had an error", "type": "server_error"}}, Overloaded,
         "The server had an error"),
    ]],
    *[("anthropic", _anthropic_event(kind), cls, status,
       f"anthropic stream failed with {kind}: Overloaded") for kind, cls, status in [
        ("overloaded_error", Overloaded, 529),
        ("api_error", Overloaded, 500),
        ("rate_limit_error", RateLimited, 429),
        ("invalid_request_error", BadRequest, 400),
        ("something_new", Overloaded, 500),
    ]],
    *[("gemini", sse([{"error": error}]), cls, None, error["message"]) for error, cls in [
        ({"code": 503, "message": "overloaded", "status": "UNAVAILABLE"}, Overloaded),
        ({"code": 500, "message": "internal", "status": "INTERNAL"}, Overloaded),
        ({"message": "quota", "status": "RESOURCE_EXHAUSTED"}, RateLimited),
        ({"code": 400, "message": "bad", "status": "INVALID_ARGUMENT"}, BadRequest),
        ({"message": "no status at all"}, Overloaded),
    ]],
    *[(api, rest, cls, None, message) for api in APIS for rest, cls, message in [
        ("", ProviderConnectionError, "stream ended before the response completed"),
        ("data: {not json\r\n\r\n", ResponseFormatError, "not JSON"),
    ]],
]


@pytest.mark.parametrize(("api", "rest", "cls", "status", "message"), STREAM_ERRORS)
async def test_a_stream_failing_midway_fails_after_the_deltas_before(
    api: str, rest: str, cls: type[ProviderError], status: int | None, message: str
) -> None:
    seen: list[Any] = []
    with pytest.raises(ProviderError) as caught:
        async for item in _streamed(api, (FIRST_DELTA[api] + rest).encode()):
            seen.append(item)
    assert seen == [Delta(content="Hel")]
    assert type(caught.value) is cls
    assert caught.value.retryable is (cls.retryable and cls is not ResponseFormatError)
    assert message in str(caught.value)
    if status is not None:
        assert caught.value.status_code == status
        assert str(caught.value) == message


class _Dropping(httpx.AsyncByteStream):
    """Sends a keep-alive comment, then the connection breaks."""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield b": keep-alive\n\n"
        raise httpx.RemoteProtocolError("peer closed connection without sending complete message")


@pytest.mark.parametrize("body", [b"", _Dropping()], ids=["empty", "dropped"])
@OVER_APIS
async def test_an_empty_or_dropped_stream_is_a_retryable_error(api: str, body: Any) -> None:
    with pytest.raises(ProviderError) as caught:
        async for _ in _streamed(api, body):
            pass
    assert caught.value.retryable
    if body:
        assert type(caught.value) is ProviderConnectionError
        assert "stream ended before the response completed" in str(caught.value)


async def _streamed(api: str, body: bytes | httpx.AsyncByteStream) -> AsyncIterator[Any]:
    stream = body if isinstance(body, httpx.AsyncByteStream) else httpx.ByteStream(body)

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=stream)

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        async for item in MODELS[api](client).generate_stream(REQUEST):
            yield item


@BOTH
@pytest.mark.parametrize(
    ("exc", "cls"),
    [
        (httpx.ConnectError("connection refused"), ProviderConnectionError),
        (httpx.ReadError("connection reset"), ProviderConnectionError),
        (httpx.ConnectTimeout("timed out"), ProviderTimeout),
        (httpx.ReadTimeout("timed out"), ProviderTimeout),
    ],
)
@OVER_APIS
async def test_a_transport_failure_is_a_retryable_named_error(
    api: str, exc: Exception, cls: type[ProviderError], stream: bool
) -> None:
    def fail(request: httpx.Request) -> httpx.Response:
        raise exc

    async with httpx.AsyncClient(transport=httpx.MockTransport(fail)) as client:
        model = MODELS[api](client)
        with pytest.raises(cls) as caught:
            if stream:
                async for _ in model.generate_stream(REQUEST):
                    pass
            else:
                await model.generate(REQUEST)
    assert caught.value.retryable
    assert caught.value.__cause__ is exc


# ------------------------------------------------------------- what the run loop does with it


class _Sleeps:
    """`asyncio.sleep` for the run loop, recording the waits instead of sleeping them."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


@pytest.mark.parametrize(
    ("status", "headers", "tries", "waited"),
    [
        (429, {"retry-after": "<date+300>"}, 2, 300.0),
        (429, {"retry-after": "<asctime+300>"}, 2, 300.0),
        (503, {"retry-after-ms": "2500"}, 2, 2.5),
        (409, {}, 2, 0.5),
        (500, {"x-should-retry": "false"}, 1, None),
        (400, {"x-should-retry": "true"}, 2, 0.5),
        (429, {"retry-after": "Fri, 31 Dec 9999 23:59:59 GMT"}, 1, None),  # > max_retry_wait
    ],
)
@OVER_APIS
async def test_the_run_retries_as_the_answer_says(
    api: str,
    status: int,
    headers: dict[str, str],
    tries: int,
    waited: float | None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = time.time()
    ahead = {
        "<date+300>": email.utils.formatdate(now + 300.5, usegmt=True),
        "<asctime+300>": list(http_date_forms(now + 300.5))[2],
    }
    headers = {k: ahead.get(v, v) for k, v in headers.items()}
    sleeps = _Sleeps()
    monkeypatch.setattr(asyncio, "sleep", sleeps)
    answers = [httpx.Response(status, headers=headers, json=ERROR_BODIES[api][0])]
    answers.append(httpx.Response(200, json=DONE[api]))
    sent: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return answers[min(len(sent), 2) - 1]

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        agent = Agent(MODELS[api](client), max_attempts=3)
        if tries == 2:
            assert (await agent.run("hi")).output == "ok"
        else:
            with pytest.raises(RunError):
                await agent.run("hi")
    assert len(sent) == tries
    assert len(sleeps.waits) == (waited is not None)
    if waited is not None:
        # a date is read against the clock: a stalled test process waits less, never more
        assert waited - 100 <= sleeps.waits[0] <= waited + 0.5


@pytest.mark.parametrize(
    ("status", "kind", "headers"),
    [(429, RateLimited, {"retry-after": "0"}), (503, Overloaded, {})],
)
@pytest.mark.parametrize("attempts", [1, 3])
@OVER_APIS
async def test_the_cause_of_a_failed_run_is_the_provider_error(
    api: str, attempts: int, status: int, kind: type[ProviderError], headers: dict[str, str]
) -> None:
    """Issue 29: `RunError.__cause__` is the `ProviderError` itself, retried or not."""
    sent: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(status, headers=headers, json={"error": {"message": "busy"}})

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        agent = Agent(MODELS[api](client), max_attempts=attempts, retry_backoff=lambda n: 0.0)
        with pytest.raises(RunError) as info:
            await agent.run("hi")
    assert len(sent) == attempts
    assert info.value.stage is Stage.MODEL
    assert type(info.value.__cause__) is kind
    if attempts > 1:  # the count is a note on the provider's error
        assert f"after {attempts} attempts" in " ".join(info.value.__cause__.__notes__)


async def test_a_wait_longer_than_max_retry_wait_keeps_the_provider_error_as_cause() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(429, headers={"retry-after": "3600"}, json={"error": {}})

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        agent = Agent(MODELS["openai-chat"](client), max_attempts=3, max_retry_wait=60.0)
        with pytest.raises(RunError) as info:
            await agent.run("hi")
    cause = info.value.__cause__
    assert isinstance(cause, RateLimited)
    assert cause.retry_after == 3600.0
    assert "max_retry_wait" in " ".join(cause.__notes__)


async def test_a_failure_after_retries_that_is_not_retryable_is_the_cause_as_raised() -> None:
    answers = [httpx.Response(503, json={}), httpx.Response(401, json={})]

    def answer(request: httpx.Request) -> httpx.Response:
        return answers.pop(0)

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        agent = Agent(MODELS["anthropic"](client), max_attempts=3, retry_backoff=lambda n: 0.0)
        with pytest.raises(RunError) as info:
            await agent.run("hi")
    assert isinstance(info.value.__cause__, ProviderError)
    assert info.value.__cause__.status_code == 401
    assert "after 2 attempts" in " ".join(info.value.__cause__.__notes__)


@BOTH
async def test_a_gemini_error_body_in_a_list_is_read(stream: bool) -> None:
    # the API answers a streamGenerateContent without alt=sse with a list of objects
    error = {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}
    raised = await fail_with("gemini", 503, json.dumps([{"error": error}]).encode(), stream=stream)
    assert type(raised) is Overloaded
    assert raised.error_type == "UNAVAILABLE"
    assert "The model is overloaded." in str(raised)
