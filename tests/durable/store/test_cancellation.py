"""No blocked event loop, and cancellation at any await point leaves the store consistent."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
from typing import Any

import pytest

from golem import new_id
from golem.durable.store import AuditAction, RunStatus
from golem.durable.store.sqlite import SQLiteStore
from tests.support.durable.backends import Backend
from tests.support.durable.chaos import all_runs
from tests.support.durable.procs import ROOT, eventually
from tests.support.durable.runs import approval, make_run

pytestmark = pytest.mark.loop


async def test_cancelling_store_calls_at_random_points_from_two_processes(
    backend: Backend,
) -> None:
    """1,000 operations from two processes, many cancelled mid-flight: all or nothing each."""
    store = await backend.open()  # creates the schema before the racers start
    spec = backend.spec()
    if backend.dsn is not None:  # the racers' connections, told apart from other tests'
        from psycopg.conninfo import make_conninfo

        spec["dsn"] = make_conninfo(backend.dsn, application_name=f"racer-{new_id()[:8]}")
    procs = [
        subprocess.Popen(  # noqa: ASYNC220 - started, then awaited in a thread
            [
                sys.executable,
                "-m",
                "tests.support.durable.cancel_app",
                json.dumps({"spec": spec, "prefix": f"p{k}", "ops": 500, "seed": k}),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for k in (1, 2)
    ]
    reports = []
    for p in procs:
        out, err = await asyncio.to_thread(p.communicate, timeout=300)
        assert p.returncode == 0, err.decode()
        reports.append(json.loads(out))
    try:
        for report in reports:
            assert report["errors"] == []
            assert report["final_ok"]
        runs = {r.id: r for r in await all_runs(store)}
        for report in reports:  # every operation that returned is stored
            assert set(report["saved"]) <= set(runs)
            for run_id, call in report["decided"]:
                assert runs[run_id].call(call).decision is not None
        for run in runs.values():  # every stored run is whole, and its audit matches it
            assert len(run.calls) == 2 or run.id.endswith("-final")
            entries = await store.audit(run.id)
            assert [e.action for e in entries][:1] == [AuditAction.CREATED]
            decided = {e.detail["call_id"] for e in entries if e.action is AuditAction.DECIDED}
            assert decided == {c.call_id for c in run.calls if c.decision is not None}
            ready = [e for e in entries if e.action is AuditAction.READY]
            if run.undecided:
                assert run.status is RunStatus.PENDING
                assert not ready
            else:
                assert run.status is RunStatus.READY
                assert len(ready) == 1
        assert sum(r.id.endswith("-final") for r in runs.values()) == 2
        await _no_lock_or_open_transaction(backend, spec)
    finally:
        await store.close()


async def _no_lock_or_open_transaction(backend: Backend, spec: dict[str, Any]) -> None:
    """Nobody holds SQLite's write lock; on PostgreSQL, the exited racers' sessions all end
    (none is left inside a transaction), whatever other tests' sessions do meanwhile."""
    if backend.kind == "sqlite":
        assert backend.path is not None
        conn = sqlite3.connect(backend.path, timeout=0, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")  # fails at once if anyone holds the write lock
            conn.execute("COMMIT")
        finally:
            conn.close()
        return
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    app = conninfo_to_dict(spec["dsn"])["application_name"]
    sql = "SELECT state FROM pg_stat_activity WHERE application_name = %s"

    async def ended() -> bool:
        with psycopg.connect(backend.dsn or "", autocommit=True) as conn:
            return not conn.execute(sql, (app,)).fetchall()

    await eventually(ended, 30, "the racers' sessions to end")


async def test_list_runs_over_big_histories_leaves_the_event_loop_running(
    backend: Backend,
) -> None:
    """A 1 ms ticker keeps ticking while a listing reads megabytes of history."""
    store = await backend.open()
    try:
        history = json.dumps([{"role": "user", "content": "x" * 400_000}])
        for _ in range(30):
            await store.save_pending(make_run(approval("c1"), history=history))
        ticks = 0  # ticks that ran while the listing was still in progress
        listing = asyncio.ensure_future(store.list_runs(limit=500))
        await asyncio.sleep(0)  # the listing starts
        while not listing.done():
            ticks += 1
            await asyncio.sleep(0.001)
        runs = await listing
        assert len(runs) == 30
        assert all(len(r.history) > 400_000 for r in runs)
        assert ticks >= 2  # the loop kept turning during the call
    finally:
        await store.close()


async def test_a_cancelled_close_still_releases_the_sqlite_file(tmp_path: Any) -> None:
    store = await SQLiteStore.open(tmp_path / "x.db")
    await store.save_pending(make_run())
    closing = asyncio.ensure_future(store.close())
    await asyncio.sleep(0)
    closing.cancel()
    await asyncio.gather(closing, return_exceptions=True)
    # the store's threads finish their queue and close their connections on their own
    conn = sqlite3.connect(tmp_path / "x.db", timeout=30, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("COMMIT")
    finally:
        conn.close()
