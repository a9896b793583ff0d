"""Live calls to the real OpenAI API: `pytest -m live tests/providers/test_openai_live.py`.

Skipped unless OPENAI_API_KEY is set; GOLEM_OPENAI_MODEL picks the model (gpt-4.1-mini).
"""

from __future__ import annotations

import json
import os

import pytest

from golem.messages import Message
from golem.model import Delta, ModelRequest, ModelResponse, ToolSpec
from golem.providers.openai import OpenAIChatModel

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(not os.environ.get("OPENAI_API_KEY"), reason="OPENAI_API_KEY is not set"),
]

MODEL = os.environ.get("GOLEM_OPENAI_MODEL", "gpt-4.1-mini")


async def test_plain_call() -> None:
    async with OpenAIChatModel(MODEL, max_tokens=50) as model:
        resp = await model.generate(
            ModelRequest(
                [Message("system", "Answer in one word."), Message("user", "Capital of France?")]
            )
        )
    assert "paris" in resp.message.content.lower()
    assert resp.finish_reason == "stop"
    assert resp.usage.input_tokens > 0
    assert resp.usage.output_tokens > 0


async def test_tool_call() -> None:
    weather = ToolSpec(
        "get_weather",
        "Current weather of a city.",
        {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
    )
    async with OpenAIChatModel(MODEL) as model:
        resp = await model.generate(
            ModelRequest([Message("user", "What's the weather in Paris?")], tools=[weather])
        )
    assert resp.finish_reason == "tool_call"
    (call,) = resp.message.tool_calls
    assert call.name == "get_weather"
    assert json.loads(call.args)["city"].lower().startswith("paris")


async def test_streamed_call() -> None:
    async with OpenAIChatModel(MODEL, max_tokens=50) as model:
        items = [
            i
            async for i in model.generate_stream(
                ModelRequest([Message("user", "Count from 1 to 5.")])
            )
        ]
    final = items[-1]
    assert isinstance(final, ModelResponse)
    text = "".join(i.content for i in items[:-1] if isinstance(i, Delta))
    assert text == final.message.content
    assert "5" in text
    assert final.usage.output_tokens > 0
