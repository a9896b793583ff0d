"""Helpers for tests that run workers in separate processes (`tests.support.durable.worker_app`)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

from tests.support.durable.backends import Backend

__all__ = ["ROOT", "eventually", "spawn_worker", "stop_workers", "worker_logs"]

ROOT = Path(__file__).resolve().parents[3]
"""The repository root (the working directory of worker processes)."""


def spawn_worker(
    backend: Backend,
    tmp_path: Path,
    worker_id: str,
    *,
    lease_seconds: float,
    sweep_interval: float,
    skew_seconds: float = 0.0,
) -> subprocess.Popen[bytes]:
    """Start `python -m tests.support.durable.worker_app` on `backend`; it stops when
    `tmp_path/stop` exists."""
    config = {
        "spec": backend.spec(),
        "worker_id": worker_id,
        "lease_seconds": lease_seconds,
        "sweep_interval": sweep_interval,
        "stop_file": str(tmp_path / "stop"),
        "skew_seconds": skew_seconds,
    }
    log = open(tmp_path / f"{worker_id}.log", "wb")  # noqa: SIM115 - owned by the child
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.support.durable.worker_app", json.dumps(config)],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    finally:
        log.close()


def stop_workers(procs: list[subprocess.Popen[bytes]], tmp_path: Path) -> list[int]:
    """Ask every worker to stop, wait (bounded), kill stragglers; return the exit codes."""
    (tmp_path / "stop").touch()
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=20))
        except subprocess.TimeoutExpired:
            p.kill()
            codes.append(p.wait())
    return codes


def worker_logs(tmp_path: Path) -> str:
    """Every worker's output, for assertion messages."""
    return "\n".join(f"--- {p.name}\n{p.read_text()}" for p in sorted(tmp_path.glob("*.log")))


async def eventually(
    condition: Callable[[], Awaitable[bool]], timeout: float, what: str = "condition"
) -> None:
    """Poll `condition` every 20 ms until it holds; fail after `timeout` seconds."""
    try:
        async with asyncio.timeout(timeout):
            while not await condition():  # noqa: ASYNC110 - the state lives in a database
                await asyncio.sleep(0.02)
    except TimeoutError:
        raise AssertionError(f"timed out after {timeout}s waiting for {what}") from None
