"""Server settings an operator may put on the database or in the DSN, and a table another session
holds locked: one store at a time (ADR 0068; `test_postgres_chaos.py` runs workers under them)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from golem.durable.store import AuditAction, Decision, Outcome, RunStatus, StoreReadOnly, utc_now
from golem.durable.store.postgres import PostgresStore
from golem.durable.worker import start_run
from golem.errors import StoreError
from tests.support.durable.backends import postgres_dsn
from tests.support.durable.chaos import (
    admin,
    backends_of,
    chaos_registry,
    database,
    locks_waiting,
    until,
)
from tests.support.durable.runs import approval, external, make_run

pytestmark = pytest.mark.postgres


async def test_every_store_operation_survives_a_millisecond_idle_in_transaction_timeout(
    slow_round_trips: Callable[[str], str],
) -> None:
    """With `idle_in_transaction_session_timeout = 1ms` on the database, the server would end any
    transaction idle for a millisecond between its round trips: the migration on first connect,
    every read of more than one statement, every full decision."""
    async with database(postgres_dsn(), idle_in_transaction_session_timeout="1ms") as dsn:
        store = PostgresStore(slow_round_trips(dsn), pool_size=2)
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
            assert [c.run.id for c in await store.claim_ready_many("w2", 1, limit=4)] == [second.id]
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


async def test_a_short_idle_session_timeout_does_not_make_the_listener_reconnect(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """`idle_session_timeout = 1s` on the database, the listener's check interval 10 s: the server
    would close the silent `LISTEN` connection every second (a warning and a reconnect each
    time)."""
    caplog.set_level(logging.INFO, "golem")
    async with database(postgres_dsn(), idle_session_timeout="1s") as dsn:
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
    """`default_transaction_isolation` set on the database: every golem write updates the audit
    sequence's one row, so under REPEATABLE READ or SERIALIZABLE any write that waited for
    another's commit failed with a serialization error (and a worker's claims and finishes
    failed under load)."""
    async with database(postgres_dsn(), default_transaction_isolation=isolation) as dsn:
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


async def test_a_read_only_database_serves_reads_and_refuses_writes_with_store_read_only() -> None:
    """`default_transaction_read_only = on` set on the database (an operator freezing it, or a DSN
    that reached a hot standby): a store opened then still reads (opening it wrote nothing and
    took no lock — before, its migration check wrote, so every call failed), every write raises
    `StoreReadOnly` and changes nothing, and once the setting is lifted the same calls succeed."""
    async with database(postgres_dsn()) as dsn:
        async with await PostgresStore.open(dsn) as writer:
            run = make_run(approval("c1"))
            await writer.save_pending(run)
        name = conninfo_to_dict(dsn)["dbname"]
        await asyncio.to_thread(
            admin, postgres_dsn(), f'ALTER DATABASE "{name}" SET default_transaction_read_only = on'
        )
        async with await PostgresStore.open(dsn) as frozen:
            assert (await frozen.get_run(run.id)).status is RunStatus.PENDING
            assert [r.id for r in await frozen.list_runs()] == [run.id]
            assert len((await frozen.list_pending_calls()).items) == 1
            entries = await frozen.changes_since(0)
            writes = [
                frozen.save_pending(make_run(approval("c1"))),
                frozen.decide(run.id, "c1", Decision.approve(), decided_by="bob"),
                frozen.decide(run.id, "c1", Decision.approve({"path": "/z"}), decided_by="bob"),
                frozen.claim_ready("w1", 30),
                frozen.sweep_interrupted(),
            ]
            for write in writes:
                with pytest.raises(StoreReadOnly, match="read-only"):
                    await write
            assert await frozen.changes_since(0) == entries, "nothing written"
        await asyncio.to_thread(
            admin, postgres_dsn(), f'ALTER DATABASE "{name}" RESET default_transaction_read_only'
        )
        async with await PostgresStore.open(dsn) as thawed:
            await thawed.decide(run.id, "c1", Decision.approve(), decided_by="bob")
            assert (await thawed.get_run(run.id)).status is RunStatus.READY


async def test_a_connection_limit_below_the_pool_size_makes_calls_wait_not_fail() -> None:
    """The application's role may open two connections (`CONNECTION LIMIT 2`, as a
    `max_connections` mostly taken by other clients would allow) and the store's pool is four:
    eight calls at once open two connections and share them."""
    dsn = postgres_dsn()
    role = f"limited_{uuid.uuid4().hex[:8]}"
    schema = f"limited_{uuid.uuid4().hex[:8]}"
    dbname = conninfo_to_dict(dsn)["dbname"]
    await asyncio.to_thread(admin, dsn, f"CREATE ROLE {role} LOGIN CONNECTION LIMIT 2")
    await asyncio.to_thread(admin, dsn, f'GRANT CREATE ON DATABASE "{dbname}" TO {role}')
    mine = make_conninfo(dsn, user=role)
    try:
        async with await PostgresStore.open(mine, schema=schema, pool_size=4) as store:
            run = make_run(approval("c1"))
            await store.save_pending(run)
            reads = await asyncio.gather(*(store.get_run(run.id) for _ in range(8)))
            assert {r.id for r in reads} == {run.id}
            assert store._opened <= 2
            await store.decide(run.id, "c1", Decision.approve(), decided_by="bob")
    finally:
        await asyncio.to_thread(admin, dsn, f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await asyncio.to_thread(admin, dsn, f'REVOKE CREATE ON DATABASE "{dbname}" FROM {role}')
        await asyncio.to_thread(admin, dsn, f"DROP ROLE {role}")


async def test_a_first_connection_lost_before_its_first_answer_is_opened_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under a millisecond `idle_session_timeout` the server can close a new connection before its
    first query arrives, and the reset that answers the query can take the server's message with
    it: the store then sees a connection lost for no stated reason, before any connection told
    it the server's settings."""
    real = PostgresStore._read_server_clock
    cut: list[int] = []

    def cut_once(self: PostgresStore, conn: Any, listener: bool = False) -> None:
        if not cut:
            cut.append(conn.info.backend_pid)
            with contextlib.closing(socket.socket(fileno=os.dup(conn.pgconn.socket))) as s:
                s.shutdown(socket.SHUT_RDWR)
        real(self, conn, listener)

    monkeypatch.setattr(PostgresStore, "_read_server_clock", cut_once)
    async with database(postgres_dsn(), idle_session_timeout="1ms") as dsn:
        store = PostgresStore(dsn)
        try:
            assert await store.schema_version() > 0
            assert cut, "the first connection was cut"
            assert store._short_idle_session
        finally:
            await store.close()


# ---------------------------------------------------------------------- a locked table


async def _backends(dsn: str, app: str) -> list[tuple[int, str]]:
    """The pid and state of every connection named `app`."""
    sql = (
        "SELECT pid, state FROM pg_stat_activity "
        "WHERE application_name = %s AND backend_type = 'client backend' ORDER BY pid"
    )
    return [(pid, state) for pid, state in await asyncio.to_thread(admin, dsn, sql, app)]


@contextlib.asynccontextmanager
async def _locked(dsn: str, schema: str) -> AsyncIterator[None]:
    """Another session holds `LOCK TABLE golem_runs IN ACCESS EXCLUSIVE MODE` until the end."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as locker:
        await locker.execute("BEGIN")
        await locker.execute(f'LOCK TABLE "{schema}".golem_runs IN ACCESS EXCLUSIVE MODE')
        try:
            yield
        finally:
            await locker.execute("ROLLBACK")


@contextlib.asynccontextmanager
async def _stores(exec_dir: Path, **options: str) -> AsyncIterator[tuple[Any, ...]]:
    """A store, a second one on the same schema whose connections are named (and carry DSN
    `options`), the name, and a pending run of "acts"."""
    dsn, app, schema = postgres_dsn(), f"golem-{uuid.uuid4().hex[:8]}", f"t_{uuid.uuid4().hex[:8]}"
    store = await PostgresStore.open(dsn, schema=schema)  # migrations run without the options
    named = await PostgresStore.open(
        make_conninfo(dsn, application_name=app, **options), schema=schema, pool_size=2
    )
    try:
        run = await start_run(store, chaos_registry(exec_dir), "acts", "calls:p1:1", started_by="a")
        yield store, named, app, run
    finally:
        await named.close()
        await store.close()
        await asyncio.to_thread(admin, dsn, f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


async def test_calls_wait_on_a_locked_table_and_a_cancelled_wait_leaves_the_pool_clean(
    exec_dir: Path,
) -> None:
    """While another session holds an exclusive lock on the runs table, store calls wait.
    Cancelled callers are let go at once; their transactions finish once the lock is gone
    (a cancelled decision is recorded, as documented), and the pool is left clean."""
    dsn = postgres_dsn()
    async with _stores(exec_dir) as (store, named, app, run):
        async with _locked(dsn, named.schema):
            read = asyncio.create_task(named.get_run(run.id))
            decide = asyncio.create_task(
                named.decide(run.id, "p1-0", Decision.approve(), decided_by="bob")
            )
            await until(lambda: _two(locks_waiting(dsn, app)), "both calls to wait on the lock")
            for t in (read, decide):
                t.cancel()
            done, _ = await asyncio.wait([read, decide], timeout=60)
            assert {t.cancelled() for t in done} == {True}, "cancelled callers are let go"
            late = asyncio.create_task(named.get_run(run.id))  # no free connection: waits
        await asyncio.wait_for(late, 60)

        async def decided() -> bool:
            return (await store.get_run(run.id)).status is RunStatus.READY

        await until(decided, "the cancelled caller's decision to be committed")
        clean = lambda: _all_idle(_backends(dsn, app))  # noqa: E731
        await until(clean, "the store's connections to be idle")
        assert len(await _backends(dsn, app)) <= 2, "no more connections than the pool's size"
        actions = [e.action for e in await store.audit(run.id)]
        assert actions == [AuditAction.CREATED, AuditAction.DECIDED, AuditAction.READY]


async def _two(count: Any) -> bool:
    return bool(await count == 2)


async def _all_idle(backends: Any) -> bool:
    return all(state == "idle" for _, state in await backends)


@pytest.mark.parametrize("setting", ["statement_timeout", "lock_timeout"])
async def test_a_timeout_in_the_dsn_fails_a_locked_call_and_keeps_its_connection(
    exec_dir: Path, setting: str
) -> None:
    """`options=-c statement_timeout=…` (or `lock_timeout`) in the DSN holds with `schema=` too: a
    call stuck behind a locked table fails with a `StoreError` naming the timeout and writes
    nothing; the server refused one statement, so the same connection (same backend, idle)
    serves the next call instead of a reconnect per timeout."""
    dsn = postgres_dsn()
    async with _stores(exec_dir, options=f"-c {setting}=300") as (store, named, app, run):
        await named.get_run(run.id)
        (before,) = await _backends(dsn, app)
        async with _locked(dsn, named.schema):
            with pytest.raises(StoreError, match="timeout") as info:
                approve = named.decide(run.id, "p1-0", Decision.approve(), decided_by="bob")
                await asyncio.wait_for(approve, 60)
            assert type(info.value) is StoreError
            assert setting.replace("_", " ") in str(info.value)
        assert await _backends(dsn, app) == [before], "kept, idle"
        assert (await store.get_run(run.id)).status is RunStatus.PENDING, "nothing written"
        assert [e.action for e in await store.audit(run.id)] == [AuditAction.CREATED]
        await named.decide(run.id, "p1-0", Decision.approve(), decided_by="bob")
        assert (await named.get_run(run.id)).status is RunStatus.READY
        assert await _backends(dsn, app) == [before]


async def test_closing_waits_for_a_connection_still_being_opened() -> None:
    """A caller cancelled while its connection was being opened (the database slow to
    accept, as after a restart), then the store closed: `close` returns only once that
    connection is open and closed again — none is left to the garbage collector, which
    would find it open after the event loop is gone."""
    dsn = postgres_dsn()
    schema = f"t_{uuid.uuid4().hex[:8]}"
    store = PostgresStore(dsn, schema=schema)
    entered, release = threading.Event(), threading.Event()
    opened: list[Any] = []
    real_connect = store._connect

    def slow_connect() -> Any:
        entered.set()
        release.wait(60)
        c = real_connect()
        opened.append(c)
        return c

    store._connect = slow_connect  # type: ignore[method-assign]
    try:
        call = asyncio.create_task(store.get_run("nope"))
        assert await asyncio.to_thread(entered.wait, 60)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        closing = asyncio.create_task(store.close())
        await asyncio.sleep(0)
        release.set()
        await asyncio.wait_for(closing, 60)
        assert [c.conn.closed for c in opened] == [True]
        assert store._opened == 0
    finally:
        release.set()
        await store.close()
        await asyncio.to_thread(admin, dsn, f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
