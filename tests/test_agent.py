"""The Agent: configuration, instructions, output types, run/run_sync, results, identity,
and the RunError stage/partial/cause contract for every stage."""

from __future__ import annotations

import re
from typing import Any

import pydantic
import pytest

from golem import (
    Agent,
    EventKind,
    PartialResult,
    Result,
    RunContext,
    RunError,
    RunEvent,
    Stage,
    ToolError,
    Usage,
    UsageLimitExceeded,
    UsageLimits,
    dumps_history,
)
from golem.errors import BadRequest
from golem.messages import Message, ToolCall
from golem.model import ModelResponse
from golem.testing import ScriptedModel
from golem.tool import Tool

UUID7 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
OBJ = {"type": "object"}


def calls(*items: tuple[str, str, str]) -> Message:
    return Message(role="assistant", tool_calls=[ToolCall(i, n, a) for i, n, a in items])


def echo_tool(name: str = "echo") -> Tool:
    return Tool(name, "Echo.", OBJ, lambda ctx, args: f"{name}:{args}")


def resp(content: str = "", *, usage: Usage | None = None, finish: str = "stop") -> ModelResponse:
    return ModelResponse(
        Message(role="assistant", content=content),
        usage=usage or Usage(),
        finish_reason=finish,  # type: ignore[arg-type]
    )


# --------------------------------------------------------------------------- configuration


def _duplicate_by_decorator() -> None:
    agent = Agent(ScriptedModel(), tools=[echo_tool()])
    agent.tool(lambda: "", name="echo")


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: Agent(ScriptedModel(), tool_retries=-1), ValueError, "tool_retries"),
        (lambda: Agent(ScriptedModel(), output_retries=-1), ValueError, "output_retries"),
        (lambda: Agent(ScriptedModel(), max_iterations=0), ValueError, "max_iterations.*0"),
        (lambda: Agent(ScriptedModel(), max_iterations=-3), ValueError, "max_iterations"),
        (lambda: Agent(ScriptedModel(), max_attempts=0), ValueError, "max_attempts"),
        (lambda: Agent(ScriptedModel(), tool_timeout=-1.0), ValueError, "tool_timeout"),
        (lambda: Agent(ScriptedModel(), tools=[echo_tool(), echo_tool()]), ValueError, "echo"),
        (_duplicate_by_decorator, ValueError, "echo"),
        (lambda: Agent(ScriptedModel(), usage_limits=UsageLimits(tool_calls=-1)), ValueError, ""),
        (lambda: Agent(ScriptedModel(), usage_limits=UsageLimits(cost=1.0)), ValueError, "price"),
        (lambda: Agent(ScriptedModel(), usage_limits=UsageLimits(cost=0)), ValueError, "price"),
        (lambda: Agent(ScriptedModel(), str), TypeError, ""),  # configuration is keyword-only
    ],
)
def test_invalid_configuration_is_refused_at_construction(
    make: Any, error: type[Exception], match: str
) -> None:
    Agent(ScriptedModel())  # the defaults construct
    Agent(ScriptedModel(), usage_limits=UsageLimits(cost=1.0), price=lambda u: 0.0)
    with pytest.raises(error, match=match or None):
        make()


# --------------------------------------------------------------------------- instructions


async def test_configuration_changed_between_runs_applies_to_the_next_run() -> None:
    # runs without toolsets reuse one Policy: every change must still reach the next run
    model = ScriptedModel()
    agent = Agent(model)
    model.respond("one")
    assert (await agent.run("a")).output == "one"
    agent.max_iterations = 1
    agent.tool_choice = "none"

    @agent.tool_plain
    def echo() -> str:
        """Echo."""
        return "echoed"

    model.respond(calls(("c1", "echo", "{}")))
    with pytest.raises(RunError, match="turn limit exceeded after 1 turns"):
        await agent.run("b")
    request = model.requests[-1]
    assert [t.name for t in request.tools] == ["echo"]
    assert request.tool_choice == "none"
    agent.model = replacement = ScriptedModel()
    replacement.respond("two")
    assert (await agent.run("c")).output == "two"


async def test_string_instructions_open_every_request_and_none_means_no_system_message() -> None:
    model = ScriptedModel(calls(("c1", "echo", "{}")), "done", "ok")
    await Agent(model, instructions="Be terse.", tools=[echo_tool()]).run("hi")
    for request in model.requests:
        assert request.messages[0] == Message(role="system", content="Be terse.")
    assert model.requests[0].messages[1].content == "hi"
    res = await Agent(model).run("hi")
    assert [m.role for m in model.requests[2].messages] == ["user"]
    assert [m.role for m in res.messages] == ["user", "assistant"]


async def test_callable_instructions_get_the_run_context_once_per_run() -> None:
    seen: list[RunContext[Any]] = []

    def instructions(ctx: RunContext[dict[str, str]]) -> str:
        seen.append(ctx)
        return f"The user is {ctx.deps['name']} (run {len(seen)})."

    model = ScriptedModel(calls(("c1", "echo", "{}")), "done", "again")
    agent = Agent(model, instructions=instructions, tools=[echo_tool()])
    res = await agent.run("hi", deps={"name": "Ada"})
    first = Message(role="system", content="The user is Ada (run 1).")
    assert model.requests[0].messages[0] == model.requests[1].messages[0] == first
    assert (len(seen), seen[0].deps, res.messages[0]) == (1, {"name": "Ada"}, first)
    await agent.run("x", deps={"name": "Bo"})
    assert model.requests[2].messages[0].content == "The user is Bo (run 2)."


# --------------------------------------------------------------------------- output types


class City(pydantic.BaseModel):
    name: str
    population: int


async def test_str_output_is_the_final_text_and_sends_no_output_schema() -> None:
    model = ScriptedModel("Forty-two.")
    assert (await Agent(model).run("?")).output == "Forty-two."
    assert model.requests[0].output_schema is None


async def test_pydantic_output_is_parsed_and_validated() -> None:
    model = ScriptedModel('{"name": "Oslo", "population": 700000}')
    res = await Agent(model, output_type=City).run("city?")
    assert res.output == City(name="Oslo", population=700000)
    assert model.requests[0].output_schema == City.model_json_schema()
    res = await Agent(ScriptedModel("[1, 2, 3]"), output_type=list[int]).run("?")
    assert res.output == [1, 2, 3]


@pytest.mark.parametrize(
    "first", ['{"name": "Oslo"}', "Oslo, about 700k"], ids=["invalid", "not-json"]
)
async def test_output_validation_failure_is_corrected_under_output_retries(first: str) -> None:
    events: list[RunEvent] = []
    model = ScriptedModel(first, '{"name": "Oslo", "population": 7}')
    agent = Agent(model, output_type=City, output_retries=1)
    res = await agent.run("city?", on_event=events.append)
    assert res.output == City(name="Oslo", population=7)
    correction = model.requests[1].messages[-1]
    assert correction.role == "user"
    assert correction.content.startswith("Your previous response was rejected: ")
    assert correction.content.endswith(". Correct it and respond again.")
    assert "population" in correction.content or first.startswith("Oslo")
    assert (correction.run_id, correction.conversation_id) == (res.run_id, res.conversation_id)
    rejected = [e for e in events if e.kind is EventKind.OUTPUT_REJECTED]
    assert [(e.attempt, e.error is not None) for e in rejected] == [(1, True)]
    assert res.requests == 2


@pytest.mark.parametrize("retries", [2, 0])
async def test_output_failure_after_retries_is_a_decode_error_keeping_the_response(
    retries: int,
) -> None:
    events: list[RunEvent] = []
    model = ScriptedModel('{"name": 1}', '{"name": 2}', '{"name": 3}')
    agent = Agent(model, output_type=City, output_retries=retries)
    with pytest.raises(RunError) as info:
        await agent.run("city?", on_event=events.append)
    err = info.value
    assert err.stage is Stage.DECODE
    assert isinstance(err.__cause__, ValueError)
    if retries:
        assert "after 3 attempts" in str(err.__cause__)
    assert [e.attempt for e in events if e.kind is EventKind.OUTPUT_REJECTED] == [1, 2][:retries]
    assert err.partial is not None
    assert err.partial.requests == retries + 1
    assert err.partial.messages[-1].content == f'{{"name": {retries + 1}}}'  # the evidence


# --------------------------------------------------------------------------- run / run_sync / result


async def test_result_fields_and_cost_from_the_price_of_the_summed_usage() -> None:
    seen: list[Usage] = []

    def price(u: Usage) -> float:
        seen.append(u)
        return u.input_tokens * 0.001 + u.output_tokens * 0.002

    model = ScriptedModel(
        ModelResponse(
            calls(("c1", "echo", '{"x": 1}')), usage=Usage(100, 10), finish_reason="tool_call"
        ),
        resp("done", usage=Usage(200, 20), finish="stop"),
    )
    res = await Agent(model, tools=[echo_tool()], price=price).run("go")
    assert isinstance(res, Result)
    assert (res.output, res.usage, res.finish_reason) == ("done", Usage(300, 30), "stop")
    assert (res.requests, res.tool_calls) == (2, 1)
    assert res.cost == pytest.approx(0.3 + 0.06)
    assert Usage(300, 30) in seen
    assert UUID7.match(res.run_id)
    assert UUID7.match(res.conversation_id)
    assert [m.role for m in res.messages] == ["user", "assistant", "tool", "assistant"]
    assert res.messages[-1].content == "done"
    res = await Agent(ScriptedModel(resp("x", usage=Usage(100, 100)))).run("go")
    assert res.cost == 0.0  # no price


def test_run_sync_takes_every_run_argument_and_raises_run_error() -> None:
    events: list[RunEvent] = []
    model = ScriptedModel("second")
    history = [Message(role="user", content="first"), Message(role="assistant", content="a")]
    res = Agent(model).run_sync(
        "again",
        deps={"k": 1},
        history=history,
        run_id="run-x",
        conversation_id="conv-x",
        on_event=events.append,
    )
    assert (res.output, res.run_id, res.conversation_id) == ("second", "run-x", "conv-x")
    assert [m.content for m in model.requests[0].messages] == ["first", "a", "again"]
    assert events
    assert all(e.run_id == "run-x" for e in events)
    with pytest.raises(RunError) as info:
        Agent(ScriptedModel(BadRequest("bad"))).run_sync("go")
    assert info.value.stage is Stage.MODEL


@pytest.mark.parametrize("as_json", [False, True])
async def test_history_continues_the_conversation_unmutated(as_json: bool) -> None:
    first = await Agent(ScriptedModel("Hello Ada.")).run("I am Ada.")
    history = list(first.messages)
    model = ScriptedModel("You are Ada.")
    second = await Agent(model).run(
        "Who am I?", history=dumps_history(history) if as_json else history
    )
    assert [m.content for m in model.requests[0].messages] == [
        "I am Ada.",
        "Hello Ada.",
        "Who am I?",
    ]
    assert second.messages[: len(first.messages)] == first.messages == history


# --------------------------------------------------------------------------- identity


STAMPED = [
    Message(role="user", content="1", run_id="r1", conversation_id="old"),
    Message(role="assistant", content="2", run_id="r1", conversation_id="old"),
    Message(role="user", content="3", run_id="r2", conversation_id="newer"),
    Message(role="assistant", content="4", run_id="r2", conversation_id="newer"),
    Message(role="user", content="5"),  # unstamped, newest
    Message(role="assistant", content="6"),
]


@pytest.mark.parametrize(
    ("history", "given", "conversation"),
    [
        (None, {}, "minted"),
        ([Message(role="user", content="1"), Message(role="assistant", content="2")], {}, "minted"),
        (STAMPED, {}, "newer"),  # the newest stamped history message names it
        (
            [Message(role="user", content="1", conversation_id="hist")],
            {"conversation_id": "mine"},
            "mine",
        ),
        (None, {"run_id": "R", "conversation_id": "C"}, "C"),
    ],
    ids=["fresh", "unstamped-history", "stamped-history", "explicit-beats-history", "explicit"],
)
async def test_a_run_gets_a_fresh_run_id_and_its_conversation_from_the_caller_history_or_a_new_one(
    history: list[Message] | None, given: dict[str, str], conversation: str
) -> None:
    agent = Agent(ScriptedModel("a", "b"))
    one = await agent.run("x", history=history, **given)
    two = await agent.run("y", history=history, **given)
    if "run_id" in given:
        assert one.run_id == "R"
    else:
        assert UUID7.match(one.run_id)
        assert one.run_id != two.run_id
        assert one.run_id not in {m.run_id for m in history or []}  # never inherited
    if conversation == "minted":
        assert UUID7.match(one.conversation_id)
        assert one.conversation_id != two.conversation_id
    else:
        assert one.conversation_id == two.conversation_id == conversation
    assert one.messages[-1].conversation_id == one.conversation_id


async def test_added_messages_carry_the_run_identity_and_history_keeps_its_stamps() -> None:
    history = [
        Message(role="user", content="old q", run_id="r0", conversation_id="conv"),
        Message(role="assistant", content="old a", run_id="r0", conversation_id="conv"),
    ]
    model = ScriptedModel(calls(("c1", "echo", "{}")), "done")
    res = await Agent(model, tools=[echo_tool()], instructions="sys").run("q", history=history)
    assert res.messages[1:3] == history
    added = res.messages[3:]
    assert [m.role for m in added] == ["user", "assistant", "tool", "assistant"]
    for m in added:
        assert (m.run_id, m.conversation_id) == (res.run_id, "conv")
    assert res.run_id != "r0"


# --------------------------------------------------------------------------- RunError per stage


async def test_stage_model_keeps_the_evidence_there_is() -> None:
    cause = BadRequest("model does not exist")
    with pytest.raises(RunError, match="model") as info:
        await Agent(ScriptedModel(cause)).run("go")
    assert (info.value.stage, info.value.__cause__, info.value.partial) == (
        Stage.MODEL,
        cause,
        None,
    )
    history = [Message(role="user", content="a"), Message(role="assistant", content="b")]
    with pytest.raises(RunError) as info:
        await Agent(ScriptedModel(BadRequest("x"))).run("c", history=history)
    assert info.value.partial is not None  # the assistant history is evidence
    cause = BadRequest("context too long")
    model = ScriptedModel(ModelResponse(calls(("c1", "echo", "{}")), usage=Usage(5, 1)), cause)
    with pytest.raises(RunError) as info:
        await Agent(model, tools=[echo_tool()]).run("go", run_id="R", conversation_id="C")
    assert info.value.__cause__ is cause
    partial = info.value.partial
    assert isinstance(partial, PartialResult)
    assert [m.role for m in partial.messages] == ["user", "assistant", "tool"]
    assert (partial.requests, partial.tool_calls, partial.usage) == (2, 1, Usage(5, 1))
    assert (partial.run_id, partial.conversation_id) == ("R", "C")


async def test_stage_tool_wraps_a_tool_error_naming_tool_and_call() -> None:
    boom = RuntimeError("disk on fire")

    def explode(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        raise boom

    model = ScriptedModel(calls(("c1", "echo", "{}"), ("c2", "explode", "{}")), "never")
    agent = Agent(model, tools=[echo_tool(), Tool("explode", "X.", OBJ, explode)])
    with pytest.raises(RunError) as info:
        await agent.run("go")
    err = info.value
    assert err.stage is Stage.TOOL
    cause = err.__cause__
    assert isinstance(cause, ToolError)
    assert (cause.tool_name, cause.call_id) == ("explode", "c2")
    assert "disk on fire" in str(cause)
    assert boom in (cause.__cause__, getattr(cause.__cause__, "__cause__", None))
    assert err.partial is not None
    # A failing batch contributes none of its results: evidence ends at the assistant turn.
    assert err.partial.messages[-1].role == "assistant"
    assert err.partial.tool_calls == 2


async def test_stage_usage_carries_usage_limit_exceeded() -> None:
    model = ScriptedModel(resp("long answer", usage=Usage(10, 50)))
    agent = Agent(model, usage_limits=UsageLimits(output_tokens=40))
    with pytest.raises(RunError) as info:
        await agent.run("go")
    err = info.value
    assert err.stage is Stage.USAGE
    assert isinstance(err.__cause__, UsageLimitExceeded)
    assert (err.__cause__.limit, err.__cause__.actual) == (40, 50)
    assert err.partial is not None
    assert err.partial.messages[-1].content == "long answer"  # keeps the crossing response


@pytest.mark.parametrize("model", [None, 42, object(), {"model": "gpt"}])
def test_an_agent_without_a_model_fails_at_construction_naming_the_forms(model: object) -> None:
    with pytest.raises(TypeError) as info:
        Agent(model)  # type: ignore[arg-type]
    text = str(info.value)
    assert "golem.model.Model" in text
    assert '"provider:model"' in text
    assert "ScriptedModel" in text
    assert type(model).__name__ in text
