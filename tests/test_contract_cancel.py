"""Caller cancellation against the run loop, resume and streams (ADR 0067).

The caller's cancellation always ends a run as `asyncio.CancelledError`: never swallowed,
never turned into a result, a tool error or a next step, and nothing of the run still runs
when it arrives. Found by this round, each failing before its fix:

- a tool (or model, or `before_approved` hook) that caught the `CancelledError` and
  returned turned the caller's cancellation into the run's next step: the run went on
  and returned a result;
- in a parallel group, a tool raising `CancelledError` itself ended the run while the
  group's other calls kept running as orphan tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
from typing import Any

import pytest

from golem import Agent, Approval, DeferredResults, ToolCall
from golem.messages import Message
from golem.model import ModelRequest, ModelResponse
from golem.testing import FunctionModel, ScriptedModel
from golem.tool import DeferKind, Deferred, RunContext, Tool, call_approved

EXACT_CANCELLING = sys.version_info >= (3, 13)  # a swallowed cancellation is seen from 3.13 on

pytestmark = pytest.mark.version

exact = pytest.mark.skipif(
    not EXACT_CANCELLING,
    reason="before Python 3.13 TaskGroup leaves cancellations counted: the check is off",
)

OBJ: dict[str, Any] = {"type": "object"}


def calls(*items: tuple[str, str]) -> ModelResponse:
    return ModelResponse(
        message=Message(
            role="assistant", tool_calls=[ToolCall(cid, name, "{}") for cid, name in items]
        ),
        finish_reason="tool_call",
    )


def others() -> set[asyncio.Task[Any]]:
    current = asyncio.current_task()
    return {t for t in asyncio.all_tasks() if t is not current}


# --------------------------------------------------------------------------- swallowed


def swallowing(started: asyncio.Event, ran: list[str]) -> Tool:
    async def swallow(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        ran.append(ctx.call_id)
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            return "swallowed"  # a tool that eats the caller's cancellation
        return "never"

    return Tool("swallow", "s", OBJ, swallow)


@exact
@pytest.mark.parametrize("timeout", [None, 60.0])
async def test_a_tool_swallowing_the_cancellation_does_not_turn_it_into_a_result(
    timeout: float | None,
) -> None:
    started, ran = asyncio.Event(), []
    model = ScriptedModel(calls(("c1", "swallow"), ("c2", "swallow")), "final")
    agent = Agent(model, tools=[swallowing(started, ran)], tool_timeout=timeout)
    task = asyncio.create_task(agent.run("go"))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert ran == ["c1"]  # the batch's next call never started
    assert model.remaining == 1  # and no model call followed


@exact
async def test_a_model_swallowing_the_cancellation_is_not_retried_nor_answered() -> None:
    started = asyncio.Event()
    attempts = 0

    async def swallow(request: ModelRequest) -> ModelResponse | str:
        nonlocal attempts
        attempts += 1
        started.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.Event().wait()
        raise ConnectionError("gone")  # as a transport would, after eating the cancel

    agent: Agent[None, str] = Agent(FunctionModel(swallow), max_attempts=3)
    task = asyncio.create_task(agent.run("go"))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert attempts == 1


def two_approvals(ran: list[str], started: asyncio.Event) -> tuple[Agent[None, str], Any]:
    async def act(ctx: RunContext[None], args: dict[str, Any]) -> str:
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, "?")
        ran.append(ctx.call_id)
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            return "swallowed"
        return "never"

    model = ScriptedModel(calls(("a1", "act"), ("a2", "act")), "final")
    return Agent(model, tools=[Tool("act", "a", OBJ, act)]), model


@exact
async def test_an_approved_re_run_swallowing_the_cancellation_stops_the_resume() -> None:
    ran: list[str] = []
    started = asyncio.Event()
    agent, model = two_approvals(ran, started)
    paused = await agent.run("go")
    task = asyncio.create_task(
        agent.run_with_deferred_results(
            paused.messages, DeferredResults(approvals={"a1": True, "a2": True})
        )
    )
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert ran == ["a1"]  # the second approved call never ran
    assert model.remaining == 1


@exact
async def test_a_before_approved_hook_swallowing_the_cancellation_runs_nothing() -> None:
    ran: list[str] = []
    agent, _model = two_approvals(ran, asyncio.Event())
    paused = await agent.run("go")
    entered = asyncio.Event()

    async def guard(call: ToolCall) -> None:
        entered.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.Event().wait()

    task = asyncio.create_task(
        agent.run_with_deferred_results(
            paused.messages,
            DeferredResults(approvals={"a1": Approval(True), "a2": Approval(True)}),
            before_approved=guard,
        )
    )
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert ran == []


# --------------------------------------------------------------------------- parallel group


async def test_a_tool_raising_cancelled_error_in_a_parallel_group_ends_its_siblings_first() -> None:
    started, ended = asyncio.Event(), []

    async def hang(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            ended.append(ctx.call_id)
        return "never"

    async def cancels_itself(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        await started.wait()
        raise asyncio.CancelledError

    agent = Agent(
        ScriptedModel(calls(("c1", "hang"), ("c2", "self")), "final"),
        tools=[Tool("hang", "h", OBJ, hang), Tool("self", "s", OBJ, cancels_itself)],
        parallel_tool_calls=True,
    )
    before = others()
    with pytest.raises(asyncio.CancelledError):
        await agent.run("go")
    assert ended == ["c1"]  # ended before the run's CancelledError reached the caller
    assert others() == before


# --------------------------------------------------------------------------- sync tools


@pytest.mark.parametrize("where", ["run", "parallel", "re-run"])
async def test_a_cancelled_run_ends_only_once_its_sync_tools_thread_has(where: str) -> None:
    started, release = threading.Event(), threading.Event()
    finished: list[str] = []

    def block(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        if where == "re-run" and not call_approved():
            raise Deferred(DeferKind.APPROVAL, "?")
        started.set()
        release.wait(30)
        finished.append(ctx.call_id)
        return "done"

    model = ScriptedModel(calls(("c1", "block"), ("c2", "fast")), "final")
    agent = Agent(
        model,
        tools=[Tool("block", "b", OBJ, block), Tool("fast", "f", OBJ, lambda c, a: "ok")],
        parallel_tool_calls=where == "parallel",
    )
    if where == "re-run":
        paused = await agent.run("go")
        run = agent.run_with_deferred_results(paused.messages, {"approvals": {"c1": True}})
    else:
        run = agent.run("go")
    task = asyncio.create_task(run)
    try:
        assert await asyncio.to_thread(started.wait, 30)
        task.cancel()
        for _ in range(50):  # every chance to end while the thread still runs
            await asyncio.sleep(0)
        assert not task.done()
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert finished == ["c1"]  # the thread ended before the caller saw the cancellation
    finally:
        release.set()


@pytest.mark.parametrize("how", ["run", "parallel", "stream"])
async def test_cancelling_twice_still_ends_only_once_the_thread_has(how: str) -> None:
    started, release = threading.Event(), threading.Event()
    finished: list[str] = []

    def block(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        started.set()
        release.wait(30)
        finished.append(ctx.call_id)
        return "done"

    async def hang(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        await asyncio.Event().wait()
        return "never"

    agent = Agent(
        ScriptedModel(calls(("c1", "block"), ("c2", "hang")), "final"),
        tools=[Tool("block", "b", OBJ, block), Tool("hang", "h", OBJ, hang)],
        parallel_tool_calls=how == "parallel",
    )

    async def consume() -> None:
        async with agent.run_stream("go") as stream:
            async for _ in stream:
                pass

    before = others()
    task = asyncio.create_task(consume() if how == "stream" else agent.run("go"))
    try:
        assert await asyncio.to_thread(started.wait, 30)
        for _ in range(2):  # a second cancellation while the first is being honoured
            task.cancel()
            for _ in range(50):
                await asyncio.sleep(0)
            assert not task.done()
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert finished == ["c1"]
        assert others() == before
    finally:
        release.set()


@exact
async def test_instructions_swallowing_the_cancellation_send_no_request() -> None:
    started = asyncio.Event()

    async def instructions(ctx: RunContext[None]) -> str:
        started.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.Event().wait()
        return "Be brief."

    model = ScriptedModel("never")
    agent: Agent[None, str] = Agent(model, instructions=instructions)
    task = asyncio.create_task(agent.run("go"))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert model.request_count == 0


async def test_a_tool_whose_task_group_failed_and_was_handled_goes_on() -> None:
    """No false alarm: `TaskGroup` cancels its own body when a child fails (and, before
    Python 3.13, leaves that request counted); a tool that handles the group's error and
    returns is not a swallowed caller cancellation."""

    async def fan_out(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        async def bad() -> None:
            raise ValueError("one lookup failed")

        answer = "never"
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(bad())
                await asyncio.Event().wait()  # the group cancels this body
        except* ValueError:
            answer = "partial answer"
        return answer

    model = ScriptedModel(calls(("c1", "fan"), ("c2", "fan")), "final")
    agent = Agent(model, tools=[Tool("fan", "f", OBJ, fan_out)])
    result = await agent.run("go")
    assert result.output == "final"
    assert [m.content for m in result.messages if m.role == "tool"] == ["partial answer"] * 2
