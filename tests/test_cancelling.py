"""Cancellation and tool timeouts against the run loop, a resume and their streams (ADR 0067,
0071, 0076): the caller's cancellation always ends a run as `asyncio.CancelledError`, never
swallowed, never a result, a tool error or a next step, and nothing of the run still runs
when it arrives (a tool, model, hook or instructions that catch it; a parallel group; sync
tools' threads); then, checked by Hypothesis at ANY await point:
Every model call, tool call (deferring pass and approved re-run, before and after its side
effect), `before_approved` hook and sub-agent step of a drawn scenario blocks on a gate the
test releases one at a time, in arrival order; Hypothesis picks the gate at which, instead,
the caller's task is cancelled (the code at the gate may swallow the cancellation, from Python 3.13 on), or the
tool at that gate times out. Nothing depends on the machine's speed: a timed-out tool's gate
is never released, so its (tiny) timeout is what ends it.

Invariants, against an oracle (the same scenario with every gate released):

- a cancelled `run` / `resume` / stream consumer raises `CancelledError` — never a result,
  never a `RunError` — and when it does, no task of the run and no gated code (model, tool,
  hook, sub-agent, thread) is still running;
- a timed-out tool fails the run at stage `tool` with a `ToolTimeout`;
- a stream consumer gets a prefix of the oracle's items, then the `CancelledError` (or the
  `RunError`); `stream.result` is unavailable;
- the caller then goes on from the last history it was handed — the paused history (a
  `CancelledError` or a `partial=None` failure hands nothing newer), or the failure's
  `partial` (a paused one, after a failing re-run, is resumed with the same resolutions) —
  and the run reaches the oracle's answer with every approved call's effect applied exactly
  once per idempotency key (the key is the same on every attempt), and an approved call
  answered in a `partial` never runs again.

The last property (ADR 0071, 0076) drops the key: for any mix of approved, denied and
external calls of the parent and of up to two paused sub-agents (one maybe a manager with a
janitor), re-run failures and repeated interruptions, going on each time from
`RunError.partial` or `ResumeProgress.messages` executes every approved call exactly once,
counted by namespaced call ID.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from golem import (
    Agent,
    Approval,
    DeferredResults,
    PausedRun,
    ResumeProgress,
    RunError,
    RunEvent,
    Stage,
    ToolCall,
    ToolTimeout,
)
from golem.messages import Message, dumps_history, loads_history
from golem.model import Delta, ModelRequest, ModelResponse
from golem.testing import FunctionModel, ScriptedModel, replay_as_deltas
from golem.tool import Canceled, DeferKind, Deferred, RunContext, Tool, call_approved
from tests.support.nested import pending_ids

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
            progress=ResumeProgress(before_approved=guard),
        )
    )
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert ran == []


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


@pytest.mark.parametrize(
    ("where", "times"),
    [("run", 1), ("parallel", 1), ("re-run", 1), ("run", 2), ("parallel", 2), ("stream", 2)],
)
async def test_a_cancelled_run_ends_only_once_its_sync_tools_thread_has(
    where: str, times: int
) -> None:
    """Cancelled (`times`: again while the first is honoured) while a sync tool's thread
    runs, the run ends only once the thread has, leaving no task behind."""
    started, release = threading.Event(), threading.Event()
    finished: list[str] = []

    def block(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        if where == "re-run" and not call_approved():
            raise Deferred(DeferKind.APPROVAL, "?")
        started.set()
        release.wait(30)
        finished.append(ctx.call_id)
        return "done"

    async def hang(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        await asyncio.Event().wait()
        return "never"

    second = (
        Tool("fast", "f", OBJ, lambda c, a: "ok")
        if where == "re-run"
        else Tool("hang", "h", OBJ, hang)
    )
    agent = Agent(
        ScriptedModel(calls(("c1", "block"), ("c2", second.name)), "final"),
        tools=[Tool("block", "b", OBJ, block), second],
        parallel_tool_calls=where == "parallel",
    )

    async def consume() -> None:
        async with agent.run_stream("go") as stream:
            async for _ in stream:
                pass

    if where == "re-run":
        paused = await agent.run("go")
        run = agent.run_with_deferred_results(paused.messages, {"approvals": {"c1": True}})
    else:
        run = consume() if where == "stream" else agent.run("go")
    before = others()
    task = asyncio.create_task(run)
    try:
        assert await asyncio.to_thread(started.wait, 30)
        for _ in range(times):
            task.cancel()
            for _ in range(50):  # every chance to end while the thread still runs
                await asyncio.sleep(0)
            assert not task.done()
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert finished == ["c1"]  # the thread ended before the caller saw the cancellation
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


EXAMPLES = int(os.environ.get("GOLEM_CANCEL_EXAMPLES", "150"))


class Never(Exception):
    """A gate that must not release (a timed-out tool's)."""


@dataclass
class Gates:
    """Every await point of a scenario: `point(name)` blocks until the driver decides."""

    loop: asyncio.AbstractEventLoop
    arrivals: asyncio.Queue[tuple[str, asyncio.Future[None]]] = field(default_factory=asyncio.Queue)
    names: list[str] = field(default_factory=list)
    inside: int = 0
    swallow: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    async def point(self, name: str) -> None:
        waiter: asyncio.Future[None] = self.loop.create_future()
        with self.lock:
            self.inside += 1
        self.names.append(name)
        self.arrivals.put_nowait((name, waiter))
        try:
            await waiter
        except asyncio.CancelledError:
            if not self.swallow:
                raise
        finally:
            with self.lock:
                self.inside -= 1

    def point_from_thread(self, name: str) -> None:
        asyncio.run_coroutine_threadsafe(self.point(name), self.loop).result()


@dataclass
class Ledger:
    """The world the tools act on: effects keyed by idempotency key, raw executions by call."""

    applied: dict[str, int] = field(default_factory=dict)
    keys: dict[str, set[str]] = field(default_factory=dict)
    executed: dict[str, int] = field(default_factory=dict)

    def act(self, ctx: RunContext[Any], name: str = "") -> None:
        name = name or ctx.call_id
        self.executed[name] = self.executed.get(name, 0) + 1
        self.keys.setdefault(name, set()).add(ctx.idempotency_key)
        if ctx.idempotency_key not in self.applied:  # an idempotent effect, as tools should
            self.applied[ctx.idempotency_key] = 1


@dataclass(frozen=True)
class Scenario:
    parallel: bool
    nested: bool
    sync_look: bool
    timeouts: bool
    stream: bool


def answered(request: ModelRequest) -> set[str]:
    return {m.tool_call_id for m in request.messages if m.role == "tool"}


def batch(*items: tuple[str, str, dict[str, Any]]) -> ModelResponse:
    return ModelResponse(
        Message(
            role="assistant",
            tool_calls=[ToolCall(cid, name, json.dumps(args)) for cid, name, args in items],
        ),
        finish_reason="tool_call",
    )


class GatedModel:
    """A stateless model: its answer follows from what the request has answered; every
    call blocks on a gate before answering (and, streamed, again between its deltas)."""

    def __init__(
        self, gates: Gates, name: str, answer: Callable[[ModelRequest], ModelResponse]
    ) -> None:
        self.gates, self.name, self.answer = gates, name, answer

    def _gate(self, request: ModelRequest, where: str = "") -> Awaitable[None]:
        turns = sum(1 for m in request.messages if m.role == "assistant")
        return self.gates.point(f"model:{self.name}:{turns}{where}")

    async def generate(self, request: ModelRequest) -> ModelResponse:
        await self._gate(request)
        return self.answer(request)

    async def generate_stream(self, request: ModelRequest) -> AsyncIterator[Delta | ModelResponse]:
        await self._gate(request)
        response = self.answer(request)
        for i, delta in enumerate(replay_as_deltas(response)):
            if i == 1:
                await self._gate(request, ":mid")
            yield delta
        yield response


def build(s: Scenario, gates: Gates, ledger: Ledger, timeout_tool: str | None) -> Agent[None, str]:
    """The parent (and its sub-agent) of scenario `s`; `timeout_tool` gets a tiny timeout."""

    def tool_timeout(name: str) -> float | None:
        if timeout_tool == name:
            return 0.001
        return 3600.0 if s.timeouts else None

    def act_tool(name: str) -> Tool:
        async def act(ctx: RunContext[None], args: dict[str, Any]) -> str:
            if not call_approved():
                await gates.point(f"defer:{ctx.call_id}")
                raise Deferred(DeferKind.APPROVAL, "act?")
            await gates.point(f"act:{ctx.call_id}")
            ledger.act(ctx)
            await gates.point(f"acted:{ctx.call_id}")
            return "acted"

        return Tool(name, "Act (needs approval).", OBJ, act, timeout=tool_timeout(name))

    def look_tool(name: str) -> Tool:
        if s.sync_look:

            def look_sync(ctx: RunContext[None], args: dict[str, Any]) -> str:
                gates.point_from_thread(f"look:{ctx.call_id}")
                return "seen"

            return Tool(name, "Look.", OBJ, look_sync, timeout=tool_timeout(name))

        async def look(ctx: RunContext[None], args: dict[str, Any]) -> str:
            await gates.point(f"look:{ctx.call_id}")
            return "seen"

        return Tool(name, "Look.", OBJ, look, timeout=tool_timeout(name))

    def parent_answer(request: ModelRequest) -> ModelResponse:
        done = answered(request)
        if "c1" in done:
            return ModelResponse(Message(role="assistant", content="done"), finish_reason="stop")
        if "a1" in done:
            return batch(("c1", "look_c", {}))
        first = [("a1", "act_a", {}), ("b1", "look_b", {})]
        if s.nested:
            first.append(("p3", "helper", {"prompt": "help"}))
        return batch(*first)

    def helper_answer(request: ModelRequest) -> ModelResponse:
        if "s1" in answered(request):
            return ModelResponse(Message(role="assistant", content="helped"), finish_reason="stop")
        return batch(("s1", "act_s", {}))

    tools: list[Tool] = [act_tool("act_a"), look_tool("look_b"), look_tool("look_c")]
    if s.nested:
        helper: Agent[None, str] = Agent(
            GatedModel(gates, "helper", helper_answer),
            name="helper",
            tools=[act_tool("act_s")],
            parallel_tool_calls=s.parallel,
        )
        tools.append(helper.as_tool(timeout=tool_timeout("helper")))
    return Agent(
        GatedModel(gates, "parent", parent_answer), tools=tools, parallel_tool_calls=s.parallel
    )


def approvals(s: Scenario) -> dict[str, Any]:
    decided = {"a1": True}
    if s.nested:
        decided["p3/s1"] = True
    return {"approvals": decided}


def signature(item: Delta | RunEvent) -> tuple[Any, ...]:
    if isinstance(item, Delta):
        return ("delta", item.content, tuple(c.id for c in item.tool_calls))
    return (item.kind.value, item.call_id, item.agent, item.approved)


@dataclass
class Outcome:
    value: Any = None
    error: BaseException | None = None
    items: list[Any] = field(default_factory=list)
    stream_result: str = ""


async def attempt(
    s: Scenario,
    gates: Gates,
    start: Callable[[Agent[None, str]], Any],
    agent: Agent[None, str],
    *,
    stream_start: Callable[[Agent[None, str]], Any] | None = None,
    stop_at: int | None = None,
    how: str = "cancel",
    shut_name: str = "",
) -> tuple[Outcome, int]:
    """Drive one run: release gates in arrival order; at gate `stop_at` cancel the caller
    (how="cancel" / "swallow") or leave the gate shut so its tool times out ("timeout")."""
    out = Outcome()

    async def consume() -> Any:
        assert stream_start is not None
        async with stream_start(agent) as stream:
            try:
                async for item in stream:
                    out.items.append(signature(item))
            finally:
                try:
                    stream.result  # noqa: B018 - must be unavailable unless the run finished
                    out.stream_result = "available"
                except (RuntimeError, RunError):
                    out.stream_result = "unavailable"
            return stream.result

    before = {t for t in asyncio.all_tasks() if t is not asyncio.current_task()}
    task = asyncio.ensure_future(consume() if stream_start is not None else start(agent))
    k = 0
    shut: list[asyncio.Future[None]] = []
    while True:
        getter = asyncio.ensure_future(gates.arrivals.get())
        await asyncio.wait({task, getter}, return_when=asyncio.FIRST_COMPLETED)
        if not getter.done():
            getter.cancel()
            await asyncio.wait({getter})
            break
        name, waiter = getter.result()
        if k == stop_at and how in ("cancel", "swallow"):
            gates.swallow = how == "swallow"
            task.cancel()
            stop_at = None
            if name.startswith("look:") and s.sync_look:
                # a thread cannot be cancelled: the run ends only once it has
                for _ in range(50):
                    await asyncio.sleep(0)
                assert not task.done(), "the run ended while its tool's thread still ran"
                waiter.set_result(None)
        elif how == "timeout" and name == shut_name:  # by name: threads arrive in any order
            if name.startswith("look:") and s.sync_look:
                # a thread is never abandoned: it returns after its deadline, a timeout too
                asyncio.get_running_loop().call_later(0.01, waiter.set_result, None)
            else:
                shut.append(waiter)  # never released: only the tool's timeout ends it
            stop_at = None
        elif not waiter.done():
            waiter.set_result(None)
        k += 1
    try:
        out.value = task.result()
    except BaseException as exc:
        out.error = exc
    assert gates.inside == 0, "gated code still running after the run ended"
    left = {t for t in asyncio.all_tasks() if t is not asyncio.current_task()} - before
    assert not left, f"tasks left running: {left}"
    for waiter in shut:
        waiter.cancel()
    gates.swallow = False
    return out, k


def run_start(agent: Agent[None, str]) -> Any:
    return agent.run("go")


def stream_run(agent: Agent[None, str]) -> Any:
    return agent.run_stream("go")


def timeout_tool_at(name: str, phase: str) -> str | None:
    """The tool a gate belongs to, if a timeout can end it there (a sub-agent's resume has
    no agent-tool call around it: its model's gates have none)."""
    kind, _, call = name.partition(":")
    tool = {"a1": "act_a", "b1": "look_b", "c1": "look_c", "s1": "act_s"}
    if kind in ("defer", "act", "acted", "look"):
        return tool.get(call)
    if kind == "model" and call.startswith("helper") and phase == "run":
        return "helper"
    return None


scenarios = st.builds(
    Scenario,
    parallel=st.booleans(),
    nested=st.booleans(),
    sync_look=st.booleans(),
    timeouts=st.booleans(),
    stream=st.booleans(),
)


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    s=scenarios,
    phase=st.sampled_from(["run", "resume"]),
    where=st.integers(0, 40),
    how=st.sampled_from(
        ["cancel", "swallow", "timeout"] if EXACT_CANCELLING else ["cancel", "timeout"]
    ),
)
def test_cancelling_or_timing_out_at_any_await_point_keeps_the_contract(
    s: Scenario, phase: str, where: int, how: str
) -> None:
    asyncio.run(check(s, phase, where, how))


async def check(s: Scenario, phase: str, where: int, how: str) -> None:
    loop = asyncio.get_running_loop()

    async def guard(call: ToolCall) -> None:
        await gates.point(f"guard:{call.id}")

    def resume_start(history: list[Message]) -> Callable[[Agent[None, str]], Any]:
        return lambda agent: agent.run_with_deferred_results(
            history, approvals(s), progress=ResumeProgress(before_approved=guard)
        )

    def resume_stream(history: list[Message]) -> Callable[[Agent[None, str]], Any]:
        return lambda agent: agent.run_stream_with_deferred_results(
            history, approvals(s), progress=ResumeProgress(before_approved=guard)
        )

    # the oracle: every gate released
    gates = Gates(loop)
    oracle_ledger = Ledger()
    agent = build(s, gates, oracle_ledger, None)
    paused_out, run_points = await attempt(
        s, gates, run_start, agent, stream_start=stream_run if s.stream else None
    )
    paused = paused_out.value
    assert paused is not None, paused_out.error
    assert paused.is_paused
    run_names = list(gates.names)
    gates.names.clear()
    done_out, resume_points = await attempt(
        s,
        gates,
        resume_start(paused.messages),
        agent,
        stream_start=resume_stream(paused.messages) if s.stream else None,
    )
    assert done_out.value is not None, done_out.error
    assert done_out.value.output == "done"
    resume_names = list(gates.names)
    expected_effects = set(oracle_ledger.executed)

    # the drawn attempt
    points, names = (run_points, run_names) if phase == "run" else (resume_points, resume_names)
    stop = where % points
    gate_name = names[stop]
    timeout_tool = timeout_tool_at(gate_name, phase) if how == "timeout" else None
    if how == "timeout" and timeout_tool is None:
        how = "cancel"  # no tool to time out at a model's or a hook's gate
    gates = Gates(loop)
    ledger = Ledger()
    agent = build(s, gates, ledger, timeout_tool)
    history: list[Message] | None = None
    if phase == "resume":
        first, _ = await attempt(s, gates, run_start, build(s, gates, ledger, None))
        assert first.value is not None
        assert first.value.is_paused
        history = first.value.messages
        start, streamed = resume_start(history), resume_stream(history) if s.stream else None
        oracle_items = done_out.items
    else:
        start, streamed = run_start, stream_run if s.stream else None
        oracle_items = paused_out.items
    got, _ = await attempt(
        s, gates, start, agent, stream_start=streamed, stop_at=stop, how=how, shut_name=gate_name
    )

    if how in ("cancel", "swallow"):
        assert isinstance(got.error, asyncio.CancelledError), (gate_name, got)
    else:
        assert isinstance(got.error, RunError), (gate_name, got)
        assert got.error.stage is Stage.TOOL, got.error
        assert isinstance(got.error.__cause__, ToolTimeout) or isinstance(
            got.error.__cause__.__cause__,
            RunError,  # a sub-agent's own timed-out call
        ), got.error
    if s.stream:
        seen = got.items
        if how == "timeout":  # the stream follows the oracle's up to the timed-out call's start
            timed = {"helper": "p3"}.get(timeout_tool or "", gate_name.partition(":")[2])
            starts = [
                i
                for i, x in enumerate(seen)
                if x[0] == "tool_start" and x[1].rpartition("/")[2] == timed
            ]
            seen = seen[: starts[-1] + 1] if starts else seen
        assert seen == oracle_items[: len(seen)], (gate_name, got.items)
        assert got.stream_result == "unavailable"
    executed_before = dict(ledger.executed)

    # the caller goes on from the last history it was handed
    agent = build(s, gates, ledger, None)
    partial = got.error.partial if isinstance(got.error, RunError) else None
    if partial is not None and phase == "resume" and not partial.is_paused:
        # a partial after the approved re-runs: they are answered in it, never run again
        answered_ids = {m.tool_call_id for m in partial.messages if m.role == "tool"}
        assert "a1" in answered_ids
        history = partial.messages
        went_on, _ = await attempt(s, gates, lambda a: a.run("", history=history), agent)
        assert ledger.executed == executed_before, (gate_name, ledger.executed)
        assert went_on.value is not None, went_on.error
        assert went_on.value.output == "done"
    elif partial is not None and phase == "resume":
        # a re-run failed (ADR 0071): the partial answers the ones that ran, which never run
        # again; the same resolutions resume the rest
        assert partial.pending is not None
        assert [p.call_id for p in partial.pending.calls] == pending_ids(partial.messages)
        answered_ids = {m.tool_call_id for m in partial.messages if m.role == "tool"}
        ran = {c for c in executed_before if c in answered_ids}
        went_on, _ = await attempt(s, gates, resume_start(partial.messages), agent)
        assert went_on.value is not None, (gate_name, went_on.error)
        assert went_on.value.output == "done"
        assert all(ledger.executed[c] == executed_before[c] for c in ran), ledger.executed
    else:
        if phase == "run":
            first, _ = await attempt(s, gates, run_start, agent)
            assert first.value is not None, first.error
            assert first.value.is_paused
            history = first.value.messages
        assert history is not None
        went_on, _ = await attempt(s, gates, resume_start(history), agent)
        assert went_on.value is not None, (gate_name, went_on.error)
        assert went_on.value.output == "done"
    # every approved call acted, with one key across attempts, its effect applied once
    assert set(ledger.executed) == expected_effects
    for call, keys in ledger.keys.items():
        assert len(keys) == 1, (call, keys)
    assert sorted(ledger.applied.values()) == [1] * len(expected_effects)


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    s=scenarios,
    phase=st.sampled_from(["run", "resume"]),
    after=st.integers(0, 40),
    leave=st.sampled_from(["break", "aclose", "raise", "no-iteration"]),
)
def test_a_stream_consumer_leaving_early_cancels_the_run_cleanly(
    s: Scenario, phase: str, after: int, leave: str
) -> None:
    asyncio.run(leave_early(s, phase, after, leave))


class Left(Exception):
    """The consumer's own error, raised inside the `async with`."""


async def leave_early(s: Scenario, phase: str, after: int, leave: str) -> None:
    """The consumer stops after `after` items (by `break`, by closing the iterator, by
    raising, or without iterating at all) and leaves the `async with`: the run is cancelled,
    nothing of it keeps running, the consumer's own error (if any) is what propagates,
    `stream.result` is unavailable, and resuming from the paused history still works."""
    loop = asyncio.get_running_loop()
    gates = Gates(loop)
    ledger = Ledger()
    agent = build(s, gates, ledger, None)
    history: list[Message] | None = None
    if phase == "resume":
        first, _ = await attempt(s, gates, run_start, agent)
        history = first.value.messages

    def open_stream(a: Agent[None, str]) -> Any:
        if history is None:
            return a.run_stream("go")
        return a.run_stream_with_deferred_results(history, approvals(s))

    got: list[Any] = []
    state: dict[str, str] = {}

    async def consume() -> None:
        async with open_stream(agent) as stream:
            if leave != "no-iteration":
                iterator = stream.__aiter__()
                async for item in iterator:
                    got.append(signature(item))
                    if len(got) > after:
                        if leave == "raise":
                            raise Left("the consumer gave up")
                        if leave == "aclose":
                            await iterator.aclose()  # type: ignore[attr-defined]
                        break
            try:
                stream.result  # noqa: B018
                state["result"] = "available"
            except (RuntimeError, RunError):
                state["result"] = "unavailable"

    before = {t for t in asyncio.all_tasks() if t is not asyncio.current_task()}
    task = asyncio.ensure_future(consume())
    while True:
        getter = asyncio.ensure_future(gates.arrivals.get())
        await asyncio.wait({task, getter}, return_when=asyncio.FIRST_COMPLETED)
        if not getter.done():
            getter.cancel()
            await asyncio.wait({getter})
            break
        _, waiter = getter.result()
        if not waiter.done():
            waiter.set_result(None)
    error = task.exception()
    if leave == "raise" and state.get("result") is None:
        assert isinstance(error, Left), error
    else:
        assert error is None, error
    assert gates.inside == 0
    assert {t for t in asyncio.all_tasks() if t is not asyncio.current_task()} <= before
    if state.get("result") == "available":  # the run had finished before the consumer left
        pass
    else:
        assert state.get("result") in (None, "unavailable")
    # the paused history (or the fresh start) is still good: nothing half-done in it
    agent = build(s, gates, ledger, None)
    if history is None:
        first, _ = await attempt(s, gates, run_start, agent)
        history = first.value.messages
    done, _ = await attempt(
        s, gates, lambda a: a.run_with_deferred_results(history, approvals(s)), agent
    )
    assert done.value is not None, done.error
    assert done.value.output == "done"
    assert sorted(ledger.applied.values()) == [1] * len(ledger.applied)
    for keys in ledger.keys.values():
        assert len(keys) == 1


@dataclass(frozen=True)
class Resolution:
    call: str
    how: str  # "approve" | "deny" | "external"
    sync: bool  # the call's tool runs in a thread
    fails: str  # "" | "raise" | "canceled" | "defer": its first re-run fails that way


@dataclass(frozen=True)
class SubAgentSpec:
    """A sub-agent the parent's batch calls (`h<i>`): its own calls, and optionally a
    sub-agent of its own (`m0`, whose calls are `t<j>`) — manager/janitor. With `again`
    (`inner_again`), the sub-agent (its own sub-agent) pauses again once its calls are
    answered, on one more call `z0`."""

    calls: list[Resolution]
    inner: list[Resolution] | None
    at: int  # where its call stands among the parent's own calls
    again: Resolution | None = None
    inner_again: Resolution | None = None


def _resolution(call: str) -> st.SearchStrategy[Resolution]:
    return st.builds(
        Resolution,
        st.just(call),
        st.sampled_from(["approve", "approve", "deny", "external"]),
        st.booleans(),
        st.sampled_from(["", "", "raise", "canceled", "defer"]),
    )


def _resolutions_named(
    prefix: str, min_size: int = 1, max_size: int = 3
) -> st.SearchStrategy[list[Resolution]]:
    return st.lists(_resolution(""), min_size=min_size, max_size=max_size).map(
        lambda rs: [Resolution(f"{prefix}{i}", r.how, r.sync, r.fails) for i, r in enumerate(rs)]
    )


sub_agent_specs = st.builds(
    SubAgentSpec,
    _resolutions_named("s"),
    st.one_of(st.none(), _resolutions_named("t")),
    st.integers(0, 3),
    st.one_of(st.none(), st.none(), _resolution("z0")),
    st.one_of(st.none(), st.none(), _resolution("z0")),
)


@dataclass(frozen=True)
class NestedScenario:
    own: list[Resolution]  # the parent's own calls (`q<i>`), possibly none
    subs: list[SubAgentSpec]

    def every(self) -> dict[str, Resolution]:
        """Every call by its namespaced ID (`q0`, `h0/s1`, `h1/m0/t0`, `h0/z0`)."""
        out = {r.call: r for r in self.own}
        for i, sub in enumerate(self.subs):
            out.update((f"h{i}/{r.call}", r) for r in sub.calls)
            out.update((f"h{i}/m0/{r.call}", r) for r in sub.inner or [])
            if sub.again is not None:
                out[f"h{i}/z0"] = sub.again
            if sub.inner is not None and sub.inner_again is not None:
                out[f"h{i}/m0/z0"] = sub.inner_again
        return out


nested_scenarios = st.builds(  # no sub-agent at all: a flat resume (ADR 0071)
    NestedScenario, _resolutions_named("q", 0, 4), st.lists(sub_agent_specs, max_size=2)
).filter(lambda n: bool(n.own or n.subs))


def nested_agent(
    n: NestedScenario,
    gates: Gates,
    ledger: Ledger,
    failing: dict[str, str],
    parallel: bool,
    timeout_call: str = "",
    sealed: bool = False,
) -> Agent[None, str]:
    """The parent of `n` and its sub-agents, every agent with a gated model (and, `sealed`,
    a seal key). An approved call acts once per execution (counted by its namespaced ID in
    `ledger.executed`, no idempotency key) right after its gate; `failing` holds the failure
    a call's next re-run raises instead (by namespaced ID); `timeout_call`'s tool has a tiny
    timeout."""

    def kind(args: dict[str, Any]) -> DeferKind:
        return DeferKind.APPROVAL if args["k"] == "a" else DeferKind.EXTERNAL

    def fail(key: str) -> None:
        how = failing.pop(key, "")
        if how == "raise":
            raise RuntimeError("broke")
        if how == "canceled":
            raise Canceled("stop")
        if how == "defer":
            raise Deferred(DeferKind.APPROVAL, "again")

    def tool(prefix: str, r: Resolution) -> Tool:
        key = prefix + r.call

        async def act(ctx: RunContext[None], args: dict[str, Any]) -> str:
            if not call_approved():
                raise Deferred(kind(args), "?")
            await gates.point(f"act:{key}")
            fail(key)
            ledger.act(ctx, key)
            return f"acted {key}"

        def act_sync(ctx: RunContext[None], args: dict[str, Any]) -> str:
            if not call_approved():
                raise Deferred(kind(args), "?")
            gates.point_from_thread(f"look:{key}")
            fail(key)
            ledger.act(ctx, key)
            return f"acted {key}"

        return Tool(
            f"t_{r.call}",
            "Act.",
            OBJ,
            act_sync if r.sync else act,
            timeout=0.001 if key == timeout_call else None,
        )

    def item(r: Resolution) -> tuple[str, str, dict[str, Any]]:
        return (r.call, f"t_{r.call}", {"k": "e" if r.how == "external" else "a"})

    def agent(
        name: str,
        prefix: str,
        calls: list[Resolution],
        subs: list[tuple[str, Agent[None, str], int]],
        again: Resolution | None = None,
    ) -> Agent[None, str]:
        items = [item(r) for r in calls]
        for call_id, sub, at in subs:
            items.insert(min(at, len(items)), (call_id, sub.name or "", {"prompt": "help"}))

        def answer(request: ModelRequest) -> ModelResponse:
            done = answered(request)
            if not done:
                return batch(*items)
            if again is not None and again.call not in done:
                return batch(item(again))
            texts = sorted(m.content for m in request.messages if m.role == "tool")
            return ModelResponse(
                Message(role="assistant", content=f"{name}: " + " | ".join(texts)),
                finish_reason="stop",
            )

        own = [*calls, again] if again is not None else calls
        return Agent(
            GatedModel(gates, name, answer),
            name=name,
            tools=[*(tool(prefix, r) for r in own), *(sub.as_tool() for _, sub, _ in subs)],
            parallel_tool_calls=parallel,
            seal_key=SEAL_KEY if sealed else None,
        )

    subs: list[tuple[str, Agent[None, str], int]] = []
    for i, spec in enumerate(n.subs):
        inner: list[tuple[str, Agent[None, str], int]] = []
        if spec.inner is not None:
            janitor = agent(f"inner{i}", f"h{i}/m0/", spec.inner, [], spec.inner_again)
            inner.append(("m0", janitor, 0))
        helper = agent(f"helper{i}", f"h{i}/", spec.calls, inner, spec.again)
        subs.append((f"h{i}", helper, spec.at))
    return agent("parent", "", n.own, subs)


SEAL_KEY = b"p" * 32


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    n=nested_scenarios,
    parallel=st.booleans(),
    stream=st.booleans(),
    stops=st.lists(
        st.tuples(
            st.integers(0, 40),
            st.sampled_from(
                ["cancel", "swallow", "timeout"] if EXACT_CANCELLING else ["cancel", "timeout"]
            ),
        ),
        max_size=4,
    ),
    sealed=st.booleans(),
)
def test_going_on_from_a_resumes_progress_runs_every_approved_call_exactly_once(
    n: NestedScenario, parallel: bool, stream: bool, stops: list[tuple[int, str]], sealed: bool
) -> None:
    """ADR 0071, 0076: approved, denied and external calls of the parent (async or threaded
    tools, sequential or parallel, resumed plainly or streamed) and of its sub-agents (each
    maybe pausing again once answered); any re-run failure (raising, `Canceled`, deferring
    again, timing out) and any cancellation point (model calls, `before_approved`, tool
    gates; maybe swallowed); going on each time from `RunError.partial` or
    `ResumeProgress.messages` reaches the uninterrupted run's answer, every approved call
    executed exactly once (by namespaced call ID, no keys). `sealed`: seal keys, histories
    through JSON, and every resume passes a `PausedRun`."""
    asyncio.run(nested_exactly_once(n, parallel, stream, stops, sealed))


async def nested_exactly_once(
    n: NestedScenario,
    parallel: bool,
    stream: bool,
    stops: list[tuple[int, str]],
    sealed: bool = False,
) -> None:
    loop = asyncio.get_running_loop()
    s = Scenario(parallel=parallel, nested=True, sync_look=True, timeouts=False, stream=stream)
    every = n.every()

    def resolving(keys: set[str]) -> dict[str, Any]:
        mine = {k: r for k, r in every.items() if k in keys}
        return {
            "approvals": {k: r.how == "approve" for k, r in mine.items() if r.how != "external"},
            "external": {k: f"ext {k}" for k, r in mine.items() if r.how == "external"},
        }

    later = {k for k in every if k.endswith("/z0")}  # asked for once a sub-agent went on
    approved = {k for k, r in every.items() if r.how == "approve"}
    sync = {k for k, r in every.items() if r.sync}

    def pending_keys(result: Any) -> set[str]:
        assert result.pending is not None
        return {p.call_id for p in result.pending.calls}

    # the oracle: no failure, no interruption; a sub-agent that went on and paused again
    # (its own sub-agent first, at depth 2) pauses the parent again on its `z0`
    gates, ledger = Gates(loop), Ledger()
    agent = nested_agent(n, gates, ledger, {}, parallel)
    out, _ = await attempt(s, gates, run_start, agent)
    assert out.value is not None, out.error
    assert pending_keys(out.value) == set(every) - later
    pauses = 0
    while out.value.is_paused:
        pauses += 1
        assert pauses <= 3, out.value.pending

        oracle_results = resolving(pending_keys(out.value))

        def go_on(
            a: Agent[None, str],
            h: list[Message] = out.value.messages,
            r: dict[str, Any] = oracle_results,
        ) -> Any:
            return a.run_with_deferred_results(h, r)

        out, _ = await attempt(s, gates, go_on, agent)
        assert out.value is not None, out.error
    oracle = out.value.output
    assert ledger.executed == dict.fromkeys(approved, 1)

    gates, ledger = Gates(loop), Ledger()

    async def guard(call: ToolCall) -> None:
        await gates.point(f"guard:{call.id}")

    failing = {k: r.fails for k, r in every.items() if r.how == "approve" and r.fails}
    first, _ = await attempt(
        s,
        gates,
        lambda a: a.run("go", conversation_id="conv"),
        nested_agent(n, gates, ledger, {}, parallel, sealed=sealed),
    )
    assert first.value is not None
    history: list[Message] = first.value.messages
    paused = True
    results = resolving(pending_keys(first.value))
    pending = first.value.pending  # what a sealed resume vouches for, with the conversation
    stops = list(stops)
    for _ in range(len(stops) + len(failing) + pauses):
        where, how = stops.pop(0) if stops else (None, "cancel")
        progress = ResumeProgress()
        timed = [c for c in pending_ids(history) if c in approved and c not in sync]
        timeout_call = timed[0] if how == "timeout" and paused and timed else ""
        if how == "timeout" and not timeout_call:
            how = "cancel"
        agent = nested_agent(n, gates, ledger, failing, parallel, timeout_call, sealed)
        if sealed:
            history = loads_history(dumps_history(history))

        target: Any = PausedRun(history, pending, "conv") if sealed else history

        def start(
            a: Agent[None, str],
            h: list[Message] = history,
            t: Any = target,
            p: bool = paused,
            g: ResumeProgress = progress,
            r: dict[str, Any] = results,
        ) -> Any:
            if not p:
                return a.run("", history=h)
            g.before_approved = guard
            return a.run_with_deferred_results(t, r, progress=g)

        def streamed(
            a: Agent[None, str],
            t: Any = target,
            g: ResumeProgress = progress,
            r: dict[str, Any] = results,
        ) -> Any:
            g.before_approved = guard
            return a.run_stream_with_deferred_results(t, r, progress=g)

        got, _ = await attempt(
            s,
            gates,
            start,
            agent,
            stream_start=streamed if stream and paused else None,
            stop_at=None if how == "timeout" else where,
            how=how,
            shut_name=f"act:{timeout_call}",
        )
        if got.error is None and got.value.is_paused:
            # a sub-agent that went on paused again, as in the oracle: resolve its calls
            assert pending_keys(got.value) <= later
            history, paused, results = got.value.messages, True, resolving(pending_keys(got.value))
            pending = got.value.pending
            continue
        if got.error is None:
            assert got.value.output == oracle, (got.value.output, oracle)
            break
        if isinstance(got.error, RunError):
            partial = got.error.partial
            assert partial is not None or not paused, got.error
            if partial is not None:
                history = partial.messages
                paused = partial.is_paused
                if paused:
                    assert partial.pending is not None
                    assert [p.call_id for p in partial.pending.calls] == [
                        c for c in pending_ids(history) if c in results["approvals"]
                    ] + [c for c in pending_ids(history) if c in results["external"]]
        else:
            assert isinstance(got.error, asyncio.CancelledError), got.error
            if paused and progress.messages is not None:
                history = progress.messages
                paused = progress.paused
    else:
        raise AssertionError(f"the run never finished: {ledger.executed}")
    assert ledger.executed == dict.fromkeys(approved, 1), (ledger.executed, approved)


def test_without_the_nested_hand_back_the_property_finds_a_double_execution(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The property's teeth: with a nested resume handing back only the history it was
    given (as before ADR 0076), going on runs a sub-agent's approved call that acted again."""
    from golem import resume

    def given_history(self: Any) -> tuple[None, bool, tuple[str, ...]]:
        return None, True, ()

    monkeypatch.setattr(resume._Handing, "read", given_history)
    n = NestedScenario(
        own=[],
        subs=[
            SubAgentSpec(
                [
                    Resolution("s0", "approve", False, ""),
                    Resolution("s1", "approve", False, "raise"),
                ],
                None,
                0,
            )
        ],
    )
    with pytest.raises(AssertionError, match=r"'h0/s0': 2"):
        asyncio.run(nested_exactly_once(n, False, False, []))
