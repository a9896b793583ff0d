"""Fencing: a worker stalled past its lease (SIGSTOP … SIGCONT) executes nothing more."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from golem.durable.store import Decision, RunStatus
from golem.durable.worker import start_run
from tests.support.durable.backends import Backend
from tests.support.durable.procs import eventually, spawn_worker, stop_workers, worker_logs
from tests.support.durable.worker_app import prompt_for, registry

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="SIGSTOP/SIGCONT are POSIX signals")


async def test_a_stalled_worker_runs_no_approved_call_after_the_interrupted_mark(
    backend: Backend, tmp_path: Path
) -> None:
    exec_dir = tmp_path / "exec"
    exec_dir.mkdir()
    store = await backend.open()
    procs = []
    try:
        run = await start_run(
            store,
            registry(),
            "acts",
            prompt_for("stall", 2),
            deps_ref={"exec_dir": str(exec_dir), "block": True},
            started_by="alice",
        )
        for call in ("stall-0", "stall-1"):
            await store.decide(run.id, call, Decision.approve(), decided_by="bob")
        sleeper = spawn_worker(backend, tmp_path, "sleeper", lease_seconds=1, sweep_interval=3600)
        procs.append(sleeper)

        async def started() -> bool:
            return (exec_dir / "stall-0.started").exists() or sleeper.poll() is not None

        await eventually(started, 60, "the first approved call to start")
        assert sleeper.poll() is None, worker_logs(tmp_path)
        os.kill(sleeper.pid, signal.SIGSTOP)
        try:

            async def swept() -> bool:
                return run.id in await store.sweep_interrupted()

            await eventually(swept, 60, "the stalled worker's lease to run out and be swept")
            (exec_dir / "stall-0.release").touch()
        finally:
            os.kill(sleeper.pid, signal.SIGCONT)

        async def gave_up() -> bool:
            return "abandoned" in worker_logs(tmp_path)

        await eventually(gave_up, 60, "the worker to report the run abandoned")
        assert not (exec_dir / "stall-1").exists(), "no approved call ran after the mark"
        assert len((exec_dir / "stall-0").read_text().splitlines()) == 1
        assert (await store.get_run(run.id)).status is RunStatus.INTERRUPTED
    finally:
        (exec_dir / "stall-1.release").touch()
        stop_workers(procs, tmp_path)
        await store.close()
