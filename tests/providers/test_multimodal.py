"""Text and media interleaved in one message, on every adapter; Gemini 3's multimodal tool
results (media inside the function response), compared with a recorded request."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from golem import dumps_history, loads_history
from golem.messages import Message, Part
from golem.model import ModelRequest
from golem.providers.gemini import GeminiModel
from tests.support.adapters import body_of
from tests.support.recordings import load, needs_recordings

CAT = Part(kind="image", url="https://example.com/cat.png")
DOG = Part(kind="image", data=b"\x89PNG", media_type="image/png")
INTERLEAVED = Message(
    role="user",
    content="Which is cuter:",
    parts=[CAT, Part(kind="text", text="or"), DOG, Part(kind="text", text="? One word.")],
)
REQUEST = ModelRequest(messages=[INTERLEAVED])
PNG64 = base64.b64encode(b"\x89PNG").decode()


IN_ORDER = {
    "openai-chat": [
        {"type": "text", "text": "Which is cuter:"},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
        {"type": "text", "text": "or"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG64}"}},
        {"type": "text", "text": "? One word."},
    ],
    "openai-responses": [
        {"type": "input_text", "text": "Which is cuter:"},
        {"type": "input_image", "image_url": "https://example.com/cat.png", "detail": "auto"},
        {"type": "input_text", "text": "or"},
        {"type": "input_image", "image_url": f"data:image/png;base64,{PNG64}", "detail": "auto"},
        {"type": "input_text", "text": "? One word."},
    ],
    "anthropic": [
        {"type": "text", "text": "Which is cuter:"},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}},
        {"type": "text", "text": "or"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG64}},
        {"type": "text", "text": "? One word."},
    ],
    "gemini": [
        {"text": "Which is cuter:"},
        {"fileData": {"fileUri": "https://example.com/cat.png", "mimeType": "image/png"}},
        {"text": "or"},
        {"inlineData": {"mimeType": "image/png", "data": PNG64}},
        {"text": "? One word."},
    ],
}
"""A message of text and media interleaved, as each API is sent it: in the same order."""


@pytest.mark.parametrize("api", list(IN_ORDER))
def test_text_and_media_interleaved_keep_their_order(api: str) -> None:
    body = body_of(api, REQUEST)
    first = (body.get("messages") or body.get("input") or body.get("contents"))[0]
    assert first.get("content", first.get("parts")) == IN_ORDER[api]


def test_text_parts_survive_the_history_json() -> None:
    text = dumps_history([INTERLEAVED])
    assert json.loads(text)[0]["parts"][1] == {"kind": "text", "text": "or"}
    assert loads_history(text) == [INTERLEAVED]
    assert dumps_history(loads_history(text)) == text


@pytest.mark.parametrize(
    ("part", "problem"),
    [
        (Part(kind="text", text="hi"), None),
        (Part(kind="text"), "a text part needs text"),
        (
            Part(kind="text", text="hi", url="https://x"),
            "a text part has only text (no url, data, media_type or signature)",
        ),
        (CAT, None),
        (
            Part(kind="image", url="https://x", text="caption"),
            "a image part has no text (put text in a text part)",
        ),
        (Part(kind="sticker", url="https://x"), 'unknown part kind "sticker"'),
    ],
)
def test_part_problems(part: Part, problem: str | None) -> None:
    found = part.problem()
    if problem is None:
        assert found is None
    else:
        assert found is not None
        assert found.startswith(problem)


def _tool_request() -> ModelRequest:
    from golem.messages import ToolCall

    return ModelRequest(
        messages=[
            Message(role="user", content="Use the get_file tool, then describe it."),
            Message(role="assistant", tool_calls=[ToolCall("call_1", "get_file", "{}")]),
            Message(
                role="tool",
                tool_call_id="call_1",
                tool_name="get_file",
                parts=[Part(kind="image", data=b"\xff\xd8jpeg", media_type="image/jpeg")],
            ),
        ]
    )


def test_gemini_3_puts_tool_result_media_inside_the_function_response() -> None:
    body = GeminiModel("gemini-3-pro-preview", api_key="k").request_body(_tool_request())
    contents = body["contents"]
    assert len(contents) == 3  # no extra user content for the media
    response = contents[2]["parts"][0]["functionResponse"]
    assert response == {
        "name": "get_file",
        "id": "call_1",
        "parts": [
            {
                "inlineData": {
                    "mimeType": "image/jpeg",
                    "data": base64.b64encode(b"\xff\xd8jpeg").decode(),
                }
            }
        ],
        "response": {"output": ""},
    }


def test_gemini_2_sends_tool_result_media_in_a_following_user_content() -> None:
    body = GeminiModel("gemini-2.5-flash", api_key="k").request_body(_tool_request())
    contents = body["contents"]
    assert len(contents) == 4
    assert "parts" not in contents[2]["parts"][0]["functionResponse"]
    assert list(contents[3]["parts"][0]) == ["inlineData"]


def test_gemini_3_text_parts_of_a_tool_result_join_its_output() -> None:
    request = _tool_request()
    tool = request.messages[2]
    messages = [
        *request.messages[:2],
        Message(
            role="tool",
            content="Here it is.",
            tool_call_id=tool.tool_call_id,
            tool_name=tool.tool_name,
            parts=[*tool.parts, Part(kind="text", text="Taken in 2024.")],
        ),
    ]
    body = GeminiModel("gemini-3-pro-preview", api_key="k").request_body(
        ModelRequest(messages=messages)
    )
    response = body["contents"][2]["parts"][0]["functionResponse"]
    assert response["response"] == {"output": "Here it is.\n\nTaken in 2024."}
    assert len(response["parts"]) == 1


@needs_recordings
def test_the_function_response_has_the_recorded_shape() -> None:
    it = load(
        "gemini", "test_multimodal_tool_return_matrix[direct-binary-image-google_gemini3].yaml"
    )[-1]
    recorded: dict[str, Any] = it.request_body["contents"][-1]["parts"][0]["functionResponse"]
    ours = GeminiModel("gemini-3-pro-preview", api_key="k").request_body(_tool_request())
    mine = ours["contents"][2]["parts"][0]["functionResponse"]
    assert set(mine) == set(recorded)
    (recorded_part,) = recorded["parts"]
    (my_part,) = mine["parts"]
    # the recording spells the field in snake case; the API takes both spellings
    assert set(recorded_part["inline_data"]) == {"data", "mime_type"}
    assert set(my_part["inlineData"]) == {"data", "mimeType"}
