"""What an answer's content becomes, through each adapter's HTTP path: Chat Completions
audio (its transcript as text, the audio as a part; streamed chunks each base64 on its own),
images a compatible server answers with (kept as parts; media golem cannot read is a named
error), Gemini parts of a kind golem does not know and function responses (kept where they
sat), signatures on empty text parts (kept), the answer of choice / candidate index 0
whatever the order.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from golem.errors import ResponseFormatError
from golem.messages import Message, Part, ThinkingBlock
from golem.model import Delta, ModelRequest, ModelResponse
from tests.support.adapters import body_of, final, send
from tests.support.events import chat_body_of, chat_chunk, chat_chunk_event, gemini_body_of, sse
from tests.support.streams import plain

WAV = b"RIFF\x24\x00\x00\x00WAVEfmt \x10\x00\x00\x00"


PNG = b"\x89PNG\r\n\x1a\n fake"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _chat_chunk(delta: dict[str, Any], finish: str | None = None) -> tuple[str, str]:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return "", json.dumps({"id": "x", "model": "m", "choices": [choice]})


def _candidate(text: str, index: int | None, finish: str | None = "STOP") -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": [{"text": text}]}}
    if index is not None:
        candidate["index"] = index
    if finish:
        candidate["finishReason"] = finish
    return candidate


async def test_a_chat_audio_answer_keeps_its_audio_and_says_its_transcript() -> None:
    message = {
        "role": "assistant",
        "content": None,
        "refusal": None,
        "audio": {
            "id": "audio_1",
            "data": _b64(WAV),
            "expires_at": 1729018505,
            "transcript": "Yes, golems are made of clay.",
        },
    }
    m = final(await send("openai-chat", chat_body_of(message), stream=False)).message
    assert m.content == "Yes, golems are made of clay."
    # the signature keeps the audio's ID for the next request (ADR 0066)
    signature = "openai-chat-audio/1729018505/audio_1"
    assert m.parts == [Part("audio", data=WAV, media_type="audio/wav", signature=signature)]


async def test_a_streamed_chat_audio_answer_streams_its_transcript() -> None:
    data = _b64(b"\x00\x01" * 40)  # headerless: the API's pcm16
    stream = (
        chat_chunk_event({"role": "assistant", "audio": {"id": "audio_1", "transcript": "Yes, "}})
        + chat_chunk_event({"audio": {"data": data[:20]}})
        + chat_chunk_event({"audio": {"data": data[20:], "transcript": "clay."}})
        + chat_chunk_event({"audio": {"expires_at": 1729018505}}, "stop")
        + "data: [DONE]\n\n"
    )
    items = await send("openai-chat", stream, stream=True)
    text = "".join(d.content for d in items if isinstance(d, Delta))
    response = final(items)
    assert text == response.message.content == "Yes, clay."
    assert response.message.parts == [
        Part(
            "audio",
            data=b"\x00\x01" * 40,
            media_type="audio/pcm;rate=24000",
            signature="openai-chat-audio/1729018505/audio_1",  # ADR 0066
        )
    ]


@pytest.mark.parametrize("stream", [False, True])
async def test_chat_images_of_a_compatible_server_are_kept(stream: bool) -> None:
    images = [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + _b64(PNG)}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
    ]
    expected = [
        Part("image", data=PNG, media_type="image/png"),
        Part("image", url="https://example.com/cat.png"),
    ]
    if stream:
        body = (
            chat_chunk_event({"role": "assistant", "content": "Here:"})
            + chat_chunk_event({"images": images}, "stop")
            + "data: [DONE]\n\n"
        )
    else:
        body = chat_body_of({"role": "assistant", "content": "Here:", "images": images})
    m = final(await send("openai-chat", body, stream=stream)).message
    assert m.content == "Here:"
    assert m.parts == expected


async def test_image_parts_of_a_content_list_are_kept() -> None:
    content = [
        {"type": "text", "text": "Here:"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + _b64(PNG)}},
    ]
    m = final(
        await send(
            "openai-chat", chat_body_of({"role": "assistant", "content": content}), stream=False
        )
    ).message
    assert m.content == "Here:"
    assert m.parts == [Part("image", data=PNG, media_type="image/png")]


@pytest.mark.parametrize(
    "message",
    [
        {"role": "assistant", "audio": {"data": "not base64!", "transcript": "x"}},
        {"role": "assistant", "content": "x", "images": [{"type": "image_url", "image_url": {}}]},
    ],
)
async def test_chat_media_golem_cannot_read_is_a_named_error(message: dict[str, Any]) -> None:
    with pytest.raises(ResponseFormatError):
        await send("openai-chat", chat_body_of(message), stream=False)


async def test_a_gemini_part_of_an_unknown_kind_is_kept_where_it_sat() -> None:
    future = {"futurePart": {"x": 1}, "thoughtSignature": "sig"}
    parts = [{"text": "before"}, future, {"text": "after"}]
    m = final(await send("gemini", gemini_body_of(parts), stream=False)).message
    assert m.content == "before\n\nafter"
    (block,) = m.server_tools
    assert (block.provider, block.type, block.at) == ("gemini", "futurePart", len("before"))
    assert json.loads(block.raw) == future
    # kept, never sent back: the API would refuse what it does not know either
    body = body_of("gemini", ModelRequest([Message("user", "q"), m, Message("user", "more")]))
    assert "futurePart" not in json.dumps(body)


async def test_a_function_response_in_an_answer_is_kept() -> None:
    part = {"functionResponse": {"name": "f", "response": {"output": "1"}}}
    m = final(await send("gemini", gemini_body_of([part]), stream=False)).message
    assert [b.type for b in m.server_tools] == ["functionResponse"]


async def test_a_signature_on_a_text_part_whose_empty_text_was_left_out_is_kept() -> None:
    parts = [{"text": "answer"}, {"thoughtSignature": "sig-1"}]
    response: ModelResponse = final(await send("gemini", gemini_body_of(parts), stream=False))
    assert response.message.content == "answer"
    assert response.message.thinking == [ThinkingBlock(signature="sig-1")]
    assert response.message.server_tools == []


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
    stream = sse(
        [
            chat_chunk({"role": "assistant", "content": "sec"}, index=1),
            chat_chunk({"role": "assistant", "content": "fir"}),
            chat_chunk({"content": "ond"}, index=1),
            chat_chunk({"content": "st"}),
            chat_chunk({}, "stop", index=1),
            chat_chunk({}, "stop"),
            "[DONE]",
        ]
    )
    assert final(await send("openai-chat", stream, stream=True)).message.content == "first"


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
