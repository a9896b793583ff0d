"""What a caller's event stream and pages show does not depend on runs it may not see
(ADR 0073): not a byte, not a keep-alive's timing, not a cursor."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

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
from golem.service.positions import read_position
from tests.support.service import WAIT, Event, bearer, make_auth, open_stream, sign_in


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


async def test_hidden_changes_send_an_observer_not_one_byte(registry: Any, store: Store) -> None:
    # Found: hidden changes moved the stream's `id:` (and by how much). Now olga receives no
    # byte while only hidden runs change, and the next visible change is exactly its event.
    watched = Watched(store)
    app = _app(registry, watched)
    async with open_stream(app, headers=bearer("olga")) as s:
        await s.next("hello")
        await watched.idle_after(await store.last_change_id())
        before = s.text
        await _hidden_activity(store, registry)
        await watched.idle_after(await store.last_change_id())
        assert s.text == before
        visible = await start_run(store, registry, "twin", "t", started_by="alice")
        change = await s.next("change")
        entry = (await store.audit(visible.id))[-1]
        secret = make_auth().secret
        # olga does not see every agent: the event's ID is a sealed cursor and the entry's
        # id a sealed reference (ADR 0077), so neither counts the hidden changes
        assert change.id is not None
        assert s.text == before + f"id: {change.id}\nevent: change\ndata: {change.data}\n\n"
        data = change.json()
        assert (data["run_id"], data["agent"], data["status"], data["action"]) == (
            visible.id,
            "twin",
            "pending",
            "created",
        )
        assert read_position(secret, data["id"], full_view=False) == entry.id
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
            async with open_stream(app, headers=bearer("olga"), query="cursor=0") as s:
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
    # Found: hidden changes put off the next keep-alive. Now one is due every
    # `stream_heartbeat` seconds from the stream's start (on a fake clock the test moves).
    now = [0.0]
    monkeypatch.setattr("golem.service.stream._now", lambda: now[0])
    watched = Watched(store)
    app = _app(registry, watched, heartbeat=1000.0)
    async with open_stream(app, headers=bearer("olga")) as s:
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


async def test_the_hello_cursor_is_sealed_fresh_each_time_and_resumes(
    registry: Any, store: Store
) -> None:
    # The hello's cursor was the audit log's newest ID: two streams opened a moment apart
    # told how many changes, hidden ones included, happened in between. It is now sealed
    # with a fresh nonce: two hellos over an unchanged log differ, and either one resumes.
    app = _app(registry, store)
    secret = make_auth().secret
    hellos = []
    for _ in range(2):
        async with open_stream(app, headers=bearer("olga")) as s:
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
    async with open_stream(app, headers={**bearer("olga"), "Last-Event-ID": first}) as s:
        await s.next("hello")
        assert (await s.next("change")).json()["run_id"] == visible.id


async def test_a_cursor_not_sealed_by_this_service_is_422(
    registry: Any, store: Store, tmp_path: Path
) -> None:
    app = _app(registry, store)
    transport = httpx.ASGITransport(app=app)
    async with open_stream(app, headers=bearer("olga")) as s:
        sealed = (await s.next("hello")).json()["cursor"]
    flipped = sealed[:-3] + ("A" if sealed[-3] != "A" else "B") + sealed[-2:]
    other = create_app(
        ServiceSettings(registry, store, auth=make_auth().__class__(tokens=make_auth().tokens))
    )
    async with open_stream(other, headers=bearer("olga")) as s:
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
    # Reconnecting from the last `id:` received (as EventSource does) gets every visible
    # change once, in order, however hidden changes and reconnects interleave.
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
            return open_stream(app, headers=headers)

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
    secret = make_auth().secret
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
