"""Store contract: claiming ready runs (one or a batch), leases, finishing, and the interrupted
sweep."""

from __future__ import annotations

import asyncio
import json
import random
import select
import subprocess
import sys
from pathlib import Path
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
from tests.support.durable.procs import ROOT, eventually
from tests.support.durable.runs import T0, approval, external, later, make_run

pytestmark = pytest.mark.version


async def _ready(store: Store, **kw: object) -> str:
    run = await store.save_pending(make_run(approval("c1"), external("c2"), **kw))  # type: ignore[arg-type]
    await store.decide(run.id, "c1", Decision.approve(), decided_by="bob")
    await store.decide(run.id, "c2", Decision.external("42"), decided_by="bob")
    return run.id


async def test_claim_takes_the_run_under_a_lease_with_its_decisions(store: Store) -> None:
    assert await store.claim_ready("w1", 10) is None
    await store.save_pending(make_run())  # pending, not ready
    assert await store.claim_ready("w1", 10) is None
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
    first, second = await _ready(store), await _ready(store)
    taken = [await store.claim_ready("w", 10) for _ in range(2)]
    assert [c.run.id if c else None for c in taken] == [first, second], "longest ready first"


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


async def test_finish_saves_the_completed_or_failed_outcome(store: Store) -> None:
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


async def test_a_refused_finish_writes_nothing_of_its_outcome(store: Store) -> None:
    """The lease check fails the whole transaction: the paused outcome's next run, the outcome's
    history and the audit entry queued after it are not written (PostgreSQL sends them in the
    same pipeline as the check)."""
    existing = await store.save_pending(make_run())
    run_id = await _ready(store)
    with pytest.raises(LeaseLost, match="is ready"):
        await store.finish(run_id, "w1", Outcome.completed("x"))
    await store.claim_ready("w1", 10, now=T0)
    before, nxt = await store.audit(run_id), make_run()
    with pytest.raises(LeaseLost, match='held by "w1"') as info:
        await store.finish(run_id, "w2", Outcome.paused(nxt), now=later(1))
    assert (info.value.run_id, info.value.worker_id) == (run_id, "w2")
    with pytest.raises(LeaseLost, match="ran out"):
        await store.finish(run_id, "w1", Outcome.completed("x"), now=later(10))
    with pytest.raises(ValueError, match="already exists"):
        await store.finish(run_id, "w1", Outcome.paused(make_run(id=existing.id)), now=later(1))
    with pytest.raises(ValueError, match="completed, paused or failed"):
        await store.finish(run_id, "w1", Outcome(RunStatus.INTERRUPTED), now=later(1))
    with pytest.raises(LeaseLost, match='held by "w1"'):
        await store.renew_lease(run_id, "w2", 10, now=later(1))
    with pytest.raises(RunNotFound):
        await store.finish("nope", "w1", Outcome.completed("x"))
    with pytest.raises(RunNotFound):
        await store.get_run(nxt.id)
    run = await store.get_run(run_id)
    assert (run.status, run.outcome, run.lease_expires_at) == (RunStatus.RUNNING, None, later(10))
    assert await store.audit(run_id) == before
    done = await store.finish(run_id, "w1", Outcome.completed("x"), now=later(2))
    assert done.status is RunStatus.COMPLETED


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


LEASE = "lease_seconds must be a number of seconds"
BAD_CLAIMS = {
    **{
        f"{call}-{bad}": (call, {"lease_seconds": bad}, LEASE)
        for call in ("claim", "claim_many", "renew")
        for bad in (float("inf"), float("-inf"), float("nan"), 1e12, -5, 10**400, 0)
    },
    **{
        f"limit-{bad!r}": ("claim_many", {"limit": bad}, "limit must be an integer >= 1")
        for bad in (0, -1, 1.5, True, "2")
    },
    **{
        f"{call}-worker": (call, {"worker_id": ""}, "worker_id") for call in ("claim", "claim_many")
    },
}


@pytest.mark.parametrize(("call", "kw", "error"), list(BAD_CLAIMS.values()), ids=list(BAD_CLAIMS))
async def test_a_claim_or_renewal_with_a_bad_argument_is_a_value_error_and_changes_nothing(
    store: Store, call: str, kw: dict[str, Any], error: str
) -> None:
    run_id = await _ready(store)
    held = await store.claim_ready("w1", 30) if call == "renew" else None
    args: dict[str, Any] = {"worker_id": "w1", "lease_seconds": 30, **kw}
    with pytest.raises(ValueError, match=error):
        if call == "claim":
            await store.claim_ready(args["worker_id"], args["lease_seconds"])
        elif call == "claim_many":
            await store.claim_ready_many(
                args["worker_id"], args["lease_seconds"], limit=kw.get("limit", 2)
            )
        else:
            await store.renew_lease(run_id, args["worker_id"], args["lease_seconds"])
    run = await store.get_run(run_id)
    assert run.status is (RunStatus.RUNNING if held else RunStatus.READY)
    assert run.lease_expires_at == (held.lease_expires_at if held else None)


async def test_a_claim_takes_the_longest_lease_and_only_the_agents_asked_for(store: Store) -> None:
    ops = await _ready(store, agent="ops")
    billing = await _ready(store, agent="billing")
    assert await store.claim_ready_many("w", 30, limit=5, agents=[]) == []
    got = await store.claim_ready_many("w", MAX_SECONDS, limit=5, agents=["billing"], now=T0)
    assert [(c.run.id, c.lease_expires_at) for c in got] == [(billing, later(MAX_SECONDS))]
    assert (await store.get_run(ops)).status is RunStatus.READY


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


# ------------------------------------------------------------------ batched claims


async def test_claims_up_to_limit_oldest_first_each_under_its_own_lease(store: Store) -> None:
    ids = [await _ready(store) for _ in range(5)]
    await store.save_pending(make_run())  # pending, not ready: never claimed

    batch = await store.claim_ready_many("w1", 30, limit=3, now=T0)

    assert [c.run.id for c in batch] == ids[:3], "the oldest ready runs, in creation order"
    for c in batch:
        assert (c.worker_id, c.lease_expires_at) == ("w1", later(30))
        assert (c.run.status, c.run.lease_owner, c.run.lease_expires_at) == (
            RunStatus.RUNNING,
            "w1",
            later(30),
        )
        assert [call.call_id for call in c.run.calls] == ["c1", "c2"]
        assert all(call.decision is not None for call in c.run.calls)
        assert c.run.history == '[{"role":"user","content":"hi"}]'
        audit = await store.audit(c.run.id)
        assert [e.action for e in audit].count(AuditAction.CLAIMED) == 1
        assert audit[-1].actor == "worker:w1"
        assert audit[-1].detail["worker_id"] == "w1"
    rest = await store.claim_ready_many("w2", 30, limit=10, now=T0)
    assert [c.run.id for c in rest] == ids[3:], "a limit above the ready count takes them all"
    assert await store.claim_ready_many("w2", 30, limit=10, now=T0) == []
    assert await store.claim_ready("w2", 30, now=T0) is None


async def test_each_claimed_run_finishes_or_loses_its_lease_on_its_own(store: Store) -> None:
    a, b = await _ready(store), await _ready(store)
    batch = await store.claim_ready_many("w1", 10, limit=2, now=T0)
    assert {c.run.id for c in batch} == {a, b}
    await store.renew_lease(a, "w1", 100, now=later(5))  # only a's lease grows
    done = await store.finish(a, "w1", Outcome.completed("ok"), now=later(20))
    assert done.status is RunStatus.COMPLETED
    with pytest.raises(LeaseLost):
        await store.finish(b, "w1", Outcome.completed("ok"), now=later(20))
    assert await store.sweep_interrupted(later(20)) == [b]


async def test_a_batch_claims_audit_entries_follow_creation_order_without_gaps(
    store: Store,
) -> None:
    """Each claimed run gets one entry, numbered consecutively in the runs' creation order,
    with the same time, actor and detail; an empty claim appends nothing."""
    ids = [await _ready(store) for _ in range(4)]
    start = await store.last_change_id()
    batch = await store.claim_ready_many("w9", 30, limit=3, now=later(5))
    assert [c.run.id for c in batch] == ids[:3]
    entries = await store.changes_since(start)
    assert [(e.run_id, e.action) for e in entries] == [
        (run_id, AuditAction.CLAIMED) for run_id in ids[:3]
    ]
    assert [e.id for e in entries] == list(range(start + 1, start + 4)), "no gaps"
    for e in entries:
        assert (e.at, e.actor) == (later(5), "worker:w9")
        assert e.detail == {"worker_id": "w9", "lease_expires_at": later(35).isoformat()}
    assert [c.run.calls[0].call_id for c in batch] == ["c1"] * 3, "calls came with the claim"

    newest = await store.last_change_id()
    await store.claim_ready_many("w9", 30, limit=3, agents=["nobody"])
    assert await store.claim_ready("w9", 30, agents=["nobody"]) is None
    assert await store.last_change_id() == newest, "an empty claim audits nothing"


def _spawn_claimer(
    backend: Backend, worker_id: str, limit: int, go: Path
) -> subprocess.Popen[bytes]:
    config = {"spec": backend.spec(), "worker_id": worker_id, "limit": limit, "go_file": str(go)}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.durable.claim_app", json.dumps(config)],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


async def test_claims_from_several_processes_never_share_a_run(
    backend: Backend, tmp_path: Path
) -> None:
    store = await backend.open()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        runs = {await _ready(store) for _ in range(45)}
        go = tmp_path / "go"
        # one claims a run at a time, the others in batches of 3 and 5
        procs.extend(_spawn_claimer(backend, f"p{i}", 1 + 2 * i, go) for i in range(3))

        async def all_ready() -> bool:
            return all((tmp_path / f"p{i}.ready").exists() for i in range(3))

        await eventually(all_ready, 60, "the claiming processes to open their stores")
        go.touch()
        outputs = await asyncio.gather(
            *(asyncio.to_thread(p.communicate, timeout=60) for p in procs)
        )
        for p, (_, err) in zip(procs, outputs, strict=True):
            assert p.returncode == 0, err.decode()
        flat = [r for out, _ in outputs for r in json.loads(out)]
        assert sorted(flat) == sorted(runs), "every run claimed exactly once across processes"
        owners: dict[str, str] = {}
        for run_id in runs:
            run = await store.get_run(run_id)
            assert run.status is RunStatus.RUNNING
            owners[run_id] = run.lease_owner or ""
        for i, (out, _) in enumerate(outputs):
            assert all(owners[r] == f"p{i}" for r in json.loads(out))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        await store.close()


async def test_a_batch_claim_is_one_span_naming_its_runs_and_an_idle_one_none(
    tmp_path: Path,
) -> None:
    pytest.importorskip("opentelemetry.sdk")
    from golem.durable.store.sqlite import SQLiteStore
    from tests.otel_support import instrumented

    with instrumented() as exporter:
        store = await SQLiteStore.open(tmp_path / "t.db")
        try:
            assert await store.claim_ready_many("w", 30, limit=4) == []
            ids = [await _ready(store) for _ in range(2)]
            await store.claim_ready_many("w", 30, limit=4)
        finally:
            await store.close()
    spans = [s for s in exporter.get_finished_spans() if s.name.endswith("claim_ready_many")]
    assert len(spans) == 1, "the idle claim left no span"
    attrs = dict(spans[0].attributes or {})
    assert list(attrs["golem.run.ids"]) == ids  # type: ignore[arg-type]
    assert attrs["golem.durable.worker.id"] == "w"
    assert attrs["db.response.returned_rows"] == 2


async def test_cancelled_batch_claims_take_all_of_their_runs_or_none(store: Store) -> None:
    """Batch claims cancelled at random await points: a run is either still READY with no
    claim audited, or RUNNING with exactly one claim; nothing is lost or claimed twice."""
    rng = random.Random(7)
    ids = [await _ready(store) for _ in range(30)]
    for _ in range(40):
        task = asyncio.ensure_future(store.claim_ready_many("w", 30, limit=rng.randint(1, 3)))
        for _ in range(rng.randint(0, 6)):
            await asyncio.sleep(0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    await store.claim_ready_many("w", 30, limit=100)  # uncancelled: takes what is left
    for run_id in ids:
        run = await store.get_run(run_id)
        claims = [e for e in await store.audit(run_id) if e.action is AuditAction.CLAIMED]
        assert run.status is RunStatus.RUNNING, "every run claimed by the end"
        assert len(claims) == 1, f"claimed once, got {len(claims)}"
    assert await store.claim_ready_many("w", 30, limit=100) == []


async def test_a_worker_lists_only_the_runs_it_holds(store: Store) -> None:
    """`list_runs_page(lease_owner=...)`: how a worker finds the runs of a claim whose
    answer was lost without reading every running run's history (ADR 0045)."""
    ids = [await _ready(store) for _ in range(4)]
    mine = await store.claim_ready_many("w1", 30, limit=2, now=T0)
    theirs = await store.claim_ready_many("w2", 30, limit=2, now=T0)

    page = await store.list_runs_page(status=RunStatus.RUNNING, lease_owner="w1", limit=10)

    assert [r.id for r in page.items] == [c.run.id for c in mine] == ids[:2]
    assert {c.run.id for c in theirs} == set(ids[2:])
    assert (await store.list_runs_page(lease_owner="nobody")).items == []
