"""Workers wake on the store's change feed, not on a poll; leases fence the resume."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from golem import Agent, Message, RunContext, ToolCall
from golem.durable.store import ChangeFeed, Decision, LeaseLost, RunStatus, Store
from golem.durable.store.sqlite import SQLiteStore
from golem.durable.worker import AgentEntry, Worker, start_run
from golem.testing import ScriptedModel
from golem.tool import DeferKind, Deferred, call_approved
from tests.support.durable.backends import Backend, backend_for
from tests.support.durable.procs import eventually
from tests.support.worker import bank_app

pytestmark = pytest.mark.loop

WAIT = 30.0  # a guard against a hang; the worker's own poll interval is an hour


@pytest.fixture
async def stores(backend: Backend) -> AsyncIterator[tuple[Store, Store]]:
    """Two store instances on one database (as two processes would have)."""
    # SQLite: queries an hour apart, so the write-ahead log watch must do the waking (ADR 0042)
    kw: dict[str, Any] = {}
    if backend.kind == "sqlite":
        kw = {"poll_interval": 3600.0, "watch_interval": 0.01}
    a, b = await backend.open(**kw), await backend.open(**kw)
    try:
        yield a, b
    finally:
        await a.close()
        await b.close()


async def _waiting(feed: ChangeFeed) -> None:
    await eventually(lambda: _true(feed._waiters > 0), WAIT, "the worker to wait on its feed")


async def _true(value: bool) -> bool:
    return value


async def test_a_decision_made_elsewhere_wakes_a_waiting_worker(
    stores: tuple[Store, Store],
) -> None:
    """PostgreSQL NOTIFY (or SQLite's write-ahead log watch) wakes a worker polling once an hour."""
    mine, theirs = stores
    registry, ran = bank_app()
    worker = Worker(mine, registry, worker_id="w", sweep_interval=3600)
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run_forever(poll_interval=3600, stop_event=stop))
    try:
        await _waiting(mine.change_feed())
        run = await start_run(theirs, registry, "bank", "pay", started_by="a")
        await theirs.decide(run.id, "c1", Decision.approve(), decided_by="b")

        async def completed() -> bool:
            return (await theirs.get_run(run.id)).status is RunStatus.COMPLETED

        await eventually(completed, WAIT, "the woken worker to complete the run")
        assert ran == ["c1"]
    finally:
        stop.set()
        await asyncio.wait_for(task, WAIT)


async def test_waiters_of_one_store_share_one_poller(tmp_path: Path) -> None:
    async with await SQLiteStore.open(tmp_path / "f.db", poll_interval=0.02) as store:
        other = await SQLiteStore.open(tmp_path / "f.db")
        try:
            feed = store.change_feed()
            start = await store.last_change_id()
            waiters = [asyncio.create_task(feed.wait_for_change(start, WAIT)) for _ in range(5)]
            await eventually(lambda: _true(feed._waiters == 5), WAIT, "five waiters")
            pollers = [t for t in asyncio.all_tasks() if t.get_name() == "golem-store-poller"]
            assert len(pollers) == 1
            await other.save_pending(_a_run())  # another process's commit
            got = await asyncio.wait_for(asyncio.gather(*waiters), WAIT)
            assert all(g > start for g in got)
        finally:
            await other.close()


def _a_run() -> Any:
    from tests.support.durable.runs import make_run

    return make_run()


async def test_a_worker_that_lost_its_lease_stops_by_itself(tmp_path: Path) -> None:
    """The heartbeat's LeaseLost cancels the resume: nothing else has to."""
    async with await SQLiteStore.open(tmp_path / "h.db") as store:
        gate = asyncio.Event()
        started = asyncio.Event()

        async def slow(ctx: RunContext[Any]) -> str:
            """Slow gated work."""
            if not call_approved():
                raise Deferred(DeferKind.APPROVAL, "slow")
            started.set()
            await gate.wait()
            return "finished"

        model = ScriptedModel(
            Message(role="assistant", tool_calls=[ToolCall("c1", "slow", "{}")]), "never"
        )
        registry = {"a": AgentEntry(Agent(model, tools=[slow]))}
        run = await start_run(store, registry, "a", "go", started_by="x")
        await store.decide(run.id, "c1", Decision.approve(), decided_by="y")
        worker = Worker(store, registry, worker_id="w", lease_seconds=0.3, sweep_interval=3600)
        task = asyncio.create_task(worker.run_once())
        await asyncio.wait_for(started.wait(), WAIT)
        claimed = await store.get_run(run.id)
        assert claimed.lease_expires_at is not None
        await store.sweep_interrupted(claimed.lease_expires_at.replace(year=2099))
        done, _ = await asyncio.wait([task], timeout=WAIT)  # never cancelled by the test
        assert task in done
        assert task.result() is True
        assert not gate.is_set()
        assert (await store.get_run(run.id)).status is RunStatus.INTERRUPTED
        with pytest.raises(LeaseLost):
            await store.renew_lease(run.id, "w", 1)


@pytest.mark.postgres
async def test_connections_dropped_during_a_resume_do_not_interrupt_it(tmp_path: Path) -> None:
    """The approved tool's side effect happens while the server drops every idle pooled
    connection; the outcome is still saved as completed, not left to become interrupted."""
    import psycopg

    with backend_for("postgres", tmp_path) as pg:
        store = await pg.open()
        assert pg.dsn is not None
        dsn = pg.dsn
        try:
            ran: list[str] = []

            def pay(ctx: RunContext[Any], amount: int) -> str:
                """Pay (needs approval); the database restarts its connections meanwhile."""
                if not call_approved():
                    raise Deferred(DeferKind.APPROVAL, "money")
                with psycopg.connect(dsn, autocommit=True) as admin:
                    admin.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                        "AND state = 'idle'"
                    )
                ran.append(ctx.call_id)
                return "paid"

            model = ScriptedModel(
                Message(role="assistant", tool_calls=[ToolCall("c1", "pay", '{"amount": 1}')]),
                "done",
            )
            registry = {"bank": AgentEntry(Agent(model, tools=[pay]))}
            run = await start_run(store, registry, "bank", "go", started_by="a")
            await store.decide(run.id, "c1", Decision.approve(), decided_by="b")
            assert await Worker(store, registry, worker_id="w").run_once()
            assert ran == ["c1"]
            assert (await store.get_run(run.id)).status is RunStatus.COMPLETED
        finally:
            await store.close()


async def test_a_worker_only_process_hears_only_the_changes_that_make_runs_ready(
    stores: tuple[Store, Store],
) -> None:
    """PostgreSQL: a worker's feed (`change_feed(ready_only=True)`) listens on the ready
    channel only, so the commits that make no run ready wake no worker-only process; the
    first caller that wants every change (an event stream) widens the listener."""
    mine, theirs = stores
    if not hasattr(mine, "ready_channel"):
        pytest.skip("PostgreSQL's channels")
    feed = mine.change_feed(ready_only=True)
    heard: list[tuple[int, bool]] = []
    publish = feed.publish

    def record(last_id: int, *, ready: bool) -> None:
        heard.append((last_id, ready))
        publish(last_id, ready=ready)

    feed.publish = record  # type: ignore[method-assign]
    await eventually(lambda: _true(bool(heard)), WAIT, "the listener's first probe")
    heard.clear()
    registry, _ = bank_app()
    run = await start_run(theirs, registry, "bank", "pay", started_by="a")  # not ready
    await theirs.decide(run.id, "c1", Decision.approve(), decided_by="b")  # ready
    await eventually(lambda: _true(bool(heard)), WAIT, "the decision's notice")
    assert all(ready for _, ready in heard), heard  # the pause's notice never came

    mine.change_feed()  # an event stream: every change from now on
    await eventually(lambda: _true(len(heard) > 1), WAIT, "the widened listener's probe")
    seen = feed.last_id
    other = await start_run(theirs, bank_app()[0], "bank", "pay again", started_by="a")
    assert other.status is RunStatus.PENDING
    newest = await feed.wait_for_change(seen, WAIT)
    assert newest > seen, "a change that makes no run ready reaches a stream's feed"
