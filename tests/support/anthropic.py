"""Helpers shared by the Anthropic adapter tests: recorded traffic, SSE building, request mapping."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx

from golem.messages import Message, Part, ThinkingBlock, ToolCall
from golem.model import ModelRequest, ToolSpec
from golem.providers.anthropic import AnthropicModel
from tests.support.recordings import Interaction, all_interactions

API = "anthropic"
MESSAGES_URI = "https://api.anthropic.com/v1/messages?"
ADAPTER_KEYS = frozenset(
    (
        "model",
        "max_tokens",
        "system",
        "messages",
        "tools",
        "tool_choice",
        "output_config",
        "thinking",
        "temperature",
        "top_p",
        "stop_sequences",
        "stream",
    )
)
"""Top-level request fields the adapter sets itself (everything else comes from extra_body)."""

SEARCH_RESULT = {
    "type": "web_search_tool_result",
    "tool_use_id": "srvtoolu_1",
    "content": [
        {
            "type": "web_search_result",
            "title": "Golem",
            "url": "https://example.com/golem",
            "encrypted_content": "EncA==",
            "page_age": None,
        }
    ],
}
"""A web search result block, as the server tool answers it."""


def message_interactions() -> list[Interaction]:
    """Every recorded exchange with the Messages endpoint (other hosts and count_tokens excluded)."""
    return [it for it in all_interactions(API) if it.uri.startswith(MESSAGES_URI)]


def scripted_transport(
    answers: list[dict[str, Any]],
    seen: list[dict[str, Any]],
    stream_text: Callable[[dict[str, Any]], str] | None = None,
) -> httpx.MockTransport:
    """A transport answering the n-th request with `answers[n]` (the last one from then on),
    streamed (by `stream_text`, else `synthesize_stream`) when asked; each request body is
    appended to `seen`."""

    def handle(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append(body)
        answer = answers[min(len(seen), len(answers)) - 1]
        if body.get("stream"):
            text = stream_text(answer) if stream_text else sse(*synthesize_stream(answer))
            return httpx.Response(200, headers={"content-type": "text/event-stream"}, text=text)
        return httpx.Response(200, json=answer)

    return httpx.MockTransport(handle)


@asynccontextmanager
async def model_on(
    transport: httpx.AsyncBaseTransport, **kwargs: Any
) -> AsyncIterator[AnthropicModel]:
    """An `AnthropicModel` whose injected client talks to `transport`."""
    kwargs.setdefault("api_key", "test-key")
    async with httpx.AsyncClient(transport=transport) as client:
        yield AnthropicModel(kwargs.pop("model", "claude-test"), http_client=client, **kwargs)


def sse(*events: dict[str, Any]) -> str:
    """Server-sent-event text for `events` (each named by its `type`)."""
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)


def _chunks(text: str, size: int) -> Iterator[str]:
    for i in range(0, len(text), size):
        yield text[i : i + size]


def synthesize_stream(body: dict[str, Any], size: int = 7) -> list[dict[str, Any]]:
    """The events a streamed call would send for the non-streamed response `body`.

    Text, thinking and tool arguments arrive in `size`-character fragments (tool
    arguments as `json.dumps(input)`, the form the API streams; citations as `citations_delta`
    events); other server-tool blocks
    arrive whole in their `content_block_start`.
    """
    usage = dict(body.get("usage") or {})
    start_usage = {**usage, "output_tokens": 1}
    message = {**body, "content": [], "stop_reason": None, "usage": start_usage}
    events: list[dict[str, Any]] = [{"type": "message_start", "message": message}]
    for i, block in enumerate(body["content"]):
        kind = block["type"]
        if kind == "text":
            start_block = {**block, "text": ""}
            if "citations" in block:
                start_block["citations"] = []  # citations stream as citations_delta events
            events.append({"type": "content_block_start", "index": i, "content_block": start_block})
            for citation in block.get("citations") or ():
                events.append(
                    {
                        "type": "content_block_delta",
                        "index": i,
                        "delta": {"type": "citations_delta", "citation": citation},
                    }
                )
            for piece in _chunks(block["text"], size):
                events.append(
                    {
                        "type": "content_block_delta",
                        "index": i,
                        "delta": {"type": "text_delta", "text": piece},
                    }
                )
        elif kind == "thinking":
            start = {"type": "thinking", "thinking": "", "signature": ""}
            events.append({"type": "content_block_start", "index": i, "content_block": start})
            for piece in _chunks(block["thinking"], size):
                events.append(
                    {
                        "type": "content_block_delta",
                        "index": i,
                        "delta": {"type": "thinking_delta", "thinking": piece},
                    }
                )
            events.append(
                {
                    "type": "content_block_delta",
                    "index": i,
                    "delta": {"type": "signature_delta", "signature": block["signature"]},
                }
            )
        elif kind in ("tool_use", "server_tool_use", "mcp_tool_use"):
            events.append(
                {"type": "content_block_start", "index": i, "content_block": {**block, "input": {}}}
            )
            for piece in _chunks(
                json.dumps(block["input"], ensure_ascii=False) if block["input"] else "", size
            ):
                events.append(
                    {
                        "type": "content_block_delta",
                        "index": i,
                        "delta": {"type": "input_json_delta", "partial_json": piece},
                    }
                )
        else:
            events.append({"type": "content_block_start", "index": i, "content_block": block})
        if i == 0:
            events.append({"type": "ping"})
        events.append({"type": "content_block_stop", "index": i})
    final_usage = {k: v for k, v in usage.items() if k != "service_tier"}
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": body.get("stop_reason"), "stop_sequence": None},
            "usage": final_usage,
        }
    )
    events.append({"type": "message_stop"})
    return events


# --------------------------------------------------------------------------- recorded body → golem


class Inexpressible(Exception):
    """The recorded request uses something a golem `ModelRequest` cannot say."""


def _part(block: dict[str, Any]) -> Part:
    kind, source = block["type"], block.get("source") or {}
    if "cache_control" in block or kind not in ("image", "document"):
        raise Inexpressible(f"block {kind}")
    stype = source.get("type")
    if stype == "url":
        return Part(kind=kind, url=source["url"])
    if stype == "base64":
        if kind == "document" and source["media_type"] != "application/pdf":
            raise Inexpressible("base64 document that is not a PDF")
        return Part(
            kind=kind, data=base64.b64decode(source["data"]), media_type=source["media_type"]
        )
    if stype == "text" and kind == "document" and source.get("media_type") == "text/plain":
        return Part(kind=kind, data=source["data"].encode(), media_type="text/plain")
    raise Inexpressible(f"source {stype}")


def _user_turn(content: Any) -> list[Message]:
    if isinstance(content, str):
        return [Message(role="user", content=content)]
    out: list[Message] = []
    current: Message | None = None
    seen_other = False
    for block in content:
        if "cache_control" in block:
            raise Inexpressible("cache_control on a block")
        kind = block["type"]
        if kind == "tool_result":
            if seen_other:
                raise Inexpressible("tool_result after other blocks")
            out.append(_tool_message(block))
            continue
        seen_other = True
        if kind == "text":
            current = Message(role="user", content=block["text"])
            out.append(current)
        else:
            part = _part(block)
            if current is None:
                current = Message(role="user", parts=[part])
                out.append(current)
            else:
                index = out.index(current)
                current = Message(
                    role="user", content=current.content, parts=[*current.parts, part]
                )
                out[index] = current
    return out


def _tool_message(block: dict[str, Any]) -> Message:
    if "is_error" not in block:
        raise Inexpressible("tool_result without is_error")
    content = block.get("content", "")
    text, parts = "", []
    if isinstance(content, str):
        text = content
    else:
        for j, b in enumerate(content):
            if b["type"] == "text" and j == 0:
                text = b["text"]
            else:
                parts.append(_part(b))
    return Message(
        role="tool",
        tool_call_id=block["tool_use_id"],
        content=text,
        parts=parts,
        failed=block["is_error"],
    )


def _assistant_turn(content: Any) -> Message:
    if isinstance(content, str):
        return Message(role="assistant", content=content)
    thinking: list[ThinkingBlock] = []
    text: str | None = None
    calls: list[ToolCall] = []
    for block in content:
        kind = block["type"]
        if "cache_control" in block:
            raise Inexpressible("cache_control on a block")
        if kind == "thinking" and text is None and not calls:
            thinking.append(ThinkingBlock(text=block["thinking"], signature=block["signature"]))
        elif kind == "redacted_thinking" and text is None and not calls:
            thinking.append(ThinkingBlock(redacted=block["data"]))
        elif kind == "text" and text is None and not calls and block["text"]:
            text = block["text"]
        elif kind == "tool_use":
            calls.append(
                ToolCall(id=block["id"], name=block["name"], args=json.dumps(block["input"]))
            )
        else:
            raise Inexpressible(f"assistant block {kind} in this position")
    return Message(role="assistant", content=text or "", tool_calls=calls, thinking=thinking)


def _plain_text(blocks: Any) -> str | None:
    """The joined text of a list of plain text blocks, else None."""
    if isinstance(blocks, list) and all(
        isinstance(b, dict) and set(b) == {"type", "text"} and b["type"] == "text" for b in blocks
    ):
        return "".join(b["text"] for b in blocks)
    return None


def normalize_recorded(body: dict[str, Any]) -> dict[str, Any]:
    """An equivalent body in the forms the adapter uses.

    The API reads a list of plain text blocks exactly like their text as a string, for
    the `system` field and for a `tool_result`'s `content`; the adapter sends strings.
    """
    out = dict(body)
    system = _plain_text(body.get("system"))
    if system is not None:
        out["system"] = system
    messages = []
    for m in body.get("messages") or []:
        if isinstance(m.get("content"), list):
            blocks = []
            for b in m["content"]:
                text = _plain_text(b.get("content")) if b.get("type") == "tool_result" else None
                blocks.append({**b, "content": text} if text is not None else b)
            m = {**m, "content": blocks}
        messages.append(m)
    out["messages"] = messages
    return out


def golem_request(body: dict[str, Any]) -> tuple[ModelRequest, dict[str, Any]]:
    """The golem request and `AnthropicModel` arguments equivalent to a recorded body.

    `body` should have gone through `normalize_recorded`.

    Raises:
        Inexpressible: the body uses a feature golem's request model does not have.
    """
    kwargs: dict[str, Any] = {"model": body["model"], "max_tokens": body["max_tokens"]}
    extra: dict[str, Any] = {}
    messages: list[Message] = []
    system = body.get("system")
    if system is not None:
        if not isinstance(system, str):
            raise Inexpressible("system as a list of blocks")
        messages.append(Message(role="system", content=system))
    for i, m in enumerate(body["messages"]):
        if i and m["role"] == body["messages"][i - 1]["role"] == "user":
            raise Inexpressible("two user turns in a row (golem merges them)")
        if m["role"] == "user":
            messages.extend(_user_turn(m["content"]))
        elif m["role"] == "assistant":
            messages.append(_assistant_turn(m["content"]))
        else:
            raise Inexpressible(f"message role {m['role']}")
    tools: list[ToolSpec] = []
    for t in body.get("tools") or []:
        if set(t) != {"name", "description", "input_schema"}:
            raise Inexpressible(f"tool with keys {sorted(t)}")
        tools.append(ToolSpec(t["name"], t["description"], t["input_schema"]))
    if tools and body.get("tool_choice") != {"type": "auto"}:
        raise Inexpressible(f"tool_choice {body.get('tool_choice')}")
    if not tools and "tool_choice" in body:
        raise Inexpressible("tool_choice without tools")
    output_schema = None
    config = dict(body.get("output_config") or {})
    fmt = config.pop("format", None)
    if fmt is not None:
        if fmt.get("type") != "json_schema":
            raise Inexpressible(f"output format {fmt.get('type')}")
        output_schema = fmt["schema"]
    if config:
        extra["output_config"] = config
    thinking = body.get("thinking")
    if thinking is not None:
        if thinking.get("type") == "enabled" and set(thinking) == {"type", "budget_tokens"}:
            kwargs["thinking_budget"] = thinking["budget_tokens"]
        else:
            extra["thinking"] = thinking
    for key in ("temperature", "top_p"):
        if key in body:
            kwargs[key] = body[key]
    if "stop_sequences" in body:
        kwargs["stop"] = body["stop_sequences"]
    for key, value in body.items():
        if key not in ADAPTER_KEYS:
            extra[key] = value
    if extra:
        kwargs["extra_body"] = extra
    return ModelRequest(messages=messages, tools=tools, output_schema=output_schema), kwargs
