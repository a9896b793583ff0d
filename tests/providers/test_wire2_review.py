"""Bugs found reviewing the third traffic round's provider changes (ADR 0066).

- A streamed Chat audio answer arrives as base64 chunks each encoded on its own (each
  padded); they were joined as one text, which is no base64 when a chunk was padded: the
  whole answer was lost to a ResponseFormatError.
- A Gemini stream event with `"error": null` beside its answer failed the stream as an
  error (the unstreamed path already read only an error object as one).
- A Responses stream whose terminal event has an empty `output` list took it as the answer
  (empty) although its items had arrived in `response.output_item.done` events; done items
  without `output_index` overwrote each other.
- A usage count written with leading zeros or padded with spaces past 19 characters
  (`"00000000000000000012"`) was read as the bound, 2**53 - 1.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from golem.messages import Part
from golem.providers._jsonio import token_count
from tests.support.adapters import final, send
from tests.support.streams import plain


def _chat_chunk(delta: dict[str, Any], finish: str | None = None) -> tuple[str, str]:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return "", json.dumps({"id": "x", "model": "m", "choices": [choice]})


@given(st.lists(st.binary(min_size=1, max_size=12), min_size=1, max_size=6))
async def test_streamed_audio_chunks_each_encoded_on_their_own_arrive_whole(
    chunks: list[bytes],
) -> None:
    events = [_chat_chunk({"role": "assistant", "audio": {"id": "a1", "transcript": "hi"}})]
    events += [_chat_chunk({"audio": {"data": base64.b64encode(c).decode()}}) for c in chunks]
    events += [_chat_chunk({"audio": {"expires_at": 1}}, "stop"), ("", "[DONE]")]
    response = final(await send("openai-chat", [plain(events)], stream=True))
    (part,) = response.message.parts
    assert part.data == b"".join(chunks)


@given(st.binary(min_size=1, max_size=40), st.lists(st.integers(0, 60), max_size=5))
async def test_audio_base64_split_anywhere_still_arrives_whole(
    audio: bytes, cuts: list[int]
) -> None:
    text = base64.b64encode(audio).decode()
    points = sorted({c % (len(text) + 1) for c in cuts})
    pieces = [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]
    events = [_chat_chunk({"audio": {"data": p}}) for p in pieces if p]
    events += [_chat_chunk({"audio": {"transcript": "hi"}}, "stop"), ("", "[DONE]")]
    response = final(await send("openai-chat", [plain(events)], stream=True))
    assert response.message.parts == [
        Part("audio", data=audio, media_type=response.message.parts[0].media_type)
    ]


@pytest.mark.parametrize(
    ("value", "count"),
    [
        ("00000000000000000012", 12),
        ("   12                 ", 12),
        ("0" * 40, 0),
        ("9" * 20, 2**53 - 1),
    ],
)
def test_a_count_in_digits_is_read_by_its_magnitude(value: str, count: int) -> None:
    assert token_count(value) == count
