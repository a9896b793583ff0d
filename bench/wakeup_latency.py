"""Decision → resume latency with an idle worker in another process.

    python bench/wakeup_latency.py [--samples N] [--dsn postgresql://...]

A worker process runs `Worker.run_forever(poll_interval=60)` and sits idle. This process
saves a paused run, waits a moment (so the worker is asleep on its change feed), records
the decision, and measures until the gated tool starts executing in the worker (the tool
writes its start time to a file). PostgreSQL wakes the worker by `NOTIFY`; SQLite by the
worker's shared change poller, which looks at the write-ahead log every `watch_interval`
(default 0.05 s; one `stat`) and queries at once when it changed, so its latency is about half the
watch interval; measured again with the watch off (`watch_interval=None`: a query every
`poll_interval`, 0.25 s). Prints p50 / p95 / max per backend, and the CPU the idle worker
process spent per second while it waited.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import InstantModel

from golem import Agent, Message, RunContext, ToolCall
from golem.durable.store import Decision
from golem.durable.store._sql import SQLStore
from golem.durable.store.postgres import PostgresStore
from golem.durable.store.sqlite import SQLiteStore
from golem.durable.worker import AgentEntry, Worker, start_run
from golem.model import ModelRequest, ModelResponse
from golem.tool import DeferKind, Deferred, call_approved


def _registry(marks: Path) -> dict[str, AgentEntry]:
    def respond(request: ModelRequest) -> ModelResponse:
        if request.messages[-1].role == "user":
            call = ToolCall("c1", "pay", '{"amount": 1}')
            return ModelResponse(message=Message(role="assistant", tool_calls=[call]))
        return ModelResponse(message=Message(role="assistant", content="done"))

    def pay(ctx: RunContext[Any], amount: int) -> str:
        """Pay (needs approval)."""
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, "money")
        (marks / ctx.run_id).write_text(repr(time.time()))
        return "paid"

    return {"bank": AgentEntry(Agent(InstantModel(respond), tools=[pay]))}


async def _open(target: dict[str, Any]) -> SQLStore:
    if target["kind"] == "sqlite":
        return await SQLiteStore.open(target["path"], watch_interval=target.get("watch", 0.05))
    return await PostgresStore.open(target["dsn"], schema=target["schema"], pool_size=2)


def _worker(target: dict[str, Any], marks: str, stop_file: str) -> None:
    async def main() -> None:
        store = await _open(target)
        stop = asyncio.Event()

        async def watch() -> None:
            while not os.path.exists(stop_file):  # noqa: ASYNC110, ASYNC240 - a file signal
                await asyncio.sleep(1.0)  # rarely: its wake-ups count in the idle CPU
            stop.set()

        watcher = asyncio.create_task(watch())
        try:
            worker = Worker(store, _registry(Path(marks)), worker_id="idle", sweep_interval=3600)
            await worker.run_forever(poll_interval=60, stop_event=stop)
        finally:
            watcher.cancel()
            await store.close()

    asyncio.run(main())


async def _measure(target: dict[str, Any], samples: int, marks: Path) -> list[float]:
    store = await _open(target)
    registry = _registry(marks)
    latencies = []
    try:
        for _ in range(samples):
            run = await start_run(store, registry, "bank", "pay", started_by="bench")
            # the worker is asleep on its feed again; a random extra wait samples every
            # phase of SQLite's poll (a fixed one would always hit the same point of it)
            await asyncio.sleep(0.3 + random.uniform(0, 0.25))
            t0 = time.time()
            await store.decide(run.id, "c1", Decision.approve(), decided_by="bench")
            mark = marks / run.id
            deadline = time.monotonic() + 120
            while not mark.exists():
                if time.monotonic() > deadline:
                    raise SystemExit("the worker never resumed the run")
                await asyncio.sleep(0.001)
            await asyncio.sleep(0.002)  # let the write finish
            latencies.append(float(mark.read_text()) - t0)
    finally:
        await store.close()
    return latencies


async def _create_schema(target: dict[str, Any]) -> None:
    store = await _open(target)
    await store.close()


def _cpu_ns(pid: int) -> int | None:
    """Nanoseconds process `pid`'s threads spent on a CPU (Linux; None elsewhere)."""
    total = 0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
    except OSError:
        return None
    return total


def _idle_cpu(pid: int, seconds: float = 3.0) -> str:
    before = _cpu_ns(pid)
    time.sleep(seconds)
    after = _cpu_ns(pid)
    if before is None or after is None:
        return ""
    return f"   idle worker {(after - before) / seconds / 1e6:5.1f} ms CPU/s"


def bench(label: str, target: dict[str, Any], samples: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        marks = Path(tmp) / "marks"
        marks.mkdir()
        stop_file = str(Path(tmp) / "stop")
        asyncio.run(_create_schema(target))
        ctx = mp.get_context("spawn")
        proc = ctx.Process(target=_worker, args=(target, str(marks), stop_file))
        proc.start()
        try:
            time.sleep(2.0)  # the worker has started and is idle
            idle = _idle_cpu(proc.pid) if proc.pid is not None else ""
            lat = sorted(asyncio.run(_measure(target, samples, marks)))
        finally:
            Path(stop_file).touch()
            proc.join(30)
    p50 = statistics.median(lat) * 1e3
    p95 = lat[min(len(lat) - 1, int(len(lat) * 0.95))] * 1e3
    print(
        f"  {label:<38} p50 {p50:7.1f} ms   p95 {p95:7.1f} ms   max {lat[-1] * 1e3:7.1f} ms" + idle
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--dsn", default=os.environ.get("GOLEM_TEST_POSTGRES_DSN", ""))
    args = parser.parse_args()
    print("decision → approved tool starts in an idle worker process (worker poll: 60 s)")
    with tempfile.TemporaryDirectory() as tmp:
        target = {"kind": "sqlite", "path": str(Path(tmp) / "l.db")}
        bench("SQLite (write-ahead log watch, 0.05 s)", target, args.samples)
        target = {"kind": "sqlite", "path": str(Path(tmp) / "n.db"), "watch": None}
        bench("SQLite (watch off: polls, 0.25 s)", target, args.samples)
    if not args.dsn:
        print("  PostgreSQL skipped (pass --dsn or set GOLEM_TEST_POSTGRES_DSN)")
        return
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    try:
        bench(
            "PostgreSQL (LISTEN/NOTIFY)",
            {"kind": "pg", "dsn": args.dsn, "schema": schema},
            args.samples,
        )
    finally:
        import psycopg

        with psycopg.connect(args.dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


if __name__ == "__main__":
    main()
