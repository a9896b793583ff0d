"""The Gemini adapter's request bodies against recorded ones (every field it sets)."""

from __future__ import annotations

import base64
from typing import Any

from golem.messages import Message, Part, ToolCall, dumps_history, loads_history
from golem.model import ModelRequest, ToolSpec
from golem.providers.gemini import GeminiModel
from tests.support import recordings as _recordings
from tests.support.adapters import final, send
from tests.support.gemini import (
    assert_subset,
    normalize,
    recorded,
    recorded_generate,
    rename_tool_output_key,
)
from tests.support.recordings import Interaction

pytestmark = _recordings.needs_recordings

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


def _retry_history() -> list[Message]:
    first, second = recorded_generate("test_google_model_retry")[:2]
    return [
        Message(role="system", content="You are a helpful chatbot."),
        Message(role="user", content="What is the capital of France?"),
        Message(
            role="assistant",
            tool_calls=[
                ToolCall(
                    "pyd_ai_1f2bdea4ea804905a3f05dfe5b96a7fb",
                    "get_capital",
                    '{"country": "France"}',
                    signature=_sig(first),
                )
            ],
        ),
        Message(
            role="tool",
            content='The country is not supported. Use "La France" instead.\n\nFix the errors and try again.',
            tool_call_id="pyd_ai_1f2bdea4ea804905a3f05dfe5b96a7fb",
            tool_name="get_capital",
            failed=True,
        ),
        Message(
            role="assistant",
            tool_calls=[
                ToolCall(
                    "pyd_ai_9f63eafb0eac47419f4f6c19975e924b",
                    "get_capital",
                    '{"country": "La France"}',
                    signature=_sig(second),
                )
            ],
        ),
        Message(
            role="tool",
            content="Paris",
            tool_call_id="pyd_ai_9f63eafb0eac47419f4f6c19975e924b",
            tool_name="get_capital",
        ),
    ]


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
    history = [
        Message(role="system", content="You are a helpful chatbot."),
        Message(role="user", content="What is the capital of France?"),
    ]
    for it, result, failed in (
        (
            first,
            'The country is not supported. Use "La France" instead.\n\nFix the errors and try again.',
            True,
        ),
        (second, "Paris", False),
    ):
        answer = await _parse(it)
        call = answer.tool_calls[0]
        history += [
            answer,
            Message(
                role="tool",
                content=result,
                tool_call_id=call.id,
                tool_name=call.name,
                failed=failed,
            ),
        ]
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
    base = [
        Message(role="system", content="You are a helpful chatbot."),
        Message(role="user", content="What is the capital of France?"),
    ]
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
