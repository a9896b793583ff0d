"""Recorded event streams and the ways to frame them, sent through each adapter's HTTP path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from golem.model import Delta, ModelResponse
from tests.support.adapters import MODELS, REQUEST, Chunks, send
from tests.support.recordings import all_interactions, available

FIXTURES = Path(__file__).resolve().parents[1] / "providers" / "openai_fixtures"


async def stream_through(api: str, chunks: list[bytes]) -> list[Delta | ModelResponse]:
    """What `generate_stream` yields when the server sends `chunks` as its SSE body."""
    return await send(api, chunks, stream=True)


def events_of(body: str) -> list[tuple[str, str]]:
    """The `(event, data)` pairs of a recorded SSE body (LF or CRLF, one `data:` line each)."""
    out: list[tuple[str, str]] = []
    for block in body.replace("\r\n", "\n").split("\n\n"):
        event, data = "", []
        for line in block.split("\n"):
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
        if data:
            out.append((event, "\n".join(data)))
    return out


def _streams() -> list[tuple[str, list[tuple[str, str]]]]:
    out = []
    for path in sorted(FIXTURES.glob("stream_*.sse")):
        if path.name not in ("stream_truncated.sse", "stream_error_event.sse"):
            out.append(("openai-chat", events_of(path.read_text())))
    for api in ("openai-responses", "anthropic", "gemini"):
        if available(api):
            for it in all_interactions(api):
                if it.is_stream and it.status == 200:
                    out.append((api, events_of(it.body)))
    return out


STREAMS = _streams()
"""Every recorded stream that completes, as `(api, events)`: the OpenAI Chat fixtures, and
the 200 streams of the recordings (when present)."""


CALLING = [
    (api, events)
    for api, events in STREAMS
    if api in ("anthropic", "openai-responses")
    and any("input_json_delta" in d or "function_call_arguments.delta" in d for _, d in events)
]
"""The recorded Anthropic and Responses streams that stream tool-call arguments."""


async def stream_of(api: str, events: list[tuple[str, str]]) -> list[Delta | ModelResponse]:
    """What `generate_stream` yields for the SSE `events`, sent in one piece."""
    return await send(api, [plain(events)], stream=True)


def _bodies() -> list[tuple[str, str]]:
    out = []
    for api in ("openai-chat", "openai-responses", "anthropic", "gemini"):
        if not available(api):
            continue
        for it in all_interactions(api):
            if not it.is_stream and it.status == 200 and it.body.lstrip().startswith("{"):
                out.append((api, it.body))
    return out


BODIES = _bodies()
"""Every recorded non-streamed answer (a JSON object, status 200), as `(api, body)`."""


def plain(events: list[tuple[str, str]]) -> bytes:
    """The SSE text of `events`, LF-framed, one `data:` line each."""
    lines = [f"event: {event}\n" if event else "" for event, _ in events]
    return "".join(
        head + "".join(f"data: {line}\n" for line in data.split("\n")) + "\n"
        for head, (_, data) in zip(lines, events, strict=True)
    ).encode()


OVER_STREAMS = pytest.mark.parametrize(
    ("api", "events"), STREAMS, ids=[f"{api}-{i}" for i, (api, _) in enumerate(STREAMS)]
)
"""Parametrize a test over the recorded streams (`api`, `events`)."""


TEXT = "héllo ✓ Zürich 東京 🎉"
ARGS = '{"city": "Zürich 東京 🎉"}'


def sse_event(name: str, data: dict[str, Any]) -> str:
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


def chat_chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return {"id": "x", "object": "chat.completion.chunk", "model": "m", "choices": [choice]}


UNICODE_STREAMS: dict[str, str] = {
    # each adapter's stream of TEXT and one call with ARGS, non-ASCII throughout
    "openai-chat": "".join(
        f"data: {json.dumps(d, ensure_ascii=False)}\n\n"
        for d in [
            chat_chunk({"role": "assistant", "content": TEXT}),
            chat_chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "f", "arguments": ARGS},
                        }
                    ]
                }
            ),
            chat_chunk({}, "tool_calls"),
        ]
    )
    + "data: [DONE]\n\n",
    "anthropic": "".join(
        sse_event(d["type"], d)
        for d in [
            {
                "type": "message_start",
                "message": {
                    "id": "m",
                    "type": "message",
                    "role": "assistant",
                    "model": "m",
                    "content": [],
                    "stop_reason": None,
                    "usage": {"input_tokens": 1, "output_tokens": 1},
                },
            },
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": TEXT},
            },
            {"type": "content_block_stop", "index": 0},
            {
                "type": "content_block_start",
                "index": 1,
                "content_block": {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}},
            },
            {
                "type": "content_block_delta",
                "index": 1,
                "delta": {"type": "input_json_delta", "partial_json": ARGS},
            },
            {"type": "content_block_stop", "index": 1},
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use"},
                "usage": {"output_tokens": 5},
            },
            {"type": "message_stop"},
        ]
    ),
    "gemini": "".join(
        f"data: {json.dumps(d, ensure_ascii=False)}\r\n\r\n"
        for d in [
            {"candidates": [{"content": {"role": "model", "parts": [{"text": TEXT}]}}]},
            {
                "candidates": [
                    {
                        "content": {
                            "role": "model",
                            "parts": [{"functionCall": {"name": "f", "args": json.loads(ARGS)}}],
                        },
                        "finishReason": "STOP",
                    }
                ]
            },
        ]
    ),
    "openai-responses": "".join(
        sse_event(d["type"], d)
        for d in [
            {"type": "response.created", "response": {"id": "r", "status": "in_progress"}},
            {
                "type": "response.output_item.added",
                "output_index": 0,
                "item": {"type": "message", "id": "m1", "role": "assistant", "content": []},
            },
            {
                "type": "response.output_text.delta",
                "output_index": 0,
                "content_index": 0,
                "item_id": "m1",
                "delta": TEXT,
            },
            {
                "type": "response.output_item.added",
                "output_index": 1,
                "item": {
                    "type": "function_call",
                    "id": "fc1",
                    "call_id": "c1",
                    "name": "f",
                    "arguments": "",
                },
            },
            {
                "type": "response.function_call_arguments.delta",
                "output_index": 1,
                "item_id": "fc1",
                "delta": ARGS,
            },
            {
                "type": "response.completed",
                "response": {
                    "id": "r",
                    "status": "completed",
                    "model": "m",
                    "output": [
                        {
                            "type": "message",
                            "id": "m1",
                            "role": "assistant",
                            "status": "completed",
                            "content": [{"type": "output_text", "text": TEXT, "annotations": []}],
                        },
                        {
                            "type": "function_call",
                            "id": "fc1",
                            "call_id": "c1",
                            "name": "f",
                            "arguments": ARGS,
                        },
                    ],
                },
            },
        ]
    ),
}


async def send_with_headers(
    api: str,
    pieces: list[bytes],
    headers: dict[str, str],
    *,
    stream: bool,
    status: int = 200,
) -> list[Delta | ModelResponse]:
    """What the adapter for `api` makes of an answer sent as `pieces` with `headers`."""

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, headers=headers, stream=Chunks(pieces))

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        model = MODELS[api](client)
        if stream:
            return [item async for item in model.generate_stream(REQUEST)]
        return [await model.generate(REQUEST)]
