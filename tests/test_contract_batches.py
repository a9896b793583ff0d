"""The run loop's invariants for ANY batch (seed: deferred-tools.md; Go reference §2.2–2.5,
§4.3, §5 and §6), checked by Hypothesis against an oracle written from those texts.

A drawn run is one or two model turns with tool calls, each call doing one of: succeed,
raise `ModelRetry` (the budget is one correction per tool name), `Failed`, `Canceled`,
defer for approval or for an external result, time out, raise an error, or arrive with
arguments that are not JSON. Tools are async, sync in a thread, sync on the loop, and
sequential; the agent runs them one by one or in parallel. The oracle says, for the seed's
and the reference's rules, what the run returns or raises, which events fire in which
order, what is counted, and what the history holds; a resume with drawn resolutions
(approve, deny, edit, external, missing, extra, doubled; re-runs that succeed, fail, defer
again or cancel) either continues with every call answered exactly once or raises the
named error before any model call or tool runs. The same runs streamed give the same
results and events.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from golem import (
    Agent,
    Approval,
    DeferredResults,
    Message,
    ResumeError,
    RunError,
    RunEvent,
    Stage,
    Tool,
    ToolCall,
    ToolError,
    Usage,
    UsageLimitExceeded,
    UsageLimits,
    dumps_history,
    loads_history,
)
from golem.history import INTERRUPTED_TEXT
from golem.model import ModelResponse
from golem.testing import ScriptedModel
from golem.tool import Canceled, DeferKind, Deferred, Failed, ModelRetry, RunContext, call_approved

OBJ: dict[str, Any] = {"type": "object"}
BEHAVIOURS = [
    "ok",
    "retry",
    "failed",
    "canceled",
    "approval",
    "external",
    "timeout",
    "late-defer",  # defers after its deadline: the timeout wins (reference §2.2 step 3)
    "error",
    "badargs",
    "unknown",  # a tool the agent does not have: the whole batch fails, nothing runs
]
TOOLS = ["a", "s", "l", "q"]  # async, sync in a thread, sync on the loop, sequential (async)
TERMINAL = {
    "timeout": Stage.TOOL,
    "late-defer": Stage.TOOL,
    "error": Stage.TOOL,
    "canceled": Stage.CANCELED,
}
BUDGET = 1


@dataclass
class World:
    """What the tools do: the behaviour of each call, and what they did."""

    behaviour: dict[str, str] = field(default_factory=dict)
    rerun: dict[str, str] = field(default_factory=dict)
    ran: list[tuple[str, bool]] = field(default_factory=list)

    def act(self, ctx: RunContext[Any]) -> str:
        approved = call_approved()
        self.ran.append((ctx.call_id, approved))
        how = self.rerun.get(ctx.call_id, "ok") if approved else self.behaviour[ctx.call_id]
        if how == "ok":
            return f"{'approved ' if approved else ''}result {ctx.call_id}"
        if how == "retry":
            raise ModelRetry(f"bad {ctx.call_id}")
        if how == "failed":
            raise Failed(f"failed {ctx.call_id}")
        if how == "canceled":
            raise Canceled(f"stop {ctx.call_id}")
        if how == "approval":
            raise Deferred(DeferKind.APPROVAL, f"sign {ctx.call_id}")
        if how == "external":
            raise Deferred(DeferKind.EXTERNAL, f"job {ctx.call_id}")
        raise RuntimeError(f"broke {ctx.call_id}")  # "error"


def tools_for(world: World) -> list[Tool]:
    async def async_exec(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        return world.act(ctx)

    def sync_exec(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        return world.act(ctx)

    async def hang(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        world.ran.append((ctx.call_id, call_approved()))
        await asyncio.Event().wait()  # cancelled at the deadline
        return "never"

    def overrun(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        world.ran.append((ctx.call_id, call_approved()))
        time.sleep(0.03)  # always longer than the 0.005 s deadline, checked afterwards
        return "too late"

    def late_defer(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        world.ran.append((ctx.call_id, call_approved()))
        time.sleep(0.03)
        raise Deferred(DeferKind.APPROVAL, "too late to defer")

    return [
        Tool("late", "", OBJ, late_defer, timeout=0.005),
        Tool("a", "", OBJ, async_exec),
        Tool("s", "", OBJ, sync_exec),
        Tool("l", "", OBJ, sync_exec, run_in_thread=False),
        Tool("q", "", OBJ, async_exec, sequential=True),
        Tool("hang", "", OBJ, hang, timeout=0.005),
        Tool("overrun", "", OBJ, overrun, timeout=0.005),
    ]


@dataclass(frozen=True)
class Call:
    id: str
    tool: str
    how: str

    @property
    def name(self) -> str:
        if self.how == "timeout":
            return "hang" if self.tool in ("a", "q") else "overrun"
        if self.how == "late-defer":
            return "late"
        if self.how == "unknown":
            return "nowhere"
        return self.tool

    @property
    def args(self) -> str:
        return "{not json" if self.how == "badargs" else json.dumps({"n": self.id})

    @property
    def sequential(self) -> bool:
        return self.name == "q"


@st.composite
def runs(draw: st.DrawFn) -> list[list[Call]]:
    turns = draw(st.integers(1, 2))
    out: list[list[Call]] = []
    for t in range(turns):
        n = draw(st.integers(1, 5))
        out.append(
            [
                Call(f"t{t}c{i}", draw(st.sampled_from(TOOLS)), draw(st.sampled_from(BEHAVIOURS)))
                for i in range(n)
            ]
        )
    return out


def response(batch: list[Call], turn: int) -> ModelResponse:
    return ModelResponse(
        Message(role="assistant", tool_calls=[ToolCall(c.id, c.name, c.args) for c in batch]),
        Usage(input_tokens=10 + turn, output_tokens=1),
        "tool_call",
    )


def groups(batch: list[Call], parallel: bool) -> list[list[int]]:
    if not parallel:
        return [[i] for i in range(len(batch))]
    out: list[list[int]] = []
    current: list[int] = []
    for i, c in enumerate(batch):
        if c.sequential:
            if current:
                out.append(current)
                current = []
            out.append([i])
        else:
            current.append(i)
    if current:
        out.append(current)
    return out


@dataclass
class Expected:
    events: list[tuple[Any, ...]]
    tool_calls: int
    turns: int
    stage: Stage | None = None
    failing_call: str = ""
    pending_approvals: list[str] = field(default_factory=list)
    pending_external: list[str] = field(default_factory=list)
    answered: dict[str, str] = field(default_factory=dict)  # call ID -> content, last batch
    closed: list[tuple[str, str]] = field(default_factory=list)  # canceled batch: id, text


def oracle(run: list[list[Call]], parallel: bool, limit: int | None = None) -> Expected:
    """What the seed and the reference say the run does (`limit`: a tool-call bound)."""
    events: list[tuple[Any, ...]] = []
    count = 0
    feedback: dict[str, int] = {}
    for turn, batch in enumerate(run):
        events += [("model_start", turn, ""), ("model_end", turn, "")]
        answered: dict[str, str] = {}
        approvals: list[str] = []
        external: list[str] = []
        unknown = next((c for c in batch if c.how == "unknown"), None)
        if unknown is not None:  # names resolved before anything runs (reference §2.2 step 1)
            return Expected(events, count, turn + 1, Stage.TOOL, unknown.id)
        for group in groups(batch, parallel):
            events += [("tool_start", turn, batch[i].id) for i in group]
            for i in group:
                c = batch[i]
                kind = "deferred" if c.how in ("approval", "external") else "tool_end"
                events.append((kind, turn, c.id))
                count += kind == "tool_end"
            for i in group:
                c = batch[i]
                if c.how == "ok":
                    answered[c.id] = f"result {c.id}"
                elif c.how == "failed":
                    answered[c.id] = f"failed {c.id}"
                elif c.how == "badargs":
                    answered[c.id] = "rejected"
                elif c.how == "approval":
                    approvals.append(c.id)
                elif c.how == "external":
                    external.append(c.id)
                elif c.how == "retry" and feedback.get(c.name, 0) < BUDGET:
                    feedback[c.name] = feedback.get(c.name, 0) + 1
                    answered[c.id] = "rejected"
                else:
                    stage = TERMINAL.get(c.how, Stage.TOOL)
                    closed: list[tuple[str, str]] = []
                    if stage is Stage.CANCELED:
                        events.append(("canceled", turn, c.id))
                        closed = [(b.id, answered.get(b.id, INTERRUPTED_TEXT)) for b in batch]
                    return Expected(events, count, turn + 1, stage, c.id, closed=closed)
        if limit is not None and count > limit:  # checked after the batch, before a pause
            return Expected(events, count, turn + 1, Stage.USAGE, "", answered=answered)
        if approvals or external:
            return Expected(events, count, turn + 1, None, "", approvals, external, answered)
    events += [("model_start", len(run), ""), ("model_end", len(run), "")]
    return Expected(events, count, len(run) + 1)


def shape(e: RunEvent) -> tuple[Any, ...]:
    return (str(e.kind), e.turn, e.call_id)


def check_content(got: str, want: str) -> None:
    if want == "rejected":
        assert got.startswith("Your tool call was rejected: "), got
    else:
        assert got == want


async def drive(agent: Agent[Any, str], stream: bool, **kw: Any) -> tuple[Any, list[RunEvent]]:
    """`agent.run` or the same run streamed; returns (result or error, observed events)."""
    seen: list[RunEvent] = []
    try:
        if not stream:
            return await agent.run("go", on_event=seen.append, **kw), seen
        yielded: list[RunEvent] = []
        async with agent.run_stream("go", on_event=seen.append, **kw) as s:
            async for item in s:
                if isinstance(item, RunEvent):
                    yielded.append(item)
        assert [shape(e) for e in yielded] == [shape(e) for e in seen]
        return s.result, seen
    except RunError as err:
        return err, seen


PROPERTY = settings(max_examples=int(os.environ.get("GOLEM_BATCH_EXAMPLES", "120")), deadline=None)


@PROPERTY
@given(
    run=runs(), parallel=st.booleans(), stream=st.booleans(), limit=st.none() | st.integers(0, 4)
)
def test_any_batch_runs_as_the_contract_says(
    run: list[list[Call]], parallel: bool, stream: bool, limit: int | None
) -> None:
    world = World({c.id: c.how for batch in run for c in batch})
    model = ScriptedModel(*(response(b, t) for t, b in enumerate(run)), "final")
    agent: Agent[Any, str] = Agent(
        model,
        tools=tools_for(world),
        tool_retries=BUDGET,
        parallel_tool_calls=parallel,
        usage_limits=UsageLimits(tool_calls=limit) if limit is not None else None,
    )
    want = oracle(run, parallel, limit)
    got, seen = asyncio.run(drive(agent, stream, run_id="R", conversation_id="C"))
    assert [shape(e) for e in seen] == want.events
    assert all((e.run_id, e.conversation_id) == ("R", "C") for e in seen)
    assert len(model.requests) == want.turns  # no model call after a pause or a failure
    last = run[want.turns - 1] if want.turns <= len(run) else []
    assert not any(e.approved for e in seen)  # first passes are never flagged approved
    for e in seen:  # deferred events carry the raw args and the reason; no tool_end follows
        if e.kind == "deferred":
            assert e.args == next(c.args for b in run for c in b if c.id == e.call_id)
            assert e.reason.endswith(e.call_id)
            assert (e.result, e.error, e.usage) == ("", None, None)
    if want.stage is not None:
        assert isinstance(got, RunError), got
        assert got.stage is want.stage
        assert got.partial is not None
        assert got.partial.tool_calls == want.tool_calls
        messages = got.partial.messages
        if want.stage is Stage.USAGE:
            # the run fails instead of pausing; the partial keeps the batch's recorded results
            assert isinstance(got.__cause__, UsageLimitExceeded)
            assert got.__cause__.kind == "tool call"
            tail = messages[len(messages) - len(want.answered) :] if want.answered else []
            assert [m.tool_call_id for m in tail] == list(want.answered)
            return
        if want.stage is Stage.CANCELED:
            assert isinstance(got.__cause__, Canceled)
            tail = messages[-len(last) :]
            assert [(m.tool_call_id, m.content) for m in tail][: len(want.closed)] == [
                (i, t) if t != "rejected" else (i, m.content)
                for (i, t), m in zip(want.closed, tail, strict=True)
            ]
            assert all(m.run_id == "R" for m in tail)
        else:
            assert isinstance(got.__cause__, ToolError)
            assert got.__cause__.call_id == want.failing_call
            assert messages[-1].role == "assistant"  # a failing batch adds no results
        return
    assert not isinstance(got, RunError), got
    assert got.tool_calls == want.tool_calls
    assert got.requests == want.turns
    assert got.usage.input_tokens == sum(10 + t for t in range(min(want.turns, len(run))))
    if want.pending_approvals or want.pending_external:
        assert got.pending is not None
        assert [p.call_id for p in got.pending.approvals] == want.pending_approvals
        assert [p.call_id for p in got.pending.external] == want.pending_external
        assert all(p.kind is DeferKind.APPROVAL for p in got.pending.approvals)
        assert all(p.kind is DeferKind.EXTERNAL for p in got.pending.external)
        assert got.finish_reason == "tool_call"
        # the evidence ends with the batch, then its recorded results in emission order
        tail = got.messages[-len(want.answered) - 1 :] if want.answered else got.messages[-1:]
        assert tail[0].role == "assistant"
        assert [m.tool_call_id for m in tail[1:]] == list(want.answered)
        for m in tail[1:]:
            check_content(m.content, want.answered[m.tool_call_id])
            assert (m.run_id, m.conversation_id) == ("R", "C")
        return
    assert got.pending is None
    assert got.output == "final"


# --------------------------------------------------------------------------- resume


RESOLUTIONS = ["approve", "deny", "edit", "external", "missing", "both"]
RERUNS = ["ok", "error", "approval", "canceled", "failed", "retry"]  # no budget on re-runs


@st.composite
def paused_runs(draw: st.DrawFn) -> tuple[list[Call], dict[str, tuple[str, str]], bool]:
    """One batch with at least one deferral, how each pending call is resolved (and how an
    approved re-run goes), and whether an unknown ID is resolved too."""
    n = draw(st.integers(1, 5))
    hows = ["ok", "failed", "approval", "external", "badargs"]
    batch = [
        Call(f"c{i}", draw(st.sampled_from(TOOLS)), draw(st.sampled_from(hows))) for i in range(n)
    ]
    if not any(c.how in ("approval", "external") for c in batch):
        batch[-1] = Call(batch[-1].id, batch[-1].tool, "approval")
    plan = {
        c.id: (draw(st.sampled_from(RESOLUTIONS)), draw(st.sampled_from(RERUNS)))
        for c in batch
        if c.how in ("approval", "external")
    }
    return batch, plan, draw(st.booleans())


@PROPERTY
@given(case=paused_runs(), parallel=st.booleans(), stream=st.booleans())
def test_any_resolutions_resume_the_paused_batch_or_are_refused_before_anything_runs(
    case: tuple[list[Call], dict[str, tuple[str, str]], bool], parallel: bool, stream: bool
) -> None:
    batch, plan, extra = case
    world = World({c.id: c.how for c in batch})
    model = ScriptedModel(response(batch, 0), "final")
    agent: Agent[Any, str] = Agent(
        model, tools=tools_for(world), tool_retries=BUDGET, parallel_tool_calls=parallel
    )
    paused = agent.run_sync("go")
    assert paused.pending is not None
    pending = [c.id for c in batch if c.id in plan]  # emission order
    approvals: dict[str, Approval | bool] = {}
    external: dict[str, str] = {}
    for cid, (how, rerun) in plan.items():
        world.rerun[cid] = rerun
        if how in ("approve", "both"):
            approvals[cid] = True
        elif how == "deny":
            approvals[cid] = Approval(False, "no")
        elif how == "edit":
            approvals[cid] = Approval(True, args={"n": cid, "edited": True})
        if how in ("external", "both"):
            external[cid] = f"ext {cid}"
    if extra:
        approvals["ghost"] = True
    valid = not extra and all(plan[c][0] not in ("missing", "both") for c in pending)
    world.ran.clear()
    before = list(paused.messages)
    results = DeferredResults(approvals=approvals, external=external)
    seen: list[RunEvent] = []

    async def resume() -> Any:
        if not stream:
            return await agent.run_with_deferred_results(
                paused.messages, results, on_event=seen.append
            )
        async with agent.run_stream_with_deferred_results(
            paused.messages, results, on_event=seen.append
        ) as s:
            async for _ in s:
                pass
        return s.result

    if not valid:
        with pytest.raises(ResumeError):
            asyncio.run(resume())
        assert world.ran == []
        assert len(model.requests) == 1
        assert seen == []
        assert paused.messages == before
        return
    approved = [c for c in pending if plan[c][0] in ("approve", "edit")]
    failing = next((c for c in approved if plan[c][1] != "ok"), None)
    if failing is not None:
        with pytest.raises(RunError) as info:
            asyncio.run(resume())
        err = info.value
        rerun = plan[failing][1]
        assert err.stage is (Stage.CANCELED if rerun == "canceled" else Stage.TOOL)
        assert isinstance(err.__cause__, Canceled if rerun == "canceled" else ToolError)
        # the re-runs before it ran, in emission order, then it; no model call
        upto = approved[: approved.index(failing) + 1]
        assert world.ran == [(c, True) for c in upto]
        assert len(model.requests) == 1
        # ADR 0071 (this pinned `partial is None` before, Go reference §2.5): the partial is
        # the paused history with the re-runs that completed answered, everything else
        # still pending; resuming it with the same resolutions runs only the rest
        assert err.partial is not None
        ran_before = upto[:-1]
        answers = {m.tool_call_id: m for m in err.partial.messages if m.role == "tool"}
        assert set(answers) == {m.tool_call_id for m in before if m.role == "tool"} | set(
            ran_before
        )
        for cid in ran_before:
            assert answers[cid].content.endswith(f"approved result {cid}")
            assert answers[cid].run_id == err.partial.run_id
        assert [m.role for m in err.partial.messages if m.role != "tool"] == [
            m.role for m in before if m.role != "tool"
        ]
        assert err.partial.tool_calls == len(upto)
        world.rerun.update({c: "ok" for c in approved})
        world.ran.clear()
        went_on = asyncio.run(
            agent.run_with_deferred_results(
                loads_history(dumps_history(err.partial.messages)), results
            )
        )
        assert went_on.output == "final"
        assert world.ran == [(c, True) for c in approved if c not in ran_before]
        return
    result = asyncio.run(resume())
    assert result.output == "final"
    assert world.ran == [(c, True) for c in approved]
    assert result.tool_calls == len(approved)  # re-runs count, deferrals never did
    assert [(str(e.kind), e.call_id, e.approved) for e in seen[: 2 * len(approved)]] == [
        (k, c, True) for c in approved for k in ("tool_start", "tool_end")
    ]
    assert not any(e.approved for e in seen[2 * len(approved) :])  # the turns after are not
    assert {e.run_id for e in seen} == {result.run_id}
    sent = model.requests[1].messages
    calls = [c.id for m in sent if m.role == "assistant" for c in m.tool_calls]
    answers = [m.tool_call_id for m in sent if m.role == "tool"]
    assert answers == calls == [c.id for c in batch]  # each once, in emission order
    by_id = {m.tool_call_id: m for m in sent if m.role == "tool"}
    for cid in pending:
        how = plan[cid][0]
        content = by_id[cid].content
        if how == "approve":
            assert content == f"approved result {cid}"
        elif how == "edit":
            assert content.endswith(f"\napproved result {cid}")
        elif how == "deny":
            assert content.startswith("Your tool call was denied: no.")
        else:
            assert content == f"ext {cid}"
        assert by_id[cid].run_id == result.run_id


# --------------------------------------------------------------------------- streamed == run


def fresh(run_id: str) -> str:
    """A resumed run's ID is fresh on every resume: compared as "fresh"."""
    return run_id if run_id in ("", "R") else "fresh"


def detail(e: RunEvent) -> tuple[Any, ...]:
    err = e.error
    return (
        str(e.kind),
        e.turn,
        e.attempt,
        e.call_id,
        e.tool_name,
        e.args,
        e.result,
        tuple(e.parts),
        e.usage,
        e.reason,
        e.approved,
        fresh(e.run_id),
        e.conversation_id,
        (type(err).__name__, str(err)) if err is not None else None,
    )


def outcome(got: Any) -> tuple[Any, ...]:
    if isinstance(got, RunError):
        p = got.partial
        if p is not None:  # a dataclass: every field, the run IDs as `fresh` says
            p = replace(
                p,
                run_id=fresh(p.run_id),
                messages=[replace(m, run_id=fresh(m.run_id)) for m in p.messages],
            )
        return ("error", got.stage, str(got), p)
    return (
        "result",
        fresh(got.run_id),
        [replace(m, run_id=fresh(m.run_id)) for m in got.messages],
        got.pending,
        got.usage,
        got.requests,
        got.tool_calls,
        got.finish_reason,
        got.output if got.pending is None else None,
    )


@settings(max_examples=int(os.environ.get("GOLEM_BATCH_EXAMPLES", "60")), deadline=None)
@given(run=runs(), parallel=st.booleans(), approve=st.booleans())
def test_a_streamed_run_pauses_and_resumes_exactly_as_run(
    run: list[list[Call]], parallel: bool, approve: bool
) -> None:
    def once(stream: bool) -> tuple[Any, list[RunEvent], Any, list[RunEvent]]:
        world = World({c.id: c.how for batch in run for c in batch})
        model = ScriptedModel(*(response(b, t) for t, b in enumerate(run)), "final", "again")
        agent: Agent[Any, str] = Agent(
            model, tools=tools_for(world), tool_retries=BUDGET, parallel_tool_calls=parallel
        )
        got, seen = asyncio.run(drive(agent, stream, run_id="R", conversation_id="C"))
        if isinstance(got, RunError) or got.pending is None:
            return got, seen, None, []
        results = DeferredResults(
            approvals={p.call_id: approve for p in got.pending.approvals},
            external={p.call_id: "ext" for p in got.pending.external},
        )
        later: list[RunEvent] = []

        async def resume() -> Any:
            if not stream:
                return await agent.run_with_deferred_results(
                    got.messages, results, on_event=later.append
                )
            async with agent.run_stream_with_deferred_results(
                got.messages, results, on_event=later.append
            ) as s:
                async for _ in s:
                    pass
            return s.result

        try:
            resumed = asyncio.run(resume())
        except RunError as err:  # the resumed run goes on with the next batch, which may fail
            resumed = err
        return got, seen, resumed, later

    plain, streamed = once(False), once(True)
    assert outcome(streamed[0]) == outcome(plain[0])
    assert [detail(e) for e in streamed[1]] == [detail(e) for e in plain[1]]
    if plain[2] is not None:
        assert outcome(streamed[2]) == outcome(plain[2])
        assert [detail(e) for e in streamed[3]] == [detail(e) for e in plain[3]]
