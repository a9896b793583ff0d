"""Run IDs with any character: every route reaches them, every link the service renders
round-trips them, and the store refuses (by name) the few no URL can carry."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from golem import new_id
from golem.durable.store import MAX_RUN_ID, CallKind, InvalidRunId, NewCall, NewRun, Store
from golem.durable.store.sqlite import SQLiteStore
from golem.service import ServiceSettings, create_app
from golem.service.views import path
from tests.store.backends import BACKENDS, Backend, backend_for
from tests.support.service import bearer, make_auth, sign_in

_CALLS = (
    NewCall("c1", CallKind.APPROVAL, "deploy", '{"target": "staging"}'),
    NewCall("c2", CallKind.APPROVAL, "deploy", '{"target": "production"}'),
)


def _run(run_id: str) -> NewRun:
    return NewRun(
        id=run_id,
        agent="twin",
        conversation_id="conv",
        history="[]",
        calls=_CALLS,
        started_by="alice",
    )


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
            await store.save_pending(_run(run_id))
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
        await store.save_pending(_run(run_id))
    assert isinstance(caught.value, ValueError)
    assert (await store.list_runs()) == []


async def test_the_longest_run_id_is_saved(store: Store) -> None:
    run_id = "é" * MAX_RUN_ID
    await store.save_pending(_run(run_id))
    assert (await store.get_run(run_id)).id == run_id


async def test_a_sign_in_comes_back_to_the_run_it_left(
    store: Store, client: httpx.AsyncClient
) -> None:
    # Found: the sign-in redirect's `next` was the decoded path, /runs/a/b, not the run.
    await store.save_pending(_run("a/b c"))
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

    run = await store.save_pending(_run("a/b"))
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
    import asyncio

    from tests.support.service import serve

    db = tmp_path / "real.db"

    async def save() -> None:
        s = await SQLiteStore.open(db)
        try:
            await s.save_pending(_run("team/ops?#1"))
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
                await store.save_pending(_run(run_id))
                await _check_reachable(c, store, run_id)
                c.cookies.clear()
    finally:
        await store.close()
