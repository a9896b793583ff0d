"""Attacks on authentication: guessing tokens through the API, what a session cookie gives
away, credentials in the wrong place, CSRF on every form, session fixation, redirects.
"""

from __future__ import annotations

import base64
import hashlib
import json

import httpx
import pytest
from starlette.applications import Starlette

from golem.durable.store import Store
from golem.service.auth import TokenFailures
from golem.service.credentials import SESSION_COOKIE
from tests.support.service import TOKENS, StartRun, bearer, csrf_of, sign_in


def _client(app: Starlette, address: str) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=(address, 1234))
    return httpx.AsyncClient(transport=transport, base_url="http://golem.test")


# --------------------------------------------------------------------------- guessing


async def test_guessing_tokens_through_the_api_is_limited_per_address(app: Starlette) -> None:
    # Found: POST /login allowed 10 attempts a minute, but every /api route checked any
    # number of bearer tokens as fast as they came: an unlimited oracle for the same tokens.
    app.state.golem.token_failures = TokenFailures(5, 60.0)
    async with _client(app, "10.0.0.9") as c:
        for i in range(5):
            res = await c.get("/api/runs", headers={"Authorization": f"Bearer guess-{i}"})
            assert res.status_code == 401
        for headers in ({"Authorization": "Bearer guess-6"}, bearer("alice")):
            res = await c.get("/api/whoami", headers=headers)
            assert res.status_code == 429, res.text  # the right token too: no oracle
            assert res.json()["error"]["code"] == "too_many_failures"
            assert int(res.headers["retry-after"]) >= 1
        res = await c.get("/api/events", headers=bearer("alice"))
        assert res.status_code == 429
        # the document would otherwise tell a right token from a wrong one
        doc = (await c.get("/api/openapi.json", headers=bearer("alice"))).json()
        assert "enum" not in doc["components"]["schemas"]["StartRunBody"]["properties"]["agent"]
    async with _client(app, "10.0.0.10") as other:
        assert (await other.get("/api/whoami", headers=bearer("alice"))).status_code == 200


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer "}, {"Authorization": "Basic dG9rLWFsaWNl"}],
)
async def test_no_token_at_all_is_not_a_wrong_guess(
    app: Starlette, headers: dict[str, str]
) -> None:
    app.state.golem.token_failures = TokenFailures(2, 60.0)
    async with _client(app, "10.0.0.11") as c:
        for _ in range(5):
            assert (await c.get("/api/runs", headers=headers)).status_code == 401
        assert (await c.get("/api/runs", headers=bearer("alice"))).status_code == 200


async def test_wrong_tokens_sent_to_the_document_and_the_stream_count(app: Starlette) -> None:
    app.state.golem.token_failures = TokenFailures(2, 60.0)
    wrong = {"Authorization": "Bearer nope"}
    async with _client(app, "10.0.0.12") as c:
        assert (await c.get("/api/openapi.json", headers=wrong)).status_code == 200
        assert (await c.get("/api/events", headers=wrong)).status_code == 401
        assert (await c.get("/api/runs", headers=bearer("alice"))).status_code == 429


def test_a_refused_address_is_let_back_in_when_its_failures_age_out() -> None:
    limit = TokenFailures(3, 60.0)
    for t in (0.0, 1.0, 2.0):
        assert limit.blocked("a", now=t) == 0
        limit.fail("a", now=t)
    assert limit.blocked("a", now=30.0) == pytest.approx(30.0)
    assert limit.blocked("b", now=30.0) == 0
    assert limit.blocked("a", now=60.5) == 0  # the first failure left the window
    with pytest.raises(ValueError, match="at least 1"):
        TokenFailures(0)


# --------------------------------------------------------------------------- the cookie


def _payload(value: str) -> dict[str, object]:
    body = value.split(".")[0]
    decoded: dict[str, object] = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    return decoded


async def test_a_session_cookie_gives_its_reader_nothing_to_guess_against(
    client: httpx.AsyncClient, app: Starlette
) -> None:
    # Found: the cookie is signed, not encrypted, and its payload held the token's plain
    # SHA-256: whoever read a cookie could test token guesses offline at hash speed.
    await sign_in(client)
    value = client.cookies[SESSION_COOKIE]
    digest = hashlib.sha256(TOKENS["alice"].encode()).hexdigest()
    assert digest not in json.dumps(_payload(value))
    assert TOKENS["alice"] not in json.dumps(_payload(value))
    token = (await client.post("/api/stream-token", headers=bearer("alice"))).json()
    assert digest not in json.dumps(_payload(token["stream_token"]))
    assert (await client.get("/")).status_code == 200  # and the session still works


async def test_a_session_signed_for_one_token_is_not_another_tokens(app: Starlette) -> None:
    auth = app.state.golem.auth
    alice, olga = auth.authenticate(TOKENS["alice"]), auth.authenticate(TOKENS["olga"])
    assert alice is not None
    assert olga is not None
    session = auth.issue_session(alice)
    cred = auth.verify_session(session)
    assert cred is not None
    assert cred.approver.identity == "alice"
    assert cred.digest == alice.digest
    payload = _payload(session)
    body = base64.urlsafe_b64encode(
        json.dumps({**payload, "sub": olga.digest}, separators=(",", ":")).encode()
    )
    forged = body.decode().rstrip("=") + "." + session.split(".")[1]
    assert auth.verify_session(forged) is None


# --------------------------------------------------------------------------- wrong places


async def test_each_credential_works_only_where_it_belongs(
    client: httpx.AsyncClient,
) -> None:
    token = (await client.post("/api/stream-token", headers=bearer("alice"))).json()
    stream_token = token["stream_token"]
    await sign_in(client)
    session = client.cookies[SESSION_COOKIE]
    client.cookies.clear()
    for value in (stream_token, session):  # neither is a bearer token
        res = await client.get("/api/runs", headers={"Authorization": f"Bearer {value}"})
        assert res.status_code == 401
    for query in (  # no token in a query string, where logs and Referers keep it
        f"token={TOKENS['alice']}",
        f"access_token={TOKENS['alice']}",
        f"stream_token={TOKENS['alice']}",
    ):
        assert (await client.get(f"/api/runs?{query}")).status_code == 401
        assert (await client.get(f"/api/events?{query}")).status_code == 401
    assert (await client.get(f"/api/events?stream_token={session}")).status_code == 401
    client.cookies.set(SESSION_COOKIE, stream_token)  # a stream token is no session
    assert (await client.get("/")).status_code == 303


# --------------------------------------------------------------------------- CSRF


async def _forms(start: StartRun) -> dict[str, dict[str, str]]:
    twin = await start("twin")
    return {
        "/runs": {"agent": "echo", "prompt": "x"},
        f"/runs/{twin['id']}/calls/c1/decision": {"decision": "approve"},
        f"/runs/{twin['id']}/decisions": {"decision": "approve"},
        f"/runs/{twin['id']}/resolve": {"action": "cancel", "note": "n"},
        "/logout": {},
    }


async def test_every_form_refuses_another_sessions_csrf_token(
    app: Starlette, start: StartRun, store: Store
) -> None:
    forms = await _forms(start)
    async with _client(app, "10.1.0.1") as olga, _client(app, "10.1.0.2") as alice:
        foreign = await sign_in(olga, "olga")
        own = await sign_in(alice)
        assert foreign != own
        for path, fields in forms.items():
            for csrf in (foreign, "", own[:-2] + "AA"):
                res = await alice.post(path, data={**fields, "csrf": csrf})
                assert res.status_code == 403, (path, csrf, res.text[:200])
            res = await alice.post(path, data={**fields, "x": "1"})  # none at all
            assert res.status_code == 403, path
        assert (await alice.get("/")).status_code == 200  # still signed in
    runs = await store.list_runs()
    assert len(runs) == 1  # nothing started
    assert all(c.decision is None for c in runs[0].calls)  # nothing decided


@pytest.mark.parametrize(
    "headers",
    [
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
        {"Origin": "https://evil.example"},
        {"Origin": "http://golem.test.evil.example"},
    ],
)
async def test_every_form_refuses_another_site_even_with_the_right_token(
    client: httpx.AsyncClient, start: StartRun, store: Store, headers: dict[str, str]
) -> None:
    forms = await _forms(start)
    csrf = await sign_in(client)
    for path, fields in forms.items():
        res = await client.post(path, data={**fields, "csrf": csrf}, headers=headers)
        assert res.status_code == 403, (path, res.text[:200])
    runs = await store.list_runs()
    assert len(runs) == 1
    assert all(c.decision is None for c in runs[0].calls)


# --------------------------------------------------------------------------- fixation, redirects


async def test_signing_in_always_issues_a_fresh_session(
    app: Starlette, client: httpx.AsyncClient
) -> None:
    # Session fixation: a session planted in the victim's browser beforehand (here a
    # valid one of olga's) is replaced by signing in, never adopted.
    auth = app.state.golem.auth
    olga = auth.authenticate(TOKENS["olga"])
    assert olga is not None
    planted = auth.issue_session(olga)
    client.cookies.set(SESSION_COOKIE, "junk", domain="golem.test")
    res = await client.post("/login", data={"token": TOKENS["alice"], "next": "/"})
    assert res.status_code == 303
    first = res.cookies[SESSION_COOKIE]
    assert first != "junk"
    client.cookies.clear()
    client.cookies.set(SESSION_COOKIE, planted)
    page = await client.get("/")
    assert ">olga<" in page.text
    res = await client.post(
        "/login", data={"token": TOKENS["alice"], "next": "/"}, headers={"Origin": "null"}
    )
    assert res.status_code == 303
    fresh = res.cookies[SESSION_COOKIE]
    assert fresh not in (planted, first)
    client.cookies.clear()
    client.cookies.set(SESSION_COOKIE, fresh)
    assert ">alice<" in (await client.get("/")).text


@pytest.mark.parametrize(
    "target",
    [
        "//evil.example",
        "/\\evil.example",
        "/\t/evil.example",
        "/\n/evil.example",
        "https:evil.example",
        "http://golem.test@evil.example/",
        " //evil.example",
        "\\/evil.example",
        "/%5Cevil.example",
        "/%2F%2Fevil.example",
        "javascript:alert(1)",
        "data:text/html,x",
    ],
)
async def test_no_redirect_leaves_the_site(
    client: httpx.AsyncClient, start: StartRun, target: str
) -> None:
    def local(location: str) -> bool:
        parsed = httpx.URL(httpx.URL("http://golem.test/x").join(location))
        return parsed.host == "golem.test" and location.startswith("/") and "\\" not in location

    res = await client.post("/login", data={"token": TOKENS["alice"], "next": target})
    assert local(res.headers["location"]), res.headers["location"]
    res = await client.get("/login", params={"next": target})  # signed in: straight there
    assert res.status_code == 303
    assert local(res.headers["location"]), res.headers["location"]
    run = await start("twin")
    csrf = csrf_of((await client.get("/")).text)
    res = await client.post(
        f"/runs/{run['id']}/calls/c1/decision",
        data={"csrf": csrf, "decision": "deny", "next": target},
    )
    assert res.status_code == 303
    assert local(res.headers["location"]), res.headers["location"]


async def test_a_forwarded_for_header_does_not_reset_the_guess_count(app: Starlette) -> None:
    # The limits key on the connection's address (uvicorn rewrites it from
    # X-Forwarded-For only for a proxy it trusts), never on a header the client chose.
    app.state.golem.token_failures = TokenFailures(3, 60.0)
    async with _client(app, "10.0.0.20") as c:
        codes = [
            (
                await c.get(
                    "/api/runs",
                    headers={"Authorization": f"Bearer g{i}", "X-Forwarded-For": f"1.2.3.{i}"},
                )
            ).status_code
            for i in range(5)
        ]
    assert codes == [401, 401, 401, 429, 429]


async def test_the_session_cookie_is_secure_over_https(app: Starlette) -> None:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="https://golem.test") as c:
        res = await c.post("/login", data={"token": TOKENS["alice"], "next": "/"})
        cookie = res.headers["set-cookie"]
        assert "Secure" in cookie
        assert "HttpOnly" in cookie
        assert "samesite=strict" in cookie.lower()
        csrf = csrf_of((await c.get("/")).text)
        res = await c.post("/logout", data={"csrf": csrf})
        gone = res.headers["set-cookie"]
        assert "Max-Age=0" in gone
        assert "Secure" in gone
        assert "HttpOnly" in gone
        assert "samesite=strict" in gone.lower()
