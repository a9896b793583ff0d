"""Attacks at the HTTP layer: caching of answers, HEAD on the stream, slow bodies, forged
SSE lines, hostile call IDs in URLs, cross-site requests with simple content types, and
what the OpenAPI document tells a stranger.

Each test pins a finding of the attack pass (docs/adr/0050) or a defence that held.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from golem.durable.store import CallKind, NewCall, NewRun, Store
from golem.service import ServiceSettings, create_app
from tests.support.service import TOKENS, StartRun, bearer, make_auth, open_stream, sign_in

WAIT = 10.0  # a guard against a hang, never a duration the test asserts


# --------------------------------------------------------------------------- caching


async def test_every_authenticated_answer_is_no_store(
    client: httpx.AsyncClient, start: StartRun
) -> None:
    # Found: JSON answers (runs, arguments, audit entries, identities) and the audit
    # downloads had no Cache-Control, so a shared cache or the browser's disk could keep them.
    run = await start("twin")
    for path in (
        "/api/runs",
        f"/api/runs/{run['id']}",
        "/api/calls",
        "/api/whoami",
        "/api/agents",
        "/api/audit",
        "/api/notifications",
        "/api/openapi.json",
        "/api/health",
        "/api/nothing",
    ):
        res = await client.get(path, headers=bearer("alice"))
        assert res.headers["cache-control"] == "no-store", path
    res = await client.post("/api/stream-token", headers=bearer("alice"))
    assert res.headers["cache-control"] == "no-store"
    res = await client.get("/api/runs")  # a 401 too
    assert res.headers["cache-control"] == "no-store"
    csrf = await sign_in(client)
    for path in ("/audit?format=csv", "/audit?format=json", "/", "/runs", "/nothing"):
        res = await client.get(path)
        assert res.headers["cache-control"] == "no-store", path
    res = await client.post("/logout", data={"csrf": csrf})
    assert res.status_code == 303
    assert res.headers["cache-control"] == "no-store"


async def test_static_files_stay_cacheable(client: httpx.AsyncClient) -> None:
    res = await client.get("/static/inbox.css")
    assert res.status_code == 200
    assert "cache-control" not in res.headers
    assert res.headers["x-content-type-options"] == "nosniff"


async def test_isolation_headers_on_every_answer_and_hsts_only_over_https(
    app: Starlette,
) -> None:
    transport = httpx.ASGITransport(app=app)
    for base, hsts in (("http://golem.test", False), ("https://golem.test", True)):
        async with httpx.AsyncClient(transport=transport, base_url=base) as c:
            for path in ("/login", "/api/health", "/static/inbox.js", "/api/runs"):
                res = await c.get(path)
                assert res.headers["cross-origin-opener-policy"] == "same-origin", path
                assert res.headers["cross-origin-resource-policy"] == "same-origin", path
                assert "camera=()" in res.headers["permissions-policy"], path
                assert "frame-ancestors 'none'" in res.headers["content-security-policy"]
                assert ("strict-transport-security" in res.headers) is hsts, (base, path)


async def test_no_answer_opens_itself_to_other_origins(
    client: httpx.AsyncClient, start: StartRun
) -> None:
    await start("twin")
    evil = {"Origin": "https://evil.example"}
    for method, path in (("GET", "/api/runs"), ("OPTIONS", "/api/runs"), ("GET", "/")):
        res = await client.request(method, path, headers={**evil, **bearer("alice")})
        assert not any(h.startswith("access-control-") for h in res.headers), (method, path)


# --------------------------------------------------------------------------- HEAD and slow bodies


async def test_head_on_the_stream_answers_its_headers_and_holds_no_stream(
    app: Starlette, client: httpx.AsyncClient
) -> None:
    # Found: HEAD /api/events with a credential ran the endless stream with no body to
    # send, holding the connection and one of the identity's stream slots until it closed.
    app.state.golem.max_streams_per_identity = 1
    for _ in range(3):
        res = await asyncio.wait_for(client.head("/api/events", headers=bearer("alice")), WAIT)
        assert res.status_code == 200
        assert res.headers["content-type"].startswith("text/event-stream")
        assert res.content == b""
    assert app.state.golem.open_streams == {}
    async with open_stream(app, headers=bearer("alice")) as stream:
        assert stream.status == 200  # the one slot is free
    res = await client.head("/api/events")
    assert res.status_code == 401
    res = await client.head("/api/events?cursor=-1", headers=bearer("alice"))
    assert res.status_code == 422


async def _post_slowly(app: Starlette, body_timeout: float) -> tuple[int, dict[str, Any]]:
    """POST /api/runs whose body never finishes arriving; the status and JSON answer."""
    sent: list[dict[str, Any]] = []
    first = True

    async def receive() -> dict[str, Any]:
        nonlocal first
        if first:
            first = False
            return {"type": "http.request", "body": b'{"agent": ', "more_body": True}
        await asyncio.sleep(3600)  # a client that stopped sending
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/api/runs",
        "raw_path": b"/api/runs",
        "root_path": "",
        "query_string": b"",
        "headers": [
            (b"authorization", f"Bearer {TOKENS['alice']}".encode()),
            (b"content-type", b"application/json"),
            (b"content-length", b"100"),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("golem.test", 80),
        "state": {},
    }
    await asyncio.wait_for(app(scope, receive, send), WAIT)
    status = sent[0]["status"]
    body = b"".join(m.get("body", b"") for m in sent[1:])
    return status, json.loads(body)


async def test_a_body_that_trickles_in_gets_408(registry: Any, store: Store) -> None:
    # Found: a client that declared a body and stopped sending held its connection (and
    # the buffered part of its body) for as long as it liked.
    app = create_app(ServiceSettings(registry, store, auth=make_auth(), body_timeout=0.05))
    status, body = await _post_slowly(app, 0.05)
    assert status == 408
    assert body["error"]["code"] == "request_timeout"
    assert await store.list_runs() == []


def test_the_body_timeout_must_be_positive(registry: Any, store: Store) -> None:
    with pytest.raises(ValueError, match="body_timeout"):
        create_app(ServiceSettings(registry, store, auth=make_auth(), body_timeout=0))


# --------------------------------------------------------------------------- hostile call IDs


async def _save_deploy(store: Store, run_id: str, call_id: str) -> None:
    """Save a pending run whose one `deploy` call has the ID `call_id`."""
    call = NewCall(call_id, CallKind.APPROVAL, "deploy", '{"target": "x"}')
    await store.save_pending(
        NewRun(
            id=run_id,
            agent="twin",
            conversation_id="conv",
            history="[]",
            calls=(call,),
            started_by="alice",
        )
    )


@pytest.mark.parametrize(
    "call_id",
    ["two\nlines", "cr\r\nlf", "tab\tbed", "a/b/../c", "%2e%2e", "<script>", "\u202eexe"],
)
async def test_a_call_id_with_any_character_is_decidable(
    store: Store, client: httpx.AsyncClient, call_id: str
) -> None:
    # Found: the route's `path` convertor (`.*`) stops at a newline, so a call whose
    # model-made ID held one answered 404 to every decision, in the API and the inbox.
    for n, via in enumerate(("api", "inbox")):
        run_id = f"run-{via}"
        await _save_deploy(store, run_id, call_id)
        from golem.service.views import path

        if via == "api":
            url = "/api" + path("runs", run_id, "calls", call_id, "decision")
            res = await client.post(url, json={"decision": "deny"}, headers=bearer("alice"))
            assert res.status_code == 200, res.text
        else:
            csrf = await sign_in(client) if n else ""
            url = path("runs", run_id, "calls", call_id, "decision")
            res = await client.post(url, data={"csrf": csrf, "decision": "deny"})
            assert res.status_code == 303, res.text
        run = await store.get_run(run_id)
        assert run.calls[0].decision is not None, via


# --------------------------------------------------------------------------- the stream


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
    await store.save_pending(
        NewRun(
            id="run-" + hostile,
            agent="twin",
            conversation_id=hostile,
            history="[]",
            calls=(NewCall(hostile, CallKind.APPROVAL, hostile, json.dumps({hostile: hostile})),),
            started_by=hostile,
        )
    )
    async with open_stream(app, headers=bearer("alice"), query="cursor=0") as stream:
        change = await stream.next("change")
        assert change.json()["run_id"] == "run-" + hostile  # the text arrives intact
        assert change.json()["actor"] == hostile
        # ASCII only, so no character of it ends a line for any client
        assert change.data.isascii()
        assert change.data.splitlines() == [change.data]
        assert change.id == "1"


# --------------------------------------------------------------------------- cross-site JSON


# --------------------------------------------------------------------------- the document


async def test_a_deep_offset_loads_only_the_page(
    client: httpx.AsyncClient, store: Store, start: StartRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Found: GET /api/runs?offset=N loaded the N+limit newest runs (calls included) and
    # sliced them in Python; offsets go up to a million.
    for _ in range(6):
        await start("echo")
    loaded: list[int] = []
    real = store.list_runs

    async def spy(**kw: Any) -> Any:
        runs = await real(**kw)
        loaded.append(len(runs))
        return runs

    monkeypatch.setattr(store, "list_runs", spy)
    res = await client.get("/api/runs?limit=2&offset=3", headers=bearer("alice"))
    assert res.status_code == 200
    assert len(res.json()["runs"]) == 2
    assert loaded == [2]
    every = await real(limit=10)
    assert [r["id"] for r in res.json()["runs"]] == [r.id for r in every[3:5]]


def _get_routes() -> list[str]:
    from starlette.routing import Route

    from golem.service.app import ROUTES

    return [
        r.path.replace("{run_id}", "r1")
        for r in ROUTES
        if isinstance(r, Route) and "GET" in (r.methods or ())
    ]


@pytest.mark.parametrize("path", _get_routes())
async def test_head_and_options_tell_a_stranger_nothing(
    client: httpx.AsyncClient, start: StartRun, path: str
) -> None:
    run = await start("twin")
    url = path.replace("/r1", "/" + run["id"])
    for method in ("HEAD", "OPTIONS"):
        res = await asyncio.wait_for(client.request(method, url), WAIT)
        public = url in ("/api/health", "/api/openapi.json", "/login")
        if method == "OPTIONS":
            assert res.status_code == 405, (method, url)
        elif public:
            assert res.status_code == 200, (method, url)
        else:
            assert res.status_code in (401, 303), (method, url)
        assert not any(h.startswith("access-control-") for h in res.headers)
        if method == "HEAD":
            assert res.content == b""
        assert run["id"] not in res.text


async def test_a_deep_offset_over_several_agents_reads_a_page_at_a_time(
    client: httpx.AsyncClient, store: Store, start: StartRun
) -> None:
    # olga sees two agents: her listing merges them newest first, whatever the offset.
    for agent in ("echo", "twin", "echo", "mixed", "twin", "echo", "twin"):
        await start(agent)
    every = [r.id for r in await store.list_runs(limit=50) if r.agent in ("echo", "twin")]
    for offset, limit in ((0, 3), (2, 3), (4, 10), (6, 1), (9, 2)):
        res = await client.get(f"/api/runs?limit={limit}&offset={offset}", headers=bearer("olga"))
        assert res.status_code == 200
        assert [r["id"] for r in res.json()["runs"]] == every[offset : offset + limit]


@pytest.mark.parametrize("call_id", [".", ".."])
async def test_a_dot_segment_call_id_is_decided_through_the_run_wide_form(
    store: Store, client: httpx.AsyncClient, call_id: str
) -> None:
    # Every client normalizes `/calls/../decision` before sending it, so such a call has
    # no URL of its own; the run-wide form decides it (the guide says so).
    await _save_deploy(store, "run-dots", call_id)
    csrf = await sign_in(client)
    res = await client.post("/runs/run-dots/decisions", data={"csrf": csrf, "decision": "deny"})
    assert res.status_code == 303, res.text[:300]
    decision = (await store.get_run("run-dots")).calls[0].decision
    assert decision is not None
    assert decision.kind.value == "deny"


def test_a_stream_client_that_never_reads_holds_only_its_own_slot(
    registry: Any, tmp_path: Any
) -> None:
    # A real server: one client opens the stream and never reads while changes pour in;
    # the service keeps answering others, and the slot is freed once the client goes.
    import socket
    import time

    from tests.support.service import serve

    app = create_app(
        ServiceSettings(
            registry,
            f"sqlite:///{tmp_path / 'slow.db'}",
            auth=make_auth(),
            stream_poll_interval=0.02,
        )
    )
    with serve(app) as base:
        port = int(base.rsplit(":", 1)[1])
        slow = socket.socket()
        slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        slow.connect(("127.0.0.1", port))
        slow.sendall(
            b"GET /api/events?cursor=0 HTTP/1.1\r\nHost: x\r\n"
            + f"Authorization: Bearer {TOKENS['alice']}\r\n\r\n".encode()
        )
        deadline = time.monotonic() + WAIT
        while app.state.golem.open_streams.get("alice") != 1:
            assert time.monotonic() < deadline, "the stream never opened"
            time.sleep(0.02)
        with httpx.Client(base_url=base, timeout=WAIT) as c:
            for _ in range(40):  # each change is sent towards the client that does not read
                res = c.post(
                    "/api/runs", json={"agent": "twin", "prompt": "p"}, headers=bearer("olga")
                )
                assert res.status_code == 201
            assert c.get("/api/runs?limit=1", headers=bearer("olga")).status_code == 200
        slow.close()
        deadline = time.monotonic() + WAIT
        while app.state.golem.open_streams:
            assert time.monotonic() < deadline, app.state.golem.open_streams
            with httpx.Client(base_url=base, timeout=WAIT) as c:  # a change wakes the stream
                c.post("/api/runs", json={"agent": "echo", "prompt": "p"}, headers=bearer("olga"))
            time.sleep(0.05)
