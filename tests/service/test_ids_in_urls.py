"""Run and call IDs with any character: every route reaches them, every link round-trips
them, a decision decides exactly the call it names, and the store refuses (by name) the few
IDs no URL can carry."""

from __future__ import annotations

import asyncio
import html
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import httpx
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from golem import new_id
from golem.durable.store import MAX_RUN_ID, InvalidRunId, Store
from golem.durable.store.sqlite import SQLiteStore
from golem.service import ServiceSettings, create_app
from golem.service.views import path
from tests.support.durable.backends import BACKENDS, Backend, backend_for
from tests.support.service import bearer, make_auth, save_run, sign_in

CALLS = (("c1", "deploy", '{"target": "staging"}'), ("c2", "deploy", '{"target": "production"}'))
X = '{"target": "x"}'


def _links(page: str) -> list[str]:
    """Every href and form action of a page, unescaped."""
    return [html.unescape(m) for m in re.findall(r'(?:href|action)="([^"]*)"', page)]


def _data_run(page: str) -> str:
    """The run ID a run page is about (its body's `data-run`)."""
    found = re.search(r'data-run="([^"]*)"', page)
    assert found, "no data-run on the page"
    return html.unescape(found.group(1))


def _names_run(link: str, run_id: str) -> bool:
    """Whether `link` is `/runs/<run_id>...` with the ID as one escaped segment."""
    parts = link.split("#", 1)[0].split("?", 1)[0].split("/")
    return len(parts) >= 3 and parts[1] == "runs" and unquote(parts[2]) == run_id


_SPECIAL = st.text(alphabet="/%?#. \n\\~+&=;:@'\"<>é\u2028\u202e", min_size=1, max_size=8)


@settings(
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(run_id=st.one_of(st.text(min_size=1, max_size=24), _SPECIAL))
@example(run_id="a/b")
@example(run_id="a%2Fb")
@example(run_id="q?x=1#frag")
@example(run_id="calls")
@example(run_id="x/calls/c1/decision")
@example(run_id="run/decisions")
@example(run_id="ünï code")
@example(run_id="%")
@example(run_id="..")
@example(run_id="./x")
async def test_any_run_id_the_store_accepts_is_reachable_everywhere(
    tmp_path: Path, registry: Any, run_id: str
) -> None:
    # Found: a run whose ID held "/" (saved through the store) answered 404 on every route
    # of the API and the inbox: servers decode %2F before routing, and {run_id} stops at
    # "/". The notifications page linked runs with Jinja's urlencode, which keeps "/".
    store = await SQLiteStore.open(tmp_path / f"{new_id()}.db")
    try:
        try:
            await save_run(store, run_id, *CALLS)
        except InvalidRunId:
            assert run_id in (".", "..") or "\x00" in run_id or len(run_id) > MAX_RUN_ID
            return
        app = create_app(ServiceSettings(registry, store, auth=make_auth(), undo_seconds=0))
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://golem.test") as c:
            await _check_reachable(c, store, run_id)
    finally:
        await store.close()


async def _check_reachable(c: httpx.AsyncClient, store: Store, run_id: str) -> None:
    res = await c.get("/api" + path("runs", run_id), headers=bearer("alice"))
    assert res.status_code == 200, res.text
    assert res.json()["run"]["id"] == run_id
    # the inbox: the runs list links the run; the link opens its page
    csrf = await sign_in(c)
    runs = await c.get("/runs")
    assert runs.status_code == 200
    hrefs = [h for h in _links(runs.text) if _names_run(h, run_id)]
    assert hrefs, "the runs page does not link the run"
    page = await c.get(hrefs[0])
    assert page.status_code == 200, page.text[:300]
    assert _data_run(page.text) == run_id
    # the run page's decision forms post where they say, for this run and call
    actions = [a for a in _links(page.text) if a == path("runs", run_id, "calls", "c1", "decision")]
    assert actions, "the run page has no decision form for c1"
    res = await c.post(actions[0], data={"csrf": csrf, "decision": "deny", "reason": "no"})
    assert res.status_code == 303, res.text[:300]
    assert (await store.get_run(run_id)).call("c1").decision is not None
    # the inbox lists the other call with a link to the run
    inbox = await c.get("/")
    assert any(_names_run(h, run_id) for h in _links(inbox.text))
    # and the API decides it
    url = "/api" + path("runs", run_id, "calls", "c2", "decision")
    res = await c.post(url, json={"decision": "approve"}, headers=bearer("alice"))
    assert res.status_code == 200, res.text
    assert res.json()["run"]["id"] == run_id


@pytest.mark.parametrize(
    ("run_id", "problem"),
    [
        ("", "empty"),
        (".", "dot segment"),
        ("..", "dot segment"),
        ("a\x00b", "NUL"),
        ("\ud800", "surrogate"),
        ("r" * (MAX_RUN_ID + 1), "longer"),
    ],
)
async def test_the_store_refuses_run_ids_no_url_can_name(
    store: Store, run_id: str, problem: str
) -> None:
    # Found: "." and ".." were saved and then unreachable (every client removes dot
    # segments); a lone surrogate failed with a bare UnicodeEncodeError.
    with pytest.raises(InvalidRunId, match=problem) as caught:
        await save_run(store, run_id, *CALLS)
    assert isinstance(caught.value, ValueError)
    assert (await store.list_runs()) == []


async def test_a_sign_in_comes_back_to_the_run_it_left(
    store: Store, client: httpx.AsyncClient
) -> None:
    # Found: the sign-in redirect's `next` was the decoded path, /runs/a/b, not the run.
    await save_run(store, "a/b c", *CALLS)
    res = await client.get(path("runs", "a/b c"))
    assert res.status_code == 303
    nxt = httpx.URL(res.headers["location"]).params["next"]
    assert nxt == "/runs/a%2Fb%20c"
    await sign_in(client)
    page = await client.get(nxt)
    assert page.status_code == 200
    assert _data_run(page.text) == "a/b c"


async def test_the_delivery_log_links_a_run_whose_id_holds_a_slash(
    app: Any, store: Store, client: httpx.AsyncClient
) -> None:
    # Found: the notifications page linked runs with Jinja's `urlencode`, which keeps "/":
    # the run "a/b" was linked as /runs/a/b.
    from golem.service.notify import Notifier, Webhook

    run = await save_run(store, "a/b", *CALLS)
    ok = httpx.MockTransport(lambda request: httpx.Response(200))
    notifier = Notifier(
        store, [Webhook("https://hooks.example/x")], public_url="http://golem.test", transport=ok
    )
    app.state.golem.notifier = notifier
    notifier.notify("run.paused", run)
    await notifier.drain()
    await sign_in(client)
    page = await client.get("/notifications")
    assert page.status_code == 200
    links = [h for h in _links(page.text) if h.startswith("/runs/")]
    assert links == [path("runs", "a/b")]
    await notifier.close()


def test_a_real_server_routes_an_escaped_slash(registry: Any, tmp_path: Path) -> None:
    # uvicorn decodes %2F into `path`; the raw path still tells the ID's slash apart.

    from tests.support.service import save_run, serve

    db = tmp_path / "real.db"

    async def save() -> None:
        s = await SQLiteStore.open(db)
        try:
            await save_run(s, "team/ops?#1", *CALLS)
        finally:
            await s.close()

    asyncio.run(save())
    app = create_app(ServiceSettings(registry, f"sqlite:///{db}", auth=make_auth()))
    with serve(app) as base, httpx.Client(base_url=base, timeout=30) as c:
        url = "/api" + path("runs", "team/ops?#1")
        res = c.get(url, headers=bearer("alice"))
        assert res.status_code == 200, res.text
        assert res.json()["run"]["id"] == "team/ops?#1"
        url = "/api" + path("runs", "team/ops?#1", "calls", "c1", "decision")
        res = c.post(url, json={"decision": "deny"}, headers=bearer("alice"))
        assert res.status_code == 200, res.text


_HARD_IDS = [
    "a/b",
    "%2F",
    "q?x=1#f",
    "sp ace",
    "line\nbreak",
    "\u2028",
    "ünï/cødé",
    "emoji \U0001f680",
    "\\",
    "x" * MAX_RUN_ID,
    "é" * MAX_RUN_ID,
    "~.-_",
    "..a",
]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    with backend_for(request.param, tmp_path) as b:
        yield b


async def test_hard_run_ids_are_reachable_on_every_backend(backend: Backend, registry: Any) -> None:
    store = await backend.open()
    try:
        app = create_app(
            ServiceSettings(
                registry, store, auth=make_auth(), undo_seconds=0, login_attempts_per_minute=100
            )
        )
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://golem.test") as c:
            for run_id in _HARD_IDS:
                await save_run(store, run_id, *CALLS)
                await _check_reachable(c, store, run_id)
                c.cookies.clear()
    finally:
        await store.close()


_CALL_TEXT = st.text(alphabet="/%?#. \\+&=é\u0301\ufffd\u212bÅ\u00c5a", min_size=1, max_size=6)
"""Call IDs of escapes, separators and several Unicode forms of one letter."""


def _storable(text: str) -> bool:
    """Whether the service takes `text` (no NUL, no lone surrogate)."""
    return (
        "\x00" not in text
        and text.encode("utf-8", "surrogatepass").decode("utf-8", "replace") == text
    )


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
    assume(ids and all(map(_storable, ids)) and _storable(probe))
    assume(probe not in (".", "..") and "\x00" not in probe)
    store = await SQLiteStore.open(tmp_path / f"{new_id()}.db")
    try:
        await save_run(store, "r", *((i, "deploy", X) for i in ids))
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
    await save_run(store, "r\ufffd", ("x\ufffd", "deploy", X))
    for url in (
        f"/api/runs/r%EF%BF%BD/calls/x{escape}/decision",
        f"/api/runs/r{escape}/calls/x%EF%BF%BD/decision",
    ):
        res = await client.post(url, json={"decision": "approve"}, headers=bearer("alice"))
        assert res.status_code == 400, res.text
        assert res.json()["error"]["code"] == "invalid_url"
    # (a run's URL and a filter with such an escape: test_hostile_api's URL table)
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


@pytest.mark.parametrize(
    "call_id",
    [
        "two\nlines",
        "cr\r\nlf",
        "tab\tbed",
        "a/b/../c",
        "tools/deploy:1",
        "%2e%2e",
        "<script>",
        "\u202eexe",
    ],
)
async def test_a_call_id_with_any_character_is_decidable(
    store: Store, client: httpx.AsyncClient, call_id: str
) -> None:
    # Found: the route's `path` convertor (`.*`) stops at a newline, so a call whose
    # model-made ID held one answered 404 to every decision, in the API and the inbox.
    for n, via in enumerate(("api", "inbox")):
        run_id = f"run-{via}"
        await save_run(store, run_id, (call_id, "deploy", X))
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


@pytest.mark.parametrize("call_id", [".", ".."])
async def test_a_dot_segment_call_id_is_decided_through_the_run_wide_form(
    store: Store, client: httpx.AsyncClient, call_id: str
) -> None:
    # Every client normalizes `/calls/../decision` before sending it, so such a call has
    # no URL of its own; the run-wide form decides it (the guide says so).
    await save_run(store, "run-dots", (call_id, "deploy", X))
    csrf = await sign_in(client)
    res = await client.post("/runs/run-dots/decisions", data={"csrf": csrf, "decision": "deny"})
    assert res.status_code == 303, res.text[:300]
    decision = (await store.get_run("run-dots")).calls[0].decision
    assert decision is not None
    assert decision.kind.value == "deny"


async def test_call_ids_that_differ_only_in_unicode_form_are_decided_apart(
    client: httpx.AsyncClient, store: Store
) -> None:
    # Nothing between the form and the store normalizes: each card decides its own call.
    composed, decomposed = "caf\u00e9", "cafe\u0301"
    await save_run(store, "nfc", *((i, "deploy", X) for i in (composed, decomposed)))
    csrf = await sign_in(client)
    page = await client.get(path("runs", "nfc"))
    action = path("runs", "nfc", "calls", decomposed, "decision")
    assert f'action="{action}"' in page.text
    res = await client.post(action, data={"csrf": csrf, "decision": "deny"})
    assert res.status_code == 303
    run = await store.get_run("nfc")
    assert run.call(decomposed).decision is not None
    assert run.call(composed).decision is None
    res = await client.post(
        _api_decision("nfc", composed), json={"decision": "approve"}, headers=bearer("alice")
    )
    assert res.status_code == 200
    assert (await store.get_run("nfc")).call(composed).decision.kind.value == "approve"  # type: ignore[union-attr]
