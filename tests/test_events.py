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


def two_turn_agent(log: list[str] | None = None, **kwargs: Any) -> Agent[Any, Any]:
    model = ScriptedModel(
        ModelResponse(calls(("c1", "lookup", '{"q": "x"}')), usage=Usage(10, 2)),
        ModelResponse(Message(role="assistant", content="answer"), usage=Usage(20, 4)),
    )

    def lookup(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        if log is not None:
            log.append("tool body")
        return "found it"

    return Agent(model, tools=[Tool("lookup", "Look up.", OBJ, lookup)], **kwargs)


def test_run_event_is_a_frozen_dataclass_with_empty_defaults_and_string_kinds() -> None:
    assert [f.name for f in dataclasses.fields(RunEvent)] == [
        *("kind", "turn", "attempt", "call_id", "tool_name", "args", "result", "parts"),
        *("error", "usage", "run_id", "conversation_id", "reason", "approved", "agent"),
        "namespace",
    ]
    e = RunEvent(kind=EventKind.TOOL_START)
    assert (e.turn, e.attempt, e.call_id, e.tool_name, e.args, e.result) == (0, 0, "", "", "", "")
    assert (tuple(e.parts), e.error, e.usage) == ((), None, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.turn = 3  # type: ignore[misc]
    for value in ("model_start", "model_end", "tool_start", "tool_end", "canceled"):
        assert EventKind(value).value == value
    assert EventKind("output_rejected") is EventKind.OUTPUT_REJECTED


async def test_two_turn_run_events_arrive_synchronously_in_order_with_payloads() -> None:
    events: list[RunEvent] = []
    log: list[str] = []
    agent = two_turn_agent(log)

    def observe(e: RunEvent) -> None:
        events.append(e)
        log.append(e.kind.value)

    res = await agent.run("q", on_event=observe)
    assert log == [
        *("model_start", "model_end", "tool_start", "tool body", "tool_end"),
        *("model_start", "model_end"),
    ]
    assert [e.turn for e in events] == [0, 0, 0, 0, 1, 1]
    start0, end0, tstart, tend, start1, end1 = events
    assert (start0.attempt, end0.attempt, start1.attempt) == (1, 1, 1)
    assert (end0.usage, end1.usage, end0.error) == (Usage(10, 2), Usage(20, 4), None)
    assert (tstart.call_id, tstart.tool_name, tstart.args) == ("c1", "lookup", '{"q": "x"}')
    assert (tend.call_id, tend.tool_name, tend.result, tend.args) == (
        "c1",
        "lookup",
        "found it",
        "",
    )
    assert tend.error is None
    assert all((e.run_id, e.conversation_id) == (res.run_id, res.conversation_id) for e in events)


async def test_tool_end_carries_parts_and_the_error_of_failed_and_rejected_calls() -> None:
    events: list[RunEvent] = []
    part = Part("image", url="https://example.com/a.png")

    def fail(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        raise Failed("nope")

    def retry(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        raise ModelRetry("again")

    tools = [
        Tool("img", "i", OBJ, lambda ctx, args: ToolResult("an image", parts=[part])),
        Tool("fail", "f", OBJ, fail),
        Tool("retry", "r", OBJ, retry),
    ]
    model = ScriptedModel(
        calls(("c0", "img", "{}"), ("c1", "fail", "{}"), ("c2", "retry", "{}")), "ok"
    )
    await Agent(model, tools=tools, tool_retries=1).run("q", on_event=events.append)
    ends = [e for e in events if e.kind is EventKind.TOOL_END]
    assert (list(ends[0].parts), ends[0].result, ends[0].error) == ([part], "an image", None)
    assert [e.call_id for e in events if e.call_id] == ["c0", "c0", "c1", "c1", "c2", "c2"]
    assert isinstance(ends[1].error, Failed)
    assert isinstance(ends[2].error, ModelRetry)


async def test_turns_count_up_within_a_segment_and_restart_in_each_correction_round() -> None:
    events: list[RunEvent] = []
    tool = Tool("t", "t", OBJ, lambda ctx, args: "ok")
    model = ScriptedModel(calls(("c1", "t", "{}")), calls(("c2", "t", "{}")), "done")
    await Agent(model, tools=[tool]).run("q", on_event=events.append)
    assert [e.turn for e in events if e.kind is EventKind.TOOL_START] == [0, 1]
    assert [e.turn for e in events if e.kind is EventKind.MODEL_START] == [0, 1, 2]
    events.clear()
    model = ScriptedModel("not a number", "also not", "7")
    res = await Agent(model, output_type=int, output_retries=2).run("q", on_event=events.append)
    assert res.output == 7
    rejected = [e for e in events if e.kind is EventKind.OUTPUT_REJECTED]
    assert [e.attempt for e in rejected] == [1, 2]
    assert all(e.error is not None and e.run_id == res.run_id for e in rejected)
    assert [e.turn for e in events if e.kind is EventKind.MODEL_START] == [0, 0, 0]


async def test_the_agent_handler_sees_every_run_before_the_run_observer_the_same_events() -> None:
    log: list[tuple[str, RunEvent]] = []
    agent = two_turn_agent(event_handler=lambda e: log.append(("agent", e)))
    first = await agent.run("q", on_event=lambda e: log.append(("run", e)))
    assert len(log) == 12
    for i in range(0, len(log), 2):
        assert (log[i][0], log[i + 1]) == ("agent", ("run", log[i][1]))
    agent.model.respond("again")  # type: ignore[attr-defined]
    second = await agent.run("q2")  # no run observer: the agent's alone
    assert {e.run_id for _, e in log[12:]} == {second.run_id} != {first.run_id}
    assert len(log) == 14


@pytest.mark.parametrize("where", ["agent", "run", "both"])
async def test_a_raising_observer_cannot_fail_the_run_nor_hide_its_error(
    where: str, caplog: pytest.LogCaptureFixture
) -> None:
    received: list[EventKind] = []

    def broken(event: RunEvent) -> None:
        raise RuntimeError("observer bug")

    handler = broken if where != "run" else None
    agent = two_turn_agent(event_handler=handler)
    on_event = broken if where != "agent" else (lambda e: received.append(e.kind))
    with caplog.at_level(logging.CRITICAL + 1):
        res = await agent.run("q", on_event=on_event)
        assert (res.output, res.tool_calls) == ("answer", 1)
        if where == "agent":
            assert len(received) == 6  # the run observer still got every event
        with pytest.raises(RunError) as info:
            await Agent(ScriptedModel(Overloaded("down")), event_handler=handler).run(
                "q", on_event=on_event
            )
    assert isinstance(info.value.__cause__, Overloaded)
