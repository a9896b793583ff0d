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

from golem.errors import Overloaded, ProviderError
from golem.model import Delta, ModelResponse
from tests.support.streams import plain, stream_through


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
