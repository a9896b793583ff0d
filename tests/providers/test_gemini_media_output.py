"""Media a model produces (a Gemini image model's pictures) stay on the answer (ADR 0060).

Written from the Gemini API reference (`Part.inlineData` / `Part.fileData` in a candidate's
content, `thoughtSignature` on the image parts of Gemini 3 Pro Image): they used to be
dropped. They are kept as `Part`s of the assistant message, streamed or not, survive the
history JSON, go back to Gemini as `inlineData` / `fileData` in the model content (with their
signatures), and reach the APIs that refuse media in assistant turns in a user message after
the turn, never dropped.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from golem import Agent
from golem.errors import ResponseFormatError
from golem.history import validate_history
from golem.messages import Message, Part, ToolCall, dumps_history, loads_history
from golem.model import ModelRequest, ModelResponse
from golem.testing import ScriptedModel
from tests.support.adapters import body_of, final, parsed, send

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR fake image bytes \xff\x00"
WAV = b"RIFF\x24\x00\x00\x00WAVEfmt "


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _candidate(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"candidates": [{"content": {"parts": list(parts)}, "finishReason": "STOP"}]}


VIDEO = "https://generativelanguage.googleapis.com/v1beta/files/v1"
IMAGE_ANSWER: dict[str, Any] = {
    **_candidate(
        {"text": "Here is the cat:", "thoughtSignature": "sig-text"},
        {"inlineData": {"mimeType": "image/png", "data": _b64(PNG)}, "thoughtSignature": "sig-image"},
        {"text": "And its purr."},
        {"inlineData": {"mimeType": "audio/wav", "data": _b64(WAV)}},
        {"fileData": {"mimeType": "video/mp4", "fileUri": VIDEO}},
    ),
    "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 1290},
    "modelVersion": "gemini-3-pro-image-preview",
}


async def _answer(body: Any, *, stream: bool) -> ModelResponse:
    if stream:
        # one event per part, as a stream delivers them
        events = []
        parts = body["candidates"][0]["content"]["parts"]
        for i, part in enumerate(parts):
            candidate: dict[str, Any] = {"content": {"role": "model", "parts": [part]}}
            if i == len(parts) - 1:
                candidate["finishReason"] = "STOP"
            events.append(f"data: {json.dumps({'candidates': [candidate]})}\r\n\r\n")
        return final(await send("gemini", "".join(events), stream=True))
    return final(await send("gemini", json.dumps(body), stream=False))


@pytest.mark.parametrize("stream", [False, True])
async def test_generated_media_are_kept_as_parts_of_the_answer(stream: bool) -> None:
    response = await _answer(IMAGE_ANSWER, stream=stream)
    m = response.message
    assert m.content == "Here is the cat:\n\nAnd its purr."
    assert m.parts == [
        Part("image", data=PNG, media_type="image/png", signature="sig-image"),
        Part("audio", data=WAV, media_type="audio/wav"),
        Part("video", url=VIDEO, media_type="video/mp4"),
    ]
    assert all(p.problem() is None for p in m.parts)
    assert response.finish_reason == "stop"


async def test_an_image_only_answer_is_not_empty() -> None:
    m = (await _answer(_candidate({"inlineData": {"mimeType": "image/jpeg", "data": "AAEC"}}), stream=False)).message
    assert m.content == ""
    assert m.parts == [Part("image", data=b"\x00\x01\x02", media_type="image/jpeg")]


@pytest.mark.parametrize(
    ("mime", "kind"), [("application/pdf", "document"), ("text/csv", "document"), ("", "document")]
)
async def test_the_kind_follows_the_mime_type(mime: str, kind: str) -> None:
    media: dict[str, Any] = {"data": "AAEC"}
    if mime:
        media["mimeType"] = mime
    body = _candidate({"inlineData": media})
    (part,) = (await _answer(body, stream=False)).message.parts
    assert part.kind == kind
    assert part.media_type == (mime or "application/octet-stream")
    assert part.problem() is None


async def test_url_safe_and_wrapped_base64_is_read() -> None:
    data = bytes(range(256))
    text = base64.urlsafe_b64encode(data).decode().rstrip("=")
    wrapped = "\n".join(text[i : i + 76] for i in range(0, len(text), 76))
    body = _candidate({"inlineData": {"mimeType": "image/png", "data": wrapped}})
    (part,) = (await _answer(body, stream=False)).message.parts
    assert part.data == data


@pytest.mark.parametrize("data", ["not base64 at all!", 12345, {"x": 1}])
async def test_media_data_that_is_not_base64_is_a_named_error(data: Any) -> None:
    body = _candidate({"inlineData": {"mimeType": "image/png", "data": data}})
    with pytest.raises(ResponseFormatError, match=r"image data .* not base64"):
        await _answer(body, stream=False)


async def test_thought_images_are_interim_drafts_and_not_kept() -> None:
    body = _candidate(
        {"inlineData": {"mimeType": "image/png", "data": "AAAA"}, "thought": True},
        {"inlineData": {"mimeType": "image/png", "data": "AAEC"}},
    )
    (part,) = (await _answer(body, stream=False)).message.parts
    assert part.data == b"\x00\x01\x02"


async def test_generated_media_survive_the_history_json() -> None:
    m = (await _answer(IMAGE_ANSWER, stream=False)).message
    text = dumps_history([m])
    assert '"signature":"sig-image"' in text
    back = loads_history(text)
    assert back == [m]
    assert dumps_history(back) == text
    validate_history(back)  # an assistant message may carry parts


async def test_generated_media_go_back_to_gemini_in_the_model_content() -> None:
    m = (await _answer(IMAGE_ANSWER, stream=False)).message
    history = [Message("user", "draw a cat"), *loads_history(dumps_history([m]))]
    body = body_of("gemini", ModelRequest([*history, Message("user", "make it blue")]))
    model = body["contents"][1]
    assert model["role"] == "model"
    assert model["parts"] == [
        {"text": "Here is the cat:\n\nAnd its purr.", "thoughtSignature": "sig-text"},
        {
            "inlineData": {"mimeType": "image/png", "data": _b64(PNG)},
            "thoughtSignature": "sig-image",
        },
        {"inlineData": {"mimeType": "audio/wav", "data": _b64(WAV)}},
        {
            "fileData": {
                "fileUri": "https://generativelanguage.googleapis.com/v1beta/files/v1",
                "mimeType": "video/mp4",
            }
        },
    ]


async def test_a_run_keeps_the_picture_and_continues_with_it() -> None:
    picture = Message("assistant", "a cat", parts=[Part("image", data=PNG, media_type="image/png")])
    agent = Agent(ScriptedModel(picture, "done"))
    first = await agent.run("draw a cat")
    assert first.messages[-1].parts == picture.parts
    second = await agent.run("make it blue", history=first.messages)
    assert second.output == "done"


# --------------------------------------------------------------------------- other APIs

_IMAGE = Part("image", data=PNG, media_type="image/png", signature="sig-image")
MEDIA_TEXT = "Media of your previous answer (this API takes media only from the user):"
"""The text that opens the user message carrying an assistant's media (the guide's words)."""

_TURN = [
    Message("user", "draw a cat, then save it"),
    Message(
        "assistant",
        "Here it is.",
        parts=[_IMAGE],
        tool_calls=[ToolCall("call_1", "save", '{"name":"cat"}')],
    ),
    Message("tool", "saved", tool_call_id="call_1", tool_name="save"),
    Message("user", "thanks"),
]


def test_openai_chat_gets_the_media_in_a_user_message_after_the_results() -> None:
    out = body_of("openai-chat", ModelRequest(_TURN))["messages"]
    assert [m["role"] for m in out] == ["user", "assistant", "tool", "user", "user"]
    assert "parts" not in json.dumps(out[1])
    assert out[3]["content"] == [
        {"type": "text", "text": MEDIA_TEXT},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + _b64(PNG)}},
    ]


def test_openai_chat_gets_media_of_a_last_answer_too() -> None:
    out = body_of("openai-chat", ModelRequest(_TURN[:2]))["messages"]
    assert out[-1]["role"] == "user"
    assert out[-1]["content"][0]["text"] == MEDIA_TEXT


def test_openai_responses_gets_the_media_after_the_call_outputs() -> None:
    items = body_of("openai-responses", ModelRequest(_TURN))["input"]
    kinds = [i.get("type") or i["role"] for i in items]
    assert kinds == ["user", "assistant", "function_call", "function_call_output", "user", "user"]
    assert items[4]["content"] == [
        {"type": "input_text", "text": MEDIA_TEXT},
        {
            "type": "input_image",
            "image_url": "data:image/png;base64," + _b64(PNG),
            "detail": "auto",
        },
    ]


def test_anthropic_gets_the_media_after_the_tool_results_in_the_same_user_turn() -> None:
    body = body_of("anthropic", ModelRequest(_TURN), "claude-x")
    turns = body["messages"]
    assert [t["role"] for t in turns] == ["user", "assistant", "user"]
    assert all(b["type"] in ("text", "tool_use") for b in turns[1]["content"])
    types = [b["type"] for b in turns[2]["content"]]
    assert types == ["tool_result", "text", "image", "text"]  # results first, as required
    assert turns[2]["content"][1]["text"] == MEDIA_TEXT
    assert turns[2]["content"][2]["source"] == {
        "type": "base64",
        "media_type": "image/png",
        "data": _b64(PNG),
    }


@settings(deadline=None)
@given(
    data=st.binary(min_size=1, max_size=300),
    mime=st.sampled_from(["image/png", "image/webp", "audio/mpeg", "video/mp4", "application/pdf"]),
    signature=st.text(alphabet="abcXYZ012+/=", max_size=12),
)
def test_any_generated_media_survive_the_answer_the_history_and_the_next_request(
    data: bytes, mime: str, signature: str
) -> None:
    part: dict[str, Any] = {"inlineData": {"mimeType": mime, "data": _b64(data)}}
    if signature:
        part["thoughtSignature"] = signature
    body = {"candidates": [{"content": {"parts": [part]}, "finishReason": "STOP"}]}
    m = parsed("gemini", body).message
    (kept,) = m.parts
    assert (kept.data, kept.media_type, kept.signature) == (data, mime, signature)
    back = loads_history(dumps_history([m]))
    assert back == [m]
    sent = body_of("gemini", ModelRequest([Message("user", "q"), *back, Message("user", "again")]))
    assert sent["contents"][1]["parts"] == [part]
