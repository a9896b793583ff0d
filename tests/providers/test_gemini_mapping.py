"""Gemini mapping details beyond the recordings: tool groups, cross-provider history, streams."""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import pytest

from golem.messages import Message, Part, ThinkingBlock, ToolCall, dumps_history, loads_history
from golem.model import Delta, ModelRequest, ModelResponse, ThinkingDelta, ToolCallDelta, ToolSpec
from golem.providers.gemini import GeminiModel
from golem.usage import Usage
from tests.support.adapters import send
from tests.support.events import gemini_answer
from tests.support.gemini import model_with, sse_body

DUMMY_SIGNATURE = base64.b64encode(b"skip_thought_signature_validator").decode()

WEATHER = ToolSpec(
    "get_weather",
    "Weather for a city.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


def build_request_body(request: ModelRequest, model: str = "m", **settings: Any) -> dict[str, Any]:
    body: dict[str, Any] = GeminiModel(model, api_key="k", **settings).request_body(request)
    return body


def _body(messages: list[Message], **kw: Any) -> dict[str, Any]:
    return build_request_body(ModelRequest(messages=messages, **kw))


async def parse_stream(chunks: list[dict[str, Any]]) -> tuple[list[Any], ModelResponse]:
    items = await send("gemini", sse_body(chunks).decode(), stream=True)
    final = items[-1]
    assert isinstance(final, ModelResponse)
    return items[:-1], final


# --------------------------------------------------------------------------- request mapping


def test_consecutive_tool_results_share_one_user_content() -> None:
    calls = [ToolCall("gemini_r1_0", "get_weather", '{"city":"Paris"}', signature="c2ln"),
             ToolCall("gemini_r1_1", "get_weather", '{"city":"Rome"}')]
    messages = [
        Message(role="user", content="weather in Paris and Rome?"),
        Message(role="assistant", content="Checking both.", tool_calls=calls),
        Message(role="tool", content="sunny", tool_call_id="gemini_r1_0", tool_name="get_weather"),
        Message(role="tool", content="city not found", tool_call_id="gemini_r1_1",
                tool_name="get_weather", failed=True),
        Message(role="user", content="thanks"),
    ]
    body = _body(messages, tools=[WEATHER])

    def response(key: str, value: str) -> dict[str, Any]:
        return {"functionResponse": {"name": "get_weather", "response": {key: value}}}

    assert body["contents"] == [
        {"role": "user", "parts": [{"text": "weather in Paris and Rome?"}]},
        {"role": "model", "parts": [
            {"text": "Checking both."},
            {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}, "thoughtSignature": "c2ln"},
            # only the first call of a turn needs a signature
            {"functionCall": {"name": "get_weather", "args": {"city": "Rome"}}},
        ]},
        {"role": "user", "parts": [response("output", "sunny"), response("error", "city not found")]},
        {"role": "user", "parts": [{"text": "thanks"}]},
    ]
    declaration = {"name": "get_weather", "description": "Weather for a city.",
                   "parametersJsonSchema": WEATHER.schema}
    assert body["tools"] == [{"functionDeclarations": [declaration]}]


def test_tool_result_parts_follow_the_responses_labelled_when_several() -> None:
    png = b"\x89PNG\r\n"
    messages = [
        Message(role="assistant", tool_calls=[ToolCall("c1", "shot", "{}"), ToolCall("c2", "scan", "{}")]),
        Message(role="tool", content="ok", parts=[Part("image", data=png, media_type="image/png")],
                tool_call_id="c1", tool_name="shot"),
        Message(role="tool", content="ok", parts=[Part("document", url="https://example.com/a.pdf")],
                tool_call_id="c2"),
    ]
    contents = _body(messages)["contents"]
    # the name comes from the call when the tool message lacks it
    assert contents[1] == {"role": "user", "parts": [
        {"functionResponse": {"name": n, "id": i, "response": {"output": "ok"}}}
        for i, n in (("c1", "shot"), ("c2", "scan"))
    ]}
    assert contents[2] == {"role": "user", "parts": [
        {"text": 'Attachments of the "shot" result:'},
        {"inlineData": {"mimeType": "image/png", "data": base64.b64encode(png).decode()}},
        {"text": 'Attachments of the "scan" result:'},
        {"fileData": {"fileUri": "https://example.com/a.pdf", "mimeType": "application/pdf"}},
    ]}


def test_history_from_other_providers_is_sendable() -> None:
    """IDs, thinking blocks and signatures from Anthropic/OpenAI never reach Gemini as-is."""
    toolu, thought = "toolu_01A09q90qw90lq917835lq9", "The user wants a deletion."
    thinking = [ThinkingBlock(text=thought, signature="EqQBCkYIBxgCKkB"),
                ThinkingBlock(redacted="EmwKAhgBEgy3va3pzix")]
    messages = [
        Message(role="system", content="Be brief."),
        Message(role="user", content="Delete /tmp/a"),
        Message(role="assistant", content="Deleting.", thinking=thinking,
                tool_calls=[ToolCall(toolu, "delete_file", '{"path":"/tmp/a"}')]),
        Message(role="tool", content="deleted", tool_call_id=toolu, tool_name="delete_file"),
        Message(role="system", content="Answer in French."),
        Message(role="assistant", content="Supprimé.",
                tool_calls=[ToolCall("call_abc123", "delete_file", '{"path":"/tmp/b"}')]),
        Message(role="tool", content="deleted", tool_call_id="call_abc123", tool_name="delete_file"),
    ]
    body = _body(loads_history(dumps_history(messages)))
    assert body["systemInstruction"] == {
        "role": "user", "parts": [{"text": "Be brief."}, {"text": "Answer in French."}]
    }
    call = {"name": "delete_file", "args": {"path": "/tmp/a"}, "id": toolu}
    assert body["contents"][1]["parts"] == [
        {"text": thought, "thought": True},  # no foreign signature
        {"text": "Deleting."},
        {"functionCall": call, "thoughtSignature": DUMMY_SIGNATURE},
    ]
    assert body["contents"][2]["parts"][0]["functionResponse"]["id"] == toolu
    assert body["contents"][4]["parts"][0]["functionResponse"]["id"] == "call_abc123"
    json.dumps(body)  # plain JSON all the way down


def test_signature_only_text_block_is_sent_as_gemini_sent_it() -> None:
    msg = Message(
        role="assistant",
        thinking=[ThinkingBlock(signature="c2ln")],
        tool_calls=[ToolCall("gemini_r_0", "f", "{}", signature="Y2FsbA==")],
    )
    assert _body([msg])["contents"][0]["parts"] == [
        {"functionCall": {"name": "f", "args": {}}, "thoughtSignature": "Y2FsbA=="},
        {"text": "", "thoughtSignature": "c2ln"},
    ]


def test_user_parts_inline_url_and_data_url() -> None:
    b64 = base64.b64encode(b"abc").decode()
    youtube = "https://www.youtube.com/watch?v=9hE5-98ZeCg"
    parts = [Part("image", url="https://example.com/cat.jpg"),
             Part("image", url=f"data:image/png;base64,{b64}"),
             Part("audio", data=b"abc", media_type="audio/wav"), Part("video", url=youtube)]
    assert _body([Message(role="user", content="look", parts=parts)])["contents"][0]["parts"] == [
        {"text": "look"},
        {"fileData": {"fileUri": "https://example.com/cat.jpg", "mimeType": "image/jpeg"}},
        {"inlineData": {"mimeType": "image/png", "data": b64}},
        {"inlineData": {"mimeType": "audio/wav", "data": b64}},
        {"fileData": {"fileUri": youtube}},
    ]


@pytest.mark.parametrize(
    ("model", "supported"),
    [
        ("gemini-2.5-flash", False),
        ("gemini-2.0-flash", False),
        ("gemini-3-pro-preview", True),
        ("models/gemini-3-flash-preview", True),
        ("gemini-3.1-flash-lite", True),
        ("tunedModels/abc", False),
    ],
)
def test_structured_output_with_tools_depends_on_the_model(model: str, supported: bool) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    req = ModelRequest(
        messages=[Message(role="system", content="Count."), Message(role="user", content="3")],
        tools=[WEATHER],
        output_schema=schema,
    )
    body = build_request_body(req, model)
    if supported:
        assert body["generationConfig"] == {
            "responseMimeType": "application/json",
            "responseJsonSchema": schema,
        }
        assert body["systemInstruction"]["parts"] == [{"text": "Count."}]
    else:
        assert "responseJsonSchema" not in body.get("generationConfig", {})
        assert body["systemInstruction"]["parts"] == [
            {"text": "Count."},
            {
                "text": "Answer with a single JSON value that matches the JSON schema below, "
                "with no other text and no code fences.\nJSON schema: "
                '{"properties":{"n":{"type":"integer"}},"type":"object"}'
            },
        ]


def test_extra_body_merges_recursively() -> None:
    extra = {
        "generationConfig": {"thinkingConfig": {"thinkingLevel": "low"}, "topK": 3},
        "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}],
    }
    first = build_request_body(ModelRequest(messages=[]), extra_body=extra)
    first["safetySettings"].append("mutated by the caller")
    first["generationConfig"]["topK"] = 99
    assert extra["safetySettings"] == [
        {"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}
    ]
    assert extra["generationConfig"] == {"thinkingConfig": {"thinkingLevel": "low"}, "topK": 3}
    body = build_request_body(
        ModelRequest(messages=[Message(role="user", content="hi")]),
        thinking_budget=128,
        extra_body={
            "generationConfig": {"thinkingConfig": {"thinkingLevel": "low"}, "topK": 3},
            "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}],
        },
    )
    assert body["generationConfig"] == {
        "thinkingConfig": {"thinkingBudget": 128, "thinkingLevel": "low"},
        "topK": 3,
    }
    assert body["safetySettings"][0]["threshold"] == "BLOCK_NONE"


# --------------------------------------------------------------------------- response mapping


@pytest.mark.parametrize(
    ("raw", "calls", "expected"),
    [
        ("STOP", False, "stop"),
        ("STOP", True, "tool_call"),
        ("MAX_TOKENS", True, "length"),
        ("SAFETY", False, "content_filter"),
        ("RECITATION", False, "content_filter"),
        ("BLOCKLIST", False, "content_filter"),
        ("PROHIBITED_CONTENT", False, "content_filter"),
        ("SPII", False, "content_filter"),
        ("MALFORMED_FUNCTION_CALL", True, "other"),  # a call came through: kept
        ("OTHER", False, "other"),
        ("FINISH_REASON_UNSPECIFIED", False, "other"),
        ("", False, ""),
    ],
)
async def test_finish_reasons(raw: str, calls: bool, expected: str) -> None:
    part = {"functionCall": {"name": "f", "args": {}}} if calls else {"text": "x"}
    candidate = {"content": {"role": "model", "parts": [part]}, "finishReason": raw}
    assert (await gemini_answer({"candidates": [candidate]})).finish_reason == expected


async def test_blocked_prompt_is_a_content_filter_with_an_empty_message() -> None:
    body = {
        "promptFeedback": {"blockReason": "SAFETY", "safetyRatings": []},
        "usageMetadata": {"promptTokenCount": 7, "totalTokenCount": 7},
        "modelVersion": "gemini-2.5-flash",
    }
    assert await gemini_answer(body) == ModelResponse(
        message=Message(role="assistant"),
        usage=Usage(input_tokens=7),
        finish_reason="content_filter",
        model_name="gemini-2.5-flash",
    )
    deltas, final = await parse_stream([body])
    assert deltas == []
    assert final == await gemini_answer(body)


async def test_function_call_id_from_the_api_is_kept() -> None:
    body = {
        "candidates": [
            {
                "content": {
                    "role": "model",
                    "parts": [{"functionCall": {"id": "fc-7", "name": "f", "args": {"x": 1.5}}}],
                },
                "finishReason": "STOP",
            }
        ]
    }
    message = (await gemini_answer(body)).message
    assert message.tool_calls[0] == ToolCall(id="fc-7", name="f", args='{"x":1.5}')
    sent = _body([message])["contents"][0]["parts"][0]["functionCall"]
    assert sent == {"name": "f", "args": {"x": 1.5}, "id": "fc-7"}


async def test_parsing_tolerates_odd_shapes() -> None:
    body = {
        "candidates": [
            {
                "content": {
                    "parts": [
                        "not a part",
                        {"text": ""},
                        {"executableCode": {"language": "PYTHON", "code": "print(1)"}},
                        {"functionCall": {"name": "f"}},
                        {"inlineData": {"mimeType": "image/png", "data": "AA=="}},
                    ]
                },
                "finishReason": "STOP",
            }
        ],
        "usageMetadata": {"promptTokenCount": "3", "candidatesTokenCount": True},
    }
    r = await gemini_answer(body)
    assert r.message.tool_calls[0].args == "{}"
    assert r.usage == Usage(input_tokens=3)  # a count written as digits is read (ADR 0060)
    assert r.message.parts[0].data == b"\x00"  # media an answer carries are kept
    assert r.finish_reason == "tool_call"


# --------------------------------------------------------------------------- streaming

def _chunk(*parts: dict[str, Any], usage: dict[str, Any], **extra: Any) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": list(parts)}}
    if extra.pop("stop", False):
        candidate["finishReason"] = "STOP"
    return {"candidates": [candidate], "usageMetadata": usage, "responseId": "resp-A", **extra}


STREAM = [
    _chunk({"text": "Plan: ", "thought": True}, usage={"promptTokenCount": 10, "thoughtsTokenCount": 4},
           modelVersion="gemini-2.5-pro"),
    _chunk({"text": "check weather.", "thought": True},
           usage={"promptTokenCount": 10, "thoughtsTokenCount": 9}),
    _chunk({"text": "Let me ", "thoughtSignature": "dGV4dA=="}, {"text": "check."},
           usage={"promptTokenCount": 10, "candidatesTokenCount": 3, "thoughtsTokenCount": 9}),
    _chunk({"functionCall": {"name": "get_weather", "args": {"city": "Paris"}},
            "thoughtSignature": "Y2FsbA=="},
           {"functionCall": {"name": "get_weather", "args": {"city": "Rome"}}},
           usage={"promptTokenCount": 10, "candidatesTokenCount": 20, "thoughtsTokenCount": 9,
                  "cachedContentTokenCount": 4}, stop=True),
]


async def test_stream_deltas_arrive_in_order() -> None:
    deltas, final = await parse_stream(STREAM)
    assert deltas == [
        Delta(thinking=[ThinkingDelta(index=0, text="Plan: ")]),
        Delta(thinking=[ThinkingDelta(index=0, text="check weather.")]),
        Delta(content="Let me ", thinking=[ThinkingDelta(index=1, signature="dGV4dA==")]),
        Delta(content="check."),
        Delta(tool_calls=[ToolCallDelta(index=0, id="gemini_resp-A_0", name="get_weather",
                                        args_fragment='{"city":"Paris"}', signature="Y2FsbA==")]),
        Delta(tool_calls=[ToolCallDelta(index=1, id="gemini_resp-A_1", name="get_weather",
                                        args_fragment='{"city":"Rome"}')]),
    ]
    calls = [ToolCall("gemini_resp-A_0", "get_weather", '{"city":"Paris"}', "Y2FsbA=="),
             ToolCall("gemini_resp-A_1", "get_weather", '{"city":"Rome"}')]
    thinking = [ThinkingBlock(text="Plan: check weather."), ThinkingBlock(signature="dGV4dA==")]
    assert final == ModelResponse(
        message=Message(role="assistant", content="Let me check.", thinking=thinking, tool_calls=calls),
        usage=Usage(input_tokens=10, output_tokens=29, cache_read_tokens=4, reasoning_tokens=9),
        finish_reason="tool_call",
        model_name="gemini-2.5-pro",
    )
    parts = [p for c in STREAM for p in c["candidates"][0]["content"]["parts"]]
    merged = {**_chunk(*parts, usage=STREAM[-1]["usageMetadata"], stop=True),
              "modelVersion": "gemini-2.5-pro"}
    assert await gemini_answer(merged) == final


async def test_stream_over_http_matches_the_parser_and_sends_the_same_body() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path.endswith(":streamGenerateContent"):
            return httpx.Response(
                200, headers={"content-type": "text/event-stream"}, content=sse_body(STREAM)
            )
        return httpx.Response(200, json=STREAM[-1])

    model, client = model_with(handler, model="gemini-2.5-pro", temperature=0.3)
    req = ModelRequest(messages=[Message(role="user", content="weather?")], tools=[WEATHER])
    items = [x async for x in model.generate_stream(req)]
    await model.generate(req)
    await client.aclose()
    deltas, final = await parse_stream(STREAM)
    assert items == [*deltas, final]
    assert json.loads(seen[0].content) == json.loads(seen[1].content) == model.request_body(req)


async def test_stream_answered_with_a_json_array() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=STREAM)

    model, client = model_with(handler)
    items = [x async for x in model.generate_stream(ModelRequest(messages=[]))]
    await client.aclose()
    assert items[-1] == (await parse_stream(STREAM))[1]
