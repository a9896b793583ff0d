"""Large stores: first pages over 100,000 runs and 100,000 audit entries, memory over resumes.

    python bench/store_scale.py [--runs N] [--resumes N] [--audit N] [--part all|runs|memory|audit]
                                [--dsn postgresql://...]

Paging: saves `--runs` pending runs (each with a 4-message history and one pending call),
then times the first page of `list_pending_calls` and `list_runs_page` (50 rows, keyset:
only the page's rows and histories are read), a deep page (after walking 1,000 rows), and
for contrast the old offset listing `list_runs(limit=50, offset=...)` at the same depth.

Audit: writes `--audit` entries over 1,000 runs of ten agents (interleaved), then times a
page of `Store.audit_page` (the audit view's query) for an approver who sees one agent of
ten, two of ten, and every agent, with an action filter that matches only old entries (the
page looks at 5,000 entries, then hands on a cursor), and a page deep in the log — at
`--audit` entries and at 1,000, so the two can be compared; for contrast, what the view did
before (read the newest 5,000 entries of the whole log, then filter).

Memory: runs `--resumes` decide → claim → resume → finish cycles in this process and prints
the resident set size every 2,000 (flat means no growth per resume).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import resource
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import store_throughput as st

from golem.durable.store import CallKind, NewCall, NewRun
from golem.durable.store._sql import SQLStore
from golem.durable.store.postgres import PostgresStore
from golem.durable.store.sqlite import SQLiteStore

HISTORY = (
    '[{"role":"user","content":"please pay the invoice"},'
    '{"role":"assistant","tool_calls":[{"id":"c1","name":"pay","args":{"amount":10}}]}]'
)


def _rss_mb() -> float:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:  # not Linux: the peak is the best there is
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def _fill(store: SQLStore, n: int) -> None:
    batch = []
    for i in range(n):
        run = NewRun(
            id=f"run-{i:07d}-{uuid.uuid4().hex[:6]}",
            agent="ops" if i % 2 else "web",
            conversation_id=uuid.uuid4().hex,
            history=HISTORY,
            calls=(NewCall("c1", CallKind.APPROVAL, "pay", '{"amount": 10}', "money"),),
            started_by="bench",
        )
        batch.append(store.save_pending(run))
        if len(batch) == 200:
            await asyncio.gather(*batch)
            batch.clear()
    await asyncio.gather(*batch)


async def _time(fn: Any, rounds: int = 5) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        await fn()
        best = min(best, time.perf_counter() - start)
    return best * 1e3


async def paging(store: SQLStore, label: str, runs: int) -> None:
    start = time.perf_counter()
    await _fill(store, runs)
    print(f"  {label}: {runs:,} pending runs saved in {time.perf_counter() - start:.1f} s")
    first_calls = await _time(lambda: store.list_pending_calls(limit=50))
    first_runs = await _time(lambda: store.list_runs_page(limit=50, newest_first=True))
    after = None
    for _ in range(20):  # walk 1,000 rows
        page = await store.list_pending_calls(after=after, limit=50)
        after = page.next_cursor
    deep = await _time(lambda: store.list_pending_calls(after=after, limit=50))
    offset = await _time(lambda: store.list_runs(limit=50, offset=runs // 2), rounds=3)
    print(f"    list_pending_calls first page (50)         {first_calls:8.1f} ms")
    print(f"    list_runs_page newest first (50)           {first_runs:8.1f} ms")
    print(f"    list_pending_calls after 1,000 rows        {deep:8.1f} ms")
    print(f"    list_runs(offset={runs // 2:,}) for contrast   {offset:8.1f} ms")


async def _audit_log(store: SQLStore, entries: int) -> None:
    """`entries` audit entries over 1,000 runs of ten agents, round robin."""
    from golem.durable.store import AuditAction, utc_now
    from golem.durable.store._base import Tx

    runs = [f"audit-{i:04d}" for i in range(min(1000, max(entries // 5, 10)))]
    batch = []
    for i, run_id in enumerate(runs):
        run = NewRun(
            id=run_id,
            agent=f"agent-{i % 10}",
            conversation_id=run_id,
            history=HISTORY,
            calls=(NewCall("c1", CallKind.APPROVAL, "pay", '{"amount": 10}', "money"),),
            started_by="bench",
        )
        batch.append(store.save_pending(run))
        if len(batch) == 200:
            await asyncio.gather(*batch)
            batch.clear()
    await asyncio.gather(*batch)
    at = utc_now()

    def write(tx: Tx, start: int, n: int) -> None:
        for k in range(start, start + n):
            tx.audit(runs[k % len(runs)], at, f"user-{k % 7}", AuditAction.CLAIMED, {"k": k})

    left, k = entries - len(runs), 0
    while left > 0:
        n = min(left, 2000)
        await store._submit(True, write, k, n)
        left, k = left - n, k + n


async def audit(store_of: Any, label: str, entries: int) -> None:
    for size in (1_000, entries):
        store = await store_of()
        try:
            await _audit_pages(store, label, size)
        finally:
            await store.close()


async def _audit_pages(store: SQLStore, label: str, size: int) -> None:
    from golem.durable.store import AuditAction

    start = time.perf_counter()
    await _audit_log(store, size)
    took = time.perf_counter() - start
    print(f"  {label}: {size:,} audit entries written in {took:.1f} s")
    newest = await store.last_change_id()
    cases = [
        ("one agent of ten, page of 500", {"agents": ["agent-3"], "limit": 500}),
        ("one agent of ten, page of 50", {"agents": ["agent-3"], "limit": 50}),
        ("two agents of ten, page of 500", {"agents": ["agent-3", "agent-7"], "limit": 500}),
        ("every agent, page of 500", {"agents": None, "limit": 500}),
        (
            "one agent, action=created (all old)",
            {"agents": ["agent-3"], "action": AuditAction.CREATED, "limit": 50},
        ),
        (
            "one agent, page of 500 at mid-log",
            {"agents": ["agent-3"], "limit": 500, "before": newest // 2},
        ),
    ]
    for name, kw in cases:
        ms = await _time(lambda kw=kw: store.audit_page(**kw))
        page = await store.audit_page(**kw)
        more = ", a next page" if page.next_before is not None else ""
        print(f"    {name:<38} {ms:8.2f} ms  ({len(page.entries)} entries{more})")

    async def scan_then_filter() -> int:
        cursor, kept = max(0, newest - 5000), 0
        while batch := await store.changes_since(cursor, limit=1000):
            kept += sum(1 for e in batch if e.agent == "agent-3")
            cursor = batch[-1].id
        return kept

    ms = await _time(scan_then_filter, rounds=3)
    kept = await scan_then_filter()
    print(f"    {'before: newest 5,000 read, filtered':<38} {ms:8.2f} ms  ({kept} entries)")


async def memory(store: SQLStore, resumes: int) -> None:
    await st._cycles(store, 200, "warm")
    gc.collect()
    marks = [_rss_mb()]
    done = 0
    while done < resumes:
        await st._cycles(store, 2000, "w")
        done += 2000
        gc.collect()
        marks.append(_rss_mb())
    print(
        f"  RSS over {done:,} resumes (every 2,000): "
        + " → ".join(f"{m:.1f}" for m in marks)
        + " MB"
    )


async def main_async(args: argparse.Namespace) -> None:
    part = args.part
    with tempfile.TemporaryDirectory() as tmp:
        if part in ("all", "runs"):
            store = await SQLiteStore.open(Path(tmp) / "scale.db")
            try:
                await paging(store, "SQLite", args.runs)
            finally:
                await store.close()
        if part in ("all", "memory"):
            store = await SQLiteStore.open(Path(tmp) / "mem.db")
            try:
                await memory(store, args.resumes)
            finally:
                await store.close()
        if part in ("all", "audit"):

            async def sqlite_store() -> SQLStore:
                return await SQLiteStore.open(Path(tmp) / f"audit-{uuid.uuid4().hex[:6]}.db")

            await audit(sqlite_store, "SQLite", args.audit)
    if args.dsn and part in ("all", "runs"):
        schema = f"bench_{uuid.uuid4().hex[:12]}"
        pg = await PostgresStore.open(args.dsn, schema=schema)
        try:
            await paging(pg, "PostgreSQL", args.runs)
        finally:
            await pg.close()
            st._drop_schema(args.dsn, schema)
    if args.dsn and part in ("all", "audit"):
        schemas: list[str] = []

        async def pg_store() -> SQLStore:
            schemas.append(f"bench_{uuid.uuid4().hex[:12]}")
            return await PostgresStore.open(args.dsn, schema=schemas[-1])

        try:
            await audit(pg_store, "PostgreSQL", args.audit)
        finally:
            for schema in schemas:
                st._drop_schema(args.dsn, schema)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--resumes", type=int, default=10_000)
    parser.add_argument("--audit", type=int, default=100_000)
    parser.add_argument("--part", choices=["all", "runs", "memory", "audit"], default="all")
    parser.add_argument("--dsn", default=os.environ.get("GOLEM_TEST_POSTGRES_DSN", ""))
    print("store at scale (a shared, loaded machine: figures are indicative)")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
