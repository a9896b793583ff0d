"""`ChangeFeed`: one per store, wakes workers and event streams when the store changes.

It learns of changes from its own store's commits, PostgreSQL `NOTIFY`, and one poller
(with a cheap hint, SQLite's WAL `stat`) while anyone waits (ADR 0017)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from golem.durable.store.records import check_seconds

__all__ = ["ChangeFeed"]

log = logging.getLogger("golem.durable.store")

Probe = Callable[[], Awaitable[int]]

Hint = Callable[[], bool]


class ChangeFeed:
    """Change notifications of one store: `wait_for_change` for streams, `ready_mark` and
    `wait_ready` for workers."""

    def __init__(
        self,
        probe: Probe,
        poll_interval: float,
        *,
        hint: Hint | None = None,
        hint_interval: float | None = None,
    ) -> None:
        if (hint is None) != (hint_interval is None):
            raise ValueError("hint and hint_interval go together")
        self._probe = probe
        self.poll_interval = check_seconds("poll_interval", poll_interval)
        self._hint = hint
        self.hint_interval = (
            None if hint_interval is None else check_seconds("hint_interval", hint_interval)
        )
        self._last_id = 0
        self._ready = 0
        self._event = asyncio.Event()
        self._waiters = 0
        self._poller: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    @property
    def last_id(self) -> int:
        """The newest audit-log ID this feed has seen (0 before anything was seen)."""
        return self._last_id

    def ready_mark(self) -> int:
        """A mark to pass to `wait_ready`: signals counted from now on wake it."""
        return self._ready

    # ------------------------------------------------------------------ publishing

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Remember the event loop waiters run on (publishes from threads go there)."""
        if self._loop is None:
            self._loop = loop

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop waiters run on (None before the first `bind`)."""
        return self._loop

    def publish(self, last_id: int, *, ready: bool) -> None:
        """Record that the log reached `last_id` (and maybe a run became ready); wake waiters.

        Call on the feed's event loop; `publish_threadsafe` from any other thread.
        """
        self.publish_on_loop(last_id, ready)

    def publish_on_loop(self, last_id: int, ready: bool) -> None:
        """`publish` with positional arguments (a callback a database thread schedules)."""
        changed = last_id > self._last_id
        if changed:
            self._last_id = last_id
        if ready:
            self._ready += 1
        if (changed or ready) and self._waiters:  # nobody holds the event otherwise
            event, self._event = self._event, asyncio.Event()
            event.set()

    def publish_threadsafe(self, last_id: int, *, ready: bool) -> None:
        """`publish` from a thread other than the event loop's.

        A no-op while nobody waits (the next waiter reads the store anyway) or before `bind`.
        """
        loop = self._loop
        if loop is None or self._waiters == 0 or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(self.publish_on_loop, last_id, ready)

    # ------------------------------------------------------------------ waiting

    async def wait_for_change(self, after: int, timeout: float) -> int:
        """Wait until the audit log's newest ID exceeds `after`, or `timeout` seconds.

        Returns the newest ID known (which is `<= after` on a timeout).
        """
        await self._wait(lambda: self._last_id > after, timeout)
        return self._last_id

    async def wait_ready(self, mark: int, timeout: float) -> bool:
        """Wait for a ready signal newer than `mark` (from `ready_mark`), or `timeout` seconds.

        Returns True when signalled. Polling backends signal on any change of the log.
        """
        await self._wait(lambda: self._ready > mark, timeout)
        return self._ready > mark

    async def _wait(self, done: Callable[[], bool], timeout: float) -> None:
        """Wait, as one more waiter (the poller runs while there are any), until `done()`
        or `timeout` seconds."""
        loop = asyncio.get_running_loop()
        self.bind(loop)
        self._waiters += 1
        if self._poller is None or self._poller.done():
            self._poller = loop.create_task(self._poll(), name="golem-store-poller")
        try:
            async with asyncio.timeout(max(0.0, timeout)):
                while not done():
                    await self._event.wait()
        except TimeoutError:
            pass
        finally:
            self._waiters -= 1

    async def _poll(self) -> None:
        """The shared poller: while anyone waits, probe every `poll_interval`, and sooner
        when the hint (looked at every `hint_interval`) says the database changed."""
        loop = asyncio.get_running_loop()
        hint = self._hint
        step = self.poll_interval if self.hint_interval is None else self.hint_interval
        due = loop.time()  # of the next probe the hint cannot skip
        while self._waiters > 0 and not self._closed:
            now = loop.time()
            if now >= due or (hint is not None and _hinted(hint)):
                due = now + self.poll_interval
                try:
                    newest = await self._probe()
                except Exception:  # the store is closing or the database hiccupped: retry
                    log.debug("change feed probe failed", exc_info=True)
                else:
                    if newest > self._last_id:
                        self.publish(newest, ready=True)
            await asyncio.sleep(min(step, max(0.0, due - loop.time())))

    async def aclose(self) -> None:
        """Stop the poller; waiters wake at their timeouts."""
        self._closed = True
        poller, self._poller = self._poller, None
        if poller is not None and not poller.done():
            poller.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await poller


def _hinted(hint: Hint) -> bool:
    try:
        return hint()
    except Exception:  # a hint that cannot tell says "maybe": the probe decides
        log.debug("change feed hint failed", exc_info=True)
        return True
