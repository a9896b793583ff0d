"""A failed or cancelled resume hands back its progress (ADR 0071).

An approved re-run that fails raises the `RunError` it always did, with `partial` holding the
paused history in which the approved calls that ran are answered; a `ResumeProgress` passed
as `progress=` holds the same history when the caller's task is cancelled or
`before_approved` raises. Going on from it with the original resolutions (and `expected=`,
and the conversation) never runs an approved call twice — counted here without idempotency
keys. Sealed histories still verify on the partial, and nothing in it can get a call run
that nobody approved.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
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
from golem._cancel import EXACT_CANCELLING
from golem.model import ModelRequest, ModelResponse
from golem.seal import as_seal_keys, seal_call
from golem.testing import FunctionModel
from golem.tool import Canceled, DeferKind, Deferred, call_approved

pytestmark = pytest.mark.version

OBJ: dict[str, Any] = {"type": "object"}
KEY = b"k" * 32


class World:
    """Side effects by call ID — no idempotency key involved."""

    def __init__(self) -> None:
        self.acted: dict[str, int] = {}
        self.fail: set[str] = set()
        self.cancel: set[str] = set()

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
        return world.act(ctx)

    def act_sync(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, "act?")
        return world.act(ctx)

    def job(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        raise Deferred(DeferKind.EXTERNAL, "job")

    return [
        Tool("act", "Act.", OBJ, act_sync if sync else act),
        Tool("job", "Job.", OBJ, job),
    ]


CALLS = [
    ToolCall("a1", "act", '{"n":1}'),
    ToolCall("d1", "act", '{"n":2}'),
    ToolCall("a2", "act", '{"n":3}'),
    ToolCall("x1", "job", "{}"),
    ToolCall("a3", "act", '{"n":4}'),
]
RESULTS = DeferredResults(
    approvals={"a1": True, "d1": Approval(False, "no"), "a2": True, "a3": True},
    external={"x1": "job done"},
)


def answer(request: ModelRequest) -> ModelResponse:
    if any(m.role == "tool" for m in request.messages):
        answered = sorted(m.tool_call_id for m in request.messages if m.role == "tool")
        return ModelResponse(
            Message(role="assistant", content=",".join(answered)), finish_reason="stop"
        )
    return ModelResponse(
        Message(role="assistant", tool_calls=list(CALLS)), finish_reason="tool_call"
    )


def agent_for(world: World, *, sync: bool = False, keyed: bool = False) -> Agent[None, str]:
    return Agent(
        FunctionModel(answer), tools=tools(world, sync=sync), seal_key=KEY if keyed else None
    )


def pending_ids(history: list[Message]) -> list[str]:
    answered = {m.tool_call_id for m in history if m.role == "tool"}
    return [
        c.id for m in history if m.role == "assistant" for c in m.tool_calls if c.id not in answered
    ]


FINAL = "a1,a2,a3,d1,x1"


async def test_a_failing_rerun_hands_back_the_reruns_that_completed() -> None:
    world = World()
    agent = agent_for(world)
    paused = await agent.run("go")
    assert paused.pending is not None
    world.fail.add("a2")
    with pytest.raises(RunError) as info:
        await agent.run_with_deferred_results(paused.messages, RESULTS)
    err = info.value
    assert err.stage is Stage.TOOL
    assert isinstance(err.__cause__, ToolError)
    assert err.__cause__.call_id == "a2"
    partial = err.partial
    assert partial is not None
    # a1 ran and is answered (as a resume writes it); everything else is still pending
    assert pending_ids(partial.messages) == ["d1", "a2", "x1", "a3"]
    (a1,) = [m for m in partial.messages if m.role == "tool"]
    assert (a1.tool_call_id, a1.content, a1.run_id) == ("a1", "acted a1", partial.run_id)
    assert partial.tool_calls == 2  # a1 and the failing a2
    assert partial.is_paused
    assert partial.pending is not None
    assert [p.call_id for p in partial.pending.approvals] == ["d1", "a2", "a3"]
    assert [(p.call_id, p.kind) for p in partial.pending.external] == [("x1", DeferKind.EXTERNAL)]
    assert partial.messages[: len(paused.messages)] == paused.messages
    # the same resolutions again: a1 is skipped, the rest resolves
    world.fail.clear()
    done = await agent.run_with_deferred_results(partial.messages, RESULTS)
    assert done.output == FINAL
    assert world.acted == {"a1": 1, "a2": 1, "a3": 1}
    assert done.tool_calls == 2


@pytest.mark.parametrize("how", ["canceled", "deferred"])
async def test_every_rerun_failure_stage_hands_back_progress(how: str) -> None:
    world = World()

    async def odd(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        if not call_approved() or how == "deferred":
            raise Deferred(DeferKind.APPROVAL, "again")
        raise Canceled("stop")

    model = FunctionModel(
        lambda r: ModelResponse(
            Message(role="assistant", tool_calls=[CALLS[0], ToolCall("o1", "odd", "{}")]),
            finish_reason="tool_call",
        )
    )
    agent: Agent[None, str] = Agent(model, tools=[*tools(world), Tool("odd", "O.", OBJ, odd)])
    paused = await agent.run("go")
    with pytest.raises(RunError) as info:
        await agent.run_with_deferred_results(
            paused.messages, {"approvals": {"a1": True, "o1": True}}
        )
    assert info.value.stage is (Stage.CANCELED if how == "canceled" else Stage.TOOL)
    assert info.value.partial is not None
    assert pending_ids(info.value.partial.messages) == ["o1"]
    assert world.acted == {"a1": 1}


async def test_a_failure_before_any_rerun_completed_hands_back_the_paused_history() -> None:
    world = World()
    agent = agent_for(world)
    paused = await agent.run("go")
    world.fail.add("a1")
    with pytest.raises(RunError) as info:
        await agent.run_with_deferred_results(paused.messages, RESULTS)
    assert info.value.partial is not None
    assert info.value.partial.messages == paused.messages


async def test_a_sealed_partial_resumes_with_the_same_expected_and_conversation() -> None:
    world = World()
    agent = agent_for(world, keyed=True)
    paused = await agent.run("go", conversation_id="conv")
    assert paused.pending is not None
    world.fail.add("a3")
    edited = DeferredResults(
        approvals={**RESULTS.approvals, "a2": Approval(True, args={"n": 30})},
        external=RESULTS.external,
    )
    with pytest.raises(RunError) as info:
        await agent.run_with_deferred_results(
            paused.messages, edited, conversation_id="conv", expected=paused.pending
        )
    partial = info.value.partial
    assert partial is not None
    assert pending_ids(partial.messages) == ["d1", "x1", "a3"]
    # the edited call that ran shows the arguments that ran, re-sealed
    ran = {c.id: c for c in partial.messages[-3].tool_calls}
    assert ran["a2"].args == '{"n":30}'
    assert ran["a2"].seal
    assert ran["a2"].seal != paused.messages[-1].tool_calls[2].seal
    world.fail.clear()
    stored = dumps_history(partial.messages)
    done = await agent.run_with_deferred_results(
        loads_history(stored), edited, conversation_id="conv", expected=paused.pending
    )
    assert done.output == FINAL
    assert world.acted == {"a1": 1, "a2": 1, "a3": 1}


async def test_a_partial_cannot_get_a_call_run_that_nobody_approved() -> None:
    """The partial's pending calls keep their seals: an injected call and a call relabeled
    from another conversation are refused before anything runs, with or without
    expected=."""
    world = World()
    agent = agent_for(world, keyed=True)
    paused = await agent.run("go", conversation_id="conv")
    assert paused.pending is not None
    world.fail.add("a2")
    with pytest.raises(RunError) as info:
        await agent.run_with_deferred_results(paused.messages, RESULTS, conversation_id="conv")
    partial = info.value.partial
    assert partial is not None
    world.fail.clear()
    acted = dict(world.acted)
    batch = partial.messages[-2]  # the paused batch, then a1's answer
    assert batch.role == "assistant"

    def with_calls(calls: list[ToolCall]) -> list[Message]:
        out = list(partial.messages)
        out[-2] = Message(
            role="assistant",
            tool_calls=calls,
            run_id=batch.run_id,
            conversation_id=batch.conversation_id,
        )
        return out

    injected = with_calls([*batch.tool_calls, ToolCall("evil", "act", '{"n":9}')])
    with_evil = DeferredResults(
        approvals={**RESULTS.approvals, "evil": True}, external=RESULTS.external
    )
    with pytest.raises(SealError):
        await agent.run_with_deferred_results(injected, with_evil, conversation_id="conv")
    keys = as_seal_keys(KEY)
    other = seal_call(keys, "other-conv", ToolCall("a2", "act", '{"n":99}'), "approval")
    moved = with_calls(
        [
            ToolCall(c.id, c.name, '{"n":99}', c.signature, other) if c.id == "a2" else c
            for c in batch.tool_calls
        ]
    )
    with pytest.raises(SealError):
        await agent.run_with_deferred_results(moved, RESULTS, conversation_id="conv")
    with pytest.raises(ResumeError, match=r"has no seal|not one of the expected"):
        await agent.run_with_deferred_results(injected, with_evil, expected=paused.pending)
    assert world.acted == acted


async def test_cancelled_before_the_next_rerun_hands_back_progress() -> None:
    world = World()
    agent = agent_for(world)
    paused = await agent.run("go")
    progress = ResumeProgress()
    assert progress.messages is None
    reached = asyncio.Event()
    hold = asyncio.Event()

    async def guard(call: ToolCall) -> None:
        if call.id == "a3":
            reached.set()
            await hold.wait()

    task = asyncio.ensure_future(
        agent.run_with_deferred_results(
            paused.messages, RESULTS, before_approved=guard, progress=progress
        )
    )
    await reached.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert progress.paused
    assert progress.answered == ("a1", "a2")
    assert progress.messages is not None
    assert pending_ids(progress.messages) == ["d1", "x1", "a3"]
    done = await agent.run_with_deferred_results(progress.messages, RESULTS)
    assert done.output == FINAL
    assert world.acted == {"a1": 1, "a2": 1, "a3": 1}


async def test_a_sync_tool_that_finished_under_the_cancellation_is_answered() -> None:
    """golem waits for a cancelled sync tool's thread (ADR 0067); the thread returned, so
    the call acted: it is answered in the progress, not run again."""
    world = World()
    entered = threading.Event()
    release = threading.Event()

    def act_sync(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, "act?")
        if ctx.call_id == "a2":
            entered.set()
            release.wait(10)
        return world.act(ctx)

    agent: Agent[None, str] = Agent(
        FunctionModel(answer), tools=[Tool("act", "Act.", OBJ, act_sync), tools(world)[1]]
    )
    paused = await agent.run("go")
    progress = ResumeProgress()
    task = asyncio.ensure_future(
        agent.run_with_deferred_results(paused.messages, RESULTS, progress=progress)
    )
    await asyncio.to_thread(entered.wait, 10)
    task.cancel()
    await asyncio.sleep(0)
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert progress.answered == ("a1", "a2")
    assert progress.messages is not None
    done = await agent.run_with_deferred_results(progress.messages, RESULTS)
    assert done.output == FINAL
    assert world.acted == {"a1": 1, "a2": 1, "a3": 1}


async def test_before_approved_raising_leaves_its_progress() -> None:
    world = World()
    agent = agent_for(world)
    paused = await agent.run("go")
    progress = ResumeProgress()

    class Fenced(Exception):
        pass

    async def guard(call: ToolCall) -> None:
        if call.id == "a2":
            raise Fenced

    with pytest.raises(Fenced):
        await agent.run_with_deferred_results(
            paused.messages, RESULTS, before_approved=guard, progress=progress
        )
    assert progress.answered == ("a1",)
    assert progress.messages is not None
    assert pending_ids(progress.messages) == ["d1", "a2", "x1", "a3"]


async def test_progress_after_the_merge_is_the_resolved_history() -> None:
    """Cancelled once every resolution is merged (during the model call): `paused` is false
    and the caller goes on with `run(history=...)`."""
    world = World()
    reached = asyncio.Event()
    calls = 0

    async def slow(request: ModelRequest) -> ModelResponse:
        nonlocal calls
        calls += 1
        if calls == 2:
            reached.set()
            await asyncio.Event().wait()
        return answer(request)

    agent: Agent[None, str] = Agent(FunctionModel(slow), tools=tools(world))
    paused = await agent.run("go")
    progress = ResumeProgress()
    task = asyncio.ensure_future(
        agent.run_with_deferred_results(paused.messages, RESULTS, progress=progress)
    )
    await reached.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not progress.paused
    assert progress.messages is not None
    assert pending_ids(progress.messages) == []
    done = await agent.run("", history=progress.messages)
    assert done.output == FINAL
    assert world.acted == {"a1": 1, "a2": 1, "a3": 1}
    assert "answered=('a1', 'a2', 'a3')" in repr(progress)


async def test_a_streamed_resume_hands_back_the_same_partial() -> None:
    world = World()

    async def stream_fn(request: ModelRequest) -> Any:
        yield answer(request)

    agent: Agent[None, str] = Agent(FunctionModel(answer, stream=stream_fn), tools=tools(world))
    paused = await agent.run("go")
    world.fail.add("a3")
    progress = ResumeProgress()
    with pytest.raises(RunError) as info:
        async with agent.run_stream_with_deferred_results(
            paused.messages, RESULTS, progress=progress
        ) as stream:
            async for _ in stream:
                pass
    assert info.value.partial is not None
    assert pending_ids(info.value.partial.messages) == ["d1", "x1", "a3"]
    assert progress.messages == info.value.partial.messages


def test_the_sync_resume_takes_progress() -> None:
    world = World()
    agent = agent_for(world)
    paused = agent.run_sync("go")
    world.fail.add("a2")
    progress = ResumeProgress()
    with pytest.raises(RunError):
        agent.run_with_deferred_results_sync(paused.messages, RESULTS, progress=progress)
    assert progress.answered == ("a1",)


async def test_a_refused_resume_leaves_no_progress() -> None:
    world = World()
    agent = agent_for(world)
    paused = await agent.run("go")
    progress = ResumeProgress()
    with pytest.raises(ResumeError):
        await agent.run_with_deferred_results(
            paused.messages, {"approvals": {"a1": True}}, progress=progress
        )
    assert progress.messages is None
    assert progress.answered == ()
    assert json.loads(dumps_history(paused.messages))  # untouched


@pytest.mark.skipif(not EXACT_CANCELLING, reason="swallowed cancellations are seen from 3.13 on")
async def test_a_tool_that_swallowed_the_cancellation_and_returned_is_answered() -> None:
    """ADR 0067 raises `CancelledError` after a tool that swallowed the caller's
    cancellation returns; the call acted and returned, so it is answered in the progress."""
    world = World()
    entered = asyncio.Event()

    async def act(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, "act?")
        if ctx.call_id == "a2":
            entered.set()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.Event().wait()
        return world.act(ctx)

    agent: Agent[None, str] = Agent(
        FunctionModel(answer), tools=[Tool("act", "Act.", OBJ, act), tools(world)[1]]
    )
    paused = await agent.run("go")
    progress = ResumeProgress()
    task = asyncio.ensure_future(
        agent.run_with_deferred_results(paused.messages, RESULTS, progress=progress)
    )
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert progress.answered == ("a1", "a2")
    assert progress.messages is not None
    done = await agent.run_with_deferred_results(progress.messages, RESULTS)
    assert done.output == FINAL
    assert world.acted == {"a1": 1, "a2": 1, "a3": 1}


async def test_a_progress_reused_for_another_resume_starts_over() -> None:
    world = World()
    agent = agent_for(world)
    paused = await agent.run("go")
    progress = ResumeProgress()
    world.fail.add("a2")
    with pytest.raises(RunError):
        await agent.run_with_deferred_results(paused.messages, RESULTS, progress=progress)
    assert progress.answered == ("a1",)
    first = progress.messages
    assert first is not None
    world.fail.clear()
    done = await agent.run_with_deferred_results(first, RESULTS, progress=progress)
    assert done.output == FINAL
    assert progress.answered == ("a2", "a3")
    assert not progress.paused
    assert world.acted == {"a1": 1, "a2": 1, "a3": 1}


async def test_progress_whose_every_pending_call_ran_is_not_paused() -> None:
    """Every pending call approved, the last one's thread finishing under the cancellation:
    nothing is pending any more although the resume never merged, so `paused` is false and
    the caller goes on with `run` (found by the exactly-once property: a resume of it was
    refused, "no pending deferred tool calls")."""
    world = World()
    entered = threading.Event()
    release = threading.Event()

    def act_sync(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, "act?")
        if ctx.call_id == "a2":
            entered.set()
            release.wait(10)
        return world.act(ctx)

    def two(request: ModelRequest) -> ModelResponse:
        if any(m.role == "tool" for m in request.messages):
            return ModelResponse(Message(role="assistant", content="ok"), finish_reason="stop")
        return ModelResponse(
            Message(role="assistant", tool_calls=[CALLS[0], CALLS[2]]), finish_reason="tool_call"
        )

    agent: Agent[None, str] = Agent(FunctionModel(two), tools=[Tool("act", "A.", OBJ, act_sync)])
    paused = await agent.run("go")
    progress = ResumeProgress()
    both = {"approvals": {"a1": True, "a2": True}}
    task = asyncio.ensure_future(
        agent.run_with_deferred_results(paused.messages, both, progress=progress)
    )
    await asyncio.to_thread(entered.wait, 10)
    task.cancel()
    await asyncio.sleep(0)
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert progress.answered == ("a1", "a2")
    assert not progress.paused
    assert progress.messages is not None
    assert pending_ids(progress.messages) == []
    done = await agent.run("", history=progress.messages)
    assert done.output == "ok"
    assert world.acted == {"a1": 1, "a2": 1}


async def test_a_run_error_raised_by_before_approved_propagates_unchanged() -> None:
    """Only a failing re-run's `RunError` gets the progress as its partial: the hook's own
    exception, a `RunError` included, propagates as it was raised."""
    world = World()
    agent = agent_for(world)
    paused = await agent.run("go")
    own = RunError(Stage.TOOL, RuntimeError("hook"))
    progress = ResumeProgress()

    async def guard(call: ToolCall) -> None:
        if call.id == "a2":
            raise own

    with pytest.raises(RunError) as info:
        await agent.run_with_deferred_results(
            paused.messages, RESULTS, before_approved=guard, progress=progress
        )
    assert info.value is own
    assert own.partial is None
    assert progress.answered == ("a1",)
