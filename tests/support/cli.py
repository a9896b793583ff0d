"""Helpers the CLI tests share: the in-process CLI, seeded stores, `golem` subprocesses."""

from __future__ import annotations

import asyncio
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from golem.cli.commands import build_app
from golem.durable.store import Decision, RunRecord, open_store
from golem.durable.worker import start_run
from tests.support.agents import build_registry

ROOT = Path(__file__).resolve().parents[2]
WAIT = 60.0  # a guard against a hung process, not a duration the test asserts
runner = CliRunner()


def golem(*args: str, env: dict[str, str] | None = None) -> Any:
    """Run the `golem` CLI in-process (wide columns) and return its result."""
    wide = {"COLUMNS": "200", **(env or {})}  # no wrapping inside table cells
    return runner.invoke(build_app(), list(args), env=wide, catch_exceptions=False)


def seed(db: str, *agents: str, decide: bool = False) -> list[RunRecord]:
    """Start runs of `agents` into the store at `db` (deciding every call when asked)."""

    async def go() -> list[RunRecord]:
        store = await open_store(db)
        try:
            runs = []
            for agent in agents:
                run = await start_run(store, build_registry(), agent, "go", started_by="seed")
                if decide:
                    for c in run.calls:
                        d = (
                            Decision.approve()
                            if c.kind.value == "approval"
                            else Decision.external("v")
                        )
                        await store.decide(run.id, c.call_id, d, decided_by="seed")
                runs.append(run)
            return runs
        finally:
            await store.close()

    return asyncio.run(go())


def load(db: str, run_id: str) -> RunRecord:
    """The run `run_id` as the store at `db` holds it."""

    async def go() -> RunRecord:
        store = await open_store(db)
        try:
            return await store.get_run(run_id)
        finally:
            await store.close()

    return asyncio.run(go())


@dataclass
class Running:
    """A `golem` subprocess and the lines of its stdout, read by a thread."""

    proc: subprocess.Popen[str]
    lines: queue.Queue[str]
    reader: threading.Thread

    def next_line(self) -> str:
        return self.lines.get(timeout=WAIT)

    def stop(self) -> str:
        """SIGINT, wait for the exit, and return everything it printed not yet read."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.reader.join(timeout=WAIT)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        out = []
        while not self.lines.empty():
            out.append(self.lines.get())
        return "".join(out)


@contextmanager
def golem_process(*args: str, env: dict[str, str] | None = None) -> Iterator[Running]:
    """`golem ARGS` in a subprocess (repository root as cwd), stopped with SIGINT at the end.

    Its stderr (uvicorn's log) goes to a temp file, shown when the test fails.
    """
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200", **(env or {})}
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(
            [sys.executable, "-c", "from golem.cli.commands import main; main()", *args],
            cwd=ROOT,
            env=full_env,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
        lines: queue.Queue[str] = queue.Queue()

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.put(line)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        running = Running(proc, lines, reader)
        try:
            yield running
        except BaseException:
            log.seek(0)
            sys.stderr.write(log.read())
            raise
        finally:
            running.stop()


def wait_for(predicate: Any, what: str) -> Any:
    """Poll `predicate` until it is truthy and return its value; fail after WAIT seconds."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")
