"""A streamed answer through each adapter's HTTP path, however the bytes come.

Every recorded stream of the four APIs, re-framed the ways the SSE standard allows and
servers and proxies do (LF, CRLF or CR line endings, mixed; comments, `id:` / `retry:` and
unknown fields; a byte order mark; each JSON payload over several `data:` lines; events of
unknown names; blocks without data) and cut into chunks anywhere (inside a multi-byte UTF-8
character, between `\\r` and `\\n`, every byte its own chunk), gives the same deltas and
final response as the stream in one piece; the deltas add up to that response. A stream cut
off anywhere is a retryable `ProviderError` or the whole answer, never another exception.
A stream that is not one (an HTML page, a JSON body, an error object, nothing but comments)
is read or named for what it is; an event stream is UTF-8 whatever charset its header says.
"""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from golem.errors import ProviderError, ResponseFormatError
from golem.model import Delta, ModelResponse
from tests.support.adapters import MODELS, assert_deltas_add_up, cut, final, send
from tests.support.recordings import available
from tests.support.streams import (
    ARGS,
    BODIES,
    OVER_STREAMS,
    STREAMS,
    TEXT,
    UNICODE_STREAMS,
    plain,
    send_with_headers,
    stream_of,
    stream_through,
)
from tests.support.unknown import SETTINGS, UNKNOWN

PER_STREAM = settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
"""Examples per recorded stream."""

_NEWLINES = ("\n", "\r\n", "\r")


_DATA_PREFIXES = ("data: ", "data:", "data:  ")


_NOISE_LINES = (
    ": keep-alive",
    ":",
    "id: 42",
    "id",
    "retry: 3000",
    "retry: soon",
    f"{UNKNOWN}: é😀",
    UNKNOWN,
    " data: not a data line (the field name starts with a space)",
    "Data: not a data line either (names are case-sensitive)",
)


def _unknown_event(api: str) -> tuple[str, str]:
    """An event of a name the API does not use, carrying data of a type it does not know."""
    data = {
        "anthropic": {"type": UNKNOWN, "value": "é"},
        "openai-responses": {"type": f"response.{UNKNOWN}", "sequence_number": 0},
        "openai-chat": {"id": "x", "object": UNKNOWN, "choices": []},
        "gemini": {UNKNOWN: "é"},
    }[api]
    return UNKNOWN, json.dumps(data, ensure_ascii=False)


@st.composite
def framed(draw: st.DrawFn, api: str, events: list[tuple[str, str]]) -> bytes:
    """`events` as the bytes of an SSE body, framed as the standard allows (the choices
    are a drawn seed's: a long stream has thousands)."""
    rnd = random.Random(draw(st.integers(0, 2**32)))
    lines: list[str] = []

    def noise() -> None:
        for _ in range(rnd.choice((0, 0, 0, 1, 2))):
            lines.append(rnd.choice(_NOISE_LINES))

    for event, data in events:
        if rnd.random() < 0.1:
            name, payload = _unknown_event(api)
            lines += [f"event: {name}", f"data: {payload}", ""]
        if rnd.random() < 0.1:
            lines += [rnd.choice(_NOISE_LINES), ""]  # a block without data dispatches nothing
        noise()
        if event:
            lines.append(f"event:{rnd.choice(('', ' '))}{event}")
        payload = data
        if rnd.random() < 0.5 and data.lstrip().startswith("{"):
            payload = json.dumps(json.loads(data), indent=1, ensure_ascii=False)
        for line in payload.split("\n"):
            lines.append(rnd.choice(_DATA_PREFIXES) + line)
            noise()
        lines.append("")
    out: list[str] = ["\ufeff"] if rnd.random() < 0.5 else []
    ending = ""
    for line in lines:
        # a "\r" then an empty line ended by "\n" would read as one "\r\n"
        ending = rnd.choice(_NEWLINES[1:] if ending == "\r" and not line else _NEWLINES)
        out += (line, ending)
    return "".join(out).encode()


def _hard_places(raw: bytes) -> list[int]:
    """Offsets inside a multi-byte UTF-8 character or between `\\r` and `\\n`."""
    return [
        i
        for i in range(1, len(raw))
        if 0x80 <= raw[i] < 0xC0 or (raw[i - 1] == 0x0D and raw[i] == 0x0A)
    ]


@st.composite
def cut_points(draw: st.DrawFn, raw: bytes) -> list[int]:
    """Up to 30 offsets to cut `raw` at, half of them (when it has any) hard places."""
    rnd = random.Random(draw(st.integers(0, 2**32)))
    hard = _hard_places(raw)
    return [
        rnd.choice(hard) if hard and rnd.random() < 0.5 else rnd.randint(0, len(raw))
        for _ in range(draw(st.integers(0, 30)))
    ]


async def _outcome(api: str, chunks: list[bytes]) -> list[Delta | ModelResponse] | ProviderError:
    try:
        return await send(api, chunks, stream=True)
    except ProviderError as exc:
        return exc


_CHAT_TEXT = [
    ("", '{"choices":[{"index":0,"delta":{"content":"h\\u00e9 \\ud83d\\ude00"}}]}'),
    ("", '{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}'),
    ("", "[DONE]"),
]


def _blank_event_streams() -> dict[str, str]:
    """Each stream with an event whose data is empty (`data:` alone) after its first event."""
    out = {}
    for api, text in UNICODE_STREAMS.items():
        sep = "\r\n\r\n" if api == "gemini" else "\n\n"
        first, rest = text.split(sep, 1)
        out[api] = first + sep + "data:" + sep + "data: " + sep + rest
    return out




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


def test_there_are_recorded_streams_and_bodies_of_every_api() -> None:
    assert {api for api, _ in STREAMS} >= {"openai-chat"}
    if available():
        assert {api for api, _ in STREAMS} == set(MODELS)
        assert {api for api, _ in BODIES} == set(MODELS)


@OVER_STREAMS
@PER_STREAM
@given(data=st.data())
async def test_any_framing_and_chunking_of_a_stream_gives_the_same_result(
    api: str, events: list[tuple[str, str]], data: st.DataObject
) -> None:
    expected = await stream_of(api, events)
    raw = data.draw(framed(api, events))
    points = data.draw(cut_points(raw))
    assert await send(api, cut(raw, points), stream=True) == expected


@SETTINGS
@given(data=st.data())
async def test_every_byte_its_own_chunk_gives_the_same_result(data: st.DataObject) -> None:
    api, events = data.draw(st.sampled_from([s for s in STREAMS if len(plain(s[1])) < 6_000]))
    expected = await stream_of(api, events)
    raw = data.draw(framed(api, events))
    chunks = [raw[i : i + 1] for i in range(len(raw))]
    assert await send(api, chunks, stream=True) == expected


@OVER_STREAMS
@PER_STREAM
@given(data=st.data())
async def test_a_stream_framed_any_way_and_cut_off_anywhere_is_a_retryable_error_or_whole(
    api: str, events: list[tuple[str, str]], data: st.DataObject
) -> None:
    full = (await stream_of(api, events))[-1]
    assert isinstance(full, ModelResponse)
    raw = data.draw(framed(api, events))
    end = data.draw(st.integers(0, len(raw)))
    points = data.draw(cut_points(raw[:end]))
    out = await _outcome(api, cut(raw[:end], points))
    if isinstance(out, ProviderError):
        assert out.retryable, out
        return
    final = out[-1]
    assert isinstance(final, ModelResponse)
    assert final.message == full.message
    assert final.finish_reason == full.finish_reason


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


@pytest.mark.parametrize("api", sorted(MODELS))
async def test_multibyte_text_and_arguments_survive_a_cut_at_every_byte(api: str) -> None:
    # held before this change too (httpx decoded incrementally); kept as a guard now that
    # the SSE reader decodes the bytes itself
    raw = UNICODE_STREAMS[api].encode()
    headers = {"content-type": "text/event-stream"}
    whole = final(await send_with_headers(api, [raw], headers, stream=True))
    assert TEXT in whole.message.content
    for at in range(1, len(raw)):
        response = final(await send_with_headers(api, [raw[:at], raw[at:]], headers, stream=True))
        assert response.message.content == whole.message.content, at
        calls = [(c.name, c.args) for c in response.message.tool_calls]
        assert calls == [(c.name, c.args) for c in whole.message.tool_calls], cut


@pytest.mark.parametrize("api", sorted(MODELS))
@pytest.mark.parametrize("charset", ["iso-8859-1", "windows-1252"])
async def test_an_event_stream_is_utf8_whatever_charset_the_header_says(
    api: str, charset: str
) -> None:
    ctype = f"text/event-stream; charset={charset}"
    response = final(
        await send_with_headers(
            api, [UNICODE_STREAMS[api].encode()], {"content-type": ctype}, stream=True
        )
    )
    assert TEXT in response.message.content
    assert [json.loads(c.args) for c in response.message.tool_calls] == [json.loads(ARGS)]


@pytest.mark.parametrize("api", sorted(MODELS))
async def test_an_event_without_data_is_skipped(api: str) -> None:
    # a proxy's keep-alive `data:` line; the stream used to fail ("not JSON: ''")
    body = _blank_event_streams()[api]
    response = final(
        await send_with_headers(
            api, [body.encode()], {"content-type": "text/event-stream"}, stream=True
        )
    )
    assert TEXT in response.message.content


@pytest.mark.parametrize("api", sorted(MODELS))
async def test_an_html_page_answering_a_stream_is_named(api: str) -> None:
    # a proxy's or captive portal's page with status 200: read as an event stream it held no
    # event, and passed for a dropped connection ("stream ended before the response completed")
    page = b"<html><body>Please sign in to the network</body></html>"
    headers = {"content-type": "text/html; charset=utf-8"}
    with pytest.raises(ResponseFormatError, match=r"HTML page.*sign in") as caught:
        await send_with_headers(api, [page], headers, stream=True)
    assert not caught.value.retryable


async def test_a_lone_surrogate_in_a_stream_event_does_not_lose_the_stream() -> None:
    events = [
        '{"choices":[{"index":0,"delta":{"content":"a \\ud83d"}}]}',
        '{"choices":[{"index":0,"delta":{"content":" b"},"finish_reason":"stop"}]}',
        "[DONE]",
    ]
    body = "".join(f"data: {e}\n\n" for e in events)
    items = await send("openai-chat", body, stream=True, ctype="text/event-stream")
    final = items[-1]
    assert isinstance(final, ModelResponse)
    assert final.message.content == "a \ufffd b"


async def test_an_anthropic_message_answering_a_stream_is_replayed_as_deltas() -> None:
    message = {
        "type": "message",
        "model": "claude-x",
        "content": [
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "t1", "name": "f", "input": {"n": 2**60}},
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 3, "output_tokens": 4},
    }
    items = await send("anthropic", json.dumps(message), stream=True, ctype="application/json")
    final = items[-1]
    assert isinstance(final, ModelResponse)
    plain = await send("anthropic", json.dumps(message), stream=False, ctype="application/json")
    assert final == plain[0]
    text = "".join(i.content for i in items if isinstance(i, Delta))
    assert text == "Checking."
    assert final.finish_reason == "tool_call"


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
    assert_deltas_add_up(await stream_through(api, [plain(events)]))


@pytest.mark.parametrize(
    ("api", "events"), STARTED, ids=[f"{api}-{i}" for i, (api, _) in enumerate(STARTED)]
)
async def test_a_repeated_start_event_adds_nothing(api: str, events: list[tuple[str, str]]) -> None:
    once = await stream_through(api, [plain(events)])
    twice = await stream_through(api, [plain(_repeat_starts(events))])
    assert twice == once
