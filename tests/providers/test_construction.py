"""Building an adapter: keys (argument, environment, missing), URLs, settings refused at
construction, `infer_model` specs, and the HTTP client each model owns or is given."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from golem import Agent
from golem.errors import AuthenticationError
from golem.model import Model, StreamingModel
from golem.providers import OLLAMA_BASE_URL, infer_model
from golem.providers.anthropic import AnthropicModel
from golem.providers.gemini import GeminiModel
from golem.providers.openai import OpenAIChatModel, OpenAIResponsesModel
from tests.support.adapters import ADAPTERS, DONE, REQUEST

ENV = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "AZURE_OPENAI_API_KEY", "ANTHROPIC_API_KEY",
       "ANTHROPIC_BASE_URL", "GEMINI_API_KEY", "GOOGLE_API_KEY", "OLLAMA_BASE_URL", "OLLAMA_API_KEY")


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV:
        monkeypatch.delenv(name, raising=False)


def _capture(api: str) -> tuple[list[httpx.Request], httpx.AsyncClient]:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=DONE[api])

    return seen, httpx.AsyncClient(transport=httpx.MockTransport(handler))


# --------------------------------------------------------------------------- keys

MISSING_KEY = [
    pytest.param(lambda: OpenAIChatModel("gpt-4o"), "OPENAI_API_KEY", id="openai-chat"),
    pytest.param(lambda: OpenAIResponsesModel("gpt-5"), "OPENAI_API_KEY", id="openai-responses"),
    pytest.param(lambda: AnthropicModel("claude-x"), "ANTHROPIC_API_KEY", id="anthropic"),
    pytest.param(
        lambda: GeminiModel("gemini-2.5-flash"), "GEMINI_API_KEY or GOOGLE_API_KEY", id="gemini"
    ),
]


@pytest.mark.parametrize(("build", "names"), MISSING_KEY)
def test_a_missing_key_fails_at_construction_naming_where_it_is_looked_for(
    build: Callable[[], object], names: str
) -> None:
    with pytest.raises(AuthenticationError, match=names) as info:
        build()
    assert "ScriptedModel" in str(info.value)


KEYS = [
    # (api, env set, explicit key, header, value sent)
    ("openai-chat", {"OPENAI_API_KEY": "sk-env"}, None, "authorization", "Bearer sk-env"),
    ("openai-chat", {"OPENAI_API_KEY": "sk-env"}, "sk-arg", "authorization", "Bearer sk-arg"),
    ("openai-responses", {"OPENAI_API_KEY": "sk-env"}, None, "authorization", "Bearer sk-env"),
    ("anthropic", {"ANTHROPIC_API_KEY": "from-env"}, None, "x-api-key", "from-env"),
    ("anthropic", {"ANTHROPIC_API_KEY": "from-env"}, "explicit", "x-api-key", "explicit"),
    ("gemini", {"GOOGLE_API_KEY": "google-key"}, None, "x-goog-api-key", "google-key"),
    ("gemini", {"GEMINI_API_KEY": "gemini-key", "GOOGLE_API_KEY": "google-key"}, None,
     "x-goog-api-key", "gemini-key"),
]


@pytest.mark.parametrize(("api", "env", "key", "header", "sent"), KEYS)
async def test_the_key_comes_from_the_argument_else_the_environment_read_once(
    api: str,
    env: dict[str, str],
    key: str | None,
    header: str,
    sent: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    seen, client = _capture(api)
    model = ADAPTERS[api]("m", api_key=key, http_client=client)
    for name in env:
        monkeypatch.setenv(name, "changed-later")  # read in the constructor only
    await model.generate(REQUEST)
    await client.aclose()
    assert seen[0].headers[header] == sent
    assert sent.removeprefix("Bearer ") not in repr(model)
    if header != "authorization":
        assert "authorization" not in seen[0].headers


async def test_a_local_openai_server_without_a_key_gets_no_credentials() -> None:
    seen, client = _capture("openai-chat")
    model = OpenAIChatModel("m", base_url="http://127.0.0.1:11434/v1/", http_client=client)
    assert (await model.generate(REQUEST)).message.content == "ok"
    assert str(seen[0].url) == "http://127.0.0.1:11434/v1/chat/completions"
    assert "authorization" not in seen[0].headers


async def test_an_azure_style_key_header_carries_the_raw_azure_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", "az-key")
    seen, client = _capture("openai-chat")
    model = OpenAIChatModel(
        "m",
        base_url="https://my-resource.openai.azure.com/openai/v1",
        api_key_header="api-key",
        http_client=client,
    )
    await model.generate(REQUEST)
    assert seen[0].headers["api-key"] == "az-key"
    assert "authorization" not in seen[0].headers
    assert str(seen[0].url) == "https://my-resource.openai.azure.com/openai/v1/chat/completions"


# --------------------------------------------------------------------------- URLs

GOOGLE = "https://generativelanguage.googleapis.com/v1beta"
LOCAL = {"ANTHROPIC_BASE_URL": "http://127.0.0.1:9/"}
URLS = [
    # (api, environment, base_url, model, streamed, URL posted to)
    ("openai-chat", {}, None, "m", False, "https://api.openai.com/v1/chat/completions"),
    ("openai-chat", {"OPENAI_BASE_URL": "http://127.0.0.1:8000/v1"}, None, "m", False,
     "http://127.0.0.1:8000/v1/chat/completions"),
    ("openai-responses", {}, None, "m", True, "https://api.openai.com/v1/responses"),
    ("anthropic", {}, None, "m", False, "https://api.anthropic.com/v1/messages"),
    ("anthropic", {}, "http://127.0.0.1:8080", "m", False, "http://127.0.0.1:8080/v1/messages"),
    ("anthropic", {}, "http://127.0.0.1:8080/", "m", True, "http://127.0.0.1:8080/v1/messages"),
    ("anthropic", {}, "https://proxy.example/anthropic/v1", "m", False,
     "https://proxy.example/anthropic/v1/messages"),
    ("anthropic", LOCAL, None, "m", False, "http://127.0.0.1:9/v1/messages"),
    ("anthropic", LOCAL, "http://127.0.0.1:7", "m", False, "http://127.0.0.1:7/v1/messages"),
    ("gemini", {}, None, "gemini-2.5-flash", False,
     f"{GOOGLE}/models/gemini-2.5-flash:generateContent"),
    ("gemini", {}, "http://127.0.0.1:9/v1beta/", "gemini-2.5-flash", True,
     "http://127.0.0.1:9/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"),
    ("gemini", {}, None, "tunedModels/my-model-1", False,
     f"{GOOGLE}/tunedModels/my-model-1:generateContent"),
    ("gemini", {}, None, "models/gemini-2.0-flash", False,
     f"{GOOGLE}/models/gemini-2.0-flash:generateContent"),
]


@pytest.mark.parametrize(("api", "env", "base_url", "name", "stream", "url"), URLS)
async def test_requests_go_to_the_url_of_the_base_url_and_model(
    api: str,
    env: dict[str, str],
    base_url: str | None,
    name: str,
    stream: bool,
    url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    seen, client = _capture(api)
    model = ADAPTERS[api](name, api_key="k", base_url=base_url, http_client=client)
    if stream:
        async for _ in model.generate_stream(REQUEST):
            pass
    else:
        await model.generate(REQUEST)
    await client.aclose()
    assert str(seen[0].url) == url


# --------------------------------------------------------------------------- settings

INVALID = [
    ("openai-chat", {"model": ""}, "model name must not be empty"),
    ("openai-chat", {"timeout": 0}, "timeout must be positive"),
    ("openai-chat", {"system_role": "admin"}, "system_role must be"),
    ("openai-chat", {"max_tokens": 0}, "max_tokens must be at least 1"),
    ("openai-responses", {"model": ""}, "model name must not be empty"),
    ("openai-responses", {"timeout": -1}, "timeout must be positive"),
    ("openai-responses", {"max_tokens": 0}, "max_tokens must be at least 1"),
    ("anthropic", {"model": ""}, "model name must not be empty"),
    *[("anthropic", {"thinking_budget": n},
       rf"thinking_budget must be at least 1024 and below max_tokens \(4096\), got {n}")
      for n in (1000, 4096)],
    ("anthropic", {"max_tokens": 0}, "max_tokens must be at least 1, got 0"),
    ("anthropic", {"timeout": 0}, "timeout must be positive, got 0"),
    ("anthropic", {"output_mode": "json"}, "output_mode must be"),
    ("gemini", {"model": ""}, "model must be a non-empty model name"),
    ("gemini", {"timeout": 0}, "timeout must be positive, got 0"),
    ("gemini", {"max_tokens": 0}, "max_tokens must be at least 1, got 0"),
    ("gemini", {"thinking_budget": -2}, "thinking_budget must be -1 or more, got -2"),
]


@pytest.mark.parametrize(("api", "kwargs", "message"), INVALID)
def test_invalid_settings_are_refused_at_construction(
    api: str, kwargs: dict[str, Any], message: str
) -> None:
    name = kwargs.pop("model", "m")
    with pytest.raises(ValueError, match=message):
        ADAPTERS[api](name, api_key="k", **kwargs)


SPECS = [
    ("openai:gpt-4.1", OpenAIChatModel, "gpt-4.1"),
    ("openai-responses:gpt-5", OpenAIResponsesModel, "gpt-5"),
    ("anthropic:claude-sonnet-4-5", AnthropicModel, "claude-sonnet-4-5"),
    ("gemini:gemini-2.5-flash", GeminiModel, "gemini-2.5-flash"),
    ("google:gemini-2.5-flash", GeminiModel, "gemini-2.5-flash"),
    ("google-gla:gemini-2.5-flash", GeminiModel, "gemini-2.5-flash"),
]


@pytest.mark.parametrize(("spec", "cls", "name"), SPECS)
def test_infer_model_builds_the_adapter_of_the_spec(
    spec: str, cls: type, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY"):
        monkeypatch.setenv(key, "k")
    model = infer_model(spec)
    assert type(model) is cls
    assert model.model_name == name
    assert isinstance(model, Model)
    assert isinstance(model, StreamingModel)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("gpt-4o", 'model spec must look like "provider:model-name"'),
        ("openai:", 'model spec must look like "provider:model-name"'),
        ("llama:llama3", "want openai, openai-responses, anthropic, gemini or ollama"),
    ],
)
def test_an_unknown_spec_names_the_providers(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        infer_model(spec)


async def test_an_ollama_spec_builds_a_local_openai_compatible_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-must-not-leave-the-host")
    model = infer_model("ollama:qwen3:8b")
    assert isinstance(model, OpenAIChatModel)
    assert (model.model, model.provider, model.base_url) == ("qwen3:8b", "ollama", OLLAMA_BASE_URL)
    assert isinstance(Agent("ollama:llama3").model, OpenAIChatModel)
    monkeypatch.setenv("OLLAMA_BASE_URL", "http://gpu-box:11434/v1/")
    remote = infer_model("ollama:llama3")
    assert isinstance(remote, OpenAIChatModel)
    assert remote.base_url == "http://gpu-box:11434/v1"
    seen, client = _capture("openai-chat")
    remote._clients = type(remote._clients)(client, 5.0)
    await remote.generate(REQUEST)
    await client.aclose()
    assert str(seen[0].url) == "http://gpu-box:11434/v1/chat/completions"
    assert "sk-must-not-leave-the-host" not in seen[0].headers.get("authorization", "")


# --------------------------------------------------------------------------- the HTTP client


@pytest.mark.parametrize("api", list(ADAPTERS))
def test_the_owned_client_lives_as_long_as_its_event_loop(api: str) -> None:
    model = ADAPTERS[api]("m", api_key="k")

    async def twice() -> tuple[httpx.AsyncClient, httpx.AsyncClient]:
        return await model._clients.get(), await model._clients.get()

    a, b = asyncio.run(twice())
    assert a is b
    assert a.is_closed  # closed when asyncio.run shut its loop down
    c, _ = asyncio.run(twice())
    assert c is not a
    assert c.is_closed


@pytest.mark.parametrize("api", list(ADAPTERS))
async def test_aclose_closes_the_owned_client_which_is_replaced_on_next_use(api: str) -> None:
    async with ADAPTERS[api]("m", api_key="k") as model:
        client = await model._clients.get()
        assert (await model._clients.get()) is client
    assert client.is_closed
    assert (await model._clients.get()) is not client
    await model.aclose()


@pytest.mark.parametrize("api", list(ADAPTERS))
async def test_an_injected_client_is_used_and_left_open(api: str) -> None:
    seen, client = _capture(api)
    async with ADAPTERS[api]("m", api_key="k", http_client=client) as model:
        await model.generate(REQUEST)
    assert len(seen) == 1
    assert not client.is_closed
    await client.aclose()


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("api", list(ADAPTERS))
async def test_extra_headers_reach_every_request(api: str, stream: bool) -> None:
    seen, client = _capture(api)
    headers = {"x-goog-user-project": "p", "content-type": "application/json; charset=utf-8"}
    model = ADAPTERS[api]("m", api_key="k", http_client=client, extra_headers=headers)
    if stream:
        async for _ in model.generate_stream(REQUEST):
            pass
    else:
        await model.generate(REQUEST)
    await client.aclose()
    assert seen[0].headers["x-goog-user-project"] == "p"
    assert seen[0].headers["content-type"] == "application/json; charset=utf-8"  # overrides
