"""`golem worker` told to stop mid-resume, as a process manager does (SIGTERM)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from golem.durable.store import RunStatus, Store, open_store
from tests.support.durable.procs import ROOT, eventually
from tests.support.durable.worker_app import approved_run, registry

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="SIGTERM handling is POSIX")


@pytest.fixture
def exec_dir(tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "exec"
    d.mkdir()
    yield d
    for release in ("term-0.release",):  # never leave a tool thread polling
        (d / release).touch()


def _worker(db: str, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-c", "from golem.cli.commands import main; main()", "worker",
             "--app", "tests.support.durable.worker_app:registry", "--db", db, "--poll", "0.05",
             "--lease", "1", "--id", "term"],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"},
        )  # fmt: skip


async def _started_run(store: Store, exec_dir: Path) -> str:
    deps = {"exec_dir": str(exec_dir), "block": True}
    return (await approved_run(store, registry(), "term", 1, deps)).id


async def _exited(proc: subprocess.Popen[bytes]) -> int:
    async def gone() -> bool:
        return proc.poll() is not None

    await eventually(gone, 60, "the worker process to exit")
    assert proc.returncode is not None
    return proc.returncode


async def test_one_sigterm_drains_the_run_in_flight(tmp_path: Path, exec_dir: Path) -> None:
    db = f"sqlite:///{tmp_path / 'term.db'}"
    store = await open_store(db)
    proc = None
    try:
        run_id = await _started_run(store, exec_dir)
        proc = _worker(db, tmp_path / "worker.log")

        async def started() -> bool:
            return (exec_dir / "term-0.started").exists() or proc.poll() is not None

        await eventually(started, 60, "the approved call to start")
        proc.send_signal(signal.SIGTERM)
        (exec_dir / "term-0.release").touch()
        assert await _exited(proc) == 0, (tmp_path / "worker.log").read_text()
        assert (await store.get_run(run_id)).status is RunStatus.COMPLETED
        assert "golem: worker term stopped" in (tmp_path / "worker.log").read_text()
        assert len((exec_dir / "term-0").read_text().splitlines()) == 1
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        await store.close()


async def test_a_second_sigterm_leaves_the_run_to_the_sweep(tmp_path: Path, exec_dir: Path) -> None:
    db = f"sqlite:///{tmp_path / 'term.db'}"
    store = await open_store(db)
    proc = None
    log = tmp_path / "worker.log"
    try:
        run_id = await _started_run(store, exec_dir)
        proc = _worker(db, log)

        async def started() -> bool:
            return (exec_dir / "term-0.started").exists() or proc.poll() is not None

        await eventually(started, 60, "the approved call to start")
        async def cancelled() -> bool:
            if "cancelled its in-flight runs" in log.read_text() or proc.poll() is not None:
                return True
            # the first signal stops claiming; the next one, once the first was handled
            # (signals sent together may arrive as one), cancels
            proc.send_signal(signal.SIGTERM)
            return False

        await eventually(cancelled, 60, "the worker to cancel its in-flight resume")
        run = await store.get_run(run_id)
        assert run.status is RunStatus.RUNNING, "held until its lease runs out"
        assert run.lease_owner == "term"
        (exec_dir / "term-0.release").touch()  # the tool's thread cannot be cancelled
        assert await _exited(proc) == 0, log.read_text()

        async def swept() -> bool:
            return run_id in await store.sweep_interrupted()

        await eventually(swept, 60, "the lease to run out and the sweep to mark the run")
        assert (await store.get_run(run_id)).status is RunStatus.INTERRUPTED
        assert len((exec_dir / "term-0").read_text().splitlines()) == 1
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        await store.close()
