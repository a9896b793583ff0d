"""Live calls to the real APIs: `pytest -m live tests/providers/test_live.py`. Each API's tests
skip unless its key is set; `GOLEM_<API>_MODEL` picks the model."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from golem.messages import Message
from golem.model import Delta, ModelRequest, ModelResponse, ToolSpec
from golem.providers.anthropic import AnthropicModel
from golem.providers.gemini import GeminiModel
from golem.providers.openai import OpenAIChatModel, OpenAIResponsesModel


def _live(name: str, keys: tuple[str, ...], build: Any) -> Any:
    missing = not any(os.environ.get(k) for k in keys)
    return pytest.param(build, id=name, marks=pytest.mark.skipif(missing, reason=f"set {keys[0]}"))


APIS = [
    _live(
        "openai-chat",
        ("OPENAI_API_KEY",),
        lambda: OpenAIChatModel(os.environ.get("GOLEM_OPENAI_MODEL", "gpt-4.1-mini")),
    ),
    _live(
        "openai-responses",
        ("OPENAI_API_KEY",),
        lambda: OpenAIResponsesModel(os.environ.get("GOLEM_OPENAI_MODEL", "gpt-4.1-mini")),
    ),
    _live(
        "anthropic",
        ("ANTHROPIC_API_KEY",),
        lambda: AnthropicModel(os.environ.get("GOLEM_ANTHROPIC_MODEL", "claude-haiku-4-5")),
    ),
    _live(
        "gemini",
        ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
        lambda: GeminiModel(os.environ.get("GOLEM_GEMINI_MODEL", "gemini-2.5-flash")),
    ),
]
pytestmark = [pytest.mark.live, pytest.mark.parametrize("build", APIS)]

WEATHER = ToolSpec(
    "get_weather",
    "Current weather of a city.",
    {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
)


async def test_a_plain_call_answers_and_counts(build: Any) -> None:
    async with build() as model:
        system = Message("system", "Answer in one word.")
        resp = await model.generate(ModelRequest([system, Message("user", "Capital of France?")]))
    assert "paris" in resp.message.content.lower()
    assert resp.finish_reason == "stop"
    assert resp.usage.input_tokens > 0
    assert resp.usage.output_tokens > 0


async def test_a_tool_call_and_its_result_go_back(build: Any) -> None:
    messages = [Message("user", "What's the weather in Paris? Use the tool.")]
    async with build() as model:
        first = await model.generate(ModelRequest(messages, tools=[WEATHER]))
        assert first.finish_reason == "tool_call"
        (call,) = first.message.tool_calls
        assert call.name == "get_weather"
        assert json.loads(call.args)["city"].lower().startswith("paris")
        result = Message("tool", "sunny, 22°C", tool_call_id=call.id, tool_name=call.name)
        second = await model.generate(ModelRequest([*messages, first.message, result], [WEATHER]))
    assert second.finish_reason == "stop"
    assert "22" in second.message.content


async def test_a_stream_adds_up_to_its_answer(build: Any) -> None:
    async with build() as model:
        request = ModelRequest([Message("user", "Count from 1 to 5, digits only.")])
        items = [item async for item in model.generate_stream(request)]
    final = items[-1]
    assert isinstance(final, ModelResponse)
    text = "".join(i.content for i in items[:-1] if isinstance(i, Delta))
    assert text == final.message.content
    assert "5" in text
    assert final.finish_reason == "stop"
