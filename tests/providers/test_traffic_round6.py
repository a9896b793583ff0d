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

from golem import dumps_history, loads_history
from golem.errors import ProviderError
from golem.messages import Message
from golem.model import ModelRequest, ModelResponse
from tests.support.adapters import MODELS, final, send
from tests.support.recordings import all_interactions, needs_recordings

# ------------------------------------------------------------------ Anthropic rate-limit resets


# ------------------------------------------------------------------ Gemini stops that are no answer


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


# ------------------------------------------------------------------ stops without cause, any API


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
