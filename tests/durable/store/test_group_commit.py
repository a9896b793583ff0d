"""Group commit: the SQLite writer runs queued write jobs in one transaction (again with a
savepoint each when one of them raises)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sqlite3
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from golem import new_id
from golem.durable.store.sqlite import SQLiteStore
from golem.errors import StoreError
from tests.support.durable.runs import make_run

pytestmark = [pytest.mark.loop, pytest.mark.version]

WAIT = 30.0  # a guard against a hang, not a duration the test asserts


class Boom(Exception):
    """A job's own error."""


class _Blocker:
    """A job that holds the thread until released, so later jobs queue up behind it."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()

    def __call__(self, slot: Any) -> str:
        self.started.set()
        assert self.release.wait(WAIT)
        return "blocker"


async def _hold(pool: Any) -> tuple[asyncio.Future[Any], _Blocker]:
    """Occupy the writer's thread with a `_Blocker`; jobs submitted now queue up behind it."""
    blocker = _Blocker()
    first = pool.submit(asyncio.get_running_loop(), blocker)
    assert await asyncio.to_thread(blocker.started.wait, WAIT)
    return first, blocker


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    store = await SQLiteStore.open(tmp_path / "golem.db")
    try:
        await store._submit(
            True, lambda tx: tx.run("CREATE TABLE kv (k INTEGER PRIMARY KEY, v INTEGER NOT NULL)")
        )
        yield store
    finally:
        await store.close()


async def _batched(store: SQLiteStore, jobs: list[Callable[[], Awaitable[Any]]]) -> list[Any]:
    """Start `jobs` (store calls) while the writer is blocked, so they form one batch."""
    first, blocker = await _hold(store._writer)
    tasks = [asyncio.ensure_future(job()) for job in jobs]
    await asyncio.sleep(0)  # every task queues its job
    blocker.release.set()
    await first
    results = await asyncio.gather(*tasks, return_exceptions=True)
    return results


def _add(tx: Any, k: int, v: int, fail: bool = False) -> int:
    """Order-sensitive: the new value depends on what earlier jobs left."""
    tx.run(
        "INSERT INTO kv (k, v) VALUES (?, ?) ON CONFLICT (k) DO UPDATE SET v = v * 2 + excluded.v",
        (k, v),
    )
    new = int(tx.fetch("SELECT v FROM kv WHERE k = ?", (k,))[0][0])
    if fail:
        raise Boom(f"after writing {k}")
    return new


def _rows(path: Path) -> dict[int, int]:
    """What another connection sees committed."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return dict(conn.execute("SELECT k, v FROM kv").fetchall())


async def test_a_failing_job_in_a_batch_is_rolled_back_alone(sqlite_store: SQLiteStore) -> None:
    store = sqlite_store
    runs = [make_run() for _ in range(3)]
    await store.save_pending(runs[1])  # the middle save of the batch will conflict
    results = await _batched(
        store,
        [
            lambda: store._submit(True, _add, 1, 10),
            lambda: store.save_pending(runs[0]),
            lambda: store._submit(True, _add, 1, 5, True),
            lambda: store.save_pending(runs[1]),
            lambda: store.save_pending(runs[2]),
            lambda: store._submit(True, _add, 1, 1),
        ],
    )
    assert results[0] == 10
    assert isinstance(results[2], Boom)
    assert isinstance(results[3], ValueError)  # a duplicate run: its own conflict
    assert results[5] == 21  # saw the first job's write, not the failed one's
    assert _rows(store.path) == {1: 21}
    for run in (runs[0], runs[2]):
        assert (await store.get_run(run.id)).id == run.id


async def test_a_failing_commit_fails_every_job_and_nothing_is_written(
    sqlite_store: SQLiteStore,
) -> None:
    store = sqlite_store
    await store._submit(
        True,
        lambda tx: tx.run(
            "CREATE TABLE child (id INTEGER PRIMARY KEY, k INTEGER "
            "REFERENCES kv (k) DEFERRABLE INITIALLY DEFERRED)"
        ),
    )
    run = make_run()
    last_id = store._feed.last_id

    def orphan(tx: Any) -> None:  # checked only at COMMIT: the batch's COMMIT fails
        tx.run("INSERT INTO child (id, k) VALUES (1, 999)")

    results = await _batched(
        store,
        [
            lambda: store._submit(True, _add, 1, 10),
            lambda: store.save_pending(run),
            lambda: store._submit(True, orphan),
            lambda: store._submit(True, _add, 2, 1),
        ],
    )
    assert all(isinstance(r, StoreError) for r in results), results
    assert len({id(r) for r in results}) == len(results)  # each caller its own error
    assert all(isinstance(r.__cause__, sqlite3.IntegrityError) for r in results)
    assert _rows(store.path) == {}
    with contextlib.closing(sqlite3.connect(store.path)) as conn:
        assert conn.execute("SELECT COUNT(*) FROM child").fetchone() == (0,)
        assert conn.execute("SELECT COUNT(*) FROM golem_runs").fetchone() == (0,)
    assert store._feed.last_id == last_id  # nothing published for work that did not happen
    # the writer goes on serving
    assert await store._submit(True, _add, 3, 3) == 3
    assert _rows(store.path) == {3: 3}


def _abort(tx: Any) -> None:
    """Ends the whole transaction, as SQLite itself does on SQLITE_FULL, IOERR, …"""
    tx.run("ROLLBACK")


def _unsavable(tx: Any) -> None:
    """Raises once its savepoint is gone, so its rollback cannot work."""
    tx.run("INSERT INTO kv (k, v) VALUES (7, 7)")
    tx.run("RELEASE golem_job")
    raise Boom("after releasing its own savepoint")


@pytest.mark.parametrize("breaker", [_abort, _unsavable])
async def test_a_batch_whose_transaction_broke_mid_way_fails_every_job(
    sqlite_store: SQLiteStore, breaker: Callable[[Any], None]
) -> None:
    store = sqlite_store
    results = await _batched(
        store,
        [
            lambda: store._submit(True, _add, 1, 10),
            lambda: store._submit(True, breaker),
            lambda: store._submit(True, _add, 2, 1),
        ],
    )
    assert all(isinstance(r, StoreError) for r in results), results
    assert _rows(store.path) == {}
    assert await store._submit(True, _add, 3, 3) == 3  # the writer goes on serving


async def test_a_store_call_cancelled_before_its_turn_in_a_batch_never_happens(
    sqlite_store: SQLiteStore,
) -> None:
    store = sqlite_store
    first, blocker = await _hold(store._writer)
    tasks = [asyncio.ensure_future(store._submit(True, _add, k, k)) for k in (1, 2, 3)]
    await asyncio.sleep(0)
    tasks[1].cancel()
    await asyncio.sleep(0)
    blocker.release.set()
    await first
    assert await tasks[0] == 1
    assert await tasks[2] == 3
    with pytest.raises(asyncio.CancelledError):
        await tasks[1]
    assert _rows(store.path) == {1: 1, 3: 3}


async def test_the_change_feed_hears_of_a_batch_only_after_its_commit(
    sqlite_store: SQLiteStore,
) -> None:
    store = sqlite_store
    inside = threading.Event()
    go_on = threading.Event()
    run = make_run()

    def hold(tx: Any) -> None:  # the batch's last job: its transaction stays open meanwhile
        inside.set()
        assert go_on.wait(WAIT)

    first, blocker = await _hold(store._writer)
    before = store._feed.last_id
    saved = asyncio.ensure_future(store.save_pending(run))
    held = asyncio.ensure_future(store._submit(True, hold))
    await asyncio.sleep(0)
    blocker.release.set()
    await first
    assert await asyncio.to_thread(inside.wait, WAIT)
    # the save ran (its savepoint released) but is not committed: no result, no publish
    for _ in range(5):
        await asyncio.sleep(0)
    assert not saved.done()
    assert store._feed.last_id == before
    with contextlib.closing(sqlite3.connect(store.path)) as conn:
        assert conn.execute("SELECT COUNT(*) FROM golem_runs").fetchone() == (0,)
    go_on.set()
    assert (await saved).id == run.id
    await held
    assert store._feed.last_id > before


_job = st.tuples(st.integers(0, 3), st.integers(1, 9), st.booleans())


@settings(
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(jobs=st.lists(_job, min_size=1, max_size=12))
async def test_a_batch_equals_running_its_succeeding_jobs_one_after_another(
    tmp_path: Path, jobs: list[tuple[int, int, bool]]
) -> None:
    path = tmp_path / f"{new_id()}.db"  # one fixture directory serves every example
    store = await SQLiteStore.open(path)
    try:
        await store._submit(
            True, lambda tx: tx.run("CREATE TABLE kv (k INTEGER PRIMARY KEY, v INTEGER NOT NULL)")
        )
        results = await _batched(
            store,
            [functools.partial(store._submit, True, _add, k, v, f) for k, v, f in jobs],
        )
    finally:
        await store.close()
    model: dict[int, int] = {}
    for (k, v, fail), result in zip(jobs, results, strict=True):
        if fail:
            assert isinstance(result, Boom)
            continue
        model[k] = model[k] * 2 + v if k in model else v
        assert result == model[k]
    assert _rows(path) == model


async def test_two_stores_on_one_file_both_grouping_lose_no_write(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    stores = [await SQLiteStore.open(path), await SQLiteStore.open(path)]
    try:
        await stores[0]._submit(
            True, lambda tx: tx.run("CREATE TABLE kv (k INTEGER PRIMARY KEY, v INTEGER NOT NULL)")
        )
        holds = [await _hold(store._writer) for store in stores]
        tasks = [
            asyncio.ensure_future(store._submit(True, _add, 1, 1))
            for _ in range(10)
            for store in stores
        ]
        await asyncio.sleep(0)
        for first, blocker in holds:
            blocker.release.set()
            await first
        results = await asyncio.gather(*tasks)
        assert sorted(results) == [2**n - 1 for n in range(1, 21)]
        assert _rows(path) == {1: 2**20 - 1}
    finally:
        for store in stores:
            await store.close()


async def test_a_job_cancelled_after_the_first_attempt_still_runs_in_the_second(
    sqlite_store: SQLiteStore,
) -> None:
    """A job the writer took runs to its end, whoever still waits for it: the retry of a
    spoiled batch does not drop a job whose caller was cancelled meanwhile."""
    store = sqlite_store
    started = threading.Event()
    go_on = threading.Event()

    def fail_after_the_others_ran(tx: Any) -> None:
        started.set()
        assert go_on.wait(WAIT)
        raise Boom("spoils the optimistic attempt")

    first, blocker = await _hold(store._writer)
    taken = asyncio.ensure_future(store._submit(True, _add, 1, 1))
    spoiler = asyncio.ensure_future(store._submit(True, fail_after_the_others_ran))
    await asyncio.sleep(0)
    blocker.release.set()
    await first
    assert await asyncio.to_thread(started.wait, WAIT)
    taken.cancel()  # its job ran in the first attempt, which is about to be rolled back
    go_on.set()
    with pytest.raises(Boom):
        await spoiler
    with pytest.raises(asyncio.CancelledError):
        await taken
    assert _rows(store.path) == {1: 1}  # it ran again, and committed
