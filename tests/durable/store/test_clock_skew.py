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


async def test_the_server_clock_is_the_stores_clock(backend: Backend) -> None:
    store = await backend.open()
    assert isinstance(store, PostgresStore)
    try:
        before = await store.claim_ready("w", 30)  # a transaction: the clock was read
        assert before is None
        anchor = store._server_clock
        assert anchor is not None
        # counted on from the server's reading: it moves forward with elapsed time
        first = store.clock()
        assert store.clock() >= first
        assert first.utcoffset() == timedelta(0)
    finally:
        await store.close()


async def test_a_worker_whose_clock_is_behind_keeps_a_live_lease_live(
    backend: Backend, tmp_path: Path
) -> None:
    exec_dir = tmp_path / "exec"
    exec_dir.mkdir()
    store = await backend.open()
    procs = []
    try:
        deps = {"exec_dir": str(exec_dir), "block": True}
        run = await approved_run(store, registry(), "late", 2, deps)
        late = spawn_worker(
            backend, tmp_path, "late", lease_seconds=30, sweep_interval=3600, skew_seconds=-SKEW
        )
        procs.append(late)
        for call in ("late-0", "late-1"):

            async def started(call: str = call) -> bool:
                return (exec_dir / f"{call}.started").exists() or late.poll() is not None

            await eventually(started, 60, f"{call} to start")
            assert late.poll() is None, worker_logs(tmp_path)
            held = await store.get_run(run.id)
            assert held.lease_expires_at is not None
            assert held.lease_expires_at > store.clock(), "the lease is live by the server"
            assert await store.sweep_interrupted() == [], "a right clock finds it live"
            (exec_dir / f"{call}.release").touch()

        async def completed() -> bool:
            return (await store.get_run(run.id)).status is RunStatus.COMPLETED

        await eventually(completed, 60, "the run to complete")
        for call in ("late-0", "late-1"):
            assert len((exec_dir / call).read_text().splitlines()) == 1
    finally:
        for call in ("late-0", "late-1"):
            (exec_dir / f"{call}.release").touch()
        stop_workers(procs, tmp_path)
        await store.close()


async def test_a_dead_worker_whose_clock_is_ahead_leaves_a_lease_of_its_length(
    backend: Backend, tmp_path: Path
) -> None:
    exec_dir = tmp_path / "exec"
    exec_dir.mkdir()
    store = await backend.open()
    procs = []
    try:
        deps = {"exec_dir": str(exec_dir), "block": True}
        run = await approved_run(store, registry(), "early", 1, deps)
        early = spawn_worker(
            backend, tmp_path, "early", lease_seconds=1, sweep_interval=3600, skew_seconds=SKEW
        )
        procs.append(early)

        async def started() -> bool:
            return (exec_dir / "early-0.started").exists() or early.poll() is not None

        await eventually(started, 60, "the approved call to start")
        assert early.poll() is None, worker_logs(tmp_path)
        os.kill(early.pid, signal.SIGKILL)
        held = await store.get_run(run.id)
        assert held.lease_expires_at is not None
        assert held.lease_expires_at < store.clock() + timedelta(seconds=SKEW / 2)

        async def swept() -> bool:
            return run.id in await store.sweep_interrupted()

        await eventually(swept, 60, "the dead worker's lease to run out")
        assert (await store.get_run(run.id)).status is RunStatus.INTERRUPTED
    finally:
        (exec_dir / "early-0.release").touch()
        stop_workers(procs, tmp_path)
        await store.close()
