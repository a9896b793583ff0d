"""The inbox change stream (`GET /api/events`, server-sent events).

The stream never ends by itself, so these tests drive the ASGI app directly: they read
the response body as it is sent and disconnect when done. One test runs it behind a real
uvicorn server on 127.0.0.1.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from golem.durable.store import Decision, Store
from golem.service import ServiceSettings, create_app
from golem.service.positions import read_position
from tests.support.service import (
    TOKENS,
    WAIT,
    StartRun,
    bearer,
    make_auth,
    open_stream,
    save_run,
    serve,
)

pytestmark = pytest.mark.loop


def unseal(app: Starlette, cursor: str) -> int | None:
    """The audit cursor a stream's sealed `hello` cursor stands for."""
    return read_position(make_auth().secret, cursor, full_view=False)


async def test_a_change_made_through_the_store_is_streamed(
    app: Starlette, store: Store, start: StartRun
) -> None:
    run = await start("twin")
    async with open_stream(app, headers=bearer("alice")) as stream:
        assert stream.status == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
        hello = await stream.next("hello")
        assert hello.json()["identity"] == "alice"
        # the start is sealed (ADR 0073): opaque to the caller, read back by the service
        assert hello.id == hello.json()["cursor"]
        assert unseal(app, hello.json()["cursor"]) == await store.last_change_id()
        await store.decide(run["id"], "c1", Decision.approve(), decided_by="zoe")
        change = await stream.next("change")
        data = change.json()
        assert data["run_id"] == run["id"]
        assert data["action"] == "decided"
        assert data["actor"] == "zoe"
        assert data["agent"] == "twin"
        assert data["status"] == "pending"
        assert data["detail"]["call_id"] == "c1"
        assert change.id == str(data["id"])
        assert data["id"] == (await store.audit(run["id"]))[-1].id


async def test_a_replayed_change_names_its_runs_current_status_and_parent(
    app: Starlette, store: Store, start: StartRun
) -> None:
    run = await start("twin")
    for call in ("c1", "c2"):
        await store.decide(run["id"], call, Decision.approve(), decided_by="zoe")
    last = await store.last_change_id()
    async with open_stream(app, headers=bearer("alice"), query="cursor=0") as stream:
        while True:
            ev = await stream.next("change")
            assert ev.json()["status"] == "ready"  # as the run is now
            assert ev.json()["parent_run_id"] is None
            if int(ev.id or 0) >= last:
                break


async def test_the_stream_resumes_after_a_cursor(
    app: Starlette, store: Store, start: StartRun
) -> None:
    first = await start("twin")
    second = await start("twin")
    cursor = (await store.audit(first["id"]))[-1].id
    async with open_stream(app, headers={**bearer("alice"), "Last-Event-ID": str(cursor)}) as s:
        change = await s.next("change")
        assert (change.json()["run_id"], change.json()["action"]) == (second["id"], "created")
    async with open_stream(app, headers=bearer("alice"), query="cursor=0") as s:
        assert (await s.next("change")).json()["run_id"] == first["id"]
        assert (await s.next("change")).json()["run_id"] == second["id"]
    # `?cursor=1.0` is an integer to JSON Schema, as to the other integer parameters
    async with open_stream(app, headers=bearer("alice"), query="cursor=1.0") as s:
        assert s.status == 200
        assert unseal(app, (await s.next("hello")).json()["cursor"]) == 1


async def test_the_stream_takes_a_token_a_stream_token_or_the_inbox_session_only(
    app: Starlette, client: httpx.AsyncClient
) -> None:
    token = (await client.post("/api/stream-token", headers=bearer("alice"))).json()["stream_token"]
    cookie = (await client.post("/login", data={"token": TOKENS["tess"]})).headers["set-cookie"]
    for kw, who in (
        ({"query": f"stream_token={token}"}, "alice"),
        ({"headers": {"Cookie": cookie.split(";")[0]}}, "tess"),
    ):
        async with open_stream(app, **kw) as stream:  # type: ignore[arg-type]
            assert stream.status == 200
            assert (await stream.next("hello")).json()["identity"] == who
    client.cookies.clear()
    auth = make_auth()
    cred = auth.authenticate(TOKENS["alice"])
    stale, _ = auth.issue_stream_token(cred, now=0.0)  # type: ignore[arg-type]
    session = auth.issue_session(cred)  # type: ignore[arg-type]
    for params in ({}, {"stream_token": "forged.token"}, {"stream_token": stale},
                   {"stream_token": session}):  # fmt: skip
        res = await client.get("/api/events", params=params)
        assert res.status_code == 401
        assert res.json()["error"]["code"] == "unauthenticated"


async def test_an_idle_stream_sends_keep_alive_comments(registry: Any, store: Store) -> None:
    app = create_app(
        ServiceSettings(
            registry, store, auth=make_auth(), stream_poll_interval=0.01, stream_heartbeat=0.01
        )
    )
    async with open_stream(app, headers=bearer("alice")) as stream:
        await stream.next("hello")
        ev = await stream.next()
        assert ev.comment == "keep-alive"


async def test_the_stream_works_behind_uvicorn(registry: Any, tmp_path: Any) -> None:
    app = create_app(
        ServiceSettings(
            registry, f"sqlite:///{tmp_path / 'g.db'}", auth=make_auth(), stream_poll_interval=0.02
        )
    )
    with serve(app) as base:
        async with httpx.AsyncClient(base_url=base, headers=bearer("alice"), timeout=WAIT) as c:
            async with c.stream("GET", "/api/events") as res:
                assert res.status_code == 200
                lines = res.aiter_lines()
                async for line in lines:
                    if line == "event: hello":
                        break
                started = await c.post("/api/runs", json={"agent": "twin", "prompt": "go"})
                run_id = started.json()["run"]["id"]
                event = ""
                async for line in lines:
                    if line.startswith("event: "):
                        event = line.removeprefix("event: ")
                    if event == "change" and line.startswith("data: "):
                        data = json.loads(line.removeprefix("data: "))
                        break
                assert (data["run_id"], data["action"], data["actor"]) == (
                    run_id,
                    "created",
                    "alice",
                )


@pytest.mark.parametrize(
    "hostile",
    [
        "line\nevent: change\ndata: {}\n\n",
        "cr\r\rid: 999\r\n",
        "nel\x85event: end",
        "ls\u2028event: end\u2029data: x",
        "vt\x0bff\x0cfs\x1c",
    ],
)
async def test_model_text_cannot_forge_a_line_of_the_stream(
    app: Starlette, store: Store, hostile: str
) -> None:
    # Found (defence in depth): data was JSON with raw non-ASCII, so U+0085, U+2028 and
    # U+2029 went out as they were; a client that splits lines like `str.splitlines`
    # (several Python SSE clients do) read a forged `event:` line.
    call = (hostile, hostile, json.dumps({hostile: hostile}))
    await save_run(store, "run-" + hostile, call, conversation_id=hostile, started_by=hostile)
    async with open_stream(app, headers=bearer("alice"), query="cursor=0") as stream:
        change = await stream.next("change")
        assert change.json()["run_id"] == "run-" + hostile  # the text arrives intact
        assert change.json()["actor"] == hostile
        # ASCII only, so no character of it ends a line for any client
        assert change.data.isascii()
        assert change.data.splitlines() == [change.data]
        assert change.id == "1"
