"""Runs an approver may not see stay hidden, and identities stay apart (ADR 0069).

Each test failed before its fix unless it says it held.
"""

from __future__ import annotations

import html
import re
import unicodedata
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette

from golem import new_id
from golem._display import has_hidden, reveal
from golem.durable.store import CallKind, NewCall, NewRun, Store
from golem.durable.store.sqlite import SQLiteStore
from golem.service import Approver, AuthConfig, ServiceSettings, create_app
from golem.service.bodies import _bad_text
from golem.service.notify import _slack_message
from golem.service.views import WORD_CHUNK, path, reveal_html
from tests.support.service import StartRun, bearer, make_auth, sign_in

# --------------------------------------------------------------------------- existence


# --------------------------------------------------------------------------- identities


@pytest.mark.parametrize(
    ("one", "two"),
    [
        ("ivan", "\u0438\u0432\u0430\u043d"),
        ("alice", "bob"),
        ("\u7530\u4e2d", "tanaka"),
        # operator configuration, not attacker input: look-alikes of other scripts are the
        # operator's choice (ADR 0080)
        ("alice", "\u0430lice"),
    ],
)
def test_identities_that_are_distinct_names_are_kept(one: str, two: str) -> None:
    config = AuthConfig(tokens={"t1": Approver(one), "t2": Approver(two)}, secret=b"s" * 32)
    assert config.authenticate("t2") is not None


# --------------------------------------------------------------------------- call IDs

_CALL_TEXT = st.text(alphabet="/%?#. \\+&=é\u0301\ufffd\u212bÅ\u00c5a", min_size=1, max_size=6)
"""Call IDs of escapes, separators and several Unicode forms of one letter."""


def _api_decision(run_id: str, call_id: str) -> str:
    return "/api" + path("runs", run_id, "calls", call_id, "decision")


@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    ids=st.lists(
        st.one_of(_CALL_TEXT, st.text(min_size=1, max_size=8)), min_size=1, max_size=4, unique=True
    ),
    probe=st.one_of(_CALL_TEXT, st.text(min_size=1, max_size=8)),
)
@example(ids=["caf\u00e9", "cafe\u0301"], probe="caf\u00e9")
@example(ids=["\u00c5"], probe="\u212b")  # Angstrom sign, NFC is Å
@example(ids=["x\ufffd"], probe="x\ufffd")
@example(ids=["a/b", "a%2Fb"], probe="a")
async def test_a_decision_names_exactly_one_pending_call(
    tmp_path: Path, registry: Any, ids: list[str], probe: str
) -> None:
    # A decision decides the call whose ID it names, byte for byte, and no other; an ID
    # no call has (another Unicode form of one included) is a named 404 and decides
    # nothing.
    ids = [i for i in ids if "\x00" not in i and i not in (".", "..")]
    assume(ids and all(_bad_text(i) is None for i in ids) and _bad_text(probe) is None)
    assume(probe not in (".", "..") and "\x00" not in probe)
    store = await SQLiteStore.open(tmp_path / f"{new_id()}.db")
    try:
        calls = tuple(NewCall(i, CallKind.APPROVAL, "deploy", '{"target": "x"}') for i in ids)
        await store.save_pending(
            NewRun(id="r", agent="twin", conversation_id="c", history="[]", calls=calls)
        )
        app = create_app(ServiceSettings(registry, store, auth=make_auth(), undo_seconds=0))
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://golem.test") as c:
            res = await c.post(
                _api_decision("r", probe), json={"decision": "deny"}, headers=bearer("alice")
            )
            decided = {x.call_id for x in (await store.get_run("r")).calls if x.decision}
            if probe in ids:
                assert res.status_code == 200, res.text
                assert decided == {probe}
            else:
                assert res.status_code == 404, res.text
                assert res.json()["error"]["code"] == "call_not_found"
                assert decided == set()
            for i in ids:
                if i in decided:
                    continue
                res = await c.post(
                    _api_decision("r", i), json={"decision": "approve"}, headers=bearer("alice")
                )
                assert res.status_code == 200, (i, res.text)
                assert res.json()["decision"]["decision"] == "approve"
                decided.add(i)
                now = {x.call_id for x in (await store.get_run("r")).calls if x.decision}
                assert now == decided
    finally:
        await store.close()


@pytest.mark.parametrize("escape", ["%FF", "%C0%80", "%ED%A0%80", "%EF%BF"])
async def test_an_escape_that_is_not_utf8_names_no_call_and_no_run(
    client: httpx.AsyncClient, store: Store, escape: str
) -> None:
    # Found: servers decode a bad escape to U+FFFD, so /calls/x%FF decided the call
    # "x\ufffd", which the URL did not name (and so did every other bad byte).
    calls = (NewCall("x\ufffd", CallKind.APPROVAL, "deploy", '{"target": "x"}'),)
    await store.save_pending(
        NewRun(id="r\ufffd", agent="twin", conversation_id="c", history="[]", calls=calls)
    )
    for url in (
        f"/api/runs/r%EF%BF%BD/calls/x{escape}/decision",
        f"/api/runs/r{escape}/calls/x%EF%BF%BD/decision",
    ):
        res = await client.post(url, json={"decision": "approve"}, headers=bearer("alice"))
        assert res.status_code == 400, res.text
        assert res.json()["error"]["code"] == "invalid_url"
    res = await client.get(f"/api/runs/r{escape}", headers=bearer("alice"))
    assert res.status_code == 400
    res = await client.get(f"/api/runs?agent=tw{escape}", headers=bearer("alice"))
    assert res.json()["error"]["code"] == "invalid_url"
    csrf = await sign_in(client)
    page = await client.get(f"/runs/r{escape}")
    assert page.status_code == 400
    assert page.headers["content-type"].startswith("text/html")
    res = await client.post(
        f"/runs/r%EF%BF%BD/calls/x{escape}/decision", data={"csrf": csrf, "decision": "deny"}
    )
    assert res.status_code == 400
    assert (await store.get_run("r\ufffd")).call("x\ufffd").decision is None
    res = await client.post(  # the right escape decides it
        "/api/runs/r%EF%BF%BD/calls/x%EF%BF%BD/decision",
        json={"decision": "approve"},
        headers=bearer("alice"),
    )
    assert res.status_code == 200, res.text


# --------------------------------------------------------------------------- headers

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


async def test_every_answer_of_every_route_carries_the_security_headers(
    client: httpx.AsyncClient, start: StartRun
) -> None:
    # held: pages, API answers, redirects, 4xx of every kind (bad URL, body too large,
    # wrong method, CSRF, unknown run) carry the headers and no-store
    run = await start("mixed")
    csrf = await sign_in(client)
    answers = {
        "inbox": await client.get("/"),
        "runs": await client.get("/runs"),
        "run": await client.get(path("runs", run["id"])),
        "audit": await client.get("/audit"),
        "csv": await client.get("/audit?format=csv"),
        "notifications": await client.get("/notifications"),
        "404 page": await client.get("/runs/nope"),
        "bad url": await client.get("/runs/%FF"),
        "405": await client.put("/runs"),
        "csrf": await client.post(path("runs", run["id"], "decisions"), data={"csrf": "x"}),
        "413": await client.post("/api/runs", content=b"x" * 5000, headers=bearer("alice")),
        "api run": await client.get("/api" + path("runs", run["id"]), headers=bearer("alice")),
        "api 401": await client.get("/api/runs"),
        "decide": await client.post(
            path("runs", run["id"], "calls", "a1", "decision"),
            data={"csrf": csrf, "decision": "deny"},
        ),
        "logout": await client.post("/logout", data={"csrf": csrf}),
        "login": await client.get("/login"),
    }
    for where, res in answers.items():
        _check_headers(res, where)


# --------------------------------------------------------------------------- bodies


# --------------------------------------------------------------------------- notifications


def test_slack_messages_show_hidden_characters() -> None:
    # Found: the Slack text escaped <, > and & but passed bidi overrides and zero-width
    # characters through: a prompt "deploy staging\u202enoitcudorp" read as another in
    # the channel (the inbox marks them; the JSON payload keeps the text as it is).
    body = {
        "event": "run.paused",
        "title": "deploy to staging\u202e\u200bnoitcudorp",
        "agent": "ops\u2066",
        "run_id": "r",
        "status": "pending",
        "url": "https://inbox.example/runs/r",
        "calls": [{"tool_name": "dep\u200bloy"}],
    }
    msg = _slack_message(body)
    text = msg["blocks"][0]["text"]["text"] + msg["text"]
    assert not has_hidden(text)
    for name in ("U+202E RLO", "U+200B ZWSP", "U+2066 LRI"):
        assert name in text


# --------------------------------------------------------------------------- hostile text


@settings(deadline=None)
@given(st.text(alphabet=st.sampled_from("aé\u0301 \n<&>\u202e\u200d-x"), max_size=400))
def test_reveal_html_breaks_long_words_and_keeps_the_text(text: str) -> None:
    # A 20,000-letter word in wrapping text took Chromium seconds per occurrence to lay
    # out at phone width (a run page: 20-30 s, test_hostile_text_browser); reveal_html
    # puts a <wbr> in every WORD_CHUNK letters. What it shows is the same text.
    out = str(reveal_html(text))
    assert html.unescape(re.sub(r"<[^>]*>", "", out)) == reveal(text)
    for piece in re.split(r"<wbr>|<[^>]*>", out):
        for word in html.unescape(piece).split():
            letters = [c for c in word if unicodedata.category(c)[0] != "M" and c != "\u200d"]
            assert len(letters) <= WORD_CHUNK, word


# --------------------------------------------------------------------------- methods


def _route_urls(run_id: str) -> list[tuple[str, set[str]]]:
    """Every route's URL (for `run_id`, call c1) and the methods it serves."""
    from starlette.routing import Route

    from golem.service.app import ROUTES

    by_path: dict[str, set[str]] = {}
    for r in ROUTES:
        if isinstance(r, Route):
            url = r.path.replace("{run_id}", quote(run_id, safe="")).replace(
                "{call_id:golem_any}", "c1"
            )
            by_path.setdefault(url, set()).update(r.methods or ())
    return sorted(by_path.items())


async def test_head_and_options_on_every_route_signed_in(
    client: httpx.AsyncClient, start: StartRun
) -> None:
    # held: with a bearer token and a session, HEAD answers as GET does without a body
    # (405 naming the methods where there is no GET), OPTIONS is 405 with Allow, and
    # nothing is a 500 or opens a stream
    run = await start("twin")
    await sign_in(client)
    for url, methods in _route_urls(run["id"]):
        if url == "/api/events":
            continue  # HEAD on the stream: test_attack_http
        for method in ("HEAD", "OPTIONS"):
            res = await client.request(method, url, headers=bearer("alice"))
            assert res.status_code < 500, (method, url)
            if method == "HEAD":
                assert res.content == b""
            if method == "HEAD" and "GET" in methods:
                get = await client.get(url, headers=bearer("alice"))
                assert res.status_code == get.status_code, url
            else:
                assert res.status_code == 405, (method, url, res.status_code)
                assert set(res.headers["allow"].split(", ")) >= methods - {"HEAD"}, url
