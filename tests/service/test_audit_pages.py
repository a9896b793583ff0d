"""The audit view pages through the whole log, filtered in the store, and shows nothing of
hidden runs: `GET /api/audit`, `GET /audit?format=csv|json` and the page (ADR 0077)."""

from __future__ import annotations

import asyncio
import csv
import io
import re
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from unittest import mock
from urllib.parse import urlencode

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from golem.durable.store import (
    AuditEntry,
    CallKind,
    Decision,
    NewCall,
    NewRun,
    Store,
)
from golem.durable.store.sqlite import SQLiteStore
from golem.service import Approver, AuthConfig, ServiceSettings, create_app
from golem.service.positions import read_position
from tests.support.durable.backends import BACKENDS, backend_for
from tests.support.service import save_run

AGENTS = ("a1", "a2", "a3", "a4")
ACTORS = ("alice", "Zoë", "ZOË-ops", "worker:w1", "bob")
SECRET = b"audit-pages-secret-that-is-32-bytes!"

# approver → the agents it sees (None: every agent)
VIEWS: dict[str, frozenset[str] | None] = {
    "root": None,
    "one": frozenset({"a2"}),
    "two": frozenset({"a1", "a3"}),
    "ghost": frozenset({"nobody"}),
    "most": frozenset({"a1", "a2", "a3"}),
}


def _auth() -> AuthConfig:
    return AuthConfig(
        tokens={f"tok-{name}": Approver(name, agents=seen) for name, seen in VIEWS.items()},
        secret=SECRET,
    )


def _bearer(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer tok-{who}"}


Step = tuple[int, int, bool]


C1 = ("c1", "deploy", "{}")


class Log:
    """Runs of several agents, started and decided by several actors."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.runs = 0
        self.open: list[str] = []

    async def grow(self, steps: list[Step]) -> None:
        """Per step: an agent, an actor, and whether to decide an open call instead."""
        for agent, actor, decide in steps:
            if decide and self.open:
                run_id = self.open.pop(0)
                await self.store.decide(
                    run_id, "c1", Decision.approve(), decided_by=ACTORS[actor % len(ACTORS)]
                )
                continue
            self.runs += 1
            run_id = f"r{self.runs:03d}-{AGENTS[agent % len(AGENTS)]}"
            who = ACTORS[actor % len(ACTORS)]
            await save_run(
                self.store, run_id, C1, agent=AGENTS[agent % len(AGENTS)], started_by=who
            )
            self.open.append(run_id)


async def _whole_log(store: Store) -> list[AuditEntry]:
    entries: list[AuditEntry] = []
    while batch := await store.changes_since(entries[-1].id if entries else 0, limit=1000):
        entries += batch
    return entries


def _expected(entries: list[AuditEntry], who: str, filters: dict[str, str]) -> list[int]:
    """The audit IDs `who` should be shown for `filters`, newest first."""
    seen = VIEWS[who]
    out: list[int] = []
    for e in reversed(entries):
        assert e.agent is not None
        if seen is not None and e.agent not in seen:
            continue
        if "agent" in filters and e.agent != filters["agent"]:
            continue
        if "action" in filters and e.action.value != filters["action"]:
            continue
        if "run" in filters and filters["run"] not in e.run_id:
            continue
        if "actor" in filters and filters["actor"].casefold() not in e.actor.casefold():
            continue
        out.append(e.id)
    return out


def _positions(shown: list[Any], who: str) -> list[int | None]:
    """The audit IDs behind what `who` was shown: IDs, or sealed references (`e...`)."""
    if VIEWS[who] is None:
        return [int(v) for v in shown]
    assert all(isinstance(v, str) and v.startswith("e") for v in shown), shown
    return [read_position(SECRET, v, full_view=False) for v in shown]


@asynccontextmanager
async def _client(store: Store) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(ServiceSettings({}, store, auth=_auth()))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://golem.test") as c:
        yield c


async def _sign_in(c: httpx.AsyncClient, who: str) -> None:
    res = await c.post("/login", data={"token": f"tok-{who}", "next": "/"})
    assert res.status_code == 303, res.text


def _next_of(res: httpx.Response) -> str | None:
    link = res.headers.get("link")
    if link is None:
        return None
    found = re.fullmatch(r'<(/audit\?[^>]+)>; rel="next"', link)
    assert found, link
    return found.group(1)


async def _page(
    c: httpx.AsyncClient, how: str, who: str, url: str
) -> tuple[list[int | str], str | None]:
    """One page's entry IDs and the URL of the next page (None: the last)."""
    if how == "api":
        res = await c.get(url, headers=_bearer(who))
        assert res.status_code == 200, res.text
        body = res.json()
        nxt = body["next_cursor"]
        ids = [e["id"] for e in body["entries"]]
        if nxt is None:
            return ids, None
        base = re.sub(r"&?before=[^&]*", "", url.split("?", 1)[1])
        return ids, "/api/audit?" + "&".join(p for p in (base, urlencode({"before": nxt})) if p)
    res = await c.get(url)
    assert res.status_code == 200, res.text
    if how == "json":
        ids = [e["id"] for e in res.json()]
    else:
        rows = list(csv.reader(io.StringIO(res.text)))
        assert rows[0][0] == "id"
        ids = [int(r[0]) if r[0].isdigit() else r[0] for r in rows[1:]]
    return ids, _next_of(res)


_STEPS = st.lists(
    st.tuples(st.integers(0, 3), st.integers(0, 4), st.booleans()), min_size=0, max_size=14
)
_FILTERS = st.fixed_dictionaries(
    {},
    optional={
        "agent": st.sampled_from([*AGENTS, "nobody"]),
        "action": st.sampled_from(["created", "decided", "ready"]),
        "run": st.sampled_from(["r0", "1", "-a2", "zz"]),
        "actor": st.sampled_from(["zoë", "ZOË", "o", "WORKER", "nobody"]),
    },
)


@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    first=_STEPS,
    later=st.lists(_STEPS, max_size=3),
    who=st.sampled_from(sorted(VIEWS)),
    how=st.sampled_from(["api", "json", "csv"]),
    filters=_FILTERS,
    limit=st.integers(1, 4),
    scan=st.integers(1, 6),
)
@pytest.mark.parametrize("kind", BACKENDS)
async def test_paging_returns_every_visible_match_once_newest_first(
    kind: str, tmp_path: Path, first: list[Step], later: list[list[Step]], who: str, how: str,
    filters: dict[str, str], limit: int, scan: int,
) -> None:  # fmt: skip
    """The log grows between pages: the listing goes on where it was. A filtered page looks
    at `scan` entries beyond its own: small here, so pages come short or empty yet not last."""
    from golem.service import audit

    (folder := tmp_path / uuid.uuid4().hex).mkdir()
    with backend_for(kind, folder) as backend:
        store = await backend.open()
        try:
            log = Log(store)
            await log.grow(first)
            entries = await _whole_log(store)
            query = urlencode({**filters, "limit": limit})
            url: str | None = (
                f"/api/audit?{query}" if how == "api" else f"/audit?{query}&format={how}"
            )
            got: list[int | str] = []
            with mock.patch.object(audit, "SCAN", scan):
                async with _client(store) as c:
                    if how != "api":
                        await _sign_in(c, who)
                    pages = 0
                    while url is not None:
                        ids, url = await _page(c, how, who, url)
                        assert len(ids) <= limit
                        got += ids
                        pages += 1
                        assert pages <= len(entries) + 1, "the pages do not end"
                        await log.grow(later[(pages - 1) % len(later)] if later else [])
            assert _positions(got, who) == _expected(entries, who, filters)
        finally:
            await store.close()


async def _flood(store: Store, entries: int) -> None:
    """`entries` audit entries of agent a1: runs saved 200 at a time."""

    async def save(n: int) -> None:
        call = NewCall("c1", CallKind.APPROVAL, "t")
        await store.save_pending(
            NewRun(id=f"flood-{n}", agent="a1", conversation_id="c", history="[]", calls=(call,))
        )

    for start in range(0, entries, 200):
        await asyncio.gather(*(save(n) for n in range(start, min(start + 200, entries))))


@pytest.mark.parametrize("kind", BACKENDS)
async def test_an_old_visible_entry_is_reached_past_thousands_of_newer_hidden_ones(
    kind: str, tmp_path: Path
) -> None:
    # Found: the view filtered the newest 5,000 entries of the whole log: past that many
    # newer entries of other agents an approver's page was empty and nothing paged back.
    with backend_for(kind, tmp_path) as backend:
        store = await backend.open()
        try:
            log = Log(store)
            await log.grow([(1, 0, False)])  # a2's run: the one "one" sees
            await log.grow([(0, 1, False)])  # a1's: hidden from "one"
            await _flood(store, 5200)
            async with _client(store) as c:
                res = await c.get("/api/audit", headers=_bearer("one"))
                assert res.status_code == 200
                entries = res.json()["entries"]
                assert [(e["run_id"], e["action"]) for e in entries] == [("r001-a2", "created")]
                assert res.json()["next_cursor"] is None
                # and the full view pages through all of it, 500 at a time
                seen, url = 0, "/api/audit"
                while True:
                    body = (await c.get(url, headers=_bearer("root"))).json()
                    seen += len(body["entries"])
                    if body["next_cursor"] is None:
                        break
                    url = "/api/audit?" + urlencode({"before": body["next_cursor"]})
                assert seen == 5202
        finally:
            await store.close()


async def test_ids_are_audit_ids_for_the_full_view_and_sealed_references_for_others(
    store: Store,
) -> None:
    # Found: the gap between two visible entry IDs counted hidden changes. A partial view
    # is shown references: one per entry on every view, and meaning nothing about gaps.
    log = Log(store)
    await log.grow([(1, 0, False), (0, 0, False), (0, 0, False), (1, 0, True)])
    visible = [e for e in await _whole_log(store) if e.agent == "a2"]
    async with _client(store) as c:
        root = (await c.get("/api/audit?agent=a2", headers=_bearer("root"))).json()
        assert [e["id"] for e in root["entries"]] == [e.id for e in reversed(visible)]
        one = (await c.get("/api/audit", headers=_bearer("one"))).json()
        refs = [e["id"] for e in one["entries"]]
        assert _positions(refs, "one") == [e.id for e in reversed(visible)]
        assert all(re.fullmatch(r"e[A-Za-z0-9_-]{32}", r) for r in refs)
        detail = (await c.get("/api/runs/r001-a2", headers=_bearer("one"))).json()
        assert [e["id"] for e in detail["run"]["audit"]] == refs[::-1]
        await _sign_in(c, "one")
        page = (await c.get("/runs/r001-a2")).text
        assert all(f'id="audit-{r}"' in page for r in refs)
        rows = list(csv.reader(io.StringIO((await c.get("/audit?format=csv")).text)))
        assert [r[0] for r in rows[1:]] == refs
        # a reference is a cursor too: the entries older than it
        older = await c.get("/api/audit?" + urlencode({"before": refs[0]}), headers=_bearer("one"))
        assert [e["id"] for e in older.json()["entries"]] == refs[1:]


@pytest.mark.parametrize(
    ("who", "before"),
    [
        ("one", "12"),  # an audit ID locates entries in the whole log: not for "one"
        ("one", "s" + "A" * 48),
        ("root", "s" + "A" * 48),
        ("root", "e" + "A" * 32),
        ("root", "-1"),
        ("root", "9223372036854775808"),
        ("root", "1e3"),
        ("root", "x"),
        # base64 drops what is not in its alphabet: these decoded short (a 500 before)
        ("one", "e" + "!" * 32),
        ("root", "e" + "A" * 31 + "="),
        ("one", "s" + "!" * 48),
        ("one", "e" + "é" * 32),
    ],
)
async def test_a_cursor_this_service_did_not_send_is_400_invalid_cursor(
    store: Store, who: str, before: str
) -> None:
    await Log(store).grow([(1, 0, False)])
    async with _client(store) as c:
        res = await c.get("/api/audit?" + urlencode({"before": before}), headers=_bearer(who))
        assert res.status_code == 400, res.text
        assert res.json()["error"]["code"] == "invalid_cursor"
        await _sign_in(c, who)
        for fmt in ("", "&format=csv", "&format=json"):
            res = await c.get("/audit?" + urlencode({"before": before}) + fmt)
            assert res.status_code == 400, (fmt, res.text)


async def test_a_cursor_sealed_by_another_service_or_tampered_is_refused(store: Store) -> None:
    await Log(store).grow([(1, 0, False)] * 3)
    async with _client(store) as c:
        body = (await c.get("/api/audit?limit=1", headers=_bearer("one"))).json()
    cursor = body["next_cursor"]
    assert cursor is not None
    assert cursor.startswith("s")
    other = create_app(ServiceSettings({}, store, auth=AuthConfig(tokens=_auth().tokens)))
    transport = httpx.ASGITransport(app=other)
    async with httpx.AsyncClient(transport=transport, base_url="http://golem.test") as c:
        res = await c.get("/api/audit?" + urlencode({"before": cursor}), headers=_bearer("one"))
        assert (res.status_code, res.json()["error"]["code"]) == (400, "invalid_cursor")
    flipped = cursor[:-3] + ("A" if cursor[-3] != "A" else "B") + cursor[-2:]
    async with _client(store) as c:
        res = await c.get("/api/audit?" + urlencode({"before": flipped}), headers=_bearer("one"))
        assert (res.status_code, res.json()["error"]["code"]) == (400, "invalid_cursor")
        ok = await c.get("/api/audit?" + urlencode({"before": cursor}), headers=_bearer("one"))
        assert ok.status_code == 200
        assert read_position(SECRET, cursor, full_view=False) is not None


async def test_a_hidden_agent_or_run_filters_like_an_unknown_one(tmp_path: Path) -> None:
    # Filtering by an agent or run the caller may not see answers exactly as for one that
    # does not exist, with the same statements (counted by the SQLite store's trace).
    store = SQLiteStore(tmp_path / "traced.db")
    trace: list[tuple[str, tuple[Any, ...]]] = []
    store.trace = trace
    try:
        await Log(store).grow([(0, 0, False), (1, 0, False), (0, 1, True)])
        async with _client(store) as c:
            for hidden, unknown in (
                ({"agent": "a1"}, {"agent": "zz"}),
                ({"run": "r001-a1"}, {"run": "r009-a9"}),
                ({"run": "a1"}, {"run": "a9"}),
            ):
                answers, traces = [], []
                for q in (hidden, unknown):
                    trace.clear()
                    res = await c.get("/api/audit?" + urlencode(q), headers=_bearer("one"))
                    answers.append((res.status_code, res.json()))
                    traces.append([sql for sql, _ in trace])
                assert answers[0] == answers[1] == (200, {"entries": [], "next_cursor": None})
                assert traces[0] == traces[1], hidden
    finally:
        await store.close()


async def test_the_page_links_the_next_page_and_back_to_the_newest(store: Store) -> None:
    await Log(store).grow([(1, n, False) for n in range(5)])
    async with _client(store) as c:
        await _sign_in(c, "one")
        first = (await c.get("/audit?limit=3&actor=o")).text
        assert first.count("<tr><td") == 3
        found = re.search(r'<a href="([^"]+)" rel="next">Older entries', first)
        assert found, "no link to the older page"
        older_url = found.group(1).replace("&amp;", "&")
        assert "actor=o" in older_url
        assert "limit=3" in older_url
        older = (await c.get(older_url)).text
        assert "Newest entries" in older
        assert 'rel="next"' not in older  # the last page
        shown = re.findall(r'<td data-label="Who">([^<]+)</td>', first + older)
        assert len(shown) == 4  # Zoë, ZOË-ops, worker:w1, bob: each has an o (any case)


async def test_the_stream_takes_an_audit_id_cursor_only_from_the_full_view(
    store: Store,
) -> None:
    # An approver shown no audit IDs could still find them by bisection with `?cursor=N`
    # (which entries arrive from N on); it resumes from the sealed IDs it was sent instead.
    # 0, the start of the log, stays open to every approver.
    await Log(store).grow([(1, 0, False)])
    async with _client(store) as c:
        for who, cursor, status in (("one", "1", 422), ("one", "5.0", 422), ("root", "1", 200)):
            for where in (
                {"params": {"cursor": cursor}},
                {"headers": {"Last-Event-ID": cursor}},
            ):
                kw: dict[str, Any] = dict(where)
                kw["headers"] = {**_bearer(who), **kw.get("headers", {})}
                if status == 200:
                    kw["method"], kw["url"] = "HEAD", "/api/events"
                    res = await c.request(**kw)
                else:
                    res = await c.get("/api/events", **kw)
                assert res.status_code == status, (who, cursor, where)
        res = await c.head("/api/events?cursor=0", headers=_bearer("one"))
        assert res.status_code == 200
        ref = (await c.get("/api/audit", headers=_bearer("one"))).json()["entries"][-1]["id"]
        res = await c.head("/api/events", params={"cursor": ref}, headers=_bearer("one"))
        assert res.status_code == 200  # an entry reference is a cursor too


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    ops=st.lists(
        st.tuples(st.booleans(), st.integers(0, 4), st.booleans()), min_size=1, max_size=16
    ),
    filters=_FILTERS,
    limit=st.integers(1, 3),
)
async def test_an_approvers_pages_are_the_same_with_or_without_hidden_activity(
    tmp_path: Path, ops: list[tuple[bool, int, bool]], filters: dict[str, str], limit: int
) -> None:
    # "one" sees a2; two logs hold the same a2 activity, one with a1 and a3 runs between.
    # Her pages (entries less time and reference, page ends) and their statements are equal.
    seen: list[Any] = []
    for hidden in (False, True):
        store = SQLiteStore(tmp_path / f"{uuid.uuid4().hex}.db")
        trace: list[tuple[str, tuple[Any, ...]]] = []
        store.trace = trace
        try:
            counts = {True: 0, False: 0}
            # one visible run first: a store that never wrote reads on another connection
            for visible, actor, decide in [(True, 0, False), *ops]:
                if not visible and not hidden:
                    continue
                counts[visible] += 1
                n = counts[visible]
                agent = "a2" if visible else ("a1", "a3")[n % 2]
                run_id = f"{'v' if visible else 'h'}{n:02d}-{agent}"
                await save_run(store, run_id, C1, agent=agent, started_by=ACTORS[actor])
                if decide:
                    await store.decide(run_id, "c1", Decision.approve(), decided_by=ACTORS[actor])
            pages: list[Any] = []
            async with _client(store) as c:
                url: str | None = "/api/audit?" + urlencode({**filters, "limit": limit})
                while url is not None:
                    trace.clear()
                    res = await c.get(url, headers=_bearer("one"))
                    body = res.json()
                    entries = [
                        {k: v for k, v in e.items() if k not in ("id", "at")}
                        for e in body["entries"]
                    ]
                    statements = [sql for sql, _ in trace]
                    pages.append(
                        (res.status_code, entries, body["next_cursor"] is None, statements)
                    )
                    url = None
                    if body["next_cursor"] is not None:
                        url = "/api/audit?" + urlencode(
                            {**filters, "limit": limit, "before": body["next_cursor"]}
                        )
            seen.append(pages)
        finally:
            await store.close()

    assert seen[0] == seen[1]
