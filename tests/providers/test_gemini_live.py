"""Live calls to the real Gemini API; skipped unless GEMINI_API_KEY or GOOGLE_API_KEY is set.

Run with `pytest -m live tests/providers/test_gemini_live.py`. The model can be changed
with GOLEM_GEMINI_LIVE_MODEL (default gemini-2.5-flash).
"""

from __future__ import annotations

import json
import os

import pytest

from golem.messages import Message
from golem.model import Delta, ModelRequest, ModelResponse, ToolSpec
from golem.providers.gemini import GeminiModel

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(
        not (os.environ.get("GEMINI_API_KEY") or os.environ.get("GOOGLE_API_KEY")),
        reason="set GEMINI_API_KEY or GOOGLE_API_KEY to run the live Gemini tests",
    ),
]

MODEL = os.environ.get("GOLEM_GEMINI_LIVE_MODEL", "gemini-2.5-flash")


async def test_live_plain_call() -> None:
    model = GeminiModel(MODEL, max_tokens=256, thinking_budget=0, temperature=0.0)
    try:
        r = await model.generate(
            ModelRequest(
                messages=[
                    Message(role="system", content="Answer with one word."),
                    Message(role="user", content="What is the capital of France?"),
                ]
            )
        )
    finally:
        await model.aclose()
    assert "paris" in r.message.content.lower()
    assert r.finish_reason == "stop"
    assert r.usage.input_tokens > 0
    assert r.usage.output_tokens > 0


async def test_live_tool_call_and_signature_replay() -> None:
    tool = ToolSpec(
        "get_weather",
        "Current weather for a city.",
        {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    )
    model = GeminiModel(MODEL, max_tokens=1024)
    messages = [Message(role="user", content="What's the weather in Paris? Use the tool.")]
    try:
        first = await model.generate(ModelRequest(messages=messages, tools=[tool]))
        assert first.finish_reason == "tool_call"
        [call] = first.message.tool_calls
        assert call.name == "get_weather"
        assert json.loads(call.args)["city"].lower().startswith("paris")
        messages += [
            first.message,
            Message(role="tool", content="sunny, 22°C", tool_call_id=call.id, tool_name=call.name),
        ]
        second = await model.generate(ModelRequest(messages=messages, tools=[tool]))
    finally:
        await model.aclose()
    assert second.finish_reason == "stop"
    assert "22" in second.message.content


async def test_live_stream() -> None:
    model = GeminiModel(MODEL, max_tokens=256, thinking_budget=0)
    try:
        items = [
            x
            async for x in model.generate_stream(
                ModelRequest(messages=[Message(role="user", content="Count from 1 to 5.")])
            )
        ]
    finally:
        await model.aclose()
    final = items[-1]
    assert isinstance(final, ModelResponse)
    deltas = [x for x in items[:-1] if isinstance(x, Delta)]
    assert "".join(d.content for d in deltas) == final.message.content
    assert "5" in final.message.content
    assert final.finish_reason == "stop"
