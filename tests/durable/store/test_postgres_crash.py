"""Worker processes on one PostgreSQL schema SIGKILLed at chosen and at random points."""

from __future__ import annotations

import random
import sys
from collections import Counter
from pathlib import Path

import pytest

from golem.durable.store import RunStatus
from golem.durable.store.postgres import PostgresStore
from tests.support.crash import ROUNDS, SEEDS, Fleet, crash_round
from tests.support.durable.backends import postgres_dsn
from tests.support.durable.chaos import admin, check_invariants, new_schema

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.deep,
    pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL is a POSIX signal"),
]


@pytest.mark.timeout(60 + 30 * ROUNDS)
@pytest.mark.parametrize("seed", SEEDS)
async def test_pg_workers_killed_anywhere_never_run_an_approved_call_twice(
    tmp_path: Path, seed: int
) -> None:
    dsn = postgres_dsn()
    schema = new_schema()
    rng = random.Random(seed * 13)
    exec_dir = tmp_path / "ledger"
    exec_dir.mkdir()
    store = await PostgresStore.open(dsn, schema=schema)
    fleet = Fleet(tmp_path, tmp_path / "unused.db", exec_dir, {"dsn": dsn, "schema": schema})
    approved: dict[str, str] = {}
    killed: Counter[str] = Counter()
    try:
        for r in range(ROUNDS):
            await crash_round(store, fleet, rng, f"p{seed}r{r}", approved, killed)
        for ledger in exec_dir.iterdir():  # killed between creating it and the write
            if ledger.stat().st_size == 0:
                ledger.unlink()
        summary = await check_invariants(store, exec_dir, approved)
    finally:
        for w in list(fleet.procs):
            fleet.kill(w)
        for p in fleet.procs.values():
            p.wait()
        await store.close()
        admin(dsn, f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    assert sum(killed.values()) > 0, "no worker was killed: the test proved nothing"
    assert summary.statuses[RunStatus.COMPLETED] > 0, summary
    print(f"seed {seed}: kills {dict(killed)}; runs {dict(summary.statuses)}")
