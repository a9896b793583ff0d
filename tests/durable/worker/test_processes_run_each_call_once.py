"""Many concurrent deciders and several worker processes on one database."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from pathlib import Path

import pytest

from golem.durable.store import (
    AuditAction,
    Decision,
    DecisionConflict,
    DecisionKind,
    RunNotPending,
    RunStatus,
    Store,
)
from golem.durable.worker import start_run
from tests.support.durable.backends import Backend
from tests.support.durable.procs import eventually, spawn_worker, stop_workers, worker_logs
from tests.support.durable.worker_app import prompt_for, registry

pytestmark = pytest.mark.loop

RUNS = 24
CALLS_PER_RUN = 2
WORKERS = 3
DECIDERS = 6


def _wanted(run_index: int, call_index: int) -> Decision:
    if (run_index + call_index) % 3 == 0:
        return Decision.deny(f"no for {run_index}/{call_index}")
    return Decision.approve()


def _opposite(d: Decision) -> Decision:
    return Decision.deny("opposite") if d.kind is DecisionKind.APPROVE else Decision.approve()


async def test_each_approved_call_runs_once_and_each_run_resumes_once(
    backend: Backend, tmp_path: Path
) -> None:
    exec_dir = tmp_path / "exec"
    exec_dir.mkdir()
    store = await backend.open()
    procs = []
    try:
        reg = registry()
        runs = [
            await start_run(
                store,
                reg,
                "acts",
                prompt_for(f"r{i}", CALLS_PER_RUN),
                deps_ref={"exec_dir": str(exec_dir)},
                started_by="starter",
            )
            for i in range(RUNS)
        ]
        assert all(r.status is RunStatus.PENDING for r in runs)
        procs = [
            spawn_worker(backend, tmp_path, f"w{k}", lease_seconds=30, sweep_interval=0.5)
            for k in range(WORKERS)
        ]

        async def workers_up() -> bool:
            return all((tmp_path / f"w{k}.ready").exists() for k in range(WORKERS))

        await eventually(workers_up, 60, "the worker processes to start")

        outcomes: Counter[str] = Counter()

        async def decider(k: int) -> None:
            own = await backend.open()
            try:
                order = [(i, j) for i in range(RUNS) for j in range(CALLS_PER_RUN)]
                random.Random(k).shuffle(order)
                for i, j in order:
                    wanted = _wanted(i, j)
                    # a third of the deciders disagree: first come, first recorded
                    decision = _opposite(wanted) if k % 3 == 2 else wanted
                    try:
                        await own.decide(
                            runs[i].id, f"r{i}-{j}", decision, decided_by=f"decider{k}"
                        )
                        outcomes["recorded-or-repeat"] += 1
                    except (DecisionConflict, RunNotPending):
                        outcomes["rejected"] += 1
            finally:
                await own.close()

        await asyncio.gather(*(decider(k) for k in range(DECIDERS)))
        assert sum(outcomes.values()) == DECIDERS * RUNS * CALLS_PER_RUN

        async def all_finished() -> bool:
            listed = await store.list_runs(limit=1000)
            return len(listed) == RUNS and all(r.status.terminal for r in listed)

        await eventually(all_finished, 120, "every run to finish")
        codes = stop_workers(procs, tmp_path)
        assert codes == [0] * WORKERS, worker_logs(tmp_path)
        await _check_exactly_once(store, runs=[r.id for r in runs], exec_dir=exec_dir)
    finally:
        stop_workers(procs, tmp_path)
        await store.close()


def _executions(exec_dir: Path) -> dict[str, list[str]]:
    """Call ID -> one line per execution (written by the tool in whichever process ran it)."""
    return {p.name: p.read_text().splitlines() for p in exec_dir.iterdir() if p.is_file()}


async def _check_exactly_once(store: Store, runs: list[str], exec_dir: Path) -> None:
    approved: set[str] = set()
    denied: set[str] = set()
    claimed_by: Counter[str] = Counter()
    audit_total = 0
    for run_id in runs:
        run = await store.get_run(run_id)
        assert run.status is RunStatus.COMPLETED, (run.id, run.status, run.outcome)
        assert run.outcome is not None
        assert run.outcome.output == "done"
        for call in run.calls:
            assert call.decision is not None
            (approved if call.decision.kind is DecisionKind.APPROVE else denied).add(call.call_id)
        audit = await store.audit(run_id)
        audit_total += len(audit)
        actions = Counter(e.action for e in audit)
        assert actions[AuditAction.CLAIMED] == 1, "each run is resumed exactly once"
        assert actions[AuditAction.COMPLETED] == 1
        assert actions[AuditAction.DECIDED] == CALLS_PER_RUN, "one recorded decision per call"
        assert actions[AuditAction.READY] == 1
        claimed_by[next(e.actor for e in audit if e.action is AuditAction.CLAIMED)] += 1

    assert len(approved) + len(denied) == len(runs) * CALLS_PER_RUN, "no call lost"
    executions = _executions(exec_dir)
    assert set(executions) == approved, "exactly the approved calls executed"
    assert {name: len(lines) for name, lines in executions.items()} == dict.fromkeys(approved, 1)
    assert sum(claimed_by.values()) == len(runs)
    print("claims per worker:", dict(claimed_by))
    # the global change feed holds exactly the per-run entries, in one gap-free order
    feed = []
    cursor = 0
    while page := await store.changes_since(cursor, limit=50):
        feed.extend(page)
        cursor = page[-1].id
    assert len(feed) == audit_total
    assert [e.id for e in feed] == sorted({e.id for e in feed})
