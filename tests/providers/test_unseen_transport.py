"""Transport quirks the recordings do not show, through each adapter's HTTP path (ADR 0060).

Each used to give a wrong answer, an unnamed exception or a hang:
- a `charset=iso-8859-1` in the content type (a proxy's default) garbled every non-ASCII
  character of the answer, which was accepted (JSON and event streams are UTF-8 whatever the
  header says: RFC 8259, the SSE standard);
- a byte order mark before a JSON body lost the answer ("not JSON");
- a body its `Content-Encoding` does not decode (corrupt gzip) raised `httpx.DecodingError`;
- a `Retry-After` of `inf` / `1e400` / `nan` (or Gemini's `retryDelay: "1e400s"`) became a
  wait that never ends.
"""

from __future__ import annotations

import gzip
import json
from typing import Any

import httpx
import pytest

from golem.errors import GolemError, ResponseFormatError
from golem.model import Delta, ModelResponse
from tests.support.adapters import MODELS, REQUEST, Chunks, final

TEXT = "héllo ✓ Zürich 東京 🎉"
ARGS = '{"city": "Zürich 東京 🎉"}'

BODIES: dict[str, dict[str, Any]] = {
    "openai-chat": {
        "id": "x",
        "object": "chat.completion",
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": TEXT},
                "finish_reason": "stop",
            }
        ],
    },
    "openai-responses": {
        "id": "r",
        "object": "response",
        "status": "completed",
        "model": "m",
        "output": [
            {
                "type": "message",
                "id": "m1",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": TEXT, "annotations": []}],
            }
        ],
    },
    "anthropic": {
        "id": "msg",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [{"type": "text", "text": TEXT}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 1, "output_tokens": 2},
    },
    "gemini": {
        "candidates": [
            {"content": {"role": "model", "parts": [{"text": TEXT}]}, "finishReason": "STOP"}
        ]
    },
}


def _event(name: str, data: dict[str, Any]) -> str:
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


def _chat_chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return {"id": "x", "object": "chat.completion.chunk", "model": "m", "choices": [choice]}


STREAMS: dict[str, str] = {
    "openai-chat": "".join(
        f"data: {json.dumps(d, ensure_ascii=False)}\n\n"
        for d in [
            _chat_chunk({"role": "assistant", "content": TEXT}),
            _chat_chunk(
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
            _chat_chunk({}, "tool_calls"),
        ]
    )
    + "data: [DONE]\n\n",
    "anthropic": "".join(
        _event(d["type"], d)
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
        _event(d["type"], d)
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


async def _send(
    api: str,
    pieces: list[bytes],
    headers: dict[str, str],
    *,
    stream: bool,
    status: int = 200,
) -> list[Delta | ModelResponse]:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, headers=headers, stream=Chunks(pieces))

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        model = MODELS[api](client)
        if stream:
            return [item async for item in model.generate_stream(REQUEST)]
        return [await model.generate(REQUEST)]


def _json(api: str) -> bytes:
    return json.dumps(BODIES[api], ensure_ascii=False).encode()


@pytest.mark.parametrize("api", sorted(MODELS))
@pytest.mark.parametrize("charset", ["iso-8859-1", "latin-1", "windows-1252", "ascii"])
async def test_a_json_body_is_utf8_whatever_charset_the_header_says(api: str, charset: str) -> None:
    ctype = f"application/json; charset={charset}"
    response = final(await _send(api, [_json(api)], {"content-type": ctype}, stream=False))
    assert response.message.content == TEXT


@pytest.mark.parametrize("api", sorted(MODELS))
@pytest.mark.parametrize("stream", [False, True])
async def test_a_byte_order_mark_before_a_json_body_is_skipped(api: str, stream: bool) -> None:
    body = b"\xef\xbb\xbf" + _json(api)
    response = final(await _send(api, [body], {"content-type": "application/json"}, stream=stream))
    assert response.message.content == TEXT


@pytest.mark.parametrize("api", sorted(MODELS))
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("status", [200, 503])
async def test_a_body_that_does_not_decompress_is_a_retryable_format_error(
    api: str, stream: bool, status: int
) -> None:
    ctype = "text/event-stream" if stream else "application/json"
    headers = {"content-type": ctype, "content-encoding": "gzip"}
    with pytest.raises(ResponseFormatError, match="could not be decoded") as caught:
        await _send(api, [b"\x1f\x8bgarbage"], headers, stream=stream, status=status)
    assert caught.value.retryable


@pytest.mark.parametrize("api", sorted(MODELS))
async def test_a_stream_that_stops_decompressing_midway_is_a_named_error(api: str) -> None:
    whole = gzip.compress(STREAMS[api].encode())
    pieces = [whole[: len(whole) // 2], b"\x00\xff" * 8]
    headers = {"content-type": "text/event-stream", "content-encoding": "gzip"}
    with pytest.raises(GolemError):
        await _send(api, pieces, headers, stream=True)


# --------------------------------------------------------------------------- byte cuts


@pytest.mark.parametrize("api", sorted(MODELS))
@pytest.mark.parametrize("body", [b"", b"  \r\n"])
async def test_an_empty_200_body_is_a_retryable_format_error(api: str, body: bytes) -> None:
    # it was "returned a body that is not JSON: ''", not retryable
    with pytest.raises(ResponseFormatError, match="a body that is empty") as caught:
        await _send(api, [body], {"content-type": "application/json"}, stream=False)
    assert caught.value.retryable
