"""Drive each adapter through its HTTP path with a body the test makes up.

Every adapter under the name of its recordings' directory (`MODELS`, `ADAPTERS`), a plain
answer of each API (`DONE`, or with another text: `text_answer`), the body an adapter sends (`body_of`), and one call that answers
a request with a given body (whole, or in the given pieces) and returns what `generate` or
`generate_stream` gave (`send`).
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx

from golem.messages import Message, ToolCall
from golem.model import Delta, ModelRequest, ModelResponse
from golem.providers.anthropic import AnthropicModel
from golem.providers.gemini import GeminiModel
from golem.providers.openai import OpenAIChatModel, OpenAIResponsesModel

REQUEST = ModelRequest([Message("user", "hi")])

MODELS: dict[str, Callable[[httpx.AsyncClient], Any]] = {
    "openai-chat": lambda c: OpenAIChatModel("gpt-4o", api_key="k", http_client=c),
    "openai-responses": lambda c: OpenAIResponsesModel("gpt-4o", api_key="k", http_client=c),
    "anthropic": lambda c: AnthropicModel("claude-x", api_key="k", http_client=c),
    "gemini": lambda c: GeminiModel("gemini-x", api_key="k", http_client=c),
}
"""Each adapter, by the name of its recordings' directory."""

ADAPTERS: dict[str, Callable[..., Any]] = {
    "openai-chat": OpenAIChatModel,
    "openai-responses": OpenAIResponsesModel,
    "anthropic": AnthropicModel,
    "gemini": GeminiModel,
}
"""Each adapter's class, by the name of its recordings' directory."""

DONE: dict[str, dict[str, Any]] = {
    "openai-chat": {
        "id": "c",
        "object": "chat.completion",
        "model": "gpt-4o",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
        ],
    },
    "openai-responses": {
        "id": "r",
        "object": "response",
        "model": "gpt-4o",
        "status": "completed",
        "output": [
            {
                "type": "message",
                "id": "m",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "ok", "annotations": []}],
            }
        ],
    },
    "anthropic": {
        "id": "msg_2",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
        "content": [{"type": "text", "text": "ok"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 10, "output_tokens": 1},
    },
    "gemini": {
        "candidates": [
            {"content": {"role": "model", "parts": [{"text": "ok"}]}, "finishReason": "STOP"}
        ],
        "modelVersion": "gemini-x",
    },
}
"""A plain successful answer ("ok") of each adapter's API, unstreamed."""


def text_answer(api: str, text: str) -> dict[str, Any]:
    """`DONE[api]` answering `text` instead of "ok"."""
    body = copy.deepcopy(DONE[api])
    if api == "openai-chat":
        body["choices"][0]["message"]["content"] = text
    elif api == "openai-responses":
        body["output"][0]["content"][0]["text"] = text
    elif api == "anthropic":
        body["content"][0]["text"] = text
    else:
        body["candidates"][0]["content"]["parts"][0]["text"] = text
    return body


class Chunks(httpx.AsyncByteStream):
    """A response body delivered in the given pieces."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk


def cut(raw: bytes, points: list[int]) -> list[bytes]:
    """`raw` in pieces, cut at `points` (taken modulo its length)."""
    cuts = sorted({p % (len(raw) + 1) for p in points})
    out, last = [], 0
    for p in [*cuts, len(raw)]:
        out.append(raw[last:p])
        last = p
    return out


async def send(
    api: str,
    body: str | list[bytes],
    *,
    stream: bool,
    ctype: str | None = None,
    status: int = 200,
) -> list[Delta | ModelResponse]:
    """What the `api` adapter yields (streamed) or returns (a one-item list) when the server
    answers with `body`: a text, or its bytes in pieces. The content type defaults to SSE for
    a stream, JSON otherwise."""
    ctype = ctype or ("text/event-stream" if stream else "application/json")
    pieces = [body.encode()] if isinstance(body, str) else body

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, headers={"content-type": ctype}, stream=Chunks(pieces))

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        model = MODELS[api](client)
        if stream:
            return [item async for item in model.generate_stream(REQUEST)]
        return [await model.generate(REQUEST)]


def body_of(
    api: str, request: ModelRequest, model: str = "m", *, stream: bool = False, **settings: Any
) -> dict[str, Any]:
    """The JSON body the `api` adapter (for `model`, with `settings`) sends for `request`."""
    adapter = ADAPTERS[api](model, api_key="k", **settings)
    body: dict[str, Any] = adapter.request_body(request, stream=stream)
    return body


def final(items: list[Delta | ModelResponse]) -> ModelResponse:
    """The final response: the last item."""
    last = items[-1]
    assert isinstance(last, ModelResponse)
    return last


def accumulated(items: list[Delta | ModelResponse]) -> list[ToolCall]:
    """The tool calls the deltas of a stream add up to."""
    calls: dict[int, dict[str, str]] = {}
    for item in items:
        if isinstance(item, Delta):
            for d in item.tool_calls:
                c = calls.setdefault(d.index, {"id": "", "name": "", "args": ""})
                c["id"] = c["id"] or d.id
                c["name"] = c["name"] or d.name
                c["args"] += d.args_fragment
    return [ToolCall(id=c["id"], name=c["name"], args=c["args"]) for _, c in sorted(calls.items())]


def plain_calls(response: ModelResponse) -> list[ToolCall]:
    """The tool calls of a response, without their signatures and seals."""
    return [ToolCall(id=c.id, name=c.name, args=c.args) for c in response.message.tool_calls]


def assert_deltas_add_up(items: list[Delta | ModelResponse]) -> ModelResponse:
    """Assert that the deltas of a stream add up to its final response (text, thoughts and
    tool calls), and return that response."""
    response = final(items)
    deltas = [d for d in items if isinstance(d, Delta)]
    assert "".join(d.content for d in deltas) == response.message.content
    thinking: dict[int, str] = {}
    for d in deltas:
        for t in d.thinking:
            thinking[t.index] = thinking.get(t.index, "") + t.text
    assert [thinking.get(n, "") for n in range(len(response.message.thinking))] == [
        t.text for t in response.message.thinking
    ]
    assert accumulated(items) == plain_calls(response)
    return response


def parsed(api: str, body: Any, *, stream: bool = False) -> ModelResponse:
    """The answer the `api` adapter makes of `body` (a JSON value sent whole, or, when
    `stream`, SSE text or `(event, data)` pairs), through its HTTP path."""
    return final(streamed(api, body) if stream else asyncio.run(send(api, json.dumps(body), stream=False)))


def streamed(api: str, events: str | list[tuple[str, str]]) -> list[Delta | ModelResponse]:
    """What the `api` adapter streams for SSE text or `(event, data)` pairs."""
    if not isinstance(events, str):
        events = "".join(f"event: {e}\ndata: {d}\n\n" if e else f"data: {d}\n\n" for e, d in events)
    return asyncio.run(send(api, events, stream=True))
