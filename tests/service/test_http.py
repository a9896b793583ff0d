"""The HTTP layer: security and caching headers on every answer, no CORS, HEAD and OPTIONS
on every route, bodies that trickle in, stream clients that never read, deep offsets."""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import quote

import httpx
from starlette.applications import Starlette
from starlette.routing import Route

from golem.durable.store import Store
from golem.service import ServiceSettings, create_app, views
from tests.support.service import (
    TOKENS,
    WAIT,
    StartRun,
    bearer,
    call_raw,
    make_auth,
    open_stream,
    scope_of,
    sign_in,
)

_SECURITY_HEADERS = {
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}


def _check_headers(res: httpx.Response, where: str) -> None:
    for name, value in _SECURITY_HEADERS.items():
        assert res.headers.get(name) == value, (where, name, dict(res.headers))
    csp = res.headers.get("content-security-policy", "")
    assert "script-src 'self'" in csp, where
    assert "unsafe-inline" not in csp, where
    assert "frame-ancestors 'none'" in csp, where


async def test_every_answer_of_every_route_carries_the_security_headers_and_no_store(
    client: httpx.AsyncClient, start: StartRun
) -> None:
    # JSON answers and the audit downloads had no Cache-Control: a shared cache or the
    # browser's disk could keep runs, arguments and identities
    run = await start("mixed")
    api = ["/api/runs", f"/api/runs/{run['id']}", "/api/calls", "/api/whoami", "/api/agents"]
    api += ["/api/audit", "/api/notifications", "/api/openapi.json", "/api/health", "/api/nothing"]
    answers = {url: await client.get(url, headers=bearer("alice")) for url in api}
    answers["stream token"] = await client.post("/api/stream-token", headers=bearer("alice"))
    answers["api 401"] = await client.get("/api/runs")
    answers["413"] = await client.post("/api/runs", content=b"x" * 5000, headers=bearer("alice"))
    csrf = await sign_in(client)
    pages = ["/", "/runs", views.path("runs", run["id"]), "/audit", "/audit?format=csv"]
    pages += ["/audit?format=json", "/notifications", "/runs/nope", "/runs/%FF", "/nothing"]
    pages += ["/login"]
    answers |= {url: await client.get(url) for url in pages}
    answers["405"] = await client.put("/runs")
    answers["csrf"] = await client.post(
        views.path("runs", run["id"], "decisions"), data={"csrf": "x"}
    )
    answers["decide"] = await client.post(
        views.path("runs", run["id"], "calls", "a1", "decision"),
        data={"csrf": csrf, "decision": "deny"},
    )
    answers["logout"] = await client.post("/logout", data={"csrf": csrf})
    assert answers["logout"].status_code == 303
    assert "default-src 'none'" in answers["/api/health"].headers["content-security-policy"]
    for where, res in answers.items():
        _check_headers(res, where)


async def test_a_500_carries_every_security_header(app: Starlette, store: Store) -> None:
    # Found: Starlette answers an unhandled exception from middleware outside the app's
    # own, so a 500 (JSON or the error page naming the signed-in approver) had no CSP,
    # no nosniff, no X-Frame-Options and no Cache-Control: no-store.
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://golem.test") as c:
        await sign_in(c)

        async def broken(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("a bug")

        store.list_runs = broken  # type: ignore[method-assign]
        for url, headers in (("/api/runs", bearer("alice")), ("/runs", {})):
            res = await c.get(url, headers=headers)
            assert res.status_code == 500, (url, res.text[:200])
            _check_headers(res, url)


async def test_isolation_headers_everywhere_hsts_over_https_no_cors_and_cacheable_static(
    app: Starlette, start: StartRun
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
            static = await c.get("/static/inbox.css")
            assert static.status_code == 200
            assert "cache-control" not in static.headers
            assert static.headers["x-content-type-options"] == "nosniff"
            await start("twin")
            evil = {"Origin": "https://evil.example", **bearer("alice")}
            for method, path in (("GET", "/api/runs"), ("OPTIONS", "/api/runs"), ("GET", "/")):
                res = await c.request(method, path, headers=evil)
                assert not any(h.startswith("access-control-") for h in res.headers), path


async def test_head_and_options_on_every_route(
    app: Starlette, client: httpx.AsyncClient, start: StartRun
) -> None:
    """A stranger learns nothing (OPTIONS 405; HEAD 200 on public pages, else 401 or 303);
    signed in, HEAD answers as GET does without a body (405 naming the methods where there
    is no GET) and OPTIONS is 405 with Allow. Nothing is a 500 or opens a stream."""
    run = await start("twin")
    routes: dict[str, set[str]] = {}
    for r in app.routes:
        if isinstance(r, Route):
            url = r.path.replace("{run_id}", quote(run["id"], safe=""))
            routes.setdefault(url.replace("{call_id:golem_any}", "c1"), set()).update(
                r.methods or ()
            )
    for signed_in in (False, True):
        headers = bearer("alice") if signed_in else {}
        if signed_in:
            await sign_in(client)
        for url, methods in sorted(routes.items()):
            if (signed_in and url == "/api/events") or (not signed_in and "GET" not in methods):
                continue  # HEAD on the stream signed in: its own test below
            for method in ("HEAD", "OPTIONS"):
                res = await asyncio.wait_for(client.request(method, url, headers=headers), WAIT)
                assert not any(h.startswith("access-control-") for h in res.headers)
                if method == "HEAD":
                    assert res.content == b""
                if not signed_in:
                    public = url in ("/api/health", "/api/openapi.json", "/login")
                    want = {405} if method == "OPTIONS" else {200} if public else {401, 303}
                    assert res.status_code in want, (method, url)
                    assert run["id"] not in res.text
                elif method == "HEAD" and "GET" in methods:
                    get = await client.get(url, headers=headers)
                    assert res.status_code == get.status_code, url
                else:
                    assert res.status_code == 405, (method, url, res.status_code)
                    assert set(res.headers["allow"].split(", ")) >= methods - {"HEAD"}, url


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


async def test_a_body_that_trickles_in_gets_408(registry: Any, store: Store) -> None:
    # Found: a client that declared a body and stopped sending held its connection (and
    # the buffered part of its body) for as long as it liked.
    app = create_app(ServiceSettings(registry, store, auth=make_auth(), body_timeout=0.05))
    headers = {**bearer("alice"), "Content-Type": "application/json", "Content-Length": "100"}
    scope = scope_of("POST", "/api/runs", headers=headers)
    status, body = await call_raw(app, scope, [b'{"agent": '])
    assert status == 408
    assert json.loads(body)["error"]["code"] == "request_timeout"
    assert await store.list_runs() == []


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
