"""Attacks on sign-in and sessions: login CSRF, replayed sign-outs, guessing, stream abuse."""

from __future__ import annotations

import dataclasses
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from golem.durable.store import Store
from golem.service import Approver, AuthConfig, ServiceSettings, create_app
from golem.service.credentials import SESSION_COOKIE
from tests.support.service import TOKENS, bearer, open_stream, sign_in


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "https://evil.example"},
        {"Origin": "null", "Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site", "Origin": "http://golem.test"},
    ],
)
async def test_a_cross_site_login_form_is_refused(
    client: httpx.AsyncClient, headers: dict[str, str]
) -> None:
    res = await client.post("/login", data={"token": TOKENS["alice"], "next": "/"}, headers=headers)
    assert res.status_code == 403
    assert SESSION_COOKIE not in res.cookies
    assert "another site" in res.text


async def test_a_same_origin_login_form_signs_in(client: httpx.AsyncClient) -> None:
    res = await client.post(
        "/login",
        data={"token": TOKENS["alice"], "next": "/runs"},
        headers={"Origin": "http://golem.test", "Sec-Fetch-Site": "same-origin"},
    )
    assert res.status_code == 303
    assert res.headers["location"] == "/runs"


async def test_cross_site_decision_forms_are_refused_even_with_the_csrf_token(
    client: httpx.AsyncClient,
) -> None:
    csrf = await sign_in(client)
    res = await client.post(
        "/logout", data={"csrf": csrf}, headers={"Sec-Fetch-Site": "cross-site"}
    )
    assert res.status_code == 403
    assert (await client.get("/")).status_code == 200  # still signed in


async def test_the_fragment_link_no_longer_submits_by_itself(client: httpx.AsyncClient) -> None:
    page = (await client.get("/login")).text
    assert 'id="link-confirm"' in page
    script = (await client.get("/static/inbox.js")).text
    fragment = script[script.index("async function loginFromFragment") :]
    fragment = fragment[: fragment.index("\n  }\n")]
    assert ".submit()" not in fragment
    assert "/api/whoami" in fragment


async def test_whoami_names_the_identity_of_a_token(client: httpx.AsyncClient) -> None:
    res = await client.get("/api/whoami", headers=bearer("olga"))
    assert res.json() == {
        "identity": "olga",
        "agents": ["echo", "twin"],
        "tools": None,
        "can_start": True,
    }
    assert (await client.get("/api/whoami")).status_code == 401


async def test_sign_out_revokes_the_session_server_side(client: httpx.AsyncClient) -> None:
    csrf = await sign_in(client)
    cookie = client.cookies[SESSION_COOKIE]
    res = await client.post("/logout", data={"csrf": csrf})
    assert res.status_code == 303
    client.cookies.set(SESSION_COOKIE, cookie)  # a copy of the cookie, replayed
    res = await client.get("/")
    assert res.status_code == 303
    assert res.headers["location"].startswith("/login")
    res = await client.get("/api/events")  # the replayed cookie is still set
    assert res.status_code == 401


async def test_login_is_rate_limited_per_address(app: Starlette) -> None:
    transport = httpx.ASGITransport(app=app, client=("10.0.0.7", 1234))
    async with httpx.AsyncClient(transport=transport, base_url="http://golem.test") as c:
        codes = [
            (await c.post("/login", data={"token": f"guess-{i}"})).status_code for i in range(12)
        ]
        assert codes[:10] == [401] * 10
        assert codes[10:] == [429, 429]
        res = await c.post("/login", data={"token": TOKENS["alice"]})
        assert res.status_code == 429
        assert int(res.headers["retry-after"]) >= 1
    other = httpx.ASGITransport(app=app, client=("10.0.0.8", 1234))
    async with httpx.AsyncClient(transport=other, base_url="http://golem.test") as c:
        assert (await c.post("/login", data={"token": TOKENS["alice"]})).status_code == 303


async def test_open_streams_are_limited_per_identity(app: Starlette) -> None:
    state = app.state.golem
    state.settings = dataclasses.replace(state.settings, max_streams_per_identity=2)
    async with open_stream(app, headers=bearer("alice")) as one:
        async with open_stream(app, headers=bearer("alice")) as two:
            async with open_stream(app, headers=bearer("alice")) as three:
                assert (one.status, two.status, three.status) == (200, 200, 429)
            async with open_stream(app, headers=bearer("olga")) as other:
                assert other.status == 200
    async with open_stream(app, headers=bearer("alice")) as again:
        assert again.status == 200  # closed streams are counted out


async def test_an_open_stream_ends_when_its_session_is_signed_out(
    app: Starlette, client: httpx.AsyncClient
) -> None:
    app.state.golem.stream_recheck = 0.05
    csrf = await sign_in(client)
    cookie = client.cookies[SESSION_COOKIE]
    headers = {"Cookie": f"{SESSION_COOKIE}={cookie}"}
    async with open_stream(app, headers=headers) as stream:
        assert stream.status == 200
        await stream.next("hello")
        await client.post("/logout", data={"csrf": csrf})
        end = await stream.next("end")
        assert "sign in again" in end.json()["reason"]


async def test_an_open_stream_ends_when_its_stream_token_expires(
    registry: Any, store: Store
) -> None:
    auth = AuthConfig(
        tokens={TOKENS["alice"]: Approver("alice")}, secret=b"x" * 32, stream_token_seconds=0.3
    )
    app = create_app(ServiceSettings(registry, store, auth=auth, stream_poll_interval=0.02))
    app.state.golem.stream_recheck = 0.05
    cred = auth.authenticate(TOKENS["alice"])
    assert cred is not None
    token, _ = auth.issue_stream_token(cred)
    async with open_stream(app, query=f"stream_token={token}") as stream:
        assert stream.status == 200
        await stream.next("hello")
        end = await stream.next("end")
        assert "sign in again" in end.json()["reason"]


@pytest.mark.parametrize("token", ["\u0080", "é" * 43, "☃"])
async def test_a_non_ascii_csrf_token_is_refused_not_a_500(
    client: httpx.AsyncClient, token: str
) -> None:
    # hmac.compare_digest raises TypeError on str with non-ASCII characters (found by the
    # OpenAPI fuzz: POST /logout with csrf=%C2%80 answered 500).
    await sign_in(client)
    for path in ("/logout", "/runs/r1/calls/c1/decision", "/runs/r1/decisions"):
        res = await client.post(path, data={"csrf": token, "decision": "approve"})
        assert res.status_code == 403, (path, res.text)
    assert (await client.get("/")).status_code == 200  # still signed in


async def test_strangers_are_turned_away_before_their_input_is_read(
    client: httpx.AsyncClient,
) -> None:
    # Found by the OpenAPI fuzz: a bad cursor got 422 and a JSON form 415 before the
    # missing credential was noticed. The door comes first: 401 whatever is sent.
    res = await client.get("/api/events", headers={"Last-Event-ID": "not-a-cursor"})
    assert res.status_code == 401
    res = await client.get("/api/events?cursor=-5", headers={"Authorization": "Bearer nope"})
    assert res.status_code == 401
    for path in ("/logout", "/runs", "/runs/r1/decisions", "/runs/r1/calls/c1/decision"):
        res = await client.post(path, json={"csrf": "x"})
        assert res.status_code == 401, path
