"""What a 404 for a run the caller may not see costs next to one for an ID no run has.

    python bench/hidden_run_statements.py [--dsn postgresql://...]

ADR 0073: the two answers are the same, and so should be the work behind them, or their
timing tells which run IDs exist. Printed per route: the statements each answer ran on
SQLite (the statements themselves must match) and, with `--dsn` or
`GOLEM_TEST_POSTGRES_DSN`, the statement counts on PostgreSQL. "same" is what to expect.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
from tests.support.agents import build_registry
from tests.support.service import bearer, make_auth, sign_in

from golem import new_id
from golem.durable.store.postgres import PostgresStore
from golem.durable.store.sqlite import SQLiteStore
from golem.durable.worker import start_run
from golem.service import ServiceSettings, create_app

ROUTES = [
    ("GET", "/api/runs/{}", "bearer", None),
    ("HEAD", "/api/runs/{}", "bearer", None),
    ("POST", "/api/runs/{}/calls/a1/decision", "bearer", {"decision": "approve"}),
    ("GET", "/runs/{}", "session", None),
]


async def compare(name: str, store: Any, measure: Any) -> None:
    """Print, per route, whether a hidden run's 404 cost what an unknown ID's did."""
    registry = build_registry()
    hidden = await start_run(store, registry, "mixed", "m", started_by="alice")
    unknown = new_id()
    app = create_app(ServiceSettings(registry, store, auth=make_auth()))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://golem.test") as c:
        await sign_in(c, "olga")  # olga may not see agent "mixed"
        for method, template, how, body in ROUTES:
            headers = bearer("olga") if how == "bearer" else {}
            costs, codes = [], []
            for run_id in (hidden.id, unknown):
                res, cost = await measure(
                    c.request(method, template.format(run_id), headers=headers, json=body)
                )
                costs.append(cost)
                codes.append(res.status_code)
            verdict = "same" if costs[0] == costs[1] else "DIFFERENT"
            print(
                f"{name:10} {method:4} {template:34} {codes} {verdict}: {len(costs[0])} statements"
            )


async def sqlite() -> None:
    with tempfile.TemporaryDirectory() as folder:
        store = SQLiteStore(Path(folder) / "bench.db")
        trace: list[tuple[str, tuple[Any, ...]]] = []
        store.trace = trace  # before first use: every connection records into this list

        async def measure(request: Any) -> tuple[httpx.Response, list[str]]:
            trace.clear()
            res = await request
            return res, [sql for sql, _ in trace]

        try:
            await compare("sqlite", store, measure)
        finally:
            await store.close()


async def postgres(dsn: str) -> None:
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    store = await PostgresStore.open(dsn, schema=schema)
    stats = store.stats

    async def measure(request: Any) -> tuple[httpx.Response, list[int]]:
        before = stats.statements
        res = await request
        return res, [0] * (stats.statements - before)

    try:
        await compare("postgresql", store, measure)
    finally:
        await store.close()
        import psycopg

        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=os.environ.get("GOLEM_TEST_POSTGRES_DSN", ""))
    args = parser.parse_args()
    asyncio.run(sqlite())
    if args.dsn:
        asyncio.run(postgres(args.dsn))


if __name__ == "__main__":
    main()
