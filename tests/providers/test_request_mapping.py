"""Request mapping rules every adapter shares, one table per rule with a row per API:
tool arguments that are not a JSON object, empty messages, an empty prompt."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from golem import Agent, ServerToolBlock
from golem.messages import Message, Part, ToolCall
from golem.model import ModelRequest, ToolSpec
from golem.providers.anthropic import AnthropicModel
from golem.providers.gemini import GeminiModel
from golem.providers.openai import OpenAIChatModel
from tests.support.adapters import body_of

ANTHROPIC_ANSWER = {
    "content": [{"type": "text", "text": "Hello!"}],
    "model": "claude-x",
    "stop_reason": "end_turn",
    "usage": {"input_tokens": 3, "output_tokens": 2},
}
GEMINI_ANSWER = {
    "candidates": [
        {"content": {"role": "model", "parts": [{"text": "Hello!"}]}, "finishReason": "STOP"}
    ],
    "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 2},
}
OPENAI_ANSWER = {
    "choices": [{"message": {"role": "assistant", "content": "Hello!"}, "finish_reason": "stop"}],
    "model": "gpt-x",
}


def _client(answer: dict[str, Any], seen: list[dict[str, Any]]) -> httpx.AsyncClient:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return httpx.Response(200, json=answer)

    return httpx.AsyncClient(transport=httpx.MockTransport(handler))


async def test_an_empty_prompt_reaches_every_provider_as_a_user_turn() -> None:
    seen: list[dict[str, Any]] = []
    models = [
        AnthropicModel("claude-x", api_key="k", http_client=_client(ANTHROPIC_ANSWER, seen)),
        GeminiModel("gemini-2.5-flash", api_key="k", http_client=_client(GEMINI_ANSWER, seen)),
        OpenAIChatModel("gpt-x", api_key="k", http_client=_client(OPENAI_ANSWER, seen)),
    ]
    for model in models:
        result = await Agent(model, instructions="Greet the user.").run("")
        assert result.output == "Hello!"
    anthropic, gemini, openai = seen
    assert anthropic["messages"] == [{"role": "user", "content": [{"type": "text", "text": "."}]}]
    assert anthropic["system"] == "Greet the user."
    assert gemini["contents"] == [{"role": "user", "parts": [{"text": "."}]}]
    assert openai["messages"][-1] == {"role": "user", "content": ""}


@pytest.mark.parametrize(
    "messages", [[], [Message(role="system", content="Be brief.")], [Message(role="user")]]
)
def test_no_conversation_body_is_empty(messages: list[Message]) -> None:
    request = ModelRequest(messages=messages)
    assert body_of("anthropic", request, model="m")["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "."}]}
    ]
    assert body_of("gemini", request)["contents"] == [{"role": "user", "parts": [{"text": "."}]}]


def test_an_empty_user_message_mid_conversation_keeps_turns_alternating() -> None:
    request = ModelRequest(
        messages=[
            Message(role="user", content="Hi"),
            Message(role="assistant", content="Hello."),
            Message(role="user"),
        ]
    )
    anthropic = body_of("anthropic", request, model="m")["messages"]
    assert [m["role"] for m in anthropic] == ["user", "assistant", "user"]
    assert anthropic[-1]["content"] == [{"type": "text", "text": "."}]
    gemini = body_of("gemini", request)["contents"]
    assert [c["role"] for c in gemini] == ["user", "model", "user"]
    assert gemini[-1]["parts"] == [{"text": "."}]


def test_a_user_message_with_only_parts_sends_no_filler_text() -> None:
    image = Part(kind="image", url="https://example.com/cat.png")
    request = ModelRequest(messages=[Message(role="user", parts=[image])])
    blocks = body_of("anthropic", request, model="m")["messages"][0]["content"]
    assert [b["type"] for b in blocks] == ["image"]
    parts = body_of("gemini", request)["contents"][0]["parts"]
    assert list(parts[0]) == ["fileData"]


ARGS = [
    # (api, the call's arguments as the model wrote them, what is sent)
    *[("openai-chat", raw, {"truncated_args": raw}) for raw in ('{"city": "Par', "[1, 2]", "null", "not json")],
    ("anthropic", '{"a": [1, 2]}', {"a": [1, 2]}),
    ("anthropic", "", {}),
    ("anthropic", "  ", {}),
    *[("anthropic", raw, {"truncated_args": raw}) for raw in ('{"path": "/tm', "[1, 2]", "null")],
    *[("gemini", raw, {"truncated_args": raw}) for raw in ('{"city": "Par', "[1, 2]", "", '{"x": NaN}')],
    ("gemini", '{"a": [1, {"b": null}]}', {"a": [1, {"b": None}]}),
]


def _sent_args(api: str, body: dict[str, Any]) -> Any:
    if api == "openai-chat":
        return json.loads(body["messages"][1]["tool_calls"][0]["function"]["arguments"])
    if api == "anthropic":
        return body["messages"][1]["content"][0]["input"]
    return body["contents"][1]["parts"][0]["functionCall"]["args"]


@pytest.mark.parametrize(("api", "raw", "sent"), ARGS)
def test_tool_arguments_are_sent_as_an_object_wrapping_any_that_is_not_one(
    api: str, raw: str, sent: dict[str, Any]
) -> None:
    call = Message(role="assistant", tool_calls=[ToolCall("toolu_1", "f", raw)])
    body = body_of(api, ModelRequest([Message(role="user", content="go"), call]))
    assert _sent_args(api, body) == sent


@pytest.mark.parametrize(
    ("api", "sent"),
    [
        ("anthropic", {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}),
        ("gemini", {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}),
    ],
)
def test_empty_messages_are_left_out(api: str, sent: dict[str, Any]) -> None:
    empty = [Message(role="assistant"), Message(role="user"), Message(role="system")]
    body = body_of(api, ModelRequest([Message(role="user", content="hi"), *empty]))
    assert {k: body[k] for k in sent} == sent
    assert api != "gemini" or body == sent


SEARCH = {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}
SERVER_TOOLS = [
    # (api, a server tool in extra_body, how a tool entry is named, then named alone)
    ("anthropic", SEARCH, lambda t: t.get("type", "function"), [SEARCH]),
    ("openai-responses", {"type": "web_search"}, lambda t: t["type"], [{"type": "web_search"}]),
    ("gemini", {"googleSearch": {}}, lambda t: next(iter(t)), [{"googleSearch": {}}]),
]


@pytest.mark.parametrize(("api", "tool", "kind", "alone"), SERVER_TOOLS)
def test_server_tools_in_extra_body_join_the_function_tools(
    api: str, tool: dict[str, Any], kind: Any, alone: list[dict[str, Any]]
) -> None:
    save = ToolSpec("save", "Save.", {"type": "object", "properties": {}})
    hi = [Message(role="user", content="hi")]
    body = body_of(api, ModelRequest(hi, tools=[save]), extra_body={"tools": [tool]})
    assert [kind(t) for t in body["tools"]][1:] == [kind(tool)]
    assert body["tools"][1] == tool
    assert kind(body["tools"][0]) in ("function", "functionDeclarations")
    assert body_of(api, ModelRequest(hi), extra_body={"tools": [tool]})["tools"] == alone


def test_extra_body_tools_leave_the_rest_of_extra_body_merged() -> None:
    extra = {"tools": [{"codeExecution": {}}], "generationConfig": {"seed": 7}}
    body = body_of("gemini", ModelRequest([Message(role="user", content="hi")]), extra_body=extra)
    assert body["tools"] == [{"codeExecution": {}}]
    assert body["generationConfig"]["seed"] == 7


@pytest.mark.parametrize(
    ("api", "owner", "settings", "sent"),
    [
        ("anthropic", "openai-responses", {}, ["messages", 1, "content"]),
        ("openai-responses", "anthropic", {"store": True}, ["input", 1]),
        ("gemini", "openai-responses", {}, ["contents", 1, "parts"]),
    ],
)
def test_server_tool_blocks_of_another_provider_are_not_sent(
    api: str, owner: str, settings: dict[str, Any], sent: list[Any]
) -> None:
    raw = '{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{}}'
    foreign = ServerToolBlock(provider=owner, type="server_tool_use", id="srvtoolu_1", raw=raw)
    answer = Message(role="assistant", content="Sunny.", server_tools=[foreign])
    body: Any = body_of(api, ModelRequest([Message(role="user", content="q"), answer]), **settings)
    assert "srvtoolu_1" not in json.dumps(body)
    for key in sent:
        body = body[key]
    assert body in (
        [{"type": "text", "text": "Sunny."}], [{"text": "Sunny."}],
        {"role": "assistant", "content": "Sunny."},
    )
