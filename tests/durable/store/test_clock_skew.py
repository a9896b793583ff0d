"""A worker on a machine whose clock is ten minutes off, on PostgreSQL (ADR 0056)."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from golem.durable.store import RunStatus
from golem.durable.store.postgres import PostgresStore
from tests.support.durable.backends import Backend, backend_for
from tests.support.durable.procs import eventually, spawn_worker, stop_workers, worker_logs
from tests.support.durable.worker_app import approved_run, registry

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL is a POSIX signal"),
]

SKEW = 600.0


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[Backend]:
    with backend_for("postgres", tmp_path) as b:
        yield b


@pytest.mark.parametrize("skew", [-SKEW, SKEW], ids=["behind", "ahead"])
async def test_a_worker_off_by_ten_minutes_leases_on_the_servers_clock(
    backend: Backend, tmp_path: Path, skew: float
) -> None:
    """Behind: its live lease stays live by the server's clock (a right clock's sweep leaves it)
    and both calls complete. Ahead: killed, it leaves a lease of its own length, not ten
    minutes more, which the sweep takes once it ran out."""
    exec_dir = tmp_path / "exec"
    exec_dir.mkdir()
    store = await backend.open()
    assert isinstance(store, PostgresStore)
    procs = []
    try:
        first = store.clock()  # counted on from the server's reading, in UTC
        assert store.clock() >= first
        assert first.utcoffset() == timedelta(0)
        deps = {"exec_dir": str(exec_dir), "block": True}
        run = await approved_run(store, registry(), "skew", 2, deps)
        lease = 30 if skew < 0 else 1
        worker = spawn_worker(
            backend, tmp_path, "w", lease_seconds=lease, sweep_interval=3600, skew_seconds=skew
        )
        procs.append(worker)
        for call in ("skew-0", "skew-1") if skew < 0 else ("skew-0",):

            async def started(call: str = call) -> bool:
                return (exec_dir / f"{call}.started").exists() or worker.poll() is not None

            await eventually(started, 60, f"{call} to start")
            assert worker.poll() is None, worker_logs(tmp_path)
            if skew > 0:
                os.kill(worker.pid, signal.SIGKILL)
            held = await store.get_run(run.id)
            assert held.lease_expires_at is not None
            if skew < 0:
                assert held.lease_expires_at > store.clock(), "the lease is live by the server"
                assert await store.sweep_interrupted() == [], "a right clock finds it live"
                (exec_dir / f"{call}.release").touch()
            else:
                assert held.lease_expires_at < store.clock() + timedelta(seconds=SKEW / 2)

        async def ended() -> bool:
            if skew > 0:
                return run.id in await store.sweep_interrupted()
            return (await store.get_run(run.id)).status is RunStatus.COMPLETED

        await eventually(ended, 60, "the run to complete, or the dead worker's lease to run out")
        status = RunStatus.COMPLETED if skew < 0 else RunStatus.INTERRUPTED
        assert (await store.get_run(run.id)).status is status
        if skew < 0:
            for call in ("skew-0", "skew-1"):
                assert len((exec_dir / call).read_text().splitlines()) == 1
    finally:
        for call in ("skew-0", "skew-1"):
            (exec_dir / f"{call}.release").touch()
        stop_workers(procs, tmp_path)
        await store.close()
