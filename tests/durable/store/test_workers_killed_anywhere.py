"""Worker processes on one database SIGKILLed at chosen and at random points (PostgreSQL: deep)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import signal
import sqlite3
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from golem.durable.store import Decision, RunStatus, Store
from tests.support.crash import ROUNDS, RUNS_PER_ROUND, SEEDS, Fleet, crash_round, kill_plan, settle
from tests.support.durable.backends import backend_for
from tests.support.durable.chaos import Summary, check_invariants
from tests.support.durable.procs import ROOT, eventually, worker_logs

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL is a POSIX signal")


@contextlib.asynccontextmanager
async def _fleet(tmp_path: Path, kind: str) -> AsyncIterator[tuple[Store, Fleet]]:
    """A store of `kind` and the fleet of killable worker processes on it; every process is
    killed and reaped at the end."""
    exec_dir = tmp_path / "ledger"
    exec_dir.mkdir()
    with backend_for(kind, tmp_path) as b:
        store = await b.open()
        pg = {"dsn": b.dsn, "schema": b.schema} if kind == "postgres" else None
        fleet = Fleet(tmp_path, tmp_path / "golem.db", exec_dir, pg)  # type: ignore[arg-type]
        try:
            yield store, fleet
        finally:
            for w in list(fleet.procs):
                fleet.kill(w)
            for p in fleet.procs.values():
                p.wait()
            await store.close()


async def _checked(store: Store, fleet: Fleet, approved: dict[str, str]) -> Summary:
    for ledger in fleet.exec_dir.iterdir():  # killed between creating it and the write:
        if ledger.stat().st_size == 0:  # the side effect did not happen
            ledger.unlink()
    summary = await check_invariants(store, fleet.exec_dir, approved)
    assert summary.statuses[RunStatus.COMPLETED] > 0, summary
    return summary


@pytest.mark.timeout(60 + 30 * ROUNDS)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(
    "kind", ["sqlite", pytest.param("postgres", marks=[pytest.mark.postgres, pytest.mark.deep])]
)
async def test_workers_killed_anywhere_never_run_an_approved_call_twice(
    tmp_path: Path, kind: str, seed: int
) -> None:
    """Worker processes SIGKILLed at a chosen point (claim, renewal, tool, finish, sweep, the n-th
    statement, inside a COMMIT) or from outside, round after round, on SQLite or PostgreSQL."""
    rng = random.Random(seed if kind == "sqlite" else seed * 13)
    approved: dict[str, str] = {}
    killed: Counter[str] = Counter()
    async with _fleet(tmp_path, kind) as (store, fleet):
        for r in range(ROUNDS):
            await crash_round(store, fleet, rng, f"{kind[0]}{seed}r{r}", approved, killed)
        summary = await _checked(store, fleet, approved)
    assert sum(killed.values()) > 0, "no worker was killed: the test proved nothing"
    print(f"seed {seed}: kills {dict(killed)}; runs {dict(summary.statuses)}")


def _spawn_service(fleet: Fleet, name: str, config: dict[str, Any]) -> subprocess.Popen[bytes]:
    """A `tests.support.durable.crash_service` process on the fleet's database."""
    log = open(fleet.tmp_path / f"service-{name}.log", "wb")  # noqa: SIM115 - the child's
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.support.durable.crash_service", json.dumps(config)],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    finally:
        log.close()


async def _service_round(
    store: Store, fleet: Fleet, rng: random.Random, name: str, killed: Counter[str]
) -> None:
    """Two workers with kill plans and a service-like process that starts and approves
    runs while following the change log, killed at a random SQL statement or from
    outside at a random moment; the runs it left undecided are approved here (as an
    operator would in the inbox); then the round settles as `_round`'s does."""
    stop_file = fleet.tmp_path / f"stop-{name}"
    for _ in range(2):
        fleet.spawn(stop_file, kill_plan(rng))
    inside = rng.random() < 0.6
    config = {
        "path": str(fleet.db),
        "exec_dir": str(fleet.exec_dir),
        "name": name,
        "runs": RUNS_PER_ROUND,
        "deps": [{"slow": 0.5} if rng.random() < 0.3 else {} for _ in range(RUNS_PER_ROUND)],
        "kill": {"point": "statement", "nth": rng.randint(1, 300)} if inside else None,
    }
    service = _spawn_service(fleet, name, config)
    loop = asyncio.get_running_loop()
    cut = None if inside else loop.time() + rng.uniform(0.05, 1.5)

    async def service_gone() -> bool:
        nonlocal cut
        if cut is not None and loop.time() >= cut and service.poll() is None:
            service.send_signal(signal.SIGKILL)
            cut = None
        return service.poll() is not None

    await eventually(service_gone, 120, f"the service of round {name} to end")
    assert service.returncode in (0, -signal.SIGKILL), (
        f"service exited {service.returncode}\n{worker_logs(fleet.tmp_path)}"
    )
    if service.returncode:
        killed["service"] += 1
        # restarted, as a supervisor would: it starts a few more runs, killed no more
        config.update(name=f"{name}b", runs=2, kill=None)
        again = _spawn_service(fleet, f"{name}b", config)
        code = await asyncio.to_thread(again.wait)
        assert code == 0, f"service exited {code}\n{worker_logs(fleet.tmp_path)}"
    for run in await store.list_runs(status=RunStatus.PENDING, limit=1000):
        await store.decide(run.id, run.calls[0].call_id, Decision.approve(), decided_by="op")
    outside = loop.time() + rng.uniform(0.1, 1.5) if rng.random() < 0.5 else None
    await settle(store, fleet, rng, name, killed, stop_file, outside)


def _no_lock_held(db: Path) -> None:
    """The database file is sound and nobody holds a lock on it: `integrity_check` is ok,
    a write transaction starts without waiting, and a full checkpoint is not busy."""
    with contextlib.closing(sqlite3.connect(db, timeout=0, isolation_level=None)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        assert busy == 0, "a checkpoint found the database busy"


@pytest.mark.timeout(60 + 30 * ROUNDS)
@pytest.mark.parametrize("seed", SEEDS)
async def test_workers_and_a_service_killed_anywhere_leave_a_sound_database(
    tmp_path: Path, seed: int
) -> None:
    """Two worker processes and a service-like process (starting and approving runs,
    following the change log) on one SQLite file, each SIGKILLed at random points, round
    after round: every run ends terminal, each approved call ran at most once (exactly
    once for a completed run), and once every process is gone the database passes
    `PRAGMA integrity_check` and no lock is left held."""
    rng = random.Random(seed * 7)
    killed: Counter[str] = Counter()
    async with _fleet(tmp_path, "sqlite") as (store, fleet):
        for r in range(ROUNDS):
            await _service_round(store, fleet, rng, f"s{seed}v{r}", killed)
        runs = await store.list_runs(limit=10_000)
        summary = await _checked(store, fleet, {run.id: run.calls[0].call_id for run in runs})
    db = tmp_path / "golem.db"
    _no_lock_held(db)
    assert killed["service"] > 0, f"the service was never killed: {dict(killed)}"
    print(f"seed {seed}: kills {dict(killed)}; runs {dict(summary.statuses)}")
