"""How many store calls the service makes per request, at two log sizes.

    .venv/bin/python bench/service_store_reads.py

A count that grows with the log is an N+1 read: the audit views and the notifier read each
entry's agent along with the log (no `get_run` per entry), a keyed start reads its run once
(a repeat too, and a plain start not at all). Seeds runs of three agents into a temporary
SQLite store and prints the store methods each request called, for 6 and for 60 runs.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.agents import build_registry
from tests.support.service import bearer, make_auth, sign_in

from golem.durable.store import Decision, Store, open_store
from golem.durable.worker import start_run
from golem.service import ServiceSettings, create_app
from golem.service.notify import Notifier, Webhook


class Counting:
    """A store that counts the calls made to each of its methods."""

    def __init__(self, inner: Store) -> None:
        self._inner = inner
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return attr(*args, **kwargs)

        return counted


async def _seed(store: Store, registry: Any, runs: int) -> None:
    for n in range(runs):
        agent = ("twin", "mixed", "echo")[n % 3]
        run = await start_run(store, registry, agent, f"p{n}", started_by="alice")
        if agent == "twin" and n % 2 == 0:
            await store.decide(run.id, "c1", Decision.approve(), decided_by="alice")


def _row(what: str, calls: Counter[str]) -> None:
    shown = ", ".join(f"{k} {v}" for k, v in sorted(calls.items()) if k != "change_feed")
    print(f"  {what:<34} {shown or '-'}")


async def _measure(runs: int) -> None:
    registry = build_registry()
    with tempfile.TemporaryDirectory() as folder:
        store = await open_store(f"sqlite:///{folder}/b.db")
        try:
            await _seed(store, registry, runs)
            counting = Counting(store)
            app = create_app(ServiceSettings(registry, counting, auth=make_auth()))  # type: ignore[arg-type]
            transport = httpx.ASGITransport(app=app)
            print(f"{runs} runs:")
            async with httpx.AsyncClient(transport=transport, base_url="http://golem.test") as c:
                await sign_in(c, "olga")
                for url in ("/api/audit?limit=500", "/audit", "/audit?format=csv"):
                    counting.calls.clear()
                    headers = bearer("olga") if url.startswith("/api") else {}
                    assert (await c.get(url, headers=headers)).status_code == 200
                    _row(f"GET {url}", counting.calls)
                body = {"agent": "twin", "prompt": "ship it"}
                keyed = {**bearer("alice"), "Idempotency-Key": f"k-{runs}"}
                for what, headers in (("keyed start", keyed), ("its repeat", keyed)):
                    counting.calls.clear()
                    await c.post("/api/runs", json=body, headers=headers)
                    _row(f"POST /api/runs ({what})", counting.calls)
                counting.calls.clear()
                await c.post("/api/runs", json=body, headers=bearer("alice"))
                _row("POST /api/runs (plain start)", counting.calls)
            counting.calls.clear()
            notifier = Notifier(
                counting,  # type: ignore[arg-type]
                [Webhook("https://hooks.example/echo", agents=frozenset({"echo"}))],
                public_url="http://golem.test",
                transport=httpx.MockTransport(lambda r: httpx.Response(200)),
            )
            await notifier.step(0)
            await notifier.drain()
            await notifier.close()
            ended = sum(1 for d in notifier.deliveries if d.event == "run.ended")
            _row(f"notifier, {ended} run.ended sent", counting.calls)
        finally:
            await store.close()


async def main() -> None:
    for runs in (6, 60):
        await _measure(runs)


if __name__ == "__main__":
    asyncio.run(main())
