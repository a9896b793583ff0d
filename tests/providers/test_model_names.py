"""What a model says about itself, for traces and logs: every adapter (and `FallbackModel`)
names its model (`model`, also as `model_name`), its provider (`provider`, as OpenTelemetry's
`gen_ai.provider.name` spells it) and the body it sends (`request_body`); every answer names
the model that wrote it (`model_name`). A `chat` span is named after the model (issue 29)."""

from __future__ import annotations

import json

import httpx
import pytest

from golem import Agent
from golem.messages import Message
from golem.model import ModelRequest
from golem.providers import FallbackModel, infer_model
from tests.support.adapters import DONE, MODELS, send

pytest.importorskip("opentelemetry.sdk")
from tests.otel_support import memory_provider

REQUESTED = {"openai-chat": "gpt-4o", "openai-responses": "gpt-4o", "anthropic": "claude-x"}
REQUESTED["gemini"] = "gemini-x"
PROVIDER = {"openai-chat": "openai", "openai-responses": "openai", "anthropic": "anthropic"}
PROVIDER["gemini"] = "gcp.gemini"


def _model(api: str) -> object:
    return MODELS[api](httpx.AsyncClient())


@pytest.mark.parametrize("api", list(MODELS))
def test_every_adapter_names_its_model_and_provider(api: str) -> None:
    model = _model(api)
    assert model.model == REQUESTED[api]  # type: ignore[attr-defined]
    assert model.model_name == REQUESTED[api]  # type: ignore[attr-defined]
    assert model.provider == PROVIDER[api]  # type: ignore[attr-defined]


def test_an_ollama_model_says_ollama(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OLLAMA_BASE_URL", raising=False)
    model = infer_model("ollama:llama3")
    assert (model.model, model.provider) == ("llama3", "ollama")  # type: ignore[attr-defined]


def test_a_fallback_model_names_its_primary() -> None:
    model = FallbackModel(_model("anthropic"), _model("gemini"))  # type: ignore[arg-type]
    assert (model.model, model.model_name, model.provider) == ("claude-x", "claude-x", "anthropic")


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("api", list(MODELS))
async def test_an_answer_names_the_model_that_wrote_it(api: str, stream: bool) -> None:
    body = json.dumps(DONE[api])
    # streamed: a server that ignored `stream: true` (the streamed events: test_streams.py)
    ctype = "application/json"
    items = await send(api, body, stream=stream, ctype=ctype)
    final = items[-1]
    assert final.model_name == REQUESTED[api]  # type: ignore[union-attr]


@pytest.mark.parametrize("api", list(MODELS))
async def test_a_chat_span_is_named_after_the_model(api: str) -> None:
    provider, exporter = memory_provider()

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=DONE[api])

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        await Agent(MODELS[api](client), tracer_provider=provider).run("hi")
    chat = [s for s in exporter.get_finished_spans() if s.name.startswith("chat")]
    assert [s.name for s in chat] == [f"chat {REQUESTED[api]}"]
    attributes = chat[0].attributes or {}
    assert attributes["gen_ai.request.model"] == REQUESTED[api]
    assert attributes["gen_ai.provider.name"] == PROVIDER[api]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("api", list(MODELS))
async def test_every_adapter_shows_the_body_it_sends(api: str, stream: bool) -> None:
    sent: list[dict[str, object]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        body = json.dumps(DONE[api])
        if not stream:
            return httpx.Response(200, json=DONE[api])
        return httpx.Response(200, headers={"content-type": "application/json"}, text=body)

    request = ModelRequest([Message("user", "hi")])
    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        model = MODELS[api](client)
        if stream:
            _ = [item async for item in model.generate_stream(request)]
        else:
            await model.generate(request)
    assert sent == [model.request_body(request, stream=stream)]
