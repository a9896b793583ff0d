"""`DatabaseThreads`: the threads a store runs its transactions on, fed through one queue.

Lighter than a `ThreadPoolExecutor` plus `asyncio.wrap_future`: handing a job over is one
queue put, and the answer comes back with one `call_soon_threadsafe` (no concurrent
future, no callbacks chained between two futures). Each thread keeps its own state (its
database connection) in a `Slot` for its whole life, so a connection is only ever used by
the thread that opened it.

A job whose caller was cancelled before a thread took it is skipped (it did not happen);
a job a thread took runs to its end, whoever still waits for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["DatabaseThreads", "Slot"]

_S = TypeVar("_S")


class Slot(Generic[_S]):
    """What one database thread keeps between jobs (its connection, once opened)."""

    __slots__ = ("state",)

    def __init__(self) -> None:
        self.state: _S | None = None


_Job = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[[Slot[Any]], Any]]


class DatabaseThreads(Generic[_S]):
    """Up to `size` threads taking jobs `fn(slot)` from one queue, started when needed.

    A thread starts only when a job is submitted while every running thread is busy, so a
    store used by one task at a time keeps one thread (and one connection). `close(slot)`
    runs on each thread as it ends, to release what its slot holds.
    """

    def __init__(self, name: str, size: int, close: Callable[[Slot[_S]], None]) -> None:
        self._name = name
        self._size = size
        self._close = close
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._idle = 0
        """Threads waiting for a job that no submitted job has claimed yet."""
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._stopped = False

    def submit(
        self, loop: asyncio.AbstractEventLoop, fn: Callable[[Slot[_S]], Any]
    ) -> asyncio.Future[Any]:
        """Queue `fn(slot)` for a thread; the returned future settles on `loop`."""
        if self._stopped:
            raise RuntimeError(f"{self._name}: the database threads were stopped")
        future: asyncio.Future[Any] = loop.create_future()
        self._jobs.put((loop, future, fn))
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
        try:
            while (job := jobs.get()) is not None:
                self._run(job, slot)
                del job  # nothing of a finished job stays alive on this thread
        finally:
            self._close(slot)

    def _run(self, job: _Job, slot: Slot[_S]) -> None:
        loop, future, fn = job
        result: Any = None
        error: BaseException | None = None
        ran = not future.cancelled()
        if ran:
            try:
                result = fn(slot)
            except BaseException as exc:  # delivered to the caller, never lost here
                error = exc
        with self._lock:  # idle before the caller hears back: its next job needs no thread
            self._idle += 1
        if ran:
            _deliver(loop, future, result, error)


def _deliver(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[Any],
    result: Any,
    exc: BaseException | None,
) -> None:
    def settle() -> None:
        if future.cancelled():
            return
        if exc is None:
            future.set_result(result)
        else:
            future.set_exception(exc)

    with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
        loop.call_soon_threadsafe(settle)
