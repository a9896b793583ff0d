"""An empty prompt still sends a user turn, and `"ollama:..."` builds a local OpenAI-compatible model."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from golem import Agent
from golem.messages import Message, Part
from golem.model import ModelRequest
from golem.providers.anthropic import AnthropicModel
from golem.providers.gemini import GeminiModel
from golem.providers.openai import OpenAIChatModel
from tests.support.adapters import body_of

ANTHROPIC_ANSWER = {
    "content": [{"type": "text", "text": "Hello!"}],
    "model": "claude-x",
    "stop_reason": "end_turn",
    "usage": {"input_tokens": 3, "output_tokens": 2},
}
GEMINI_ANSWER = {
    "candidates": [
        {"content": {"role": "model", "parts": [{"text": "Hello!"}]}, "finishReason": "STOP"}
    ],
    "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 2},
}
OPENAI_ANSWER = {
    "choices": [{"message": {"role": "assistant", "content": "Hello!"}, "finish_reason": "stop"}],
    "model": "gpt-x",
}


def _client(answer: dict[str, Any], seen: list[dict[str, Any]]) -> httpx.AsyncClient:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return httpx.Response(200, json=answer)

    return httpx.AsyncClient(transport=httpx.MockTransport(handler))


async def test_an_empty_prompt_reaches_every_provider_as_a_user_turn() -> None:
    seen: list[dict[str, Any]] = []
    models = [
        AnthropicModel("claude-x", api_key="k", http_client=_client(ANTHROPIC_ANSWER, seen)),
        GeminiModel("gemini-2.5-flash", api_key="k", http_client=_client(GEMINI_ANSWER, seen)),
        OpenAIChatModel("gpt-x", api_key="k", http_client=_client(OPENAI_ANSWER, seen)),
    ]
    for model in models:
        result = await Agent(model, instructions="Greet the user.").run("")
        assert result.output == "Hello!"
    anthropic, gemini, openai = seen
    assert anthropic["messages"] == [{"role": "user", "content": [{"type": "text", "text": "."}]}]
    assert anthropic["system"] == "Greet the user."
    assert gemini["contents"] == [{"role": "user", "parts": [{"text": "."}]}]
    assert openai["messages"][-1] == {"role": "user", "content": ""}


@pytest.mark.parametrize(
    "messages", [[], [Message(role="system", content="Be brief.")], [Message(role="user")]]
)
def test_no_conversation_body_is_empty(messages: list[Message]) -> None:
    request = ModelRequest(messages=messages)
    assert body_of("anthropic", request, model="m")["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "."}]}
    ]
    assert body_of("gemini", request)["contents"] == [{"role": "user", "parts": [{"text": "."}]}]


def test_an_empty_user_message_mid_conversation_keeps_turns_alternating() -> None:
    request = ModelRequest(
        messages=[
            Message(role="user", content="Hi"),
            Message(role="assistant", content="Hello."),
            Message(role="user"),
        ]
    )
    anthropic = body_of("anthropic", request, model="m")["messages"]
    assert [m["role"] for m in anthropic] == ["user", "assistant", "user"]
    assert anthropic[-1]["content"] == [{"type": "text", "text": "."}]
    gemini = body_of("gemini", request)["contents"]
    assert [c["role"] for c in gemini] == ["user", "model", "user"]
    assert gemini[-1]["parts"] == [{"text": "."}]


def test_a_user_message_with_only_parts_sends_no_filler_text() -> None:
    image = Part(kind="image", url="https://example.com/cat.png")
    request = ModelRequest(messages=[Message(role="user", parts=[image])])
    blocks = body_of("anthropic", request, model="m")["messages"][0]["content"]
    assert [b["type"] for b in blocks] == ["image"]
    parts = body_of("gemini", request)["contents"][0]["parts"]
    assert list(parts[0]) == ["fileData"]
