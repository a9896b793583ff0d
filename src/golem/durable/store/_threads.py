"""`DatabaseThreads`: threads running a store's transactions from one queue, answering
through one event-loop inbox; with a batch hook, queued jobs run in one bracket (ADR 0036)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import copy
import functools
import queue
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["Batch", "DatabaseThreads", "Slot"]

_S = TypeVar("_S")

_Item = tuple[Callable[..., object], tuple[Any, ...]]


class _Inbox:
    """What database threads finished for one event loop, settled there in one callback."""

    __slots__ = ("_armed", "_items", "_lock", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._items: collections.deque[_Item] = collections.deque()
        self._lock = threading.Lock()
        self._armed = False

    def put(self, items: list[_Item]) -> None:
        """Queue `items` for the loop (any thread); wake it unless a drain is pending."""
        self._items.extend(items)
        with self._lock:
            if self._armed:
                return
            self._armed = True
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
            self.loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        with self._lock:  # from here on, a new item schedules a new drain
            self._armed = False
        items = self._items
        while items:
            fn, args = items.popleft()
            try:
                fn(*args)
            except Exception as exc:  # one failing callback must not strand the rest
                self.loop.call_exception_handler(
                    {"message": "golem: a database thread's callback failed", "exception": exc}
                )


class Slot(Generic[_S]):
    """What one database thread keeps between jobs (its connection, once opened)."""

    __slots__ = ("_after", "_loop", "state")

    def __init__(self) -> None:
        self.state: _S | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._after: list[_Item] = []

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop of the job running now (None between jobs)."""
        return self._loop

    def on_loop(self, fn: Callable[..., object], *args: Any) -> None:
        """From inside a job: call `fn(*args)` on the job's event loop, just before the
        job's result is settled there (the same wake-up delivers both)."""
        self._after.append((fn, args))


_Job = tuple[_Inbox, "asyncio.Future[Any]", Callable[[Slot[Any]], Any]]

Batch = Callable[[Slot[_S], list[Callable[[], None]]], None]


class DatabaseThreads(Generic[_S]):
    """Up to `size` threads taking jobs `fn(slot)` from one queue, started when all are busy."""

    def __init__(
        self,
        name: str,
        size: int,
        close: Callable[[Slot[_S]], None],
        *,
        batch: Batch[_S] | None = None,
        batch_max: int = 32,
    ) -> None:
        if batch_max < 1:
            raise ValueError(f"batch_max must be >= 1, got {batch_max!r}")
        self._name = name
        self._size = size
        self._close = close
        self._batch = batch
        self._batch_max = batch_max
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._idle = 0
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._stopped = False
        self._inbox: _Inbox | None = None

    def submit(
        self, loop: asyncio.AbstractEventLoop, fn: Callable[[Slot[_S]], Any]
    ) -> asyncio.Future[Any]:
        """Queue `fn(slot)` for a thread; the returned future settles on `loop`."""
        if self._stopped:
            raise RuntimeError(f"{self._name}: the database threads were stopped")
        inbox = self._inbox
        if inbox is None or inbox.loop is not loop:
            inbox = self._inbox = _Inbox(loop)
        future: asyncio.Future[Any] = loop.create_future()
        self._jobs.put((inbox, future, fn))
        with self._lock:
            if self._idle > 0:
                self._idle -= 1
                return future
            if len(self._threads) >= self._size:
                return future
            thread = threading.Thread(
                target=self._main, name=f"{self._name}-{len(self._threads)}", daemon=True
            )
            thread.start()
            self._threads.append(thread)
        return future

    def stop(self) -> None:
        """Let the threads finish the queued jobs, then end (each closes its slot)."""
        if self._stopped:
            return
        self._stopped = True
        for _ in self._threads:
            self._jobs.put(None)

    def join(self) -> None:
        """Wait for every thread to end (after `stop`)."""
        for thread in self._threads:
            thread.join()

    def _main(self) -> None:
        slot: Slot[_S] = Slot()
        jobs = self._jobs
        batched = self._batch is not None
        try:
            while (job := jobs.get()) is not None:
                if not batched or jobs.empty():  # a lone job: no bracket around it
                    self._run(job, slot)
                    del job  # nothing of a finished job stays alive on this thread
                    continue
                batch = [job]
                del job
                stop = False
                while len(batch) < self._batch_max:
                    try:
                        more = jobs.get_nowait()
                    except queue.Empty:
                        break
                    if more is None:  # stop() was called: finish this batch, then end
                        stop = True
                        break
                    batch.append(more)
                if len(batch) == 1:
                    self._run(batch[0], slot)
                else:
                    self._run_batch(batch, slot)
                del batch
                if stop:
                    break
        finally:
            self._close(slot)

    def _run(self, job: _Job, slot: Slot[_S]) -> None:
        outcome = _call(job, slot)
        with self._lock:  # idle before the caller hears back: its next job needs no thread
            self._idle += 1
        if outcome is not None:
            inbox, future, _fn = job
            result, error, items = outcome
            items.append((_settle, (future, result, error)))
            inbox.put(items)

    def _run_batch(self, batch: list[_Job], slot: Slot[_S]) -> None:
        outcomes: list[_Outcome | None] = [None] * len(batch)

        def step(i: int) -> None:  # a job run before (a hook's retry) runs again, taken
            outcomes[i] = _call(batch[i], slot, taken=outcomes[i] is not None)

        failure: BaseException | None = None
        assert self._batch is not None
        try:
            self._batch(slot, [functools.partial(step, i) for i in range(len(batch))])
        except BaseException as exc:  # the bracket failed: no job of the batch counts
            failure = exc
        slot._after = []
        with self._lock:  # idle before the callers hear back: their next jobs need no thread
            self._idle += len(batch)
        by_inbox: dict[int, tuple[_Inbox, list[_Item]]] = {}
        for (inbox, future, _fn), outcome in zip(batch, outcomes, strict=True):
            if failure is None and outcome is None:
                continue  # skipped: its caller was cancelled
            entry = by_inbox.get(id(inbox))
            if entry is None:
                entry = by_inbox[id(inbox)] = (inbox, [])
            if failure is not None:
                entry[1].append((_settle, (future, None, _own_copy(failure))))
            else:
                assert outcome is not None
                result, error, items = outcome
                entry[1].extend(items)
                entry[1].append((_settle, (future, result, error)))
        for inbox, items in by_inbox.values():
            inbox.put(items)


_Outcome = tuple[Any, BaseException | None, list[_Item]]


def _call(job: _Job, slot: Slot[Any], *, taken: bool = False) -> _Outcome | None:
    """Run `job` on `slot` unless its caller was cancelled before it was `taken` (then None:
    it never ran)."""
    inbox, future, fn = job
    if not taken and future.cancelled():
        return None
    result: Any = None
    error: BaseException | None = None
    slot._loop = inbox.loop
    try:
        result = fn(slot)
    except BaseException as exc:  # delivered to the caller, never lost here
        error = exc
    finally:
        slot._loop = None
    items, slot._after = slot._after, []
    return result, error, items


def _own_copy(error: BaseException) -> BaseException:
    """`error` for one more caller: a copy with the same cause and traceback, so callers that
    re-raise it do not extend each other's traceback (`error` itself if it cannot be copied)."""
    try:
        mine = copy.copy(error)
    except Exception:
        return error
    mine.__cause__, mine.__context__ = error.__cause__, error.__context__
    mine.__suppress_context__ = error.__suppress_context__
    return mine.with_traceback(error.__traceback__)


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.cancelled():
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)
