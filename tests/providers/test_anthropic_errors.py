"""Failures of the Anthropic adapter: HTTP statuses, bad bodies, broken streams, transport errors."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
import pytest

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
from golem.model import Delta
from golem.providers.anthropic import AnthropicModel
from tests.providers.anthropic_fixtures import model_on, sse
from tests.support.adapters import REQUEST


def _error_body(kind: str, message: str) -> dict[str, object]:
    return {"type": "error", "error": {"type": kind, "message": message}}


def _respond(response: httpx.Response) -> httpx.MockTransport:
    return httpx.MockTransport(lambda request: response)


async def _generate(transport: httpx.AsyncBaseTransport) -> None:
    async with model_on(transport) as model:
        await model.generate(REQUEST)


async def _stream(transport: httpx.AsyncBaseTransport) -> list[object]:
    seen: list[object] = []
    async with model_on(transport) as model:
        async for item in model.generate_stream(REQUEST):
            seen.append(item)
    return seen


@pytest.mark.parametrize(
    ("status", "kind", "error_type", "retryable"),
    [
        (400, "invalid_request_error", BadRequest, False),
        (401, "authentication_error", AuthenticationError, False),
        (403, "permission_error", AuthenticationError, False),
        (404, "not_found_error", BadRequest, False),
        (413, "request_too_large", BadRequest, False),
        (500, "api_error", Overloaded, True),
        (529, "overloaded_error", Overloaded, True),
    ],
)
@pytest.mark.parametrize("streamed", [False, True])
async def test_http_status_is_classified(
    status: int, kind: str, error_type: type[ProviderError], retryable: bool, streamed: bool
) -> None:
    transport = _respond(httpx.Response(status, json=_error_body(kind, "it went wrong")))
    with pytest.raises(error_type) as caught:
        await (_stream(transport) if streamed else _generate(transport))
    assert type(caught.value) is error_type
    assert caught.value.status_code == status
    assert caught.value.retryable is retryable
    assert caught.value.provider == "anthropic"
    assert str(caught.value) == f"anthropic returned HTTP {status} ({kind}): it went wrong"
    assert caught.value.error_type == kind


@pytest.mark.parametrize("streamed", [False, True])
async def test_429_carries_retry_after(streamed: bool) -> None:
    response = httpx.Response(
        429, headers={"retry-after": "7"}, json=_error_body("rate_limit_error", "slow down")
    )
    with pytest.raises(RateLimited) as caught:
        await (_stream(_respond(response)) if streamed else _generate(_respond(response)))
    assert caught.value.retry_after == 7.0
    assert caught.value.retryable is True


async def test_malformed_json_body_is_a_format_error() -> None:
    transport = _respond(
        httpx.Response(200, text='{"content": [', headers={"content-type": "application/json"})
    )
    with pytest.raises(ResponseFormatError) as caught:
        await _generate(transport)
    assert caught.value.retryable is False


async def test_json_without_content_blocks_is_a_format_error() -> None:
    with pytest.raises(ResponseFormatError, match="no content list"):
        await _generate(_respond(httpx.Response(200, json={"type": "message", "content": "text"})))


START = {
    "type": "message_start",
    "message": {"model": "m", "usage": {"input_tokens": 3, "output_tokens": 1}},
}
TEXT_START = {
    "type": "content_block_start",
    "index": 0,
    "content_block": {"type": "text", "text": ""},
}
TEXT = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hel"}}


def _sse_response(text: str) -> httpx.Response:
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, text=text)


async def test_truncated_stream_is_a_retryable_connection_error() -> None:
    seen: list[object] = []
    with pytest.raises(ProviderConnectionError) as caught:
        async with model_on(_respond(_sse_response(sse(START, TEXT_START, TEXT)))) as model:
            async for item in model.generate_stream(REQUEST):
                seen.append(item)
    assert str(caught.value) == "stream ended before the response completed"
    assert caught.value.retryable is True
    assert seen == [Delta(content="Hel")]


@pytest.mark.parametrize(
    ("kind", "error_type", "status"),
    [
        ("overloaded_error", Overloaded, 529),
        ("api_error", Overloaded, 500),
        ("rate_limit_error", RateLimited, 429),
        ("invalid_request_error", BadRequest, 400),
        ("something_new", Overloaded, 500),
    ],
)
async def test_error_event_mid_stream_is_classified_like_its_status(
    kind: str, error_type: type[ProviderError], status: int
) -> None:
    text = sse(
        START, TEXT_START, TEXT, {"type": "error", "error": {"type": kind, "message": "Overloaded"}}
    )
    seen: list[object] = []
    with pytest.raises(error_type) as caught:
        async with model_on(_respond(_sse_response(text))) as model:
            async for item in model.generate_stream(REQUEST):
                seen.append(item)
    assert type(caught.value) is error_type
    assert caught.value.status_code == status
    assert str(caught.value) == f"anthropic stream failed with {kind}: Overloaded"
    assert seen == [Delta(content="Hel")]


async def test_stream_event_that_is_not_json_is_a_format_error() -> None:
    text = sse(START) + "event: content_block_start\ndata: {not json\n\n"
    with pytest.raises(ResponseFormatError):
        await _stream(_respond(_sse_response(text)))


class _DroppingStream(httpx.AsyncByteStream):
    """Sends the first events, then the connection breaks."""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield sse(START, TEXT_START, TEXT).encode()
        raise httpx.RemoteProtocolError(
            "peer closed connection without sending complete message body"
        )


async def test_connection_dropped_mid_stream_is_retryable() -> None:
    transport = _respond(
        httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=_DroppingStream())
    )
    with pytest.raises(ProviderConnectionError) as caught:
        await _stream(transport)
    assert caught.value.retryable is True


def _raising(exc: Exception) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        raise exc

    return httpx.MockTransport(handler)


@pytest.mark.parametrize("streamed", [False, True])
async def test_connection_error(streamed: bool) -> None:
    transport = _raising(httpx.ConnectError("connection refused"))
    with pytest.raises(ProviderConnectionError) as caught:
        await (_stream(transport) if streamed else _generate(transport))
    assert caught.value.retryable is True


@pytest.mark.parametrize("streamed", [False, True])
async def test_timeout(streamed: bool) -> None:
    transport = _raising(httpx.ReadTimeout("timed out"))
    with pytest.raises(ProviderTimeout) as caught:
        await (_stream(transport) if streamed else _generate(transport))
    assert caught.value.retryable is True


def test_missing_key_fails_at_construction(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(AuthenticationError, match="ANTHROPIC_API_KEY"):
        AnthropicModel("claude-sonnet-4-5")


async def test_error_body_is_kept_on_the_exception() -> None:
    body = json.dumps(_error_body("invalid_request_error", "bad"))
    with pytest.raises(BadRequest) as caught:
        await _generate(_respond(httpx.Response(400, text=body)))
    assert caught.value.body == body
