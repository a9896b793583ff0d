"""Mapping details of the Anthropic adapter: configuration, messages, parts, IDs, schemas."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from golem.messages import Message, Part, ThinkingBlock, ToolCall, dumps_history, loads_history
from golem.model import ModelRequest, ModelResponse, ToolSpec
from tests.support.adapters import DONE, body_of, final, send
from tests.support.anthropic import model_on


def _body(messages: list[Message], **settings: Any) -> dict[str, Any]:
    return body_of("anthropic", ModelRequest(messages=messages), **settings)


async def parse_response(body: dict[str, Any]) -> ModelResponse:
    return final(await send("anthropic", json.dumps({**DONE["anthropic"], **body}), stream=False))


# --------------------------------------------------------------------------- configuration


async def test_settings_headers_and_extra_body_reach_the_wire() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"content": [], "stop_reason": "end_turn"})

    async with model_on(
        httpx.MockTransport(handler),
        max_tokens=2000,
        temperature=0.5,
        top_p=0.9,
        stop=["END"],
        thinking_budget=1024,
        extra_headers={"anthropic-beta": "interleaved-thinking-2025-05-14"},
        extra_body={"thinking": {"display": "summarized"}, "metadata": {"user_id": "u1"}},
    ) as model:
        await model.generate(ModelRequest(messages=[Message(role="user", content="hi")]))
    body = json.loads(seen[0].content)
    assert body == {
        "model": "claude-test",
        "max_tokens": 2000,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "thinking": {"type": "enabled", "budget_tokens": 1024, "display": "summarized"},
        "temperature": 0.5,
        "top_p": 0.9,
        "stop_sequences": ["END"],
        "stream": False,
        "metadata": {"user_id": "u1"},
    }
    assert seen[0].headers["anthropic-beta"] == "interleaved-thinking-2025-05-14"


# --------------------------------------------------------------------------- messages


def test_system_messages_join_into_the_system_field() -> None:
    body = _body(
        [
            Message(role="system", content="Be brief."),
            Message(role="user", content="hi"),
            Message(role="system", content="Answer in French."),
        ]
    )
    assert body["system"] == "Be brief.\n\nAnswer in French."
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]


def test_assistant_blocks_in_order_and_failed_results_flagged() -> None:
    thinking = [ThinkingBlock(text="plan", signature="sig"), ThinkingBlock(redacted="opaque"),
                ThinkingBlock(text="unsigned reasoning from another provider")]
    calls = [ToolCall("toolu_a", "f", '{"x": 1}'), ToolCall("toolu_b", "g", "")]
    body = _body([
        Message(role="user", content="go"),
        Message(role="assistant", content="Calling.", thinking=thinking, tool_calls=calls),
        Message(role="tool", tool_call_id="toolu_a", tool_name="f", content="boom", failed=True),
        Message(role="tool", tool_call_id="toolu_b", tool_name="g", content="ok"),
        Message(role="user", content="and now?"),
    ])

    def result(call_id: str, content: str, failed: bool) -> dict[str, Any]:
        return {"type": "tool_result", "tool_use_id": call_id, "content": content, "is_error": failed}

    assert body["messages"][1:] == [
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "plan", "signature": "sig"},
            {"type": "redacted_thinking", "data": "opaque"},
            {"type": "text", "text": "Calling."},
            {"type": "tool_use", "id": "toolu_a", "name": "f", "input": {"x": 1}},
            {"type": "tool_use", "id": "toolu_b", "name": "g", "input": {}},
        ]},
        {"role": "user", "content": [result("toolu_a", "boom", True), result("toolu_b", "ok", False),
                                     {"type": "text", "text": "and now?"}]},
    ]


def test_foreign_tool_call_ids_are_rewritten_consistently() -> None:
    body = _body(
        [
            Message(role="user", content="go"),
            Message(
                role="assistant",
                tool_calls=[
                    ToolCall("call:1.a", "f", "{}"),
                    ToolCall("call_1_a", "f", "{}"),
                    ToolCall("", "g", "{}", signature="gemini-thought-signature"),
                    ToolCall("", "h", "{}"),
                ],
            ),
            Message(role="tool", tool_call_id="call:1.a", tool_name="f", content="1"),
            Message(role="tool", tool_call_id="call_1_a", tool_name="f", content="2"),
            Message(role="tool", tool_name="h", content="3"),
            Message(role="tool", tool_name="g", content="4"),
        ]
    )
    uses = [b["id"] for b in body["messages"][1]["content"]]
    results = {b["content"]: b["tool_use_id"] for b in body["messages"][2]["content"]}
    assert uses[0].startswith("call_1_a_")
    assert uses[1] == "call_1_a"  # already valid: unchanged
    assert len(set(uses)) == 4
    assert all(c.isalnum() or c in "_-" for u in uses for c in u)
    assert results == {"1": uses[0], "2": uses[1], "3": uses[3], "4": uses[2]}


def test_parts_in_user_and_tool_messages() -> None:
    png = Part(kind="image", data=b"\x89PNG", media_type="image/png")
    user = [Part(kind="image", url="https://x.test/a.png"), png,
            Part(kind="document", url="https://x.test/a.pdf"),
            Part(kind="document", data=b"%PDF-1.4", media_type="application/pdf"),
            Part(kind="document", data="# Título".encode(), media_type="text/markdown")]
    refused = [Part(kind="audio", url="https://x.test/a.mp3"),
               Part(kind="video", data=b"...", media_type="video/mp4"),
               Part(kind="document", data=b"PK..", media_type="application/zip")]
    body = _body([
        Message(role="user", content="Look", parts=user),
        Message(role="assistant", tool_calls=[ToolCall("toolu_1", "fetch", "{}")]),
        Message(role="tool", tool_call_id="toolu_1", content="Attached.", parts=[png, *refused]),
    ])
    png_source = {"type": "base64", "media_type": "image/png", "data": "iVBORw=="}
    pdf_source = {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0xLjQ="}
    assert body["messages"][0]["content"] == [
        {"type": "text", "text": "Look"},
        {"type": "image", "source": {"type": "url", "url": "https://x.test/a.png"}},
        {"type": "image", "source": png_source},
        {"type": "document", "source": {"type": "url", "url": "https://x.test/a.pdf"}},
        {"type": "document", "source": pdf_source},
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "# Título"}},
    ]
    omitted = "omitted: the Anthropic API does not accept it]"
    assert body["messages"][2]["content"] == [{
        "type": "tool_result", "tool_use_id": "toolu_1", "is_error": False, "content": [
            {"type": "text", "text": "Attached."},
            {"type": "image", "source": png_source},
            {"type": "text", "text": f"[audio at https://x.test/a.mp3 {omitted}"},
            {"type": "text", "text": f"[video (video/mp4) {omitted}"},
            {"type": "text", "text": f"[document (application/zip) {omitted}"},
        ],
    }]


def test_tools_and_native_output() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}, "required": ["n"]}
    count = ToolSpec("count", "Count things.", {"type": "object", "properties": {}})
    request = ModelRequest([Message(role="user", content="count")], tools=[count], output_schema=schema)
    body = body_of("anthropic", request)
    assert body["tools"] == [
        {"name": "count", "description": "Count things.", "input_schema": {"type": "object", "properties": {}}}
    ]
    assert body["tool_choice"] == {"type": "auto"}
    strict = {"type": "object", "properties": {"n": {"type": "integer", "description": "{minimum: 1}"}},
              "required": ["n"], "additionalProperties": False}
    assert body["output_config"] == {"format": {"type": "json_schema", "schema": strict}}
    assert "system" not in body


def test_prompted_output_appends_to_the_instructions() -> None:
    messages = [Message(role="system", content="Be exact."), Message(role="user", content="n?")]
    request = ModelRequest(messages=messages, output_schema={"type": "object"})
    body = body_of("anthropic", request, output_mode="prompted")
    assert body["system"] == (
        "Be exact.\n\nAlways respond with a JSON object that's compatible with this schema:\n\n"
        '{"type": "object"}\n\nDon\'t include any text or Markdown fencing before or after.'
    )
    assert "output_config" not in body


def strict_output_schema(schema: dict[str, Any]) -> Any:
    request = ModelRequest([Message(role="user", content="n?")], output_schema=schema)
    return body_of("anthropic", request)["output_config"]["format"]["schema"]


def test_strict_output_schema() -> None:
    """Constraints the API refuses move into the description; objects are closed."""
    item = {"type": "object", "description": "An item.", "properties": {
        "minimum": {"type": "string", "maxLength": 5, "format": "email"},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3},
        "code": {"type": "string", "format": "color"},
    }}
    schema = {"$defs": {"Item": item}, "type": "object", "properties": {
        "items": {"type": "array", "items": {"$ref": "#/$defs/Item"}, "minItems": 2},
        "extra": {"type": "object", "additionalProperties": {"type": "string"}},
        "either": {"anyOf": [{"type": "object", "properties": {}}, {"type": "null"}]},
    }}
    strict_item = {"type": "object", "description": "An item.", "properties": {
        "minimum": {"type": "string", "format": "email", "description": "{maxLength: 5}"},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1,
                 "description": "{maxItems: 3}"},
        "code": {"type": "string", "description": "{format: color}"},
    }, "additionalProperties": False}
    assert strict_output_schema(schema) == {"$defs": {"Item": strict_item}, "type": "object", "properties": {
        "items": {"type": "array", "items": {"$ref": "#/$defs/Item"}, "description": "{minItems: 2}"},
        "extra": {"type": "object", "additionalProperties": False,
                  "description": '{additionalProperties: {"type": "string"}}'},
        "either": {"anyOf": [{"type": "object", "properties": {}, "additionalProperties": False},
                             {"type": "null"}]},
    }, "additionalProperties": False}
    assert strict_output_schema(strict_output_schema(schema)) == strict_output_schema(schema)


@pytest.mark.parametrize(
    ("stop_reason", "finish"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("max_tokens", "length"),
        ("model_context_window_exceeded", "length"),
        ("tool_use", "tool_call"),
        ("refusal", "content_filter"),
        ("pause_turn", "pause_turn"),
        ("something_new", "other"),
        (None, ""),
    ],
)
async def test_finish_reason(stop_reason: str | None, finish: str) -> None:
    call = {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}
    body = {"stop_reason": stop_reason, **({"content": [call]} if finish == "tool_call" else {})}
    assert (await parse_response(body)).finish_reason == finish


async def test_response_keeps_unicode_arguments_and_redacted_thinking() -> None:
    response = await parse_response(
        {
            "model": "claude-x",
            "content": [
                {"type": "redacted_thinking", "data": "EmwKAhgB"},
                {"type": "tool_use", "id": "toolu_1", "name": "say", "input": {"text": "héllo ✓"}},
            ],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 1, "cache_creation_input_tokens": 2, "output_tokens": 3},
        }
    )
    assert response.message.tool_calls == [ToolCall("toolu_1", "say", '{"text": "héllo ✓"}')]
    assert response.message.thinking == [ThinkingBlock(redacted="EmwKAhgB")]
    assert response.usage.input_tokens == 3
    assert response.usage.cache_write_tokens == 2


# --------------------------------------------------------------------------- history


async def test_history_paused_on_anthropic_is_sendable_after_a_json_round_trip() -> None:
    response = await parse_response(
        {
            "model": "claude-x",
            "content": [
                {"type": "thinking", "thinking": "Need approval.", "signature": "c2ln"},
                {"type": "text", "text": "Deleting."},
                {
                    "type": "tool_use",
                    "id": "toolu_01",
                    "name": "delete_file",
                    "input": {"path": "a.txt"},
                },
            ],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 5, "output_tokens": 5},
        }
    )
    history = [
        Message(role="system", content="You manage files."),
        Message(role="user", content="Delete a.txt"),
        response.message,
    ]
    restored = loads_history(dumps_history(history))
    resumed = [
        *restored,
        Message(role="tool", tool_call_id="toolu_01", tool_name="delete_file", content="deleted"),
    ]
    original = [*history, resumed[-1]]
    assert _body(resumed, thinking_budget=1024) == _body(original, thinking_budget=1024)
    assert _body(resumed)["messages"][1]["content"][0] == {
        "type": "thinking",
        "thinking": "Need approval.",
        "signature": "c2ln",
    }


def test_history_from_other_providers_is_sendable() -> None:
    history = [
        Message(role="user", content="hi"),
        Message(
            role="assistant",
            content="",
            thinking=[ThinkingBlock(text="openai-style reasoning")],
            tool_calls=[
                ToolCall("call_abc123", "f", '{"a":1}'),
                ToolCall("fc-1/2", "g", "{}", signature="sig"),
            ],
        ),
        Message(role="tool", tool_call_id="call_abc123", tool_name="f", content="1"),
        Message(role="tool", tool_call_id="fc-1/2", tool_name="g", content="2"),
    ]
    body = _body(history)
    assistant = body["messages"][1]["content"]
    assert [b["type"] for b in assistant] == ["tool_use", "tool_use"]
    assert assistant[0]["id"] == "call_abc123"
    assert [b["tool_use_id"] for b in body["messages"][2]["content"]] == [
        b["id"] for b in assistant
    ]


def test_gemini_shaped_history_sends_no_thinking() -> None:
    """Gemini stores thought signatures on tool calls and as signature-only blocks."""
    history = [
        Message(role="user", content="hi"),
        Message(role="assistant", content="Hello!", thinking=[ThinkingBlock(signature="Q2lR")]),
        Message(role="user", content="look it up"),
        Message(
            role="assistant",
            thinking=[ThinkingBlock(text="A summary of Gemini's thoughts.")],
            tool_calls=[ToolCall("fc_1", "lookup", "{}", signature="Q2lRQk")],
        ),
        Message(role="tool", tool_call_id="fc_1", tool_name="lookup", content="found"),
    ]
    body = _body(history)
    assert body["messages"][1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "Hello!"}],
    }
    assert [b["type"] for b in body["messages"][3]["content"]] == ["tool_use"]


def test_signature_only_thinking_is_kept_beside_an_anthropic_tool_call() -> None:
    omitted = ThinkingBlock(signature="EsEC")  # display "omitted": no text, still signed
    history = [
        Message(role="user", content="hi"),
        Message(role="assistant", thinking=[omitted], tool_calls=[ToolCall("toolu_1", "f", "{}")]),
        Message(role="tool", tool_call_id="toolu_1", tool_name="f", content="ok"),
    ]
    assert _body(history)["messages"][1]["content"][0] == {
        "type": "thinking",
        "thinking": "",
        "signature": "EsEC",
    }
