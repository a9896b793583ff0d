"""Store contract: claiming ready runs, leases, finishing, and the interrupted sweep."""

from __future__ import annotations

import asyncio
import select
from typing import Any

import pytest

from golem.durable.store import (
    MAX_SECONDS,
    AuditAction,
    CallKind,
    Decision,
    DecisionKind,
    LeaseLost,
    Outcome,
    RunNotFound,
    RunStatus,
    Store,
)
from tests.support.durable.backends import Backend, backend_for
from tests.support.durable.runs import T0, approval, external, later, make_run

pytestmark = pytest.mark.version


async def _ready(store: Store, **kw: object) -> str:
    run = await store.save_pending(make_run(approval("c1"), external("c2"), **kw))  # type: ignore[arg-type]
    await store.decide(run.id, "c1", Decision.approve(), decided_by="bob")
    await store.decide(run.id, "c2", Decision.external("42"), decided_by="bob")
    return run.id


async def test_claim_returns_none_when_nothing_is_ready(store: Store) -> None:
    assert await store.claim_ready("w1", 10) is None
    await store.save_pending(make_run())  # pending, not ready
    assert await store.claim_ready("w1", 10) is None


async def test_claim_takes_the_run_under_a_lease_with_its_decisions(store: Store) -> None:
    run_id = await _ready(store)
    claimed = await store.claim_ready("w1", 30, now=T0)
    assert claimed is not None
    assert claimed.worker_id == "w1"
    assert claimed.lease_expires_at == later(30)
    run = claimed.run
    assert (run.id, run.status, run.lease_owner, run.lease_expires_at) == (
        run_id,
        RunStatus.RUNNING,
        "w1",
        later(30),
    )
    kinds = [(c.kind, c.decision.kind if c.decision else None) for c in run.calls]
    assert kinds == [
        (CallKind.APPROVAL, DecisionKind.APPROVE),
        (CallKind.EXTERNAL, DecisionKind.EXTERNAL),
    ]
    assert await store.claim_ready("w2", 30, now=T0) is None, "a claimed run is not claimable"
    last = (await store.audit(run_id))[-1]
    assert (last.action, last.actor, last.detail["worker_id"]) == (
        AuditAction.CLAIMED,
        "worker:w1",
        "w1",
    )


async def test_claims_take_the_longest_ready_run_first(store: Store) -> None:
    first = await _ready(store)
    second = await _ready(store)
    a = await store.claim_ready("w", 10)
    b = await store.claim_ready("w", 10)
    assert a is not None
    assert b is not None
    assert [a.run.id, b.run.id] == [first, second]


async def test_claim_rejects_bad_arguments(store: Store) -> None:
    with pytest.raises(ValueError, match="lease_seconds"):
        await store.claim_ready("w1", 0)
    with pytest.raises(ValueError, match="worker_id"):
        await store.claim_ready("", 10)


async def test_concurrent_claims_give_each_run_to_exactly_one_worker(backend: Backend) -> None:
    """Five store instances claim at once; each runs its transactions on its own database
    thread and connection, so the claims really contend for the database."""
    stores = [await backend.open() for _ in range(5)]
    try:
        runs = {await _ready(stores[0]) for _ in range(12)}

        async def worker(i: int) -> list[str]:
            got: list[str] = []
            while (c := await stores[i].claim_ready(f"w{i}", 30)) is not None:
                got.append(c.run.id)
            return got

        claimed = await asyncio.gather(*(worker(i % 5) for i in range(10)))
        flat = [r for got in claimed for r in got]
        assert sorted(flat) == sorted(runs), "every run claimed once, none lost"
        for run_id in runs:
            audit = await stores[0].audit(run_id)
            assert sum(e.action is AuditAction.CLAIMED for e in audit) == 1
    finally:
        for s in stores:
            await s.close()


async def test_renew_lease_extends_only_a_held_unexpired_lease(store: Store) -> None:
    run_id = await _ready(store)
    await store.claim_ready("w1", 10, now=T0)
    assert await store.renew_lease(run_id, "w1", 10, now=later(5)) == later(15)
    assert (await store.get_run(run_id)).lease_expires_at == later(15)
    with pytest.raises(LeaseLost, match='held by "w1"'):
        await store.renew_lease(run_id, "w2", 10, now=later(6))
    with pytest.raises(LeaseLost, match="ran out"):
        await store.renew_lease(run_id, "w1", 10, now=later(15))
    with pytest.raises(RunNotFound):
        await store.renew_lease("nope", "w1", 10)


async def test_finish_completed_saves_output_and_conversation(store: Store) -> None:
    run_id = await _ready(store)
    await store.claim_ready("w1", 10, now=T0)
    done = await store.finish(
        run_id, "w1", Outcome.completed({"ok": True}, '[{"role":"assistant"}]'), now=later(1)
    )
    assert done.status is RunStatus.COMPLETED
    assert done.outcome is not None
    assert (done.outcome.status, done.outcome.output, done.outcome.error) == (
        RunStatus.COMPLETED,
        {"ok": True},
        "",
    )
    assert done.conversation == '[{"role":"assistant"}]'
    assert done.updated_at == later(1)
    assert done == await store.get_run(run_id)
    last = (await store.audit(run_id))[-1]
    assert (last.action, last.actor) == (AuditAction.COMPLETED, "worker:w1")
    with pytest.raises(LeaseLost, match="is completed"):
        await store.finish(run_id, "w1", Outcome.completed("again"), now=later(2))
    assert await store.claim_ready("w2", 10) is None


async def test_finish_failed_saves_the_error(store: Store) -> None:
    run_id = await _ready(store)
    await store.claim_ready("w1", 10)
    failed = await store.finish(run_id, "w1", Outcome.failed("RunError: tool stage: boom", "[]"))
    assert failed.status is RunStatus.FAILED
    assert failed.outcome is not None
    assert failed.outcome.error == "RunError: tool stage: boom"
    last = (await store.audit(run_id))[-1]
    assert (last.action, last.detail) == (
        AuditAction.FAILED,
        {"error": "RunError: tool stage: boom"},
    )


async def test_finish_paused_saves_a_new_pending_run_of_the_same_conversation(
    store: Store,
) -> None:
    run_id = await _ready(store, deps_ref={"t": 1})
    parent = await store.get_run(run_id)
    await store.claim_ready("w1", 10)
    nxt = make_run(
        approval("c9", reason="again"),
        conversation_id=parent.conversation_id,
        history='["paused again"]',
        deps_ref={"t": 1},
        started_by="worker:w1",
    )
    paused = await store.finish(run_id, "w1", Outcome.paused(nxt))
    assert paused.status is RunStatus.PAUSED
    assert paused.child_run_id == nxt.id
    child = await store.get_run(nxt.id)
    assert child.status is RunStatus.PENDING
    assert child.parent_run_id == run_id, "the store links the child to its parent"
    assert child.conversation_id == parent.conversation_id
    assert child.history == '["paused again"]'
    assert child.deps_ref == {"t": 1}
    assert [c.call_id for c in child.calls] == ["c9"]
    assert [r.id for r in await store.list_runs(conversation_id=parent.conversation_id)] == [
        nxt.id,
        run_id,
    ]
    assert (await store.audit(run_id))[-1].detail == {"child_run_id": nxt.id}
    created = (await store.audit(nxt.id))[0]
    assert (created.action, created.actor, created.detail["parent_run_id"]) == (
        AuditAction.CREATED,
        "worker:w1",
        run_id,
    )


async def test_a_failed_finish_changes_nothing(store: Store) -> None:
    existing = await store.save_pending(make_run())
    run_id = await _ready(store)
    await store.claim_ready("w1", 10)
    with pytest.raises(ValueError, match="already exists"):
        await store.finish(run_id, "w1", Outcome.paused(make_run(id=existing.id)))
    assert (await store.get_run(run_id)).status is RunStatus.RUNNING
    with pytest.raises(ValueError, match="completed, paused or failed"):
        await store.finish(run_id, "w1", Outcome(RunStatus.INTERRUPTED))


async def test_a_finish_without_the_lease_writes_nothing_of_its_outcome(store: Store) -> None:
    """The lease check fails the whole transaction: the paused outcome's next run, the
    outcome history and the audit entry queued after it are not written (PostgreSQL sends
    them in the same pipeline as the check)."""
    run_id = await _ready(store)
    await store.claim_ready("w1", 10, now=T0)
    before = await store.audit(run_id)
    nxt = make_run()
    with pytest.raises(LeaseLost, match='held by "w1"'):
        await store.finish(run_id, "w2", Outcome.paused(nxt), now=later(1))
    with pytest.raises(RunNotFound):
        await store.get_run(nxt.id)
    run = await store.get_run(run_id)
    assert run.status is RunStatus.RUNNING
    assert run.outcome is None
    assert await store.audit(run_id) == before
    with pytest.raises(LeaseLost, match='held by "w1"'):
        await store.renew_lease(run_id, "w2", 10, now=later(1))
    assert (await store.get_run(run_id)).lease_expires_at == run.lease_expires_at
    done = await store.finish(run_id, "w1", Outcome.completed("x"), now=later(2))
    assert done.status is RunStatus.COMPLETED


async def test_finish_without_the_lease_raises_lease_lost(store: Store) -> None:
    run_id = await _ready(store)
    with pytest.raises(LeaseLost, match="is ready"):
        await store.finish(run_id, "w1", Outcome.completed("x"))
    await store.claim_ready("w1", 10, now=T0)
    with pytest.raises(LeaseLost, match='held by "w1"') as info:
        await store.finish(run_id, "w2", Outcome.completed("x"), now=later(1))
    assert (info.value.run_id, info.value.worker_id) == (run_id, "w2")
    with pytest.raises(LeaseLost, match="ran out"):
        await store.finish(run_id, "w1", Outcome.completed("x"), now=later(10))
    assert (await store.get_run(run_id)).status is RunStatus.RUNNING
    with pytest.raises(RunNotFound):
        await store.finish("nope", "w1", Outcome.completed("x"))


async def test_sweep_interrupted_marks_lapsed_leases_and_never_reclaims(store: Store) -> None:
    lapsed = await _ready(store)
    await store.claim_ready("w1", 2, now=T0)
    alive = await _ready(store)
    await store.claim_ready("w2", 100, now=T0)
    assert await store.sweep_interrupted(later(1)) == []
    assert await store.sweep_interrupted(later(2)) == [lapsed]
    run = await store.get_run(lapsed)
    assert run.status is RunStatus.INTERRUPTED
    assert run.outcome is not None
    assert run.outcome.status is RunStatus.INTERRUPTED
    assert 'worker "w1" lost its lease' in run.outcome.error
    assert (await store.get_run(alive)).status is RunStatus.RUNNING
    last = (await store.audit(lapsed))[-1]
    assert (last.action, last.actor, last.detail["worker_id"]) == (
        AuditAction.INTERRUPTED,
        "system:sweep",
        "w1",
    )
    assert await store.claim_ready("w3", 10, now=later(3)) is None
    with pytest.raises(LeaseLost, match="is interrupted"):
        await store.finish(lapsed, "w1", Outcome.completed("late"), now=later(1))
    assert await store.sweep_interrupted(later(50)) == [], "an interrupted run is swept once"


@pytest.mark.postgres
async def test_connections_dropped_while_idle_are_replaced_before_use(tmp_path: Any) -> None:
    """The server closes every idle pooled connection; the next finish still succeeds."""
    import psycopg

    with backend_for("postgres", tmp_path) as pg:
        store = await pg.open()
        try:
            run = await _ready(store)
            claimed = await store.claim_ready("w", 30)
            assert claimed is not None
            assert pg.dsn is not None
            with psycopg.connect(pg.dsn, autocommit=True) as admin:
                killed = admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                    "AND state = 'idle' AND application_name = ''"
                ).fetchall()
            assert killed
            # pg_terminate_backend only signals: wait until each pooled socket sees the close
            for c in list(store._idle):  # type: ignore[attr-defined]
                await asyncio.to_thread(select.select, [c.pg.socket], [], [], 30)
            done = await store.finish(run, "w", Outcome.completed("ok"))
            assert done.status is RunStatus.COMPLETED
        finally:
            await store.close()


@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan"), 1e12, -5, 10**400])
async def test_a_lease_out_of_range_is_a_value_error_and_changes_nothing(
    store: Store, bad: float
) -> None:
    run_id = await _ready(store)
    with pytest.raises(ValueError, match="lease_seconds must be a number of seconds"):
        await store.claim_ready("w1", bad)
    with pytest.raises(ValueError, match="lease_seconds must be a number of seconds"):
        await store.claim_ready_many("w1", bad, limit=2)
    assert (await store.get_run(run_id)).status is RunStatus.READY
    claimed = await store.claim_ready("w1", 30)
    assert claimed is not None
    with pytest.raises(ValueError, match="lease_seconds must be a number of seconds"):
        await store.renew_lease(run_id, "w1", bad)
    assert (await store.get_run(run_id)).lease_expires_at == claimed.lease_expires_at


async def test_the_longest_lease_is_taken(store: Store) -> None:
    await _ready(store)
    claimed = await store.claim_ready("w1", MAX_SECONDS, now=T0)
    assert claimed is not None
    assert claimed.lease_expires_at == later(MAX_SECONDS)


async def test_finish_records_the_approved_calls_the_resume_refused_as_denials(
    store: Store,
) -> None:
    run_id = await _ready(store)  # c1 approved, c2 answered externally
    assert await store.claim_ready("w1", 30) is not None
    outcome = Outcome(
        RunStatus.COMPLETED,
        output="ok",
        refused={"c1": "not run again", "c2": "not an approval", "c9": "no such call"},
    )
    done = await store.finish(run_id, "w1", outcome)
    for run in (done, await store.get_run(run_id)):
        d1, d2 = run.call("c1").decision, run.call("c2").decision
        assert d1 is not None
        assert d2 is not None
        assert (d1.kind, d1.reason, d1.decided_by) == (
            DecisionKind.DENY,
            "not run again",
            "worker:w1",
        )
        assert (d2.kind, d2.text) == (DecisionKind.EXTERNAL, "42"), "only approvals are refused"
        assert run.outcome is not None
        assert run.outcome.refused == {}
    entries = [(e.action, e.actor, e.detail) for e in await store.audit(run_id)][-2:]
    assert entries == [
        (
            AuditAction.DECIDED,
            "worker:w1",
            {"call_id": "c1", "decision": "deny", "reason": "not run again", "approved_by": "bob"},
        ),
        (AuditAction.COMPLETED, "worker:w1", {}),
    ]
