"""The crash-test fleet the SQLite and PostgreSQL crash tests share: workers killed anywhere."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from golem.durable.store import Decision, RunStatus, Store
from golem.durable.worker import start_run
from tests.support.durable.crash_app import KILL_POINTS, registry
from tests.support.durable.procs import ROOT, eventually, worker_logs
from tests.support.durable.worker_app import prompt_for

SEEDS = [int(s) for s in os.environ.get("GOLEM_CRASH_SEEDS", "101,202").split(",")]
ROUNDS = int(os.environ.get("GOLEM_CRASH_ROUNDS", "3"))
RUNS_PER_ROUND = 6
LEASE = 1.0
OPEN = {RunStatus.PENDING, RunStatus.READY, RunStatus.RUNNING}


class Fleet:
    """The worker processes of one test, each with its log, its kill plan and its round."""

    def __init__(
        self, tmp_path: Path, db: Path, exec_dir: Path, pg: dict[str, str] | None = None
    ) -> None:
        self.tmp_path = tmp_path
        self.db = db
        self.exec_dir = exec_dir
        self.pg = pg
        """`{"dsn": …, "schema": …}`: the workers use that PostgreSQL store instead."""
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.plans: dict[str, dict[str, Any] | None] = {}
        self._n = 0

    def spawn(self, stop_file: Path, kill: dict[str, Any] | None) -> str:
        self._n += 1
        worker_id = f"w{self._n}"
        config = {
            "path": str(self.db),
            "exec_dir": str(self.exec_dir),
            "worker_id": worker_id,
            "lease_seconds": LEASE,
            "sweep_interval": 0.1,
            "concurrency": 2,
            "stop_file": str(stop_file),
            "kill": kill,
            **(self.pg or {}),
        }
        log = open(self.tmp_path / f"{worker_id}.log", "wb")  # noqa: SIM115 - the child's
        try:
            self.procs[worker_id] = subprocess.Popen(
                [sys.executable, "-m", "tests.support.durable.crash_app", json.dumps(config)],
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        finally:
            log.close()
        self.plans[worker_id] = kill
        return worker_id

    def live(self) -> list[str]:
        return [w for w, p in self.procs.items() if p.poll() is None]

    def reap(self) -> list[str]:
        """The workers that died since the last look (killed: any other exit fails)."""
        dead = [w for w, p in self.procs.items() if p.poll() is not None]
        for w in dead:
            code = self.procs.pop(w).returncode
            assert code in (0, -signal.SIGKILL), (
                f"worker {w} exited {code}\n{worker_logs(self.tmp_path)}"
            )
        return dead

    def kill(self, worker_id: str) -> None:
        proc = self.procs.get(worker_id)
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGKILL)

    def stop_all(self, stop_file: Path) -> None:
        stop_file.touch()
        for w, p in list(self.procs.items()):
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                logs = worker_logs(self.tmp_path)
                raise AssertionError(f"worker {w} did not stop\n{logs}") from None
        self.reap()


def kill_plan(rng: random.Random) -> dict[str, Any]:
    """Where a worker is to kill itself: a kill point and the how-manyth time it is reached."""
    point = rng.choice(KILL_POINTS)
    nth = rng.randint(1, 150) if point == "statement" else rng.randint(1, 3)
    return {"point": point, "nth": nth}


async def crash_round(
    store: Store,
    fleet: Fleet,
    rng: random.Random,
    name: str,
    approved: dict[str, str],
    killed: Counter[str],
) -> None:
    """Two workers with kill plans (and maybe a kill from outside) while runs are started and
    approved; dead workers replaced by clean ones until every run is terminal; then stop."""
    reg = registry(fleet.exec_dir)
    stop_file = fleet.tmp_path / f"stop-{name}"
    for _ in range(2):
        fleet.spawn(stop_file, kill_plan(rng))
    loop = asyncio.get_running_loop()
    outside = loop.time() + rng.uniform(0.1, 1.5) if rng.random() < 0.5 else None
    for i in range(RUNS_PER_ROUND):
        deps = {"slow": 0.5} if rng.random() < 0.3 else {}
        run = await start_run(
            store, reg, "acts", prompt_for(f"{name}n{i}", 1), deps_ref=deps, started_by="t"
        )
        call_id = run.calls[0].call_id
        await store.decide(run.id, call_id, Decision.approve(), decided_by="bob")
        approved[run.id] = call_id
        await asyncio.sleep(rng.uniform(0, 0.15))
    await settle(store, fleet, rng, name, killed, stop_file, outside)


async def settle(
    store: Store,
    fleet: Fleet,
    rng: random.Random,
    name: str,
    killed: Counter[str],
    stop_file: Path,
    outside: float | None,
) -> None:
    """Replace dead workers by clean ones (and kill one from outside at `outside`, on the
    loop's clock) until every run is terminal; then stop them."""
    loop = asyncio.get_running_loop()

    async def settled() -> bool:
        nonlocal outside
        for w in fleet.reap():  # a worker died: a clean one takes its place
            plan = fleet.plans[w]
            killed[plan["point"] if plan else "outside"] += 1
            fleet.spawn(stop_file, None)
        if outside is not None and loop.time() >= outside:
            outside = None
            if live := fleet.live():
                victim = rng.choice(sorted(live))
                fleet.plans[victim] = None  # counted as killed from outside
                fleet.kill(victim)
        runs = await store.list_runs(status=list(OPEN), limit=1000)
        return not runs and outside is None

    await eventually(settled, 120, f"round {name} to settle")
    fleet.stop_all(stop_file)
