"""Hostile input to the inbox: forged and cross-site forms, redirects off the site, fields,
parameters and cookies said twice, and model text on every page (inert, hidden characters
shown as markers)."""

from __future__ import annotations

import csv
import html
import json
import re
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from golem.durable.store import CallKind, NewCall, NewRun, Store
from golem.messages import Message, ToolCall, dumps_history
from golem.service import ServiceSettings, create_app
from golem.service.credentials import SESSION_COOKIE
from golem.service.views import path
from tests.support.service import (
    TOKENS,
    StartRun,
    bearer,
    csrf_of,
    inventory,
    make_auth,
    save_run,
    sign_in,
)


def _client(app: Starlette, address: str = "127.0.0.1", base: str = "http://golem.test") -> Any:
    transport = httpx.ASGITransport(app=app, client=(address, 1234))
    return httpx.AsyncClient(transport=transport, base_url=base)


async def _forms(start: StartRun) -> dict[str, dict[str, str]]:
    """Every form that changes something, with fields that would pass."""
    twin = await start("twin")
    return {
        "/runs": {"agent": "echo", "prompt": "x"},
        f"/runs/{twin['id']}/calls/c1/decision": {"decision": "approve"},
        f"/runs/{twin['id']}/decisions": {"decision": "approve"},
        f"/runs/{twin['id']}/resolve": {"action": "cancel", "note": "n"},
        "/logout": {},
    }


async def _nothing_changed(store: Store) -> None:
    (run,) = await store.list_runs()  # nothing started
    assert all(c.decision is None for c in run.calls)  # nothing decided


# --------------------------------------------------------------------------- forged forms


@pytest.mark.parametrize(
    "csrf", ["foreign", "", "tampered", "\u0080", "é" * 43, "☃", None], ids=repr
)
async def test_every_form_refuses_a_csrf_token_not_its_sessions(
    app: Starlette, start: StartRun, store: Store, csrf: str | None
) -> None:
    # a non-ASCII token made hmac.compare_digest raise: a 500
    forms = await _forms(start)
    async with _client(app, "10.1.0.1") as olga, _client(app, "10.1.0.2") as alice:
        foreign, own = await sign_in(olga, "olga"), await sign_in(alice)
        token = {"foreign": foreign, "tampered": own[:-2] + "AA"}.get(csrf or "", csrf)
        for url, fields in forms.items():
            data = {**fields, "x": "1"} if token is None else {**fields, "csrf": token}
            res = await alice.post(url, data=data)
            assert res.status_code == 403, (url, res.text[:200])
        assert (await alice.get("/")).status_code == 200  # still signed in
    await _nothing_changed(store)


CROSS_SITE = [
    {"Sec-Fetch-Site": "cross-site"},
    {"Sec-Fetch-Site": "same-site"},
    {"Sec-Fetch-Site": "same-site", "Origin": "http://golem.test"},
    {"Sec-Fetch-Site": "cross-site", "Origin": "null"},
    {"Origin": "https://evil.example"},
    {"Origin": "http://golem.test.evil.example"},
]


@pytest.mark.parametrize("headers", CROSS_SITE, ids=lambda h: "+".join(h.values()))
async def test_every_form_and_the_login_refuse_another_site_even_with_the_right_token(
    client: httpx.AsyncClient, start: StartRun, store: Store, headers: dict[str, str]
) -> None:
    forms = await _forms(start)
    res = await client.post("/login", data={"token": TOKENS["alice"], "next": "/"}, headers=headers)
    assert res.status_code == 403
    assert SESSION_COOKIE not in res.cookies
    assert "another site" in res.text
    csrf = await sign_in(client)
    for url, fields in forms.items():
        res = await client.post(url, data={**fields, "csrf": csrf}, headers=headers)
        assert res.status_code == 403, (url, res.text[:200])
    assert (await client.get("/")).status_code == 200  # still signed in
    await _nothing_changed(store)


@pytest.mark.parametrize(
    "headers",
    [{"Origin": "http://golem.test", "Sec-Fetch-Site": "same-origin"}, {"Origin": "null"}, {}],
)
async def test_a_same_origin_login_signs_in(
    client: httpx.AsyncClient, headers: dict[str, str]
) -> None:
    # Origin: null is what Chromium sends under the pages' no-referrer policy; curl sends none
    data = {"token": TOKENS["alice"], "next": "/runs"}
    res = await client.post("/login", data=data, headers=headers)
    assert res.status_code == 303
    assert res.headers["location"] == "/runs"


async def test_strangers_are_turned_away_before_their_input_is_read(
    client: httpx.AsyncClient,
) -> None:
    # a bad cursor got 422 and a JSON form 415 before the missing credential was noticed
    res = await client.get("/api/events", headers={"Last-Event-ID": "not-a-cursor"})
    assert res.status_code == 401
    res = await client.get("/api/events?cursor=-5", headers={"Authorization": "Bearer nope"})
    assert res.status_code == 401
    for url in ("/logout", "/runs", "/runs/r1/decisions", "/runs/r1/calls/c1/decision"):
        assert (await client.post(url, json={"csrf": "x"})).status_code == 401, url


@pytest.mark.parametrize(
    "ctype", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data"]
)
async def test_a_cross_site_simple_request_to_the_json_api_changes_nothing(
    client: httpx.AsyncClient, start: StartRun, store: Store, ctype: str
) -> None:
    # a page on another site can POST as text/plain with the victim's cookies and no
    # preflight, but no /api route that changes anything takes the session cookie
    run = await start("twin")
    await sign_in(client)
    cross = {
        "Content-Type": ctype,
        "Origin": "https://evil.example",
        "Sec-Fetch-Site": "cross-site",
    }
    for url, body in {
        "/api/runs": '{"agent": "twin", "prompt": "x"}',
        f"/api/runs/{run['id']}/calls/c1/decision": '{"decision": "approve"}',
        "/api/stream-token": "",
    }.items():
        assert (await client.post(url, content=body, headers=cross)).status_code == 401, url
    await _nothing_changed(store)


# --------------------------------------------------------------------------- redirects

HOSTILE_NEXT = [
    "//evil.example", "/\\evil.example", "\\\\evil.example", "\\/evil.example",
    "%2F%2Fevil.example", "/%5Cevil.example", "/%2F%2Fevil.example", "https://evil.example",
    "https:evil.example", "http://golem.test@evil.example/", "javascript:alert(1)",
    "data:text/html,x", "/x\r\nSet-Cookie: a=b", "/\t/evil.example", "\t//evil.example",
    "/\n/evil.example", " //evil.example", "/\x7f/evil.example", "\u3002/evil.example", "", "//evil.example/x", "\\\\evil",
]  # fmt: skip
OFF_SITE = ["//evil.example/x", "https://evil.example", "\\\\evil", "javascript:alert(1)"]


def _local(location: str) -> bool:
    """Whether a browser following `location` stays on this site."""
    cleaned = location.replace("\t", "").replace("\n", "").replace("\r", "").strip()
    target = httpx.URL(httpx.URL("http://golem.test/x").join(cleaned))
    return (
        cleaned.startswith("/")
        and not cleaned.startswith(("//", "/\\"))
        and "\\" not in cleaned
        and target.host == "golem.test"
    )


async def test_no_redirect_leaves_the_site(registry: Any, store: Store) -> None:
    # sign-in (page and form) and decisions go back to a local path only
    app = create_app(
        ServiceSettings(registry, store, auth=make_auth(), login_attempts_per_minute=1000)
    )
    async with _client(app) as client:
        run = await client.post(
            "/api/runs", json={"agent": "twin", "prompt": "p"}, headers=bearer("alice")
        )
        decide = path("runs", run.json()["run"]["id"], "calls", "c1", "decision")
        for nxt in HOSTILE_NEXT:
            res = await client.post("/login", data={"token": TOKENS["alice"], "next": nxt})
            assert res.status_code == 303
            assert _local(res.headers["location"]), (nxt, res.headers["location"])
            if nxt in OFF_SITE:
                assert res.headers["location"] == "/", nxt
            res = await client.get("/login", params={"next": nxt})  # signed in: straight there
            assert res.status_code == 303
            assert _local(res.headers["location"]), nxt
        csrf = csrf_of((await client.get("/")).text)
        for nxt in HOSTILE_NEXT:
            res = await client.post(decide, data={"csrf": csrf, "decision": "deny", "next": nxt})
            assert res.status_code in (303, 409), res.text[:200]
            assert _local(res.headers.get("location", "/")), (nxt, res.headers)


# --------------------------------------------------------------------------- said twice


async def test_a_form_field_or_a_page_parameter_named_twice_is_refused(
    client: httpx.AsyncClient, start: StartRun, store: Store
) -> None:
    # the last value won where a proxy, a WAF or a log reads the first
    for url in ("/?agent=twin&agent=mixed", "/login?next=/&next=//evil.example"):
        res = await client.get(url)
        assert res.status_code == 400, url
        assert "twice" in res.text
    run = await start("twin")
    csrf = await sign_in(client)
    for body in (
        f"csrf={csrf}&decision=deny&decision=approve",
        f"csrf={csrf}&csrf={csrf}&decision=approve",
        f"csrf={csrf}&decision=deny&reason=no%FF",  # an escape that is not UTF-8
    ):
        res = await client.post(
            f"/runs/{run['id']}/calls/c1/decision",
            content=body.encode(),
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        assert res.status_code == 400, res.text[:300]
        assert "twice" in res.text or "not UTF-8" in res.text
    await _nothing_changed(store)


async def test_the_session_cookie_sent_twice_is_refused_naming_no_one(
    app: Starlette, client: httpx.AsyncClient
) -> None:
    # a neighbour under the same parent domain can toss a `golem_session` of its own: the
    # browser sends both, and the service used the last one
    await sign_in(client, "alice")
    mine = client.cookies[SESSION_COOKIE]
    async with _client(app) as other:
        await sign_in(other, "olga")
        theirs = other.cookies[SESSION_COOKIE]
    async with _client(app) as bare:
        for cookie in (f"{mine}; golem_session={theirs}", f"{mine}; golem_session=x"):
            for method, url in (
                ("GET", "/"),
                ("GET", "/runs"),
                ("POST", "/runs"),
                ("GET", "/api/events"),
            ):
                res = await bare.request(method, url, headers={"Cookie": f"golem_session={cookie}"})
                assert res.status_code == 400, (url, res.text)
                assert "cookie" in res.text
                assert "alice" not in res.text
                assert "Sign out" not in res.text
        for cookie in (
            f"golem_session={mine}; other=1",
            f"my_golem_session=1; golem_session={mine}",
        ):
            res = await bare.get("/runs", headers={"Cookie": cookie})
            assert res.status_code == 200
            assert "alice" in res.text


# --------------------------------------------------------------------------- what pages show

HOSTILE = [
    '"><script>alert(1)</script>',
    "'><img src=x onerror=alert(2)>",
    "</textarea><svg onload=alert(3)>",
    "javascript:alert(4)",
    "\u202egnp.exe",
    "zero\u200bwidth\ufeff",
    "line\nevent: change\ndata: {}\n\n",
    "\x1b[31mred\x07",
    "{{ 7*7 }}",
]


async def _save_hostile_runs(store: Store) -> list[str]:
    """One run per hostile text, in every field a run has."""
    ids = []
    for n, text in enumerate(HOSTILE):
        args = json.dumps({text: text})
        history = dumps_history(
            [
                Message("user", text),
                Message("assistant", text, tool_calls=[ToolCall(text, text, args)]),
            ]
        )
        calls = (
            NewCall(text, CallKind.APPROVAL, text, args, reason=text),
            NewCall(text + "2", CallKind.EXTERNAL, "lookup", json.dumps({"key": text})),
        )
        run = NewRun(
            id=f"run-{n}-{text}".replace("/", "|"),
            agent="twin",
            conversation_id=text,
            history=history,
            calls=calls,
            started_by=text,
            deps_ref={text: text},
        )
        await store.save_pending(run)
        ids.append(run.id)
    return ids


async def test_hostile_text_is_inert_on_every_page_and_unchanged_in_json(
    client: httpx.AsyncClient, store: Store
) -> None:
    ids = await _save_hostile_runs(store)
    csrf = await sign_in(client)
    for run_id, text in zip(ids[:3], HOSTILE[:3], strict=True):  # decisions are shown too
        res = await client.post(
            path("runs", run_id, "calls", text + "2", "decision"),
            data={"csrf": csrf, "decision": "external", "result": text},
        )
        assert res.status_code == 303, res.text[:300]
    pages = ["/", "/runs", "/audit", "/notifications", *(path("runs", r) for r in ids)]
    pages += [f"/?tool={t}" for t in HOSTILE[:2]] + [f"/audit?actor={HOSTILE[0]}"]
    pages += [f"/?notice=approve&call={HOSTILE[0]}", f"/runs?status={HOSTILE[1]}"]
    for page in pages:
        res = await client.get(page)
        assert res.status_code == 200, page
        inv = inventory(res.text)
        assert all((s.get("src") or "").startswith("/static/") for s in inv.scripts), page
        assert inv.handlers == [], page
        assert inv.inline_styles == 0, page
        for text in HOSTILE[:3]:
            assert text not in res.text, (page, text)  # only ever escaped
    assert "U+202E" in (await client.get(path("runs", ids[4]))).text
    for run_id, text in zip(ids, HOSTILE, strict=True):
        res = await client.get("/api" + path("runs", run_id), headers=bearer("alice"))
        assert res.headers["content-type"] == "application/json"
        run = res.json()["run"]
        assert run["calls"][0]["call_id"] == run["calls"][0]["tool_name"] == text
        assert run["started_by"] == text


HIDDEN = set("\u202e\u2066\u200b")
"""The hidden characters of the run below."""


def _shown_text(page: str) -> str:
    """The text a person reads: no tags, attributes, scripts or edit boxes' raw values."""
    page = re.sub(r"(?s)<textarea[^>]*>.*?</textarea>", "", page)
    page = re.sub(r"(?s)<script[^>]*>.*?</script>", "", page)
    return html.unescape(re.sub(r"<[^>]*>", "", page)).replace("\n", "").replace("\t", "")


async def test_a_bidi_override_in_a_run_id_is_shown_as_a_marker_everywhere(
    client: httpx.AsyncClient, store: Store
) -> None:
    # a run ID holding U+202E reversed the rest of its line on every page
    run_id = "run-\u202eabc\u2066"
    calls = [(i, "deploy", '{"target": "x"}') for i in ("c\u202e1", "c2")]
    await save_run(store, run_id, *calls, conversation_id="conv\u200b")
    csrf = await sign_in(client)
    url = path("runs", run_id, "calls", "c\u202e1", "decision")
    decided = await client.post(url, data={"csrf": csrf, "decision": "deny", "next": "/runs"})
    assert decided.status_code == 303
    for page in ("/", decided.headers["location"], path("runs", run_id), "/audit"):
        res = await client.get(page)  # the notice after the decision names the call
        assert res.status_code == 200, (page, res.text[:200])
        assert not HIDDEN.intersection(_shown_text(res.text)), page
        assert "U+202E" in _shown_text(res.text), page
    conflict = await client.post(url, data={"csrf": csrf, "decision": "approve"})
    assert conflict.status_code == 409
    assert not HIDDEN.intersection(_shown_text(conflict.text))


async def _deploy(store: Store, run_id: str, target: str) -> None:
    await save_run(store, run_id, ("c1", "deploy", json.dumps({"target": target})))


@pytest.mark.parametrize("size", [100_000, 1_000_000])
async def test_huge_arguments_do_not_swell_the_inbox_list_and_long_ones_stay(
    client: httpx.AsyncClient, store: Store, size: int
) -> None:
    # each card carried an argument three times: five 1 MB arguments made a 15 MB page,
    # fetched again by every open browser on every change
    big = "x" * size
    for n in range(5):
        await _deploy(store, f"big-{n}", big)
    await _deploy(store, "long", "\n".join(f"line {i}" for i in range(200)))
    await sign_in(client)
    inbox = await client.get("/")
    assert len(inbox.content) < 200_000
    assert f"Open the run to see all 1 lines ({size} characters)" in inbox.text
    assert "Edit the arguments on the run's page" in inbox.text
    assert "Show all 200 lines" in inbox.text  # below the cap: in the list, editable
    assert "line 199" in inbox.text
    assert 'name="args"' in inbox.text
    run = await client.get("/runs/big-0")
    assert big in run.text  # the run's page shows it all, and edits it
    assert 'name="args"' in run.text


async def test_a_link_cannot_put_its_own_words_in_the_inbox_notice(
    client: httpx.AsyncClient, start: StartRun
) -> None:
    # /?notice=approve&call=<any text> showed "Approved <any text>." in the inbox's voice
    await sign_in(client)
    spoof = "the $1M transfer; now re-enter your token at evil.example"
    for query in (f"notice=approve&call={spoof}", f"notice=approve&call={spoof}&tag={'A' * 16}"):
        page = (await client.get(f"/?{query}")).text
        assert "evil.example" not in page
        assert 'class="notice"' not in page
    run = await start("twin")
    csrf = csrf_of((await client.get("/")).text)
    res = await client.post(
        f"/runs/{run['id']}/calls/c1/decision", data={"csrf": csrf, "decision": "approve"}
    )
    assert "Approved deploy (c1)." in (await client.get(res.headers["location"])).text
    forged = res.headers["location"].replace("deploy+%28c1%29", "deploy+%28c2%29")
    assert 'class="notice"' not in (await client.get(forged)).text  # the tag is the words'
    client.cookies.clear()
    assert "Signed out." in (await client.get("/login?notice=signed-out")).text


async def test_downloads_never_start_a_formula_and_have_a_fixed_name(
    client: httpx.AsyncClient, store: Store
) -> None:
    for run_id in ('=HYPERLINK("http://evil.example")', "+1+1", "-2", "@SUM(A1)"):
        await _deploy(store, run_id, "x")
    await sign_in(client)
    rows = (await client.get("/audit?format=csv")).text.splitlines()[1:]
    assert len(rows) == 4
    for row in rows:
        assert all(cell[:1] not in ("=", "+", "-", "@") for cell in next(csv.reader([row]))), row
    for fmt in ("csv", "json"):  # no filter reaches Content-Disposition
        params = {"format": fmt, "actor": '"\r\nX: y', "run": 'a"; filename=evil.html'}
        res = await client.get("/audit", params=params)
        assert res.status_code == 200
        assert res.headers["content-disposition"] == f'attachment; filename="golem-audit.{fmt}"'
        assert "x" not in res.headers
