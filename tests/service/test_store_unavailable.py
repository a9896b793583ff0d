"""A store that cannot be reached makes the service answer 503 with `Retry-After`, not 500.

The database restarting, refusing connections or not answering in time is an outage the
client can wait out: the API says so (`store_unavailable`), the inbox shows a page that says
to try again, and nothing is half done. A store error that escaped its translation (a bug)
still answers 500.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from golem.durable.store import (
    RunNotInterrupted,
    RunStatus,
    Store,
    StoreBusy,
    StoreReadOnly,
    StoreTimeout,
)
from golem.durable.store.postgres import PostgresStore
from golem.errors import StoreError
from golem.service import ServiceSettings, create_app
from tests.support.agents import build_registry
from tests.support.service import (
    WAIT,
    StartRun,
    bearer,
    fail_every_call,
    make_auth,
    open_stream,
    sign_in,
)


def assert_unavailable(res: httpx.Response) -> None:
    assert res.status_code == 503, res.text
    assert res.headers["Retry-After"] == "1"
    assert res.headers["Cache-Control"] == "no-store"


@pytest.mark.parametrize(
    "error",
    [
        StoreError("postgresql: server closed the connection unexpectedly"),
        StoreTimeout(60, commit_sent=True),
        StoreBusy("cannot connect to PostgreSQL …: no free connection slot"),
        StoreReadOnly("postgresql: the database is read-only: cannot execute INSERT"),
    ],
    ids=["lost", "timeout", "busy", "read_only"],
)
async def test_the_api_and_the_inbox_answer_503_while_the_store_is_away(
    client: httpx.AsyncClient, store: Store, start: StartRun, error: Exception
) -> None:
    run = await start()
    decide = f"/api/runs/{run['id']}/calls/c1/decision"
    csrf = await sign_in(client)
    fail_every_call(store, error)
    for res in [
        await client.get("/api/calls", headers=bearer("alice")),
        await client.get(f"/api/runs/{run['id']}", headers=bearer("alice")),
        await client.post(decide, json={"decision": "approve"}, headers=bearer("alice")),
        await client.post(
            "/api/runs", json={"agent": "twin", "prompt": "x"}, headers=bearer("alice")
        ),
    ]:
        assert_unavailable(res)
        assert res.json()["error"]["code"] == "store_unavailable"
    health = await client.get("/api/health")
    assert health.status_code == 503
    assert health.json()["status"] == "unavailable"
    for res in [
        await client.get("/"),
        await client.get(f"/runs/{run['id']}"),
        await client.post(f"/runs/{run['id']}/resolve", data={"csrf": csrf, "action": "retry"}),
    ]:
        assert_unavailable(res)
        assert res.headers["Content-Type"].startswith("text/html")
        assert "Try again shortly" in res.text


async def test_a_store_error_that_escaped_its_translation_is_still_a_500(
    client: httpx.AsyncClient, store: Store, start: StartRun
) -> None:
    run = await start()
    fail_every_call(store, RunNotInterrupted(run["id"], RunStatus.PENDING))
    res = await client.get("/api/calls", headers=bearer("alice"))
    assert res.status_code == 500
    assert "Retry-After" not in res.headers


@pytest.fixture
async def down_client() -> AsyncIterator[httpx.AsyncClient]:
    """The service over a PostgreSQL store whose server is not there (nothing listens)."""
    store = PostgresStore("postgresql://golem@127.0.0.1:1/golem", connect_timeout=5)
    app = create_app(ServiceSettings(build_registry(), store, auth=make_auth()))
    try:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://golem.test") as c:
            yield c
    finally:
        await store.close()


async def test_a_database_that_refuses_connections_is_a_503(
    down_client: httpx.AsyncClient,
) -> None:
    res = await down_client.get("/api/calls", headers=bearer("alice"))
    assert_unavailable(res)
    assert res.json()["error"]["code"] == "store_unavailable"


async def test_a_stream_from_a_cursor_while_the_store_is_away_is_a_503(
    app: Starlette, store: Store, start: StartRun
) -> None:
    # Found: with ?cursor= (or Last-Event-ID, as every reconnect sends) the stream read
    # nothing before its 200: the first read then failed inside the response, which
    # Starlette can no longer answer ("response already started"): the connection dropped
    # with a server error in the log.
    await start("twin")
    fail_every_call(store, StoreError("postgresql: the database system is starting up"))
    async with open_stream(app, headers=bearer("alice"), query="cursor=0") as stream:
        assert stream.status == 503
        assert stream.headers["retry-after"] == "1"


@pytest.mark.parametrize(
    "error",
    [
        StoreError("postgresql: server closed the connection"),
        StoreBusy("cannot connect to PostgreSQL …: no free connection slot"),
        StoreTimeout(60, commit_sent=False),
    ],
    ids=["lost", "busy", "timeout"],
)
async def test_a_stream_whose_store_goes_away_ends_cleanly(
    registry: Any, store: Store, start: StartRun, error: StoreError
) -> None:
    # Before, a read that failed mid-stream raised out of the app after its 200 (an
    # error in the server's log, the connection cut); now the stream ends, and the
    # client reconnects after `retry:` from its Last-Event-ID.
    app = create_app(ServiceSettings(registry, store, auth=make_auth(), stream_heartbeat=0.05))
    await start("twin")
    async with open_stream(app, headers=bearer("alice"), query="cursor=0") as stream:
        await stream.next("change")
        fail_every_call(store, error)  # busy: found in the third chaos round (ADR 0068)
        # ends by itself, the client still connected, without raising
        await asyncio.wait_for(stream.ended.wait(), WAIT)
    assert app.state.golem.open_streams == {}
