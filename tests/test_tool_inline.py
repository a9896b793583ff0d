"""Sync tools on the event loop (`run_in_thread=False`) behave as in a worker thread.

Every scenario runs in both modes (`threaded` fixture): where the call runs is the only
difference; contextvars, `ctx`, a chained signal, timeouts, deferral, the approved re-run
(`call_approved()`), spans and the durable cycle must come out the same. Signals, retries,
bad arguments and events of sync tools in either mode are `tests/test_contract_batches.py`'s
oracle property.
"""

from __future__ import annotations

import contextvars
import threading
import time
from typing import Any

import pytest

from golem import Agent, Approval, DeferredResults, RunContext, RunError, Stage
from golem.events import EventKind, RunEvent
from golem.messages import Message, ToolCall
from golem.testing import ScriptedModel
from golem.tool import (
    DeferKind,
    Deferred,
    Failed,
    Tool,
    ToolTimeout,
    call_approved,
)

OBJ: dict[str, Any] = {"type": "object"}

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="unset")


@pytest.fixture(params=[True, False], ids=["thread", "inline"])
def threaded(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


def calls(*items: tuple[str, str, str]) -> Message:
    return Message(role="assistant", tool_calls=[ToolCall(i, n, a) for i, n, a in items])


def tool_texts(messages: list[Message]) -> list[tuple[str, bool]]:
    return [(m.content, m.failed) for m in messages if m.role == "tool"]


def _where(threaded: bool, ran_on: list[int]) -> None:
    loop_thread = threading.get_ident()
    assert ran_on, "the tool never ran"
    for ident in ran_on:
        assert (ident != loop_thread) is threaded


# --------------------------------------------------------------------------- where it runs


def test_the_option_is_on_every_way_to_declare_a_tool() -> None:
    def exec(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        return ""

    def plain() -> str:
        """Plain."""
        return ""

    assert Tool("t", "t", OBJ, exec).run_in_thread is True
    assert Tool("t", "t", OBJ, exec, run_in_thread=False).run_in_thread is False
    assert Tool.from_function(plain).run_in_thread is True
    assert Tool.from_function(plain, run_in_thread=False).run_in_thread is False
    agent = Agent(ScriptedModel("done"))
    agent.tool_plain(run_in_thread=False)(plain)

    @agent.tool(run_in_thread=False)
    def with_ctx(ctx: RunContext[None]) -> str:
        """With ctx."""
        return ""

    @agent.tool
    def default(ctx: RunContext[None]) -> str:
        """Default."""
        return ""

    assert agent.tools["plain"].run_in_thread is False
    assert agent.tools["with_ctx"].run_in_thread is False
    assert agent.tools["default"].run_in_thread is True


async def test_a_tool_runs_where_asked_with_ctx_deps_and_a_copy_of_the_callers_contextvars(
    threaded: bool,
) -> None:
    ran_on: list[int] = []
    seen: list[tuple[Any, ...]] = []
    model = ScriptedModel(calls(("c1", "who", '{"n": 2}'), ("c2", "on_loop", "{}")), "done")
    agent: Agent[str, str] = Agent(model, deps_type=str)

    @agent.tool(run_in_thread=threaded)
    def who(ctx: RunContext[str], n: int) -> str:
        ran_on.append(threading.get_ident())
        seen.append((ctx.deps, ctx.call_id, ctx.tool_name, ctx.run_id, n, request_id.get()))
        request_id.set("set-by-the-tool")  # stays with this call
        return ctx.deps * n

    @agent.tool_plain(run_in_thread=threaded)
    async def on_loop() -> str:  # an async tool runs on the loop whatever the option
        assert threading.get_ident() == loop_thread
        return request_id.get()

    loop_thread = threading.get_ident()
    token = request_id.set("req-42")
    try:
        res = await agent.run("go", deps="ab")
        assert request_id.get() == "req-42"
    finally:
        request_id.reset(token)
    _where(threaded, ran_on)
    assert seen == [("ab", "c1", "who", res.run_id, 2, "req-42")]
    assert tool_texts(res.messages) == [("abab", False), ("req-42", False)]


# --------------------------------------------------------------------------- signals, retries


async def test_a_signal_chained_as_the_cause_still_counts(threaded: bool) -> None:
    def rm() -> str:
        try:
            raise Failed("permission denied")
        except Failed as exc:
            raise RuntimeError("wrapper") from exc

    model = ScriptedModel(calls(("c1", "rm", "{}")), "could not delete")
    tool = Tool.from_function(rm, description="rm", run_in_thread=threaded)
    res = await Agent(model, tools=[tool]).run("delete")
    assert tool_texts(res.messages) == [("permission denied", True)]


# --------------------------------------------------------------------------- timeouts


@pytest.mark.parametrize("timeout", [0.02, None])
async def test_a_sync_tool_overrunning_its_timeout_runs_to_its_end_then_fails(
    threaded: bool, timeout: float | None
) -> None:
    finished: list[bool] = []

    def slow(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        if timeout:
            time.sleep(0.1)  # past the timeout however slow the machine is
        finished.append(True)
        return "late"

    model = ScriptedModel(calls(("c1", "slow", "{}")), "done")
    tool = Tool("slow", "s", OBJ, slow, timeout=timeout, run_in_thread=threaded)
    agent = Agent(model, tools=[tool], tool_timeout=60)
    if timeout is None:  # within its timeout: it returns
        assert tool_texts((await agent.run("go")).messages) == [("late", False)]
        return
    with pytest.raises(RunError) as info:
        await agent.run("go")
    assert info.value.stage is Stage.TOOL
    assert isinstance(info.value.__cause__, ToolTimeout)
    assert finished == [True]  # never abandoned


# --------------------------------------------------------------------------- events


# --------------------------------------------------------------------------- deferral


async def test_deferral_and_the_approved_rerun_see_call_approved(threaded: bool) -> None:
    passes: list[tuple[bool, int, str]] = []

    def transfer(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        passes.append((call_approved(), threading.get_ident(), ctx.call_id))
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, "money moves need sign-off")
        return f"moved {args['amount']}"

    tool = Tool("transfer", "t", OBJ, transfer, run_in_thread=threaded)
    model = ScriptedModel(calls(("c1", "transfer", '{"amount": 10}')), "Transferred.")
    paused = await Agent(model, tools=[tool]).run("pay")
    assert [(p.call_id, p.reason) for p in paused.pending.calls] == [
        ("c1", "money moves need sign-off")
    ]
    events: list[RunEvent] = []
    res = await Agent(model, tools=[tool]).run_with_deferred_results(
        paused.messages,
        DeferredResults(approvals={"c1": Approval(True)}),
        on_event=events.append,
    )
    assert res.output == "Transferred."
    assert [(approved, call_id) for approved, _, call_id in passes] == [
        (False, "c1"),
        (True, "c1"),
    ]
    _where(threaded, [ident for _, ident, _ in passes])
    assert not call_approved()  # the marker never leaks to the caller
    ends = [e for e in events if e.kind is EventKind.TOOL_END]
    assert [(e.call_id, e.result, e.approved) for e in ends] == [("c1", "moved 10", True)]


async def test_an_approved_sync_rerun_overrunning_its_timeout_fails_at_stage_tool(
    threaded: bool,
) -> None:
    passes: list[bool] = []

    def slow(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        passes.append(call_approved())
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL)
        time.sleep(0.1)
        return "late"

    model = ScriptedModel(calls(("c1", "t", "{}")), "never")
    paused = await Agent(model, tools=[Tool("t", "t", OBJ, slow, run_in_thread=threaded)]).run("go")
    quick = Tool("t", "t", OBJ, slow, timeout=0.05, run_in_thread=threaded)
    with pytest.raises(RunError) as info:
        await Agent(model, tools=[quick]).run_with_deferred_results(
            paused.messages, DeferredResults(approvals={"c1": Approval(True)})
        )
    assert info.value.stage is Stage.TOOL
    assert isinstance(info.value.__cause__, TimeoutError)
    assert passes == [False, True]


# --------------------------------------------------------------------------- tracing


async def test_the_tools_span_is_current_inside_the_call(threaded: bool) -> None:
    pytest.importorskip("opentelemetry.sdk")
    from tests.otel_support import memory_provider

    provider, exporter = memory_provider()
    agent = Agent(ScriptedModel(calls(("c1", "probe", "{}")), "ok"), tracer_provider=provider)
    tracer = provider.get_tracer("test")

    @agent.tool_plain(run_in_thread=threaded)
    def probe() -> str:
        with tracer.start_as_current_span("inner"):
            return "x"

    await agent.run("go")
    finished = exporter.get_finished_spans()
    tool_span = next(s for s in finished if (s.attributes or {}).get("gen_ai.tool.call.id") == "c1")
    inner = next(s for s in finished if s.name == "inner")
    assert inner.parent is not None
    assert inner.parent.span_id == tool_span.context.span_id


# --------------------------------------------------------------------------- the durable path


async def test_a_stored_cycle_runs_the_tool_where_asked(threaded: bool, tmp_path: Any) -> None:
    from golem.durable.store import Decision, RunStatus
    from golem.durable.store.sqlite import SQLiteStore
    from golem.durable.worker import AgentEntry, Worker, start_run

    passes: list[tuple[bool, int]] = []

    def transfer(ctx: RunContext[Any], amount: int) -> str:
        """Move money (needs approval)."""
        passes.append((call_approved(), threading.get_ident()))
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, "money moves need sign-off")
        return f"moved {amount}"

    model = ScriptedModel(calls(("c1", "transfer", '{"amount": 10}')), "Transferred.")
    agent: Agent[Any, str] = Agent(
        model, tools=[Tool.from_function(transfer, run_in_thread=threaded)]
    )
    registry = {"bank": AgentEntry(agent)}
    async with await SQLiteStore.open(tmp_path / "s.db") as store:
        run = await start_run(store, registry, "bank", "pay", started_by="t")
        await store.decide(run.id, "c1", Decision.approve(), decided_by="ann")
        worker = Worker(store, registry, worker_id="w", lease_seconds=30, sweep_interval=3600)
        assert await worker.run_once()
        done = await store.get_run(run.id)
    assert done.status is RunStatus.COMPLETED
    assert [approved for approved, _ in passes] == [False, True]
    _where(threaded, [ident for _, ident in passes])
