"""Large stores: first pages over 100,000 runs, and memory over 10,000 resumes.

    python bench/store_scale.py [--runs N] [--resumes N] [--dsn postgresql://...]

Paging: saves `--runs` pending runs (each with a 4-message history and one pending call),
then times the first page of `list_pending_calls` and `list_runs_page` (50 rows, keyset:
only the page's rows and histories are read), a deep page (after walking 1,000 rows), and
for contrast the old offset listing `list_runs(limit=50, offset=...)` at the same depth.

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

from golem.store import CallKind, NewCall, NewRun
from golem.store._sql import SQLStore
from golem.store.postgres import PostgresStore
from golem.store.sqlite import SQLiteStore

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
    with tempfile.TemporaryDirectory() as tmp:
        store = await SQLiteStore.open(Path(tmp) / "scale.db")
        try:
            await paging(store, "SQLite", args.runs)
        finally:
            await store.close()
        store = await SQLiteStore.open(Path(tmp) / "mem.db")
        try:
            await memory(store, args.resumes)
        finally:
            await store.close()
    if args.dsn:
        schema = f"bench_{uuid.uuid4().hex[:12]}"
        pg = await PostgresStore.open(args.dsn, schema=schema)
        try:
            await paging(pg, "PostgreSQL", args.runs)
        finally:
            await pg.close()
            st._drop_schema(args.dsn, schema)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--resumes", type=int, default=10_000)
    parser.add_argument("--dsn", default=os.environ.get("GOLEM_TEST_POSTGRES_DSN", ""))
    print("store at scale (a shared, loaded machine: figures are indicative)")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
