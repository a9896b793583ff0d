"""Run events around deferred tools (issue 3): `deferred` replaces `tool_end`, the order in
sequential and parallel mode, the tool's reason on `deferred`, and approved re-runs on resume
emitting `tool_start`/`tool_end` flagged `approved` (issue 8 §3)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from golem import (
    Agent,
    Approval,
    DeferredResults,
    EventKind,
    Message,
    RunContext,
    RunError,
    RunEvent,
    Tool,
    ToolCall,
    ToolError,
    Usage,
)
from golem.model import ModelResponse
from golem.testing import ScriptedModel
from golem.tool import DeferKind, Deferred, call_approved

OBJ = {"type": "object"}


def tool_turn(*calls: ToolCall) -> ModelResponse:
    return ModelResponse(
        message=Message(role="assistant", tool_calls=list(calls)),
        usage=Usage(1, 1),
        finish_reason="tool_call",
    )


def gated(name: str, kind: DeferKind = DeferKind.APPROVAL) -> Tool:
    def exec(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        if not call_approved():
            raise Deferred(kind, f"{name} needs a decision")
        return f"{name} approved"

    return Tool(name, name, OBJ, exec)


def plain(name: str, text: str = "ok") -> Tool:
    return Tool(name, name, OBJ, lambda ctx, args: text)


def trace(events: list[RunEvent]) -> list[tuple[str, str]]:
    return [(e.kind.value, e.call_id) for e in events]


@pytest.mark.parametrize(
    ("batch", "how", "order"),
    [
        ("gp", "run", ["ts1", "d1", "ts2", "te2"]),
        ("pg", "run", ["ts1", "te1", "ts2", "d2"]),
        ("gp", "parallel", ["ts1", "ts2", "d1", "te2"]),
        ("gp", "stream", ["ts1", "d1", "ts2", "te2"]),
    ],
    ids=["sequential", "sequential-deferral-last", "parallel", "streamed"],
)
async def test_deferred_replaces_tool_end_in_emission_order(
    batch: str, how: str, order: list[str]
) -> None:
    assert EventKind("deferred") is EventKind.DEFERRED == "deferred"
    model = ScriptedModel(tool_turn(*(ToolCall(f"c{i + 1}", t, "{}") for i, t in enumerate(batch))))
    agent = Agent(model, tools=[gated("g"), plain("p")], parallel_tool_calls=how == "parallel")
    events: list[RunEvent] = []
    if how == "stream":
        async with agent.run_stream("go", on_event=events.append) as stream:
            streamed = [i for i in [item async for item in stream] if isinstance(i, RunEvent)]
        assert trace(streamed) == trace(events)  # the stream carries what observers see
        result = stream.result
    else:
        result = await agent.run("go", on_event=events.append)
    assert result.pending is not None
    names = {"ts": "tool_start", "te": "tool_end", "d": "deferred"}
    want = [(names[x[:-1]], f"c{x[-1]}") for x in order]
    assert trace(events) == [("model_start", ""), ("model_end", ""), *want]
    assert not any(e.approved for e in events)  # first passes are not flagged approved


async def test_parallel_order_all_starts_first_then_ends_and_deferreds_in_emission_order() -> None:
    # c1 cannot finish before c2 and c3 did: completion order differs from emission order.
    c2_done, c3_done = asyncio.Event(), asyncio.Event()

    async def slow_gate(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        await c2_done.wait()
        await c3_done.wait()
        raise Deferred(DeferKind.EXTERNAL, "job")

    async def fast(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        c2_done.set()
        return "fast"

    async def gate3(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        await c2_done.wait()
        c3_done.set()
        raise Deferred(DeferKind.APPROVAL)

    model = ScriptedModel(
        tool_turn(
            ToolCall("c1", "slow", "{}"), ToolCall("c2", "fast", "{}"), ToolCall("c3", "g3", "{}")
        )
    )
    agent = Agent(
        model,
        tools=[
            Tool("slow", "slow", OBJ, slow_gate),
            Tool("fast", "fast", OBJ, fast),
            Tool("g3", "g3", OBJ, gate3),
        ],
        parallel_tool_calls=True,
    )
    events: list[RunEvent] = []
    result = await agent.run("go", on_event=events.append)
    assert result.pending is not None
    assert [p.call_id for p in result.pending.external] == ["c1"]
    assert [p.call_id for p in result.pending.approvals] == ["c3"]
    assert trace(events) == [
        ("model_start", ""),
        ("model_end", ""),
        ("tool_start", "c1"),
        ("tool_start", "c2"),
        ("tool_start", "c3"),
        ("deferred", "c1"),
        ("tool_end", "c2"),
        ("deferred", "c3"),
    ]


async def test_a_deferred_event_carries_the_call_its_raw_args_reason_and_pausing_turn() -> None:
    args = '{ "path" : "a  b" }'
    model = ScriptedModel(
        tool_turn(ToolCall("c0", "p", "{}")),
        tool_turn(ToolCall("c9", "e", args), ToolCall("c2", "g", "{}"), ToolCall("c3", "e", "{}")),
    )
    agent = Agent(model, tools=[gated("g"), gated("e", DeferKind.EXTERNAL), plain("p")])
    events: list[RunEvent] = []
    paused = await agent.run("go", run_id="R", conversation_id="C", on_event=events.append)
    assert paused.pending is not None
    deferred = [e for e in events if e.kind is EventKind.DEFERRED]
    assert [e.call_id for e in deferred] == ["c9", "c2", "c3"]  # one per pending call
    assert [e.call_id for e in events if e.kind is EventKind.TOOL_START] == ["c0", "c9", "c2", "c3"]
    ev = deferred[0]
    assert (ev.turn, ev.call_id, ev.tool_name, ev.args) == (1, "c9", "e", args)
    assert (ev.run_id, ev.conversation_id, ev.result, ev.error, ev.usage) == (
        "R",
        "C",
        "",
        None,
        None,
    )
    reasons = {p.call_id: p.reason for p in paused.pending.calls}
    assert [e.reason for e in deferred] == [reasons[e.call_id] for e in deferred]
    assert all(e.reason for e in deferred)
    assert [e.call_id for e in events if e.kind is EventKind.TOOL_END] == ["c0"]


async def test_deferred_events_reach_the_agent_observer_then_the_run_observer() -> None:
    seen: list[tuple[str, str]] = []
    model = ScriptedModel(tool_turn(ToolCall("c1", "g", "{}")))
    agent = Agent(
        model, tools=[gated("g")], event_handler=lambda e: seen.append(("agent", e.kind.value))
    )
    await agent.run("go", on_event=lambda e: seen.append(("run", e.kind.value)))
    assert seen[-2:] == [("agent", "deferred"), ("run", "deferred")]


async def test_resume_reruns_emit_tool_events_flagged_approved() -> None:
    model = ScriptedModel(
        tool_turn(ToolCall("c1", "g", "{}"), ToolCall("c2", "g", "{}"), ToolCall("c3", "e", "{}")),
        "done",
    )
    agent = Agent(model, tools=[gated("g"), gated("e", DeferKind.EXTERNAL)])
    paused = await agent.run("go")
    events: list[RunEvent] = []
    resumed = await agent.run_with_deferred_results(
        paused.messages,
        DeferredResults(
            approvals={"c1": Approval(True), "c2": Approval(False)}, external={"c3": "x"}
        ),
        on_event=events.append,
    )
    assert resumed.output == "done"
    assert resumed.tool_calls == 1  # the re-run happened
    assert trace(events) == [
        ("tool_start", "c1"),
        ("tool_end", "c1"),
        ("model_start", ""),
        ("model_end", ""),
    ]
    assert [e.approved for e in events] == [True, True, False, False]
    assert events[1].result == "g approved"
    assert events[0].tool_name == "g"
    assert events[0].args == "{}"
    assert all(e.run_id == resumed.run_id for e in events)
    assert events[2].turn == 0


async def test_a_failing_approved_rerun_emits_tool_end_with_the_error() -> None:
    def boom(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, "sign-off")
        raise RuntimeError("disk full")

    model = ScriptedModel(tool_turn(ToolCall("c1", "b", "{}")), "never")
    agent = Agent(model, tools=[Tool("b", "b", {"type": "object"}, boom)])
    paused = await agent.run("go")
    events: list[RunEvent] = []
    with pytest.raises(RunError):
        await agent.run_with_deferred_results(
            paused.messages, DeferredResults(approvals={"c1": True}), on_event=events.append
        )
    assert trace(events) == [("tool_start", "c1"), ("tool_end", "c1")]
    assert events[1].approved
    assert isinstance(events[1].error, ToolError)
    assert "disk full" in str(events[1].error)


async def test_resumed_run_that_pauses_again_emits_its_own_deferred_event() -> None:
    model = ScriptedModel(
        tool_turn(ToolCall("c1", "g", "{}")), tool_turn(ToolCall("c2", "g", "{}"))
    )
    agent = Agent(model, tools=[gated("g")])
    first: list[RunEvent] = []
    paused = await agent.run("go", on_event=first.append)
    second: list[RunEvent] = []
    again = await agent.run_with_deferred_results(
        paused.messages, DeferredResults(approvals={"c1": Approval(True)}), on_event=second.append
    )
    assert trace(second) == [
        ("tool_start", "c1"),
        ("tool_end", "c1"),
        ("model_start", ""),
        ("model_end", ""),
        ("tool_start", "c2"),
        ("deferred", "c2"),
    ]
    assert second[-1].turn == 0
    assert {e.run_id for e in second} == {again.run_id}
    assert again.run_id != paused.run_id
    assert {e.conversation_id for e in second} == {paused.conversation_id}
    assert trace(first)[-1] == ("deferred", "c1")
