"""The unit test of golem.providers._sse: events cut at blank lines equal the line-by-line
decoding, however the bytes are chunked and whatever the line endings; one event is bounded."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from golem.errors import ResponseFormatError
from golem.providers._sse import iter_sse, sse_block, sse_events
from tests.support.adapters import Chunks, cut


async def _decode(chunks: list[bytes]) -> list[tuple[str, str]]:
    response = httpx.Response(200, stream=Chunks(chunks))
    return [item async for item in iter_sse(response)]


_line = st.one_of(
    st.builds(lambda v: f"data: {v}", st.text(alphabet='ab {}:é"', max_size=8)),
    st.builds(lambda v: f"data:{v}", st.text(alphabet="xy", max_size=3)),
    st.builds(lambda v: f"event: {v}", st.sampled_from(["message_start", "ping", "error"])),
    st.just(": keep-alive"),
    st.just("id: 7"),
    st.just("data"),
    st.just(""),
)


@settings(deadline=None)
@given(
    lines=st.lists(_line, max_size=25),
    newline=st.sampled_from(["\n", "\r\n", "\r"]),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=12),
    trailing=st.booleans(),
)
def test_chunked_decoding_equals_line_decoding(
    lines: list[str], newline: str, cuts: list[int], trailing: bool
) -> None:
    text = newline.join(lines) + (newline * 2 if trailing else "")
    # splitlines, as the callers of sse_events do: "a\n".split("\n") would add a blank line
    expected = list(sse_events(text.replace("\r\n", "\n").replace("\r", "\n").splitlines()))
    got = asyncio.run(_decode(cut(text.encode(), cuts)))
    assert got == expected


def test_a_multibyte_character_split_across_chunks_survives() -> None:
    raw = 'event: x\ndata: {"t": "é€"}\n\n'.encode()
    cut = raw.index("€".encode()) + 1
    assert asyncio.run(_decode([raw[:cut], raw[cut:]])) == [("x", '{"t": "é€"}')]


def test_block_forms() -> None:
    assert sse_block("data: {}") == ("", "{}")
    assert sse_block("data:{}") == ("", "{}")
    assert sse_block("event: ping\ndata: {}") == ("ping", "{}")
    assert sse_block("data: a\ndata: b") == ("", "a\nb")
    assert sse_block(": comment") is None
    assert sse_block("event: only") is None


def test_the_last_event_without_its_blank_line() -> None:
    # kept when whole, dropped when the stream cut its JSON off (a dropped connection)
    assert asyncio.run(_decode([b'data: {"a": 1}'])) == [("", '{"a": 1}')]
    assert asyncio.run(_decode([b"data: [DONE]"])) == [("", "[DONE]")]
    assert asyncio.run(_decode([b'data: {"a": '])) == []
    assert asyncio.run(_decode([b"data: "])) == []
    # a stream that ends in "\r\r" ended its last event properly
    assert asyncio.run(_decode([b"data: \r\r"])) == [("", "")]
    assert list(sse_events(['data: {"a": '])) == []


async def test_an_event_longer_than_the_bound_is_refused_unread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("golem.providers._sse.MAX_BODY", 100_000)  # 256 MiB unpatched
    read = 0

    async def endless() -> AsyncIterator[bytes]:
        nonlocal read
        yield b"data: {"
        while read < 64 * 100_000:  # a bound, should the decoder read on
            read += 4096
            yield b"a" * 4096

    with pytest.raises(ResponseFormatError, match="stream event longer than 100000 bytes"):
        async for _ in iter_sse(httpx.Response(200, content=endless()), "openai"):
            pass
    assert read <= 100_000 + 2 * 4096
