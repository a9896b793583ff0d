"""A failed or cancelled resume hands back its progress (ADR 0071; nested, ADR 0076).

An approved re-run that fails raises its `RunError` with `partial` holding the paused
history in which the approved calls that ran are answered (a paused sub-agent's record
rewritten as its own partial would be); a `ResumeProgress` holds the same when the task is
cancelled or `before_approved` raises. Going on from it with the same resolutions,
`expected=` and conversation runs nothing twice (counted by call, no idempotency keys), and
seals still refuse a call nobody approved. The exactly-once property over random mixes is
in test_cancelling.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import threading
from dataclasses import replace
from typing import Any

import pytest

from golem import (
    Agent,
    Approval,
    DeferredResults,
    Message,
    ResumeError,
    ResumeProgress,
    RunContext,
    RunError,
    SealError,
    Stage,
    Tool,
    ToolCall,
    ToolError,
    dumps_history,
    loads_history,
)
from golem.agent_tool import PAUSED_MARKER
from golem.model import ModelRequest, ModelResponse
from golem.seal import as_seal_keys, seal_call
from golem.testing import FunctionModel
from golem.tool import Canceled, DeferKind, Deferred, call_approved
from tests.support import nested
from tests.support.nested import EVERY, FINAL, RESULTS, act_tool, answering, janitor, parent_of
from tests.support.seals import bound

EXACT_CANCELLING = sys.version_info >= (3, 13)  # a swallowed cancellation is seen from 3.13 on

pytestmark = pytest.mark.version

OBJ: dict[str, Any] = {"type": "object"}
KEY = b"k" * 32


class World:
    """Side effects by call ID; `fail` raises, `cancel` raises `Canceled`, `hold` blocks the
    call (a thread that returns once released, or a task that swallows the cancellation)."""

    def __init__(self) -> None:
        self.acted: dict[str, int] = {}
        self.fail: set[str] = set()
        self.cancel: set[str] = set()
        self.hold: set[str] = set()
        self.entered = threading.Event()
        self.release = threading.Event()

    def act(self, ctx: RunContext[Any]) -> str:
        if ctx.call_id in self.cancel:
            raise Canceled("stop")
        if ctx.call_id in self.fail:
            raise RuntimeError(f"broke {ctx.call_id}")
        self.acted[ctx.call_id] = self.acted.get(ctx.call_id, 0) + 1
        return f"acted {ctx.call_id}"


def tools(world: World, *, sync: bool = False) -> list[Tool]:
    async def act(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, "act?")
        if ctx.call_id in world.hold:
            world.entered.set()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.Event().wait()
        return world.act(ctx)

    def act_sync(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, "act?")
        if ctx.call_id in world.hold:
            world.entered.set()
            world.release.wait(10)
        return world.act(ctx)

    def job(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        raise Deferred(DeferKind.EXTERNAL, "job")

    return [Tool("act", "Act.", OBJ, act_sync if sync else act), Tool("job", "Job.", OBJ, job)]


CALLS = [
    ToolCall("a1", "act", '{"n":1}'),
    ToolCall("d1", "act", '{"n":2}'),
    ToolCall("a2", "act", '{"n":3}'),
    ToolCall("x1", "job", "{}"),
    ToolCall("a3", "act", '{"n":4}'),
]
FLAT = DeferredResults(
    approvals={"a1": True, "d1": Approval(False, "no"), "a2": True, "a3": True},
    external={"x1": "job done"},
)
FLAT_FINAL = "a1,a2,a3,d1,x1"
ONCE = {"a1": 1, "a2": 1, "a3": 1}


def answer(request: ModelRequest) -> ModelResponse:
    if any(m.role == "tool" for m in request.messages):
        answered = sorted(m.tool_call_id for m in request.messages if m.role == "tool")
        return ModelResponse(
            Message(role="assistant", content=",".join(answered)), finish_reason="stop"
        )
    return ModelResponse(
        Message(role="assistant", tool_calls=list(CALLS)), finish_reason="tool_call"
    )


async def stream_answer(request: ModelRequest) -> Any:
    yield answer(request)


def agent_for(world: World, *, sync: bool = False, keyed: bool = False) -> Agent[None, str]:
    model = FunctionModel(answer, stream=stream_answer)
    return Agent(model, tools=tools(world, sync=sync), seal_key=KEY if keyed else None)


def pending_ids(history: list[Message]) -> list[str]:
    return nested.pending_ids(history)


class Fenced(Exception):
    pass


async def interrupt(
    agent: Agent[None, str],
    history: list[Message],
    results: Any,
    progress: ResumeProgress,
    *,
    how: str,
    at: str,
    world: Any = None,
    stream: bool = False,
    **kw: Any,
) -> BaseException:
    """Resume `history` and interrupt it at call `at`: `fail` (the caller set the tool to
    fail), `cancel` (the caller's task is cancelled in `before_approved` of `at`), `raise`
    (`before_approved` raises), `thread` / `swallow` (cancelled while `at` runs, which
    returns anyway); return what the caller got."""
    reached = asyncio.Event()

    async def guard(call: ToolCall) -> None:
        if call.id == at and how == "cancel":
            reached.set()
            await asyncio.Event().wait()
        if call.id == at and how == "raise":
            raise Fenced

    async def resume() -> None:
        progress.before_approved = guard
        kwargs = {"progress": progress, **kw}
        if not stream:
            await agent.run_with_deferred_results(history, results, **kwargs)
            return
        async with agent.run_stream_with_deferred_results(history, results, **kwargs) as s:
            async for _ in s:
                pass

    task = asyncio.ensure_future(resume())
    if how == "cancel":
        await reached.wait()
        task.cancel()
    elif how in ("thread", "swallow"):
        await asyncio.to_thread(world.entered.wait, 10)
        task.cancel()
        await asyncio.sleep(0)
        world.release.set()
    with pytest.raises(BaseException) as info:
        await task
    return info.value


FLAT_INTERRUPTS = {  # how, at, sync tool, streamed, answered, pending after
    "rerun-fails": ("fail", "a2", False, False, ("a1",), ["d1", "a2", "x1", "a3"]),
    "streamed-rerun-fails": ("fail", "a3", False, True, ("a1", "a2"), ["d1", "x1", "a3"]),
    "first-rerun-fails": ("fail", "a1", False, False, (), ["a1", "d1", "a2", "x1", "a3"]),
    "cancelled-before-a-rerun": ("cancel", "a3", False, False, ("a1", "a2"), ["d1", "x1", "a3"]),
    "before-approved-raises": ("raise", "a2", False, False, ("a1",), ["d1", "a2", "x1", "a3"]),
    "sync-thread-finishes": ("thread", "a2", True, False, ("a1", "a2"), ["d1", "x1", "a3"]),
    "swallowed": ("swallow", "a2", False, False, ("a1", "a2"), ["d1", "x1", "a3"]),
}


@pytest.mark.parametrize(
    ("how", "at", "sync", "stream", "answered", "pending"),
    list(FLAT_INTERRUPTS.values()),
    ids=list(FLAT_INTERRUPTS),
)
async def test_an_interrupted_resume_hands_back_what_ran_and_going_on_runs_nothing_twice(
    how: str, at: str, sync: bool, stream: bool, answered: tuple[str, ...], pending: list[str]
) -> None:
    if how == "swallow" and not EXACT_CANCELLING:
        pytest.skip("a swallowed cancellation is seen from Python 3.13 on")
    world = World()
    agent = agent_for(world, sync=sync)
    paused = await agent.run("go")
    if how == "fail":
        world.fail.add(at)
    if how in ("thread", "swallow"):
        world.hold.add(at)
    progress = ResumeProgress()
    raised = await interrupt(
        agent, paused.messages, FLAT, progress, how=how, at=at, world=world, stream=stream
    )
    expected_error = {"fail": RunError, "raise": Fenced}.get(how, asyncio.CancelledError)
    assert type(raised) is expected_error
    assert progress.answered == answered
    assert progress.paused
    if not answered:  # nothing ran: go on from the history passed
        assert isinstance(raised, RunError)
        assert raised.partial is not None
        assert (progress.messages, raised.partial.messages) == (None, paused.messages)
        return
    if isinstance(raised, RunError):
        assert raised.partial is not None
        assert progress.messages == raised.partial.messages
    assert progress.messages is not None
    assert pending_ids(progress.messages) == pending
    world.fail.clear()
    world.hold.clear()
    done = await agent.run_with_deferred_results(progress.messages, FLAT)
    assert done.output == FLAT_FINAL
    assert world.acted == ONCE


async def test_a_sealed_partial_resumes_and_cannot_get_a_call_run_that_nobody_approved() -> None:
    """An edited call that ran shows the arguments that ran, re-sealed; the pending calls keep
    their seals, so an injected call or one relabeled from another conversation is refused."""
    world = World()
    agent = agent_for(world, keyed=True)
    paused = await agent.run("go", conversation_id="conv")
    edited = DeferredResults(
        approvals={**FLAT.approvals, "a2": Approval(True, args={"n": 30})}, external=FLAT.external
    )
    world.fail.add("a3")
    with pytest.raises(RunError) as info:
        await agent.run_with_deferred_results(bound(paused), edited)
    partial = info.value.partial
    assert partial is not None
    assert pending_ids(partial.messages) == ["d1", "x1", "a3"]
    batch_at = max(i for i, m in enumerate(partial.messages) if m.tool_calls)
    batch = partial.messages[batch_at]
    ran = {c.id: c for c in batch.tool_calls}
    assert ran["a2"].args == '{"n":30}'
    assert ran["a2"].seal not in ("", paused.messages[-1].tool_calls[2].seal)
    world.fail.clear()
    acted = dict(world.acted)

    def with_calls(calls: list[ToolCall]) -> list[Message]:
        out = list(partial.messages)
        out[batch_at] = replace(batch, tool_calls=calls)
        return out

    injected = with_calls([*batch.tool_calls, ToolCall("evil", "act", '{"n":9}')])
    with_evil = DeferredResults(
        approvals={**edited.approvals, "evil": True}, external=FLAT.external
    )
    other = seal_call(
        as_seal_keys(KEY), "other-conv", ToolCall("a3", "act", '{"n":99}'), "approval"
    )
    moved = with_calls(
        [replace(c, args='{"n":99}', seal=other) if c.id == "a3" else c for c in batch.tool_calls]
    )
    for history, results, conversation, error in [
        (injected, with_evil, "conv", SealError),
        (moved, edited, "conv", SealError),
        (injected, with_evil, "", ResumeError),
    ]:
        with pytest.raises(error, match=r"has no seal|not one of the expected|does not match"):
            await agent.run_with_deferred_results(bound(paused, history, conversation), results)
    assert world.acted == acted
    stored = loads_history(dumps_history(partial.messages))
    done = await agent.run_with_deferred_results(bound(paused, stored), edited)
    assert (done.output, world.acted) == (FLAT_FINAL, ONCE)


@pytest.mark.parametrize("where", ["model-call-after-merge", "last-thread-under-cancel"])
async def test_progress_with_nothing_left_pending_is_not_paused(where: str) -> None:
    """Cancelled once every resolution is merged (in the model call), or once every pending
    call ran though nothing merged: `paused` is false and the caller goes on with `run`."""
    world = World()
    reached = asyncio.Event()
    calls = 0

    async def slow(request: ModelRequest) -> ModelResponse:
        nonlocal calls
        calls += 1
        if calls == 2 and where.startswith("model"):
            reached.set()
            await asyncio.Event().wait()
        if where.startswith("last") and any(m.role == "tool" for m in request.messages):
            return ModelResponse(Message(role="assistant", content="ok"), finish_reason="stop")
        if where.startswith("last"):
            batch = Message(role="assistant", tool_calls=[CALLS[0], CALLS[2]])
            return ModelResponse(batch, finish_reason="tool_call")
        return answer(request)

    agent: Agent[None, str] = Agent(FunctionModel(slow), tools=tools(world, sync=True))
    paused = await agent.run("go")
    progress = ResumeProgress()
    if where.startswith("model"):
        results: Any = FLAT
        task = asyncio.ensure_future(
            agent.run_with_deferred_results(paused.messages, results, progress=progress)
        )
        await reached.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        output, acted = FLAT_FINAL, ONCE
        assert "answered=('a1', 'a2', 'a3')" in repr(progress)
    else:
        world.hold.add("a2")
        results = {"approvals": {"a1": True, "a2": True}}
        raised = await interrupt(
            agent, paused.messages, results, progress, how="thread", at="a2", world=world
        )
        assert isinstance(raised, asyncio.CancelledError)
        assert progress.answered == ("a1", "a2")
        output, acted = "ok", {"a1": 1, "a2": 1}
    assert not progress.paused
    assert progress.messages is not None
    assert pending_ids(progress.messages) == []
    done = await agent.run("", history=progress.messages)
    assert (done.output, world.acted) == (output, acted)


async def test_progress_is_per_resume_and_a_refused_resume_leaves_none() -> None:
    world = World()
    agent = agent_for(world)
    paused = await agent.run("go")
    progress = ResumeProgress()
    assert progress.messages is None
    with pytest.raises(ResumeError):
        await agent.run_with_deferred_results(
            paused.messages, {"approvals": {"a1": True}}, progress=progress
        )
    assert (progress.messages, progress.answered) == (None, ())
    assert json.loads(dumps_history(paused.messages))  # untouched
    world.fail.add("a2")
    with pytest.raises(RunError):  # the sync resume takes progress too
        await asyncio.to_thread(
            agent.run_with_deferred_results_sync, paused.messages, FLAT, progress=progress
        )
    assert progress.answered == ("a1",)
    first = progress.messages
    assert first is not None
    world.fail.clear()
    done = await agent.run_with_deferred_results(first, FLAT, progress=progress)
    assert done.output == FLAT_FINAL
    assert (progress.answered, progress.paused, world.acted) == (("a2", "a3"), False, ONCE)


async def test_a_run_error_raised_by_before_approved_propagates_unchanged() -> None:
    """Only a failing re-run's `RunError` gets the progress as its partial."""
    world = World()
    agent = agent_for(world)
    paused = await agent.run("go")
    own = RunError(Stage.TOOL, RuntimeError("hook"))

    async def guard(call: ToolCall) -> None:
        if call.id == "a2":
            raise own

    progress = ResumeProgress(before_approved=guard)
    with pytest.raises(RunError) as info:
        await agent.run_with_deferred_results(paused.messages, FLAT, progress=progress)
    assert (info.value, own.partial, progress.answered) == (own, None, ("a1",))


# --------------------------------------------------------------------------- nested (ADR 0076)


def record_history(history: list[Message], call_id: str) -> list[Message]:
    (m,) = [m for m in history if m.role == "tool" and m.tool_call_id == call_id]
    assert m.content.startswith(PAUSED_MARKER)
    return loads_history(json.loads(m.content.split("\n", 1)[1])["history"])


SUB_RAN = ("p1/s1", "p1/s2", "p2/s1")
NESTED_INTERRUPTS = {  # how, at, streamed, answered, pending after
    "sub-rerun-fails": ("fail", "j2:s2", False, SUB_RAN, ["a1", "p2/s2", "x1"]),
    "parent-rerun-fails": ("fail", "parent:a1", False, None, ["a1", "x1"]),
    "cancelled-in-a-sub": ("cancel", "p2/s2", False, SUB_RAN, ["a1", "p2/s2", "x1"]),
    "streamed-cancelled-in-a-sub": ("cancel", "p2/s2", True, SUB_RAN, ["a1", "p2/s2", "x1"]),
    "cancelled-in-the-parent": ("cancel", "a1", False, (*SUB_RAN, "p2/s2"), ["a1", "x1"]),
}


@pytest.mark.parametrize(
    ("how", "at", "stream", "answered", "pending"),
    list(NESTED_INTERRUPTS.values()),
    ids=list(NESTED_INTERRUPTS),
)
async def test_an_interrupted_nested_resume_hands_back_the_parent_history(
    how: str, at: str, stream: bool, answered: tuple[str, ...] | None, pending: list[str]
) -> None:
    world = nested.World()
    parent = parent_of(world, janitor(world, "j1"), janitor(world, "j2"))
    paused = await parent.run("go")
    if how == "fail":
        world.fail.add(at)
    progress = ResumeProgress()
    raised = await interrupt(
        parent, paused.messages, RESULTS, progress, how=how, at=at, stream=stream
    )
    if answered is not None:
        assert progress.answered == answered
    assert progress.paused
    assert progress.messages is not None
    assert pending_ids(progress.messages) == pending
    if isinstance(raised, RunError):
        assert raised.partial is not None
        assert raised.partial.pending is not None
        assert [p.call_id for p in raised.partial.pending.calls] == pending
        assert progress.messages == raised.partial.messages
    else:
        assert isinstance(raised, asyncio.CancelledError)
    if at == "a1":  # both sub-agents answered: no record left
        assert not any(m.content.startswith(PAUSED_MARKER) for m in progress.messages)
    world.fail.clear()
    history = loads_history(dumps_history(progress.messages))
    done = await parent.run_with_deferred_results(bound(paused, history, ""), RESULTS)
    assert (done.output, world.acted) == (FINAL, EVERY)


async def test_a_failing_sub_agent_rerun_rewrites_its_record_as_its_own_partial() -> None:
    world = nested.World()
    parent = parent_of(world, janitor(world, "j1"), janitor(world, "j2"))
    paused = await parent.run("go")
    assert paused.pending is not None
    assert [p.call_id for p in paused.pending.calls] == [
        "p1/s1",
        "p1/s2",
        "a1",
        "p2/s1",
        "p2/s2",
        "x1",
    ]
    world.fail.add("j2:s2")
    with pytest.raises(RunError) as info:
        await parent.run_with_deferred_results(paused.messages, RESULTS)
    err = info.value
    assert err.stage is Stage.TOOL
    assert isinstance(err.__cause__, ToolError)
    assert (err.__cause__.tool_name, err.__cause__.call_id) == ("j2", "p2")
    partial = err.partial
    assert partial is not None
    assert partial.pending is not None
    assert [p.call_id for p in partial.pending.approvals] == ["a1", "p2/s2"]
    assert [(p.call_id, p.kind) for p in partial.pending.external] == [("x1", DeferKind.EXTERNAL)]
    assert [p.tool_name for p in partial.pending.calls] == ["act", "j2/act", "job"]
    answered = {m.tool_call_id: m for m in partial.messages if m.role == "tool"}
    assert answered["p1"].content == "j1: acted s1 | acted s2"
    assert answered["p1"].run_id == answered["p2"].run_id == partial.run_id
    j2 = record_history(partial.messages, "p2")
    assert [(m.tool_call_id, m.content) for m in j2 if m.role == "tool"] == [("s1", "acted s1")]
    assert partial.messages[:2] == paused.messages[:2]
    assert (partial.requests, partial.tool_calls) == (1, 4)  # j1's answer; j2's s1 and s2
    world.fail.clear()
    for key in ("p2/zz", "zz"):  # still refused on a partial
        bad = DeferredResults(approvals={**RESULTS.approvals, key: True}, external=RESULTS.external)
        with pytest.raises(ResumeError, match="unknown tool call"):
            await parent.run_with_deferred_results(partial.messages, bad)
    assert world.acted == {"j1:s1": 1, "j1:s2": 1, "j2:s1": 1}
    # what the hand-back prevents: going on from the history passed runs j1's calls again
    await parent.run_with_deferred_results(paused.messages, RESULTS)
    assert world.acted["j1:s1"] == 2


@pytest.mark.parametrize("expected", [False, True])
async def test_at_any_depth_the_record_of_the_record_is_rewritten(expected: bool) -> None:
    """manager/janitor: the janitor's progress rewrites its record inside the manager's; with
    `expected=` naming the janitor's calls, a janitor that answered inside the manager's
    record is progress, not a mismatch."""
    world = nested.World()
    own = [ToolCall("mc", "act", '{"n":5}')] if expected else []
    manager = Agent(
        answering("manager", ToolCall("m1", "janitor", '{"prompt":"clean"}'), *own),
        name="manager",
        tools=[janitor(world, "janitor").as_tool(), act_tool(world, "manager")],
    )
    parent = parent_of(world, manager, own=False)
    paused = await parent.run("go", conversation_id="conv")
    assert paused.pending is not None
    ids = [p.call_id for p in paused.pending.calls]
    assert ids == ["p1/m1/s1", "p1/m1/s2", *(["p1/mc"] if expected else [])]
    assert {p.tool_name for p in paused.pending.calls[:2]} == {"manager/janitor/act"}
    results = {"approvals": dict.fromkeys(ids, True)}

    def target(history: list[Message]) -> Any:
        return bound(paused, history) if expected else history

    world.fail.add("manager:mc" if expected else "janitor:s2")
    with pytest.raises(RunError) as info:
        await parent.run_with_deferred_results(target(paused.messages), results)
    partial = info.value.partial
    assert partial is not None
    assert partial.pending is not None
    left = ["p1/mc"] if expected else ["p1/m1/s2"]
    assert [p.call_id for p in partial.pending.calls] == pending_ids(partial.messages) == left
    if not expected:
        inner = record_history(record_history(partial.messages, "p1"), "m1")
        assert [m.tool_call_id for m in inner if m.role == "tool"] == ["s1"]
    world.fail.clear()
    done = await parent.run_with_deferred_results(target(partial.messages), results)
    if expected:
        assert done.output == "parent: manager: acted mc | janitor: acted s1 | acted s2"
        assert world.acted == {"janitor:s1": 1, "janitor:s2": 1, "manager:mc": 1}
    else:
        assert done.output == "parent: manager: janitor: acted s1 | acted s2"
        assert world.acted == {"janitor:s1": 1, "janitor:s2": 1}


async def test_a_cancellation_after_a_sub_agent_merged_continues_it_without_its_calls() -> None:
    """Cancelled in j1's model call after its merge: its record waits on nothing and the
    resume continues it (`Agent.run` on its history), re-running none of its calls."""
    world = nested.World()
    reached = asyncio.Event()
    hold = {"on": True}
    inner = answering("j1", ToolCall("s1", "act", '{"n":1}'), ToolCall("s2", "act", '{"n":2}'))

    async def slow(request: ModelRequest) -> ModelResponse:
        if hold["on"] and any(m.role == "tool" for m in request.messages):
            reached.set()
            await asyncio.Event().wait()
        return inner.fn(request)  # type: ignore[return-value]

    j1: Agent[None, str] = Agent(FunctionModel(slow), name="j1", tools=[act_tool(world, "j1")])
    parent = parent_of(world, j1, janitor(world, "j2"))
    paused = await parent.run("go")
    progress = ResumeProgress()
    task = asyncio.ensure_future(
        parent.run_with_deferred_results(paused.messages, RESULTS, progress=progress)
    )
    await reached.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert (progress.paused, progress.answered) == (True, ("p1/s1", "p1/s2"))
    history = progress.messages
    assert history is not None
    assert pending_ids(history) == ["a1", "p2/s1", "p2/s2", "x1"]
    (record,) = [m for m in history if m.tool_call_id == "p1"]
    assert "its calls are answered" in record.content.split("\n", 1)[0]
    hold["on"] = False
    for key in ("p1/zz", "p1/s1/zz"):  # nothing it ran: still unknown
        bad = DeferredResults(approvals={**RESULTS.approvals, key: True}, external=RESULTS.external)
        with pytest.raises(ResumeError, match="unknown tool call"):
            await parent.run_with_deferred_results(history, bad)
    done = await parent.run_with_deferred_results(history, RESULTS)
    assert (done.output, world.acted) == (FINAL, EVERY)


async def test_a_sub_agent_that_paused_again_is_continued_from_its_resolved_history() -> None:
    """j1 answers, then pauses again on s9; the parent's a1 then fails. The hand-back continues
    j1 rather than keep its new pause, and the same resolutions reach what the uninterrupted
    resume reaches: the parent paused on p1/s9."""
    world = nested.World()
    parent = parent_of(world, janitor(world, "j1", again=True), janitor(world, "j2"))
    paused = await parent.run("go")
    oracle = await parent.run_with_deferred_results(paused.messages, RESULTS)
    assert oracle.pending is not None
    assert [p.call_id for p in oracle.pending.calls] == ["p1/s9"]
    world.acted.clear()
    world.fail.add("parent:a1")
    with pytest.raises(RunError) as info:
        await parent.run_with_deferred_results(paused.messages, RESULTS)
    partial = info.value.partial
    assert partial is not None
    assert pending_ids(partial.messages) == ["a1", "x1"]
    world.fail.clear()
    again = await parent.run_with_deferred_results(partial.messages, RESULTS)
    assert again.pending is not None
    assert [p.call_id for p in again.pending.calls] == ["p1/s9"]
    assert world.acted == EVERY
    done = await parent.run_with_deferred_results(again.messages, {"approvals": {"p1/s9": True}})
    assert done.output.startswith("parent: acted a1 | j1: acted s1 | acted s2 | acted s9")
    assert world.acted == {**EVERY, "j1:s9": 1}


async def test_a_refused_nested_resume_leaves_no_progress() -> None:
    world = nested.World()
    parent = parent_of(world, janitor(world, "j1"), janitor(world, "j2"))
    paused = await parent.run("go")
    progress = ResumeProgress()
    with pytest.raises(ResumeError):
        await parent.run_with_deferred_results(
            paused.messages, {"approvals": {"p1/s1": True}}, progress=progress
        )
    assert (progress.messages, progress.answered) == (None, ())


def with_sub_calls(history: list[Message], call_id: str, change: Any) -> list[Message]:
    """`history` with the batch of the sub-agent recorded under `call_id` changed."""
    out = list(history)
    for i, m in enumerate(out):
        if m.role == "tool" and m.tool_call_id == call_id:
            head, body = m.content.split("\n", 1)
            state = json.loads(body)
            inner = loads_history(state["history"])
            j = max(k for k, x in enumerate(inner) if x.tool_calls)
            inner[j] = replace(inner[j], tool_calls=change(inner[j].tool_calls))
            state["history"] = dumps_history(inner)
            out[i] = replace(m, content=f"{head}\n{json.dumps(state)}")
    return out


async def sealed_partial(
    world: nested.World, conversation: str = "conv"
) -> tuple[Agent[None, str], Any, Any]:
    subs = janitor(world, "j1", keyed=True), janitor(world, "j2", keyed=True)
    parent = parent_of(world, *subs, keyed=True)
    paused = await parent.run("go", conversation_id=conversation)
    world.fail.add("j2:s2")
    with pytest.raises(RunError) as info:
        await parent.run_with_deferred_results(bound(paused), RESULTS)
    world.fail.clear()
    assert info.value.partial is not None
    return parent, paused, info.value.partial


async def test_a_sealed_nested_partial_cannot_get_a_sub_call_run_that_nobody_approved() -> None:
    """The rewritten record's pending sub-calls keep their seals: a sub-call injected into it,
    one from another conversation, or that conversation's whole record, is refused."""
    world = nested.World()
    parent, paused, partial = await sealed_partial(world)
    (s2,) = [
        c for m in record_history(partial.messages, "p2") for c in m.tool_calls if c.id == "s2"
    ]
    assert s2.seal
    acted = dict(world.acted)
    injected = with_sub_calls(
        partial.messages, "p2", lambda calls: [*calls, ToolCall("s8", "act", '{"n":8}')]
    )
    with_evil = DeferredResults(
        approvals={**RESULTS.approvals, "p2/s8": True}, external=RESULTS.external
    )
    with pytest.raises(SealError):  # a plain history: the sub-agent's seals refuse it
        await parent.run_with_deferred_results(injected, with_evil)
    with pytest.raises(ResumeError, match="not one of the expected"):
        await parent.run_with_deferred_results(bound(paused, injected, ""), with_evil)
    other = (await sealed_partial(nested.World(), "other-conv"))[2]
    (foreign,) = [
        c for m in record_history(other.messages, "p2") for c in m.tool_calls if c.id == "s2"
    ]
    relabeled = ToolCall("s2", "act", '{"n":99}')
    relabeled = replace(
        relabeled, seal=seal_call(as_seal_keys(nested.KEY), "other-conv/p2", relabeled, "approval")
    )
    for swapped in (foreign, relabeled):
        moved = with_sub_calls(
            partial.messages,
            "p2",
            lambda calls, s=swapped: [s if c.id == "s2" else c for c in calls],
        )
        with pytest.raises(SealError):
            await parent.run_with_deferred_results(moved, RESULTS)
        with pytest.raises(ResumeError, match=r"another seal|arguments differ"):
            await parent.run_with_deferred_results(bound(paused, moved), RESULTS)
    (theirs,) = [m for m in other.messages if m.tool_call_id == "p2"]
    swapped_record = [
        replace(theirs, run_id=m.run_id, conversation_id=m.conversation_id)
        if m.tool_call_id == "p2"
        else m
        for m in partial.messages
    ]
    with pytest.raises(ResumeError, match="another seal"):
        await parent.run_with_deferred_results(bound(paused, swapped_record), RESULTS)
    assert world.acted == acted
    done = await parent.run_with_deferred_results(bound(paused, partial.messages), RESULTS)
    assert (done.output, world.acted) == (FINAL, EVERY)


@pytest.mark.parametrize("forged", ["empty", "ends-with-a-user-message", "no-batch"])
async def test_a_record_that_waits_on_nothing_is_continued_only_as_golem_writes_it(
    forged: str,
) -> None:
    world = nested.World()
    parent = parent_of(world, janitor(world, "j1"), janitor(world, "j2"))
    paused = await parent.run("go")
    j1 = record_history(paused.messages, "p1")
    answers = [
        Message(role="tool", content="done", tool_call_id=c.id, tool_name=c.name)
        for c in j1[-1].tool_calls
    ]
    inner = {
        "empty": [],
        "ends-with-a-user-message": [*j1, *answers, Message(role="user", content="more")],
        "no-batch": [m for m in j1 if m.role == "user"],
    }[forged]
    history = list(paused.messages)
    for i, m in enumerate(history):
        if m.tool_call_id == "p1":
            state = json.dumps({"agent": "j1", "history": dumps_history(inner)})
            history[i] = replace(m, content=f"{m.content.split(chr(10), 1)[0]}\n{state}")
    others = DeferredResults(
        approvals={k: v for k, v in RESULTS.approvals.items() if not k.startswith("p1/")},
        external=RESULTS.external,
    )
    with pytest.raises(ResumeError, match="does not end with its answered batch"):
        await parent.run_with_deferred_results(history, others)
    with pytest.raises(ResumeError):  # its calls' resolutions name no call it has either way
        await parent.run_with_deferred_results(history, RESULTS)
    assert world.acted == {}


async def test_a_tool_result_no_history_can_hold_is_handed_back_as_the_codec_reads_it() -> None:
    """A sub-agent's call returned a lone surrogate: the rewritten record holds U+FFFD in its
    place — the call is answered, never run again."""
    world = nested.World()

    async def act(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, "act?")
        return world.act("j1", ctx) + " \ud800"

    batch = ToolCall("s1", "act", '{"n":1}'), ToolCall("s2", "act", '{"n":2}')
    j1: Agent[None, str] = Agent(
        answering("j1", *batch), name="j1", tools=[Tool("act", "Act.", OBJ, act)]
    )
    parent = parent_of(world, j1, own=False)
    paused = await parent.run("go")
    world.fail.add("j1:s2")
    results = {"approvals": {"p1/s1": True, "p1/s2": True}}
    with pytest.raises(RunError) as info:
        await parent.run_with_deferred_results(paused.messages, results)
    partial = info.value.partial
    assert partial is not None
    inner = record_history(partial.messages, "p1")
    assert [(m.tool_call_id, m.content) for m in inner if m.role == "tool"] == [
        ("s1", "acted s1 \ufffd")
    ]
    world.fail.clear()
    done = await parent.run_with_deferred_results(partial.messages, results)
    assert done.output == "parent: j1: acted s1 \ufffd | acted s2 \ud800"
    assert world.acted == {"j1:s1": 1, "j1:s2": 1}
