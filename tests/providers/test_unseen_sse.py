"""Wire-format robustness of the streamed answers, through each adapter's HTTP path.

A recorded stream is re-framed the ways the SSE standard allows and servers and proxies do:
CRLF or CR line endings, `:` comment lines, a byte order mark at the start, `event:` lines
with no data, each JSON payload spread over several `data:` lines, and the bytes cut at
arbitrary points (inside a line ending or inside a multi-byte UTF-8 character). Every
framing of the same events gives the same deltas and the same final response.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from golem.model import ModelResponse
from tests.support.adapters import MODELS, cut
from tests.support.recordings import available
from tests.support.streams import OVER_STREAMS, STREAMS, frame, plain, stream_through

FRAMINGS = st.fixed_dictionaries(
    {
        "newline": st.sampled_from(["\n", "\r\n", "\r"]),
        "bom": st.booleans(),
        "comments": st.booleans(),
        "split_data": st.booleans(),
        "bare_events": st.booleans(),
    }
)


@OVER_STREAMS
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    framing=FRAMINGS,
    points=st.lists(st.integers(min_value=0, max_value=10**7), max_size=40),
)
async def test_any_framing_and_chunking_of_a_stream_gives_the_same_result(
    api: str, events: list[tuple[str, str]], framing: dict[str, Any], points: list[int]
) -> None:
    expected = await stream_through(api, [plain(events)])
    raw = frame(events, **framing).encode()
    assert await stream_through(api, cut(raw, points)) == expected


def test_there_are_streams_of_every_api() -> None:
    apis = {api for api, _ in STREAMS}
    assert "openai-chat" in apis
    if available():
        assert apis == set(MODELS)


_CHAT_TEXT = [
    ("", '{"choices":[{"index":0,"delta":{"content":"h\\u00e9 \\ud83d\\ude00"}}]}'),
    ("", '{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}'),
    ("", "[DONE]"),
]


async def test_a_byte_order_mark_before_the_first_event_is_skipped() -> None:
    raw = "\ufeff".encode() + plain(_CHAT_TEXT)
    out = await stream_through("openai-chat", cut(raw, [1, 2]))  # the BOM cut in three
    final = out[-1]
    assert isinstance(final, ModelResponse)
    assert final.message.content == "hé 😀"
    assert final.finish_reason == "stop"


async def test_a_non_bmp_character_cut_at_every_byte_still_arrives_whole() -> None:
    raw = plain(
        [("", '{"choices":[{"index":0,"delta":{"content":"a😀b"},"finish_reason":"stop"}]}')]
    )
    at = raw.index("😀".encode())
    for k in range(1, 4):
        out = await stream_through("openai-chat", cut(raw, [at + k]))
        assert out[-1].message.content == "a😀b"  # type: ignore[union-attr]


async def test_invalid_utf8_in_a_stream_becomes_replacement_characters() -> None:
    raw = b'data: {"choices":[{"index":0,"delta":{"content":"a\xff\xfeb"},"finish_reason":"stop"}]}\n\n'
    out = await stream_through("openai-chat", [raw])
    assert out[-1].message.content == "a\ufffd\ufffdb"  # type: ignore[union-attr]


async def test_a_very_large_event_in_small_chunks_arrives_whole() -> None:
    text = "x" * 2_000_000 + "é"
    data = json.dumps({"choices": [{"index": 0, "delta": {"content": text}}]}, ensure_ascii=False)
    raw = plain([("", data), *_CHAT_TEXT[1:]])
    chunks = [raw[i : i + 4096] for i in range(0, len(raw), 4096)]
    out = await stream_through("openai-chat", chunks)
    assert out[-1].message.content == text  # type: ignore[union-attr]
