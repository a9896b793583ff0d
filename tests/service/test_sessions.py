"""Sign-in, sessions and tokens: where each credential works, guessing limits, fixation,
sign-out, cookie flags, and the streams a credential holds open."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from golem.durable.store import Store
from golem.service import Approver, AuthConfig, ServiceSettings, create_app
from golem.service.auth import TokenFailures
from golem.service.credentials import SESSION_COOKIE
from tests.support.service import TOKENS, bearer, csrf_of, make_auth, open_stream, sign_in


def _client(app: Starlette, address: str) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=(address, 1234))
    return httpx.AsyncClient(transport=transport, base_url="http://golem.test")


async def test_each_credential_works_only_where_it_belongs(client: httpx.AsyncClient) -> None:
    res = await client.get("/api/whoami", headers=bearer("olga"))
    assert res.json() == {"identity": "olga", "agents": ["echo", "twin"], "tools": None,
                          "can_start": True}  # fmt: skip
    assert (await client.get("/api/whoami")).status_code == 401
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


def _payload(value: str) -> dict[str, object]:
    body = value.split(".")[0]
    decoded: dict[str, object] = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    return decoded


async def test_a_session_cookie_gives_its_reader_nothing_to_guess_or_forge(
    client: httpx.AsyncClient, auth: AuthConfig
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
    # and a payload re-signed for another token's digest is refused
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


async def test_signing_in_always_issues_a_fresh_session(
    auth: AuthConfig, client: httpx.AsyncClient
) -> None:
    # Session fixation: a session planted in the victim's browser beforehand (here a
    # valid one of olga's) is replaced by signing in, never adopted.
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


async def test_sign_out_revokes_the_session_server_side(client: httpx.AsyncClient) -> None:
    csrf = await sign_in(client)
    cookie = client.cookies[SESSION_COOKIE]
    assert (await client.post("/logout", data={"csrf": csrf})).status_code == 303
    client.cookies.set(SESSION_COOKIE, cookie)  # a copy of the cookie, replayed
    for url in ("/", "/runs", "/audit?format=csv"):
        res = await client.get(url)
        assert res.status_code == 303, url
        assert res.headers["location"].startswith("/login?next=")
    assert (await client.get("/api/events")).status_code == 401


@pytest.mark.parametrize("scheme", ["http", "https"])
async def test_the_session_cookie_is_strict_http_only_and_secure_over_https(
    app: Starlette, scheme: str
) -> None:
    # uvicorn sets the scheme from X-Forwarded-Proto for the proxies it trusts
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=f"{scheme}://golem.test") as c:
        res = await c.post("/login", data={"token": TOKENS["alice"], "next": "/"})
        csrf = csrf_of((await c.get("/")).text)
        gone = (await c.post("/logout", data={"csrf": csrf})).headers["set-cookie"].lower()
    assert "max-age=0" in gone
    for cookie in (res.headers["set-cookie"].lower(), gone):
        assert "httponly" in cookie
        assert "samesite=strict" in cookie
        assert ("secure" in cookie.split("; ")) is (scheme == "https"), cookie


async def test_the_fragment_link_no_longer_submits_by_itself(client: httpx.AsyncClient) -> None:
    page = (await client.get("/login")).text
    assert 'id="link-confirm"' in page
    script = (await client.get("/static/inbox.js")).text
    fragment = script[script.index("async function loginFromFragment") :]
    fragment = fragment[: fragment.index("\n  }\n")]
    assert ".submit()" not in fragment
    assert "/api/whoami" in fragment


def _limited(registry: Any, store: Store, **limits: int) -> Starlette:
    return create_app(ServiceSettings(registry, store, auth=make_auth(), **limits))


async def test_login_is_rate_limited_per_address(app: Starlette) -> None:
    async with _client(app, "10.0.0.7") as c:
        codes = [(await c.post("/login", data={"token": f"g{i}"})).status_code for i in range(12)]
        assert codes == [401] * 10 + [429, 429]
        res = await c.post("/login", data={"token": TOKENS["alice"]})
        assert res.status_code == 429
        assert int(res.headers["retry-after"]) >= 1
    async with _client(app, "10.0.0.8") as c:
        assert (await c.post("/login", data={"token": TOKENS["alice"]})).status_code == 303


async def test_guessing_tokens_through_the_api_is_limited_per_address(
    registry: Any, store: Store
) -> None:
    # Found: POST /login allowed 10 attempts a minute, but every /api route checked any
    # number of bearer tokens as fast as they came: an unlimited oracle for the same tokens.
    app = _limited(registry, store, token_failures_per_minute=5)
    async with _client(app, "10.0.0.9") as c:
        for i in range(5):
            res = await c.get("/api/runs", headers={"Authorization": f"Bearer guess-{i}"})
            assert res.status_code == 401
        for headers in ({"Authorization": "Bearer guess-6"}, bearer("alice")):
            res = await c.get("/api/whoami", headers=headers)
            assert res.status_code == 429, res.text  # the right token too: no oracle
            assert res.json()["error"]["code"] == "too_many_failures"
            assert int(res.headers["retry-after"]) >= 1
        assert (await c.get("/api/events", headers=bearer("alice"))).status_code == 429
        # the document would otherwise tell a right token from a wrong one
        doc = (await c.get("/api/openapi.json", headers=bearer("alice"))).json()
        assert "enum" not in doc["components"]["schemas"]["StartRunBody"]["properties"]["agent"]
    async with _client(app, "10.0.0.10") as other:
        assert (await other.get("/api/whoami", headers=bearer("alice"))).status_code == 200


@pytest.mark.parametrize(
    ("address", "sent", "codes"),
    [
        # no token at all is not a wrong guess
        *(("10.0.0.11", [("/api/runs", h)] * 5, [401] * 5)
          for h in ({}, {"Authorization": "Bearer "}, {"Authorization": "Basic dG9rLWFsaWNl"})),
        # wrong tokens sent to the document and the stream count
        ("10.0.0.12", [("/api/openapi.json", {"Authorization": "Bearer nope"}),
                       ("/api/events", {"Authorization": "Bearer nope"})], [200, 401]),
        # the limits key on the connection's address (uvicorn rewrites it from
        # X-Forwarded-For only for a proxy it trusts), never on a header the client chose
        ("10.0.0.20", [("/api/runs", {"Authorization": f"Bearer g{i}",
                                      "X-Forwarded-For": f"1.2.3.{i}"}) for i in range(3)],
         [401] * 3),
    ],
    ids=["none", "empty-bearer", "basic", "document-and-stream", "forwarded-for"],
)  # fmt: skip
async def test_what_counts_as_a_wrong_guess(
    registry: Any, store: Store, address: str, sent: list[Any], codes: list[int]
) -> None:
    app = _limited(registry, store, token_failures_per_minute=len(codes))
    async with _client(app, address) as c:
        assert [(await c.get(url, headers=h)).status_code for url, h in sent] == codes
        after = (await c.get("/api/runs", headers=bearer("alice"))).status_code
    assert after == (200 if address == "10.0.0.11" else 429)


def test_a_refused_address_is_let_back_in_when_its_failures_age_out() -> None:
    limit = TokenFailures(3, 60.0)
    for t in (0.0, 1.0, 2.0):
        assert limit.wait("a", now=t) == 0
        limit.count("a", now=t)
    assert limit.wait("a", now=30.0) == pytest.approx(30.0)
    assert limit.wait("b", now=30.0) == 0
    assert limit.wait("a", now=60.5) == 0  # the first failure left the window
    with pytest.raises(ValueError, match="at least 1"):
        TokenFailures(0)


async def test_open_streams_are_limited_per_identity(registry: Any, store: Store) -> None:
    app = _limited(registry, store, max_streams_per_identity=2)
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
