"""The service over PostgreSQL: the decision cycle, the event stream, a URL-opened store, and
streams push-fed by `NOTIFY`: two service processes on one database see every change."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from golem.durable.store import Decision, Store
from golem.durable.worker import Worker, start_run
from golem.service import ServiceSettings, create_app
from tests.support.durable.backends import Backend, backend_for
from tests.support.service import bearer, make_auth, open_stream

pytestmark = pytest.mark.postgres


@pytest.fixture
def pg(tmp_path: Path) -> Iterator[Backend]:
    with backend_for("postgres", tmp_path) as backend:
        yield backend


@pytest.fixture
async def pg_store(pg: Backend) -> AsyncIterator[Store]:
    store = await pg.open()
    try:
        yield store
    finally:
        await store.close()


async def test_decide_stream_and_resume_on_postgres(registry: Any, pg_store: Store) -> None:
    app = create_app(
        ServiceSettings(registry, pg_store, auth=make_auth(), stream_poll_interval=0.02)
    )
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://pg.test") as http:
        res = await http.post(
            "/api/runs", json={"agent": "twin", "prompt": "go"}, headers=bearer("alice")
        )
        run = res.json()["run"]
        async with open_stream(app, headers=bearer("olga")) as stream:
            await stream.next("hello")
            await pg_store.decide(run["id"], "c1", Decision.approve(), decided_by="zoe")
            change = (await stream.next("change")).json()
            assert (change["run_id"], change["action"], change["actor"]) == (
                run["id"],
                "decided",
                "zoe",
            )
        path = f"/api/runs/{run['id']}/calls/c1/decision"
        res = await http.post(path, json={"decision": "deny"}, headers=bearer("alice"))
        assert res.status_code == 409
        assert res.json()["error"]["code"] == "decision_conflict"
        res = await http.post(
            f"/api/runs/{run['id']}/calls/c2/decision",
            json={"decision": "deny", "reason": "frozen"},
            headers=bearer("olga"),
        )
        assert res.json()["run"]["status"] == "ready"
        assert await Worker(pg_store, registry).run_once()
        shown = (await http.get(f"/api/runs/{run['id']}", headers=bearer("alice"))).json()["run"]
        assert shown["status"] == "completed"
        assert shown["outcome"]["output"].startswith(
            "deployed to staging; Your tool call was denied: frozen."
        )


async def test_a_postgres_url_is_opened_by_the_app(registry: Any, pg: Backend) -> None:
    if pg.schema is None or pg.dsn is None:
        pytest.fail("the postgres backend has no schema")
    await (await pg.open()).close()  # creates the test's own schema
    dsn = pg.dsn + ("&" if "?" in pg.dsn else "?") + f"options=-csearch_path%3D{pg.schema}"
    app = create_app(ServiceSettings(registry, dsn, auth=make_auth()))

    def use() -> None:  # TestClient runs the app on its own event loop, in a thread
        with TestClient(app) as client:
            assert client.get("/api/health").json()["status"] == "ok"
            res = client.post(
                "/api/runs", json={"agent": "echo", "prompt": "hi"}, headers=bearer("alice")
            )
            assert res.json()["run"]["status"] == "completed"

    await asyncio.to_thread(use)


@pytest.mark.loop
async def test_two_service_processes_both_stream_every_change(registry: Any, pg: Backend) -> None:
    """Each app has its own store (its own `LISTEN` connection), as two processes would; the
    streams' own poll interval is an hour, so only `NOTIFY` can deliver."""
    a, b, writer = await pg.open(), await pg.open(), await pg.open()
    try:
        apps = [
            create_app(
                ServiceSettings(
                    registry, s, auth=make_auth(), stream_poll_interval=3600, stream_heartbeat=3600
                )
            )
            for s in (a, b)
        ]
        async with (
            open_stream(apps[0], headers=bearer("alice")) as first,
            open_stream(apps[1], headers=bearer("alice")) as second,
        ):
            for stream in (first, second):
                await stream.next("hello")
            runs = [
                await start_run(writer, registry, "twin", "go", started_by="w") for _ in range(3)
            ]
            for run in runs:
                await writer.decide(run.id, "c1", Decision.approve(), decided_by="zoe")
            expected = [e.id for r in runs for e in await writer.audit(r.id)]
            for stream in (first, second):
                got = [int((await stream.next("change")).id or 0) for _ in expected]
                assert got == sorted(expected)
    finally:
        for s in (a, b, writer):
            await s.close()
