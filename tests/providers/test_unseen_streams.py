"""Streams that end or fail in ways the recordings do not show, through each adapter.

- A stream cut at any byte (the server closed the connection cleanly, mid-event) is a
  dropped connection: a retryable `ProviderError`, or, when the cut falls after the answer
  completed, the answer itself. A cut inside an event's JSON used to surface as a
  non-retryable `ResponseFormatError` ("a stream event that is not JSON").
- An SSE `error` event whose data is not OpenAI's `{"error": ...}` shape (plain text, or a
  bare `{"message": ...}`) fails the Chat Completions stream with that message; it was
  skipped, and the stream reported as ended early.
- A streamed refusal streams as text, as the final response carries it.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from golem.errors import Overloaded, ProviderError
from golem.model import Delta, ModelResponse
from tests.support.adapters import accumulated, plain_calls
from tests.support.streams import OVER_STREAMS, STREAMS, plain, stream_through


@OVER_STREAMS
@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(at=st.floats(min_value=0.0, max_value=1.0, exclude_max=True))
async def test_a_stream_cut_anywhere_is_a_retryable_error_or_the_whole_answer(
    api: str, events: list[tuple[str, str]], at: float
) -> None:
    raw = plain(events)
    full = (await stream_through(api, [raw]))[-1]
    assert isinstance(full, ModelResponse)
    try:
        out = await stream_through(api, [raw[: int(len(raw) * at)]])
    except ProviderError as exc:
        failure: ProviderError | None = exc
    else:
        failure = None
    if failure is not None:
        assert failure.retryable, failure
        return
    final = out[-1]
    assert isinstance(final, ModelResponse)
    assert final.message == full.message
    assert final.finish_reason == full.finish_reason


def _sse(*events: tuple[str, str]) -> list[bytes]:
    return [plain(list(events))]


@pytest.mark.parametrize(
    "data",
    ["model crashed", '{"message": "model crashed", "code": 500}', '"model crashed"'],
)
async def test_a_chat_error_event_of_any_shape_fails_the_stream(data: str) -> None:
    head = ("", '{"choices":[{"index":0,"delta":{"content":"par"}}]}')
    with pytest.raises(ProviderError, match="model crashed") as caught:
        await stream_through("openai-chat", _sse(head, ("error", data)))
    if "500" in data:
        assert isinstance(caught.value, Overloaded)


async def test_a_streamed_chat_refusal_streams_as_text() -> None:
    chunks = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "refusal": ""}}]},
        {"choices": [{"index": 0, "delta": {"refusal": "I can't "}}]},
        {"choices": [{"index": 0, "delta": {"refusal": "help with that."}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    ]
    out = await stream_through("openai-chat", _sse(*[("", json.dumps(c)) for c in chunks]))
    final = out[-1]
    assert isinstance(final, ModelResponse)
    assert final.finish_reason == "content_filter"
    streamed = "".join(d.content for d in out if isinstance(d, Delta))
    assert streamed == final.message.content == "I can't help with that."


@pytest.mark.parametrize("api", ["openai-chat", "anthropic", "gemini", "openai-responses"])
async def test_a_stream_of_nothing_but_comments_and_pings_ended_early(api: str) -> None:
    raw = b": hello\n\nevent: ping\n\n: still there\n\n"
    with pytest.raises(ProviderError, match="ended before") as caught:
        await stream_through(api, [raw])
    assert caught.value.retryable


@OVER_STREAMS
async def test_the_deltas_of_a_stream_add_up_to_its_final_response(
    api: str, events: list[tuple[str, str]]
) -> None:
    items = await stream_through(api, [plain(events)])
    final = items[-1]
    assert isinstance(final, ModelResponse)
    deltas = [d for d in items if isinstance(d, Delta)]
    assert "".join(d.content for d in deltas) == final.message.content
    assert accumulated(items) == plain_calls(final)
    thinking: dict[int, str] = {}
    for d in deltas:
        for t in d.thinking:
            thinking[t.index] = thinking.get(t.index, "") + t.text
    assert [thinking.get(i, "") for i in range(len(final.message.thinking))] == [
        t.text for t in final.message.thinking
    ]


def _repeat_starts(events: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """`events` with every block / item start sent twice."""
    out = []
    for event, data in events:
        out.append((event, data))
        if '"content_block_start"' in data or '"response.output_item.added"' in data:
            out.append((event, data))
    return out


STARTED = [(api, events) for api, events in STREAMS if api in ("anthropic", "openai-responses")]
"""The recorded streams of the APIs that announce each block / item with a start event."""


@pytest.mark.parametrize(
    ("api", "events"), STARTED, ids=[f"{api}-{i}" for i, (api, _) in enumerate(STARTED)]
)
async def test_a_repeated_start_event_adds_nothing(api: str, events: list[tuple[str, str]]) -> None:
    once = await stream_through(api, [plain(events)])
    twice = await stream_through(api, [plain(_repeat_starts(events))])
    assert twice == once
