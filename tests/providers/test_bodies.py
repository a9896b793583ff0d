"""An answer's body however it comes, through each adapter's HTTP path: UTF-8 whatever
charset its header says, a byte order mark skipped, a lone surrogate escape read as U+FFFD
(other bad JSON is still a `ResponseFormatError`), a body that does not decompress or is
empty (retryable), an answer cut off anywhere (a named error, or whole), and unknown fields
and item types in any object of every recorded answer (the same answer; the unknown kept
only inside the provider blocks golem keeps verbatim).
"""

from __future__ import annotations

import gzip
import json

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from golem.errors import GolemError, ProviderError, ResponseFormatError
from golem.model import ModelResponse
from tests.support.adapters import MODELS, final, send, text_answer
from tests.support.events import answer
from tests.support.recordings import needs_recordings
from tests.support.streams import BODIES, TEXT, UNICODE_STREAMS, send_with_headers
from tests.support.unknown import (
    SETTINGS,
    comparable,
    essentials,
    with_unknown_fields,
    with_unknown_items,
)


def _json(api: str) -> bytes:
    return json.dumps(text_answer(api, TEXT), ensure_ascii=False).encode()


LONE = "half \\ud83d of an emoji, \\ude00 and a whole \\ud83d\\ude00"


def _text_body(api: str, text_json: str) -> str:
    """A plain answer of `api` whose text is the JSON string literal body `text_json`."""
    return json.dumps(answer(api, "@@TEXT@@")).replace("@@TEXT@@", text_json)


@pytest.mark.parametrize("api", sorted(MODELS))
@pytest.mark.parametrize("charset", ["iso-8859-1", "latin-1", "windows-1252", "ascii"])
async def test_a_json_body_is_utf8_whatever_charset_the_header_says(api: str, charset: str) -> None:
    ctype = f"application/json; charset={charset}"
    response = final(
        await send_with_headers(api, [_json(api)], {"content-type": ctype}, stream=False)
    )
    assert response.message.content == TEXT


@pytest.mark.parametrize("api", sorted(MODELS))
@pytest.mark.parametrize("stream", [False, True])
async def test_a_byte_order_mark_before_a_json_body_is_skipped(api: str, stream: bool) -> None:
    body = b"\xef\xbb\xbf" + _json(api)
    response = final(
        await send_with_headers(api, [body], {"content-type": "application/json"}, stream=stream)
    )
    assert response.message.content == TEXT


@pytest.mark.parametrize("api", sorted(MODELS))
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("status", [200, 503])
async def test_a_body_that_does_not_decompress_is_a_retryable_format_error(
    api: str, stream: bool, status: int
) -> None:
    ctype = "text/event-stream" if stream else "application/json"
    headers = {"content-type": ctype, "content-encoding": "gzip"}
    with pytest.raises(ResponseFormatError, match="could not be decoded") as caught:
        await send_with_headers(api, [b"\x1f\x8bgarbage"], headers, stream=stream, status=status)
    assert caught.value.retryable


@pytest.mark.parametrize("api", sorted(MODELS))
async def test_a_stream_that_stops_decompressing_midway_is_a_named_error(api: str) -> None:
    whole = gzip.compress(UNICODE_STREAMS[api].encode())
    pieces = [whole[: len(whole) // 2], b"\x00\xff" * 8]
    headers = {"content-type": "text/event-stream", "content-encoding": "gzip"}
    with pytest.raises(GolemError):
        await send_with_headers(api, pieces, headers, stream=True)


@pytest.mark.parametrize("api", sorted(MODELS))
@pytest.mark.parametrize("body", [b"", b"  \r\n"])
async def test_an_empty_200_body_is_a_retryable_format_error(api: str, body: bytes) -> None:
    # it was "returned a body that is not JSON: ''", not retryable
    with pytest.raises(ResponseFormatError, match="a body that is empty") as caught:
        await send_with_headers(api, [body], {"content-type": "application/json"}, stream=False)
    assert caught.value.retryable


@pytest.mark.parametrize("api", list(MODELS))
async def test_a_lone_surrogate_escape_becomes_a_replacement_character(api: str) -> None:
    items = await send(api, _text_body(api, LONE), stream=False, ctype="application/json")
    final = items[-1]
    assert isinstance(final, ModelResponse)
    assert final.message.content == "half \ufffd of an emoji, \ufffd and a whole 😀"
    final.message.content.encode("utf-8")  # sendable back: no surrogate left


@pytest.mark.parametrize(
    "body", ['{"t": "\\ud800", "n": NaN}', '{"t": "\\ud800"', '["\\ud800"]', "\\ud800"]
)
async def test_other_bad_json_with_a_surrogate_is_still_a_format_error(body: str) -> None:
    with pytest.raises(ResponseFormatError):
        await send("anthropic", body, stream=False, ctype="application/json")


@needs_recordings
@SETTINGS
@given(data=st.data())
async def test_an_answer_cut_off_anywhere_is_a_named_error_or_whole(data: st.DataObject) -> None:
    api, body = data.draw(st.sampled_from(BODIES))
    try:
        (expected,) = await send(api, body, stream=False)
    except GolemError:
        assume(False)
    raw = body.encode()
    end = data.draw(st.integers(0, len(raw)))
    try:
        (got,) = await send(api, [raw[:end]], stream=False)
    except ProviderError:
        return  # named (an empty body is retryable; a cut one is "not JSON")
    assert isinstance(got, ModelResponse)
    assert got == expected


@needs_recordings
@SETTINGS
@given(data=st.data())
async def test_unknown_fields_in_answers_are_tolerated(data: st.DataObject) -> None:
    api, body = data.draw(st.sampled_from(BODIES))
    try:
        expected = await send(api, body, stream=False)
    except GolemError:
        assume(False)  # a recorded answer the adapter refuses: not this property's concern
    damaged = json.dumps(with_unknown_fields(json.loads(body), data.draw), ensure_ascii=False)
    got = await send(api, damaged, stream=False)
    assert comparable(got) == comparable(expected)


@needs_recordings
@SETTINGS
@given(data=st.data())
async def test_unknown_item_types_in_answers_are_tolerated(data: st.DataObject) -> None:
    api, body = data.draw(st.sampled_from(BODIES))
    try:
        (expected,) = await send(api, body, stream=False)
    except GolemError:
        assume(False)
    assert isinstance(expected, ModelResponse)
    damaged = with_unknown_items(json.loads(body), api, data.draw)
    (got,) = await send(api, json.dumps(damaged, ensure_ascii=False), stream=False)
    assert isinstance(got, ModelResponse)
    assert essentials(got) == essentials(expected)
