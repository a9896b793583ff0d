"""What a caller observes does not depend on what it may not see (ADR 0073).

What a caller observes must not depend on what it may not see: the event stream's bytes and
keep-alive schedule, its cursors, and the work a 404 for a hidden run costs.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette

from golem import new_id
from golem.durable.store import AuditEntry, Store
from golem.durable.store.sqlite import SQLiteStore
from golem.durable.worker import start_run
from golem.service import ServiceSettings, create_app
from golem.service import stream as stream_module
from golem.service.api import audit_json
from golem.service.positions import read_position
from tests.support.service import WAIT, Event, bearer, make_auth, parse, sign_in

# ---------------------------------------------------------------- a raw stream client


@dataclass
class Raw:
    """An open event stream: every byte it sent, and its complete events in order."""

    status: int = 0
    text: str = ""
    events: asyncio.Queue[Event] = field(default_factory=asyncio.Queue)
    _buffer: str = ""

    async def next(self, event: str | None = None) -> Event:
        while True:
            ev = await asyncio.wait_for(self.events.get(), WAIT)
            if event is None or ev.event == event:
                return ev

    def received(self) -> list[Event]:
        """The events that arrived and were not read yet."""
        out = []
        while not self.events.empty():
            out.append(self.events.get_nowait())
        return out


@asynccontextmanager
async def raw_stream(
    app: Starlette, headers: dict[str, str], query: str = ""
) -> AsyncIterator[Raw]:
    """`GET /api/events` on the app, read as it is sent, ended by disconnecting."""
    raw = Raw()
    started = asyncio.Event()
    gone = asyncio.Event()

    async def receive() -> dict[str, Any]:
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            raw.status = message["status"]
            started.set()
        elif message["type"] == "http.response.body":
            chunk = message.get("body", b"").decode()
            raw.text += chunk
            raw._buffer += chunk
            while "\n\n" in raw._buffer:
                block, raw._buffer = raw._buffer.split("\n\n", 1)
                raw.events.put_nowait(parse(block))

    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": "/api/events",
        "raw_path": b"/api/events",
        "root_path": "",
        "query_string": query.encode(),
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        "client": ("127.0.0.1", 50000),
        "server": ("golem.test", 80),
        "state": {},
    }
    task = asyncio.create_task(app(scope, receive, send))
    await asyncio.wait_for(started.wait(), WAIT)
    try:
        yield raw
    finally:
        gone.set()
        await asyncio.wait_for(task, WAIT)


class Watched:
    """A store that tells when its audit log has been read past an entry."""

    def __init__(self, inner: Store) -> None:
        self._inner = inner
        self.read_to = 0
        self.idle_at = -1
        self._moved = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def changes_since(self, cursor: int = 0, limit: int = 100) -> list[AuditEntry]:
        batch = await self._inner.changes_since(cursor, limit)
        if batch:
            self.read_to = max(self.read_to, batch[-1].id)
        else:
            self.idle_at = max(self.idle_at, cursor)
        self._moved.set()
        return batch

    async def idle_after(self, entry_id: int) -> None:
        """Until a read after entry `entry_id` found nothing newer (the stream is idle)."""
        while True:
            self._moved.clear()
            if self.idle_at >= entry_id:
                return
            await asyncio.wait_for(self._moved.wait(), WAIT)


async def _hidden_activity(store: Store, registry: Any, runs: int = 3) -> None:
    """Runs of `mixed` (which olga may not see) started and decided by alice."""
    for _ in range(runs):
        run = await start_run(store, registry, "mixed", "m", started_by="alice")
        from golem.durable.store import Decision

        await store.decide(run.id, "a1", Decision.approve(), decided_by="alice")


def _app(registry: Any, store: Any, heartbeat: float = 3600.0) -> Starlette:
    return create_app(
        ServiceSettings(
            registry, store, auth=make_auth(), stream_poll_interval=0.02, stream_heartbeat=heartbeat
        )
    )


# ---------------------------------------------------------------- the stream's bytes


async def test_hidden_changes_send_an_observer_not_one_byte(registry: Any, store: Store) -> None:
    # Found: each batch of changes the caller may not see ended with a bare `id: N` line,
    # so an observer saw the cursor move whenever a run it may not see changed (and by
    # how much). Now the stream is silent about them: the bytes olga receives while only
    # hidden runs change are none, and the next visible change is exactly its own event.
    watched = Watched(store)
    app = _app(registry, watched)
    async with raw_stream(app, bearer("olga")) as s:
        await s.next("hello")
        await watched.idle_after(await store.last_change_id())
        before = s.text
        await _hidden_activity(store, registry)
        await watched.idle_after(await store.last_change_id())
        assert s.text == before
        visible = await start_run(store, registry, "twin", "t", started_by="alice")
        change = await s.next("change")
        entry = (await store.audit(visible.id))[-1]
        secret = app.state.golem.auth.secret
        data = audit_json(entry, secret)
        data |= {"agent": "twin", "status": "pending", "parent_run_id": None}
        # olga does not see every agent: the event's ID is a sealed cursor and the entry's
        # id a sealed reference (ADR 0077), so neither counts the hidden changes
        assert change.id is not None
        assert s.text == before + stream_module._sse("change", data, change.id)
        assert read_position(secret, change.id, full_view=False) == entry.id


async def test_an_observer_stream_is_the_same_with_or_without_hidden_runs(
    registry: Any, tmp_path: Path
) -> None:
    # Two services, one where runs olga may not see change and one where they do not:
    # olga's stream, from the same start and with no keep-alive due, is byte for byte
    # the same (the hello's sealed cursor aside, which differs on every stream).
    texts = []
    for hidden in (False, True):
        store = await SQLiteStore.open(tmp_path / f"{hidden}.db")
        try:
            watched = Watched(store)
            app = _app(registry, watched)
            async with raw_stream(app, bearer("olga"), query="cursor=0") as s:
                hello = await s.next("hello")
                await watched.idle_after(0)
                if hidden:
                    await _hidden_activity(store, registry, runs=4)
                    await watched.idle_after(await store.last_change_id())
            assert hello.id is not None
            texts.append(s.text.replace(hello.id, "<sealed>"))
        finally:
            await store.close()
    assert texts[0] == texts[1]
    assert texts[0].count("\n\n") == 2  # retry: and hello


async def test_keep_alives_follow_a_fixed_schedule_whatever_hidden_runs_do(
    registry: Any, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Found: the keep-alive clock restarted on every batch read, hidden ones included, so
    # a run the caller may not see changing put off its next keep-alive: their timing
    # showed hidden activity. Now a keep-alive is due every `stream_heartbeat` seconds
    # from the stream's start. The stream's clock is a fake one the test moves.
    now = [0.0]
    monkeypatch.setattr(stream_module, "_now", lambda: now[0])
    watched = Watched(store)
    app = _app(registry, watched, heartbeat=1000.0)
    async with raw_stream(app, bearer("olga")) as s:
        await s.next("hello")
        now[0] = 999.0
        await _hidden_activity(store, registry, runs=1)
        await watched.idle_after(await store.last_change_id())
        now[0] = 1000.0  # due: sent at the stream's next idle point
        await _hidden_activity(store, registry, runs=1)
        await watched.idle_after(await store.last_change_id())
        visible = await start_run(store, registry, "twin", "t", started_by="alice")
        events = []
        while True:
            ev = await s.next()
            events.append(ev)
            if ev.event == "change":
                break
        assert [e.comment for e in events] == ["keep-alive", ""]
        assert events[-1].json()["run_id"] == visible.id


# ---------------------------------------------------------------- sealed cursors


async def test_the_hello_cursor_is_sealed_fresh_each_time_and_resumes(
    registry: Any, store: Store
) -> None:
    # The hello's cursor was the audit log's newest ID: two streams opened a moment apart
    # told how many changes, hidden ones included, happened in between. It is now sealed
    # with a fresh nonce: two hellos over an unchanged log differ, and either one resumes.
    app = _app(registry, store)
    secret = app.state.golem.auth.secret
    hellos = []
    for _ in range(2):
        async with raw_stream(app, bearer("olga")) as s:
            hellos.append(await s.next("hello"))
    first, second = (h.json()["cursor"] for h in hellos)
    assert first != second
    assert hellos[0].id == first
    assert read_position(secret, first, full_view=False) == read_position(
        secret, second, full_view=False
    )
    assert not first.isdigit()
    assert len(first) == len(second)
    # a change made while no stream was open arrives on the reconnect from the hello's ID
    visible = await start_run(store, registry, "twin", "t", started_by="alice")
    async with raw_stream(app, {**bearer("olga"), "Last-Event-ID": first}) as s:
        await s.next("hello")
        assert (await s.next("change")).json()["run_id"] == visible.id


async def test_a_cursor_not_sealed_by_this_service_is_422(
    registry: Any, store: Store, tmp_path: Path
) -> None:
    app = _app(registry, store)
    transport = httpx.ASGITransport(app=app)
    async with raw_stream(app, bearer("olga")) as s:
        sealed = (await s.next("hello")).json()["cursor"]
    flipped = sealed[:-3] + ("A" if sealed[-3] != "A" else "B") + sealed[-2:]
    other = create_app(
        ServiceSettings(registry, store, auth=make_auth().__class__(tokens=make_auth().tokens))
    )
    async with raw_stream(other, bearer("olga")) as s:
        foreign = (await s.next("hello")).json()["cursor"]
    async with httpx.AsyncClient(transport=transport, base_url="http://golem.test") as c:
        for bad in (flipped, foreign, sealed[:-1], sealed + "A", "s", "s" + "=" * 48):
            for where in ({"params": {"cursor": bad}}, {"headers": {"Last-Event-ID": bad}}):
                kw: dict[str, Any] = dict(where)
                kw["headers"] = {**bearer("olga"), **kw.get("headers", {})}
                res = await c.get("/api/events", **kw)
                assert res.status_code == 422, (bad, res.text)
                assert res.json()["error"]["code"] == "invalid_request"


_OPS = st.lists(st.sampled_from(["visible", "hidden", "reconnect"]), max_size=12)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=_OPS)
async def test_reconnecting_from_the_last_event_id_never_misses_or_repeats(
    registry: Any, tmp_path: Path, ops: list[str]
) -> None:
    # A client that reconnects from the last `id:` it received (as EventSource does) gets
    # every change it may see exactly once, in order, however hidden changes and
    # reconnects interleave — though the stream no longer moves its cursor past hidden
    # changes.
    store = await SQLiteStore.open(tmp_path / f"{new_id()}.db")
    try:
        app = _app(registry, store)
        expected: list[str] = []
        got: list[str] = []
        last: str | None = None

        def take(events: list[Event]) -> None:
            nonlocal last
            for ev in events:
                if ev.id is not None:
                    last = ev.id
                if ev.event == "change":
                    got.append(ev.json()["run_id"])

        async def connect() -> Any:
            headers = bearer("olga") | ({"Last-Event-ID": last} if last else {})
            return raw_stream(app, headers)

        ctx = await connect()
        s = await ctx.__aenter__()
        take([await s.next("hello")])
        for op in ops:
            if op == "visible":
                expected.append(
                    (await start_run(store, registry, "twin", "t", started_by="alice")).id
                )
            elif op == "hidden":
                await _hidden_activity(store, registry, runs=1)
            else:
                await ctx.__aexit__(None, None, None)
                take(s.received())
                ctx = await connect()
                s = await ctx.__aenter__()
        sentinel = (await start_run(store, registry, "twin", "t", started_by="alice")).id
        expected.append(sentinel)
        try:
            while sentinel not in got:
                take([await s.next()])
        finally:
            await ctx.__aexit__(None, None, None)
        assert got == expected
    finally:
        await store.close()


# ---------------------------------------------------------------- a hidden run's 404


async def test_a_hidden_run_and_an_unknown_run_cost_the_same_statements(
    registry: Any, tmp_path: Path
) -> None:
    # Found: `load_run` read a hidden run whole (its row, then its calls and history) and
    # then answered 404; an unknown ID stopped after one empty read. The answers were the
    # same but a hidden run's took longer by a read. Both now run the same statements
    # (the store filters by the approver's agents), counted here, never timed.
    store = SQLiteStore(tmp_path / "traced.db")
    trace: list[tuple[str, tuple[Any, ...]]] = []
    store.trace = trace  # before first use: every connection records into this list
    try:
        await _costs(store, registry)
    finally:
        await store.close()


async def _costs(store: SQLiteStore, registry: Any) -> None:
    hidden = await start_run(store, registry, "mixed", "m", started_by="alice")
    unknown = new_id()
    trace = store.trace
    assert trace is not None
    app = _app(registry, store)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://golem.test") as c:
        page = await sign_in(c, "olga")
        del page
        routes = [
            ("GET", "/api/runs/{}", bearer("olga"), None),
            ("HEAD", "/api/runs/{}", bearer("olga"), None),
            ("POST", "/api/runs/{}/calls/a1/decision", bearer("olga"), {"decision": "approve"}),
            ("GET", "/runs/{}", {}, None),
        ]
        for method, template, headers, body in routes:
            traces = []
            answers = []
            for run_id in (hidden.id, unknown):
                trace.clear()
                res = await c.request(method, template.format(run_id), headers=headers, json=body)
                traces.append([sql for sql, _ in trace])
                answers.append(res.status_code)
            assert answers == [404, 404], (method, template)
            assert traces[0] == traces[1], (method, template)
            assert traces[0], "the lookup ran no statement at all"


@pytest.mark.parametrize("page", ["/", "/runs", "/runs/{run}"])
async def test_a_page_links_its_stream_with_a_sealed_cursor(
    registry: Any, store: Store, page: str
) -> None:
    # Found: every inbox page linked `/api/events?cursor=N` with N the audit log's newest
    # ID, so two page loads told how many changes, hidden ones included, happened between
    # them. The cursor is sealed: fresh on every load, read back by the stream.
    visible = await start_run(store, registry, "twin", "t", started_by="alice")
    await _hidden_activity(store, registry, runs=2)
    app = _app(registry, store)
    secret = app.state.golem.auth.secret
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://golem.test") as c:
        await sign_in(c, "olga")
        urls = []
        for _ in range(2):
            res = await c.get(page.format(run=visible.id))
            assert res.status_code == 200
            found = re.search(r'data-stream="/api/events\?cursor=([^"]+)"', res.text)
            assert found, "no stream link on the page"
            urls.append(found.group(1))
    assert urls[0] != urls[1]
    positions = [read_position(secret, u, full_view=False) for u in urls]
    assert positions == [await store.last_change_id()] * 2


# ---------------------------------------------------------------- every route, every caller

_CALLERS = ["nobody", "alice", "olga", "tess", "vic", "session:olga", "session:tess", "session:vic"]


def _route_table(app: Starlette) -> list[tuple[str, str]]:
    """(method, path template) of every route of the app, from its own route table."""
    from starlette.routing import Route

    out = []
    for route in app.routes:
        if isinstance(route, Route) and route.methods:
            out += [(m, route.path) for m in sorted(route.methods)]
    return out


def _request_for(
    method: str, template: str, run_id: str, call_id: str
) -> tuple[str, dict[str, Any]]:
    """A URL and body for a route: a plausible body, so checks past parsing are reached."""
    url = template.replace("{run_id}", quote(run_id, safe="")).replace(
        "{call_id:golem_any}", quote(call_id, safe="")
    )
    if method != "POST":
        return url, {}
    if template.startswith("/api/"):
        body: dict[str, Any] = (
            {"decision": "approve"}
            if template.endswith("/decision")
            else {"agent": "mixed", "prompt": "p"}
        )
        return url, {"json": body}
    form = {"decision": "approve", "action": "cancel", "note": "n", "agent": "mixed", "prompt": "p"}
    return url, {"data": form}


async def _stream_start(app: Starlette, c: httpx.AsyncClient, headers: dict[str, str]) -> None:
    """Open the event stream as the client's caller: a named refusal, or a hello."""
    cookie = "; ".join(f"{k}={v}" for k, v in c.cookies.items())
    async with raw_stream(app, headers | ({"Cookie": cookie} if cookie else {})) as s:
        if s.status == 200:
            await s.next("hello")
    assert s.status in (200, 401), s.text


async def test_every_route_for_every_caller_and_run_is_a_named_answer_that_leaks_nothing(
    registry: Any, store: Store
) -> None:
    # Generated from the app's route table, so a new route is covered without editing this
    # test: every method of every route, for every kind of caller (none, bearer tokens of
    # four approvers, three inbox sessions), on a run the caller may see, one it may not and
    # an ID no run has. No answer is a 5xx; for a caller limited to some agents a hidden
    # run answers exactly as an unknown ID; and afterwards no decision, start or
    # resolution in the store was taken by an approver not allowed to take it.
    from tests.support.service import same

    app = _app(registry, store)
    auth = app.state.golem.auth
    approvers = {a.identity: a for a in auth.tokens.values()}
    routes = _route_table(app)
    assert len(routes) > 20, routes
    transport = httpx.ASGITransport(app=app)
    for caller in _CALLERS:
        async with httpx.AsyncClient(transport=transport, base_url="http://golem.test") as c:
            headers: dict[str, str] = {}
            csrf = ""
            if caller.startswith("session:"):
                csrf = await sign_in(c, caller.split(":")[1])
            elif caller != "nobody":
                headers = bearer(caller)
            visible = await start_run(store, registry, "twin", "t", started_by="alice")
            hidden = await start_run(store, registry, "mixed", "m", started_by="alice")
            unknown = new_id()
            limited = caller.endswith("olga")  # olga may not see "mixed"
            for method, template in routes:
                answers = {}
                for kind, run_id, call_id in (
                    ("visible", visible.id, "c1"),
                    ("hidden", hidden.id, "a1"),
                    ("unknown", unknown, "a1"),
                ):
                    url, kw = _request_for(method, template, run_id, call_id)
                    if "data" in kw:
                        kw["data"] = {**kw["data"], "csrf": csrf}
                    if (method, template) == ("GET", "/api/events"):  # endless: read its start
                        await _stream_start(app, c, headers)
                        break
                    res = await c.request(method, url, headers=headers, **kw)
                    assert res.status_code < 500, (caller, method, url, res.text)
                    answers[kind] = res
                    if "{run_id}" not in template:
                        break
                if "{run_id}" in template and limited:
                    same(answers["hidden"], answers["unknown"], hidden.id, unknown)
    # nothing was done by someone not allowed to do it
    for run in await store.list_runs(limit=1000):
        assert approvers[run.started_by].may_start(run.agent), run.id
        for call in run.calls:
            if call.decision is not None and call.decision.decided_by in approvers:
                who = approvers[call.decision.decided_by]
                assert who.may_decide(run.agent, call.tool_name), (run.agent, call)
        for entry in await store.audit(run.id):
            if entry.actor in approvers:
                assert approvers[entry.actor].may_see(run.agent), entry


# ---------------------------------------------------------------- two processes, one database


@contextmanager
def _services(url: str, n: int = 2) -> Iterator[list[str]]:
    """`n` service processes over one store; their base URLs."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.support.race_service", url],
            stdout=subprocess.PIPE,
            cwd=Path(__file__).resolve().parents[2],
        )
        for _ in range(n)
    ]
    try:
        bases = []
        for p in procs:
            assert p.stdout is not None
            line = p.stdout.readline().decode()  # blocks until it listens (or exits)
            assert line.startswith("port "), f"the service did not start: {line!r}"
            bases.append(f"http://127.0.0.1:{int(line.split()[1])}")
        yield bases
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=WAIT * 3)
            if p.stdout is not None:
                p.stdout.close()


def _race(bases: list[str], run_id: str, who_kind: list[tuple[str, str]]) -> list[Any]:
    """Each (approver, kind) decides call c1 of the run through its own process, released
    together by a barrier; their answers in order."""
    barrier = threading.Barrier(len(who_kind))
    answers: list[Any] = [None] * len(who_kind)

    def decide(i: int) -> None:
        who, kind = who_kind[i]
        with httpx.Client(base_url=bases[i % len(bases)], timeout=WAIT * 3) as c:
            c.get("/api/health")  # connected before the barrier
            barrier.wait(timeout=WAIT * 3)
            res = c.post(
                f"/api/runs/{run_id}/calls/c1/decision",
                json={"decision": kind},
                headers=bearer(who),
            )
            answers[i] = (res.status_code, res.json())

    threads = [threading.Thread(target=decide, args=(i,)) for i in range(len(who_kind))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT * 3)
    return answers


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_two_service_processes_deciding_one_call_at_once_record_one_decision(
    kind: str, tmp_path: Path
) -> None:
    # Two approvers press Approve (or one Approve, one Deny) on the same call at the same
    # moment, each through its own service process on one database. Exactly one answer
    # is 200 and names its approver; the other is 409 decision_conflict naming the winner;
    # the run's audit log holds one decision of the call, the winner's.
    from tests.store.backends import backend_for

    with backend_for(kind, tmp_path) as backend:
        if kind == "sqlite":
            url = f"sqlite:///{backend.path}"
        else:
            assert backend.dsn is not None
            asyncio.run(_make_schema(backend))
            url = backend.dsn + ("&" if "?" in backend.dsn else "?")
            url += f"options=-csearch_path%3D{backend.schema}"
        with _services(url) as bases:
            for round_ in range(6):
                started = httpx.post(
                    bases[0] + "/api/runs",
                    json={"agent": "twin", "prompt": f"r{round_}"},
                    headers=bearer("alice"),
                    timeout=WAIT * 3,
                )
                assert started.status_code == 201, started.text
                run_id = started.json()["run"]["id"]
                kinds = ("approve", "approve") if round_ % 2 else ("approve", "deny")
                answers = _race(bases, run_id, [("alice", kinds[0]), ("vic", kinds[1])])
                codes = sorted(a[0] for a in answers)
                assert codes == [200, 409], answers
                (winner,) = [
                    w for w, a in zip(("alice", "vic"), answers, strict=True) if a[0] == 200
                ]
                loser = next(a for a in answers if a[0] == 409)[1]
                assert loser["error"]["code"] == "decision_conflict", loser
                assert winner in loser["error"]["message"]
                shown = httpx.get(
                    bases[1] + f"/api/runs/{run_id}", headers=bearer("alice"), timeout=WAIT * 3
                ).json()["run"]
                decided = [
                    e
                    for e in shown["audit"]
                    if e["action"] == "decided" and e["detail"].get("call_id") == "c1"
                ]
                assert [e["actor"] for e in decided] == [winner], shown["audit"]


async def _make_schema(backend: Any) -> None:
    """Create the backend's schema (its tables are created on first open)."""
    store = await backend.open()
    await store.close()


# ---------------------------------------------------------------- things said twice


@settings(deadline=None)
@given(
    st.lists(
        st.tuples(
            st.text(alphabet="ab+%20=61&;", max_size=5), st.text(alphabet="ab=%+", max_size=3)
        ),
        max_size=5,
    ).map(lambda pairs: "&".join(f"{k}={v}" if v else k for k, v in pairs))
)
def test_a_repeated_parameter_is_found_as_starlette_reads_the_query(query: str) -> None:
    # The pre-routing check reads parameter names itself (fast): it must call a name
    # repeated exactly when Starlette's own reading of the query sees it twice.
    from urllib.parse import parse_qsl

    from golem.service.middleware import _url_problem

    names = [k for k, _ in parse_qsl(query, keep_blank_values=True)]
    scope = {"path": "/", "raw_path": b"/", "query_string": query.encode("latin-1")}
    problem = _url_problem(scope)
    if problem is not None and "twice" not in problem:
        return  # refused for its escapes (a stray %)
    assert (problem is not None) == (len(names) != len(set(names))), (query, names, problem)


async def test_on_postgresql_a_hidden_run_and_an_unknown_run_cost_the_same_statements(
    registry: Any, tmp_path: Path
) -> None:
    # The same on PostgreSQL, counted by the store's statement counter.
    from tests.store.backends import backend_for

    with backend_for("postgres", tmp_path) as backend:
        store = await backend.open()
        try:
            hidden = await start_run(store, registry, "mixed", "m", started_by="alice")
            unknown = new_id()
            app = _app(registry, store)
            transport = httpx.ASGITransport(app=app)
            stats = store.stats  # type: ignore[attr-defined]
            async with httpx.AsyncClient(transport=transport, base_url="http://golem.test") as c:
                for method, template, body in (
                    ("GET", "/api/runs/{}", None),
                    ("POST", "/api/runs/{}/calls/a1/decision", {"decision": "approve"}),
                ):
                    counts = []
                    for run_id in (hidden.id, unknown):
                        before = stats.statements
                        res = await c.request(
                            method, template.format(run_id), headers=bearer("olga"), json=body
                        )
                        assert res.status_code == 404
                        counts.append(stats.statements - before)
                    assert counts[0] == counts[1] > 0, (method, template, counts)
        finally:
            await store.close()
