"""Why an answer stopped, through each adapter's HTTP path: each API's stop reasons (and a
compatible server's names for them) as golem's `finish_reason`; a stop for a reason golem
does not know (`other`) keeps what came, and with nothing in the answer is a retryable
`ResponseFormatError` carrying the usage (the run retries it and counts what it used);
Gemini's stops without a cause, language stops, blocked prompts, filtered or empty
candidates and unreadable function calls; Responses answers left `incomplete`.
Stops at the token limit, and usage limits: test_stops_and_limits.py.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from golem import Agent
from golem.errors import ResponseFormatError
from golem.model import ModelResponse
from golem.result import RunError
from tests.support.adapters import MODELS, final, send
from tests.support.events import (
    RESPONSE,
    RESPONSE_USAGE,
    as_terminal,
    chat_chunk,
    gemini_answer,
    responses_answer,
    responses_status,
    sse,
)


async def _gemini(body: Any, *, stream: bool) -> ModelResponse:
    text = json.dumps(body)
    return final(await send("gemini", f"data: {text}\n\n" if stream else text, stream=stream))


_USAGE = {"promptTokenCount": 11, "candidatesTokenCount": 0, "totalTokenCount": 11}


def _chat_stop(reason: str, content: str, stream: bool) -> str:
    if stream:
        return sse(
            [
                chat_chunk({"role": "assistant", "content": content}),
                chat_chunk({}, reason),
                {
                    **chat_chunk({}),
                    "choices": [],
                    "usage": {"prompt_tokens": 9, "completion_tokens": 0},
                },
                "[DONE]",
            ]
        )
    message = {"role": "assistant", "content": content or None}
    choice = {"index": 0, "message": message, "finish_reason": reason}
    return json.dumps(
        {
            "id": "c",
            "object": "chat.completion",
            "model": "m",
            "choices": [choice],
            "usage": {"prompt_tokens": 9, "completion_tokens": 0},
        }
    )


def _anthropic_stop(reason: str, content: str, stream: bool) -> str:
    blocks = [{"type": "text", "text": content}] if content else []
    usage = {"input_tokens": 9, "output_tokens": 0}
    if not stream:
        return json.dumps(
            {
                "id": "m",
                "type": "message",
                "role": "assistant",
                "model": "claude-x",
                "content": blocks,
                "stop_reason": reason,
                "usage": usage,
            }
        )
    start = {
        "type": "message_start",
        "message": {
            "id": "m",
            "type": "message",
            "role": "assistant",
            "model": "claude-x",
            "content": [],
            "stop_reason": None,
            "usage": usage,
        },
    }
    events: list[Any] = [start]
    for i, b in enumerate(blocks):
        events += [
            {"type": "content_block_start", "index": i, "content_block": b},
            {"type": "content_block_stop", "index": i},
        ]
    events += [
        {"type": "message_delta", "delta": {"stop_reason": reason}, "usage": {"output_tokens": 0}},
        {"type": "message_stop"},
    ]
    return sse(events, named=True)


_STOPS = {"openai-chat": _chat_stop, "anthropic": _anthropic_stop}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("reason", "finish"),
    [
        ("eos_token", "stop"),
        ("stop_sequence", "stop"),
        ("end_turn", "stop"),
        ("max_tokens", "length"),
    ],
)
async def test_a_compatible_servers_name_for_a_known_stop_is_that_stop(
    reason: str, finish: str, stream: bool
) -> None:
    """TGI's `eos_token` and a proxy's Anthropic names are the stops they name: an empty
    answer with one of them is an answer (an unknown name with nothing is an error)."""
    response = final(await send("openai-chat", _chat_stop(reason, "", stream), stream=stream))
    assert (response.message.content, response.finish_reason) == ("", finish)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("api", "reason"),
    [("openai-chat", "abort"), ("openai-chat", "error"), ("anthropic", "brand_new_stop")],
)
async def test_an_unknown_stop_with_nothing_in_the_answer_is_a_retryable_error(
    api: str, reason: str, stream: bool
) -> None:
    """Before: vLLM's `abort`, a router's `error` finish reason, or an Anthropic stop reason
    golem does not know, with nothing in the answer, ended the run with an empty answer
    (`finish_reason == "other"`)."""
    with pytest.raises(ResponseFormatError, match=reason) as caught:
        await send(api, _STOPS[api](reason, "", stream), stream=stream)
    assert caught.value.retryable
    assert caught.value.usage is not None
    assert caught.value.usage.input_tokens == 9


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("api", list(_STOPS))
async def test_an_unknown_stop_keeps_the_answer_that_came(api: str, stream: bool) -> None:
    response = final(
        await send(api, _STOPS[api]("brand_new_stop", "Partial", stream), stream=stream)
    )
    assert (response.message.content, response.finish_reason) == ("Partial", "other")


async def test_a_streamed_run_ending_in_a_stop_without_cause_fails_with_its_usage() -> None:
    """A streamed turn is not retried: the run fails (it used to end with `output == ""`),
    naming the stop, and counts what the answer used."""
    empty = {"candidates": [{"finishReason": "OTHER", "index": 0}], "usageMetadata": _USAGE}

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200,
            headers={"content-type": "text/event-stream"},
            text=f"data: {json.dumps(empty)}\n\n",
        )

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        with pytest.raises(RunError) as caught:
            async with Agent(MODELS["gemini"](client)).run_stream("hi") as s:
                async for _ in s:
                    pass
    assert isinstance(caught.value.__cause__, ResponseFormatError)
    assert "OTHER" in str(caught.value.__cause__)
    assert caught.value.partial is not None
    assert caught.value.partial.usage.input_tokens == 11


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "reason", ["OTHER", "IMAGE_OTHER", "NO_IMAGE", "FINISH_REASON_UNSPECIFIED", "SOMETHING_NEW"]
)
@pytest.mark.parametrize(
    "content", [None, {"role": "model"}, {"role": "model", "parts": []}, {"parts": [{"text": ""}]}]
)
async def test_a_gemini_stop_without_cause_or_content_is_a_retryable_error(
    reason: str, content: dict[str, Any] | None, stream: bool
) -> None:
    """Before: the run ended with an empty answer (`finish_reason == "other"`), as if the
    model had said nothing on purpose; an image model's `NO_IMAGE` likewise."""
    candidate: dict[str, Any] = {"finishReason": reason, "index": 0}
    if content is not None:
        candidate["content"] = content
    body = {"candidates": [candidate], "usageMetadata": _USAGE, "modelVersion": "gemini-x"}
    with pytest.raises(ResponseFormatError, match=reason) as caught:
        await _gemini(body, stream=stream)
    assert caught.value.retryable
    assert caught.value.usage is not None
    assert caught.value.usage.input_tokens == 11


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "part",
    [
        {"text": "Partial answer"},
        {"functionCall": {"name": "f", "args": {}}},
        {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}},
        {"executableCode": {"language": "PYTHON", "code": "print(1)"}},
    ],
)
async def test_a_gemini_stop_without_cause_keeps_what_came(
    part: dict[str, Any], stream: bool
) -> None:
    body = {
        "candidates": [{"content": {"role": "model", "parts": [part]}, "finishReason": "OTHER"}],
        "usageMetadata": _USAGE,
    }
    response = await _gemini(body, stream=stream)
    assert response.finish_reason == "other"
    m = response.message
    assert m.content or m.tool_calls or m.parts or m.server_tools


@pytest.mark.parametrize("stream", [False, True])
async def test_a_gemini_language_stop_is_a_content_filter(stream: bool) -> None:
    """Before: `LANGUAGE` (the answer was flagged for an unsupported language) was `other`,
    so the loop did not treat the answer as cut by a filter."""
    body = {"candidates": [{"finishReason": "LANGUAGE", "index": 0}], "usageMetadata": _USAGE}
    response = await _gemini(body, stream=stream)
    assert response.finish_reason == "content_filter"


async def test_an_empty_gemini_candidate_without_finish_reason_is_no_answer() -> None:
    """Before: a plain body `{"candidates": [{"index": 0}]}` was an empty answer with no
    finish reason (a stream of it is already a 'stream ended' error)."""
    with pytest.raises(ResponseFormatError, match="empty candidate") as caught:
        await _gemini({"candidates": [{"index": 0}], "usageMetadata": _USAGE}, stream=False)
    assert caught.value.retryable


async def test_a_run_retries_a_gemini_stop_without_cause_and_counts_its_usage() -> None:
    empty = {"candidates": [{"finishReason": "OTHER", "index": 0}], "usageMetadata": _USAGE}
    good = {
        "candidates": [
            {"content": {"role": "model", "parts": [{"text": "hello"}]}, "finishReason": "STOP"}
        ],
        "usageMetadata": {"promptTokenCount": 11, "candidatesTokenCount": 2},
    }
    bodies = [empty, good]

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=bodies.pop(0))

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        agent = Agent(MODELS["gemini"](client), max_attempts=2, retry_backoff=lambda attempt: 0.0)
        result = await agent.run("hi")
    assert result.output == "hello"
    assert result.usage.input_tokens == 22


@pytest.mark.parametrize("stream", [False, True])
async def test_an_empty_responses_answer_incomplete_for_an_unknown_reason_is_no_answer(
    stream: bool,
) -> None:
    """Before: an answer `incomplete` for a reason golem does not know, with no output, was
    an empty answer (`finish_reason == "other"`)."""
    response = {
        **RESPONSE,
        "status": "incomplete",
        "incomplete_details": {"reason": "brand_new"},
        "output": [],
        "usage": RESPONSE_USAGE,
    }
    body = (
        sse([{"type": "response.incomplete", "response": response}], named=True)
        if stream
        else json.dumps(response)
    )
    with pytest.raises(ResponseFormatError, match="brand_new") as caught:
        await send("openai-responses", body, stream=stream)
    assert caught.value.retryable
    assert caught.value.usage is not None
    assert caught.value.usage.output_tokens == 3


@pytest.mark.parametrize(
    "body", [{}, {"usageMetadata": {"promptTokenCount": 3}}, {"candidates": []}]
)
async def test_a_body_without_a_candidate_is_a_format_error(body: dict[str, Any]) -> None:
    with pytest.raises(ResponseFormatError, match="no candidate"):
        await gemini_answer(body)


async def test_a_blocked_prompt_is_still_a_content_filter_answer() -> None:
    body = {"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"}}
    response = await gemini_answer(body)
    assert response.finish_reason == "content_filter"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "reason", ["MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL", "TOO_MANY_TOOL_CALLS"]
)
async def test_an_unreadable_function_call_is_a_retryable_format_error(
    reason: str, stream: bool
) -> None:
    body = {
        "candidates": [
            {
                "finishReason": reason,
                "finishMessage": "Malformed function call: print(x",
                "index": 0,
            }
        ],
        "usageMetadata": {"promptTokenCount": 2595, "totalTokenCount": 2595},
    }
    with pytest.raises(ResponseFormatError, match=reason) as caught:
        await gemini_answer(body, stream=stream)
    assert caught.value.retryable
    assert "print(x" in str(caught.value)


async def test_a_call_that_came_through_is_kept_whatever_the_finish_reason() -> None:
    part = {"functionCall": {"name": "f", "args": {"n": 1}}}
    body = {"candidates": [{"content": {"parts": [part]}, "finishReason": "TOO_MANY_TOOL_CALLS"}]}
    response = await gemini_answer(body)
    assert [c.name for c in response.message.tool_calls] == ["f"]
    assert response.finish_reason == "other"


@pytest.mark.parametrize("reason", ["SAFETY", "RECITATION", "PROHIBITED_CONTENT", "SPII"])
async def test_a_filtered_candidate_without_content_is_a_content_filter_answer(reason: str) -> None:
    response = await gemini_answer(
        {"candidates": [{"finishReason": reason, "index": 0}]}, stream=True
    )
    assert response.finish_reason == "content_filter"
    assert response.message.content == ""


@pytest.mark.parametrize(
    ("reason", "finish"),
    [("max_output_tokens", "length"), ("content_filter", "content_filter"), ("other", "other")],
)
async def test_an_incomplete_response_is_a_marked_answer(reason: str, finish: str) -> None:
    call = {"type": "function_call", "call_id": "c", "name": "f", "arguments": '{"a": "cut'}
    response = responses_status("incomplete", incomplete_details={"reason": reason}, output=[call])
    got = await responses_answer(as_terminal("response.incomplete", response, True), stream=True)
    assert got.finish_reason == finish
    assert got.message.tool_calls[0].args == '{"a": "cut'
