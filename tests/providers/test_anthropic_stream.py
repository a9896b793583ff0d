"""Streaming: deltas in arrival order, and the final response equal to the non-streamed parse."""

from __future__ import annotations

import json
from typing import Any

import httpx

from golem.messages import Message, ThinkingBlock, ToolCall
from golem.model import Delta, ModelResponse, ThinkingDelta, ToolCallDelta
from golem.usage import Usage
from tests.support.adapters import REQUEST, streamed
from tests.support.anthropic import (
    model_on,
    sse,
    synthesize_stream,
)


def parse_stream(events: list[dict[str, Any]]) -> list[Delta | ModelResponse]:
    return streamed("anthropic", sse(*events))


def _assemble(deltas: list[Delta]) -> Message:
    """Rebuild an assistant message from deltas the way a stream consumer would."""
    content = "".join(d.content for d in deltas)
    thinking: dict[int, list[str]] = {}
    signatures: dict[int, list[str]] = {}
    calls: dict[int, dict[str, Any]] = {}
    for d in deltas:
        for t in d.thinking:
            thinking.setdefault(t.index, []).append(t.text)
            signatures.setdefault(t.index, []).append(t.signature)
        for c in d.tool_calls:
            call = calls.setdefault(c.index, {"id": "", "name": "", "args": []})
            call["id"] = call["id"] or c.id
            call["name"] = call["name"] or c.name
            call["args"].append(c.args_fragment)
    return Message(
        role="assistant",
        content=content,
        thinking=[
            ThinkingBlock(text="".join(thinking[i]), signature="".join(signatures[i]))
            for i in sorted(thinking)
        ],
        tool_calls=[
            ToolCall(calls[i]["id"], calls[i]["name"], "".join(calls[i]["args"]) or "{}")
            for i in sorted(calls)
        ],
    )


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


def test_streamed_arguments_keep_the_raw_text_even_when_truncated() -> None:
    events = [
        {
            "type": "message_start",
            "message": {"model": "m", "usage": {"input_tokens": 5, "output_tokens": 1}},
        },
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "tool_use", "id": "toolu_9", "name": "write", "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": '{"text":  "unfinis'},
        },
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "max_tokens"},
            "usage": {"output_tokens": 8},
        },
        {"type": "message_stop"},
    ]
    final = parse_stream(events)[-1]
    assert isinstance(final, ModelResponse)
    assert final.message.tool_calls == [ToolCall("toolu_9", "write", '{"text":  "unfinis')]
    assert final.finish_reason == "length"
    assert final.usage == Usage(input_tokens=5, output_tokens=8)


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


async def test_generate_stream_over_http_equals_generate() -> None:
    body = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
        "content": [
            {"type": "text", "text": "Let me look that up."},
            {
                "type": "tool_use",
                "id": "toolu_A",
                "name": "search",
                "input": {"query": "golem", "n": 3},
            },
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 12, "cache_read_input_tokens": 100, "output_tokens": 30},
    }

    def handler(request: httpx.Request) -> httpx.Response:
        if json.loads(request.content)["stream"]:
            text = sse(*synthesize_stream(body, size=3))
            return httpx.Response(200, headers={"content-type": "text/event-stream"}, text=text)
        return httpx.Response(200, json=body)

    async with model_on(httpx.MockTransport(handler)) as model:
        plain = await model.generate(REQUEST)
        items = [item async for item in model.generate_stream(REQUEST)]
    assert items[-1] == plain
    assert plain.usage == Usage(input_tokens=112, output_tokens=30, cache_read_tokens=100)
    assert _assemble([d for d in items[:-1] if isinstance(d, Delta)]) == plain.message
