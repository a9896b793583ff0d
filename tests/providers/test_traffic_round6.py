"""The sixth traffic round: rate-limit resets, stops and streams the recordings do not show.

Each answer is shaped as the provider's API reference documents it and replayed through the
adapter's HTTP path (streamed and not). What each test found, before its fix, is in its
docstring.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from golem import Agent, dumps_history, loads_history
from golem.errors import ProviderError, ResponseFormatError, RunError
from golem.messages import Message
from golem.model import ModelRequest, ModelResponse
from tests.support.adapters import MODELS, final, send
from tests.support.recordings import all_interactions, needs_recordings

# ------------------------------------------------------------------ Anthropic rate-limit resets


# ------------------------------------------------------------------ Gemini stops that are no answer


async def _gemini(body: Any, *, stream: bool) -> ModelResponse:
    text = json.dumps(body)
    return final(await send("gemini", f"data: {text}\n\n" if stream else text, stream=stream))


_USAGE = {"promptTokenCount": 11, "candidatesTokenCount": 0, "totalTokenCount": 11}


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


# ------------------------------------------------------------------ Chat: legacy calls, choices


def _sse(events: list[Any], named: bool = False) -> str:
    out = []
    for e in events:
        data = e if isinstance(e, str) else json.dumps(e)
        name = f"event: {e['type']}\n" if named and not isinstance(e, str) else ""
        out.append(f"{name}data: {data}\n\n")
    return "".join(out)


def _chunk(delta: dict[str, Any], finish: str | None = None, index: int = 0) -> dict[str, Any]:
    return {
        "id": "c",
        "object": "chat.completion.chunk",
        "model": "gpt-4o",
        "choices": [{"index": index, "delta": delta, "finish_reason": finish}],
    }


async def test_the_chat_answer_is_the_choice_of_index_0_whatever_the_order() -> None:
    """Before: a body with several choices (a server that ignores the absent `n`, or was
    sent one through `extra_body`) was read from its first entry, whatever its `index`; the
    stream read index 0."""
    choices = [
        {
            "index": 1,
            "message": {"role": "assistant", "content": "second"},
            "finish_reason": "stop",
        },
        {"index": 0, "message": {"role": "assistant", "content": "first"}, "finish_reason": "stop"},
    ]
    body = {"id": "c", "object": "chat.completion", "model": "m", "choices": choices}
    assert final(await send("openai-chat", json.dumps(body), stream=False)).message.content == (
        "first"
    )
    stream = _sse(
        [
            _chunk({"role": "assistant", "content": "sec"}, index=1),
            _chunk({"role": "assistant", "content": "fir"}),
            _chunk({"content": "ond"}, index=1),
            _chunk({"content": "st"}),
            _chunk({}, "stop", index=1),
            _chunk({}, "stop"),
            "[DONE]",
        ]
    )
    assert final(await send("openai-chat", stream, stream=True)).message.content == "first"


# ------------------------------------------------------------------ Gemini: several candidates


def _candidate(text: str, index: int | None, finish: str | None = "STOP") -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": [{"text": text}]}}
    if index is not None:
        candidate["index"] = index
    if finish:
        candidate["finishReason"] = finish
    return candidate


@pytest.mark.parametrize("stream", [False, True])
async def test_the_gemini_answer_is_the_candidate_of_index_0(stream: bool) -> None:
    """Before: the first entry of `candidates` was read whatever its `index`: with
    `candidateCount` > 1 a stream event carrying only candidate 1 mixed its text into the
    answer, and a body listing candidate 1 first answered with it."""
    if stream:
        events = [
            {"candidates": [_candidate("Sec", 1, None)]},
            {"candidates": [_candidate("Fir", None, None)]},
            {"candidates": [_candidate("ond", 1), _candidate("st", 0)]},
        ]
        body = "".join(f"data: {json.dumps(e)}\n\n" for e in events)
    else:
        body = json.dumps({"candidates": [_candidate("Second", 1), _candidate("First", None)]})
    items = await send("gemini", body, stream=stream)
    assert final(items).message.content == "First"
    if stream:
        assert "".join(i.content for i in items if not isinstance(i, ModelResponse)) == "First"


# ------------------------------------------------------------------ Responses: items only when done


_R = {"id": "resp_1", "object": "response", "model": "gpt-5"}
_USAGE_R = {"input_tokens": 5, "output_tokens": 3}


@pytest.mark.parametrize("stream", [False, True])
async def test_an_empty_responses_answer_incomplete_for_an_unknown_reason_is_no_answer(
    stream: bool,
) -> None:
    """Before: an answer `incomplete` for a reason golem does not know, with no output, was
    an empty answer (`finish_reason == "other"`)."""
    response = {
        **_R,
        "status": "incomplete",
        "incomplete_details": {"reason": "brand_new"},
        "output": [],
        "usage": _USAGE_R,
    }
    body = (
        _sse([{"type": "response.incomplete", "response": response}], named=True)
        if stream
        else json.dumps(response)
    )
    with pytest.raises(ResponseFormatError, match="brand_new") as caught:
        await send("openai-responses", body, stream=stream)
    assert caught.value.retryable
    assert caught.value.usage is not None
    assert caught.value.usage.output_tokens == 3


# ------------------------------------------------------------------ stops without cause, any API


def _chat_stop(reason: str, content: str, stream: bool) -> str:
    if stream:
        return _sse(
            [
                _chunk({"role": "assistant", "content": content}),
                _chunk({}, reason),
                {
                    **_chunk({}),
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
    return _sse(events, named=True)


_STOPS = {"openai-chat": _chat_stop, "anthropic": _anthropic_stop}


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


# ------------------------------------------------------------------ recorded answers, sent back


async def _request_bytes(api: str, messages: list[Message]) -> bytes:
    """The body the `api` adapter sends for `messages` (the server's answer is not read)."""
    sent: list[bytes] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request.content)
        return httpx.Response(400, json={"error": {"message": "stop here"}})

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        with pytest.raises(ProviderError):
            await MODELS[api](client).generate(ModelRequest(messages))
    return sent[0]


@needs_recordings
@pytest.mark.parametrize("api", list(MODELS))
async def test_every_recorded_answer_goes_back_the_same_after_a_history_round_trip(
    api: str,
) -> None:
    """Each recorded answer, streamed or not, read into a history, written as JSON and read
    back, makes the next request byte for byte what the history before the round trip makes:
    nothing a provider needs back is lost or respelled by the history codec."""
    checked = 0
    for it in all_interactions(api):
        if it.status != 200:
            continue
        try:
            items = await send(api, it.body, stream=it.is_stream)
        except ProviderError:
            continue  # a recorded answer that is an error (Responses `failed`, ...)
        history = [Message("user", "hi"), final(items).message, Message("user", "go on")]
        again = loads_history(dumps_history(history))
        assert await _request_bytes(api, again) == await _request_bytes(api, history), (
            it.cassette,
            it.index,
        )
        checked += 1
    assert checked > 10


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
