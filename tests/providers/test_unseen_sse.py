"""Wire-format robustness of the streamed answers, through each adapter's HTTP path.

A recorded stream is re-framed the ways the SSE standard allows and servers and proxies do:
CRLF or CR line endings, `:` comment lines, a byte order mark at the start, `event:` lines
with no data, each JSON payload spread over several `data:` lines, and the bytes cut at
arbitrary points (inside a line ending or inside a multi-byte UTF-8 character). Every
framing of the same events gives the same deltas and the same final response.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from golem.messages import Message
from golem.model import Delta, ModelRequest, ModelResponse
from golem.providers.anthropic import AnthropicModel
from golem.providers.gemini import GeminiModel
from golem.providers.openai import OpenAIChatModel
from golem.providers.openai._responses import OpenAIResponsesModel
from tests.providers._recordings import all_interactions, available

REQUEST = ModelRequest([Message("user", "hi")])
FIXTURES = Path(__file__).parent / "openai_fixtures"

MODELS: dict[str, Callable[[httpx.AsyncClient], Any]] = {
    "openai-chat": lambda c: OpenAIChatModel("gpt-4o", api_key="k", http_client=c),
    "openai-responses": lambda c: OpenAIResponsesModel("gpt-4o", api_key="k", http_client=c),
    "anthropic": lambda c: AnthropicModel("claude-x", api_key="k", http_client=c),
    "gemini": lambda c: GeminiModel("gemini-x", api_key="k", http_client=c),
}


class Chunks(httpx.AsyncByteStream):
    """A response body delivered in the given pieces."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk


async def stream_through(api: str, chunks: list[bytes]) -> list[Delta | ModelResponse]:
    """What `generate_stream` yields when the server sends `chunks` as its SSE body."""

    def answer(request: httpx.Request) -> httpx.Response:
        headers = {"content-type": "text/event-stream"}
        return httpx.Response(200, headers=headers, stream=Chunks(chunks))

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        model = MODELS[api](client)
        return [item async for item in model.generate_stream(REQUEST)]


def events_of(body: str) -> list[tuple[str, str]]:
    """The `(event, data)` pairs of a recorded SSE body (LF or CRLF, one `data:` line each)."""
    out: list[tuple[str, str]] = []
    for block in body.replace("\r\n", "\n").split("\n\n"):
        event, data = "", []
        for line in block.split("\n"):
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
        if data:
            out.append((event, "\n".join(data)))
    return out


def _streams() -> list[tuple[str, list[tuple[str, str]]]]:
    out = []
    for path in sorted(FIXTURES.glob("stream_*.sse")):
        if path.name not in ("stream_truncated.sse", "stream_error_event.sse"):
            out.append(("openai-chat", events_of(path.read_text())))
    for api in ("openai-responses", "anthropic", "gemini"):
        if available(api):
            recorded = [it for it in all_interactions(api) if it.is_stream and it.status == 200]
            out.extend((api, events_of(it.body)) for it in recorded[:4])
    return out


STREAMS = _streams()


def frame(
    events: list[tuple[str, str]],
    *,
    newline: str,
    bom: bool,
    comments: bool,
    split_data: bool,
    bare_events: bool,
) -> str:
    """The SSE text of `events`, framed as the flags say."""
    lines: list[str] = []
    if comments:
        lines += [": connected", ""]
    for event, data in events:
        if bare_events:
            lines += ["event: keepalive", ""]  # no data: dispatches nothing
        if event:
            lines.append(f"event: {event}")
        if comments:
            lines.append(": in the middle of an event")
        payload = data
        if split_data and data.lstrip().startswith("{"):
            payload = json.dumps(json.loads(data), indent=1, ensure_ascii=False)
        lines += [f"data: {line}" for line in payload.split("\n")]
        lines.append("")
    text = newline.join(lines) + newline
    return ("\ufeff" if bom else "") + text


def cut(raw: bytes, points: list[int]) -> list[bytes]:
    """`raw` in pieces, cut at `points` (taken modulo its length)."""
    cuts = sorted({p % (len(raw) + 1) for p in points})
    out, last = [], 0
    for p in [*cuts, len(raw)]:
        out.append(raw[last:p])
        last = p
    return out


def plain(events: list[tuple[str, str]]) -> bytes:
    return frame(
        events, newline="\n", bom=False, comments=False, split_data=False, bare_events=False
    ).encode()


@pytest.mark.parametrize(
    ("api", "events"), STREAMS, ids=[f"{api}-{i}" for i, (api, _) in enumerate(STREAMS)]
)
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    newline=st.sampled_from(["\n", "\r\n", "\r"]),
    bom=st.booleans(),
    comments=st.booleans(),
    split_data=st.booleans(),
    bare_events=st.booleans(),
    points=st.lists(st.integers(min_value=0, max_value=10**7), max_size=40),
)
async def test_any_framing_and_chunking_of_a_stream_gives_the_same_result(
    api: str,
    events: list[tuple[str, str]],
    newline: str,
    bom: bool,
    comments: bool,
    split_data: bool,
    bare_events: bool,
    points: list[int],
) -> None:
    expected = await stream_through(api, [plain(events)])
    raw = frame(
        events,
        newline=newline,
        bom=bom,
        comments=comments,
        split_data=split_data,
        bare_events=bare_events,
    ).encode()
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
