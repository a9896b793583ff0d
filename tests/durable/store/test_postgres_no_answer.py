"""A PostgreSQL server that stops answering without closing the connection."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from golem.durable.store import AuditAction, Decision, RunStatus, StoreTimeout
from golem.durable.store.postgres import PostgresStore
from golem.durable.worker import Worker, start_run
from tests.support.durable.backends import Backend, backend_for
from tests.support.durable.chaos import (
    Hold,
    chaos_registry,
    executions,
    frozen,
    stalled_commits,
    until,
)
from tests.support.durable.worker_app import prompt_for

pytestmark = [pytest.mark.postgres, pytest.mark.loop]


@pytest.fixture
def pg(tmp_path: Path) -> Iterator[Backend]:
    with backend_for("postgres", tmp_path) as b:
        yield b


def backend_pid(store: PostgresStore) -> int:
    """The backend of the store's one idle pooled connection."""
    (c,) = store._idle  # pool_size=1, nothing running
    pid: int = c.pg.backend_pid
    return pid


async def gone(pid: int) -> None:
    """Wait until the backend `pid` has exited (it does once it finds its client gone)."""

    async def exited() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False

    await until(exited, f"backend {pid} to exit")


@contextlib.asynccontextmanager
async def opened(pg: Backend, **kw: Any) -> AsyncIterator[PostgresStore]:
    store = await PostgresStore.open(pg.dsn or "", schema=pg.schema, pool_size=1, **kw)
    try:
        yield store
    finally:
        await store.close()


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf")])
def test_the_command_timeout_must_be_positive_seconds(bad: float) -> None:
    with pytest.raises(ValueError, match="command_timeout"):
        PostgresStore("postgresql://localhost/x", command_timeout=bad)


def test_store_timeout_is_a_store_error_and_a_timeout() -> None:
    from golem.errors import StoreError

    exc = StoreTimeout(2.5, commit_sent=True)
    assert isinstance(exc, StoreError)
    assert isinstance(exc, TimeoutError)
    assert "within 2.5s" in str(exc)
    assert "may have committed" in str(exc)
    assert "may have committed" not in str(StoreTimeout(1, commit_sent=False))


async def test_a_read_from_a_frozen_server_times_out_and_the_next_call_works(pg: Backend) -> None:
    async with opened(pg, command_timeout=0.5) as store:
        assert await store.list_runs() == []
        pid = backend_pid(store)
        with frozen(pid):
            with pytest.raises(StoreTimeout) as caught:
                await store.list_runs()
            assert caught.value.commit_sent is False  # a read: nothing to have committed
            assert store._opened == 0  # the silent connection is gone
            assert await store.list_runs() == []  # a fresh connection, another backend
        await gone(pid)


async def test_a_decision_sent_to_a_frozen_server_can_simply_be_sent_again(
    pg: Backend, tmp_path: Path
) -> None:
    """The COMMIT went out with the decision: it may or may not apply once the backend
    thaws. Sending the same decision again converges either way."""
    registry = chaos_registry(tmp_path)
    async with opened(pg, command_timeout=0.5) as store:
        run = await start_run(store, registry, "acts", prompt_for("p", 1), started_by="ann")
        pid = backend_pid(store)
        with frozen(pid):
            with pytest.raises(StoreTimeout) as caught:
                await store.decide(run.id, "p-0", Decision.approve(), decided_by="ann")
            assert caught.value.commit_sent is True
            again = await store.decide(run.id, "p-0", Decision.approve(), decided_by="ann")
        await gone(pid)  # thawed: it ran what it had been sent, or gave up
        assert again.decided_by == "ann"
        assert (await store.get_run(run.id)).status is RunStatus.READY
        audit = await store.audit(run.id)
        assert [e.action for e in audit].count(AuditAction.DECIDED) == 1


async def test_without_a_command_timeout_a_call_waits_for_the_server(pg: Backend) -> None:
    async with opened(pg, command_timeout=None) as store:
        await store.list_runs()
        pid = backend_pid(store)
        with frozen(pid):
            waiting = asyncio.ensure_future(store.list_runs())
            done, _ = await asyncio.wait([waiting], timeout=0.5)
            assert not done  # the backend is stopped: it cannot have answered
        assert await waiting == []  # thawed: the same connection answers


async def test_a_worker_whose_finish_meets_a_frozen_server_saves_it_once(
    pg: Backend, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The approved call ran; the finish times out on the frozen backend and is retried
    on a fresh connection: the run completes, the call ran once, and the thawed backend's
    copy of the finish changes nothing."""
    hold = Hold()
    registry = chaos_registry(tmp_path, hold)
    async with opened(pg, command_timeout=0.5) as store:
        run = await start_run(
            store, registry, "acts", prompt_for("p", 1), deps_ref={"hold": True}, started_by="ann"
        )
        await store.decide(run.id, "p-0", Decision.approve(), decided_by="ann")
        worker = Worker(store, registry, worker_id="w1", lease_seconds=60, sweep_interval=3600)
        resuming = asyncio.ensure_future(worker.run_once())

        async def entered() -> bool:
            return hold.entered > 0

        await until(entered, "the approved call to run")  # the connection is back in the pool
        pid = backend_pid(store)
        with frozen(pid):
            hold.release()
            assert await resuming is True
        await gone(pid)
        done = await store.get_run(run.id)
        assert done.status is RunStatus.COMPLETED, done
        assert executions(tmp_path) == {"p-0": [run.id]}
        retried = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
        assert any("no answer from the server" in m for m in retried), retried
        audit = await store.audit(run.id)
        assert [e.action for e in audit].count(AuditAction.COMPLETED) == 1


async def test_a_claim_that_commits_after_it_timed_out_is_resumed(
    pg: Backend, tmp_path: Path
) -> None:
    """A COMMIT that stalls while holding its locks (a WAL disk that stopped, a synchronous standby
    that fell behind) outlasts the timeout and commits later."""
    registry = chaos_registry(tmp_path)
    async with opened(pg, command_timeout=0.5) as store:
        run = await start_run(store, registry, "acts", prompt_for("p", 1), started_by="ann")
        await store.decide(run.id, "p-0", Decision.approve(), decided_by="ann")
        with stalled_commits(pg.dsn or "", pg.schema or "", "running") as blocker:
            worker = Worker(store, registry, worker_id="w1", lease_seconds=60, sweep_interval=3600)
            with pytest.raises(StoreTimeout):
                await worker.run_once()  # the claim's COMMIT stalls
            # the claim has not committed: its run is neither ready to claim nor running
            assert await worker.run_once() is False
            blocker.execute("SELECT pg_advisory_unlock(4242)")  # the stalled claim commits

            async def claimed() -> bool:
                return (await store.get_run(run.id)).status is RunStatus.RUNNING

            await until(claimed, "the stalled claim to commit")
            assert await worker.run_once() is True  # taken back and resumed
        done = await store.get_run(run.id)
        assert done.status is RunStatus.COMPLETED, done
        assert executions(tmp_path) == {"p-0": [run.id]}
        assert await worker.run_once() is False  # resumed once, not again


async def test_on_a_loop_that_cannot_watch_sockets_the_wait_is_bounded_too(
    pg: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Windows' Proactor loop: the transaction waits on a worker thread, with the same bound."""
    loop = asyncio.get_running_loop()

    def no_readers(*args: Any) -> None:
        raise NotImplementedError

    monkeypatch.setattr(loop, "add_reader", no_readers)
    async with opened(pg, command_timeout=0.5) as store:
        await store.list_runs()  # learns that this loop cannot watch sockets
        pid = backend_pid(store)
        with frozen(pid):
            with pytest.raises(StoreTimeout):
                await store.list_runs()
            assert await store.list_runs() == []
        await gone(pid)


async def _listener(store: PostgresStore, other_than: int | None = None) -> int:
    """The backend of the store's `LISTEN` connection once it listens (another than
    `other_than`)."""

    async def listening() -> bool:
        c = store._listening
        return c is not None and c.pg.backend_pid != other_than

    await until(listening, "the change feed to listen")
    assert store._listening is not None
    pid: int = store._listening.pg.backend_pid
    return pid


@pytest.mark.parametrize("poll", [3600.0])
async def test_a_frozen_listener_is_replaced_and_a_notify_still_wakes_the_worker(
    pg: Backend, tmp_path: Path, poll: float, caplog: pytest.LogCaptureFixture
) -> None:
    """The backend of the change feed's `LISTEN` connection stops answering (its socket stays
    open): after a silent `listen_check_interval` the listener asks it an empty query, gets no
    answer within `command_timeout`, and replaces the connection."""
    registry = chaos_registry(tmp_path)
    async with opened(pg, command_timeout=0.5) as store, opened(pg) as producer:
        store.listen_check_interval = 0.2
        worker = Worker(store, registry, worker_id="w1", sweep_interval=3600)
        stop = asyncio.Event()
        working = asyncio.create_task(worker.run_forever(poll, stop))
        try:
            pid = await _listener(store)
            with frozen(pid):
                await _listener(store, other_than=pid)  # replaced while the old one is frozen
                run = await start_run(
                    producer, registry, "acts", prompt_for("p", 1), started_by="ann"
                )
                await producer.decide(run.id, "p-0", Decision.approve(), decided_by="ann")

                async def completed() -> bool:
                    return (await producer.get_run(run.id)).status is RunStatus.COMPLETED

                await until(completed, "the worker to be woken and resume the run")
        finally:
            stop.set()
            await working
        await gone(pid)
    assert executions(tmp_path) == {"p-0": [run.id]}
    said = [r.getMessage() for r in caplog.records]
    assert any("did not answer within 0.5s; replacing it" in m for m in said), said


async def test_a_listener_frozen_for_less_than_the_timeout_is_kept_and_hears_what_came_meanwhile(
    pg: Backend, tmp_path: Path
) -> None:
    """A listener whose backend is stopped, checked, then thawed within `command_timeout`
    answers late: it is kept, and the `NOTIFY` sent while it was frozen wakes the worker
    (which polls once an hour)."""
    registry = chaos_registry(tmp_path)
    async with opened(pg, command_timeout=60) as store, opened(pg) as producer:
        store.listen_check_interval = 0.05
        worker = Worker(store, registry, worker_id="w1", sweep_interval=3600)
        stop = asyncio.Event()
        working = asyncio.create_task(worker.run_forever(3600, stop))
        try:
            pid = await _listener(store)
            ask = store._ask
            checking = asyncio.Event()

            async def ask_and_tell(loop: Any, c: Any, sql: bytes) -> None:
                if sql == b"":
                    checking.set()
                await ask(loop, c, sql)

            with frozen(pid):
                store._ask = ask_and_tell  # type: ignore[method-assign]
                run = await start_run(
                    producer, registry, "acts", prompt_for("p", 1), started_by="ann"
                )
                await producer.decide(run.id, "p-0", Decision.approve(), decided_by="ann")
                await asyncio.wait_for(checking.wait(), 60)  # a check waits on the frozen one

            async def completed() -> bool:
                return (await producer.get_run(run.id)).status is RunStatus.COMPLETED

            await until(completed, "the thawed listener to wake the worker")
            assert store._listening is not None
            assert store._listening.pg.backend_pid == pid, "kept: it answered in time"
        finally:
            stop.set()
            await working
    assert executions(tmp_path) == {"p-0": [run.id]}


async def test_on_a_loop_that_cannot_watch_sockets_a_full_default_executor_starves_nothing(
    pg: Backend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Windows' Proactor loop: transactions and the listener's waits run on threads."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    loop = asyncio.get_running_loop()

    def no_readers(*args: Any) -> None:
        raise NotImplementedError

    monkeypatch.setattr(loop, "add_reader", no_readers)
    tools = ThreadPoolExecutor(max_workers=2)
    loop.set_default_executor(tools)
    release = threading.Event()
    busy = [loop.run_in_executor(None, release.wait) for _ in range(2)]  # every default thread
    registry = chaos_registry(tmp_path)
    try:
        async with opened(pg) as store, opened(pg) as producer:
            feed = store.change_feed()
            mark = feed.last_id
            run = await asyncio.wait_for(
                start_run(store, registry, "acts", prompt_for("p", 1), started_by="ann"), 30
            )
            await asyncio.wait_for(
                store.decide(run.id, "p-0", Decision.approve(), decided_by="ann"), 30
            )
            claimed = await asyncio.wait_for(store.claim_ready("w1", 60), 30)
            assert claimed is not None
            await asyncio.wait_for(store.renew_lease(run.id, "w1", 60), 30)
            await _listener(store)
            mark = feed.last_id
            await producer.sweep_expired()  # no change: wakes nobody
            other = await start_run(producer, registry, "acts", prompt_for("q", 1), started_by="b")
            assert await feed.wait_for_change(mark, 30) > mark, "the NOTIFY reached the waiter"
            assert other.status is RunStatus.PENDING
            assert not any(f.done() for f in busy)  # the default executor was full throughout
    finally:
        release.set()
        await asyncio.gather(*busy)
        tools.shutdown()
