"""Failures of the OpenAI Chat Completions adapter, and its construction (keys, URLs, headers)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

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
from golem.model import Model, StreamingModel
from golem.providers import infer_model
from golem.providers.openai import OpenAIChatModel
from tests.support.adapters import REQUEST

OK_BODY = {
    "model": "gpt-4o",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
    ],
}


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "AZURE_OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def _model(handler: Callable[[httpx.Request], httpx.Response], **kw: object) -> OpenAIChatModel:
    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    kw.setdefault("api_key", "sk-test")
    return OpenAIChatModel("gpt-4o", http_client=client, **kw)  # type: ignore[arg-type]


def _status(
    code: int, body: str | dict[str, object], headers: dict[str, str] | None = None
) -> OpenAIChatModel:
    content = body if isinstance(body, str) else json.dumps(body)

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            code,
            content=content.encode(),
            headers={"content-type": "application/json", **(headers or {})},
        )

    return _model(handler)


def _err(message: str, kind: str = "invalid_request_error") -> dict[str, object]:
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


@pytest.mark.parametrize(
    ("code", "error", "retryable"),
    [
        (401, AuthenticationError, False),
        (403, AuthenticationError, False),
        (400, BadRequest, False),
        (404, BadRequest, False),
        (422, BadRequest, False),
        (500, Overloaded, True),
        (502, Overloaded, True),
        (503, Overloaded, True),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
async def test_http_statuses(
    code: int, error: type[ProviderError], retryable: bool, stream: bool
) -> None:
    model = _status(code, _err(f"failure {code}"))
    with pytest.raises(error, match=f"failure {code}") as info:
        if stream:
            async for _ in model.generate_stream(REQUEST):
                pass
        else:
            await model.generate(REQUEST)
    assert type(info.value) is error
    assert info.value.retryable is retryable
    assert info.value.status_code == code
    assert info.value.provider == "openai"


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [({"retry-after": "7"}, 7.0), ({"retry-after-ms": "1500"}, 1.5), ({}, None)],
)
async def test_429_carries_retry_after(headers: dict[str, str], seconds: float | None) -> None:
    model = _status(429, _err("Rate limit reached for gpt-4o", "requests"), headers)
    with pytest.raises(RateLimited, match="Rate limit reached") as info:
        await model.generate(REQUEST)
    assert info.value.retryable
    assert info.value.retry_after == seconds


@pytest.mark.parametrize(
    "body", ["<html>502 Bad Gateway</html>", "[1, 2]", '{"choices": []}', '{"object": "x"}']
)
async def test_unreadable_200_bodies_are_response_format_errors(body: str) -> None:
    with pytest.raises(ResponseFormatError) as info:
        await _status(200, body).generate(REQUEST)
    assert not info.value.retryable


@pytest.mark.parametrize(
    ("body", "error", "text"),
    [
        (_err("You exceeded your current quota", "insufficient_quota"), RateLimited, "quota"),
        (
            {
                "object": "error",
                "message": "max_tokens too large",
                "type": "BadRequestError",
                "code": 400,
            },
            BadRequest,
            "max_tokens",
        ),
        (
            {"error": {"message": "Provider returned error", "code": 502}},
            Overloaded,
            "Provider returned error",
        ),
    ],
)
async def test_an_error_object_with_status_200_is_classified(
    body: dict[str, object], error: type[ProviderError], text: str
) -> None:
    with pytest.raises(error, match=text):
        await _status(200, body).generate(REQUEST)


@pytest.mark.parametrize(
    ("exc", "error"),
    [
        (httpx.ConnectError("connection refused"), ProviderConnectionError),
        (httpx.ReadError("connection reset"), ProviderConnectionError),
        (httpx.ConnectTimeout("timed out"), ProviderTimeout),
        (httpx.ReadTimeout("timed out"), ProviderTimeout),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
async def test_transport_failures(exc: Exception, error: type[ProviderError], stream: bool) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise exc

    model = _model(handler)
    with pytest.raises(error) as info:
        if stream:
            async for _ in model.generate_stream(REQUEST):
                pass
        else:
            await model.generate(REQUEST)
    assert info.value.retryable
    assert info.value.__cause__ is exc


# --------------------------------------------------------------------------- construction


def test_missing_key_for_openai_fails_at_construction() -> None:
    with pytest.raises(AuthenticationError, match="OPENAI_API_KEY") as info:
        OpenAIChatModel("gpt-4o")
    assert "ScriptedModel" in str(info.value)


def _capture() -> tuple[list[httpx.Request], Callable[[httpx.Request], httpx.Response]]:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=OK_BODY)

    return seen, handler


async def test_local_server_without_key_sends_no_authorization() -> None:
    seen, handler = _capture()
    model = _model(handler, api_key=None, base_url="http://127.0.0.1:11434/v1/")
    assert (await model.generate(REQUEST)).message.content == "ok"
    assert str(seen[0].url) == "http://127.0.0.1:11434/v1/chat/completions"
    assert "authorization" not in seen[0].headers


async def test_key_and_base_url_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1")
    seen, handler = _capture()
    model = _model(handler, api_key=None)
    await model.generate(REQUEST)
    assert str(seen[0].url) == "http://127.0.0.1:8000/v1/chat/completions"
    assert seen[0].headers["authorization"] == "Bearer sk-env"
    assert "sk-env" not in repr(model)


async def test_azure_style_api_key_header(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", "az-key")
    seen, handler = _capture()
    model = _model(
        handler,
        api_key=None,
        base_url="https://my-resource.openai.azure.com/openai/v1",
        api_key_header="api-key",
    )
    await model.generate(REQUEST)
    assert seen[0].headers["api-key"] == "az-key"
    assert "authorization" not in seen[0].headers
    assert str(seen[0].url) == "https://my-resource.openai.azure.com/openai/v1/chat/completions"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"model": ""}, "model name must not be empty"),
        ({"model": "m", "timeout": 0}, "timeout must be positive"),
        ({"model": "m", "system_role": "admin"}, "system_role must be"),
        ({"model": "m", "max_tokens": 0}, "max_tokens must be at least 1"),
    ],
)
def test_invalid_settings(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        OpenAIChatModel(api_key="k", **kwargs)  # type: ignore[arg-type]


def test_infer_model_and_protocols(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    model = infer_model("openai:gpt-4.1")
    assert isinstance(model, OpenAIChatModel)
    assert model.model_name == "gpt-4.1"
    assert isinstance(model, Model)
    assert isinstance(model, StreamingModel)


def test_the_owned_client_follows_the_event_loop() -> None:
    """`run_sync` style use (a new event loop per call) must not reuse a client bound to a dead loop."""
    model = OpenAIChatModel("m", base_url="http://127.0.0.1:9/v1")

    async def client_of() -> httpx.AsyncClient:
        first = await model._clients.get()
        assert (await model._clients.get()) is first
        return first

    one = asyncio.run(client_of())
    two = asyncio.run(client_of())
    assert one is not two
    asyncio.run(model.aclose())
    assert two.is_closed


async def test_an_injected_client_is_used_and_left_open() -> None:
    seen, handler = _capture()
    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    async with OpenAIChatModel("m", api_key="k", http_client=client) as model:
        await model.generate(REQUEST)
    assert len(seen) == 1
    assert not client.is_closed
    await client.aclose()
