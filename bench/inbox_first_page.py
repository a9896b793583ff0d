"""The inbox's first page with many pending runs: time to answer GET / and GET /api/calls.

    .venv/bin/python bench/inbox_first_page.py [N]

Seeds N pending runs (default 10,000) into a temporary SQLite store, then times the inbox
page (100 runs, oldest first, rendered HTML) and the JSON listing of the same page, in
process (httpx over ASGI). Prints the best of several rounds and, as a floor measured in
the same process, the time to read the same 500 runs straight from the store.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.agents import build_registry

from golem.durable.store import CallKind, NewCall, NewRun, RunStatus
from golem.durable.store.sqlite import SQLiteStore
from golem.service import Approver, AuthConfig, ServiceSettings, create_app

ROUNDS = 5


async def best(fn: object) -> float:
    times = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        await fn()  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return min(times) * 1000


async def main(n: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = await SQLiteStore.open(Path(tmp) / "bench.db")
        for i in range(n):
            await store.save_pending(
                NewRun(
                    id=f"run-{i:06d}",
                    agent="twin",
                    conversation_id=f"c{i}",
                    history=f'[{{"role": "user", "content": "request {i}"}}]',
                    calls=(NewCall("c1", CallKind.APPROVAL, "deploy", '{"target": "x"}'),),
                )
            )
        app = create_app(
            ServiceSettings(build_registry(), store, auth=AuthConfig({"t": Approver("a")}))
        )
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://b") as c:
            await c.post("/login", data={"token": "t"})

            async def page() -> None:
                res = await c.get("/")
                assert res.status_code == 200
                assert "request 0<" in res.text

            async def api() -> None:
                res = await c.get("/api/calls", headers={"Authorization": "Bearer t"})
                assert res.json()["calls"][0]["run_id"] == "run-000000"

            async def floor() -> None:
                read = getattr(store, "list_runs_page", None)  # the keyset page, where present
                if read is not None:
                    await read(status=RunStatus.PENDING, limit=500)
                else:
                    await store.list_runs(status=RunStatus.PENDING, limit=500)

            f, a, p = await best(floor), await best(api), await best(page)
        await store.close()
    print(f"{n} pending runs, best of {ROUNDS} (a shared, loaded machine: treat as a range)")
    print(f"  store: read the oldest 500    {f:8.1f} ms  (floor)")
    print(f"  GET /api/calls (oldest 500)   {a:8.1f} ms  ({a / f:.1f}x floor)")
    print(f"  GET / (inbox page, 100 runs)  {p:8.1f} ms  ({p / f:.1f}x floor)")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000))
