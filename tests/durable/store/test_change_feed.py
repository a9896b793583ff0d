"""SQLite's change feed: a commit's publish travels with the transaction's result; other processes'
commits wake waiters through the write-ahead log, between polls."""

from __future__ import annotations

import asyncio
import contextlib
import math
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from golem.durable.store import CallKind, ChangeFeed, Decision, NewCall, NewRun
from golem.durable.store.sqlite import SQLiteStore
from tests.support.durable.procs import eventually

pytestmark = pytest.mark.loop

WAIT = 30.0  # a guard against a hang, never a duration the test asserts
HOUR = 3600.0


async def _true(value: bool) -> bool:
    return value


def _run(run_id: str) -> NewRun:
    call = NewCall("c1", CallKind.APPROVAL, "pay", "{}", "money")
    return NewRun(run_id, "bank", "conv-" + run_id, "[]", calls=(call,), started_by="t")


async def _waiting(feed: ChangeFeed, n: int = 1) -> None:
    await eventually(lambda: _true(feed._waiters >= n), WAIT, "the waiter to wait")


# ---------------------------------------------------------------------------- the log


async def test_every_commit_of_another_connection_wakes_a_waiter_checkpoints_included(
    tmp_path: Path,
) -> None:
    """With an hour between polls, only the write-ahead log's watch can wake the waiter: each
    commit of another store is seen, also after a checkpoint started the log over."""
    db = tmp_path / "h.db"
    mine = await SQLiteStore.open(db, poll_interval=HOUR, watch_interval=0.001)
    theirs = await SQLiteStore.open(db, poll_interval=HOUR)
    try:
        feed = mine.change_feed()
        last = await mine.last_change_id()
        for i in range(6):
            if i == 3:
                with contextlib.closing(sqlite3.connect(db)) as other:
                    assert other.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0
            waiter = asyncio.create_task(feed.wait_for_change(last, WAIT))
            await _waiting(feed)
            await theirs.save_pending(_run(f"r{i}"))
            woke = await asyncio.wait_for(waiter, WAIT)
            assert woke > last, f"commit {i} went unseen"
            last = woke
    finally:
        await theirs.close()
        await mine.close()


_CHECKPOINT = textwrap.dedent(
    """
    import sqlite3, sys
    conn = sqlite3.connect(sys.argv[1])
    print(conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0])
    """
)


async def test_the_watch_leaves_sqlites_locks_alone(tmp_path: Path) -> None:
    """Closing any descriptor of a file drops every POSIX lock the process holds on it. A
    watch that opened SQLite's files would release the locks of this process's connections:
    here a reader's, and another process could then reset the log under that reader."""
    db = tmp_path / "locks.db"
    store = await SQLiteStore.open(db, poll_interval=HOUR, watch_interval=0.001)
    reader = sqlite3.connect(db, isolation_level=None)
    try:
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM golem_runs").fetchall()  # holds a read lock
        await store.save_pending(_run("r1"))  # frames the reader's snapshot must not lose
        feed = store.change_feed()
        start = await store.last_change_id()
        for _ in range(3):  # looks and queries, as the poller makes them
            store._wal_watch.changed()
            await store._probe()
        waiter = asyncio.create_task(feed.wait_for_change(start, 0.2))
        await asyncio.wait_for(waiter, WAIT)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _CHECKPOINT, str(db), stdout=subprocess.PIPE
        )
        out, _ = await asyncio.wait_for(proc.communicate(), WAIT)
        assert proc.returncode == 0
        assert out.strip() == b"1", "the checkpoint got past the reader: its lock was dropped"
        assert reader.execute("SELECT count(*) FROM golem_runs").fetchone() == (0,)
    finally:
        reader.close()
        await store.close()


@pytest.mark.parametrize("bad", [0, -1.0, math.nan])
def test_a_watch_or_hint_interval_must_be_positive_and_a_hint_needs_one(
    tmp_path: Path, bad: float
) -> None:
    async def probe() -> int:
        return 0

    with pytest.raises(ValueError, match="watch_interval"):
        SQLiteStore(tmp_path / "x.db", watch_interval=bad)
    with pytest.raises(ValueError, match="hint_interval"):
        ChangeFeed(probe, 1.0, hint=lambda: True, hint_interval=bad)
    with pytest.raises(ValueError, match="go together"):
        ChangeFeed(probe, 1.0, hint=lambda: True)


# ---------------------------------------------------------------------------- the feed


async def test_the_feed_has_seen_a_commit_when_the_call_returns(tmp_path: Path) -> None:
    store = await SQLiteStore.open(tmp_path / "s.db", poll_interval=HOUR)
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

    feed = ChangeFeed(probe, HOUR)
    feed.publish(5, ready=True)
    feed.publish(3, ready=False)  # older than what was seen: ignored
    assert feed.last_id == 5
    assert feed.ready_mark() == 1
    assert await asyncio.wait_for(feed.wait_for_change(4, WAIT), WAIT) == 5
    assert await asyncio.wait_for(feed.wait_ready(0, WAIT), WAIT) is True
    await feed.aclose()


async def test_the_poller_probes_only_when_the_hint_says_so() -> None:
    probes = 0
    probed = asyncio.Event()
    looks = 0
    looked = asyncio.Event()
    answers: list[bool | Exception] = []

    async def probe() -> int:
        nonlocal probes
        probes += 1
        probed.set()
        return probes

    def hint() -> bool:
        nonlocal looks
        looks += 1
        looked.set()
        answer = answers.pop(0) if answers else False
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def looks_at(n: int) -> None:
        while looks < n:
            looked.clear()
            await looked.wait()

    feed = ChangeFeed(probe, HOUR, hint=hint, hint_interval=0.001)
    waiter = asyncio.create_task(feed.wait_for_change(10**9, WAIT))
    try:
        await asyncio.wait_for(probed.wait(), WAIT)  # the first probe cannot be skipped
        assert probes == 1
        await asyncio.wait_for(looks_at(looks + 5), WAIT)
        assert probes == 1, "an unchanged hint skips the probe"
        probed.clear()
        answers.append(True)
        await asyncio.wait_for(probed.wait(), WAIT)
        assert probes == 2
        probed.clear()
        answers.append(OSError("cannot tell"))  # a failing hint means "maybe"
        await asyncio.wait_for(probed.wait(), WAIT)
        assert probes == 3
        assert feed.last_id == 3
    finally:
        waiter.cancel()
        await feed.aclose()


async def test_without_the_watch_a_waiter_sleeps_until_the_poll(tmp_path: Path) -> None:
    """The contrast: with the watch off and an hour between polls, nothing wakes it."""
    mine = await SQLiteStore.open(tmp_path / "n.db", poll_interval=HOUR, watch_interval=None)
    theirs = await SQLiteStore.open(tmp_path / "n.db", poll_interval=HOUR)
    try:
        feed = mine.change_feed()
        probe, probed = feed._probe, asyncio.Event()

        async def first_probe() -> int:
            try:
                return await probe()
            finally:
                probed.set()

        feed._probe = first_probe
        start = await mine.last_change_id()
        waiter = asyncio.create_task(feed.wait_for_change(start, 0.5))
        # the poller's first probe is answered before the other store commits: a probe
        # still on its way (a slow thread) would see that commit and wake the waiter
        await asyncio.wait_for(probed.wait(), WAIT)
        await theirs.save_pending(_run("r1"))
        assert await asyncio.wait_for(waiter, WAIT) == start  # timed out, unwoken
    finally:
        await theirs.close()
        await mine.close()


_WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from golem.durable.store import CallKind, NewCall, NewRun
    from golem.durable.store.sqlite import SQLiteStore

    async def main() -> None:
        store = await SQLiteStore.open(sys.argv[1])
        call = NewCall("c1", CallKind.APPROVAL, "pay", "{}", "money")
        await store.save_pending(NewRun("p1", "bank", "conv", "[]", calls=(call,), started_by="p"))
        print(await store.last_change_id())
        await store.close()

    asyncio.run(main())
    """
)


async def test_a_commit_in_another_process_wakes_every_waiter_between_polls(
    tmp_path: Path,
) -> None:
    db = tmp_path / "p.db"
    mine = await SQLiteStore.open(db, poll_interval=HOUR, watch_interval=0.01)
    try:
        feed = mine.change_feed()
        start = await mine.last_change_id()
        waiters = [asyncio.create_task(feed.wait_for_change(start, WAIT)) for _ in range(3)]
        await _waiting(feed, 3)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _WRITER, str(db), stdout=subprocess.PIPE
        )
        out, _ = await asyncio.wait_for(proc.communicate(), WAIT)
        assert proc.returncode == 0
        assert await asyncio.wait_for(asyncio.gather(*waiters), WAIT) == [int(out)] * 3
    finally:
        await mine.close()
