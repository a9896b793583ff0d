"""Request bodies the OpenAI Chat Completions adapter builds from golem conversations."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import pytest

from golem.messages import Message, Part, ThinkingBlock, ToolCall, dumps_history, loads_history
from golem.model import ModelRequest, ToolSpec
from tests.support.adapters import body_of

GEMINI = "https://generativelanguage.googleapis.com/v1beta/openai"


def _messages(*messages: Message, **settings: Any) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = body_of("openai-chat", ModelRequest(list(messages)), **settings)[
        "messages"
    ]
    return sent


def test_roles_and_plain_text() -> None:
    assert _messages(
        Message("system", "Be brief."), Message("user", "Hi"), Message("assistant", "Hello")
    ) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"},
    ]
    assert _messages(Message("system", "Be brief."), system_role="developer") == [
        {"role": "developer", "content": "Be brief."}
    ]


def test_tool_calls_and_results_keep_raw_arguments() -> None:
    calls = [ToolCall("call_1", "get_weather", '{"city":  "Paris" }'), ToolCall("call_2", "get_time", "")]
    out = _messages(
        Message("user", "weather?"),
        Message("assistant", tool_calls=calls),
        Message("tool", "sunny", tool_call_id="call_1", tool_name="get_weather"),
        Message("tool", "boom", tool_call_id="call_2", tool_name="get_time", failed=True),
    )
    sent = [("call_1", "get_weather", '{"city":  "Paris" }'), ("call_2", "get_time", "{}")]
    assert out[1] == {"role": "assistant", "tool_calls": [
        {"id": i, "type": "function", "function": {"name": n, "arguments": a}} for i, n, a in sent
    ]}
    # Chat Completions has no error flag: a failed result is sent as it is.
    assert out[2:] == [
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call_2", "content": "boom"},
    ]


def test_call_ids_the_api_would_reject_are_replaced_consistently() -> None:
    long_id = "toolu_" + "x" * 60
    odd_id = "functions.get_weather:0"
    out = _messages(
        Message(
            "assistant",
            tool_calls=[ToolCall(long_id, "a"), ToolCall(odd_id, "b"), ToolCall("call_ok-1", "c")],
        ),
        Message("tool", "1", tool_call_id=long_id, tool_name="a"),
        Message("tool", "2", tool_call_id=odd_id, tool_name="b"),
        Message("tool", "3", tool_call_id="call_ok-1", tool_name="c"),
    )
    ids = [c["id"] for c in out[0]["tool_calls"]]
    assert ids[2] == "call_ok-1"
    assert ids[0] == "call_" + hashlib.sha256(long_id.encode()).hexdigest()[:32]
    assert all(len(i) <= 40 for i in ids)
    assert ids[0] != ids[1]
    assert [m["tool_call_id"] for m in out[1:]] == ids


def test_calls_without_ids_pair_with_their_results_by_name_and_order() -> None:
    out = _messages(
        Message("user", "go"),
        Message("assistant", tool_calls=[ToolCall("", "a"), ToolCall("", "b"), ToolCall("", "a")]),
        Message("tool", "b1", tool_name="b"),
        Message("tool", "a1", tool_name="a"),
        Message("tool", "a2", tool_name="a"),
    )
    ids = [c["id"] for c in out[1]["tool_calls"]]
    assert ids == ["call_1_0", "call_1_1", "call_1_2"]
    assert [(m["tool_call_id"], m["content"]) for m in out[2:]] == [
        ("call_1_1", "b1"),
        ("call_1_0", "a1"),
        ("call_1_2", "a2"),
    ]


def test_thinking_from_other_providers_is_not_sent_by_default() -> None:
    assistant = Message(
        "assistant",
        "Done.",
        thinking=[
            ThinkingBlock(text="Let me think.", signature="EqQBCkYIBxgCKkD-anthropic"),
            ThinkingBlock(redacted="EmwKAhgBEgy-redacted"),
        ],
        tool_calls=[ToolCall("toolu_01A", "f", "{}", signature="gemini-sig")],
    )
    (out,) = _messages(assistant)
    assert out == {
        "role": "assistant",
        "content": "Done.",
        "tool_calls": [
            {"id": "toolu_01A", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ],
    }


def test_reasoning_field_sends_thinking_text_and_backfills_current_tool_calls() -> None:
    out = _messages(
        Message("user", "q1"),
        Message("assistant", "a1"),
        Message("user", "q2"),
        Message(
            "assistant", tool_calls=[ToolCall("c1", "f")], thinking=[ThinkingBlock(text="step 1")]
        ),
        Message("tool", "r", tool_call_id="c1", tool_name="f"),
        Message("assistant", tool_calls=[ToolCall("c2", "f")]),
        reasoning_field="reasoning_content",
    )
    assert "reasoning_content" not in out[1]
    assert out[3]["reasoning_content"] == "step 1"
    assert out[5]["reasoning_content"] == ""


def test_gemini_thought_signatures_are_sent_only_to_gemini() -> None:
    msg = Message("assistant", tool_calls=[ToolCall("c", "f", "{}", signature="c2ln")])
    (plain,) = _messages(msg)
    assert "extra_content" not in plain["tool_calls"][0]
    (gemini,) = _messages(msg, base_url=GEMINI)
    assert gemini["tool_calls"][0]["extra_content"] == {"google": {"thought_signature": "c2ln"}}


PNG = b"\x89PNG\r\n\x1a\n-fake"


def test_user_parts() -> None:
    csv = b"a,b\n1,2"
    parts = [
        Part("image", url="https://example.com/cat.png"),
        Part("image", data=PNG, media_type="image/png"),
        Part("document", data=b"%PDF-1.4", media_type="application/pdf"),
        Part("document", data=csv, media_type="text/csv"),
        Part("audio", data=b"ID3", media_type="audio/mpeg"),
        Part("audio", data=b"OggS", media_type="audio/ogg"),
        Part("audio", url="https://example.com/a.mp3"),
        Part("document", url="https://example.com/a.pdf"),
        Part("video", data=b"\x00", media_type="video/mp4"),
    ]
    (out,) = _messages(Message("user", "Look:", parts=parts))
    ident = hashlib.sha1(csv).hexdigest()[:6]
    png = "data:image/png;base64," + base64.b64encode(PNG).decode()
    pdf = {"file_data": "data:application/pdf;base64,JVBERi0xLjQ=", "filename": "filename.pdf"}
    texts = [
        f'-----BEGIN FILE id="{ident}" type="text/csv"-----\na,b\n1,2\n-----END FILE id="{ident}"-----',
        "[audio audio/ogg not attached: only mp3 and wav audio can be sent]",
        "[audio https://example.com/a.mp3 not attached: "
        "the Chat Completions API cannot fetch a audio by URL]",
        "[document https://example.com/a.pdf not attached: "
        "the Chat Completions API cannot fetch a document by URL]",
        "[video video/mp4 not attached: the Chat Completions API cannot take video input]",
    ]
    assert out["content"] == [
        {"type": "text", "text": "Look:"},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
        {"type": "image_url", "image_url": {"url": png}},
        {"type": "file", "file": pdf},
        {"type": "text", "text": texts[0]},
        {"type": "input_audio", "input_audio": {"data": "SUQz", "format": "mp3"}},
        *[{"type": "text", "text": t} for t in texts[1:]],
    ]


def test_tool_result_parts_follow_the_tool_messages_in_one_user_message() -> None:
    calls = [ToolCall("c1", "shot"), ToolCall("c2", "shot"), ToolCall("c3", "n")]
    out = _messages(
        Message("assistant", tool_calls=calls),
        Message("tool", "first", tool_call_id="c1", tool_name="shot",
                parts=[Part("image", url="https://x/1.png")]),
        Message("tool", tool_call_id="c2", tool_name="shot", parts=[Part("image", url="https://x/2.png")]),
        Message("tool", "3", tool_call_id="c3", tool_name="n"),
        Message("user", "thanks"),
    )
    assert [m["role"] for m in out] == ["assistant", "tool", "tool", "tool", "user", "user"]
    assert (out[1]["content"], out[2]["content"]) == ("first", "File attached")
    assert out[4]["content"] == [
        {"type": "text", "text": "Attachments of tool call c1 (shot):"},
        {"type": "image_url", "image_url": {"url": "https://x/1.png"}},
        {"type": "text", "text": "Attachments of tool call c2 (shot):"},
        {"type": "image_url", "image_url": {"url": "https://x/2.png"}},
    ]
    assert out[5] == {"role": "user", "content": "thanks"}


STRICT = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "City name"},
        "when": {"type": "string", "format": "date"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "unit": {"anyOf": [{"type": "string", "enum": ["C", "F"]}, {"type": "null"}]},
        "loc": {"$ref": "#/$defs/Loc"},
    },
    "required": ["city", "when", "tags", "unit", "loc"],
    "additionalProperties": False,
    "$defs": {
        "Loc": {
            "type": "object",
            "properties": {"lat": {"type": "number"}},
            "required": ["lat"],
            "additionalProperties": False,
        }
    },
}


def _variant(**changes: Any) -> dict[str, Any]:
    schema = json.loads(json.dumps(STRICT))
    for path, value in changes.items():
        node = schema
        keys = path.split("__")
        for k in keys[:-1]:
            node = node[k]
        if value is None:
            del node[keys[-1]]
        else:
            node[keys[-1]] = value
    return schema


@pytest.mark.parametrize(
    ("schema", "strict"),
    [
        (STRICT, True),
        (_variant(additionalProperties=None), False),
        (_variant(required=["city"]), False),
        (_variant(properties__city={"type": "string", "default": "Paris"}), False),
        (_variant(properties__city={"type": "string", "minLength": 1}), False),
        (_variant(properties__when={"type": "string", "format": "uri"}), False),
        (_variant(properties__tags={"type": "array"}), False),
        (_variant(properties__unit={"oneOf": [{"type": "string"}, {"type": "null"}]}), False),
        (_variant(**{"$defs__Loc__additionalProperties": True}), False),
        (_variant(properties__loc={"$ref": "#/$defs/Loc", "description": "where"}), False),
        ({"type": "object", "properties": {}, "additionalProperties": False}, False),
        ({"type": "object", "properties": {}, "required": [], "additionalProperties": False}, True),
        ({"type": "array", "items": {"type": "string"}}, False),
    ],
)
def test_a_tool_is_strict_when_its_schema_is_strict_compatible(
    schema: dict[str, Any], strict: bool
) -> None:
    body = body_of("openai-chat", ModelRequest([], tools=[ToolSpec("f", "", schema)]))
    assert body["tools"][0]["function"].get("strict", False) is strict


def test_full_body_with_tools_output_schema_and_settings() -> None:
    loose = {"type": "object", "properties": {"q": {"type": "string"}}}
    request = ModelRequest(
        [Message("system", "sys"), Message("user", "hi")],
        tools=[ToolSpec("strict_tool", "Strict.", STRICT), ToolSpec("loose_tool", "Loose.", loose)],
        output_schema={"title": "City Answer!", **STRICT},
    )
    settings: dict[str, Any] = {"max_tokens": 50, "temperature": 0.2, "top_p": 0.9, "stop": ["END"]}
    settings |= {"reasoning_effort": "low", "extra_body": {"seed": 7, "tool_choice": "required"}}
    body = body_of("openai-chat", request, "gpt-4.1", stream=True, **settings)
    assert body == {
        "model": "gpt-4.1",
        "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "strict_tool",
                    "description": "Strict.",
                    "parameters": STRICT,
                    "strict": True,
                },
            },
            {
                "type": "function",
                "function": {"name": "loose_tool", "description": "Loose.", "parameters": loose},
            },
        ],
        "tool_choice": "required",
        "response_format": {
            "type": "json_schema",
            "json_schema": {
                "name": "City_Answer",
                "schema": {"title": "City Answer!", **STRICT},
                "strict": True,
            },
        },
        "max_completion_tokens": 50,
        "temperature": 0.2,
        "top_p": 0.9,
        "stop": ["END"],
        "reasoning_effort": "low",
        "seed": 7,
    }
    no_strict = body_of("openai-chat", request, strict=False)
    assert "strict" not in no_strict["tools"][0]["function"]
    assert no_strict["response_format"]["json_schema"]["strict"] is False
    assert "stream_options" not in no_strict


def test_history_paused_on_another_provider_is_sendable_after_json_round_trip() -> None:
    history = [
        Message("system", "You manage files."),
        Message("user", "Delete /tmp/x", parts=[Part("image", data=PNG, media_type="image/png")]),
        Message(
            "assistant",
            thinking=[
                ThinkingBlock(text="Needs approval.", signature="sig-anthropic"),
                ThinkingBlock(redacted="r"),
            ],
            tool_calls=[
                ToolCall("toolu_01XFDUDYJgAACzvnptvVer6u", "delete", '{"path": "/tmp/x"}'),
                ToolCall("", "list_dir", '{"path": "/tmp"', signature="gemini-sig"),
            ],
        ),
        Message("tool", "x, y", tool_name="list_dir", failed=True),
        Message(
            "tool", "denied", tool_call_id="toolu_01XFDUDYJgAACzvnptvVer6u", tool_name="delete"
        ),
    ]
    restored = loads_history(dumps_history(history))
    body = body_of("openai-chat", ModelRequest(restored), "gpt-4.1")
    text = json.dumps(body)
    assert "sig-anthropic" not in text
    assert "gemini-sig" not in text
    calls = body["messages"][2]["tool_calls"]
    assert [c["id"] for c in calls] == ["toolu_01XFDUDYJgAACzvnptvVer6u", "call_2_1"]
    # The truncated call's raw text survives the round trip and is sent wrapped.
    assert json.loads(calls[1]["function"]["arguments"]) == {"truncated_args": '{"path": "/tmp"'}
    assert [(m["role"], m.get("tool_call_id")) for m in body["messages"][3:]] == [
        ("tool", "call_2_1"),
        ("tool", "toolu_01XFDUDYJgAACzvnptvVer6u"),
    ]
