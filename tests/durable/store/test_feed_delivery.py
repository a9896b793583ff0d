"""SQLite: a commit's change-feed publish travels with the transaction's result."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from golem.durable.store import CallKind, ChangeFeed, Decision, NewCall, NewRun
from golem.durable.store.sqlite import SQLiteStore

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
