"""A worker process killed (SIGKILL) or stalled past its lease (SIGSTOP … SIGCONT) inside an approved
call: that call ran once, the run's next approved call never runs, the run ends interrupted."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

from golem.durable.store import AuditAction, Decision, RunStatus
from golem.durable.worker import Worker, start_run
from tests.support.durable.backends import Backend
from tests.support.durable.procs import eventually, spawn_worker, stop_workers, worker_logs
from tests.support.durable.worker_app import prompt_for, registry

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.parametrize("how", ["kill", "stall"])
async def test_a_worker_killed_or_stalled_mid_call_leaves_the_run_interrupted_and_the_call_run_once(
    backend: Backend, tmp_path: Path, how: str
) -> None:
    exec_dir = tmp_path / "exec"
    exec_dir.mkdir()
    store = await backend.open()
    procs = []
    try:
        reg = registry()
        deps = {"exec_dir": str(exec_dir), "block": True}
        run = await start_run(
            store, reg, "acts", prompt_for("x", 2), deps_ref=deps, started_by="alice"
        )
        for call in ("x-0", "x-1"):
            await store.decide(run.id, call, Decision.approve(), decided_by="bob")
        doomed = spawn_worker(backend, tmp_path, "doomed", lease_seconds=1, sweep_interval=3600)
        procs.append(doomed)

        async def started() -> bool:
            return (exec_dir / "x-0.started").exists() or doomed.poll() is not None

        await eventually(started, 60, "the approved call to start executing")
        assert doomed.poll() is None, worker_logs(tmp_path)
        # a surviving worker sweeps on every poll; it must never claim the run again
        survivor = Worker(store, reg, worker_id="survivor", lease_seconds=1, sweep_interval=0)

        async def interrupted() -> bool:
            assert await asyncio.wait_for(survivor.run_once(), 10) is False
            return (await store.get_run(run.id)).status is RunStatus.INTERRUPTED

        if how == "kill":
            os.kill(doomed.pid, signal.SIGKILL)
            assert doomed.wait(timeout=20) == -signal.SIGKILL
            assert (await store.get_run(run.id)).status is RunStatus.RUNNING
            await eventually(interrupted, 30, "the run to be marked interrupted")
        else:
            os.kill(doomed.pid, signal.SIGSTOP)
            try:
                await eventually(interrupted, 60, "the stalled worker's lease to be swept")
                (exec_dir / "x-0.release").touch()
            finally:
                os.kill(doomed.pid, signal.SIGCONT)

            async def gave_up() -> bool:
                return "abandoned" in worker_logs(tmp_path)

            await eventually(gave_up, 60, "the worker to report the run abandoned")
        # another worker process on the same database finds nothing to do either
        late = spawn_worker(backend, tmp_path, "late", lease_seconds=1, sweep_interval=0)
        procs.append(late)

        async def late_up() -> bool:
            return (tmp_path / "late.ready").exists() or late.poll() is not None

        await eventually(late_up, 60, "the late worker to start")
        for _ in range(10):
            assert await survivor.run_once() is False
        assert stop_workers([late], tmp_path) == [0], worker_logs(tmp_path)

        got = await store.get_run(run.id)
        assert got.status is RunStatus.INTERRUPTED
        assert got.outcome is not None
        assert 'worker "doomed" lost its lease' in got.outcome.error
        (executed,) = _lines(exec_dir / "x-0")
        assert executed.startswith(f"{doomed.pid} "), "the doomed process ran the call, once"
        assert not _lines(exec_dir / "x-1"), "no approved call ran after the interrupted mark"
        audit = await store.audit(run.id)
        assert [e.action for e in audit] == [
            AuditAction.CREATED,
            AuditAction.DECIDED,
            AuditAction.DECIDED,
            AuditAction.READY,
            AuditAction.CLAIMED,
            AuditAction.INTERRUPTED,
        ]
        assert audit[4].actor == "worker:doomed"
        assert (audit[5].actor, audit[5].detail["worker_id"]) == ("system:sweep", "doomed")
        changes = [e for e in await store.changes_since(0, 1000) if e.run_id == run.id]
        assert changes == audit, "the interruption reaches the global change feed"
    finally:
        for call in ("x-0", "x-1"):
            (exec_dir / f"{call}.release").touch()
        stop_workers(procs, tmp_path)
        await store.close()
