"""Gemini adapter failures: HTTP statuses, bad bodies, broken streams, transport errors, config."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

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
from golem.model import Delta, ModelResponse
from golem.providers.gemini import GeminiModel, StreamParser
from tests.providers.gemini_fixtures import model_with, sse_body
from tests.support.adapters import REQUEST

TEXT_CHUNK = {
    "candidates": [{"content": {"role": "model", "parts": [{"text": "Hel"}]}, "index": 0}],
    "usageMetadata": {"promptTokenCount": 3, "totalTokenCount": 3},
    "modelVersion": "gemini-2.5-flash",
    "responseId": "r1",
}


def _error_body(code: int, status: str, message: str, details: list[Any] | None = None) -> str:
    err: dict[str, Any] = {"code": code, "message": message, "status": status}
    if details is not None:
        err["details"] = details
    return json.dumps({"error": err})


async def _generate(handler: Any, stream: bool = False) -> ModelResponse:
    model, client = model_with(handler)
    try:
        if stream:
            items = [x async for x in model.generate_stream(REQUEST)]
            final = items[-1]
            assert isinstance(final, ModelResponse)
            return final
        return await model.generate(REQUEST)
    finally:
        await client.aclose()


def _status(code: int, body: str, headers: dict[str, str] | None = None) -> Any:
    def handler(request: httpx.Request) -> httpx.Response:
        h = {"content-type": "application/json", **(headers or {})}
        return httpx.Response(code, headers=h, content=body.encode())

    return handler


CASES = [
    pytest.param(
        401,
        _error_body(401, "UNAUTHENTICATED", "Request had invalid authentication credentials."),
        {},
        AuthenticationError,
        False,
        id="401",
    ),
    pytest.param(
        403,
        _error_body(403, "PERMISSION_DENIED", "Method doesn't allow unregistered callers."),
        {},
        AuthenticationError,
        False,
        id="403",
    ),
    pytest.param(
        400,
        _error_body(
            400,
            "INVALID_ARGUMENT",
            "API key not valid. Please pass a valid API key.",
            [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID"}],
        ),
        {},
        AuthenticationError,
        False,
        id="400-bad-key",
    ),
    pytest.param(
        400,
        _error_body(400, "INVALID_ARGUMENT", "Invalid JSON payload received."),
        {},
        BadRequest,
        False,
        id="400",
    ),
    pytest.param(
        404,
        _error_body(404, "NOT_FOUND", "models/gemini-9 is not found"),
        {},
        BadRequest,
        False,
        id="404",
    ),
    pytest.param(
        429,
        _error_body(429, "RESOURCE_EXHAUSTED", "Quota exceeded"),
        {"retry-after": "7"},
        RateLimited,
        True,
        id="429",
    ),
    pytest.param(
        500,
        _error_body(500, "INTERNAL", "An internal error has occurred."),
        {},
        Overloaded,
        True,
        id="500",
    ),
    pytest.param(
        503,
        _error_body(503, "UNAVAILABLE", "The model is overloaded. Please try again later."),
        {},
        Overloaded,
        True,
        id="503",
    ),
]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize(("code", "body", "headers", "cls", "retryable"), CASES)
async def test_http_errors_are_classified(
    code: int,
    body: str,
    headers: dict[str, str],
    cls: type[ProviderError],
    retryable: bool,
    stream: bool,
) -> None:
    with pytest.raises(cls) as info:
        await _generate(_status(code, body, headers), stream=stream)
    err = info.value
    assert type(err) is cls
    assert err.retryable is retryable
    assert err.status_code == code
    assert err.provider == "gemini"
    assert err.body == body
    assert json.loads(body)["error"]["message"] in str(err)
    if cls is RateLimited:
        assert isinstance(err, RateLimited)
        assert err.retry_after == 7.0


async def test_429_wait_comes_from_retry_info_when_there_is_no_header() -> None:
    body = _error_body(
        429,
        "RESOURCE_EXHAUSTED",
        "You exceeded your current quota.",
        [
            {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": []},
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "37s"},
        ],
    )
    with pytest.raises(RateLimited) as info:
        await _generate(_status(429, body))
    assert info.value.retry_after == 37.0


async def test_429_without_any_wait() -> None:
    with pytest.raises(RateLimited) as info:
        await _generate(_status(429, _error_body(429, "RESOURCE_EXHAUSTED", "slow down")))
    assert info.value.retry_after is None


async def test_malformed_json_body_is_a_format_error() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "application/json"}, content=b"{oops")

    with pytest.raises(ResponseFormatError) as info:
        await _generate(handler)
    assert info.value.retryable is False


async def test_json_that_is_not_an_object_is_a_format_error() -> None:
    with pytest.raises(ResponseFormatError):
        await _generate(_status(200, "[1, 2]"))


def _stream_handler(body: bytes) -> Any:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    return handler


async def test_truncated_stream_is_a_retryable_connection_error() -> None:
    with pytest.raises(ProviderConnectionError) as info:
        await _generate(_stream_handler(sse_body([TEXT_CHUNK])), stream=True)
    assert str(info.value) == "stream ended before the response completed"
    assert info.value.retryable is True


async def test_empty_stream_is_a_retryable_connection_error() -> None:
    with pytest.raises(ProviderConnectionError):
        await _generate(_stream_handler(b""), stream=True)


@pytest.mark.parametrize(
    ("error", "cls"),
    [
        ({"code": 503, "message": "overloaded", "status": "UNAVAILABLE"}, Overloaded),
        ({"code": 500, "message": "internal", "status": "INTERNAL"}, Overloaded),
        ({"message": "quota", "status": "RESOURCE_EXHAUSTED"}, RateLimited),
        ({"code": 400, "message": "bad", "status": "INVALID_ARGUMENT"}, BadRequest),
        ({"message": "no status at all"}, Overloaded),
    ],
)
async def test_error_event_mid_stream_is_classified(
    error: dict[str, Any], cls: type[ProviderError]
) -> None:
    body = sse_body([TEXT_CHUNK, {"error": error}])
    model, client = model_with(_stream_handler(body))
    seen: list[Delta | ModelResponse] = []
    with pytest.raises(cls) as info:
        async for item in model.generate_stream(REQUEST):
            seen.append(item)
    await client.aclose()
    assert seen == [Delta(content="Hel")]  # what arrived before the error was delivered
    assert info.value.retryable is cls.retryable
    assert error["message"] in str(info.value)


async def test_stream_event_that_is_not_json() -> None:
    body = sse_body([TEXT_CHUNK]) + b"data: {not json\r\n\r\n"
    with pytest.raises(ResponseFormatError):
        await _generate(_stream_handler(body), stream=True)


class _DroppingStream(httpx.AsyncByteStream):
    """Sends one event, then the connection drops."""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield sse_body([TEXT_CHUNK])
        raise httpx.RemoteProtocolError("peer closed connection without sending complete message")


async def test_connection_dropped_mid_stream() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, headers={"content-type": "text/event-stream"}, stream=_DroppingStream()
        )

    with pytest.raises(ProviderConnectionError) as info:
        await _generate(handler, stream=True)
    assert info.value.retryable is True


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_connection_refused(stream: bool) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with pytest.raises(ProviderConnectionError) as info:
        await _generate(handler, stream=stream)
    assert info.value.retryable is True
    assert isinstance(info.value.__cause__, httpx.ConnectError)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_timeout(stream: bool) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    with pytest.raises(ProviderTimeout) as info:
        await _generate(handler, stream=stream)
    assert info.value.retryable is True


def test_stream_parser_reports_incomplete_stream_without_network() -> None:
    parser = StreamParser()
    assert parser.feed("", json.dumps(TEXT_CHUNK)) == [Delta(content="Hel")]
    with pytest.raises(ProviderConnectionError):
        parser.response()


# --------------------------------------------------------------------------- configuration


def test_missing_key_fails_at_construction(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    with pytest.raises(AuthenticationError) as info:
        GeminiModel("gemini-2.5-flash")
    assert "GEMINI_API_KEY or GOOGLE_API_KEY" in str(info.value)


async def test_key_from_environment_is_sent_in_the_header(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.setenv("GOOGLE_API_KEY", "google-key")
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"candidates": [{"finishReason": "STOP"}]})

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    model = GeminiModel(
        "gemini-2.5-flash", http_client=client, extra_headers={"x-goog-user-project": "p"}
    )
    monkeypatch.setenv("GOOGLE_API_KEY", "changed-later")  # read in the constructor only
    await model.generate(REQUEST)
    await client.aclose()
    assert seen[0].headers["x-goog-api-key"] == "google-key"
    assert seen[0].headers["x-goog-user-project"] == "p"
    assert "authorization" not in seen[0].headers
    assert str(seen[0].url) == (
        "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:generateContent"
    )


def test_infer_model_builds_the_gemini_adapter(monkeypatch: pytest.MonkeyPatch) -> None:
    from golem.providers import infer_model

    monkeypatch.setenv("GEMINI_API_KEY", "k")
    for spec in ("gemini:gemini-2.5-flash", "google:gemini-2.5-flash"):
        model = infer_model(spec)
        assert isinstance(model, GeminiModel)
        assert model.model == "gemini-2.5-flash"


def test_gemini_key_wins_over_google_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GEMINI_API_KEY", "gemini-key")
    monkeypatch.setenv("GOOGLE_API_KEY", "google-key")
    model = GeminiModel("gemini-2.5-flash")
    assert model._headers()["x-goog-api-key"] == "gemini-key"


@pytest.mark.parametrize(
    ("kwargs", "phrase"),
    [
        ({"model": ""}, "model must be a non-empty model name"),
        ({"timeout": 0}, "timeout must be positive, got 0"),
        ({"max_tokens": 0}, "max_tokens must be at least 1, got 0"),
        ({"thinking_budget": -2}, "thinking_budget must be -1 or more, got -2"),
    ],
)
def test_invalid_configuration(kwargs: dict[str, Any], phrase: str) -> None:
    model = kwargs.pop("model", "gemini-2.5-flash")
    with pytest.raises(ValueError, match=phrase):
        GeminiModel(model, api_key="k", **kwargs)


def test_urls() -> None:
    m = GeminiModel("gemini-2.5-flash", api_key="k", base_url="http://127.0.0.1:9/v1beta/")
    assert m.url() == "http://127.0.0.1:9/v1beta/models/gemini-2.5-flash:generateContent"
    assert m.url(stream=True) == (
        "http://127.0.0.1:9/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    )
    tuned = GeminiModel("tunedModels/my-model-1", api_key="k")
    assert tuned.url().endswith("/v1beta/tunedModels/my-model-1:generateContent")
    assert (
        GeminiModel("models/gemini-2.0-flash", api_key="k")
        .url()
        .endswith("/v1beta/models/gemini-2.0-flash:generateContent")
    )


async def test_owned_client_is_created_once_per_loop_and_closed() -> None:
    async with GeminiModel("gemini-2.5-flash", api_key="k") as model:
        client = await model._clients.get()
        assert (await model._clients.get()) is client
    assert client.is_closed
    assert (await model._clients.get()) is not client  # a closed client is replaced on next use
    await model.aclose()


async def test_injected_client_is_left_open() -> None:
    client = httpx.AsyncClient()
    model = GeminiModel("gemini-2.5-flash", api_key="k", http_client=client)
    await model.aclose()
    assert not client.is_closed
    await client.aclose()
