"""Streaming through the OpenAI Chat Completions adapter: deltas in order, the same final response."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx

from golem.messages import Message, ThinkingBlock, ToolCall
from golem.model import Delta, ModelRequest, ModelResponse, ThinkingDelta, ToolCallDelta
from golem.providers.openai import OpenAIChatModel
from golem.providers.openai._stream import ChatStreamParser, parse_stream_text
from golem.providers.openai._wire import parse_response
from golem.usage import Usage
from tests.support.adapters import REQUEST
from tests.support.openai_chat import chunk, fixture, sse


class _Chunked(httpx.AsyncByteStream):
    """Sends a body in small pieces so events straddle network reads."""

    def __init__(self, data: bytes, size: int) -> None:
        self._data, self._size = data, size

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for i in range(0, len(self._data), self._size):
            yield self._data[i : i + self._size]


def _model(
    body: str, *, size: int = 7, seen: list[httpx.Request] | None = None, **kw: Any
) -> OpenAIChatModel:
    def handler(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request)
        return httpx.Response(
            200,
            headers={"content-type": "text/event-stream; charset=utf-8"},
            stream=_Chunked(body.encode(), size),
        )

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    return OpenAIChatModel("gpt-4o", api_key="sk-test", http_client=client, **kw)


async def _collect(
    model: OpenAIChatModel, request: ModelRequest = REQUEST
) -> list[Delta | ModelResponse]:
    return [item async for item in model.generate_stream(request)]


async def test_text_stream_deltas_and_final_response() -> None:
    seen: list[httpx.Request] = []
    items = await _collect(_model(fixture("stream_text.sse"), seen=seen))
    assert items[:-1] == [
        Delta(content="The"),
        Delta(content=" capital of"),
        Delta(content=" France is Paris."),
    ]
    non_streamed = parse_response(
        {
            "model": "gpt-4o-2024-08-06",
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": "The capital of France is Paris.",
                        "refusal": None,
                    },
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": 14,
                "completion_tokens": 7,
                "prompt_tokens_details": {"cached_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": 0},
            },
        }
    )
    assert items[-1] == non_streamed
    assert non_streamed.usage == Usage(input_tokens=14, output_tokens=7)
    body = json.loads(seen[0].content)
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}


async def test_tool_call_stream_gives_id_and_name_first_then_fragments() -> None:
    items = await _collect(_model(fixture("stream_tool_calls.sse"), size=5))
    deltas = items[:-1]
    assert deltas == [
        Delta(
            tool_calls=[
                ToolCallDelta(index=0, id="call_Qm2xX6mK1zD3fJ8aL0pB4rT7", name="get_weather")
            ]
        ),
        Delta(tool_calls=[ToolCallDelta(index=0, args_fragment='{"ci')]),
        Delta(tool_calls=[ToolCallDelta(index=0, args_fragment='ty": "Pa')]),
        Delta(tool_calls=[ToolCallDelta(index=0, args_fragment='ris"}')]),
        Delta(
            tool_calls=[ToolCallDelta(index=1, id="call_Hk7Pz0Wq9sLm2Nc5Vb8Xy1Ja", name="get_time")]
        ),
        Delta(tool_calls=[ToolCallDelta(index=1, args_fragment='{"timezone": ')]),
        Delta(tool_calls=[ToolCallDelta(index=1, args_fragment='"Europe/Paris"}')]),
    ]
    final = items[-1]
    assert isinstance(final, ModelResponse)
    assert final.message.tool_calls == [
        ToolCall("call_Qm2xX6mK1zD3fJ8aL0pB4rT7", "get_weather", '{"city": "Paris"}'),
        ToolCall("call_Hk7Pz0Wq9sLm2Nc5Vb8Xy1Ja", "get_time", '{"timezone": "Europe/Paris"}'),
    ]
    assert final.finish_reason == "tool_call"
    assert final.usage == Usage(input_tokens=82, output_tokens=49, cache_read_tokens=64)
    assert final.model_name == "gpt-4.1-mini-2025-04-14"
    assert final == parse_response(
        {
            "model": "gpt-4.1-mini-2025-04-14",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "tool_calls",
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": c.id,
                                "type": "function",
                                "function": {"name": c.name, "arguments": c.args},
                            }
                            for c in final.message.tool_calls
                        ],
                    },
                }
            ],
            "usage": {
                "prompt_tokens": 82,
                "completion_tokens": 49,
                "prompt_tokens_details": {"cached_tokens": 64},
            },
        }
    )


async def test_reasoning_content_streams_as_thinking() -> None:
    items = await _collect(_model(fixture("stream_reasoning_deepseek.sse"), size=11))
    assert items[:-1] == [
        Delta(thinking=[ThinkingDelta(index=0, text="The user asks")]),
        Delta(thinking=[ThinkingDelta(index=0, text=" for 9.11 vs 9.8.")]),
        Delta(content="9.8 is"),
        Delta(content=" greater."),
    ]
    final = items[-1]
    assert final == ModelResponse(
        message=Message(
            "assistant",
            "9.8 is greater.",
            thinking=[ThinkingBlock(text="The user asks for 9.11 vs 9.8.")],
        ),
        usage=Usage(input_tokens=18, output_tokens=96, reasoning_tokens=88),
        finish_reason="stop",
        model_name="deepseek-reasoner",
    )
    assert final == parse_response(
        {
            "model": "deepseek-reasoner",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {
                        "role": "assistant",
                        "content": "9.8 is greater.",
                        "reasoning_content": "The user asks for 9.11 vs 9.8.",
                    },
                }
            ],
            "usage": {
                "prompt_tokens": 18,
                "completion_tokens": 96,
                "completion_tokens_details": {"reasoning_tokens": 88},
            },
        }
    )


def test_calls_that_reuse_an_index_with_new_ids_are_separate_calls() -> None:
    """Ollama numbers every whole call 0; the IDs tell them apart."""
    items = parse_stream_text(fixture("stream_ollama_tool_calls.sse"))
    final = items[-1]
    assert isinstance(final, ModelResponse)
    assert final.message.tool_calls == [
        ToolCall("call_a1b2c3d4", "get_weather", '{"city":"Paris"}'),
        ToolCall("call_e5f6g7h8", "get_weather", '{"city":"Rome"}'),
    ]
    assert [d.tool_calls[0].index for d in items[:-1] if isinstance(d, Delta)] == [0, 1]
    assert final.usage == Usage(input_tokens=160, output_tokens=31)


def test_reasoning_field_alias_and_refusal() -> None:
    body = sse(
        [
            chunk({"role": "assistant", "reasoning": "think"}),
            chunk({"refusal": "I can't "}),
            chunk({"refusal": "help with that."}),
            chunk({}, "stop"),
            "[DONE]",
        ]
    )
    final = parse_stream_text(body)[-1]
    assert isinstance(final, ModelResponse)
    assert final.message.thinking == [ThinkingBlock(text="think")]
    assert final.message.content == "I can't help with that."
    assert final.finish_reason == "content_filter"


def test_calls_without_ids_get_one_and_arguments_as_objects_are_kept_as_json() -> None:
    body = sse(
        [
            chunk({"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": {"a": 1}}}]}),
            chunk({}, "tool_calls"),
            "[DONE]",
        ]
    )
    final = parse_stream_text(body)[-1]
    assert isinstance(final, ModelResponse)
    (call,) = final.message.tool_calls
    assert call.id.startswith("call_")
    assert len(call.id) == 29
    assert (call.name, call.args) == ("f", '{"a":1}')


def test_a_finish_reason_without_done_completes_the_response() -> None:
    final = parse_stream_text(sse([chunk({"content": "ok"}), chunk({}, "length")]))[-1]
    assert isinstance(final, ModelResponse)
    assert (final.message.content, final.finish_reason) == ("ok", "length")


def test_gemini_thought_signatures_on_tool_calls_are_kept() -> None:
    tc = {
        "index": 0,
        "id": "function-call-1",
        "type": "function",
        "function": {"name": "f", "arguments": "{}"},
        "extra_content": {"google": {"thought_signature": "c2ln"}},
    }
    items = parse_stream_text(sse([chunk({"tool_calls": [tc]}), chunk({}, "tool_calls"), "[DONE]"]))
    assert items[0] == Delta(
        tool_calls=[
            ToolCallDelta(
                index=0, id="function-call-1", name="f", args_fragment="{}", signature="c2ln"
            )
        ]
    )
    final = items[-1]
    assert isinstance(final, ModelResponse)
    assert final.message.tool_calls == [ToolCall("function-call-1", "f", "{}", signature="c2ln")]


def test_a_null_error_field_is_not_an_error() -> None:
    parser = ChatStreamParser()
    assert parser.feed("", json.dumps({**chunk({"content": "x"}), "error": None})) == Delta(
        content="x"
    )


async def test_a_json_answer_to_a_stream_request_is_replayed_as_deltas() -> None:
    body = {
        "model": "llama3.2",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
        ],
    }

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=body)

    model = OpenAIChatModel(
        "llama3.2",
        base_url="http://127.0.0.1:9/v1",
        http_client=httpx.AsyncClient(transport=httpx.MockTransport(handler)),
    )
    items = await _collect(model)
    assert items == [Delta(content="hi"), parse_response(body)]
