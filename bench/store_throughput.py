"""Durable approval cycles per second through the store, one after another and concurrently.

    python bench/store_throughput.py [--cycles N] [--concurrency 1,16] [--dsn postgresql://...]
                                     [--workers 1,2,4] [--pg-rounds N] [--model-latency SECONDS]
                                     [--pin] [--loop asyncio|uvloop]

One cycle: an agent run pauses on a gated tool and is saved (`start_run`) → the call is
approved (`Store.decide`) → a worker claims the ready run → resumes it (the approved call
re-executes, the model answers) → the outcome is saved as completed. The model answers
instantly, so the figure is the store's and golem's overhead, not a provider's; with
`--model-latency` each of its two calls per cycle sleeps that long first, as a provider
would, which is where a worker's concurrency pays. The gated tool is a plain function that
never blocks, registered with `run_in_thread=False` (`--tool-in-thread` measures the default
thread hop instead).

Each `--concurrency` level is measured separately. At 1, every worker process runs its
cycles strictly one after another (start_run → decide → `Worker.run_once`). At N > 1, every
worker process keeps N cycles in flight: N producer tasks start and approve runs while one
`Worker(concurrency=N).run_forever()` claims them in batches (`Store.claim_ready_many`) and
resumes up to N at once; the measurement ends when every run has completed. Either way the
bench then checks that every run started was completed (no lost work).

SQLite, one worker process (this one): cycles/s, CPU per cycle, commits and statements per
cycle, and the **floor**: the same statements (recorded from golem's own sequential cycles,
with their parameters) replayed with raw `sqlite3` into a fresh database; the ratio
golem/floor is what golem adds.

PostgreSQL with 1, 2 and 4 worker processes when `--dsn` or `GOLEM_TEST_POSTGRES_DSN` names
one (each measurement in a fresh schema, dropped afterwards; with `--pg-rounds N`, N rounds
that each measure every worker count in turn, the median round shown and the 1 → 4 scaling
also per round, so a host that slows down mid-run skews no count): cycles/s, commits,
statements, round trips, WAL records and client CPU (all worker processes) per cycle, and
the server's `fsync` / `synchronous_commit` settings (a throwaway test cluster runs with
`fsync=off`). Each process uses a pool of 2 connections one after another, 4 concurrently.
The server's commit count also includes read-only transactions and, in concurrent mode,
one per `NOTIFY` each listening worker process receives (PostgreSQL reads its notification
queue in a transaction).

PostgreSQL's **floor** (one cycle at a time, no model latency): every message golem's store
sends for one cycle is recorded from a real cycle (statement text, parameters, transaction
boundaries, round trips), then replayed with bare synchronous psycopg at the libpq level —
pipeline mode, each statement prepared once per connection, binary results, no asyncio, no
golem — under fresh IDs and shifted times, in 1, 2 and 4 processes (the `--workers`
counts), each one cycle at a time, in a fresh schema, right after golem's measurement of the
same count. It prints the floor's cycles/s, client and server CPU, the cores it keeps busy,
golem's ratio to it, and the floor's own 1 → 4 scaling beside golem's: what any client of
these statements could reach on this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing as mp
import os
import sqlite3
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import InstantModel

from golem import Agent, Message, RunContext, ToolCall
from golem.durable.store import CallKind, Decision, NewCall, NewRun, Outcome, RunStatus
from golem.durable.store._pg_wire import OID_TIMESTAMPTZ
from golem.durable.store._sql import SQLStore, Stats
from golem.durable.store._threads import DatabaseThreads
from golem.durable.store.postgres import PostgresStore
from golem.durable.store.sqlite import SQLiteStore
from golem.durable.worker import AgentEntry, Worker, start_run
from golem.model import ModelRequest, ModelResponse
from golem.tool import DeferKind, Deferred, Tool, call_approved


def _model(request: ModelRequest) -> ModelResponse:
    last = request.messages[-1]
    if last.role == "user":
        message = Message(
            role="assistant", tool_calls=[ToolCall("call-1", "transfer", '{"amount": 10}')]
        )
    else:
        message = Message(role="assistant", content="Transferred.")
    return ModelResponse(message=message)


def transfer(ctx: RunContext[Any], amount: int) -> str:
    """Move money (needs approval)."""
    if not call_approved():
        raise Deferred(DeferKind.APPROVAL, "money moves need sign-off")
    return f"moved {amount} (key {ctx.call_id})"


async def _open(target: dict[str, Any], pool_size: int = 2) -> SQLStore:
    if target["kind"] == "sqlite":
        return await SQLiteStore.open(target["path"])
    return await PostgresStore.open(target["dsn"], schema=target["schema"], pool_size=pool_size)


def _pool_size(concurrency: int) -> int:
    """PostgreSQL connections per worker process: one per transaction in flight, up to 4."""
    return 2 if concurrency == 1 else 4


class _SlowModel(InstantModel):
    """Answers after `latency` seconds, like a provider would (the CPU cost stays nil)."""

    def __init__(self, latency: float) -> None:
        super().__init__(_model)
        self.latency = latency

    async def generate(self, request: ModelRequest) -> ModelResponse:
        await asyncio.sleep(self.latency)
        return self.respond(request)


def _registry(latency: float) -> dict[str, AgentEntry]:
    model = _SlowModel(latency) if latency > 0 else InstantModel(_model)
    in_thread = os.environ.get("GOLEM_BENCH_TOOL_IN_THREAD") == "1"
    tool = Tool.from_function(transfer, run_in_thread=in_thread)
    agent: Agent[Any, str] = Agent(model, tools=[tool])
    return {"bank": AgentEntry(agent)}


async def _cycles(store: SQLStore, n: int, name: str, latency: float = 0.0) -> None:
    registry = _registry(latency)
    worker = Worker(store, registry, worker_id=name, lease_seconds=30, sweep_interval=3600)
    for _ in range(n):
        run = await start_run(store, registry, "bank", "pay", started_by=name)
        await store.decide(run.id, "call-1", Decision.approve(), decided_by=name)
        await worker.run_once()  # resumes a ready run: this one, or another worker's
    while await worker.run_once():  # then finish whatever is still ready
        pass


async def _concurrent_cycles(
    store: SQLStore,
    n: int,
    name: str,
    concurrency: int,
    shared: Any = None,
    total: int = 0,
    latency: float = 0.0,
) -> None:
    """`n` cycles with `concurrency` in flight: producers start and approve runs while the
    worker's `run_forever` resumes them; returns once every run has completed (with `shared`,
    a counter of completions across processes, once it reaches `total`)."""
    registry = _registry(latency)
    worker = Worker(
        store,
        registry,
        worker_id=name,
        lease_seconds=30,
        sweep_interval=3600,
        concurrency=concurrency,
    )
    target = total or n
    finished = 0
    all_done = asyncio.Event()
    save = store.finish

    async def finish(run_id: str, worker_id: str, outcome: Outcome, **kw: Any) -> Any:
        nonlocal finished
        record = await save(run_id, worker_id, outcome, **kw)
        if shared is None:
            finished += 1
        else:
            with shared.get_lock():
                shared.value += 1
                finished = shared.value
        if finished >= target:
            all_done.set()
        return record

    store.finish = finish  # type: ignore[method-assign]
    left = n

    async def produce() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            run = await start_run(store, registry, "bank", "pay", started_by=name)
            await store.decide(run.id, "call-1", Decision.approve(), decided_by=name)

    stop = asyncio.Event()
    consumer = asyncio.create_task(worker.run_forever(poll_interval=1.0, stop_event=stop))
    try:
        await asyncio.gather(*(produce() for _ in range(concurrency)))
        while not all_done.is_set():  # other processes' finishes only show in `shared`
            if shared is not None and shared.value >= target:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(all_done.wait(), 0.005 if shared is not None else None)
    finally:
        stop.set()
        await consumer
        store.finish = save  # type: ignore[method-assign]


def _backend_cpu_us(pid: int) -> int:
    """CPU time of a local PostgreSQL backend process (0 when /proc cannot tell)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return (int(fields[11]) + int(fields[12])) * 1_000_000 // os.sysconf("SC_CLK_TCK")


async def _backend_pids(store: SQLStore, connections: int) -> list[int]:
    """The server processes of the store's connections (opened now, `connections` of them)."""

    def pid(tx: Any) -> int:
        # the sleep keeps each connection busy until all are open: one transaction apiece
        return int(tx.fetch("SELECT pg_backend_pid(), pg_sleep(0.2)")[0][0])

    got = await asyncio.gather(*(store._submit(False, pid) for _ in range(connections)))
    return sorted(set(got))


async def _proc_main(
    target: dict[str, Any],
    n: int,
    name: str,
    barrier: Any,
    concurrency: int,
    shared: Any,
    total: int,
) -> dict[str, int]:
    store = await _open(target, _pool_size(concurrency))
    pids = await _backend_pids(store, _pool_size(concurrency) if concurrency > 1 else 1)
    await asyncio.to_thread(barrier.wait)
    try:
        cpu, server = time.process_time(), sum(_backend_cpu_us(p) for p in pids)
        latency = target.get("latency", 0.0)
        if concurrency == 1:
            await _cycles(store, n, name, latency)
        else:
            await _concurrent_cycles(store, n, name, concurrency, shared, total, latency)
        cpu_us = int((time.process_time() - cpu) * 1e6)
        server_us = sum(_backend_cpu_us(p) for p in pids) - server
        s = store.stats
        return {
            "commits": s.commits,
            "transactions": s.transactions,
            "statements": s.statements,
            "round_trips": s.round_trips,
            "cpu_us": cpu_us,
            "server_us": server_us,
        }
    finally:
        await store.close()


def _proc(
    target: dict[str, Any],
    n: int,
    name: str,
    barrier: Any,
    out: Any,
    concurrency: int,
    shared: Any,
    total: int,
) -> None:
    if target.get("pin"):
        _pin(int(name[1:]), target["pin"])
    if target.get("loop") == "uvloop":
        _use_uvloop()
    out.put(asyncio.run(_proc_main(target, n, name, barrier, concurrency, shared, total)))


def _use_uvloop() -> None:
    """Run this process's `asyncio.run` calls on uvloop (`--loop uvloop`)."""
    import uvloop

    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def _pin(index: int, cpus: list[int]) -> None:
    """Keep this process (and the threads it starts from now on) on one CPU: the
    `index`-th of `cpus`, round robin."""
    os.sched_setaffinity(0, {cpus[index % len(cpus)]})


async def _count(target: dict[str, Any]) -> tuple[int, int]:
    store = await _open(target)
    try:
        done = total = 0
        after = None
        while True:
            page = await store.list_runs_page(after=after, limit=1000)
            total += len(page.items)
            done += sum(r.status is RunStatus.COMPLETED for r in page.items)
            if page.next_cursor is None:
                return done, total
            after = page.next_cursor
    finally:
        await store.close()


def measure_procs(
    target: dict[str, Any], workers: int, cycles: int, concurrency: int = 1
) -> tuple[float, dict[str, int]]:
    """Run `cycles` cycles split over `workers` processes; cycles/s and summed counters."""
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(workers + 1)
    out = ctx.Queue()
    per = max(1, cycles // workers)
    shared = ctx.Value("q", 0)  # completions across processes (concurrent mode)
    procs = [
        ctx.Process(
            target=_proc,
            args=(target, per, f"w{i}", barrier, out, concurrency, shared, per * workers),
        )
        for i in range(workers)
    ]
    for p in procs:
        p.start()
    barrier.wait(timeout=120)  # every worker has its store open
    start = time.perf_counter()
    stats = [out.get(timeout=600) for _ in procs]
    elapsed = time.perf_counter() - start
    for p in procs:
        p.join()
    if any(p.exitcode != 0 for p in procs):
        raise SystemExit(f"a worker process failed (exit codes {[p.exitcode for p in procs]})")
    done, total = asyncio.run(_count(target))
    if done != total or total != per * workers:
        raise SystemExit(f"lost work: {done} of {total} runs completed, {per * workers} started")
    summed = {k: sum(s[k] for s in stats) for k in stats[0]}
    return total / elapsed, summed


# --------------------------------------------------------------------------- SQLite


async def _sqlite_round(
    path: Path, cycles: int, trace: bool, latency: float
) -> tuple[float, float, SQLiteStore]:
    store = SQLiteStore(path)
    if trace:
        store.trace = []
    await store.schema_version()
    await _cycles(store, 20, "warm")
    store.stats.__init__()  # type: ignore[misc]
    if store.trace is not None:
        store.trace.clear()
    start, cpu = time.perf_counter(), time.process_time()
    await _cycles(store, cycles, "w0", latency)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    await store.close()
    return cycles / elapsed, cpu / cycles, store


async def _sqlite_concurrent_round(
    path: Path, cycles: int, concurrency: int, latency: float
) -> tuple[float, float, Stats]:
    store = SQLiteStore(path)
    await store.schema_version()
    await _concurrent_cycles(store, 40, "warm", concurrency)
    store.stats.__init__()  # type: ignore[misc]
    start, cpu = time.perf_counter(), time.process_time()
    await _concurrent_cycles(store, cycles, "w0", concurrency, latency=latency)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    stats = store.stats
    await store.close()
    done, total = await _count({"kind": "sqlite", "path": path})
    if done != total or total != cycles + 40:
        raise SystemExit(f"lost work: {done} of {total} runs completed, {cycles + 40} started")
    return cycles / elapsed, cpu / cycles, stats


_HISTORY = (
    '[{"role":"user","content":"pay"},{"role":"assistant","toolCalls":'
    '[{"id":"call-1","name":"transfer","args":{"amount":10}}]}]'
)


def _new_runs(n: int) -> list[NewRun]:
    call = NewCall("call-1", CallKind.APPROVAL, "transfer", '{"amount": 10}', "money")
    ids = [uuid.uuid4().hex for _ in range(n)]
    return [NewRun(i, "bank", "c" + i, _HISTORY, calls=(call,), started_by="w") for i in ids]


async def _store_cycles(store: SQLStore, runs: list[NewRun]) -> None:
    """The store's four operations of a cycle alone, on prebuilt records (no agent)."""
    approve = Decision.approve()
    outcome = Outcome.completed("Transferred.", _HISTORY)
    for run in runs:
        await store.save_pending(run)
        await store.decide(run.id, "call-1", approve, decided_by="w")
        claimed = await store.claim_ready("w", 30)
        assert claimed is not None
        await store.finish(claimed.run.id, "w", outcome)


async def _store_only(path: Path, cycles: int) -> float:
    store = await SQLiteStore.open(path)
    await _store_cycles(store, _new_runs(20))
    runs = _new_runs(cycles)
    cpu = time.process_time()
    await _store_cycles(store, runs)
    cpu = time.process_time() - cpu
    await store.close()
    return cpu / cycles


async def _store_concurrent(path: Path, cycles: int, concurrency: int) -> tuple[float, float]:
    """The store alone with `concurrency` tasks each running `_store_cycles` on its share of
    the runs (writes queue up: group commit); CPU per cycle and the floor of the statements
    it ran (grouped commits and savepoints included), both in seconds."""
    store = SQLiteStore(path)
    store.trace = []
    await store.schema_version()
    await _store_cycles(store, _new_runs(20))
    store.trace.clear()
    runs = _new_runs(cycles)
    cpu = time.process_time()
    await asyncio.gather(*(_store_cycles(store, runs[i::concurrency]) for i in range(concurrency)))
    cpu = time.process_time() - cpu
    await store.close()
    fresh = path.with_name("replay-" + path.name)
    await _fresh_schema(fresh)
    return cpu / cycles, _replay(fresh, store.trace) / cycles


async def _hand_over(n: int = 3000) -> float:
    """CPU seconds (all threads) of one empty job through the store's `DatabaseThreads`: the
    loop hands it to the thread and the thread's answer wakes the loop, with no SQL."""
    threads: DatabaseThreads[None] = DatabaseThreads("bench-hop", 1, lambda slot: None)
    loop = asyncio.get_running_loop()

    def nothing(slot: Any) -> None:
        return None

    for _ in range(200):
        await threads.submit(loop, nothing)
    cpu = time.process_time()
    for _ in range(n):
        await threads.submit(loop, nothing)
    cpu = time.process_time() - cpu
    threads.stop()
    threads.join()
    return cpu / n


def _replay(path: Path, statements: list[tuple[str, tuple[Any, ...]]]) -> float:
    """Seconds to run `statements` with raw sqlite3 (same pragmas as the store)."""
    conn = sqlite3.connect(path, isolation_level=None, cached_statements=256)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("PRAGMA foreign_keys = ON")
    start = time.process_time()
    for sql, params in statements:
        conn.execute(sql, params).fetchall()
    elapsed = time.process_time() - start
    conn.close()
    return elapsed


def bench_sqlite(cycles: int, rounds: int, levels: list[int], latency: float) -> None:
    floor = _bench_sqlite_sequential(cycles, rounds, latency) if 1 in levels else None
    for concurrency in (c for c in levels if c > 1):
        best, best_cpu, stats = 0.0, float("inf"), None
        for _ in range(rounds):
            with tempfile.TemporaryDirectory() as tmp:
                rate, cpu, got = asyncio.run(
                    _sqlite_concurrent_round(Path(tmp) / "c.db", cycles, concurrency, latency)
                )
            best_cpu = min(best_cpu, cpu)
            if rate > best:
                best, stats = rate, got
        assert stats is not None
        ratio = "" if floor is None else f"; golem/floor = {best_cpu / floor:.2f}x"
        print(
            f"  SQLite      1 worker, {concurrency:>2} in flight: {best:8.1f} cycles/s "
            f"wall-clock, {best_cpu * 1e3:.3f} ms CPU/cycle (all threads){ratio}"
        )
        print(
            f"              per cycle: {stats.commits / cycles:.1f} commits, "
            f"{stats.transactions / cycles:.1f} transactions, "
            f"{stats.statements / cycles:.1f} statements (+ BEGIN/COMMIT)"
        )
        alone = []
        for _ in range(rounds):
            with tempfile.TemporaryDirectory() as tmp:
                alone.append(
                    asyncio.run(_store_concurrent(Path(tmp) / "s.db", cycles, concurrency))
                )
        store_cpu, grouped_floor = min(alone)
        print(
            f"              store alone, {concurrency} tasks: {store_cpu * 1e3:.3f} ms CPU/cycle; "
            f"floor of its own (grouped) statements {grouped_floor * 1e3:.3f} ms; "
            f"store/floor = {store_cpu / grouped_floor:.2f}x"
        )


def _bench_sqlite_sequential(cycles: int, rounds: int, latency: float) -> float:
    """Print the one-after-another figures; return the floor (CPU seconds per cycle)."""
    best = 0.0
    best_cpu = float("inf")
    store_cpu = float("inf")
    stats = None
    floor = float("inf")
    hop = float("inf")
    for _ in range(rounds):
        hop = min(hop, asyncio.run(_hand_over()))
        with tempfile.TemporaryDirectory() as tmp:
            rate, cpu, store = asyncio.run(_sqlite_round(Path(tmp) / "b.db", cycles, True, latency))
            assert store.trace is not None
            best_cpu = min(best_cpu, cpu)
            if rate > best:
                best, stats = rate, store.stats
            fresh = Path(tmp) / "replay.db"
            asyncio.run(_fresh_schema(fresh))
            floor = min(floor, _replay(fresh, store.trace) / cycles)
            store_cpu = min(store_cpu, asyncio.run(_store_only(Path(tmp) / "s.db", cycles)))
    assert stats is not None
    print(
        f"  SQLite      1 worker,  1 in flight: {best:8.1f} cycles/s wall-clock, "
        f"{1 / best_cpu:8.1f} cycles "
        f"per CPU-second ({best_cpu * 1e3:.3f} ms CPU/cycle, all threads)"
    )
    print(
        f"              floor: {floor * 1e3:.3f} ms CPU/cycle = raw sqlite3 replay of golem's "
        f"own statements; golem/floor = {best_cpu / floor:.2f}x (whole cycle, agent included)"
    )
    print(
        f"              store alone (save, decide, claim, finish on prebuilt records): "
        f"{store_cpu * 1e3:.3f} ms CPU/cycle; store/floor = {store_cpu / floor:.2f}x"
    )
    with_hops = floor + 4 * hop
    print(
        f"              hand-over: an empty job through the store's database thread costs "
        f"{hop * 1e6:.0f} µs CPU here; floor + the 4 hand-overs a cycle needs (statements off "
        f"the loop) = {with_hops * 1e3:.3f} ms; store / that = {store_cpu / with_hops:.2f}x"
    )
    print(
        f"              per cycle: {stats.commits / cycles:.1f} commits, "
        f"{stats.transactions / cycles:.1f} transactions, "
        f"{stats.statements / cycles:.1f} statements (+ BEGIN/COMMIT)"
    )
    return floor


async def _fresh_schema(path: Path) -> None:
    store = await SQLiteStore.open(path)
    await store.close()


# --------------------------------------------------------------------------- PostgreSQL


def _cores_busy(rate: float, stats: dict[str, int], cycles: int) -> float:
    """CPUs kept busy by the workers and their server backends: CPU per cycle × cycles/s."""
    return (stats["cpu_us"] + stats["server_us"]) / cycles / 1e6 * rate


def _drop_schema(dsn: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _pg_wal(dsn: str) -> tuple[int, int]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT wal_records FROM pg_stat_wal").fetchone()
        commits = conn.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    assert row is not None
    assert commits is not None
    return int(row[0]), int(commits[0])


def _pg_settings(dsn: str) -> str:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        got = {
            name: conn.execute(f"SHOW {name}").fetchone()[0]  # type: ignore[index]
            for name in ("fsync", "synchronous_commit")
        }
    return ", ".join(f"{k}={v}" for k, v in got.items())


def bench_postgres(
    dsn: str,
    cycles: int,
    worker_counts: list[int],
    levels: list[int],
    latency: float,
    rounds: int = 1,
) -> None:
    print(f"  PostgreSQL server: {_pg_settings(dsn)}")
    template = None
    if 1 in levels and latency == 0:
        template = asyncio.run(_record_pg_cycle(dsn))
        txs, statements, trips = template.summary()
        print(
            f"  PostgreSQL floor: golem's recorded cycle ({txs} transactions, {statements} "
            f"statements, {trips} round trips) replayed with bare synchronous psycopg "
            "(libpq pipeline, prepared statements, no asyncio, no golem), one cycle at a time "
            "per process"
        )
    for concurrency in levels:
        floor = template if concurrency == 1 else None
        _bench_postgres_level(dsn, cycles, worker_counts, concurrency, latency, rounds, floor)


def _pg_round(
    dsn: str, cycles: int, workers: int, concurrency: int, latency: float
) -> tuple[float, dict[str, int], int, int]:
    """One measurement in a fresh schema: cycles/s, counters, WAL records, server commits."""
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    target = {
        "kind": "postgresql",
        "dsn": dsn,
        "schema": schema,
        "latency": latency,
        "pin": _PIN[0],
        "loop": _LOOP[0],
    }
    try:
        asyncio.run(_count(target))  # create the schema outside the measurement
        wal0, commits0 = _pg_wal(dsn)
        rate, stats = measure_procs(target, workers, cycles, concurrency)
        wal1, commits1 = _pg_wal(dsn)
    finally:
        _drop_schema(dsn, schema)
    return rate, stats, wal1 - wal0, commits1 - commits0


def _bench_postgres_level(
    dsn: str,
    cycles: int,
    worker_counts: list[int],
    concurrency: int,
    latency: float,
    rounds: int,
    floor: _Template | None = None,
) -> None:
    """Each round measures every worker count once, one after another, so a host that
    speeds up or slows down during the run affects every count alike; the median round of
    each count is shown, and the 1 → 4 scaling is also given per round. With `floor`, each
    round also replays it at every worker count, right after golem's measurement."""
    results: dict[int, list[tuple[float, dict[str, int], int, int]]] = {}
    floors: dict[int, list[tuple[float, int, int]]] = {}
    for _ in range(rounds):
        for workers in worker_counts:
            got = _pg_round(dsn, cycles, workers, concurrency, latency)
            results.setdefault(workers, []).append(got)
            if floor is not None:
                floors.setdefault(workers, []).append(measure_floor(dsn, floor, workers, cycles))
    for workers in worker_counts:
        ordered = sorted(results[workers], key=lambda r: r[0])
        rate, stats, wal, commits = ordered[len(ordered) // 2]
        n = (cycles // workers) * workers
        label = "worker, " if workers == 1 else "workers,"
        spread = f" [{ordered[0][0]:.0f}–{ordered[-1][0]:.0f}]" if rounds > 1 else ""
        print(
            f"  PostgreSQL  {workers} {label} {concurrency:>2} in flight each "
            f"(pool {_pool_size(concurrency)}): {rate:8.1f} cycles/s{spread}   per cycle: "
            f"{stats['commits'] / n:.1f} golem commits of {stats['transactions'] / n:.1f} "
            f"transactions ({commits / n:.1f} server commits incl. reads and "
            "LISTEN wake-ups), "
            f"{stats['statements'] / n:.1f} statements, "
            f"{stats['round_trips'] / n:.1f} round trips, {wal / n:.1f} WAL records, "
            f"{stats['cpu_us'] / n / 1e3:.2f} ms client CPU, "
            f"{stats['server_us'] / n / 1e3:.2f} ms server CPU (local server only)"
            + (f"; {_cores_busy(rate, stats, n):.2f} cores busy" if stats["server_us"] else "")
        )
    if 1 in results and 4 in results:
        one = sorted(r[0] for r in results[1])
        four = sorted(r[0] for r in results[4])
        median = four[len(four) // 2] / one[len(one) // 2]
        paired = sorted(f[0] / o[0] for o, f in zip(results[1], results[4], strict=True))
        each = ""
        if rounds > 1:
            each = f" (per round: {', '.join(f'{r:.2f}' for r in paired)})"
        ceiling = ""
        busy = sorted(_cores_busy(r[0], r[1], cycles) for r in results[1] if r[1]["server_us"])
        if busy:  # a local server: its CPU is this machine's too
            cpus = len(os.sched_getaffinity(0))
            ceiling = (
                f"; one worker keeps {busy[len(busy) // 2]:.2f} cores busy (client and server), "
                f"so {cpus} cores allow at most {cpus / busy[len(busy) // 2]:.2f}x"
            )
        print(
            f"  PostgreSQL scaling 1 → 4 workers ({concurrency} in flight each): "
            f"{median:.2f}x{' of the medians' if rounds > 1 else ''}{each}{ceiling}"
        )
    if floors:
        _print_floor(results, floors, cycles, rounds)


def _print_floor(
    results: dict[int, list[tuple[float, dict[str, int], int, int]]],
    floors: dict[int, list[tuple[float, int, int]]],
    cycles: int,
    rounds: int,
) -> None:
    """The floor's cycles/s per worker count beside golem's (medians, spread, per-round
    ratios: each floor measurement ran right after golem's of the same round and count),
    and the floor's own 1 → 4 scaling beside golem's."""
    for workers, got in floors.items():
        ordered = sorted(r[0] for r in got)
        rate = ordered[len(ordered) // 2]
        golem = sorted(r[0] for r in results[workers])[len(got) // 2]
        n = (cycles // workers) * workers
        cpu = sorted(r[1] for r in got)[len(got) // 2] / n / 1e3
        server = sorted(r[2] for r in got)[len(got) // 2] / n / 1e3
        busy = f"; {(cpu + server) * rate / 1e3:.2f} cores busy" if server else ""
        spread = f" [{ordered[0]:.0f}–{ordered[-1]:.0f}]" if rounds > 1 else ""
        paired = sorted(f[0] / g[0] for g, f in zip(results[workers], got, strict=True))
        each = f" (per round: {', '.join(f'{r:.2f}' for r in paired)})" if rounds > 1 else ""
        label = "worker, " if workers == 1 else "workers,"
        print(
            f"  PG floor    {workers} {label}  1 in flight each: {rate:8.1f} cycles/s{spread}, "
            f"{cpu:.2f} ms client CPU, {server:.2f} ms server CPU per cycle{busy}; "
            f"floor/golem = {rate / golem:.2f}x{each}"
        )
    if 1 in floors and 4 in floors:
        one = [r[0] for r in floors[1]]
        four = [r[0] for r in floors[4]]
        median = sorted(four)[len(four) // 2] / sorted(one)[len(one) // 2]
        paired = sorted(f / o for o, f in zip(one, four, strict=True))
        g_one = [r[0] for r in results[1]]
        g_four = [r[0] for r in results[4]]
        g_median = sorted(g_four)[len(g_four) // 2] / sorted(g_one)[len(g_one) // 2]
        each = f" (per round: {', '.join(f'{r:.2f}' for r in paired)})" if rounds > 1 else ""
        ceiling = ""
        kept = sorted((r[1] + r[2]) / 1e6 / cycles * r[0] for r in floors[1] if r[2])
        if kept:
            cpus = len(os.sched_getaffinity(0))
            ceiling = (
                f"; one floor process keeps {kept[len(kept) // 2]:.2f} cores busy, so {cpus} "
                f"cores allow it at most {cpus / kept[len(kept) // 2]:.2f}x"
            )
        print(
            f"  PG floor scaling 1 → 4 workers: {median:.2f}x{each}; golem {g_median:.2f}x{ceiling}"
        )


# --------------------------------------------------------------------------- PostgreSQL floor

_Event = tuple[Any, ...]
"""One message golem's PostgreSQL store sent: ("plain", sql), ("query", sql, values, types)
or ("sync",) — a round trip's end."""

_REC_WORKER = "floorrec"
"""The worker ID of the recorded cycle (each replay process substitutes its own)."""


class _Template:
    """The messages of one decide → claim → resume → finish cycle, as golem's PostgreSQL
    store sent them (recorded from a real cycle), and the values to substitute per cycle."""

    def __init__(self, events: list[_Event], run_id: str, conversation_id: str) -> None:
        self.events = events
        self.run_id = run_id.encode()
        self.conversation_id = conversation_id.encode()
        stamps = [
            datetime.fromisoformat(v.decode())
            for e in events
            if e[0] == "query"
            for v, t in zip(e[2], e[3], strict=True)
            if t == OID_TIMESTAMPTZ and v is not None
        ]
        self.first = min(stamps)
        claim = next(
            i for i, e in enumerate(events) if e[0] == "query" and e[1].startswith(_CLAIM_PREFIX)
        )
        self.claim_at = max(
            i for i, e in enumerate(events[:claim]) if e[0] == "plain" and e[1].startswith(b"BEGIN")
        )
        """Where the claim's transaction begins (a drain replays from there)."""

    def summary(self) -> tuple[int, int, int]:
        """Transactions, statements and round trips per cycle."""
        begins = sum(e[0] == "plain" and e[1].startswith(b"BEGIN") for e in self.events)
        queries = sum(e[0] == "query" for e in self.events)
        syncs = sum(e[0] == "sync" for e in self.events)
        return begins, queries, syncs


async def _record_pg_cycle(dsn: str) -> _Template:
    """Run golem cycles in a fresh schema and record every message its store sends for one
    of them (after two warm-up cycles: statements prepared, sweeps done)."""
    from golem.durable.store import _pg_wire as pgmod

    events: list[_Event] = []
    recording = [False]
    send, send_plain, sync = pgmod.PgConn._send, pgmod.PgConn._send_plain, pgmod.PgConn._sync

    def rec_send(self: Any, sql: str, params: Any, then: Any = None) -> None:
        if recording[0]:
            values, types = pgmod._dump(params)
            events.append(("query", pgmod._pg_sql(sql), values, types))
        send(self, sql, params, then)

    def rec_plain(self: Any, sql: bytes) -> None:
        if recording[0]:
            events.append(("plain", sql))
        send_plain(self, sql)

    def rec_sync(self: Any) -> Any:
        if recording[0]:
            events.append(("sync",))
        return sync(self)

    schema = f"bench_{uuid.uuid4().hex[:12]}"
    pgmod.PgConn._send, pgmod.PgConn._send_plain = rec_send, rec_plain  # type: ignore[method-assign]
    pgmod.PgConn._sync = rec_sync  # type: ignore[method-assign]
    try:
        store = await PostgresStore.open(dsn, schema=schema, pool_size=2)
        try:
            registry = _registry(0.0)
            worker = Worker(
                store, registry, worker_id=_REC_WORKER, lease_seconds=30, sweep_interval=3600
            )
            for _ in range(2):
                run = await start_run(store, registry, "bank", "pay", started_by=_REC_WORKER)
                await store.decide(run.id, "call-1", Decision.approve(), decided_by=_REC_WORKER)
                await worker.run_once()
            recording[0] = True
            run = await start_run(store, registry, "bank", "pay", started_by=_REC_WORKER)
            await store.decide(run.id, "call-1", Decision.approve(), decided_by=_REC_WORKER)
            assert await worker.run_once()
            recording[0] = False
            assert (await store.get_run(run.id)).status is RunStatus.COMPLETED
        finally:
            await store.close()
    finally:
        pgmod.PgConn._send, pgmod.PgConn._send_plain = send, send_plain  # type: ignore[method-assign]
        pgmod.PgConn._sync = sync  # type: ignore[method-assign]
        _drop_schema(dsn, schema)
    return _Template(events, run.id, run.conversation_id)


_CLAIM_PREFIX = b"WITH picked AS"
"""How the claim statement's text begins: its first row names the run it took."""


class _Replay:
    """golem's recorded cycle sent again with bare synchronous psycopg at the libpq level:
    same statements, parameters, transactions and round trips (pipeline mode, each
    statement prepared once per connection, binary results), blocking on the socket.
    No asyncio, no golem. A claim may take another process's run (as golem's workers do):
    the rest of the cycle then finishes the run it took."""

    def __init__(self, dsn: str, schema: str, worker: str, template: _Template) -> None:
        from psycopg import pq
        from psycopg.conninfo import make_conninfo

        self.pq = pq
        self.pg = pq.PGconn.connect(make_conninfo(dsn, options=f"-c search_path={schema}").encode())
        if self.pg.status != pq.ConnStatus.OK:
            raise SystemExit(f"floor: cannot connect: {self.pg.error_message.decode()}")
        self.template = template
        self.worker = worker.encode()
        self.prepared: dict[tuple[bytes, tuple[int, ...]], bytes] = {}

    def cycle(self, claim_only: bool = False) -> bool:
        """One cycle under fresh IDs (with `claim_only`, from the claim on: a worker that
        finds a ready run); False when the claim took nothing."""
        t = self.template
        new_run = str(uuid.uuid4()).encode()
        subst = {
            t.run_id: new_run,
            t.conversation_id: str(uuid.uuid4()).encode(),
            _REC_WORKER.encode(): self.worker,
        }
        shift = datetime.now(UTC) - t.first
        pg, pq = self.pg, self.pq
        sent: list[bool] = []  # per message: is it the claim statement
        claimed: bytes | None = None
        for event in t.events[t.claim_at if claim_only else 0 :]:
            kind = event[0]
            if kind == "plain":
                pg.send_query_params(event[1], None)
                sent.append(False)
                continue
            if kind == "query":
                sql, values, types = event[1], event[2], event[3]
                values = [
                    self._value(v, ty, subst, shift) for v, ty in zip(values, types, strict=True)
                ]
                key = (sql, types)
                name = self.prepared.get(key)
                if name is None:
                    name = self.prepared[key] = b"floor_%d" % len(self.prepared)
                    pg.send_prepare(name, sql, param_types=types)
                    sent.append(False)
                pg.send_query_prepared(name, values, result_format=pq.Format.BINARY)
                sent.append(sql.startswith(_CLAIM_PREFIX))
                continue
            pg.pipeline_sync()
            got = self._results(len(sent))
            for is_claim, result in zip(sent, got, strict=True):
                if is_claim:
                    claimed = result.get_value(0, 0) if result.ntuples else None
                    if claimed is None:
                        return False  # (its transaction commits; nothing more to do)
                    subst[new_run] = claimed
                    subst[t.run_id] = claimed
            sent = []
        return True

    def _value(
        self, v: bytes | None, oid: int, subst: dict[bytes, bytes], shift: timedelta
    ) -> bytes | None:
        if v is None:
            return None
        if oid == OID_TIMESTAMPTZ:
            return (datetime.fromisoformat(v.decode()) + shift).isoformat().encode()
        for old, new in subst.items():
            if old in v:
                v = v.replace(old, new)
        return v

    def _results(self, n: int) -> list[Any]:
        pq = self.pq
        pg = self.pg
        out = []
        while True:
            r = pg.get_result()
            if r is None:
                continue
            if r.status == pq.ExecStatus.PIPELINE_SYNC:
                break
            if r.status == pq.ExecStatus.FATAL_ERROR:
                raise SystemExit(f"floor: the server refused a statement: {r.error_message!r}")
            out.append(r)
        if len(out) != n:
            raise SystemExit(f"floor: {len(out)} results for {n} messages")
        return out


def _floor_proc(
    dsn: str, schema: str, template: _Template, n: int, name: str, barrier: Any, out: Any
) -> None:
    replay = _Replay(dsn, schema, name, template)
    replay.pg.enter_pipeline_mode()
    if _PIN[0]:
        _pin(int(name[1:]), _PIN[0])
    backend = replay.pg.backend_pid
    barrier.wait()
    cpu, server = time.process_time(), _backend_cpu_us(backend)
    for _ in range(n):
        replay.cycle()
    while replay.cycle(claim_only=True):  # then finish whatever is still ready
        pass
    out.put((int((time.process_time() - cpu) * 1e6), _backend_cpu_us(backend) - server))
    replay.pg.finish()


def measure_floor(
    dsn: str, template: _Template, workers: int, cycles: int
) -> tuple[float, int, int]:
    """golem's recorded cycle replayed `cycles` times over `workers` processes, each one
    cycle at a time, in a fresh schema: cycles/s, the processes' CPU and their server
    backends' CPU (µs, summed; 0 for a server elsewhere)."""
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    target = {"kind": "postgresql", "dsn": dsn, "schema": schema}
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(workers + 1)
    out = ctx.Queue()
    per = max(1, cycles // workers)
    try:
        asyncio.run(_count(target))  # golem creates the schema, outside the measurement
        procs = [
            ctx.Process(
                target=_floor_proc, args=(dsn, schema, template, per, f"f{i}", barrier, out)
            )
            for i in range(workers)
        ]
        for p in procs:
            p.start()
        barrier.wait(timeout=120)
        start = time.perf_counter()
        cpu = [out.get(timeout=600) for _ in procs]
        elapsed = time.perf_counter() - start
        for p in procs:
            p.join()
        if any(p.exitcode != 0 for p in procs):
            raise SystemExit(f"a floor process failed (exit codes {[p.exitcode for p in procs]})")
        done, total = asyncio.run(_count(target))
    finally:
        _drop_schema(dsn, schema)
    if done != total or total != per * workers:
        raise SystemExit(
            f"floor lost work: {done} of {total} runs completed, {per * workers} started"
        )
    return total / elapsed, sum(c for c, _ in cpu), sum(b for _, b in cpu)


_LOOP = ["asyncio"]
"""`--loop`: the event loop every measurement runs on (asyncio or uvloop)."""

_PIN: list[list[int]] = [[]]
"""With `--pin`, the CPUs to spread worker processes over (SQLite: this process on the first;
PostgreSQL: worker i on the i-th, round robin); empty without."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=1000, help="cycles per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="SQLite rounds (best is shown)")
    parser.add_argument(
        "--pg-rounds",
        type=int,
        default=1,
        help="PostgreSQL rounds, each measuring every worker count in turn (median is shown)",
    )
    parser.add_argument("--dsn", default=os.environ.get("GOLEM_TEST_POSTGRES_DSN", ""))
    parser.add_argument(
        "--workers", default="1,2,4", help="PostgreSQL worker counts (comma-separated)"
    )
    parser.add_argument("--only", choices=("sqlite", "postgres"), help="run one backend")
    parser.add_argument(
        "--concurrency",
        default="1,16",
        help="cycles in flight per worker process, one measurement each (comma-separated)",
    )
    parser.add_argument(
        "--model-latency",
        type=float,
        default=0.0,
        help="seconds each model call takes (0: answers at once; try 0.05 for a provider)",
    )
    parser.add_argument(
        "--tool-in-thread",
        action="store_true",
        help="run the sync tool in a thread (default: on the loop, run_in_thread=False)",
    )
    parser.add_argument(
        "--pin",
        action="store_true",
        help="keep each worker process on one CPU (as `taskset -c N golem worker` would)",
    )
    parser.add_argument(
        "--loop",
        choices=("asyncio", "uvloop"),
        default="asyncio",
        help="the event loop of every process (uvloop: pip install 'golem-agents[uvloop]')",
    )
    args = parser.parse_args()
    _PIN[0] = sorted(os.sched_getaffinity(0)) if args.pin else []
    _LOOP[0] = args.loop
    if args.loop == "uvloop":
        _use_uvloop()
    if args.tool_in_thread:  # read by every worker process's registry (spawned: env is inherited)
        os.environ["GOLEM_BENCH_TOOL_IN_THREAD"] = "1"
    levels = [int(c) for c in args.concurrency.split(",")]
    if any(c < 1 for c in levels):
        parser.error("--concurrency levels must be >= 1")
    print("store throughput: pause-save → decide → claim → resume → complete")
    where = "in a thread" if args.tool_in_thread else "on the event loop (run_in_thread=False)"
    print(f"  (the gated sync tool runs {where})")
    if args.model_latency > 0:
        print(f"  (each of the 2 model calls per cycle takes {args.model_latency * 1e3:.0f} ms)")
    if args.pin:
        print("  (each worker process kept on one CPU: --pin)")
    if args.loop == "uvloop":
        print("  (every process runs on uvloop: --loop uvloop)")
    if args.only != "postgres":
        if args.pin:
            _pin(0, _PIN[0])
        bench_sqlite(args.cycles, args.rounds, levels, args.model_latency)
        if args.pin:  # PostgreSQL's worker processes are spread over every CPU again
            os.sched_setaffinity(0, set(_PIN[0]))
    if args.only == "sqlite":
        pass
    elif not args.dsn:
        print("  PostgreSQL  skipped (pass --dsn or set GOLEM_TEST_POSTGRES_DSN)")
    else:
        workers = [int(w) for w in args.workers.split(",")]
        bench_postgres(
            args.dsn, args.cycles, workers, levels, args.model_latency, max(1, args.pg_rounds)
        )
    print(
        f"  ({os.cpu_count()} CPUs, shared with whatever else runs; every PG worker is a process)"
    )


if __name__ == "__main__":
    main()
