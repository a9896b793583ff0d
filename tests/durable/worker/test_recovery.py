"""Operator recovery of interrupted runs: retry (idempotent or confirmed calls only) or cancel."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from golem import Agent, Message, RunContext, ToolCall
from golem.cli.commands import build_app
from golem.durable.store import (
    AuditAction,
    CallNotFound,
    Decision,
    DecisionKind,
    InvalidDecision,
    RunNotInterrupted,
    RunStatus,
    Store,
    open_store,
    utc_now,
)
from golem.durable.worker import RETRY_REFUSAL, AgentEntry, Worker, start_run
from golem.service.api import run_detail_json
from golem.testing import ScriptedModel
from golem.tool import DeferKind, Deferred, call_approved
from tests.support.durable.backends import Backend


class Bank:
    """Two gated tools; `pay` records every execution."""

    def __init__(self, *script: Any) -> None:
        self.ran: list[tuple[str, str, str]] = []

        def pay(ctx: RunContext[Any], amount: int) -> str:
            """Pay (needs approval)."""
            if not call_approved():
                raise Deferred(DeferKind.APPROVAL, "money")
            self.ran.append((ctx.run_id, ctx.call_id, "pay"))
            return "paid"

        def mail(ctx: RunContext[Any], to: str) -> str:
            """Send mail (needs approval)."""
            if not call_approved():
                raise Deferred(DeferKind.APPROVAL, "mail")
            self.ran.append((ctx.run_id, ctx.call_id, "mail"))
            return "sent"

        both = Message(
            role="assistant",
            tool_calls=[
                ToolCall("c1", "pay", '{"amount": 5}'),
                ToolCall("c2", "mail", '{"to": "bob"}'),
            ],
        )
        self.agent: Agent[Any, str] = Agent(ScriptedModel(both, *script), tools=[pay, mail])
        self.registry = {"bank": AgentEntry(self.agent)}


@pytest.fixture
async def store(backend: Backend) -> Any:
    s = await backend.open()
    try:
        yield s
    finally:
        await s.close()


async def _interrupted(store: Store, bank: Bank) -> str:
    run = await start_run(store, bank.registry, "bank", "go", started_by="alice")
    for call in ("c1", "c2"):
        await store.decide(run.id, call, Decision.approve(), decided_by="bob")
    claimed = await store.claim_ready("dead-worker", 0.001)
    assert claimed is not None
    await asyncio.sleep(0.01)
    assert await store.sweep_interrupted() == [run.id]
    return run.id


async def test_retry_reruns_only_confirmed_calls_and_keeps_the_stored_run_id(
    store: Store,
) -> None:
    bank = Bank("done")
    run_id = await _interrupted(store, bank)
    ready = await store.retry_interrupted(
        run_id, resolved_by="ops:carol", note="worker VM died", confirm_calls=["c1"]
    )
    assert ready.status is RunStatus.READY
    assert ready.attempt == 2
    assert ready.call("c1").rerun_confirmed_by == "ops:carol"
    assert ready.call("c2").rerun_confirmed_by is None
    assert await Worker(store, bank.registry, worker_id="w2").run_once()
    done = await store.get_run(run_id)
    assert done.status is RunStatus.COMPLETED
    assert bank.ran == [(run_id, "c1", "pay")]  # mail (not confirmed) did not run again
    assert done.outcome is not None
    assert done.outcome.history is not None
    assert RETRY_REFUSAL in done.outcome.history
    # the refusal is recorded: "approved" on a completed run reads as "executed" only if it ran
    confirmed, refused = done.call("c1").decision, done.call("c2").decision
    assert confirmed is not None
    assert (confirmed.kind, confirmed.decided_by) == (DecisionKind.APPROVE, "bob")
    assert refused is not None
    assert (refused.kind, refused.reason, refused.decided_by) == (
        DecisionKind.DENY,
        RETRY_REFUSAL,
        "worker:w2",
    )
    entries = await store.audit(run_id)
    decided = [(e.actor, e.detail) for e in entries if e.action is AuditAction.DECIDED]
    assert decided[-1] == (
        "worker:w2",
        {"call_id": "c2", "decision": "deny", "reason": RETRY_REFUSAL, "approved_by": "bob"},
    )
    assert [e.action for e in entries][-2:] == [AuditAction.DECIDED, AuditAction.COMPLETED]
    shown = {c["call_id"]: c["decision"] for c in run_detail_json(done, entries)["calls"]}
    assert (shown["c1"]["decision"], shown["c2"]["decision"]) == ("approve", "deny")
    assert shown["c2"]["reason"] == RETRY_REFUSAL
    resolved = [e for e in entries if e.action is AuditAction.RESOLVED]
    assert [(e.actor, e.detail) for e in resolved] == [
        (
            "ops:carol",
            {"resolution": "retry", "note": "worker VM died", "attempt": 2, "confirmed": ["c1"]},
        )
    ]


async def test_cancel_closes_an_interrupted_run_as_failed_with_who_and_why(store: Store) -> None:
    bank = Bank()
    run_id = await _interrupted(store, bank)
    failed = await store.cancel_interrupted(run_id, resolved_by="ops:dan", note="paid by hand")
    assert failed.status is RunStatus.FAILED
    assert failed.outcome is not None
    assert failed.outcome.error == (
        "cancelled by ops:dan after an interrupted resume: paid by hand"
    )
    actions = [e.action for e in await store.audit(run_id)][-2:]
    assert actions == [AuditAction.RESOLVED, AuditAction.FAILED]
    with pytest.raises(RunNotInterrupted):
        await store.retry_interrupted(run_id, resolved_by="ops:dan", note="again")


async def test_recovery_refuses_what_it_cannot_do(store: Store) -> None:
    bank = Bank()
    run = await start_run(store, bank.registry, "bank", "go", started_by="alice")
    with pytest.raises(RunNotInterrupted):
        await store.cancel_interrupted(run.id, resolved_by="ops", note="x")
    run_id = await _interrupted(store, Bank())
    with pytest.raises(CallNotFound):
        await store.retry_interrupted(run_id, resolved_by="ops", note="x", confirm_calls=["c9"])
    with pytest.raises(ValueError, match="resolved_by"):
        await store.retry_interrupted(run_id, resolved_by="", note="x")
    assert (await store.get_run(run_id)).status is RunStatus.INTERRUPTED  # nothing changed


async def test_a_denied_call_cannot_be_confirmed_for_a_rerun(store: Store) -> None:
    bank = Bank()
    run = await start_run(store, bank.registry, "bank", "go", started_by="alice")
    await store.decide(run.id, "c1", Decision.approve(), decided_by="bob")
    await store.decide(run.id, "c2", Decision.deny("no"), decided_by="bob")
    assert await store.claim_ready("dead", 0.001, now=utc_now()) is not None
    await asyncio.sleep(0.01)
    await store.sweep_interrupted()
    with pytest.raises(InvalidDecision, match="not approved"):
        await store.retry_interrupted(run.id, resolved_by="ops", note="x", confirm_calls=["c2"])


def test_golem_resolve_retries_or_cancels_from_the_terminal(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'r.db'}"

    async def seed() -> list[str]:
        store = await open_store(db)
        try:
            return [await _interrupted(store, Bank()), await _interrupted(store, Bank())]
        finally:
            await store.close()

    first, second = asyncio.run(seed())
    app = build_app()
    runner = CliRunner()
    out = runner.invoke(app, ["resolve", first, "--retry", "--db", db], catch_exceptions=False)
    assert out.exit_code == 2
    assert "--note" in out.output
    out = runner.invoke(
        app,
        ["resolve", first, "--retry", "--confirm", "c1", "--note", "vm died", "--as", "ops:e"],
        env={"GOLEM_DB": db, "COLUMNS": "200"},
        catch_exceptions=False,
    )
    assert out.exit_code == 0, out.output
    assert f"run {first} is ready for attempt 2 (by ops:e)" in out.output
    assert "c1 (pay): runs again, confirmed" in out.output
    assert "c2 (mail): runs again only if its tool is declared idempotent; otherwise this " in (
        out.output
    )
    assert "attempt denies it (not confirmed: a call is confirmed only by the --retry itself, " in (
        out.output
    )
    assert "confirm it with --confirm" not in out.output  # too late: the run is ready now
    late = runner.invoke(
        app,
        ["resolve", first, "--retry", "--confirm", "c2", "--note", "late", "--db", db],
        env={"COLUMNS": "200"},
        catch_exceptions=False,
    )
    assert late.exit_code == 1
    assert "only an interrupted run can be retried" in late.output
    out = runner.invoke(
        app,
        ["resolve", second, "--cancel", "--note", "done by hand", "--db", db],
        catch_exceptions=False,
    )
    assert out.exit_code == 0, out.output
    assert "cancelled" in out.output
    out = runner.invoke(
        app,
        ["resolve", second, "--cancel", "--note", "twice", "--db", db],
        env={"COLUMNS": "200"},
        catch_exceptions=False,
    )
    assert out.exit_code == 1
    assert "only an interrupted run can be retried or cancelled" in out.output


async def test_a_retry_reruns_an_idempotent_tool_without_confirmation(
    store: Store,
) -> None:
    keys: list[str] = []
    step = Message(role="assistant", tool_calls=[ToolCall("c1", "charge", '{"cents": 5}')])
    agent: Agent[Any, str] = Agent(ScriptedModel(step, "done"))

    @agent.tool(idempotent=True)  # type: ignore[call-overload, untyped-decorator, unused-ignore]
    def charge(ctx: RunContext[Any], cents: int) -> str:
        """Charge a card (needs approval)."""
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, "money")
        keys.append(ctx.idempotency_key)  # type: ignore[attr-defined, unused-ignore]
        return "charged"

    registry = {"bank": AgentEntry(agent)}
    run = await start_run(store, registry, "bank", "go", started_by="alice")
    await store.decide(run.id, "c1", Decision.approve(), decided_by="bob")
    claimed = await store.claim_ready("dead", 0.001)
    assert claimed is not None
    await asyncio.sleep(0.01)
    await store.sweep_interrupted()
    await store.retry_interrupted(run.id, resolved_by="ops", note="charge is idempotent")
    assert await Worker(store, registry, worker_id="w2").run_once()
    assert (await store.get_run(run.id)).status is RunStatus.COMPLETED
    assert len(keys) == 1
    assert keys[0]
