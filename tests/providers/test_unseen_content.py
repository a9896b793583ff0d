"""Answers with content and counts the adapters did not read, through the HTTP path (ADR 0060).

Each used to give a wrong or empty answer, accepted:
- usage counts written as digits or as integral floats (`"12"`, `12.0`, what some compatible
  servers send) were 0; a negative count lowered the run's totals (and so its usage limits);
- a Chat Completions audio answer (`message.audio`: base64 data and a transcript, no
  `content`) came back empty; images some compatible servers answer with (`message.images`,
  `image_url` parts of a content list) were dropped;
- a Gemini part of a kind golem does not know (a newer API's, a `functionResponse` in an
  answer) was dropped and the text around it run together; a thought signature on a part
  whose empty text proto3 JSON left out was lost.
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
from golem.providers._jsonio import MAX_TOKEN_COUNT, token_count
from golem.providers.gemini import build_request_body as gemini_body
from golem.usage import Usage
from tests.support.adapters import final, send

WAV = b"RIFF\x24\x00\x00\x00WAVEfmt \x10\x00\x00\x00"
PNG = b"\x89PNG\r\n\x1a\n fake"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# --------------------------------------------------------------------------- usage


def _with_usage(api: str, counts: dict[str, Any]) -> dict[str, Any]:
    if api == "openai-chat":
        return {
            "id": "x",
            "object": "chat.completion",
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "a"},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": counts["in"], "completion_tokens": counts["out"]},
        }
    if api == "openai-responses":
        return {
            "id": "r",
            "object": "response",
            "status": "completed",
            "model": "m",
            "output": [
                {
                    "type": "message",
                    "id": "m1",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "a", "annotations": []}],
                }
            ],
            "usage": {"input_tokens": counts["in"], "output_tokens": counts["out"]},
        }
    if api == "anthropic":
        return {
            "id": "msg",
            "type": "message",
            "role": "assistant",
            "model": "m",
            "content": [{"type": "text", "text": "a"}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": counts["in"], "output_tokens": counts["out"]},
        }
    return {
        "candidates": [{"content": {"parts": [{"text": "a"}]}, "finishReason": "STOP"}],
        "usageMetadata": {"promptTokenCount": counts["in"], "candidatesTokenCount": counts["out"]},
    }


APIS = ["openai-chat", "openai-responses", "anthropic", "gemini"]


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize(
    ("reported", "read"),
    [
        ({"in": "12", "out": "3"}, (12, 3)),
        ({"in": 12.0, "out": 3.0}, (12, 3)),
        ({"in": -5, "out": 3}, (0, 3)),
        ({"in": None, "out": True}, (0, 0)),
        ({"in": 12.5, "out": "3 tokens"}, (0, 0)),
        ({"in": 10**40, "out": 1e300}, (MAX_TOKEN_COUNT, MAX_TOKEN_COUNT)),
    ],
)
async def test_usage_counts_are_read_as_counts(
    api: str, reported: dict[str, Any], read: tuple[int, int]
) -> None:
    response = final(await send(api, json.dumps(_with_usage(api, reported)), stream=False))
    assert (response.usage.input_tokens, response.usage.output_tokens) == read


@given(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(),
        st.text(max_size=8),
        st.lists(st.integers(), max_size=2),
    )
)
def test_a_token_count_is_never_negative_nor_beyond_the_bound(value: Any) -> None:
    count = token_count(value)
    assert type(count) is int
    assert 0 <= count <= MAX_TOKEN_COUNT
    # totals of such counts stay exact as floats
    assert float(count) == count


def test_usage_totals_cannot_be_lowered_by_a_count() -> None:
    total = Usage(input_tokens=10) + Usage(input_tokens=token_count(-5))
    assert total.input_tokens == 10


# --------------------------------------------------------------------------- chat: audio, images


def _chat(message: dict[str, Any]) -> str:
    return json.dumps(
        {
            "id": "x",
            "object": "chat.completion",
            "model": "gpt-4o-audio-preview",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        }
    )


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
    m = final(await send("openai-chat", _chat(message), stream=False)).message
    assert m.content == "Yes, golems are made of clay."
    # the signature keeps the audio's ID for the next request (ADR 0066)
    signature = "openai-chat-audio/1729018505/audio_1"
    assert m.parts == [Part("audio", data=WAV, media_type="audio/wav", signature=signature)]


def _chunk(delta: dict[str, Any], finish: str | None = None) -> str:
    body = {
        "id": "x",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return f"data: {json.dumps(body)}\n\n"


async def test_a_streamed_chat_audio_answer_streams_its_transcript() -> None:
    data = _b64(b"\x00\x01" * 40)  # headerless: the API's pcm16
    stream = (
        _chunk({"role": "assistant", "audio": {"id": "audio_1", "transcript": "Yes, "}})
        + _chunk({"audio": {"data": data[:20]}})
        + _chunk({"audio": {"data": data[20:], "transcript": "clay."}})
        + _chunk({"audio": {"expires_at": 1729018505}}, "stop")
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
            _chunk({"role": "assistant", "content": "Here:"})
            + _chunk({"images": images}, "stop")
            + "data: [DONE]\n\n"
        )
    else:
        body = _chat({"role": "assistant", "content": "Here:", "images": images})
    m = final(await send("openai-chat", body, stream=stream)).message
    assert m.content == "Here:"
    assert m.parts == expected


async def test_image_parts_of_a_content_list_are_kept() -> None:
    content = [
        {"type": "text", "text": "Here:"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + _b64(PNG)}},
    ]
    m = final(
        await send("openai-chat", _chat({"role": "assistant", "content": content}), stream=False)
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
        await send("openai-chat", _chat(message), stream=False)


# --------------------------------------------------------------------------- gemini parts


def _gemini(parts: list[dict[str, Any]]) -> str:
    return json.dumps({"candidates": [{"content": {"parts": parts}, "finishReason": "STOP"}]})


async def test_a_gemini_part_of_an_unknown_kind_is_kept_where_it_sat() -> None:
    future = {"futurePart": {"x": 1}, "thoughtSignature": "sig"}
    parts = [{"text": "before"}, future, {"text": "after"}]
    m = final(await send("gemini", _gemini(parts), stream=False)).message
    assert m.content == "before\n\nafter"
    (block,) = m.server_tools
    assert (block.provider, block.type, block.at) == ("gemini", "futurePart", len("before"))
    assert json.loads(block.raw) == future
    # kept, never sent back: the API would refuse what it does not know either
    body = gemini_body(ModelRequest([Message("user", "q"), m, Message("user", "more")]))
    assert "futurePart" not in json.dumps(body)


async def test_a_function_response_in_an_answer_is_kept() -> None:
    part = {"functionResponse": {"name": "f", "response": {"output": "1"}}}
    m = final(await send("gemini", _gemini([part]), stream=False)).message
    assert [b.type for b in m.server_tools] == ["functionResponse"]


async def test_a_signature_on_a_text_part_whose_empty_text_was_left_out_is_kept() -> None:
    parts = [{"text": "answer"}, {"thoughtSignature": "sig-1"}]
    response: ModelResponse = final(await send("gemini", _gemini(parts), stream=False))
    assert response.message.content == "answer"
    assert response.message.thinking == [ThinkingBlock(signature="sig-1")]
    assert response.message.server_tools == []


# --------------------------------------------------------------------------- anthropic errors


# --------------------------------------------------------------------------- nameless calls


# --------------------------------------------------------------------------- long integers, [DONE]

LONG = "9" * 5000  # JSON allows it; Python converts at most 4300 digits by default


async def test_a_usage_count_too_long_to_convert_is_the_bound() -> None:
    text = json.dumps(_with_usage("anthropic", {"in": 1, "out": 2})).replace(
        '"input_tokens": 1', f'"input_tokens": {LONG}'
    )
    response = final(await send("anthropic", text, stream=False))
    assert response.usage.input_tokens == MAX_TOKEN_COUNT


async def test_gemini_function_call_arguments_streamed_in_parts_are_refused_by_name() -> None:
    # Vertex AI's streamFunctionCallArguments: each part used to become a call of its own (the
    # later ones without a name); golem does not assemble them and says so
    first = {
        "functionCall": {
            "name": "f",
            "partialArgs": [{"jsonPath": "$.a", "stringValue": "x"}],
            "willContinue": True,
        }
    }
    rest = {"functionCall": {"partialArgs": [{"jsonPath": "$.b", "numberValue": 1}]}}
    events = [
        {"candidates": [{"content": {"parts": [first]}}]},
        {"candidates": [{"content": {"parts": [rest]}, "finishReason": "STOP"}]},
    ]
    body = "".join(f"data: {json.dumps(e)}\n\n" for e in events)
    with pytest.raises(ResponseFormatError, match="streamFunctionCallArguments") as caught:
        await send("gemini", body, stream=True)
    assert not caught.value.retryable
