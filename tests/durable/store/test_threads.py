"""`DatabaseThreads`: the queue of jobs both stores run their transactions on."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from golem.durable.store._threads import DatabaseThreads, Slot

pytestmark = pytest.mark.loop

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


async def test_callbacks_a_job_adds_run_on_the_loop_before_its_result_settles() -> None:
    pool = _pool(1)
    loop = asyncio.get_running_loop()
    seen: list[tuple[str, int, bool]] = []

    def note(what: str, index: int) -> None:  # on the loop: `holder` is filled by then
        seen.append((what, threading.get_ident(), holder[index].done()))

    holder: list[asyncio.Future[Any]] = []

    def job(slot: Slot[str]) -> str:
        assert slot.loop is loop
        slot.on_loop(note, "first", 0)
        slot.on_loop(note, "second", 0)
        return "result"

    def failing(slot: Slot[str]) -> None:
        slot.on_loop(note, "before the error", 1)
        raise ValueError("the job failed")

    try:
        holder.append(pool.submit(loop, job))
        assert await holder[0] == "result"
        holder.append(pool.submit(loop, failing))
        with pytest.raises(ValueError, match="the job failed"):
            await holder[1]
        main = threading.get_ident()
        assert seen == [
            ("first", main, False),
            ("second", main, False),
            ("before the error", main, False),
        ]
        # a later job does not inherit the callbacks of an earlier one
        assert await pool.submit(loop, lambda slot: slot.loop is loop) is True
        assert len(seen) == 3
    finally:
        await _stop(pool)


async def test_a_failing_callback_is_reported_and_the_result_still_arrives() -> None:
    pool = _pool(1)
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda loop, context: reported.append(context))

    def boom() -> None:
        raise RuntimeError("callback bug")

    def job(slot: Slot[str]) -> str:
        slot.on_loop(boom)
        return "still delivered"

    try:
        assert await asyncio.wait_for(pool.submit(loop, job), WAIT) == "still delivered"
        assert len(reported) == 1
        assert isinstance(reported[0]["exception"], RuntimeError)
    finally:
        loop.set_exception_handler(None)
        await _stop(pool)


async def test_a_job_of_a_closed_loop_finishes_and_the_thread_keeps_serving() -> None:
    pool = _pool(1)
    loop = asyncio.get_running_loop()
    gate, ran = threading.Event(), threading.Event()
    other = asyncio.new_event_loop()
    try:
        pool.submit(other, lambda slot: (gate.wait(WAIT), ran.set()))
        other.close()  # nobody will ever read that job's result
        gate.set()
        assert await asyncio.to_thread(ran.wait, WAIT)
        assert await asyncio.wait_for(pool.submit(loop, lambda slot: "alive"), WAIT) == "alive"
    finally:
        await _stop(pool)


_OPS = st.lists(st.sampled_from(["ok", "raise", "cancel", "on_loop"]), min_size=1, max_size=12)


@settings(deadline=None)
@given(size=st.integers(1, 3), ops=_OPS)
def test_every_queued_job_is_settled_once_with_its_own_outcome(size: int, ops: list[str]) -> None:
    """Jobs queued behind busy threads: a cancelled one never runs, every other one runs
    once and its future gets its own result or error, after its loop callbacks."""

    async def scenario() -> None:
        pool = _pool(size)
        loop = asyncio.get_running_loop()
        gate = threading.Event()
        ran: list[int] = []
        on_loop: list[int] = []

        def job(i: int, op: str) -> Callable[[Slot[str]], int]:
            def fn(slot: Slot[str]) -> int:
                ran.append(i)
                if op == "on_loop":  # noted only while the job's future is still pending
                    slot.on_loop(lambda: on_loop.append(i) if not futures[i].done() else None)
                if op == "raise":
                    raise LookupError(i)
                return i

            return fn

        try:
            blockers = [pool.submit(loop, lambda slot: gate.wait(WAIT)) for _ in range(size)]
            futures = [pool.submit(loop, job(i, op)) for i, op in enumerate(ops)]
            for i, op in enumerate(ops):
                if op == "cancel":
                    futures[i].cancel()  # every thread is busy: still queued
            gate.set()
            assert await asyncio.wait_for(asyncio.gather(*blockers), WAIT) == [True] * size
            outcomes = await asyncio.wait_for(
                asyncio.gather(*futures, return_exceptions=True), WAIT
            )
            await pool.submit(loop, lambda slot: None)  # a fence: nothing left in flight
        finally:
            await _stop(pool)
        expected_ran = [i for i, op in enumerate(ops) if op != "cancel"]
        assert sorted(ran) == expected_ran  # once each, never a cancelled one
        assert sorted(on_loop) == [i for i, op in enumerate(ops) if op == "on_loop"]
        for i, (op, got) in enumerate(zip(ops, outcomes, strict=True)):
            if op == "cancel":
                assert isinstance(got, asyncio.CancelledError)
            elif op == "raise":
                assert isinstance(got, LookupError)
                assert got.args == (i,)
            else:
                assert got == i

    asyncio.run(scenario())
