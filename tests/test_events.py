"""Run events: the dataclass, kinds, order, payloads, observer composition and isolation."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import pytest

from golem import Agent, EventKind, RunContext, RunError, RunEvent, Usage
from golem.errors import Overloaded
from golem.messages import Message, Part, ToolCall
from golem.model import ModelResponse
from golem.testing import ScriptedModel
from golem.tool import Failed, ModelRetry, Tool, ToolResult

OBJ = {"type": "object"}


def calls(*items: tuple[str, str, str]) -> Message:
    return Message(role="assistant", tool_calls=[ToolCall(i, n, a) for i, n, a in items])


def two_turn_agent(**kwargs: Any) -> tuple[Agent[Any, Any], ScriptedModel]:
    model = ScriptedModel(
        ModelResponse(calls(("c1", "lookup", '{"q": "x"}')), usage=Usage(10, 2)),
        ModelResponse(Message(role="assistant", content="answer"), usage=Usage(20, 4)),
    )
    tool = Tool("lookup", "Look up.", OBJ, lambda ctx, args: "found it")
    return Agent(model, tools=[tool], **kwargs), model


# --------------------------------------------------------------------------- the types


def test_run_event_is_a_frozen_dataclass_with_the_issue_fields() -> None:
    assert dataclasses.is_dataclass(RunEvent)
    names = [f.name for f in dataclasses.fields(RunEvent)]
    assert names == [
        "kind",
        "turn",
        "attempt",
        "call_id",
        "tool_name",
        "args",
        "result",
        "parts",
        "error",
        "usage",
        "run_id",
        "conversation_id",
        "reason",
        "approved",
        "agent",
        "namespace",
    ]
    event = RunEvent(EventKind.MODEL_START)
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.turn = 3  # type: ignore[misc]


def test_unused_fields_default_to_empty() -> None:
    e = RunEvent(kind=EventKind.TOOL_START)
    assert (e.turn, e.attempt, e.call_id, e.tool_name, e.args, e.result) == (0, 0, "", "", "", "")
    assert tuple(e.parts) == ()
    assert e.error is None
    assert e.usage is None


@pytest.mark.parametrize(
    ("kind", "value"),
    [
        (EventKind.MODEL_START, "model_start"),
        (EventKind.MODEL_END, "model_end"),
        (EventKind.TOOL_START, "tool_start"),
        (EventKind.TOOL_END, "tool_end"),
        (EventKind.CANCELED, "canceled"),
        (EventKind.OUTPUT_REJECTED, "output_rejected"),
    ],
)
def test_event_kind_values(kind: EventKind, value: str) -> None:
    assert kind.value == value
    assert EventKind(value) is kind


# --------------------------------------------------------------------------- order and payloads


async def test_two_turn_run_events_in_order_with_payloads() -> None:
    events: list[RunEvent] = []
    agent, _ = two_turn_agent()
    res = await agent.run("q", on_event=events.append)
    assert [(e.kind, e.turn) for e in events] == [
        (EventKind.MODEL_START, 0),
        (EventKind.MODEL_END, 0),
        (EventKind.TOOL_START, 0),
        (EventKind.TOOL_END, 0),
        (EventKind.MODEL_START, 1),
        (EventKind.MODEL_END, 1),
    ]
    start0, end0, tstart, tend, start1, end1 = events
    assert start0.attempt == 1
    assert start1.attempt == 1
    assert end0.attempt == 1
    assert end0.usage == Usage(10, 2)
    assert end1.usage == Usage(20, 4)
    assert end0.error is None
    assert (tstart.call_id, tstart.tool_name, tstart.args) == ("c1", "lookup", '{"q": "x"}')
    assert (tend.call_id, tend.tool_name, tend.result) == ("c1", "lookup", "found it")
    assert tend.args == ""  # no args on tool_end
    assert tend.error is None
    for e in events:
        assert (e.run_id, e.conversation_id) == (res.run_id, res.conversation_id)


async def test_tool_end_carries_parts() -> None:
    events: list[RunEvent] = []
    part = Part("image", url="https://example.com/a.png")
    tool = Tool("img", "i", OBJ, lambda ctx, args: ToolResult("an image", parts=[part]))
    model = ScriptedModel(calls(("c1", "img", "{}")), "ok")
    await Agent(model, tools=[tool]).run("q", on_event=events.append)
    end = next(e for e in events if e.kind is EventKind.TOOL_END)
    assert list(end.parts) == [part]
    assert end.result == "an image"


async def test_tool_end_carries_the_error_of_failed_and_rejected_calls() -> None:
    events: list[RunEvent] = []

    def fail(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        raise Failed("nope")

    def retry(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        raise ModelRetry("again")

    model = ScriptedModel(calls(("c1", "fail", "{}"), ("c2", "retry", "{}")), "ok")
    tools = [Tool("fail", "f", OBJ, fail), Tool("retry", "r", OBJ, retry)]
    await Agent(model, tools=tools, tool_retries=1).run("q", on_event=events.append)
    ends = [e for e in events if e.kind is EventKind.TOOL_END]
    assert isinstance(ends[0].error, Failed)
    assert isinstance(ends[1].error, ModelRetry)


async def test_failed_model_attempt_emits_model_end_with_error_and_zero_usage() -> None:
    events: list[RunEvent] = []
    model = ScriptedModel(Overloaded("busy"), "ok")
    agent = Agent(model, max_attempts=2, retry_backoff=lambda n: 0)
    await agent.run("q", on_event=events.append)
    first_end = next(e for e in events if e.kind is EventKind.MODEL_END)
    assert isinstance(first_end.error, Overloaded)
    assert first_end.usage in (None, Usage())
    assert first_end.attempt == 1


async def test_output_rejected_event_payload() -> None:
    events: list[RunEvent] = []
    model = ScriptedModel("not a number", "also not", "7")
    res = await Agent(model, output_type=int, output_retries=2).run("q", on_event=events.append)
    assert res.output == 7
    rejected = [e for e in events if e.kind is EventKind.OUTPUT_REJECTED]
    assert [e.attempt for e in rejected] == [1, 2]
    assert all(e.error is not None for e in rejected)
    assert all(e.run_id == res.run_id for e in rejected)
    # Turns restart at 0 in each correction round.
    assert [e.turn for e in events if e.kind is EventKind.MODEL_START] == [0, 0, 0]


async def test_turns_count_up_within_a_segment() -> None:
    events: list[RunEvent] = []
    tool = Tool("t", "t", OBJ, lambda ctx, args: "ok")
    model = ScriptedModel(calls(("c1", "t", "{}")), calls(("c2", "t", "{}")), "done")
    await Agent(model, tools=[tool]).run("q", on_event=events.append)
    assert [e.turn for e in events if e.kind is EventKind.TOOL_START] == [0, 1]
    assert [e.turn for e in events if e.kind is EventKind.MODEL_START] == [0, 1, 2]


async def test_sequential_tools_alternate_start_and_end() -> None:
    events: list[RunEvent] = []
    tool = Tool("t", "t", OBJ, lambda ctx, args: "ok")
    model = ScriptedModel(calls(("c1", "t", "{}"), ("c2", "t", "{}")), "done")
    await Agent(model, tools=[tool]).run("q", on_event=events.append)
    assert [(e.kind.value, e.call_id) for e in events if e.call_id] == [
        ("tool_start", "c1"),
        ("tool_end", "c1"),
        ("tool_start", "c2"),
        ("tool_end", "c2"),
    ]


async def test_events_are_delivered_synchronously_as_they_happen() -> None:
    log: list[str] = []

    def tool_run(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        log.append("tool body")
        return "ok"

    model = ScriptedModel(calls(("c1", "t", "{}")), "done")
    agent = Agent(model, tools=[Tool("t", "t", OBJ, tool_run)])
    await agent.run("q", on_event=lambda e: log.append(e.kind.value))
    assert log == [
        "model_start",
        "model_end",
        "tool_start",
        "tool body",
        "tool_end",
        "model_start",
        "model_end",
    ]


# --------------------------------------------------------------------------- observers


async def test_agent_handler_runs_before_the_run_observer_for_every_event() -> None:
    log: list[tuple[str, EventKind]] = []
    agent, _ = two_turn_agent(event_handler=lambda e: log.append(("agent", e.kind)))
    await agent.run("q", on_event=lambda e: log.append(("run", e.kind)))
    assert len(log) == 12
    for i in range(0, len(log), 2):
        assert log[i][0] == "agent"
        assert log[i + 1] == ("run", log[i][1])


async def test_agent_handler_alone_sees_every_run() -> None:
    seen: list[str] = []
    agent, model = two_turn_agent(event_handler=lambda e: seen.append(e.run_id))
    first = await agent.run("q")
    model.respond("again")
    second = await agent.run("q2")
    assert set(seen) == {first.run_id, second.run_id}


async def test_both_observers_receive_the_same_event_objects() -> None:
    a: list[RunEvent] = []
    b: list[RunEvent] = []
    agent, _ = two_turn_agent(event_handler=a.append)
    await agent.run("q", on_event=b.append)
    assert a == b


async def test_a_raising_observer_cannot_fail_the_run(caplog: pytest.LogCaptureFixture) -> None:
    received: list[EventKind] = []

    def broken(event: RunEvent) -> None:
        raise RuntimeError("observer bug")

    agent, _ = two_turn_agent(event_handler=broken)
    with caplog.at_level(logging.CRITICAL + 1):
        res = await agent.run("q", on_event=lambda e: received.append(e.kind))
    assert res.output == "answer"
    assert len(received) == 6  # the run observer still got every event


async def test_a_raising_run_observer_cannot_fail_the_run(caplog: pytest.LogCaptureFixture) -> None:
    def broken(event: RunEvent) -> None:
        raise ValueError("observer bug")

    agent, _ = two_turn_agent()
    with caplog.at_level(logging.CRITICAL + 1):
        res = await agent.run("q", on_event=broken)
    assert res.output == "answer"
    assert res.tool_calls == 1


async def test_observer_raising_on_a_failing_run_keeps_the_real_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(event: RunEvent) -> None:
        raise RuntimeError("observer bug")

    model = ScriptedModel(Overloaded("down"))
    with caplog.at_level(logging.CRITICAL + 1), pytest.raises(RunError) as info:
        await Agent(model).run("q", on_event=broken)
    assert isinstance(info.value.__cause__, Overloaded)


async def test_no_observers_is_fine() -> None:
    agent, _ = two_turn_agent()
    assert (await agent.run("q")).output == "answer"
