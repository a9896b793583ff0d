"""`DatabaseThreads`: the queue of jobs both stores run their transactions on."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from golem.store._threads import DatabaseThreads, Slot

WAIT = 30.0  # a guard against a hang, not a duration the test asserts


def _pool(size: int, closed: list[Any] | None = None) -> DatabaseThreads[str]:
    def close(slot: Slot[str]) -> None:
        if closed is not None:
            closed.append(slot.state)

    return DatabaseThreads("test-db", size, close)


async def _stop(pool: DatabaseThreads[Any]) -> None:
    pool.stop()
    await asyncio.to_thread(pool.join)


async def test_jobs_run_on_a_thread_and_their_results_and_errors_come_back() -> None:
    pool = _pool(1)
    loop = asyncio.get_running_loop()
    try:
        main = threading.get_ident()
        ident = await pool.submit(loop, lambda slot: threading.get_ident())
        assert ident != main

        def boom(slot: Slot[str]) -> None:
            raise KeyError("inside the job")

        with pytest.raises(KeyError, match="inside the job"):
            await pool.submit(loop, boom)
        assert await pool.submit(loop, lambda slot: "still serving") == "still serving"
    finally:
        await _stop(pool)


async def test_a_slot_keeps_its_state_for_the_threads_life_and_is_closed_at_the_end() -> None:
    closed: list[Any] = []
    pool = _pool(1, closed)
    loop = asyncio.get_running_loop()

    def open_once(slot: Slot[str]) -> str:
        if slot.state is None:
            slot.state = f"connection-{threading.get_ident()}"
        return slot.state

    first = await pool.submit(loop, open_once)
    assert [await pool.submit(loop, open_once) for _ in range(5)] == [first] * 5
    await _stop(pool)
    assert closed == [first]


async def test_a_job_cancelled_before_a_thread_took_it_never_runs() -> None:
    pool = _pool(1)
    loop = asyncio.get_running_loop()
    gate = threading.Event()
    ran: list[str] = []
    try:
        blocker = pool.submit(loop, lambda slot: gate.wait(WAIT))
        queued = pool.submit(loop, lambda slot: ran.append("queued"))
        queued.cancel()  # the only thread is busy: the job is still in the queue
        gate.set()
        assert await blocker is True
        assert await pool.submit(loop, lambda slot: "after") == "after"
        assert ran == []
    finally:
        await _stop(pool)


async def test_a_job_a_thread_took_runs_to_its_end_whoever_waits() -> None:
    pool = _pool(1)
    loop = asyncio.get_running_loop()
    started, gate = threading.Event(), threading.Event()
    done: list[str] = []

    def job(slot: Slot[str]) -> None:
        started.set()
        gate.wait(WAIT)
        done.append("finished")

    try:
        future = pool.submit(loop, job)
        await asyncio.to_thread(started.wait, WAIT)
        future.cancel()
        gate.set()
        await pool.submit(loop, lambda slot: None)  # queued behind the job on the one thread
        assert done == ["finished"]
    finally:
        await _stop(pool)


async def test_threads_start_only_while_every_running_one_is_busy() -> None:
    pool = _pool(3)
    loop = asyncio.get_running_loop()
    try:
        for _ in range(10):  # one at a time: one thread serves them all
            await pool.submit(loop, lambda slot: None)
        assert len(pool._threads) == 1
        gate = threading.Event()
        busy = [pool.submit(loop, lambda slot: gate.wait(WAIT)) for _ in range(5)]
        assert len(pool._threads) == 3, "grows to its size while jobs wait, never beyond"
        gate.set()
        assert await asyncio.wait_for(asyncio.gather(*busy), WAIT) == [True] * 5
    finally:
        await _stop(pool)
    with pytest.raises(RuntimeError, match="stopped"):
        pool.submit(loop, lambda slot: None)
