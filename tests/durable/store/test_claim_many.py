"""Store contract: `claim_ready_many`, the batched claim of a worker with several free slots."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from golem.durable.store import AuditAction, Decision, LeaseLost, Outcome, RunStatus, Store
from tests.support.durable.backends import Backend
from tests.support.durable.procs import ROOT, eventually
from tests.support.durable.runs import T0, approval, later, make_run


async def _ready(store: Store, agent: str = "ops") -> str:
    run = await store.save_pending(make_run(approval("c1"), approval("c2"), agent=agent))
    await store.decide(run.id, "c1", Decision.approve(), decided_by="bob")
    await store.decide(run.id, "c2", Decision.deny("no"), decided_by="bob")
    return run.id


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


async def test_agents_filter_and_bad_arguments(store: Store) -> None:
    ops = await _ready(store, agent="ops")
    billing = await _ready(store, agent="billing")
    assert await store.claim_ready_many("w", 30, limit=5, agents=[]) == []
    got = await store.claim_ready_many("w", 30, limit=5, agents=["billing"])
    assert [c.run.id for c in got] == [billing]
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="limit must be an integer >= 1"):
            await store.claim_ready_many("w", 30, limit=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="worker_id"):
        await store.claim_ready_many("", 30, limit=2)
    with pytest.raises(ValueError, match="lease_seconds"):
        await store.claim_ready_many("w", 0, limit=2)
    assert (await store.get_run(ops)).status is RunStatus.READY, "a refused claim took nothing"


async def test_concurrent_batch_claims_in_one_process_never_share_a_run(backend: Backend) -> None:
    """Four store instances (each with its own database threads and connections) claim
    batches at once from eight tasks, mixed with single claims."""
    stores = [await backend.open() for _ in range(4)]
    try:
        runs = {await _ready(stores[0]) for _ in range(40)}

        async def claimer(i: int) -> list[str]:
            got: list[str] = []
            store = stores[i % 4]
            while True:
                if i % 3 == 0:
                    one = await store.claim_ready(f"w{i}", 30)
                    batch = [] if one is None else [one]
                else:
                    batch = await store.claim_ready_many(f"w{i}", 30, limit=1 + i % 5)
                if not batch:
                    return got
                got.extend(c.run.id for c in batch)

        claimed = await asyncio.gather(*(claimer(i) for i in range(8)))
        flat = [r for got in claimed for r in got]
        assert sorted(flat) == sorted(runs), "every run claimed exactly once, none lost"
        for run_id in runs:
            audit = await stores[0].audit(run_id)
            assert sum(e.action is AuditAction.CLAIMED for e in audit) == 1
    finally:
        for s in stores:
            await s.close()


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


async def test_batch_claims_from_several_processes_never_share_a_run(
    backend: Backend, tmp_path: Path
) -> None:
    store = await backend.open()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        runs = {await _ready(store) for _ in range(45)}
        go = tmp_path / "go"
        procs.extend(_spawn_claimer(backend, f"p{i}", 2 + 2 * i, go) for i in range(3))

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
    import random

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
