"""What single store operations send to the database: commits, statements, round trips.

    python bench/store_statements.py [--dsn postgresql://...]

The figures the store's design aims at, printed rather than pinned in tests (tests pin
behaviour; these counts may change with a better plan and should then be looked at here):

- a batched claim (`claim_ready_many`, limit 5) costs the commit and statements of a claim
  of one run (SQLite, and PostgreSQL when `--dsn` or `GOLEM_TEST_POSTGRES_DSN` names one);
- on PostgreSQL a plain decision (an undecided call of a pending run, no edited arguments)
  is one round trip, the last one (which makes the run ready) too, and a repeat or a
  conflict falls back to the full transaction (reads first);
- SQLite's group commit: a lone write is `BEGIN IMMEDIATE … COMMIT` without a savepoint;
  writes queued behind a busy writer commit as one transaction; a batch one of whose jobs
  fails is rolled back and run again with a savepoint per job.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
import threading
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from golem._ids import new_id
from golem.durable.store import CallKind, Decision, DecisionConflict, NewCall, NewRun
from golem.durable.store.postgres import PostgresStore
from golem.durable.store.sqlite import SQLiteStore


def _run(n_calls: int = 1) -> NewRun:
    calls = tuple(
        NewCall(call_id=f"c{i}", kind=CallKind.APPROVAL, tool_name="t") for i in range(n_calls)
    )
    return NewRun(id=new_id(), agent="ops", conversation_id=new_id(), history="[]", calls=calls)


async def _ready(store: Any) -> None:
    run = await store.save_pending(_run())
    await store.decide(run.id, "c0", Decision.approve(), decided_by="bob")


async def _counted(store: Any, op: Callable[[], Awaitable[object]]) -> tuple[int, int, int]:
    """(commits, statements, round trips) that `op` cost."""
    s = store.stats
    before = (s.commits, s.statements, s.round_trips)
    await op()
    return (s.commits - before[0], s.statements - before[1], s.round_trips - before[2])


async def claims(name: str, store: Any) -> None:
    for _ in range(6):
        await _ready(store)
    one = await _counted(store, lambda: store.claim_ready_many("w", 30, limit=1))
    five = await _counted(store, lambda: store.claim_ready_many("w", 30, limit=5))
    print(f"{name}: claim of 1 run   commits/statements/round trips {one}")
    print(f"{name}: claim of 5 runs  commits/statements/round trips {five}")


async def decisions(store: PostgresStore) -> None:
    run = await store.save_pending(_run(2))
    approve, deny = Decision.approve(), Decision.deny("no")
    first = await _counted(store, lambda: store.decide(run.id, "c0", approve, decided_by="a"))
    repeat = await _counted(store, lambda: store.decide(run.id, "c0", approve, decided_by="a"))

    async def conflict() -> None:
        with contextlib.suppress(DecisionConflict):
            await store.decide(run.id, "c0", deny, decided_by="b")

    clash = await _counted(store, conflict)
    last = await _counted(store, lambda: store.decide(run.id, "c1", deny, decided_by="b"))
    print(f"postgres: plain decision              round trips {first[2]}")
    print(f"postgres: last decision (run ready)   round trips {last[2]}")
    print(f"postgres: repeat (full transaction)   round trips {repeat[2]}")
    print(f"postgres: conflict (full transaction) round trips {clash[2]}")


async def group_commit(path: Path) -> None:
    store = SQLiteStore(path)
    store.trace = []

    def brackets() -> list[str]:
        return [sql for sql, _ in store.trace or () if not sql.startswith(("INSERT", "SELECT"))]

    def add(tx: Any, k: int, fail: bool = False) -> None:
        tx.run("INSERT INTO kv (k) VALUES (?) ON CONFLICT (k) DO NOTHING", (k,))
        tx.fetch("SELECT k FROM kv WHERE k = ?", (k,))
        if fail:
            raise RuntimeError("spoils the batch")

    async def batch(*jobs: tuple[int, bool]) -> int:
        """Run `jobs` queued behind a busy writer; return the commits they cost."""
        started, release = threading.Event(), threading.Event()

        def hold(slot: Any) -> None:
            started.set()
            release.wait(60)

        first = store._writer.submit(asyncio.get_running_loop(), hold)
        await asyncio.to_thread(started.wait, 60)
        tasks = [asyncio.ensure_future(store._submit(True, add, k, f)) for k, f in jobs]
        await asyncio.sleep(0)
        commits = store.stats.commits
        release.set()
        await first
        await asyncio.gather(*tasks, return_exceptions=True)
        return store.stats.commits - commits

    try:
        await store._submit(True, lambda tx: tx.run("CREATE TABLE kv (k INTEGER PRIMARY KEY)"))
        store.trace.clear()
        await store._submit(True, add, 1)
        print(f"sqlite: a lone write         {brackets()}")
        store.trace.clear()
        n = await batch(*[(k, False) for k in range(10, 20)])
        print(f"sqlite: 10 queued writes     {n} commit(s), {brackets()}")
        store.trace.clear()
        n = await batch((30, False), (31, True), (32, False))
        print(f"sqlite: a batch, one failing {n} commit(s), {brackets()}")
        print(f"sqlite: batches run again    {store.stats.retried_batches}")
    finally:
        await store.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default=os.environ.get("GOLEM_TEST_POSTGRES_DSN", ""))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = await SQLiteStore.open(Path(tmp) / "claims.db")
        try:
            await claims("sqlite", store)
        finally:
            await store.close()
        await group_commit(Path(tmp) / "group.db")
    if not args.dsn:
        print("postgres: skipped (no --dsn or GOLEM_TEST_POSTGRES_DSN)")
        return
    import psycopg

    schema = f"bench_{uuid.uuid4().hex[:12]}"
    pg = await PostgresStore.open(args.dsn, schema=schema)
    try:
        await claims("postgres", pg)
        await decisions(pg)
    finally:
        await pg.close()
        with psycopg.connect(args.dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


if __name__ == "__main__":
    asyncio.run(main())
