"""Tools: from functions (schema, ctx, sync/async, argument validation), the raw Tool form,
ToolResult with parts, contextvars in sync tools, and the signals a tool raises."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Literal

import pydantic
import pytest

from golem import Agent, RunContext, RunError, Stage
from golem.messages import Message, Part, ToolCall
from golem.model import ToolSpec
from golem.testing import ScriptedModel
from golem.tool import Canceled, Failed, ModelRetry, Tool, ToolResult

REJECTED_SUFFIX = ". Correct the arguments and call the tool again."


def calls(*items: tuple[str, str, str]) -> Message:
    return Message(role="assistant", tool_calls=[ToolCall(i, n, a) for i, n, a in items])


def tool_messages(messages: list[Message]) -> list[Message]:
    return [m for m in messages if m.role == "tool"]


@dataclass
class Deps:
    unit: str


# --------------------------------------------------------------------------- schema from functions


class Window(pydantic.BaseModel):
    start: int
    end: int


def test_the_schema_comes_from_hints_and_the_docstring_without_ctx() -> None:
    model = ScriptedModel("done")
    agent = Agent(model)

    @agent.tool
    def forecast(ctx: RunContext[Deps], city: str, days: int = 1) -> str:
        """Get the weather forecast for a city.

        Args:
            city: Name of the city, e.g. "Paris".
            days: How many days ahead to forecast; the
                count includes today.
        """
        return ""

    @agent.tool
    def add(a: int, b: int) -> str:
        return str(a + b)

    @agent.tool
    def plan(
        ctx: RunContext[Deps], tags: list[str], mode: Literal["fast", "slow"], window: Window
    ) -> str:
        """Plan."""
        return ""

    agent.run_sync("go")
    specs = {s.name: s for s in model.requests[0].tools}
    spec = specs["forecast"]
    assert spec.description == "Get the weather forecast for a city."
    assert spec.schema["type"] == "object"
    assert "ctx" not in str(spec.schema)
    props = spec.schema["properties"]
    assert props["city"]["type"] == "string"
    assert props["city"]["description"] == 'Name of the city, e.g. "Paris".'
    assert props["days"]["type"] == "integer"
    assert (
        props["days"]["description"] == "How many days ahead to forecast; the count includes today."
    )
    assert props["days"]["default"] == 1
    assert spec.schema["required"] == ["city"]
    spec = specs["add"]
    assert (spec.name, spec.description, set(spec.schema["properties"])) == ("add", "", {"a", "b"})
    assert sorted(spec.schema["required"]) == ["a", "b"]
    props = specs["plan"].schema["properties"]
    assert (props["tags"]["type"], props["tags"]["items"]) == ("array", {"type": "string"})
    assert set(props["mode"]["enum"]) == {"fast", "slow"}
    assert "window" in props


# --------------------------------------------------------------------------- calling function tools


async def test_function_tools_get_ctx_deps_defaults_and_validated_pydantic_arguments() -> None:
    seen: list[Any] = []
    batch = calls(
        ("c1", "forecast", '{"city": "Oslo", "days": 3}'),
        ("c2", "slow_add", '{"a": 2, "b": 3}'),
        ("c3", "book", '{"window": {"start": 1, "end": 2}}'),
    )
    agent: Agent[Deps, str] = Agent(ScriptedModel(batch, "done"))

    @agent.tool
    def forecast(ctx: RunContext[Deps], city: str, days: int = 1) -> str:
        """Forecast."""
        seen.append((ctx.deps, city, days))
        return f"{city}: 3 {ctx.deps.unit}"

    @agent.tool
    async def slow_add(a: int, b: int, c: int = 40) -> str:
        await asyncio.sleep(0)
        return str(a + b + c)

    @agent.tool
    def book(window: Window) -> str:
        seen.append(window)
        return "booked"

    deps = Deps(unit="°C")
    res = await agent.run("weather?", deps=deps)
    assert seen == [(deps, "Oslo", 3), Window(start=1, end=2)]
    assert seen[0][0] is deps
    assert [m.content for m in tool_messages(res.messages)] == ["Oslo: 3 °C", "45", "booked"]
    assert res.output == "done"


@pytest.mark.parametrize(
    ("args", "field", "budget"),
    [
        ('{"city": "Oslo", "days": "many"}', "days", 1),
        ('{"days": 2}', "city", 0),  # a correctable rejection even without a budget
        ('{"city": ["Oslo"]}', "city", 1),
        ('{"city": ', "", 1),  # not a JSON object
        ("[1, 2]", "", 1),
        ("not json", "", 1),
    ],
)
async def test_invalid_arguments_go_back_to_the_model_as_a_correctable_rejection(
    args: str, field: str, budget: int
) -> None:
    executed: list[str] = []
    model = ScriptedModel(
        calls(("c1", "forecast", args)),
        calls(("c2", "forecast", '{"city": "Oslo"}')),
        "done",
    )
    agent = Agent(model, tool_retries=budget)

    @agent.tool
    def forecast(city: str, days: int = 1) -> str:
        executed.append(city)
        return "sunny"

    res = await agent.run("weather?")
    assert executed == ["Oslo"]  # the invalid call never reached the function
    rejection, ok = tool_messages(res.messages)
    assert rejection.tool_call_id == "c1"
    assert rejection.content.startswith("Your tool call was rejected: ")
    assert rejection.content.endswith(REJECTED_SUFFIX)
    assert field in rejection.content
    assert rejection.failed is False
    assert ok.content == "sunny"
    assert model.requests[1].messages[-1] == rejection  # seen before the correction
    assert res.output == "done"


async def test_invalid_arguments_do_not_spend_the_model_retry_budget() -> None:
    model = ScriptedModel(
        calls(("c1", "when", '{"date": 5}')),
        calls(("c2", "when", '{"date": "tomorrow"}')),
        calls(("c3", "when", '{"date": "2025-01-02"}')),
        "ok",
    )
    agent = Agent(model, tool_retries=1)

    @agent.tool
    def when(date: str) -> str:
        if not date[:1].isdigit():
            raise ModelRetry("use an ISO date")
        return "booked"

    res = await agent.run("book")
    assert [m.tool_call_id for m in tool_messages(res.messages)] == ["c1", "c2", "c3"]
    assert tool_messages(res.messages)[2].content == "booked"


async def test_endless_invalid_arguments_are_bounded_by_max_iterations() -> None:
    model = ScriptedModel(*(calls((f"c{i}", "forecast", "{}")) for i in range(5)))
    agent = Agent(model, max_iterations=3)

    @agent.tool
    def forecast(city: str) -> str:
        return "sunny"

    with pytest.raises(RunError) as info:
        await agent.run("weather?")
    assert info.value.stage is Stage.LOOP


async def test_empty_args_mean_no_arguments() -> None:
    model = ScriptedModel(calls(("c1", "now", "")), "done")
    agent = Agent(model)

    @agent.tool
    def now() -> str:
        return "noon"

    res = await agent.run("time?")
    assert tool_messages(res.messages)[0].content == "noon"


# --------------------------------------------------------------------------- raw Tool form


ADD_SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
    "required": ["a", "b"],
}


async def test_a_raw_tool_sync_or_async_receives_args_as_a_dict_and_ctx() -> None:
    seen: list[Any] = []

    def exec_add(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        seen.append((ctx.deps, args))
        return str(args["a"] + args["b"])

    async def exec_mul(ctx: RunContext[Any], args: dict[str, Any]) -> ToolResult:
        await asyncio.sleep(0)
        return ToolResult(str(args["a"] * args["b"]))

    batch = calls(("c1", "add", '{"a": 2, "b": 40}'), ("c2", "mul", '{"a": 6, "b": 7}'))
    model = ScriptedModel(batch, "done")
    add = Tool("add", "Add two numbers.", ADD_SCHEMA, exec_add)
    agent = Agent(model, tools=[add, Tool("mul", "Multiply.", ADD_SCHEMA, exec_mul)])
    res = await agent.run("sum", deps="D")
    assert seen == [("D", {"a": 2, "b": 40})]
    assert [m.content for m in tool_messages(res.messages)] == ["42", "42"]
    assert model.requests[0].tools[0] == ToolSpec("add", "Add two numbers.", ADD_SCHEMA)


def test_raw_tool_options_defaults_and_invalid_configuration() -> None:
    t = Tool(name="x", description="d", schema={"type": "object"}, exec=lambda ctx, args: "")
    assert (t.name, t.description, t.schema) == ("x", "d", {"type": "object"})
    assert (t.max_retries, t.timeout, t.sequential) == (None, None, False)
    t = Tool(
        "x", "d", {"type": "object"}, lambda c, a: "", max_retries=2, timeout=1.5, sequential=True
    )
    assert (t.max_retries, t.timeout, t.sequential) == (2, 1.5, True)
    base: dict[str, Any] = {
        "name": "x",
        "description": "d",
        "schema": {"type": "object"},
        "exec": lambda c, a: "",
    }
    for bad in (
        {"name": ""},
        {"schema": '{"type": "object"}'},
        {"max_retries": -1},
        {"timeout": -1.0},
    ):
        with pytest.raises(ValueError):
            Tool(**{**base, **bad})


# --------------------------------------------------------------------------- results


async def test_tool_result_with_parts_reaches_the_tool_message_and_next_request() -> None:
    image = Part("image", url="https://example.com/chart.png")
    data = Part("document", data=b"%PDF-1.7", media_type="application/pdf")

    def chart(ctx: RunContext[Any], args: dict[str, Any]) -> ToolResult:
        return ToolResult("here is the chart", parts=[image, data])

    model = ScriptedModel(calls(("c1", "chart", "{}")), "nice")
    agent = Agent(model, tools=[Tool("chart", "Draw.", {"type": "object"}, chart)])
    res = await agent.run("draw")
    msg = tool_messages(res.messages)[0]
    assert msg.content == "here is the chart"
    assert list(msg.parts) == [image, data]
    assert list(model.requests[1].messages[-1].parts) == [image, data]


async def test_a_tool_returning_an_invalid_part_fails_at_stage_tool() -> None:
    assert tuple(ToolResult("x").parts) == ()

    def bad(ctx: RunContext[Any], args: dict[str, Any]) -> ToolResult:
        return ToolResult("x", parts=[Part("image")])  # neither url nor data

    agent = Agent(
        ScriptedModel(calls(("c1", "bad", "{}")), "never"),
        tools=[Tool("bad", "Bad.", {"type": "object"}, bad)],
    )
    with pytest.raises(RunError) as info:
        await agent.run("go")
    assert info.value.stage is Stage.TOOL


# --------------------------------------------------------------------------- signals


async def test_signals_carry_their_reason_and_canceled_stops_the_run() -> None:
    assert (Canceled("stop now").reason, Failed("disk full").reason) == ("stop now", "disk full")
    assert str(ModelRetry("use an ISO date")) == "use an ISO date"
    assert (str(Canceled("x")), str(Failed("x"))) == ("tool canceled the run: x", "tool failed: x")
    model = ScriptedModel(calls(("c1", "stop", "{}")), "never")
    agent = Agent(model)

    @agent.tool
    def stop() -> str:
        raise Canceled("user pressed stop")

    with pytest.raises(RunError) as info:
        await agent.run("go")
    assert isinstance(info.value.__cause__, Canceled)
    assert info.value.__cause__.reason == "user pressed stop"


# --------------------------------------------------------------------------- tool and tool_plain


def test_tool_plain_registers_a_function_without_context() -> None:
    model = ScriptedModel(calls(("c1", "double", '{"n": 4}')), "done")
    agent = Agent(model)

    @agent.tool_plain
    def double(n: int) -> int:
        """Double a number."""
        return n * 2

    @agent.tool_plain(name="halve", description="Halve it.", timeout=5, idempotent=True)
    async def half(n: int) -> float:
        return n / 2

    result = agent.run_sync("go")
    assert result.output == "done"
    assert tool_messages(result.messages)[0].content == "8"
    assert double(3) == 6  # returned unchanged
    assert set(agent.tools) == {"double", "halve"}
    assert agent.tools["halve"].description == "Halve it."
    assert agent.tools["halve"].idempotent
    assert agent.tools["halve"].timeout == 5


def test_tool_plain_refuses_a_function_taking_a_context() -> None:
    agent: Agent[Deps, str] = Agent(ScriptedModel("x"), deps_type=Deps)

    with pytest.raises(
        TypeError, match=r'"unit_of" takes a RunContext: register it with @agent\.tool'
    ):

        @agent.tool_plain
        def unit_of(ctx: RunContext[Deps]) -> str:
            return ctx.deps.unit

    with pytest.raises(TypeError, match="takes a RunContext"):
        agent.tool_plain(name="named")(lambda ctx: "")  # unannotated `ctx` is a context too
    assert agent.tools == {}


def test_tool_still_registers_a_function_without_context_at_runtime() -> None:
    """Type checkers refuse it (tests/typecheck/wrong_deps.py), code written before keeps running."""
    model = ScriptedModel(calls(("c1", "echo", '{"text": "hi"}')), "done")
    agent = Agent(model)
    agent.tool(lambda text: text.upper(), name="echo")  # type: ignore[call-overload]
    assert tool_messages(agent.run_sync("go").messages)[0].content == "HI"


def test_a_raw_tool_is_typed_by_its_context() -> None:
    def unit(ctx: RunContext[Deps], args: dict[str, Any]) -> str:
        return ctx.deps.unit

    tool = Tool("unit", "The unit.", {"type": "object", "properties": {}}, unit)
    model = ScriptedModel(calls(("c1", "unit", "{}")), "done")
    agent: Agent[Deps, str] = Agent(model, deps_type=Deps, tools=[tool])
    result = agent.run_sync("go", deps=Deps("kg"))
    assert tool_messages(result.messages)[0].content == "kg"
