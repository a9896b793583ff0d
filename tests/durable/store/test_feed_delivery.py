"""SQLite: a commit's change-feed publish travels with the transaction's result."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from golem.durable.store import CallKind, ChangeFeed, Decision, NewCall, NewRun
from golem.durable.store.sqlite import SQLiteStore
from tests.support.durable.wakes import counting_wake_ups

pytestmark = pytest.mark.loop

WAIT = 30.0  # a guard against a hang, not a duration the test asserts


def _run(run_id: str) -> NewRun:
    call = NewCall("c1", CallKind.APPROVAL, "pay", "{}", "money")
    return NewRun(run_id, "bank", "conv-" + run_id, "[]", calls=(call,), started_by="t")


async def test_the_feed_has_seen_a_commit_when_the_call_returns(tmp_path: Path) -> None:
    store = await SQLiteStore.open(tmp_path / "s.db", poll_interval=3600)
    try:
        feed = store.change_feed()
        mark = feed.ready_mark()
        await store.save_pending(_run("r1"))
        assert feed.last_id == await store.last_change_id()  # nobody waits: still recorded
        await store.decide("r1", "c1", Decision.approve(), decided_by="ann")
        assert feed.last_id == await store.last_change_id()
        assert feed.ready_mark() > mark
        # a waiter arriving later with an older mark returns at once, without a poll
        assert await asyncio.wait_for(feed.wait_ready(mark, WAIT), WAIT) is True
    finally:
        await store.close()


async def test_a_waited_on_commit_costs_one_wake_up_of_the_loop(tmp_path: Path) -> None:
    # Only the decision may hand the loop anything while it is counted: no log watch (its
    # look every 50 ms, come during a decision slowed by a loaded machine, asked the
    # database again: a second wake-up), and the waiter's poller has finished its first
    # probe (whose answer came in during the count when that thread was slow).
    store = await SQLiteStore.open(tmp_path / "s.db", poll_interval=3600, watch_interval=None)
    loop = asyncio.get_running_loop()
    try:
        feed = store.change_feed()
        probe, probed = feed._probe, asyncio.Event()

        async def first_probe() -> int:
            try:
                return await probe()
            finally:
                probed.set()

        feed._probe = first_probe
        await store.save_pending(_run("r1"))
        mark = feed.ready_mark()
        waiter = asyncio.create_task(feed.wait_ready(mark, WAIT))
        await asyncio.wait_for(probed.wait(), WAIT)  # the poller asked, and heard back
        with counting_wake_ups(loop) as wakes:
            await store.decide("r1", "c1", Decision.approve(), decided_by="ann")
        assert await asyncio.wait_for(waiter, WAIT) is True
        assert len(wakes) == 1, "the publish rides with the decision's result"
    finally:
        await store.close()


async def test_publishing_without_waiters_keeps_the_counts() -> None:
    async def probe() -> int:
        return 0

    feed = ChangeFeed(probe, 3600)
    feed.publish(5, ready=True)
    feed.publish(3, ready=False)  # older than what was seen: ignored
    assert feed.last_id == 5
    assert feed.ready_mark() == 1
    assert await asyncio.wait_for(feed.wait_for_change(4, WAIT), WAIT) == 5
    assert await asyncio.wait_for(feed.wait_ready(0, WAIT), WAIT) is True
    await feed.aclose()
