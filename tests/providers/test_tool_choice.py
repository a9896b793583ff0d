"""`tool_choice`: validation, the wire form for each adapter (compared with recorded requests),
and structured output through Anthropic's forced output tool."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pydantic
import pytest

from golem import Agent
from golem.errors import BadRequest
from golem.messages import Message
from golem.model import ModelRequest, ModelResponse, ToolSpec, check_tool_choice
from golem.providers.anthropic import AnthropicModel
from golem.providers.gemini import GeminiModel
from golem.providers.openai import OpenAIChatModel
from tests.support.adapters import body_of
from tests.support.anthropic import sse, synthesize_stream
from tests.support.recordings import load, needs_recordings, replay_transport

WEATHER = ToolSpec(
    "get_weather",
    "Get weather for a city",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
TIME = ToolSpec(
    "get_time",
    "Get time in a timezone",
    {"type": "object", "properties": {"timezone": {"type": "string"}}, "required": ["timezone"]},
)
PROMPT = [Message(role="user", content="What's the weather in Paris?")]


def _request(choice: str, tools: list[ToolSpec] | None = None) -> ModelRequest:
    return ModelRequest(
        messages=PROMPT, tools=[WEATHER, TIME] if tools is None else tools, tool_choice=choice
    )


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize("bad", [None, 42, "", ["get_weather"]])
def test_a_tool_choice_that_is_not_a_name_is_refused(bad: Any) -> None:
    with pytest.raises(
        ValueError, match='tool_choice must be "auto", "required", "none" or the name'
    ):
        check_tool_choice(bad)
    with pytest.raises(ValueError, match="tool_choice must be"):
        Agent(_NeverCalled(), tool_choice=bad)


def test_an_unknown_tool_name_names_the_offered_tools() -> None:
    with pytest.raises(ValueError) as caught:
        _request("get_wether")
    assert str(caught.value) == (
        'tool_choice names the tool "get_wether", but the request offers "get_weather", '
        '"get_time"; use "auto", "required", "none" or one of the offered tool names'
    )
    with pytest.raises(ValueError, match="but the request offers no tools"):
        _request("get_weather", tools=[])
    with pytest.raises(ValueError, match='"required" needs at least one tool'):
        _request("required", tools=[])


def test_valid_choices_are_kept() -> None:
    for choice in ("auto", "required", "none", "get_time"):
        assert _request(choice).tool_choice == choice
    assert ModelRequest(messages=PROMPT).tool_choice == "auto"
    assert ModelRequest(messages=PROMPT, tool_choice="none").tool_choice == "none"


class _NeverCalled:
    async def generate(self, request: ModelRequest) -> ModelResponse:
        raise AssertionError("no model call expected")


class _Recording:
    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []

    async def generate(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        return ModelResponse(message=Message(role="assistant", content="ok"), finish_reason="stop")


async def test_the_agent_sends_its_tool_choice_on_every_request() -> None:
    model = _Recording()
    agent = Agent(model, tool_choice="weather")

    @agent.tool
    def weather(city: str) -> str:
        """Weather of a city."""
        return "sunny"

    result = await agent.run("Weather in Paris?")
    assert result.output == "ok"
    assert [r.tool_choice for r in model.requests] == ["weather"]


async def test_an_agent_choice_naming_a_missing_tool_fails_before_any_model_call() -> None:
    agent = Agent(_NeverCalled(), tool_choice="weather")
    with pytest.raises(Exception) as caught:
        await agent.run("hi")
    text = f"{caught.value} {caught.value.__cause__}"
    assert 'tool_choice names the tool "weather", but the request offers no tools' in text


# --------------------------------------------------------------------------- wire forms


@pytest.mark.parametrize(
    ("choice", "openai", "anthropic", "gemini"),
    [
        ("auto", "auto", {"type": "auto"}, None),
        ("required", "required", {"type": "any"}, {"mode": "ANY"}),
        ("none", "none", {"type": "none"}, {"mode": "NONE"}),
        (
            "get_weather",
            {"type": "function", "function": {"name": "get_weather"}},
            {"type": "tool", "name": "get_weather"},
            {"mode": "ANY", "allowedFunctionNames": ["get_weather"]},
        ),
    ],
)
def test_each_adapter_maps_the_choice(
    choice: str, openai: Any, anthropic: Any, gemini: dict[str, Any] | None
) -> None:
    request = _request(choice)
    assert body_of("openai-chat", request, model="m")["tool_choice"] == openai
    assert body_of("anthropic", request, model="m")["tool_choice"] == anthropic
    body = body_of("gemini", request)
    if gemini is None:
        assert "toolConfig" not in body
    else:
        assert body["toolConfig"] == {"functionCallingConfig": gemini}


def test_without_tools_no_choice_is_sent() -> None:
    request = ModelRequest(messages=PROMPT, tool_choice="none")
    assert "tool_choice" not in body_of("openai-chat", request, model="m")
    assert "tool_choice" not in body_of("anthropic", request, model="m")
    assert "toolConfig" not in body_of("gemini", request)


def test_anthropic_refuses_a_forced_choice_with_thinking_before_sending() -> None:
    with pytest.raises(
        BadRequest, match='anthropic refuses tool_choice "required" with extended thinking'
    ):
        body_of("anthropic", _request("required"), model="m", thinking_budget=2048, max_tokens=8192)
    body = body_of("anthropic", _request("none"), model="m", thinking_budget=2048, max_tokens=8192)
    assert body["tool_choice"] == {"type": "none"}


# --------------------------------------------------------------------------- recordings

RECORDED = [
    ("anthropic", "test_tool_choice_matrix[list_single-anthropic].yaml", "get_weather"),
    ("anthropic", "test_tool_choice_matrix[required-anthropic].yaml", "required"),
    ("gemini", "test_tool_choice_matrix[list_single-google].yaml", "get_weather"),
    ("openai-chat", "test_tool_choice_matrix[list_single-openai].yaml", "get_weather"),
    ("openai-chat", "test_tool_choice_matrix[required-openai].yaml", "required"),
]


def _model(api: str, client: httpx.AsyncClient) -> Any:
    if api == "anthropic":
        return AnthropicModel("claude-sonnet-4-5", api_key="k", http_client=client)
    if api == "gemini":
        return GeminiModel("gemini-2.5-flash", api_key="k", http_client=client)
    return OpenAIChatModel("gpt-5-mini", api_key="k", http_client=client)


@needs_recordings
@pytest.mark.parametrize(("api", "cassette", "choice"), RECORDED)
async def test_recorded_tool_choice_requests(api: str, cassette: str, choice: str) -> None:
    it = load(api, cassette)[0]
    recorded = it.request_body
    names = {
        "anthropic": lambda b: [t["name"] for t in b["tools"]],
        "gemini": lambda b: [d["name"] for d in b["tools"][0]["functionDeclarations"]],
        "openai-chat": lambda b: [t["function"]["name"] for t in b["tools"]],
    }[api]
    tools = [t for t in (WEATHER, TIME) if t.name in names(recorded)]
    seen: list[httpx.Request] = []
    async with httpx.AsyncClient(transport=replay_transport([it], seen)) as client:
        response = await _model(api, client).generate(_request(choice, tools))
    sent = json.loads(seen[0].content)
    if api == "gemini":
        assert sent["toolConfig"] == recorded["toolConfig"]
    else:
        assert sent["tool_choice"] == recorded["tool_choice"]
    assert names(sent) == names(recorded)
    assert [c.name for c in response.message.tool_calls] == ["get_weather"]
    assert json.loads(response.message.tool_calls[0].args) == {"city": "Paris"}


class CityLocation(pydantic.BaseModel):
    city: str
    country: str


@needs_recordings
async def test_anthropic_tool_output_mode_replays_the_recorded_run() -> None:
    interactions = load("anthropic", "test_anthropic_tool_output.yaml")
    seen: list[httpx.Request] = []
    async with httpx.AsyncClient(transport=replay_transport(interactions, seen)) as client:
        model = AnthropicModel(
            "claude-sonnet-4-5", api_key="k", http_client=client, output_mode="tool"
        )
        agent = Agent(model, output_type=CityLocation)

        @agent.tool
        def get_user_country() -> str:
            return "Mexico"

        result = await agent.run("What is the largest city in the user country?")
    assert result.output == CityLocation(city="Mexico City", country="Mexico")
    for request, it in zip(seen, interactions, strict=True):
        sent, recorded = json.loads(request.content), it.request_body
        assert sent["tool_choice"] == recorded["tool_choice"] == {"type": "any"}
        assert [t["name"] for t in sent["tools"]] == ["get_user_country", "final_result"]
        output_tool, recorded_tool = sent["tools"][1], recorded["tools"][1]
        assert output_tool["description"] == recorded_tool["description"]
        # golem sends the output type's schema as pydantic makes it (property titles kept)
        assert output_tool["input_schema"]["required"] == recorded_tool["input_schema"]["required"]
        assert "output_config" not in sent
        assert sent["messages"] == recorded["messages"]
    final = result.messages[-1]
    assert final.tool_calls == []
    assert json.loads(final.content) == {"city": "Mexico City", "country": "Mexico"}


def test_tool_output_mode_without_function_tools_forces_the_output_tool() -> None:
    request = ModelRequest(messages=PROMPT, output_schema={"type": "object"})
    body = body_of("anthropic", request, model="m", output_mode="tool")
    assert body["tool_choice"] == {"type": "tool", "name": "final_result"}
    thinking = body_of(
        "anthropic", request, model="m", output_mode="tool", thinking_budget=2048, max_tokens=8192
    )
    assert thinking["tool_choice"] == {"type": "auto"}


@needs_recordings
async def test_streamed_output_tool_input_arrives_as_text() -> None:
    body = load("anthropic", "test_anthropic_tool_output.yaml")[1].json
    request = ModelRequest(messages=PROMPT, output_schema={"type": "object"})

    def answer(http: httpx.Request) -> httpx.Response:
        if json.loads(http.content)["stream"]:
            text = sse(*synthesize_stream(body, size=5))
            return httpx.Response(200, headers={"content-type": "text/event-stream"}, text=text)
        return httpx.Response(200, json=body)

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        model = AnthropicModel("claude-x", api_key="k", http_client=client, output_mode="tool")
        items = [item async for item in model.generate_stream(request)]
        assert items[-1] == await model.generate(request)
    final = items[-1]
    assert isinstance(final, ModelResponse)
    assert final.finish_reason == "stop"
    assert final.message.tool_calls == []
    text = "".join(d.content for d in items[:-1] if not isinstance(d, ModelResponse))
    assert text == final.message.content
    assert json.loads(text) == {"city": "Mexico City", "country": "Mexico"}
