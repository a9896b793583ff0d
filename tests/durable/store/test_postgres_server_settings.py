"""Server settings an operator may put on the database, a third chaos round (ADR 0068)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from golem.durable.store import Decision, Outcome, RunStatus, StoreReadOnly, utc_now
from golem.durable.store.postgres import PostgresStore
from golem.errors import StoreError
from tests.support.durable.backends import postgres_dsn
from tests.support.durable.chaos import Scene, admin, backends_of, terminate_backends, until
from tests.support.durable.runs import approval, external, make_run

pytestmark = pytest.mark.postgres

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


@pytest.mark.usefixtures("slow_round_trips")
async def test_every_store_operation_survives_a_millisecond_idle_in_transaction_timeout() -> None:
    """With `idle_in_transaction_session_timeout = 1ms` on the database, the server would end any
    transaction idle for a millisecond between its round trips: the migration on first connect,
    every read of more than one statement, every full decision."""
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


@pytest.mark.deep
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
    """`idle_session_timeout = 1s` on the database, the listener's check interval 10 s: the server
    would close the silent `LISTEN` connection every second (a warning and a reconnect each
    time)."""
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
    """`default_transaction_isolation` set on the database: every golem write updates the audit
    sequence's one row, so under REPEATABLE READ or SERIALIZABLE any write that waited for
    another's commit failed with a serialization error (and a worker's claims and finishes
    failed under load)."""
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


async def test_a_read_only_database_serves_reads_and_refuses_writes_with_store_read_only() -> None:
    """`default_transaction_read_only = on` set on the database (an operator freezing it, or a DSN
    that reached a hot standby): a store opened then still reads (opening it wrote nothing and
    took no lock — before, its migration check wrote, so every call failed), every write raises
    `StoreReadOnly` and changes nothing, and once the setting is lifted the same calls succeed."""
    async with _database() as dsn:
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


@pytest.mark.deep
async def test_workers_across_a_read_only_spell_lose_and_repeat_nothing(tmp_path: Path) -> None:
    """The database turns read-only while two workers run and one approved call is inside its tool
    (every connection is cut, so each reconnects read-only): starts fail with `StoreReadOnly`,
    the workers keep polling without a crash or a hang, the held run's outcome waits (its lease
    holds) and is saved once writes are back; every run completes, each call ran once."""
    exec_dir = tmp_path / "exec"
    exec_dir.mkdir()
    app = f"golem-ro-{uuid.uuid4().hex[:8]}"
    async with _database() as dsn:
        name = conninfo_to_dict(dsn)["dbname"]
        mine = make_conninfo(dsn, application_name=app)
        async with Scene(dsn, exec_dir, worker_dsn=mine, producer_dsn=mine, workers=2) as s:
            await s.all_done(await s.producer.many(3))
            (held,) = await s.producer.many(1, hold=True)

            async def in_tool() -> bool:
                return s.hold.entered == 1

            await until(in_tool, "the resume to be inside its tool")
            await asyncio.to_thread(
                admin, postgres_dsn(), f'ALTER DATABASE "{name}" SET default_transaction_read_only = on'
            )
            await terminate_backends(dsn, app)
            for _ in range(3):  # a pooled connection killed just now may fail first
                try:
                    await s.producer.one_started()
                except StoreReadOnly:
                    break
                except StoreError as exc:
                    if type(exc) is not StoreError:  # only a connection cut just now
                        raise
            else:
                raise AssertionError("a start succeeded on a read-only database")
            s.hold.release()
            await asyncio.sleep(0.5)  # the outcome's save is refused meanwhile
            assert await s.status(held) is RunStatus.RUNNING
            await asyncio.to_thread(
                admin, postgres_dsn(), f'ALTER DATABASE "{name}" RESET default_transaction_read_only'
            )
            await terminate_backends(dsn, app)
            await s.all_done([held])
            await s.all_done(await s.producer.many(3))
            summary = await s.settle()
    assert summary.statuses == {RunStatus.COMPLETED: 7}, summary


@pytest.mark.deep
@pytest.mark.timeout(300)
@pytest.mark.parametrize("setting", ["lock_timeout", "statement_timeout"])
async def test_millisecond_lock_and_statement_timeouts_set_mid_flight_lose_and_repeat_nothing(
    tmp_path: Path, setting: str
) -> None:
    """An operator sets `lock_timeout` or `statement_timeout` to 1 ms on the database
    while three workers and four producers run, and every connection is cut so each
    reconnects under it: calls the server cancels fail with a `StoreError` naming the
    timeout (their transactions rolled back), nothing hangs; once the setting is lifted
    every saved run completes, each approved call ran once (held: no change needed)."""
    exec_dir = tmp_path / "exec"
    exec_dir.mkdir()
    app = f"golem-ms-{uuid.uuid4().hex[:8]}"
    cluster = postgres_dsn()
    async with _database() as dsn:
        name = conninfo_to_dict(dsn)["dbname"]
        mine = make_conninfo(dsn, application_name=app)
        async with Scene(dsn, exec_dir, worker_dsn=mine, producer_dsn=mine, workers=3) as s:
            await asyncio.to_thread(
                admin, cluster, f"ALTER DATABASE \"{name}\" SET {setting} = '1ms'"
            )
            await terminate_backends(cluster, app)
            await asyncio.wait_for(asyncio.gather(*(s.producer.many(5) for _ in range(4))), 120)
            await asyncio.to_thread(admin, cluster, f'ALTER DATABASE "{name}" RESET {setting}')
            await terminate_backends(cluster, app)
            summary = await s.settle()
    assert set(summary.statuses) == {RunStatus.COMPLETED}, summary
    assert sum(summary.statuses.values()) + s.producer.unknown_starts == 20


@pytest.mark.timeout(300)
async def test_a_millisecond_idle_session_timeout_fails_no_call(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`idle_session_timeout = 1ms` on the database: the server closes a connection idle for a
    millisecond — between connecting and its first query, between two statements of the
    migration check, in the pool between two transactions."""
    caplog.set_level(logging.INFO, "golem")
    exec_dir = tmp_path / "exec"
    exec_dir.mkdir()
    async with _database(idle_session_timeout="1ms") as dsn:
        name = conninfo_to_dict(dsn)["dbname"]
        async with Scene(dsn, exec_dir, workers=3) as s:
            await asyncio.gather(*(s.producer.many(5) for _ in range(4)))
            summary = await s.settle()
            # the scene's own cleanup connects without golem's floor
            await asyncio.to_thread(
                admin, postgres_dsn(), f'ALTER DATABASE "{name}" RESET idle_session_timeout'
            )
    assert summary.statuses == {RunStatus.COMPLETED: 20}, summary
    assert s.producer.unknown_starts == 0
    progress = ("claimed run", "resuming run", "completed")
    said = [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.INFO and not any(p in r.getMessage() for p in progress)
    ]
    assert not [m for m in said if "stopping" not in m], said


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
    async with _database(idle_session_timeout="1ms") as dsn:
        store = PostgresStore(dsn)
        try:
            assert await store.schema_version() > 0
            assert cut, "the first connection was cut"
            assert store._short_idle_session
        finally:
            await store.close()
