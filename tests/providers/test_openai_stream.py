"""Chat Completions streams through the adapter's HTTP path, cut into small network reads: the
deltas in order (a call's ID and name first, then its argument fragments) and the final answer."""

from __future__ import annotations

from typing import Any

import pytest

from golem.messages import Message, ThinkingBlock, ToolCall
from golem.model import Delta, ModelResponse, ThinkingDelta, ToolCallDelta
from golem.usage import Usage
from tests.support.adapters import send
from tests.support.openai_chat import chunk, fixture, sse


def _calls(*deltas: ToolCallDelta) -> list[Delta]:
    return [Delta(tool_calls=[d]) for d in deltas]


def _answer(
    content: str = "",
    thinking: list[ThinkingBlock] | None = None,
    tool_calls: list[ToolCall] | None = None,
    **kw: Any,
) -> ModelResponse:
    message = Message("assistant", content, thinking=thinking or [], tool_calls=tool_calls or [])
    return ModelResponse(message=message, **kw)


SIGNED = {"index": 0, "id": "function-call-1", "type": "function",
          "function": {"name": "f", "arguments": "{}"},
          "extra_content": {"google": {"thought_signature": "c2ln"}}}

STREAMS = {
    "text": (fixture("stream_text.sse"), 7,
             [Delta(content="The"), Delta(content=" capital of"), Delta(content=" France is Paris.")],
             _answer("The capital of France is Paris.", usage=Usage(input_tokens=14, output_tokens=7),
                     finish_reason="stop", model_name="gpt-4o-2024-08-06")),
    "tool-calls": (fixture("stream_tool_calls.sse"), 5, _calls(
        ToolCallDelta(index=0, id="call_Qm2xX6mK1zD3fJ8aL0pB4rT7", name="get_weather"),
        ToolCallDelta(index=0, args_fragment='{"ci'),
        ToolCallDelta(index=0, args_fragment='ty": "Pa'),
        ToolCallDelta(index=0, args_fragment='ris"}'),
        ToolCallDelta(index=1, id="call_Hk7Pz0Wq9sLm2Nc5Vb8Xy1Ja", name="get_time"),
        ToolCallDelta(index=1, args_fragment='{"timezone": '),
        ToolCallDelta(index=1, args_fragment='"Europe/Paris"}'),
    ), _answer(tool_calls=[
        ToolCall("call_Qm2xX6mK1zD3fJ8aL0pB4rT7", "get_weather", '{"city": "Paris"}'),
        ToolCall("call_Hk7Pz0Wq9sLm2Nc5Vb8Xy1Ja", "get_time", '{"timezone": "Europe/Paris"}'),
    ], usage=Usage(input_tokens=82, output_tokens=49, cache_read_tokens=64),
        finish_reason="tool_call", model_name="gpt-4.1-mini-2025-04-14")),
    "deepseek-reasoning": (fixture("stream_reasoning_deepseek.sse"), 11, [
        Delta(thinking=[ThinkingDelta(index=0, text="The user asks")]),
        Delta(thinking=[ThinkingDelta(index=0, text=" for 9.11 vs 9.8.")]),
        Delta(content="9.8 is"),
        Delta(content=" greater."),
    ], _answer("9.8 is greater.", thinking=[ThinkingBlock(text="The user asks for 9.11 vs 9.8.")],
               usage=Usage(input_tokens=18, output_tokens=96, reasoning_tokens=88),
               finish_reason="stop", model_name="deepseek-reasoner")),
    # Ollama numbers every whole call 0; the IDs tell them apart
    "ollama-reused-index": (fixture("stream_ollama_tool_calls.sse"), 64, _calls(
        ToolCallDelta(index=0, id="call_a1b2c3d4", name="get_weather", args_fragment='{"city":"Paris"}'),
        ToolCallDelta(index=1, id="call_e5f6g7h8", name="get_weather", args_fragment='{"city":"Rome"}'),
    ), _answer(tool_calls=[ToolCall("call_a1b2c3d4", "get_weather", '{"city":"Paris"}'),
                           ToolCall("call_e5f6g7h8", "get_weather", '{"city":"Rome"}')],
               usage=Usage(input_tokens=160, output_tokens=31), finish_reason="tool_call",
               model_name="llama3.2")),
    # the `reasoning` alias; a refusal is the text, filtered
    "reasoning-and-refusal": (sse([chunk({"role": "assistant", "reasoning": "think"}),
                                   chunk({"refusal": "I can't "}), chunk({"refusal": "help with that."}),
                                   chunk({}, "stop"), "[DONE]"]), 16, None,
                              _answer("I can't help with that.", thinking=[ThinkingBlock(text="think")],
                                      finish_reason="content_filter")),
    # a finish reason without [DONE] completes the answer; `"error": null` is no error
    "no-done": (sse([{**chunk({"content": "ok"}), "error": None}, chunk({}, "length")]), 16,
                [Delta(content="ok")], _answer("ok", finish_reason="length")),
    # Gemini's OpenAI endpoint: a thought signature on the call
    "gemini-signature": (sse([chunk({"tool_calls": [SIGNED]}), chunk({}, "tool_calls"), "[DONE]"]), 16,
                         _calls(ToolCallDelta(index=0, id="function-call-1", name="f",
                                              args_fragment="{}", signature="c2ln")),
                         _answer(tool_calls=[ToolCall("function-call-1", "f", "{}", signature="c2ln")],
                                 finish_reason="tool_call")),
}


@pytest.mark.parametrize(("raw", "size", "deltas", "expected"), STREAMS.values(), ids=list(STREAMS))
async def test_a_chat_stream_gives_its_deltas_in_order_and_its_answer(
    raw: str, size: int, deltas: list[Delta] | None, expected: ModelResponse
) -> None:
    data = raw.encode()
    items = await send("openai-chat", [data[i : i + size] for i in range(0, len(data), size)], stream=True)
    if deltas is not None:
        assert items[:-1] == deltas
    final = items[-1]
    assert isinstance(final, ModelResponse)
    assert final.message == expected.message
    assert (final.finish_reason, final.usage) == (expected.finish_reason, expected.usage)
    assert final.model_name == (expected.model_name or "gpt-4o-2024-08-06")


async def test_a_call_without_an_id_gets_one_and_arguments_as_an_object_are_kept_as_json() -> None:
    call = {"index": 0, "function": {"name": "f", "arguments": {"a": 1}}}
    items = await send("openai-chat", sse([chunk({"tool_calls": [call]}), chunk({}, "tool_calls"), "[DONE]"]), stream=True)
    final = items[-1]
    assert isinstance(final, ModelResponse)
    (call,) = final.message.tool_calls
    assert call.id.startswith("call_")
    assert len(call.id) == 29
    assert (call.name, call.args) == ("f", '{"a":1}')
