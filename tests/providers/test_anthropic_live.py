"""Live calls to the real Anthropic API: run with `pytest -m live` and ANTHROPIC_API_KEY set.

The model defaults to claude-haiku-4-5; set GOLEM_ANTHROPIC_MODEL to use another.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator

import pytest

from golem.messages import Message
from golem.model import Delta, ModelRequest, ModelResponse, ToolSpec
from golem.providers.anthropic import AnthropicModel

KEY = os.environ.get("ANTHROPIC_API_KEY", "")
MODEL = os.environ.get("GOLEM_ANTHROPIC_MODEL", "claude-haiku-4-5")

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(not KEY, reason="ANTHROPIC_API_KEY is not set"),
]


@pytest.fixture
async def model() -> AsyncIterator[AnthropicModel]:
    m = AnthropicModel(MODEL, api_key=KEY, max_tokens=256)
    yield m
    await m.aclose()


async def test_plain_call(model: AnthropicModel) -> None:
    response = await model.generate(
        ModelRequest(
            messages=[
                Message(role="system", content="Answer with one word."),
                Message(role="user", content="What colour is a clear daytime sky?"),
            ]
        )
    )
    assert "blue" in response.message.content.lower()
    assert response.finish_reason == "stop"
    assert response.usage.input_tokens > 0
    assert response.usage.output_tokens > 0


async def test_tool_call(model: AnthropicModel) -> None:
    weather = ToolSpec(
        "get_weather",
        "Current weather for a city.",
        {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    )
    response = await model.generate(
        ModelRequest(
            messages=[Message(role="user", content="Use the tool: what is the weather in Paris?")],
            tools=[weather],
        )
    )
    assert response.finish_reason == "tool_call"
    (call,) = response.message.tool_calls
    assert call.name == "get_weather"
    assert call.id.startswith("toolu_")
    assert json.loads(call.args)["city"].lower().startswith("paris")


async def test_streamed_call(model: AnthropicModel) -> None:
    items = [
        item
        async for item in model.generate_stream(
            ModelRequest(messages=[Message(role="user", content="Count from 1 to 5, digits only.")])
        )
    ]
    final = items[-1]
    assert isinstance(final, ModelResponse)
    deltas = [d for d in items[:-1] if isinstance(d, Delta)]
    assert deltas
    assert "".join(d.content for d in deltas) == final.message.content
    assert "3" in final.message.content
    assert final.finish_reason == "stop"
