"""Request mapping over the recorded traffic: the bodies each adapter builds for conversations
golem can express equal the recorded requests in every field the adapter sets (OpenAI Chat,
Gemini, and every expressible Anthropic request), and histories the other adapters parsed from
their recordings map to requests the Anthropic API accepts."""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from golem.errors import BadRequest
from golem.messages import Message, Part, ToolCall, dumps_history, loads_history
from golem.model import ModelRequest, ToolSpec
from golem.providers.gemini import GeminiModel
from golem.providers.openai import OpenAIChatModel
from tests.support.adapters import body_of, final, send
from tests.support.anthropic import (
    ADAPTER_KEYS,
    Inexpressible,
    golem_request,
    message_interactions,
    model_on,
    normalize_recorded,
)
from tests.support.gemini import (
    assert_subset,
    normalize,
    recorded,
    recorded_generate,
    rename_tool_output_key,
)
from tests.support.recordings import (
    Interaction,
    answers,
    available,
    interaction_id,
    load,
    needs_recordings,
    replay_transport,
)

pytestmark = needs_recordings


# --------------------------------------------------------------------------- OpenAI Chat


API = "openai-chat"


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


# --------------------------------------------------------------------------- Gemini


GET_CAPITAL = ToolSpec(
    "get_capital",
    "Get the capital of a country.",
    {
        "additionalProperties": False,
        "properties": {"country": {"description": "The country name.", "type": "string"}},
        "required": ["country"],
        "type": "object",
    },
)
EMPTY_SCHEMA = {"additionalProperties": False, "properties": {}, "type": "object"}


def _request_body(request: ModelRequest, **settings: Any) -> dict[str, Any]:
    model = GeminiModel("gemini-2.5-flash", api_key="k", **settings)
    body: dict[str, Any] = model.request_body(request)
    return body


async def _parse(it: Interaction) -> Message:
    return final(await send("gemini", it.body, stream=False)).message


def _match(mine: dict[str, Any], it: Interaction) -> None:
    assert_subset(normalize(mine), rename_tool_output_key(normalize(it.request_body)))


def _sig(it: Interaction, part: int = 0) -> str:
    sig: str = it.json["candidates"][0]["content"]["parts"][part]["thoughtSignature"]
    return sig


def test_request_system_and_user_text() -> None:
    it = recorded("test_google_model", 0)
    req = ModelRequest(
        messages=[
            Message(role="system", content="You are a chatbot."),
            Message(role="user", content="Hello!"),
        ]
    )
    body = _request_body(req)
    assert body == {
        "contents": [{"role": "user", "parts": [{"text": "Hello!"}]}],
        "systemInstruction": {"role": "user", "parts": [{"text": "You are a chatbot."}]},
    }
    _match(body, it)


RETRY = 'The country is not supported. Use "La France" instead.\n\nFix the errors and try again.'
FRANCE = [Message(role="system", content="You are a helpful chatbot."),
          Message(role="user", content="What is the capital of France?")]


def _retry_history() -> list[Message]:
    first, second = recorded_generate("test_google_model_retry")[:2]
    out = list(FRANCE)
    for it, call_id, country, result in (
        (first, "pyd_ai_1f2bdea4ea804905a3f05dfe5b96a7fb", "France", RETRY),
        (second, "pyd_ai_9f63eafb0eac47419f4f6c19975e924b", "La France", "Paris"),
    ):
        call = ToolCall(call_id, "get_capital", f'{{"country": "{country}"}}', signature=_sig(it))
        out += [Message(role="assistant", tool_calls=[call]),
                Message(role="tool", content=result, tool_call_id=call_id, tool_name="get_capital",
                        failed=result == RETRY)]
    return out


def test_request_tools_calls_signatures_and_results() -> None:
    history = _retry_history()
    _, second, third = recorded_generate("test_google_model_retry")
    for messages, it in ((history[:4], second), (history, third)):
        body = _request_body(
            ModelRequest(messages=messages, tools=[GET_CAPITAL]), temperature=0.0
        )
        _match(body, it)
        assert body["generationConfig"] == {"temperature": 0.0}
        assert body["tools"][0]["functionDeclarations"][0]["parametersJsonSchema"] == (
            GET_CAPITAL.schema
        )
    failed = body["contents"][2]["parts"][0]["functionResponse"]
    assert failed["response"] == {"error": history[3].content}
    assert body["contents"][4]["parts"][0]["functionResponse"] == {
        "name": "get_capital",
        "id": "pyd_ai_9f63eafb0eac47419f4f6c19975e924b",
        "response": {"output": "Paris"},
    }


async def test_request_built_from_our_own_parse_replays_signatures() -> None:
    first, second, third = recorded_generate("test_google_model_retry")
    history = list(FRANCE)
    for it, result in ((first, RETRY), (second, "Paris")):
        answer = await _parse(it)
        call = answer.tool_calls[0]
        history += [answer, Message(role="tool", content=result, tool_call_id=call.id,
                                    tool_name=call.name, failed=result == RETRY)]
    history = loads_history(dumps_history(history))  # a paused history survives JSON
    body = _request_body(ModelRequest(messages=history, tools=[GET_CAPITAL]), temperature=0.0)
    _match(body, third)
    calls = [p for c in body["contents"] for p in c["parts"] if "functionCall" in p]
    assert [p["thoughtSignature"] for p in calls] == [_sig(first), _sig(second)]
    assert all("id" not in p["functionCall"] for p in calls)  # Gemini gave none
    responses = [p for c in body["contents"] for p in c["parts"] if "functionResponse" in p]
    assert all("id" not in p["functionResponse"] for p in responses)


async def test_request_replays_thoughts_and_text_signature() -> None:
    first, second = recorded_generate("test_google_model_thinking_part")
    answer = await _parse(first)
    dummy = ToolSpec("dummy", "", EMPTY_SCHEMA)
    messages = [
        Message(role="system", content="You are a helpful assistant."),
        Message(role="user", content="How do I cross the street?"),
        answer,
        Message(
            role="user",
            content="Considering the way to cross the street, analogously, how do I cross the river?",
        ),
    ]
    body = _request_body(ModelRequest(messages=messages, tools=[dummy]), include_thoughts=True)
    _match(body, second)
    model_parts = body["contents"][1]["parts"]
    assert model_parts[0] == {"text": answer.thinking[0].text, "thought": True}
    assert model_parts[1] == {"text": answer.content, "thoughtSignature": _sig(first, 1)}
    assert body["generationConfig"] == {"thinkingConfig": {"includeThoughts": True}}


def test_request_generation_settings() -> None:
    base = FRANCE
    body = _request_body(ModelRequest(messages=base), max_tokens=5, thinking_budget=0)
    _match(body, recorded("test_google_model_max_tokens", 0))
    assert body["generationConfig"] == {
        "maxOutputTokens": 5,
        "thinkingConfig": {"thinkingBudget": 0},
    }
    body = _request_body(ModelRequest(messages=base), top_p=0.5)
    _match(body, recorded("test_google_model_top_p", 0))
    body = _request_body(ModelRequest(messages=base), stop=["\n\n"], temperature=0.2)
    assert body["generationConfig"] == {"temperature": 0.2, "stopSequences": ["\n\n"]}


def test_request_inline_image_and_document() -> None:
    for name, prompt, kind in (
        ("test_google_model_image_url_input", "What is this vegetable?", "image"),
        (
            "test_google_model_document_url_input",
            "What is the main content on this document?",
            "document",
        ),
        (
            "test_google_model_text_as_binary_content_input",
            "What is the main content on this document?",
            "document",
        ),
    ):
        it = recorded_generate(name)[0]
        inline = it.request_body["contents"][0]["parts"][1]["inlineData"]
        data = normalize({"inlineData": inline})["inlineData"]["data"]
        system = it.request_body.get("systemInstruction", {}).get("parts", [{}])[0].get("text", "")
        msg = Message(
            role="user",
            content=prompt,
            parts=[Part(kind, data=data, media_type=inline["mimeType"])],
        )
        body = _request_body(
            ModelRequest(messages=[Message(role="system", content=system), msg])
        )
        _match(body, it)
        assert base64.b64decode(body["contents"][0]["parts"][1]["inlineData"]["data"]) == data


def test_request_url_parts_become_file_data() -> None:
    it = recorded("test_google_model_youtube_video_url_input", 0)
    msg = Message(
        role="user",
        content="Explain me this video in a few sentences",
        parts=[Part("video", url="https://youtu.be/lCdaVNyHtjU", media_type="video/mp4")],
    )
    body = _request_body(
        ModelRequest(messages=[Message(role="system", content="You are a helpful chatbot."), msg])
    )
    _match(body, it)
    assert body["contents"][0]["parts"][1] == {
        "fileData": {"fileUri": "https://youtu.be/lCdaVNyHtjU", "mimeType": "video/mp4"}
    }


def test_request_tool_result_with_a_file_part() -> None:
    first, last = recorded_generate(
        "test_multimodal_tool_return_matrix[tool_return_content-uploaded_file-document-google_2_5]"
    )
    uri = "https://generativelanguage.googleapis.com/v1beta/files/k8plo4aq1e1w"
    call_id = "pyd_ai_7ef15ea3efd844c8bd45082492b883df"
    messages = [
        Message(
            role="user",
            content="Use the get_file tool now to retrieve a document file, then describe what you received.",
        ),
        Message(
            role="assistant",
            tool_calls=[ToolCall(call_id, "get_file", "{}", signature=_sig(first))],
        ),
        Message(
            role="tool",
            content="File attached",
            parts=[Part("document", url=uri, media_type="application/pdf")],
            tool_call_id=call_id,
            tool_name="get_file",
        ),
    ]
    body = _request_body(
        ModelRequest(messages=messages, tools=[ToolSpec("get_file", "", EMPTY_SCHEMA)])
    )
    _match(body, last)
    assert body["contents"][-1] == {
        "role": "user",
        "parts": [{"fileData": {"fileUri": uri, "mimeType": "application/pdf"}}],
    }


def test_request_native_structured_output() -> None:
    it = recorded("test_google_nested_models_with_native_output", 0)
    schema = it.request_body["generationConfig"]["responseJsonSchema"]
    messages = [
        Message(role="system", content="You are a helpful assistant that creates structured data."),
        Message(role="user", content="Create a simple example with 2 pages, each with 2 items"),
    ]
    body = _request_body(ModelRequest(messages=messages, output_schema=schema))
    _match(body, it)
    assert body["generationConfig"] == {
        "responseMimeType": "application/json",
        "responseJsonSchema": schema,
    }


def test_request_call_without_signature_gets_the_documented_placeholder() -> None:
    it = recorded("test_google_model_structured_output", 1)
    temperature, final = it.request_body["tools"][0]["functionDeclarations"]
    tools = [
        ToolSpec(d["name"], d["description"], d["parameters_json_schema"])
        for d in (temperature, final)
    ]
    call_id = "pyd_ai_3b434062371141a69cab8ea6571e6812"
    messages = [
        Message(role="system", content="You are a helpful chatbot."),
        Message(role="user", content="What was the temperature in London 1st January 2022?"),
        Message(
            role="assistant",
            tool_calls=[
                ToolCall(call_id, "temperature", '{"city": "London", "date": "2022-01-01"}')
            ],
        ),
        Message(role="tool", content="30°C", tool_call_id=call_id, tool_name="temperature"),
    ]
    body = _request_body(ModelRequest(messages=messages, tools=tools))
    _match(body, it)
    dummy = body["contents"][1]["parts"][0]["thoughtSignature"]  # the documented placeholder
    assert base64.b64decode(dummy) == b"skip_thought_signature_validator"


# --------------------------------------------------------------------------- Anthropic


def _expressible() -> list[Interaction]:
    out = []
    for it in message_interactions() if available() else []:
        try:
            golem_request(normalize_recorded(it.request_body))
        except Inexpressible:
            continue
        out.append(it)
    return out


EXPRESSIBLE = _expressible()


def test_enough_recorded_conversations_are_compared() -> None:
    assert len(EXPRESSIBLE) >= 50
    names = {it.cassette for it in EXPRESSIBLE}
    for needed in (
        "test_multiple_parallel_tool_calls.yaml",  # tools, tool results, system
        "test_anthropic_model_thinking_part.yaml",  # thinking replayed with its signature
        "test_image_url_input.yaml",  # image url
        "test_image_url_input_force_download.yaml",  # inline image
        "test_document_url_input.yaml",  # document url
        "test_text_document_as_binary_content_input.yaml",  # text document
        "test_anthropic_native_output_decimal_strict.yaml",  # structured output
        "test_model_sees_multiple_images[anthropic].yaml",  # parts inside a tool result
        "test_anthropic_sampling_settings_reach_the_wire.yaml",  # temperature + extra_body
        "test_request_stream_fallback_for_high_max_tokens.yaml",  # stream: true
    ):
        assert needed in names


@pytest.mark.parametrize("it", EXPRESSIBLE, ids=interaction_id)
async def test_request_body_matches_recording(it: Interaction) -> None:
    recorded = normalize_recorded(it.request_body)
    request, kwargs = golem_request(recorded)
    seen: list[httpx.Request] = []
    async with model_on(replay_transport([it], seen), **kwargs) as model:
        if it.status != 200:
            with pytest.raises(BadRequest):
                await model.generate(request)
        elif recorded.get("stream"):
            _ = [item async for item in model.generate_stream(request)]
        else:
            await model.generate(request)
    (sent,) = seen
    body = json.loads(sent.content)
    set_by_adapter = {k: v for k, v in body.items() if k in ADAPTER_KEYS}
    assert set_by_adapter == {k: v for k, v in recorded.items() if k in ADAPTER_KEYS}
    assert body == recorded  # extra_body supplies the rest
    assert sent.method == "POST"
    assert sent.url == "https://api.anthropic.com/v1/messages"
    assert sent.headers["x-api-key"] == "test-key"
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert sent.headers["content-type"] == "application/json"


async def test_prompted_output_puts_the_schema_in_the_system_prompt() -> None:
    it = load("anthropic", "test_anthropic_prompted_output.yaml")[0]
    recorded = it.request_body
    schema = {
        "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
        "required": ["city", "country"],
        "title": "CityLocation",
        "type": "object",
    }
    request = ModelRequest(
        messages=[Message(role="user", content=recorded["messages"][0]["content"][0]["text"])],
        tools=[ToolSpec("get_user_country", "", recorded["tools"][0]["input_schema"])],
        output_schema=schema,
    )
    async with model_on(
        replay_transport([it]), model="claude-sonnet-4-5", output_mode="prompted"
    ) as model:
        body = model.request_body(request)
    # pydantic-ai appends a trailing blank line after the instructions; golem does not.
    assert body["system"] == recorded["system"].rstrip("\n")
    assert "output_config" not in body
    assert {k: v for k, v in body.items() if k != "system"} == {
        k: v for k, v in recorded.items() if k != "system"
    }


async def test_native_output_transforms_the_schema_like_the_recording() -> None:
    """The recorded schema is what pydantic-ai sent for a Decimal field; golem gets the same."""
    it = load("anthropic", "test_anthropic_native_output_decimal_strict.yaml")[0]
    pattern = r"^(?!^[-+.]*$)[+-]?0*\d*\.?\d*$"
    schema = {
        "properties": {
            "amount": {"anyOf": [{"type": "number"}, {"type": "string", "pattern": pattern}]}
        },
        "required": ["amount"],
        "type": "object",
    }
    request = ModelRequest(
        messages=[Message(role="user", content="Return exactly this payment amount: 12.34")],
        output_schema=schema,
    )
    async with model_on(replay_transport([it]), model="claude-sonnet-4-5") as model:
        assert model.request_body(request) == it.request_body


# ------------------------------------------------- other adapters' histories sent to Anthropic


ID = re.compile(r"[A-Za-z0-9_-]+")


OPENAI = [it for it in answers("openai-chat") if not it.is_stream and it.json.get("choices")]
GEMINI = [it for it in answers("gemini") if not it.is_stream]


def _check(body: dict[str, Any], message: Message) -> None:
    json.dumps(body)
    blocks = [b for m in body["messages"] if m["role"] == "assistant" for b in m["content"]]
    assert not [b for b in blocks if b["type"] in ("thinking", "redacted_thinking")]
    uses = [b["id"] for b in blocks if b["type"] == "tool_use"]
    assert len(uses) == len(message.tool_calls)
    assert all(ID.fullmatch(u) for u in uses)
    results = [
        b["tool_use_id"]
        for m in body["messages"]
        if m["role"] == "user"
        for b in m["content"]
        if b["type"] == "tool_result"
    ]
    assert results == uses
    for m in body["messages"]:
        assert m["content"], "the API rejects empty content"


@pytest.mark.parametrize(
    ("api", "it"),
    [("openai-chat", it) for it in OPENAI] + [("gemini", it) for it in GEMINI],
    ids=lambda v: v if isinstance(v, str) else interaction_id(v),
)
async def test_foreign_history_maps_to_a_valid_anthropic_request(api: str, it: Interaction) -> None:
    response = final(await send(api, it.body, stream=False))
    history = [
        Message(role="system", content="Be helpful."),
        Message(role="user", content="hi"),
        response.message,
        *[
            Message(role="tool", tool_call_id=c.id, tool_name=c.name, content="done")
            for c in response.message.tool_calls
        ],
        Message(role="user", content="thanks"),
    ]
    restored = loads_history(dumps_history(history))
    body = body_of("anthropic", ModelRequest(messages=restored), model="claude-x")
    _check(body, response.message)


def test_the_cross_suite_sees_signatures_and_tool_calls() -> None:
    gemini_signed = [it for it in GEMINI if "thoughtSignature" in it.body]
    assert len(gemini_signed) >= 10
    assert any("tool_calls" in it.body for it in OPENAI)
