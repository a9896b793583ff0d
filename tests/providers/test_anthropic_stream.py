"""Streaming: deltas in arrival order, and the final response equal to the non-streamed parse."""

from __future__ import annotations

from typing import Any

from golem.messages import Message, ThinkingBlock, ToolCall
from golem.model import Delta, ModelResponse, ThinkingDelta, ToolCallDelta
from golem.usage import Usage
from tests.support.adapters import streamed
from tests.support.anthropic import (
    sse,
    synthesize_stream,
)


def parse_stream(events: list[dict[str, Any]]) -> list[Delta | ModelResponse]:
    return streamed("anthropic", sse(*events))


def test_deltas_arrive_in_order_with_ids_before_argument_fragments() -> None:
    body = {
        "model": "claude-x",
        "content": [
            {"type": "thinking", "thinking": "Weigh it.", "signature": "sig-1"},
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"q": "a b"}},
            {"type": "tool_use", "id": "toolu_2", "name": "noop", "input": {}},
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 10, "output_tokens": 20},
    }
    items = parse_stream(synthesize_stream(body, size=4))
    assert items[:-1] == [
        Delta(thinking=[ThinkingDelta(0, text="Weig")]),
        Delta(thinking=[ThinkingDelta(0, text="h it")]),
        Delta(thinking=[ThinkingDelta(0, text=".")]),
        Delta(thinking=[ThinkingDelta(0, signature="sig-1")]),
        Delta(content="Chec"),
        Delta(content="king"),
        Delta(content="."),
        Delta(tool_calls=[ToolCallDelta(0, id="toolu_1", name="lookup")]),
        Delta(tool_calls=[ToolCallDelta(0, args_fragment='{"q"')]),
        Delta(tool_calls=[ToolCallDelta(0, args_fragment=': "a')]),
        Delta(tool_calls=[ToolCallDelta(0, args_fragment=' b"}')]),
        Delta(tool_calls=[ToolCallDelta(1, id="toolu_2", name="noop")]),
    ]
    assert items[-1] == ModelResponse(
        message=Message(
            role="assistant",
            content="Checking.",
            thinking=[ThinkingBlock("Weigh it.", "sig-1")],
            tool_calls=[
                ToolCall("toolu_1", "lookup", '{"q": "a b"}'),
                ToolCall("toolu_2", "noop", "{}"),
            ],
        ),
        usage=Usage(input_tokens=10, output_tokens=20),
        finish_reason="tool_call",
        model_name="claude-x",
    )


def test_redacted_thinking_takes_a_thinking_index_without_a_delta() -> None:
    events = [
        {
            "type": "message_start",
            "message": {"model": "m", "usage": {"input_tokens": 1, "output_tokens": 1}},
        },
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "redacted_thinking", "data": "opaque"},
        },
        {"type": "content_block_stop", "index": 0},
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""},
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "thinking_delta", "thinking": "hm"},
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "signature_delta", "signature": "s"},
        },
        {"type": "content_block_stop", "index": 1},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn"},
            "usage": {"output_tokens": 3},
        },
        {"type": "message_stop"},
    ]
    items = parse_stream(events)
    assert items[:-1] == [
        Delta(thinking=[ThinkingDelta(1, text="hm")]),
        Delta(thinking=[ThinkingDelta(1, signature="s")]),
    ]
    final = items[-1]
    assert isinstance(final, ModelResponse)
    assert final.message.thinking == [ThinkingBlock(redacted="opaque"), ThinkingBlock("hm", "s")]


def test_unknown_events_and_delta_kinds_are_ignored() -> None:
    text = {"type": "text", "text": ""}
    items = parse_stream(
        [
            {"type": "message_start", "message": {"model": "m"}},
            {"type": "ping"},
            {"type": "future_event"},
            {"type": "content_block_start", "index": 0, "content_block": text},
            {"type": "content_block_delta", "index": 0,
             "delta": {"type": "citations_delta", "citation": {}}},
            {"type": "content_block_delta", "index": 0,
             "delta": {"type": "text_delta", "text": "ok"}},
            {"type": "message_stop"},
        ]
    )
    assert items[:-1] == [Delta(content="ok")]
    final = items[-1]
    assert isinstance(final, ModelResponse)
    assert (final.message.content, final.finish_reason) == ("ok", "")
