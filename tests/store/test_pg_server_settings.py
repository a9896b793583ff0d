"""Server settings an operator may put on the database, a third chaos round (ADR 0068).

- `idle_in_transaction_session_timeout` at 1 ms: every store operation, migrations
  included, still succeeds, however long this process takes between a transaction's round
  trips (the tests make each such gap last tens of milliseconds);
- `idle_session_timeout` shorter than the listener's check interval: the `LISTEN`
  connection is kept, with no warning and no reconnect.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from golem.store import Decision, Outcome, RunStatus, utc_now
from golem.store.postgres import PostgresStore, _Conn, _SchemaConn
from tests.store.backends import postgres_dsn
from tests.store.chaos import Scene, admin, backends_of, until
from tests.store.runs import approval, external, make_run

pytestmark = pytest.mark.postgres

_GAP = 0.03
"""Seconds a test's transaction stays idle between its round trips (30 × a 1 ms timeout)."""


@contextlib.asynccontextmanager
async def _database(**settings: str) -> AsyncIterator[str]:
    """A database of its own on the test cluster, with `ALTER DATABASE … SET` settings."""
    dsn = postgres_dsn()
    name = f"settings_{uuid.uuid4().hex[:8]}"
    await asyncio.to_thread(admin, dsn, f'CREATE DATABASE "{name}"')
    try:
        for key, value in settings.items():
            await asyncio.to_thread(admin, dsn, f"ALTER DATABASE \"{name}\" SET {key} = '{value}'")
        yield make_conninfo(dsn, dbname=name)
    finally:
        await asyncio.to_thread(admin, dsn, f'DROP DATABASE "{name}" WITH (FORCE)')


@pytest.fixture
def slow_round_trips(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every answer that leaves a transaction open is followed by `_GAP` seconds of this
    process doing nothing (as a loaded machine, or a large result, would), migrations
    included."""
    sync = _Conn._sync
    in_transaction = psycopg.pq.TransactionStatus.INTRANS

    def slow_sync(self: _Conn) -> list[Any]:
        results = sync(self)
        if self.pg.transaction_status == in_transaction:
            time.sleep(_GAP)
        return results

    execute = _SchemaConn.execute

    def slow_execute(self: _SchemaConn, sql: str, params: Any = ()) -> int:
        n = execute(self, sql, params)
        time.sleep(_GAP)
        return n

    monkeypatch.setattr(_Conn, "_sync", slow_sync)
    monkeypatch.setattr(_SchemaConn, "execute", slow_execute)


@pytest.mark.usefixtures("slow_round_trips")
async def test_every_store_operation_survives_a_millisecond_idle_in_transaction_timeout() -> None:
    """With `idle_in_transaction_session_timeout = 1ms` on the database, the server would
    end any transaction idle for a millisecond between its round trips: the migration on
    first connect, every read of more than one statement, every full decision. Each store
    operation runs once, on connections opened under that setting, and succeeds."""
    async with _database(idle_in_transaction_session_timeout="1ms") as dsn:
        store = PostgresStore(dsn, pool_size=2)
        try:
            assert await store.schema_version() > 0
            first = make_run(approval("c1"), approval("c2"), external("c3"))
            await store.save_pending(first)
            assert (await store.get_run(first.id)).status is RunStatus.PENDING
            assert [r.id for r in await store.list_runs()] == [first.id]
            assert [r.id for r in (await store.list_runs_page()).items] == [first.id]
            assert len((await store.list_pending_calls()).items) == 3
            await store.decide(first.id, "c1", Decision.approve({"path": "/y"}), decided_by="b")
            await store.decide(first.id, "c2", Decision.deny("no"), decided_by="b")
            await store.decide(first.id, "c3", Decision.external("42"), decided_by="b")
            claimed = await store.claim_ready("w1", 30)
            assert claimed is not None
            assert claimed.run.id == first.id
            await store.renew_lease(first.id, "w1", 30)
            done = await store.finish(first.id, "w1", Outcome.completed("done"))
            assert done.status is RunStatus.COMPLETED

            second = make_run(approval("c1"))
            await store.save_pending(second)
            await store.decide(second.id, "c1", Decision.approve(), decided_by="b")
            assert [c.run.id for c in await store.claim_ready_many("w2", 1, limit=4)] == [
                second.id
            ]
            soon = utc_now() + timedelta(hours=1)
            assert await store.sweep_interrupted(now=soon) == [second.id]
            await store.retry_interrupted(
                second.id, resolved_by="op", note="again", confirm_calls=["c1"]
            )
            assert len(await store.claim_ready_many("w2", 1, limit=4)) == 1
            assert await store.sweep_interrupted(now=soon + timedelta(hours=1)) == [second.id]
            cancelled = await store.cancel_interrupted(second.id, resolved_by="op", note="n")
            assert cancelled.status is RunStatus.FAILED

            third = make_run(approval("c1", deadline=utc_now() + timedelta(seconds=1)))
            await store.save_pending(third)
            assert await store.sweep_expired(now=soon) == [third.id]
            assert await store.audit(first.id)
            changes = await store.changes_since(0)
            assert changes[-1].id == await store.last_change_id()
        finally:
            await store.close()


@pytest.mark.usefixtures("slow_round_trips")
async def test_workers_under_a_millisecond_idle_in_transaction_timeout_lose_and_repeat_nothing(
    tmp_path: Path,
) -> None:
    """Two workers, a producer and an event stream's listener on a database with
    `idle_in_transaction_session_timeout = 1ms`: every run completes, each approved call
    ran once (the file ledger)."""
    exec_dir = tmp_path / "exec"
    exec_dir.mkdir()
    async with (
        _database(idle_in_transaction_session_timeout="1ms") as dsn,
        Scene(dsn, exec_dir, workers=2) as s,
    ):
        await s.all_done(await s.producer.many(12))
        summary = await s.settle()
    assert summary.statuses == {RunStatus.COMPLETED: 12}, summary


async def test_a_short_idle_session_timeout_does_not_make_the_listener_reconnect(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """`idle_session_timeout = 1s` on the database, the listener's check interval 10 s:
    the server would close the silent `LISTEN` connection every second (a warning and a
    reconnect each time). It is kept: after several seconds of silence it is the same
    backend, nothing was logged, and a change still wakes the feed at once."""
    caplog.set_level(logging.INFO, "golem")
    async with _database(idle_session_timeout="1s") as dsn:
        app = f"golem-listener-{uuid.uuid4().hex[:8]}"
        store = await PostgresStore.open(make_conninfo(dsn, application_name=app))
        try:
            feed = store.change_feed()

            async def listening() -> bool:
                return store._listening is not None

            await until(listening, "the listener to be connected")
            backends = set(await backends_of(dsn, app))
            await asyncio.sleep(3.5)  # three idle_session_timeouts of silence
            assert store._listening is not None
            assert set(await backends_of(dsn, app)) <= backends
            before = feed.last_id
            run = make_run(approval("c1"))
            await store.save_pending(run)

            async def heard() -> bool:
                return feed.last_id > before

            await until(heard, "the listener to hear the change")
        finally:
            await store.close()
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert said == [], said


@pytest.mark.parametrize("isolation", ["serializable", "repeatable read"])
async def test_a_write_that_waited_for_a_concurrent_commit_carries_on_whatever_the_default_isolation(
    isolation: str,
) -> None:
    """`default_transaction_isolation` set on the database: every golem write updates the
    audit sequence's one row, so under REPEATABLE READ or SERIALIZABLE any write that
    waited for another's commit failed with a serialization error (and a worker's claims
    and finishes failed under load). A decision waits behind a transaction holding that
    row; once that commits, the decision is recorded."""
    async with _database(default_transaction_isolation=isolation) as dsn:
        store = await PostgresStore.open(dsn)
        try:
            run = make_run(approval("c1"))
            await store.save_pending(run)
            with psycopg.connect(dsn) as other:
                other.execute("UPDATE golem_audit_seq SET last_id = last_id WHERE singleton = 1")
                deciding = asyncio.create_task(
                    store.decide(run.id, "c1", Decision.approve(), decided_by="bob")
                )

                async def waiting() -> bool:
                    rows = await asyncio.to_thread(
                        admin,
                        dsn,
                        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'",
                    )
                    return bool(rows[0][0])

                await until(waiting, "the decision to wait for the row lock")
                other.commit()
            await asyncio.wait_for(deciding, 60)
            assert (await store.get_run(run.id)).status is RunStatus.READY
        finally:
            await store.close()
