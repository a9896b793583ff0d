"""Answers and event streams of each API, written by hand for one test.

`sse` frames events as a server sends them; `chat_chunk` is one Chat Completions chunk;
`responses_status`, `RESPONSE`, `RESPONSE_USAGE` and `as_terminal` build Responses answers;
`anthropic_tool_stream` streams Anthropic tool calls in fragments (cut by `fragments`);
`chat_body_of` and `gemini_body_of` are stopped answers;
`responses_answer`, `responses_streamed` and `gemini_answer` send a body through the adapter and return its answer.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

from golem.model import ModelResponse
from tests.support.adapters import final, send


def sse(events: list[Any], *, named: bool = False, done: bool = False) -> str:
    """The SSE text of `events`: each a JSON object (under its `type` when `named`) or a text
    sent as is; `done` ends it with `data: [DONE]`."""
    out = []
    for e in events:
        data = e if isinstance(e, str) else json.dumps(e, ensure_ascii=False)
        name = f"event: {e['type']}\n" if named and not isinstance(e, str) else ""
        out.append(f"{name}data: {data}\n\n")
    if done:
        out.append("data: [DONE]\n\n")
    return "".join(out)


def chat_chunk(delta: dict[str, Any], finish: str | None = None, index: int = 0) -> dict[str, Any]:
    """A Chat Completions chunk of `delta` for choice `index`."""
    return {
        "id": "c",
        "object": "chat.completion.chunk",
        "model": "gpt-4o",
        "choices": [{"index": index, "delta": delta, "finish_reason": finish}],
    }


def chat_chunk_event(delta: dict[str, Any], finish: str | None = None) -> str:
    """A Chat Completions chunk of `delta` as one SSE event."""
    return sse([chat_chunk(delta, finish)])


def chat_body_of(message: dict[str, Any]) -> str:
    """A Chat Completions answer of `message`, stopped."""
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    body = {"id": "x", "object": "chat.completion", "model": "gpt-4o-audio-preview"}
    return json.dumps({**body, "choices": [choice]})


def gemini_body_of(parts: list[dict[str, Any]]) -> str:
    """A Gemini answer of `parts`, stopped."""
    return json.dumps({"candidates": [{"content": {"parts": parts}, "finishReason": "STOP"}]})


RESPONSE = {"id": "resp_1", "object": "response", "model": "gpt-5"}
"""The fields every Responses answer of these tests starts with."""

RESPONSE_USAGE = {"input_tokens": 5, "output_tokens": 3}
"""A Responses answer's usage."""


def responses_status(status: str, **extra: Any) -> dict[str, Any]:
    """A Responses answer in `status`, with no output unless `extra` says."""
    return {"id": "resp_1", "object": "response", "status": status, "output": [], **extra}


def as_terminal(kind: str, response: dict[str, Any], stream: bool) -> str:
    """`response` as a plain body, or streamed as the one event `kind` carrying it."""
    if not stream:
        return json.dumps(response)
    return f"event: {kind}\ndata: {json.dumps({'type': kind, 'response': response})}\n\n"


async def responses_answer(body: str, *, stream: bool) -> ModelResponse:
    """What the Responses adapter makes of `body`."""
    return final(await send("openai-responses", body, stream=stream))


async def responses_streamed(events: list[dict[str, Any]]) -> tuple[list[Any], ModelResponse]:
    """What the Responses adapter streams for `events`, and its final answer."""
    items = await send("openai-responses", sse(events, named=True), stream=True)
    return items, final(items)


async def gemini_answer(body: Any, *, stream: bool = False) -> ModelResponse:
    """What the Gemini adapter makes of `body` (a JSON value), plain or as one CRLF event."""
    text = json.dumps(body)
    return final(await send("gemini", f"data: {text}\r\n\r\n" if stream else text, stream=stream))


def fragments(text: str, cuts: list[int]) -> list[str]:
    """`text` cut at `cuts` (taken modulo its length), without empty pieces."""
    points = sorted({c % (len(text) + 1) for c in cuts})
    out, last = [], 0
    for p in [*points, len(text)]:
        if p > last:
            out.append(text[last:p])
        last = p
    return out


def drawn_pieces(data: st.DataObject, text: str) -> list[str]:
    """`text` cut in up to four non-empty pieces where Hypothesis draws (an empty text: itself)."""
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(text) - 1)), max_size=3)))
    return fragments(text, cuts) or [text]


def anthropic_tool_stream(calls: list[tuple[str, str]], stop: str = "tool_use") -> str:
    """An Anthropic stream of the tool calls `(id, arguments)`, each streamed in fragments."""
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": {"model": "claude-x", "usage": {"input_tokens": 3}}}
    ]
    for i, (call_id, args) in enumerate(calls):
        block = {"type": "tool_use", "id": call_id, "name": "f", "input": {}}
        events.append({"type": "content_block_start", "index": i, "content_block": block})
        for frag in fragments(args, [3, 7]):
            delta = {"type": "input_json_delta", "partial_json": frag}
            events.append({"type": "content_block_delta", "index": i, "delta": delta})
        events.append({"type": "content_block_stop", "index": i})
    events.append({"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {}})
    events.append({"type": "message_stop"})
    return sse(events, named=True)


STOPS = {
    "openai-chat": {"stop": "stop", "tool_call": "tool_calls", "length": "length"},
    "openai-responses": {"stop": "completed", "tool_call": "completed", "length": "max_output_tokens"},
    "anthropic": {"stop": "end_turn", "tool_call": "tool_use", "length": "max_tokens"},
    "gemini": {"stop": "STOP", "tool_call": "STOP", "length": "MAX_TOKENS"},
}
"""Each API's word for a stop golem knows."""


def answer(
    api: str,
    text: str = "",
    calls: list[tuple[str | None, str, Any]] = (),  # type: ignore[assignment]
    stop: str | None = "stop",
    usage: tuple[Any, Any] | None = (10, 16),
) -> dict[str, Any]:
    """A plain answer of `api`: `text`, then `calls` (`(id or None, name, arguments)`, the
    arguments a JSON text or, for Anthropic and Gemini, an object), stopped for `stop` (a
    golem finish reason `STOPS` names, else the API's own word; None: no reason) with `usage`
    (input and output counts, as the API writes them; None: none)."""
    reason = STOPS[api].get(stop or "", stop)
    if api == "openai-chat":
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if calls:
            message["tool_calls"] = [
                {"type": "function", "function": {"name": n, "arguments": a}, **_id("id", i)}
                for i, n, a in calls
            ]
        body: dict[str, Any] = {"id": "c", "object": "chat.completion", "model": "gpt-4o"}
        body["choices"] = [{"index": 0, "message": message, "finish_reason": reason}]
        if usage:
            body["usage"] = {"prompt_tokens": usage[0], "completion_tokens": usage[1]}
        return body
    if api == "openai-responses":
        output: list[dict[str, Any]] = []
        if text:
            content = [{"type": "output_text", "text": text, "annotations": []}]
            output.append({"type": "message", "id": "msg_1", "role": "assistant", "content": content})
        output += [
            {"type": "function_call", "name": n, "arguments": a, **_id("call_id", i)}
            for i, n, a in calls
        ]
        body = {**RESPONSE, "model": "gpt-4o", "status": "completed", "output": output}
        if reason not in (None, "completed"):
            body |= {"status": "incomplete", "incomplete_details": {"reason": reason}}
        if usage:
            body["usage"] = {"input_tokens": usage[0], "output_tokens": usage[1]}
        return body
    if api == "anthropic":
        blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        blocks += [{"type": "tool_use", "name": n, "input": a, **_id("id", i)} for i, n, a in calls]
        body = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x"}
        body |= {"content": blocks, "stop_reason": reason}
        if usage:
            body["usage"] = {"input_tokens": usage[0], "output_tokens": usage[1]}
        return body
    parts: list[dict[str, Any]] = [{"text": text}] if text else []
    parts += [{"functionCall": {"name": n, "args": a, **_id("id", i)}} for i, n, a in calls]
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}}
    if reason:
        candidate["finishReason"] = reason
    body = {"candidates": [candidate], "modelVersion": "gemini-x"}
    if usage:
        body["usageMetadata"] = {"promptTokenCount": usage[0], "candidatesTokenCount": usage[1]}
    return body


def _id(key: str, value: str | None) -> dict[str, str]:
    return {} if value is None else {key: value}


def streamed_form(api: str, body: dict[str, Any]) -> str:
    """The SSE stream `api` sends for the plain answer `body` (text and arguments whole)."""
    if api == "gemini":
        return sse([body])
    if api == "openai-chat":
        choice = body["choices"][0]
        message, chunks = choice["message"], []
        if message.get("content"):
            chunks.append(chat_chunk({"role": "assistant", "content": message["content"]}))
        for k, call in enumerate(message.get("tool_calls") or []):
            chunks.append(chat_chunk({"tool_calls": [{**call, "index": k}]}))
        chunks.append(chat_chunk({}, choice["finish_reason"]))
        if body.get("usage"):
            chunks.append({**chat_chunk({}), "choices": [], "usage": body["usage"]})
        return sse(chunks, done=True)
    if api == "anthropic":
        start = {**body, "content": [], "stop_reason": None}
        events: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
        for k, block in enumerate(body["content"]):
            empty = {**block, "text": ""} if block["type"] == "text" else {**block, "input": {}}
            events.append({"type": "content_block_start", "index": k, "content_block": empty})
            if block["type"] == "text":
                delta = {"type": "text_delta", "text": block["text"]}
            else:
                arguments = block["input"] if isinstance(block["input"], str) else json.dumps(block["input"])
                delta = {"type": "input_json_delta", "partial_json": arguments}
            events.append({"type": "content_block_delta", "index": k, "delta": delta})
            events.append({"type": "content_block_stop", "index": k})
        end = {"stop_reason": body["stop_reason"]}
        events.append({"type": "message_delta", "delta": end, "usage": body.get("usage") or {}})
        return sse([*events, {"type": "message_stop"}], named=True)
    events = [{"type": "response.created", "response": {**body, "status": "in_progress", "output": []}}]
    for k, item in enumerate(body["output"]):
        blank = {**item, "arguments": ""} if item["type"] == "function_call" else {**item, "content": []}
        events.append({"type": "response.output_item.added", "output_index": k, "item": blank})
        if item["type"] == "function_call":
            kind, extra = "response.function_call_arguments.delta", {"delta": item["arguments"]}
        else:
            kind, extra = "response.output_text.delta", {"content_index": 0, "delta": item["content"][0]["text"]}
        events.append({"type": kind, "output_index": k, **_id("item_id", item.get("id")), **extra})
    terminal = {"completed": "response.completed", "incomplete": "response.incomplete"}
    return sse([*events, {"type": terminal.get(body["status"], "response.failed"), "response": body}], named=True)


async def answered(api: str, body: dict[str, Any], *, stream: bool) -> ModelResponse:
    """What the adapter makes of the plain answer `body`, sent whole or in its streamed form."""
    text = streamed_form(api, body) if stream else json.dumps(body)
    return final(await send(api, text, stream=stream))
