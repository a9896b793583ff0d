"""The OpenAI Chat adapter's request bodies against recorded ones, for conversations golem
can express: equal in every field the adapter sets."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from golem.errors import BadRequest
from golem.messages import Message, Part
from golem.model import ModelRequest, ToolSpec
from golem.providers.openai import OpenAIChatModel
from tests.support.recordings import (
    Interaction,
    all_interactions,
    available,
    load,
    needs_recordings,
    replay_transport,
)

pytestmark = needs_recordings

API = "openai-chat"
ALL = list(all_interactions(API)) if available() else []
CHAT = [it for it in ALL if it.uri.endswith("/chat/completions")]
OK = [it for it in CHAT if it.status == 200]
FAILED = [it for it in CHAT if it.status != 200]


def _id(it: Interaction) -> str:
    return f"{it.cassette.removesuffix('.yaml')}#{it.index}"


# --------------------------------------------------------------------------- request bodies


def _data(url: str) -> bytes:
    return base64.b64decode(url.split(",", 1)[1])


def _normalize(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An assistant message with tool calls may omit `content` or send null: the same thing."""
    out = []
    for m in messages:
        if m.get("role") == "assistant" and m.get("content") is None:
            m = {k: v for k, v in m.items() if k != "content"}
        out.append(m)
    return out


def _assert_body_matches(sent: dict[str, Any], recorded: dict[str, Any]) -> None:
    for key, value in sent.items():
        want = recorded.get(key)
        if key == "messages":
            assert _normalize(value) == _normalize(want), key
        else:
            assert value == want, key
    # What the recording has and golem does not set: pydantic-ai's `n: 1` only.
    assert set(recorded) - set(sent) <= {"n"}


@dataclass
class Case:
    cassette: str
    model: str
    turns: list[list[Message]]
    """Per request, the messages appended before it (after the previous response)."""
    tools: list[ToolSpec] = field(default_factory=list)
    output_schema: dict[str, Any] | None = None
    settings: dict[str, Any] = field(default_factory=dict)


def _recorded_messages(cassette: str, index: int = 0) -> list[dict[str, Any]]:
    body = load(API, cassette)[index].request_body
    assert isinstance(body, dict)
    return list(body["messages"])


TEMPERATURE = ToolSpec(
    "get_temperature",
    "",
    {
        "additionalProperties": False,
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "type": "object",
    },
)
NO_ARGS = {"additionalProperties": False, "properties": {}, "type": "object"}


def _pdf(cassette: str, message: int = 0, block: int = 1) -> bytes:
    msgs = _recorded_messages(cassette, len(load(API, cassette)) - 1)
    return _data(msgs[message]["content"][block]["file"]["file_data"])


def _tool_part_data(cassette: str, index: int) -> dict[str, Any]:
    return _recorded_messages(cassette, index)[3]["content"][0]


def _cases() -> list[Case]:
    matrix = "test_multimodal_tool_return_matrix[tool_return_content-{}-openai_chat].yaml"
    jpeg = _data(_tool_part_data(matrix.format("binary-image"), 1)["image_url"]["url"])
    matrix_pdf = _data(_tool_part_data(matrix.format("url-document"), 2)["file"]["file_data"])
    get_file = ToolSpec("get_file", "", NO_ARGS)
    upper = {"additionalProperties": False, "properties": {"text": {"type": "string"}},
             "required": ["text"], "type": "object"}
    helpful, france = Message("system", "You are a helpful assistant."), "What is the capital of France?"

    def tool(content: str, call_id: str, name: str, *parts: Part) -> list[Message]:
        return [Message("tool", content, tool_call_id=call_id, tool_name=name, parts=list(parts))]

    def file_turns(kind: str, call_id: str, part: Part) -> list[list[Message]]:
        ask = f"Use the get_file tool now to retrieve a {kind} file, then describe what you received."
        return [[Message("user", ask)], tool("", call_id, "get_file", part)]

    def document(prompt: str, data: bytes, media_type: str) -> Message:
        return Message("user", prompt, parts=[Part("document", data=data, media_type=media_type)])

    pdf = "test_document_as_binary_content_input.yaml"
    pdf_tool = "test_document_as_binary_content_input_with_tool.yaml"
    location = {"approximate": {"city": "Utrecht", "country": "NL"}, "type": "approximate"}
    return [
        Case("test_valid_response.yaml", "gpt-4o", [[Message("user", france)]]),
        Case("test_openai_instructions.yaml", "gpt-4o", [[helpful, Message("user", france)]]),
        Case("test_openai_model_without_system_prompt.yaml", "o3-mini",
             [[Message("system", "You are a potato.")]]),
        Case("test_system_prompt_role_o1_mini.yaml", "o1-mini",
             [[helpful, Message("user", "What's the capital of France?")]],
             settings={"system_role": "user"}),
        Case("test_openai_o1_mini_system_role[developer].yaml", "o1-mini",
             [[helpful, Message("user", "Hello")]], settings={"system_role": "developer"}),
        Case("test_max_completion_tokens[gpt-4.5-preview].yaml", "gpt-4.5-preview",
             [[Message("user", "hello")]], settings={"max_tokens": 100}),
        Case("test_user_id.yaml", "gpt-4o", [[Message("user", "hello")]],
             settings={"extra_body": {"user": "user_id"}}),
        Case("test_openai_moderation.yaml", "gpt-5", [[Message("user", france)]],
             settings={"extra_body": {"moderation": {"model": "omni-moderation-latest"}}}),
        Case("test_openai_web_search_tool_with_user_location.yaml", "gpt-4o-search-preview",
             [[helpful, Message("user", "What is the current temperature?")]],
             settings={"extra_body": {"web_search_options": {
                 "search_context_size": "medium", "user_location": location}}}),
        Case("test_openai_instructions_with_tool_calls_keep_instructions.yaml", "gpt-4.1-mini",
             [[helpful, Message("user", "What is the temperature in Tokyo?")],
              tool("20.0", "call_bhZkmIKKItNGJ41whHUHB7p9", "get_temperature")],
             tools=[TEMPERATURE]),
        Case("test_openai_native_output.yaml", "gpt-4o",
             [[Message("user", "What is the largest city in the user country?")],
              tool("Mexico", "call_PkRGedQNRFUzJp2R7dO7avWR", "get_user_country")],
             tools=[ToolSpec("get_user_country", "", NO_ARGS)],
             output_schema={"properties": {"city": {"type": "string"}, "country": {"type": "string"}},
                            "required": ["city", "country"], "type": "object"}),
        Case(pdf, "gpt-4o", [[document("What is the main content on this document?", _pdf(pdf),
                                       "application/pdf")]]),
        Case(pdf_tool, "gpt-4o",
             [[document("What is the main content on this document? Use the get_upper_case tool "
                        "to get the upper case of the text.", _pdf(pdf_tool), "application/pdf")],
              tool("DUMMY PDF FILE", "call_qkJ5pxpAXuEdMLTHIwrUk9Q4", "get_upper_case")],
             tools=[ToolSpec("get_upper_case", "", upper)]),
        Case("test_yaml_document_as_binary_content_input.yaml", "gpt-4o",
             [[document("What type of configuration is this?",
                        b'version: "3"\nservices:\n  web:\n    image: nginx', "application/yaml")]]),
        Case("test_x_yaml_document_as_binary_content_input.yaml", "gpt-4o",
             [[document("What does this YAML describe?", b"name: test\nversion: 1.0.0",
                        "application/x-yaml")]]),
        Case(matrix.format("url-image"), "gpt-5-mini",
             file_turns("image", "call_ME1KcrBbHGTnLG4bnoffOcxs",
                        Part("image", url="https://www.gstatic.com/webp/gallery3/1.png")),
             tools=[get_file]),
        Case(matrix.format("binary-image"), "gpt-5-mini",
             file_turns("image", "call_l5n1f5x4sjW0mEib40nLHFp2",
                        Part("image", data=jpeg, media_type="image/jpeg")),
             tools=[get_file]),
        Case(matrix.format("url-document"), "gpt-5-mini",
             file_turns("document", "call_gMOcigoRTfhEAl5QLsge1wiK",
                        Part("document", data=matrix_pdf, media_type="application/pdf")),
             tools=[get_file]),
    ]


CASES = _cases() if available() else []


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.cassette.removesuffix(".yaml"))
async def test_request_bodies_match_the_recordings(case: Case) -> None:
    interactions = [it for it in load(API, case.cassette) if it.uri.endswith("/chat/completions")]
    assert len(interactions) == len(case.turns)
    seen: list[httpx.Request] = []
    client = httpx.AsyncClient(transport=replay_transport(interactions, seen))
    model = OpenAIChatModel(case.model, api_key="sk-test", http_client=client, **case.settings)
    history: list[Message] = []
    for turn, it in zip(case.turns, interactions, strict=True):
        history.extend(turn)
        request = ModelRequest(list(history), tools=case.tools, output_schema=case.output_schema)
        if it.status != 200:
            with pytest.raises(BadRequest):
                await model.generate(request)
        else:
            history.append((await model.generate(request)).message)
        _assert_body_matches(json.loads(seen[-1].content), it.request_body)
        assert seen[-1].url == "https://api.openai.com/v1/chat/completions"
        assert seen[-1].headers["authorization"] == "Bearer sk-test"
    await client.aclose()


async def test_extra_headers_are_sent() -> None:
    it = load(API, "test_extra_headers.yaml")[0]
    seen: list[httpx.Request] = []
    model = OpenAIChatModel(
        "gpt-4o",
        api_key="sk-test",
        extra_headers={"xProxy-Limit-IDs": "monthly_budget"},
        http_client=httpx.AsyncClient(transport=replay_transport([it], seen)),
    )
    resp = await model.generate(ModelRequest([Message("user", "hello")]))
    assert resp.message.content == "Hello! How can I assist you today?"
    assert seen[0].headers["xproxy-limit-ids"] == "monthly_budget"
    _assert_body_matches(json.loads(seen[0].content), it.request_body)
