"""`DatabaseThreads`: the queue of jobs both stores run their transactions on, and the batch hook
SQLite's writer groups queued jobs with (`test_group_commit.py` has the store's side)."""

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


class _Hook:
    """A batch hook that runs every step (and records the batch sizes), then maybe fails."""

    def __init__(self, fail: BaseException | None = None) -> None:
        self.sizes: list[int] = []
        self.fail = fail

    def __call__(self, slot: Slot[Any], steps: list[Callable[[], None]]) -> None:
        self.sizes.append(len(steps))
        for step in steps:
            step()
        if self.fail is not None:
            raise self.fail


async def _held(pool: DatabaseThreads[Any], n: int = 1) -> tuple[list[Any], threading.Event]:
    """Occupy `n` of `pool`'s threads until the returned event is set; jobs submitted meanwhile
    queue up behind them."""
    gate, started = threading.Event(), threading.Semaphore(0)

    def block(slot: Slot[Any]) -> bool:
        started.release()
        return gate.wait(WAIT)

    blockers = [pool.submit(asyncio.get_running_loop(), block) for _ in range(n)]
    for _ in range(n):
        assert await asyncio.to_thread(started.acquire, True, WAIT)
    return blockers, gate


_OPS = st.lists(st.sampled_from(["ok", "raise", "cancel", "on_loop"]), min_size=1, max_size=12)


@settings(deadline=None)
@given(size=st.integers(1, 3), batch=st.booleans(), ops=_OPS)
def test_every_queued_job_is_settled_once_with_its_own_outcome(
    size: int, batch: bool, ops: list[str]
) -> None:
    """Jobs queued behind busy threads (or, with a batch hook, the one writer thread): a cancelled
    one never runs, every other one runs once, in order on one thread, and its future gets its
    own result or error, after its loop callbacks; a batch is one call of the hook."""

    async def scenario() -> None:
        hook = _Hook()
        pool: DatabaseThreads[str] = DatabaseThreads(
            "test-db", 1 if batch else size, lambda slot: None, **({"batch": hook} if batch else {})
        )
        loop = asyncio.get_running_loop()
        ran: list[int] = []
        on_loop: list[int] = []

        def job(i: int, op: str) -> Callable[[Slot[str]], int]:
            def fn(slot: Slot[str]) -> int:
                assert slot.loop is loop
                ran.append(i)
                if op == "on_loop":  # noted only while the job's future is still pending
                    slot.on_loop(lambda: on_loop.append(i) if not futures[i].done() else None)
                if op == "raise":
                    raise LookupError(i)
                return i

            return fn

        try:
            blockers, gate = await _held(pool, 1 if batch else size)
            futures = [pool.submit(loop, job(i, op)) for i, op in enumerate(ops)]
            for i, op in enumerate(ops):
                if op == "cancel":
                    futures[i].cancel()  # every thread is busy: still queued
            gate.set()
            assert await asyncio.wait_for(asyncio.gather(*blockers), WAIT) == [True] * len(blockers)
            outcomes = await asyncio.wait_for(
                asyncio.gather(*futures, return_exceptions=True), WAIT
            )
            await pool.submit(loop, lambda slot: None)  # a fence, alone: no batch
        finally:
            await _stop(pool)
        expected_ran = [i for i, op in enumerate(ops) if op != "cancel"]
        assert (ran if batch or size == 1 else sorted(ran)) == expected_ran
        if batch and "cancel" not in ops:  # the queued jobs together, in one call of the hook
            assert hook.sizes == ([len(ops)] if len(ops) > 1 else [])  # (a lone job: none)
        assert len(hook.sizes) <= 1
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


async def test_a_failing_hook_fails_every_job_of_the_batch_and_delivers_nothing_else() -> None:
    published: list[str] = []
    hook = _Hook(fail=KeyError("the bracket did not hold"))
    pool: DatabaseThreads[str] = DatabaseThreads("test-db", 1, lambda slot: None, batch=hook)
    loop = asyncio.get_running_loop()
    try:
        (first,), gate = await _held(pool)

        def job(slot: Slot[str]) -> str:
            slot.on_loop(published.append, "callback")
            return "ok"

        futures = [pool.submit(loop, job) for _ in range(3)]
        gate.set()
        await first
        results = await asyncio.gather(*futures, return_exceptions=True)
        assert all(isinstance(r, KeyError) for r in results)
        assert published == []  # a failed batch's callbacks are dropped with its results
    finally:
        await _stop(pool)


async def test_stop_while_jobs_are_queued_finishes_the_batch_then_ends() -> None:
    closed: list[str] = []
    hook = _Hook()
    pool: DatabaseThreads[str] = DatabaseThreads(
        "test-db", 1, lambda slot: closed.append("closed"), batch=hook, batch_max=2
    )
    loop = asyncio.get_running_loop()
    (first,), gate = await _held(pool)
    futures = [pool.submit(loop, lambda slot, i=i: i) for i in range(5)]  # type: ignore[misc]
    pool.stop()
    gate.set()
    await asyncio.to_thread(pool.join)
    assert await first is True
    assert await asyncio.gather(*futures) == [0, 1, 2, 3, 4]
    assert hook.sizes == [2, 2]  # capped at batch_max; the last job ran alone
    assert closed == ["closed"]
    with pytest.raises(ValueError, match="batch_max"):
        DatabaseThreads("test-db", 1, lambda slot: None, batch=hook, batch_max=0)
