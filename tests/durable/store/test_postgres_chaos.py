"""Chaos on PostgreSQL: the server restarts, connections die mid-transaction (a COMMIT whose answer
is lost among them), a table stays locked — and golem's durable path holds."""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import pq
from psycopg.conninfo import make_conninfo

from golem.durable.store import AuditAction, Decision, RunRecord, RunStatus
from golem.durable.store.postgres import PostgresStore
from golem.durable.worker import start_run
from golem.errors import StoreError
from tests.support.durable.backends import postgres_dsn
from tests.support.durable.chaos import (
    Cluster,
    FaultProxy,
    Producer,
    Scene,
    admin,
    chaos_registry,
    disrupting,
    new_schema,
    terminate_backends,
    until,
)
from tests.support.durable.worker_app import prompt_for

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """A PostgreSQL cluster of this module's own: its tests restart and stop the server."""
    c = Cluster.start()
    try:
        yield c
    finally:
        c.remove()


async def _listening(dsn: str, store: PostgresStore) -> bool:
    """Whether the store's change feed listens on a connection the server knows."""
    c = store._listening
    if c is None:
        return False
    rows = await asyncio.to_thread(
        admin, dsn, "SELECT 1 FROM pg_stat_activity WHERE pid = %s", c.pg.backend_pid
    )
    return bool(rows)


# ---------------------------------------------------------------------- 1. server restarts


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "how",
    [
        "immediate",
        pytest.param("fast", marks=pytest.mark.deep),
        pytest.param("down", marks=pytest.mark.deep),
    ],
)
async def test_a_server_restart_mid_flight_loses_nothing_and_runs_nothing_twice(
    cluster: Cluster, tmp_path: Path, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The server restarts (`-m immediate`, `-m fast`, or stays down while connections are
    refused) while four resumes wait inside their approved tool, more runs are being
    started and approved, and an event stream listens. The worker is never restarted."""
    caplog.set_level(logging.WARNING, "golem")
    exec_dir = tmp_path / "exec"
    exec_dir.mkdir()
    async with Scene(cluster.dsn, exec_dir) as s:
        held = await s.producer.many(4, hold=True)

        async def held_in_tool() -> bool:
            return s.hold.entered == 4

        await until(held_in_tool, "four resumes to be inside their tool")
        await s.all_done(await s.producer.many(4))

        busy = asyncio.create_task(s.producer.many(30))
        try:

            async def producing() -> bool:
                return len(s.producer.approved) >= 12 or busy.done()

            await until(producing, "the producer to be under way")
            if how == "down":
                await asyncio.to_thread(cluster.down, "immediate")
                try:
                    with pytest.raises(StoreError, match="cannot connect to PostgreSQL"):
                        await s.producer_store.get_run(held[0])

                    async def worker_noticed() -> bool:
                        return any("claiming failed" in r.getMessage() for r in caplog.records)

                    await until(worker_noticed, "the worker to find the database gone")
                finally:
                    await asyncio.to_thread(cluster.up)
            else:
                await asyncio.to_thread(cluster.restart, how)
        finally:
            await busy
        s.hold.release()  # the held resumes finish on the restarted server
        await s.all_done(held)

        # the worker, never restarted, resumes runs approved after the restart
        await s.all_done(await s.producer.many(5))
        assert not s.task.done()

        # the event stream's LISTEN connection is back: changes are pushed again (its
        # safety-net poll runs hourly)
        await until(lambda: _listening(cluster.dsn, s.store), "LISTEN again")
        for _ in range(2):
            mark = s.feed.last_id
            await s.producer.one()
            assert await s.feed.wait_for_change(mark, 60) > mark

        summary = await s.settle()
    assert summary.statuses[RunStatus.COMPLETED] >= 4 + 4 + 5 + 2
    assert summary.interrupted_unexecuted == [], "a claimed run was never resumed"


@pytest.mark.timeout(300)
async def test_an_outage_longer_than_the_lease_ends_interrupted_with_the_call_run_once(
    cluster: Cluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The server goes down while a resume is inside its approved tool, and stays down
    until the worker gave up saving the outcome (its lease ran out): once the server is
    back, the sweep marks the run interrupted — the call ran once, and is not run again."""
    caplog.set_level(logging.WARNING, "golem")
    exec_dir = tmp_path / "exec"
    exec_dir.mkdir()
    async with Scene(cluster.dsn, exec_dir, lease_seconds=3) as s:
        (held,) = await s.producer.many(1, hold=True)

        async def in_tool() -> bool:
            return s.hold.entered == 1

        await until(in_tool, "the resume to be inside its tool")
        await asyncio.to_thread(cluster.down, "immediate")
        try:
            s.hold.release()

            async def gave_up() -> bool:  # (on a machine so loaded that a heartbeat came
                # too late, the worker abandons the run instead: the same end)
                said = [r.getMessage() for r in caplog.records]
                return any("until the lease ran out" in m or "abandoned" in m for m in said)

            await until(gave_up, "the worker to give up saving the outcome")
        finally:
            await asyncio.to_thread(cluster.up)
        summary = await s.settle()
        run = await s.store.get_run(held)
    assert summary.statuses == {RunStatus.INTERRUPTED: 1}
    assert summary.interrupted_unexecuted == [], "its call did run, once"
    assert run.outcome is not None
    assert 'worker "survivor" lost its lease' in run.outcome.error


# ---------------------------------------------------------------------- 2. lost commits


@pytest.fixture
def proxy() -> Iterator[FaultProxy]:
    p = FaultProxy(postgres_dsn())
    try:
        yield p
    finally:
        p.close()


async def _fired(cut: Any) -> None:
    assert await asyncio.to_thread(cut.fired.wait, 60), "the armed cut never fired"


@pytest.mark.parametrize("lose", ["commit", "answer"])
async def test_a_finish_whose_commit_answer_is_lost_is_resolved_not_repeated(
    exec_dir: Path, proxy: FaultProxy, lose: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The connection dies right after the worker sent the COMMIT of a run's outcome —
    before the server got it, or after it committed but before the worker heard: the
    worker retries, finds out which, and the run completes with its call run once."""
    caplog.set_level(logging.INFO, "golem")
    async with Scene(postgres_dsn(), exec_dir, worker_dsn=proxy.dsn) as s:
        cut = proxy.cut(b"acted on p1-0", lose)
        (run_id,) = await s.producer.many(1)
        await _fired(cut)
        assert cut.committed is (True if lose == "answer" else None)
        await s.all_done([run_id])
        summary = await s.settle()
    assert summary.statuses == {RunStatus.COMPLETED: 1}
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "saving the outcome failed" in text
    assert "lease lost" not in text
    assert f"run {run_id} completed" in text


@pytest.mark.parametrize("lose", ["commit", "answer"])
async def test_a_claim_whose_commit_answer_is_lost_is_still_resumed(
    exec_dir: Path, proxy: FaultProxy, lose: str
) -> None:
    """The connection dies right after the worker sent the COMMIT of a claim: whether the
    claim committed or not, the run is resumed (once), not left to run out its lease."""
    async with Scene(postgres_dsn(), exec_dir, worker_dsn=proxy.dsn, start=False) as s:
        (run_id,) = await s.producer.many(1)
        cut = proxy.cut(b"claimed", lose)
        s.start()
        await _fired(cut)
        assert cut.committed is (True if lose == "answer" else None)
        await s.all_done([run_id])
        summary = await s.settle()
    assert summary.statuses == {RunStatus.COMPLETED: 1}


@pytest.mark.parametrize("lose", ["commit", "answer"])
async def test_a_decision_whose_commit_answer_is_lost_can_be_sent_again(
    exec_dir: Path, proxy: FaultProxy, lose: str
) -> None:
    """An approver's decision is cut after its COMMIT: the approver gets a `StoreError`
    (not a success it cannot trust), and deciding again the same way is recorded once."""
    async with Scene(postgres_dsn(), exec_dir, producer_dsn=proxy.dsn) as s:
        run = await s.producer.one_started()
        cut = proxy.cut(run.id.encode(), lose)
        with pytest.raises(StoreError) as info:
            await s.producer_store.decide(run.id, "p1-0", Decision.approve(), decided_by="bob")
        assert type(info.value) is StoreError
        await _fired(cut)
        again = await s.producer_store.decide(run.id, "p1-0", Decision.approve(), decided_by="bob")
        assert again.decided_by == "bob"
        s.producer.approved[run.id] = "p1-0"
        await s.all_done([run.id])
        summary = await s.settle()
    assert summary.statuses == {RunStatus.COMPLETED: 1}


@pytest.mark.parametrize("lose", ["commit", "answer"])
async def test_a_start_whose_commit_answer_is_lost_raises_and_the_run_is_found_or_absent(
    exec_dir: Path, proxy: FaultProxy, lose: str
) -> None:
    """Saving a new run is cut after its COMMIT: `start_run` raises `StoreError`; the run
    exists exactly when the server committed, pending and resumable once approved."""
    async with Scene(postgres_dsn(), exec_dir, producer_dsn=proxy.dsn) as s:
        cut = proxy.cut(b"calls:p1:1", lose)
        assert await s.producer.one() is None
        await _fired(cut)
        assert s.producer.unknown_starts == 1
        strays = await s.producer.approve_strays()
        assert len(strays) == (1 if lose == "answer" else 0)
        await s.all_done(strays)
        summary = await s.settle()
    assert summary.statuses == ({RunStatus.COMPLETED: 1} if strays else {})


@pytest.mark.parametrize("lose", ["commit", "answer"])
async def test_a_start_retried_with_its_run_id_after_a_lost_answer_saves_one_run(
    exec_dir: Path, proxy: FaultProxy, lose: str
) -> None:
    """`start_run(run_id=...)`: the save is cut after its COMMIT (dropped, or committed with
    its answer lost); the caller sends the same start again and gets the one run, which
    completes once approved (ADR 0058)."""
    async with Scene(postgres_dsn(), exec_dir, producer_dsn=proxy.dsn) as s:
        p = s.producer

        async def start() -> RunRecord:
            return await start_run(
                p.store, p.registry, "acts", prompt_for("k1", 1), started_by="producer",
                run_id="start-k1",
            )  # fmt: skip

        cut = proxy.cut(b"calls:k1:1", lose)
        with pytest.raises(StoreError):
            await start()
        await _fired(cut)
        run = await start()
        assert run.id == "start-k1"
        assert run.status is RunStatus.PENDING
        assert [r.id for r in await p.store.list_runs(limit=10)] == ["start-k1"]
        assert [e.action for e in await p.store.audit(run.id)] == [AuditAction.CREATED]
        await p.store.decide(run.id, "k1-0", Decision.approve(), decided_by="bob")
        p.approved[run.id] = "k1-0"
        await s.all_done([run.id])
        summary = await s.settle()
    assert summary.statuses == {RunStatus.COMPLETED: 1}


async def test_a_read_whose_connection_dies_after_its_commit_was_sent_is_retried(
    exec_dir: Path, proxy: FaultProxy, caplog: pytest.LogCaptureFixture
) -> None:
    """A read-only transaction cut as its COMMIT goes out (`idle_in_transaction_session_timeout`
    killing a backend between a read's round trips ends the same way) commits nothing:
    it is repeated on a fresh connection instead of failing the caller, as a write is
    only before its COMMIT went out."""
    caplog.set_level(logging.INFO, "golem")
    async with Scene(postgres_dsn(), exec_dir, producer_dsn=proxy.dsn, start=False) as s:
        run = await s.producer.one_started()
        cut = proxy.cut(run.id.encode(), "commit")
        again = await s.producer_store.get_run(run.id)
        await _fired(cut)
        assert again.id == run.id
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "connection lost during a read; retrying" in text


@pytest.mark.parametrize("seed", [45, pytest.param(4545, marks=pytest.mark.deep)])
async def test_connections_killed_at_random_mid_transaction_lose_and_repeat_nothing(
    exec_dir: Path, seed: int
) -> None:
    """Every store connection (the worker's pool, its LISTEN connection, the producer's pool) is
    killed with `pg_terminate_backend` again and again at random moments, most of them while a
    transaction is in flight, as runs are started, approved, claimed and finished."""
    dsn = postgres_dsn()
    app = f"golem-chaos-{uuid.uuid4().hex[:8]}"
    victim = make_conninfo(dsn, application_name=app)
    rng = random.Random(seed)
    kills = Counter[str]()
    async with Scene(dsn, exec_dir, worker_dsn=victim, producer_dsn=victim) as s:

        async def kill() -> None:
            busy = rng.random() < 0.8
            kills["in flight" if busy else "any"] += await terminate_backends(dsn, app, busy=busy)

        await disrupting(s.producer.many(50), kill, pause=lambda: rng.uniform(0, 0.02))
        summary = await s.settle()
    assert kills["in flight"] > 0, kills
    assert set(summary.statuses) == {RunStatus.COMPLETED}, summary


# ---------------------------------------------------------------------- 3. a locked table


async def _waiting_on_locks(dsn: str, app: str) -> int:
    rows = await asyncio.to_thread(
        admin,
        dsn,
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE application_name = %s AND wait_event_type = 'Lock'",
        app,
    )
    return int(rows[0][0])


async def _pool_is_clean(store: PostgresStore, dsn: str, app: str) -> None:
    """Every connection of the store is idle, none left inside a transaction."""

    async def clean() -> bool:
        rows = await asyncio.to_thread(
            admin,
            dsn,
            "SELECT state FROM pg_stat_activity WHERE application_name = %s "
            "AND backend_type = 'client backend'",
            app,
        )
        return all(state == "idle" for (state,) in rows)

    await until(clean, "the store's connections to be idle")
    idle = store._idle  # the pool's own view must agree
    assert all(c.pg.transaction_status == pq.TransactionStatus.IDLE for c in idle)
    assert store._opened <= store.pool_size


@asynccontextmanager
async def _locked(dsn: str, schema: str, table: str = "golem_runs") -> AsyncIterator[None]:
    """Another session holds `LOCK TABLE ... IN ACCESS EXCLUSIVE MODE` until the block ends."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as admin:
        await admin.execute("BEGIN")
        await admin.execute(f'LOCK TABLE "{schema}".{table} IN ACCESS EXCLUSIVE MODE')
        try:
            yield
        finally:
            await admin.execute("ROLLBACK")


async def test_calls_wait_on_a_locked_table_and_a_cancelled_wait_leaves_the_pool_clean(
    exec_dir: Path,
) -> None:
    """While another session holds an exclusive lock on the runs table, store calls wait.
    Cancelled callers are let go at once; their transactions finish once the lock is gone
    (a cancelled decision is recorded, as documented), and the pool is left clean."""
    dsn = postgres_dsn()
    app = f"golem-chaos-{uuid.uuid4().hex[:8]}"
    schema = new_schema()
    store = await PostgresStore.open(
        make_conninfo(dsn, application_name=app), schema=schema, pool_size=2
    )
    try:
        producer = Producer(store, chaos_registry(exec_dir), exec_dir)
        run = await producer.one_started()
        async with _locked(dsn, schema):
            read = asyncio.create_task(store.get_run(run.id))
            decide = asyncio.create_task(
                store.decide(run.id, "p1-0", Decision.approve(), decided_by="bob")
            )

            async def both_wait() -> bool:
                return await _waiting_on_locks(dsn, app) == 2

            await until(both_wait, "both calls to wait on the lock")
            for t in (read, decide):
                t.cancel()
            done, _ = await asyncio.wait([read, decide], timeout=60)
            assert {t.cancelled() for t in done} == {True}, "cancelled callers are let go"
            late = asyncio.create_task(store.get_run(run.id))  # no free connection: waits
        await asyncio.wait_for(late, 60)

        async def decided() -> bool:
            return (await store.get_run(run.id)).status is RunStatus.READY

        await until(decided, "the cancelled caller's decision to be committed")
        await _pool_is_clean(store, dsn, app)
        actions = [e.action for e in await store.audit(run.id)]
        assert actions == [AuditAction.CREATED, AuditAction.DECIDED, AuditAction.READY]
    finally:
        await store.close()
        await asyncio.to_thread(admin, dsn, f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.mark.parametrize("setting", ["statement_timeout", "lock_timeout"])
async def test_a_timeout_set_in_the_dsn_fails_a_locked_call_with_a_store_error(
    exec_dir: Path, setting: str
) -> None:
    """`options=-c statement_timeout=…` (or `lock_timeout`) in the DSN holds with `schema=`
    too: a call stuck behind a locked table fails with `StoreError` naming the timeout,
    writes nothing, and the same call succeeds once the lock is gone."""
    dsn = postgres_dsn()
    app = f"golem-chaos-{uuid.uuid4().hex[:8]}"
    schema = new_schema()
    store = await PostgresStore.open(dsn, schema=schema)  # migrations run without the timeout
    timed = await PostgresStore.open(
        make_conninfo(dsn, application_name=app, options=f"-c {setting}=500"), schema=schema
    )
    try:
        producer = Producer(store, chaos_registry(exec_dir), exec_dir)
        run = await producer.one_started()
        async with _locked(dsn, schema):
            with pytest.raises(StoreError, match="timeout") as info:
                await asyncio.wait_for(
                    timed.decide(run.id, "p1-0", Decision.approve(), decided_by="bob"), 60
                )
            assert type(info.value) is StoreError
            assert setting.replace("_", " ") in str(info.value)
        assert (await store.get_run(run.id)).status is RunStatus.PENDING, "nothing written"
        assert [e.action for e in await store.audit(run.id)] == [AuditAction.CREATED]
        await store.decide(run.id, "p1-0", Decision.approve(), decided_by="bob")
        assert (await store.get_run(run.id)).status is RunStatus.READY
        await _pool_is_clean(timed, dsn, app)
    finally:
        await timed.close()
        await store.close()
        await asyncio.to_thread(admin, dsn, f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.mark.parametrize("setting", ["statement_timeout", "lock_timeout"])
async def test_a_timed_out_call_keeps_its_healthy_connection(exec_dir: Path, setting: str) -> None:
    """A timeout is the server refusing one statement, not a broken connection: the
    transaction is rolled back and the same connection (same backend) serves the next
    call, instead of a reconnect per timeout while the database is already struggling."""
    dsn = postgres_dsn()
    schema = new_schema()
    store = await PostgresStore.open(dsn, schema=schema)
    timed = await PostgresStore.open(
        make_conninfo(dsn, options=f"-c {setting}=300"), schema=schema, pool_size=1
    )
    try:
        run = await Producer(store, chaos_registry(exec_dir), exec_dir).one_started()
        (before,) = timed._idle
        backend = before.conn.info.backend_pid
        async with _locked(dsn, schema):
            with pytest.raises(StoreError, match="timeout"):
                await asyncio.wait_for(
                    timed.decide(run.id, "p1-0", Decision.approve(), decided_by="bob"), 60
                )
        assert [c.conn.info.backend_pid for c in timed._idle] == [backend], "kept, idle"
        assert before.pg.transaction_status == pq.TransactionStatus.IDLE
        await timed.decide(run.id, "p1-0", Decision.approve(), decided_by="bob")
        assert (await timed.get_run(run.id)).status is RunStatus.READY
        assert [c.conn.info.backend_pid for c in timed._idle] == [backend]
    finally:
        await timed.close()
        await store.close()
        await asyncio.to_thread(admin, dsn, f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


async def test_the_worker_waits_out_a_locked_table_and_carries_on(exec_dir: Path) -> None:
    """Runs are being started, approved and resumed when the runs table gets locked: every
    call waits; once the lock is released everything completes, each call run once."""
    dsn = postgres_dsn()
    app = f"golem-chaos-{uuid.uuid4().hex[:8]}"
    victim = make_conninfo(dsn, application_name=app)
    async with Scene(dsn, exec_dir, worker_dsn=victim, producer_dsn=victim) as s:
        first = await s.producer.many(3)
        await s.all_done(first)
        async with _locked(dsn, s.schema):
            busy = asyncio.create_task(s.producer.many(10))

            async def stalled() -> bool:
                return await _waiting_on_locks(dsn, app) >= 2

            await until(stalled, "the worker and the producer to wait on the lock")
            assert not busy.done()
        await asyncio.wait_for(busy, 60)
        summary = await s.settle()
        await _pool_is_clean(s.store, dsn, app)
    assert summary.statuses == {RunStatus.COMPLETED: 13}


# ---------------------------------------------------------------------- 4. closing mid-connect


async def test_closing_waits_for_a_connection_still_being_opened() -> None:
    """A caller cancelled while its connection was being opened (the database slow to
    accept, as after a restart), then the store closed: `close` returns only once that
    connection is open and closed again — none is left to the garbage collector, which
    would find it open after the event loop is gone."""
    dsn = postgres_dsn()
    schema = new_schema()
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
