"""The OpenAI Responses adapter: recorded runs replayed through httpx.MockTransport, request
bodies compared with recorded ones, reasoning kept across turns (and across the history JSON).
Its errors: test_errors.py; its recorded answers: test_recorded_answers.py."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pydantic
import pytest

from golem import Agent, dumps_history, loads_history
from golem.messages import Message, Part, ThinkingBlock, ToolCall
from golem.model import Delta, ModelRequest, ModelResponse, ToolSpec
from golem.providers import infer_model
from golem.providers.openai import OpenAIResponsesModel
from golem.usage import Usage
from tests.support.adapters import body_of, final, send
from tests.support.recordings import (
    load,
    needs_recordings,
    replay_transport,
)

API = "openai-responses"
pytestmark = needs_recordings


def _model(client: httpx.AsyncClient, name: str = "gpt-5", **kw: Any) -> OpenAIResponsesModel:
    return OpenAIResponsesModel(name, api_key="k", http_client=client, **kw)


def _signature(item_id: str, encrypted: str) -> str:
    """The `ThinkingBlock.signature` a reasoning item is kept as (histories hold it)."""
    return f"openai-responses/{item_id}/{encrypted}"


async def test_simple_response_exact() -> None:
    it = load(API, "test_openai_responses_model_simple_response.yaml")[0]
    seen: list[httpx.Request] = []
    async with httpx.AsyncClient(transport=replay_transport([it], seen)) as client:
        result = await Agent(_model(client, "gpt-4o")).run("What is the capital of France?")
    assert result.output == "The capital of France is Paris."
    assert result.usage == Usage(input_tokens=14, output_tokens=8)
    sent = json.loads(seen[0].content)
    assert sent == {
        "model": "gpt-4o",
        "input": it.request_body["input"],
        "stream": False,
        "store": False,
    }
    assert seen[0].url == "https://api.openai.com/v1/responses"
    assert seen[0].headers["authorization"] == "Bearer k"


async def test_instructions_are_the_system_messages() -> None:
    it = load(API, "test_openai_responses_model_instructions.yaml")[0]
    seen: list[httpx.Request] = []
    async with httpx.AsyncClient(transport=replay_transport([it], seen)) as client:
        agent = Agent(_model(client, "gpt-4o"), instructions="You are a helpful assistant.")
        result = await agent.run("What is the capital of France?")
    assert result.output == "The capital of France is Paris."
    sent = json.loads(seen[0].content)
    assert sent["instructions"] == it.request_body["instructions"]
    assert sent["input"] == it.request_body["input"]


async def test_reasoning_is_replayed_on_the_next_turn_even_through_the_history_json() -> None:
    first, second = load(API, "test_openai_responses_model_thinking_part.yaml")
    seen: list[httpx.Request] = []
    async with httpx.AsyncClient(transport=replay_transport([first, second], seen)) as client:
        model = _model(client, reasoning_effort="high", reasoning_summary="detailed")
        agent = Agent(model)
        one = await agent.run("How do I cross the street?")
        history = loads_history(dumps_history(one.messages))  # as a paused run stores it
        two = await agent.run(
            "Considering the way to cross the street, analogously, how do I cross the river?",
            history=history,
        )
    assert two.output.startswith(second.json["output"][-1]["content"][0]["text"][:40])
    sent = [json.loads(r.content) for r in seen]
    for body, it in zip(sent, (first, second), strict=True):
        assert body["include"] == ["reasoning.encrypted_content"] == it.request_body["include"]
        assert body["reasoning"] == it.request_body["reasoning"]
    recorded_input, our_input = second.request_body["input"], sent[1]["input"]
    assert [i.get("type") or i["role"] for i in our_input] == [
        "user",
        "reasoning",
        "assistant",
        "user",
    ]
    recorded_reasoning, our_reasoning = recorded_input[1], our_input[1]
    assert our_reasoning["id"] == recorded_reasoning["id"]
    assert our_reasoning["encrypted_content"] == recorded_reasoning["encrypted_content"]
    assert our_reasoning["summary"] == [
        {
            "type": "summary_text",
            "text": "\n\n".join(s["text"] for s in recorded_reasoning["summary"]),
        }
    ]
    assert our_input[2]["content"] == recorded_input[2]["content"][0]["text"]
    assert (
        one.usage.reasoning_tokens
        == first.json["usage"]["output_tokens_details"]["reasoning_tokens"]
    )


async def test_a_streamed_tool_run_replays_the_recording() -> None:
    interactions = load(API, "test_openai_responses_stream.yaml")
    seen: list[httpx.Request] = []
    async with httpx.AsyncClient(transport=replay_transport(interactions, seen)) as client:
        agent = Agent(_model(client, "gpt-4o"))

        @agent.tool
        def get_capital(country: str) -> str:
            """The capital of a country."""
            return "Paris"

        deltas: list[Any] = []
        async with agent.run_stream("What is the capital of France?") as stream:
            async for item in stream:
                if isinstance(item, Delta):
                    deltas.append(item)
        result = stream.result
    assert result.output == "The capital of France is Paris."
    assert "".join(d.content for d in deltas) == "The capital of France is Paris."
    first, second = (json.loads(r.content) for r in seen)
    assert first["stream"] is True
    assert first["tool_choice"] == "auto"
    tool = first["tools"][0]
    assert (tool["name"], tool["type"], tool["strict"]) == ("get_capital", "function", True)
    assert second["input"][1:] == [
        {
            "type": "function_call",
            "call_id": "call_kL0PCQV7M2WMoVX8V8OtYSAL",
            "name": "get_capital",
            "arguments": '{"country":"France"}',
        },
        {
            "type": "function_call_output",
            "call_id": "call_kL0PCQV7M2WMoVX8V8OtYSAL",
            "output": "Paris",
        },
    ]


class Payment(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(title="Payment", extra="forbid")
    amount: float


async def test_structured_output_uses_a_json_schema_text_format() -> None:
    it = load(API, "test_openai_responses_native_output_decimal_strict.yaml")[0]
    seen: list[httpx.Request] = []
    async with httpx.AsyncClient(transport=replay_transport([it], seen)) as client:
        agent = Agent(_model(client, "gpt-5.4-mini"), output_type=Payment)
        result = await agent.run("Return exactly this payment amount: 12.34")
    assert result.output == Payment(amount=12.34)
    fmt = json.loads(seen[0].content)["text"]["format"]
    recorded = it.request_body["text"]["format"]
    assert (fmt["type"], fmt["name"], fmt["strict"]) == (
        recorded["type"],
        recorded["name"],
        recorded["strict"],
    )
    assert fmt["schema"]["required"] == ["amount"]


async def test_recorded_tool_choice_request() -> None:
    it = load(
        API, "test_tool_choice_matrix__test_tool_choice_matrix[list_single-openai_responses].yaml"
    )[0]
    tools = [
        ToolSpec(t["name"], t["description"], t["parameters"]) for t in it.request_body["tools"]
    ]
    request = ModelRequest(
        messages=[Message(role="user", content="What's the weather in Paris?")],
        tools=tools,
        tool_choice="get_weather",
    )
    seen: list[httpx.Request] = []
    async with httpx.AsyncClient(transport=replay_transport([it], seen)) as client:
        response = await _model(client, "gpt-5-mini").generate(request)
    sent = json.loads(seen[0].content)
    for key in ("tool_choice", "tools", "include", "input"):
        assert sent[key] == it.request_body[key], key
    assert [c.name for c in response.message.tool_calls] == ["get_weather"]


async def parse_responses_response(body: dict[str, Any]) -> ModelResponse:
    return final(await send(API, json.dumps(body), stream=False))


async def test_incomplete_and_refused_responses() -> None:
    base: dict[str, Any] = {"model": "gpt-5", "usage": {"input_tokens": 3, "output_tokens": 9}}
    cut = await parse_responses_response(
        {
            **base,
            "status": "incomplete",
            "incomplete_details": {"reason": "max_output_tokens"},
            "output": [{"type": "message", "content": [{"type": "output_text", "text": "Par"}]}],
        }
    )
    assert (cut.message.content, cut.finish_reason) == ("Par", "length")
    refused = await parse_responses_response(
        {
            **base,
            "status": "completed",
            "output": [
                {"type": "message", "content": [{"type": "refusal", "refusal": "I can't."}]}
            ],
        }
    )
    assert (refused.message.content, refused.finish_reason) == ("I can't.", "content_filter")


# --------------------------------------------------------------------------- requests

def test_a_conversation_maps_to_input_items() -> None:
    signature = _signature("rs_1", "gAAA-enc")
    request = ModelRequest(
        messages=[
            Message(role="system", content="Be brief."),
            Message(
                role="user",
                content="Compare these.",
                parts=[
                    Part(kind="image", url="https://example.com/a.png"),
                    Part(kind="document", data=b"%PDF-1.4", media_type="application/pdf"),
                ],
            ),
            Message(
                role="assistant",
                content="Looking.",
                thinking=[
                    ThinkingBlock(text="Plan it.", signature=signature),
                    ThinkingBlock(text="Claude's thought", signature="EqQBCkYIBxgCKkBv"),
                ],
                tool_calls=[ToolCall("call_1", "lookup", '{"q": "a"}')],
            ),
            Message(role="tool", content="found", tool_call_id="call_1", tool_name="lookup"),
        ],
        tools=[ToolSpec("lookup", "Look up.", {"type": "object", "properties": {}})],
        tool_choice="required",
    )
    body = body_of(API, request, "gpt-5")
    assert body["instructions"] == "Be brief."
    assert body["tool_choice"] == "required"
    assert body["tools"][0]["strict"] is False  # not strict-compatible: said explicitly
    assert body["input"] == [
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "Compare these."},
                {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "auto"},
                {
                    "type": "input_file",
                    "file_data": "data:application/pdf;base64,JVBERi0xLjQ=",
                    "filename": body["input"][0]["content"][2]["filename"],
                },
            ],
        },
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [{"type": "summary_text", "text": "Plan it."}],
            "encrypted_content": "gAAA-enc",
        },
        {"role": "assistant", "content": "Looking."},
        {"type": "function_call", "call_id": "call_1", "name": "lookup", "arguments": '{"q": "a"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "found"},
    ]
    assert body["input"][0]["content"][2]["filename"].endswith(".pdf")


def test_an_empty_prompt_is_a_user_item() -> None:
    body = body_of(API, ModelRequest(messages=[Message(role="user")]), "gpt-5")
    assert body["input"] == [{"role": "user", "content": ""}]
    body = body_of(API, ModelRequest(messages=[]), "gpt-5")
    assert body["input"] == [{"role": "user", "content": ""}]


def test_responses_reasoning_is_never_sent_to_other_providers() -> None:
    message = Message(
        role="assistant",
        content="Done.",
        thinking=[ThinkingBlock(text="", signature=_signature("rs_1", "gAAA"))],
    )
    request = ModelRequest(messages=[Message(role="user", content="hi"), message])
    assert "gAAA" not in json.dumps(body_of("anthropic", request, model="m"))
    assert "gAAA" not in json.dumps(body_of("gemini", request))
    summarized = ModelRequest(
        messages=[
            Message(role="user", content="hi"),
            Message(
                role="assistant",
                content="Done.",
                thinking=[
                    ThinkingBlock(text="Sum.", signature=_signature("rs_1", "gAAA"))
                ],
            ),
        ]
    )
    assert "gAAA" not in json.dumps(body_of("anthropic", summarized, model="m"))


@pytest.mark.parametrize(
    ("signature", "item"),
    [
        (_signature("rs_9", "x-y_z="), {"id": "rs_9", "encrypted_content": "x-y_z="}),
        (_signature("rs_9", ""), {"id": "rs_9"}),
        ("EqQBCkYIBxgC", None),  # another provider's
        ("openai-responses/", None),  # no item ID
    ],
)
def test_a_reasoning_signature_goes_back_as_its_item(
    signature: str, item: dict[str, Any] | None
) -> None:
    thought = ThinkingBlock(text="", signature=signature)
    answer = Message(role="assistant", content="Done.", thinking=[thought])
    request = ModelRequest(messages=[Message(role="user", content="hi"), answer])
    sent = [i for i in body_of(API, request, "gpt-5")["input"] if i.get("type") == "reasoning"]
    if item is None:
        assert sent == []
    else:
        assert [{k: i[k] for k in item} for i in sent] == [item]


def test_infer_model_and_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    model = infer_model("openai-responses:gpt-5")
    assert isinstance(model, OpenAIResponsesModel)
    assert model.options.encrypted_reasoning
    assert not OpenAIResponsesModel("gpt-4.1").options.encrypted_reasoning
    assert OpenAIResponsesModel("gpt-4.1", reasoning_effort="low").options.encrypted_reasoning
    assert repr(model) == "OpenAIResponsesModel('gpt-5', base_url='https://api.openai.com/v1')"
    with pytest.raises(ValueError, match="model name must not be empty"):
        OpenAIResponsesModel("")
    with pytest.raises(ValueError, match="max_tokens must be at least 1, got 0"):
        OpenAIResponsesModel("gpt-5", max_tokens=0)
    body = OpenAIResponsesModel(
        "gpt-5",
        max_tokens=100,
        temperature=0.2,
        top_p=0.9,
        store=True,
        extra_body={"service_tier": "flex"},
    ).request_body(ModelRequest(messages=[Message(role="user", content="hi")]))
    assert (body["max_output_tokens"], body["temperature"], body["top_p"]) == (100, 0.2, 0.9)
    assert (body["store"], body["service_tier"]) == (True, "flex")
