"""PostgresStore's own wire path: libpq pipeline, prepared statements, pool threads, LISTEN."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from golem.durable.store import Decision, NewRun, Outcome, RunStatus
from golem.durable.store.postgres import PostgresStore
from golem.errors import StoreError
from tests.support.durable.backends import Backend, backend_for
from tests.support.durable.runs import approval, make_run

pytestmark = [pytest.mark.postgres, pytest.mark.loop]

WAIT = 30.0  # a guard against a hang, not a duration the test asserts


@pytest.fixture
def pg(tmp_path: Path) -> Iterator[Backend]:
    with backend_for("postgres", tmp_path) as backend:
        yield backend


@pytest.fixture
async def pg_store(pg: Backend) -> AsyncIterator[PostgresStore]:
    store = await pg.open()
    assert isinstance(store, PostgresStore)
    try:
        yield store
    finally:
        await store.close()


async def test_a_change_committed_before_listen_took_effect_still_wakes_waiters(
    pg: Backend, pg_store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The listener connects in the background: a change that commits after the waiter's
    first look but before LISTEN is in place sends a notice nobody hears; the listener
    reads the newest change once it listens, so the waiter still wakes."""
    gate = asyncio.Event()
    connect = pg_store._connect_listener

    async def slow_connect() -> Any:
        await gate.wait()
        return await connect()

    monkeypatch.setattr(pg_store, "_connect_listener", slow_connect)
    probed = asyncio.Event()
    probe = pg_store._feed._probe

    async def probe_and_tell() -> int:
        newest = await probe()
        probed.set()
        return newest

    monkeypatch.setattr(pg_store._feed, "_probe", probe_and_tell)
    other = await pg.open()
    try:
        start = await pg_store.last_change_id()
        feed = pg_store.change_feed()  # starts the listener, held at the gate
        waiter = asyncio.create_task(feed.wait_for_change(start, WAIT))
        await asyncio.wait_for(probed.wait(), WAIT)  # the waiter's first look: nothing new
        await other.save_pending(make_run())  # commits and notifies: nobody listens yet
        gate.set()
        assert await asyncio.wait_for(waiter, WAIT) > start
    finally:
        await other.close()


async def test_text_with_nul_is_refused_and_the_connection_stays_usable(
    pg_store: PostgresStore,
) -> None:
    with pytest.raises(Exception, match="NUL"):
        await pg_store.save_pending(make_run(history='[{"role":"user","content":"a\x00b"}]'))
    run = await pg_store.save_pending(make_run())
    assert (await pg_store.get_run(run.id)).status is RunStatus.PENDING


async def test_a_failed_statement_rolls_back_and_later_transactions_reuse_the_connection(
    pg_store: PostgresStore,
) -> None:
    """A server-side error mid-pipeline (here a duplicate run ID) leaves nothing behind, and
    the statements prepared on that connection keep working afterwards."""
    run = await pg_store.save_pending(make_run())
    for _ in range(3):
        with pytest.raises(ValueError, match="already exists"):
            await pg_store.save_pending(make_run(id=run.id))
    assert [e.action.value for e in await pg_store.audit(run.id)] == ["created"]
    for _ in range(3):  # the same statements, prepared before the errors
        other = await pg_store.save_pending(make_run(approval("c1"), approval("c2")))
        await pg_store.decide(other.id, "c1", Decision.approve(), decided_by="a")
        await pg_store.decide(other.id, "c2", Decision.deny("no"), decided_by="a")
        claimed = await pg_store.claim_ready("w", 30)
        assert claimed is not None
        assert claimed.run.id == other.id
        done = await pg_store.finish(other.id, "w", Outcome.completed({"n": 1}))
        assert done.outcome is not None
        assert done.outcome.output == {"n": 1}


async def test_concurrent_operations_use_several_connections(pg: Backend) -> None:
    """`pool_size` transactions at once, none lost or mixed up across connections; they run
    on the event loop (no database thread), and closing the store closes every connection."""
    import threading

    import psycopg

    store = await pg.open(pool_size=3)
    pids: set[int] = set()
    try:
        runs = await asyncio.gather(*(store.save_pending(make_run()) for _ in range(30)))
        await asyncio.gather(
            *(store.decide(r.id, "c1", Decision.approve(), decided_by="a") for r in runs)
        )
        got = await asyncio.gather(*(store.get_run(r.id) for r in runs))
        assert [g.id for g in got] == [r.id for r in runs]
        assert all(g.status is RunStatus.READY for g in got)

        def backend(tx: Any) -> int:
            return int(tx.fetch("SELECT pg_backend_pid()")[0][0])

        pids = set(await asyncio.gather(*(store._submit(False, backend) for _ in range(30))))
        assert 2 <= len(pids) <= 3, "several connections, never more than pool_size"
        assert not [t for t in threading.enumerate() if t.name.startswith("golem-pg")]
    finally:
        await store.close()
    with psycopg.connect(pg.dsn or "", autocommit=True) as conn:
        for _ in range(600):  # the server notices closed sockets within moments
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", (list(pids),)
            ).fetchone()
            if row is not None and row[0] == 0:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("close left connections open")


async def test_a_closed_store_refuses_new_work(pg_store: PostgresStore) -> None:
    await pg_store.close()
    with pytest.raises(StoreError, match="closed"):
        await pg_store.save_pending(make_run())


async def test_an_event_loop_that_cannot_watch_sockets_runs_transactions_on_threads(
    pg: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Windows' Proactor loop has no `add_reader`: the store notices on its first wait and
    runs that transaction's waits, and every later transaction, on worker threads —
    cancelled callers included."""
    loop = asyncio.get_running_loop()
    tried: list[object] = []

    def no_readers(*args: Any) -> None:
        tried.append(args)
        raise NotImplementedError

    monkeypatch.setattr(loop, "add_reader", no_readers)
    store = await pg.open()
    try:
        run = await store.save_pending(make_run(approval("c1")))
        await store.decide(run.id, "c1", Decision.approve(), decided_by="ann")
        claiming = asyncio.ensure_future(store.claim_ready("w", 30))
        await asyncio.sleep(0)
        claiming.cancel()  # its transaction still ends, on its thread
        await asyncio.gather(claiming, return_exceptions=True)
        claimed = await store.claim_ready("w", 30)
        if claimed is None:  # the cancelled claim took it
            assert (await store.get_run(run.id)).status is RunStatus.RUNNING
        else:
            await store.finish(run.id, "w", Outcome.completed("ok"))
            assert (await store.get_run(run.id)).status is RunStatus.COMPLETED
        assert len(tried) == 1, "noticed once, never tried again on this loop"
    finally:
        await store.close()


async def test_a_server_older_than_13_is_refused_with_its_version(
    pg: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guard statements need `pg_current_xact_id()` (PostgreSQL 13): an older server gets a
    clear error when the store opens, not a failed statement in the middle of a claim."""
    import psycopg

    monkeypatch.setattr(psycopg.ConnectionInfo, "server_version", property(lambda self: 120017))
    with pytest.raises(StoreError, match=r"PostgreSQL 13 or later; .* runs 12\.17"):
        await pg.open()


async def test_unsupported_parameter_types_are_refused_before_anything_is_sent(
    pg_store: PostgresStore,
) -> None:
    """Every value the store sends is text, an integer, a timestamp or NULL."""
    bad: Any = NewRun("r-bad", "ops", "c", "[]", calls=(approval("c1"),), started_by=b"x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="bytes"):
        await pg_store.save_pending(bad)
    assert (await pg_store.list_runs()) == []


async def test_an_error_raised_with_statements_still_queued_rolls_them_back(
    pg_store: PostgresStore,
) -> None:
    """The transaction function fails while its queued statements (one of them failing on
    the server too) have not been sent: the caller sees its own error, nothing commits, and
    the connection serves the next transaction."""
    run = await pg_store.save_pending(make_run())

    def tx_fn(tx: Any) -> None:
        tx.run("UPDATE golem_runs SET agent = 'changed' WHERE id = ?", (run.id,))
        tx.run(
            "INSERT INTO golem_histories (run_id, history) VALUES (?, '[]')",
            (run.id,),
            ValueError("duplicate"),
        )
        raise RuntimeError("the function's own failure")

    with pytest.raises(RuntimeError, match="own failure"):
        await pg_store._submit(True, tx_fn)
    assert (await pg_store.get_run(run.id)).agent == "ops"


async def test_a_connection_killed_right_after_connecting_is_a_store_error(
    pg: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A backend killed between the connect and the store's first query on it (the server
    clock read) fails the call with `StoreError`, which workers retry, not a bare psycopg
    error that ends a resume (found by the random-kill chaos test)."""
    import psycopg

    store = PostgresStore(pg.dsn or "", schema=pg.schema, pool_size=1)
    real = PostgresStore._read_server_clock
    kills = [psycopg.errors.AdminShutdown("terminating connection due to administrator command")]

    def killed_once(self: PostgresStore, conn: Any, listener: bool = False) -> None:
        if kills:
            raise kills.pop()
        real(self, conn, listener)

    monkeypatch.setattr(PostgresStore, "_read_server_clock", killed_once)
    try:
        with pytest.raises(StoreError, match="administrator command") as caught:
            await store.list_runs()
        assert type(caught.value) is StoreError
        assert store._opened == 0
        assert await store.list_runs() == []
    finally:
        await store.close()
