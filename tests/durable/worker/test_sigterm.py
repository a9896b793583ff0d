"""`golem worker` told to stop mid-resume, as a process manager does (SIGTERM)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from golem.durable.store import RunStatus, open_store
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


@pytest.mark.parametrize("signals", [1, 2], ids=["drains", "second-cancels"])
async def test_sigterm_drains_the_run_in_flight_and_a_second_leaves_it_to_the_sweep(
    tmp_path: Path, exec_dir: Path, signals: int
) -> None:
    db = f"sqlite:///{tmp_path / 'term.db'}"
    store = await open_store(db)
    proc = None
    log = tmp_path / "worker.log"
    try:
        deps = {"exec_dir": str(exec_dir), "block": True}
        run_id = (await approved_run(store, registry(), "term", 1, deps)).id
        proc = _worker(db, log)

        async def started() -> bool:
            return (exec_dir / "term-0.started").exists() or proc.poll() is not None

        async def cancelled() -> bool:
            if "cancelled its in-flight runs" in log.read_text() or proc.poll() is not None:
                return True
            # the first signal stops claiming; the next one, once the first was handled
            # (signals sent together may arrive as one), cancels
            proc.send_signal(signal.SIGTERM)
            return False

        async def exited() -> bool:
            return proc.poll() is not None

        async def swept() -> bool:
            return run_id in await store.sweep_interrupted()

        await eventually(started, 60, "the approved call to start")
        if signals == 1:
            proc.send_signal(signal.SIGTERM)
        else:
            await eventually(cancelled, 60, "the worker to cancel its in-flight resume")
            run = await store.get_run(run_id)
            assert (run.status, run.lease_owner) == (RunStatus.RUNNING, "term"), "leased still"
        (exec_dir / "term-0.release").touch()  # the tool's thread cannot be cancelled
        await eventually(exited, 60, "the worker process to exit")
        assert proc.returncode == 0, log.read_text()
        if signals == 1:
            assert "golem: worker term stopped" in log.read_text()
        else:
            await eventually(swept, 60, "the lease to run out and the sweep to mark the run")
        status = RunStatus.COMPLETED if signals == 1 else RunStatus.INTERRUPTED
        assert (await store.get_run(run_id)).status is status
        assert len((exec_dir / "term-0").read_text().splitlines()) == 1
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        await store.close()
