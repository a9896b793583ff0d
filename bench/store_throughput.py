"""Durable approval cycles per second through the store.

    python bench/store_throughput.py [--cycles N] [--dsn postgresql://...]

One cycle: an agent run pauses on a gated tool and is saved (`start_run`) → the call is
approved (`Store.decide`) → a worker claims the ready run → resumes it (the approved call
re-executes, the model answers) → the outcome is saved as completed. The model is an
offline `FunctionModel` that answers instantly, so the figure is the store's and golem's
overhead, not a provider's.

Each worker is a separate process running cycles back to back against one database; with
several workers their claims contend (a worker may resume another's run). Measured on
SQLite (one file in a temp dir) with 1 worker, and on PostgreSQL with 1 and 4 workers when
`--dsn` or `GOLEM_TEST_POSTGRES_DSN` names one (each measurement uses a fresh schema,
dropped afterwards); otherwise PostgreSQL is reported as skipped.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from golem import Agent, Message, RunContext, ToolCall
from golem.model import ModelRequest
from golem.store import Decision, RunStatus, Store
from golem.store.postgres import PostgresStore
from golem.store.sqlite import SQLiteStore
from golem.testing import FunctionModel
from golem.tool import DeferKind, Deferred, call_approved
from golem.worker import AgentEntry, Worker, start_run


def _model(request: ModelRequest) -> Message | str:
    last = request.messages[-1]
    if last.role == "user":
        return Message(
            role="assistant", tool_calls=[ToolCall("call-1", "transfer", '{"amount": 10}')]
        )
    return "Transferred."


def transfer(ctx: RunContext[Any], amount: int) -> str:
    """Move money (needs approval)."""
    if not call_approved():
        raise Deferred(DeferKind.APPROVAL, "money moves need sign-off")
    return f"moved {amount} (key {ctx.call_id})"


async def _open(target: dict[str, Any]) -> Store:
    if target["kind"] == "sqlite":
        return await SQLiteStore.open(target["path"])
    return await PostgresStore.open(target["dsn"], schema=target["schema"], pool_size=2)


async def _cycles(target: dict[str, Any], n: int, name: str, barrier: Any) -> None:
    store = await _open(target)
    agent: Agent[Any, str] = Agent(FunctionModel(_model), tools=[transfer])
    registry = {"bank": AgentEntry(agent)}
    worker = Worker(store, registry, name, lease_seconds=30, sweep_interval=3600)
    await asyncio.to_thread(barrier.wait)
    try:
        for _ in range(n):
            run = await start_run(store, registry, "bank", "pay", started_by=name)
            await store.decide(run.id, "call-1", Decision.approve(), decided_by=name)
            await worker.run_once()  # resumes a ready run: this one, or another worker's
        while await worker.run_once():  # then finish whatever is still ready
            pass
    finally:
        await store.close()


def _proc(target: dict[str, Any], n: int, name: str, barrier: Any) -> None:
    asyncio.run(_cycles(target, n, name, barrier))


async def _count(target: dict[str, Any]) -> tuple[int, int]:
    store = await _open(target)
    try:
        runs = await store.list_runs(limit=1_000_000)
        done = sum(r.status is RunStatus.COMPLETED for r in runs)
        return done, len(runs)
    finally:
        await store.close()


def measure(target: dict[str, Any], workers: int, cycles: int) -> float:
    """Run `cycles` cycles split over `workers` processes; return cycles per second."""
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(workers + 1)
    per = max(1, cycles // workers)
    procs = [
        ctx.Process(target=_proc, args=(target, per, f"w{i}", barrier)) for i in range(workers)
    ]
    for p in procs:
        p.start()
    barrier.wait(timeout=120)  # every worker has its store open
    start = time.perf_counter()
    for p in procs:
        p.join()
    elapsed = time.perf_counter() - start
    if any(p.exitcode != 0 for p in procs):
        raise SystemExit(f"a worker process failed (exit codes {[p.exitcode for p in procs]})")
    done, total = asyncio.run(_count(target))
    if done != total or total != per * workers:
        raise SystemExit(f"lost work: {done} of {total} runs completed, {per * workers} started")
    return total / elapsed


def _drop_schema(dsn: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=400, help="cycles per measurement")
    parser.add_argument("--dsn", default=os.environ.get("GOLEM_TEST_POSTGRES_DSN", ""))
    args = parser.parse_args()
    print("store throughput: pause-save → decide → claim → resume → complete")
    with tempfile.TemporaryDirectory() as tmp:
        target = {"kind": "sqlite", "path": str(Path(tmp) / "bench.db")}
        rate = measure(target, 1, args.cycles)
        print(f"  SQLite      1 worker : {rate:8.1f} cycles/s")
    if not args.dsn:
        print("  PostgreSQL  skipped (pass --dsn or set GOLEM_TEST_POSTGRES_DSN)")
        return
    for workers in (1, 4):
        schema = f"bench_{uuid.uuid4().hex[:12]}"
        target = {"kind": "postgresql", "dsn": args.dsn, "schema": schema}
        try:
            rate = measure(target, workers, args.cycles)
        finally:
            _drop_schema(args.dsn, schema)
        label = "worker " if workers == 1 else "workers"
        print(f"  PostgreSQL  {workers} {label}: {rate:8.1f} cycles/s")
    print(f"  ({os.cpu_count()} CPUs; every worker is its own process)")


if __name__ == "__main__":
    main()
