"""A worker process killed mid-resume: the approved call never runs twice, the run is reported."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

from golem.durable.store import AuditAction, Decision, RunStatus
from golem.durable.worker import Worker, start_run
from tests.support.durable.backends import Backend
from tests.support.durable.procs import eventually, spawn_worker, stop_workers, worker_logs
from tests.support.durable.worker_app import prompt_for, registry


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


async def test_a_killed_worker_leaves_the_run_interrupted_and_the_call_run_once(
    backend: Backend, tmp_path: Path
) -> None:
    exec_dir = tmp_path / "exec"
    exec_dir.mkdir()
    store = await backend.open()
    procs = []
    try:
        reg = registry()
        run = await start_run(
            store,
            reg,
            "acts",
            prompt_for("crash", 1),
            deps_ref={"exec_dir": str(exec_dir), "block": True},
            started_by="alice",
        )
        await store.decide(run.id, "crash-0", Decision.approve(), decided_by="bob")

        doomed = spawn_worker(backend, tmp_path, "doomed", lease_seconds=1, sweep_interval=3600)
        procs.append(doomed)

        async def tool_started() -> bool:
            return (exec_dir / "crash-0.started").exists() or doomed.poll() is not None

        await eventually(tool_started, 60, "the approved call to start executing")
        assert doomed.poll() is None, worker_logs(tmp_path)
        os.kill(doomed.pid, signal.SIGKILL)
        assert doomed.wait(timeout=20) == -signal.SIGKILL
        (executed,) = _lines(exec_dir / "crash-0")
        assert executed.startswith(f"{doomed.pid} "), "the doomed process executed the call"
        assert (await store.get_run(run.id)).status is RunStatus.RUNNING

        # A surviving worker sweeps on every poll; it must never claim the run again.
        survivor = Worker(store, reg, worker_id="survivor", lease_seconds=1, sweep_interval=0)

        async def interrupted() -> bool:
            assert await asyncio.wait_for(survivor.run_once(), 10) is False
            return (await store.get_run(run.id)).status is RunStatus.INTERRUPTED

        await eventually(interrupted, 30, "the run to be marked interrupted")

        # Another worker process on the same database finds nothing to do either.
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
        assert len(_lines(exec_dir / "crash-0")) == 1, "the approved call ran exactly once"
        audit = await store.audit(run.id)
        assert [e.action for e in audit] == [
            AuditAction.CREATED,
            AuditAction.DECIDED,
            AuditAction.READY,
            AuditAction.CLAIMED,
            AuditAction.INTERRUPTED,
        ]
        assert audit[3].actor == "worker:doomed"
        assert (audit[4].actor, audit[4].detail["worker_id"]) == ("system:sweep", "doomed")
        changes = [e for e in await store.changes_since(0, 1000) if e.run_id == run.id]
        assert changes == audit, "the interruption reaches the global change feed"
    finally:
        (exec_dir / "crash-0.release").touch()
        stop_workers(procs, tmp_path)
        await store.close()
