"""`SQLiteStore`: the embedded default store (stdlib `sqlite3`, one file, WAL).

Several processes may use one database file: WAL lets readers proceed while one writer
commits, every writing transaction starts with `BEGIN IMMEDIATE` (so a claim or decision
takes the write lock before it reads what it will change), and a busy timeout makes
contending writers wait instead of failing.

No statement runs on the event loop. The store owns two threads, each with its own
connection: a **writer** that runs the writing transactions one after another, and a
**reader** for listings and lookups (WAL readers never wait for the writer). Each store
method is one transaction that the thread runs to its end — commit, or rollback on an
error — so cancelling the awaiting task never leaves a transaction open or the write lock
held; the operation then either happened completely or not at all.

SQLite has no notifications: the store's `ChangeFeed` polls the newest audit ID with one
shared poller (every `poll_interval` seconds while anyone waits), and commits of this
store wake this process's waiters at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import queue
import sqlite3
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from golem.errors import StoreError
from golem.store._feed import ChangeFeed
from golem.store._schema import migrate
from golem.store._sql import Later, SQLStore, Stats, Tx

__all__ = ["SQLiteStore"]

_T = TypeVar("_T")


class _Conn:
    """The `Conn` port over one `sqlite3` connection (used on its thread only)."""

    __slots__ = ("_conn", "_stats", "trace")

    def __init__(
        self,
        conn: sqlite3.Connection,
        stats: Stats,
        trace: list[tuple[str, tuple[Any, ...]]] | None = None,
    ) -> None:
        self._conn = conn
        self._stats = stats
        self.trace = trace

    def fetch(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        self._stats.statements += 1
        if self.trace is not None:
            self.trace.append((sql, tuple(params)))
        return self._conn.execute(sql, params).fetchall()

    def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        self._stats.statements += 1
        if self.trace is not None:
            self.trace.append((sql, tuple(params)))
        return self._conn.execute(sql, params).rowcount

    def run(self, sql: str, params: Sequence[Any] = (), conflict: Exception | None = None) -> None:
        self._stats.statements += 1
        if self.trace is not None:
            self.trace.append((sql, tuple(params)))
        try:
            self._conn.execute(sql, params)
        except sqlite3.IntegrityError as exc:
            if conflict is not None and exc.sqlite_errorcode in _UNIQUE:
                raise conflict from None
            raise

    def later(self, sql: str, params: Sequence[Any] = ()) -> Later:
        return Later(self.fetch(sql, params))


_UNIQUE = frozenset({sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY, sqlite3.SQLITE_CONSTRAINT_UNIQUE})


class _Thread:
    """One connection and the one thread that uses it, fed through a queue.

    Lighter than a `ThreadPoolExecutor` plus `wrap_future`: a job is one queue put and one
    `call_soon_threadsafe` back. A job whose caller was cancelled before the thread took it
    is skipped (it did not happen); a job the thread took runs to its end.
    """

    def __init__(self, name: str) -> None:
        self.conn: _Conn | None = None
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._started = False
        self._name = name

    def submit(self, loop: asyncio.AbstractEventLoop, fn: Callable[[], Any]) -> asyncio.Future[Any]:
        if not self._started:
            self._started = True
            self._thread.start()
        future: asyncio.Future[Any] = loop.create_future()
        self._jobs.put((loop, future, fn))
        return future

    def stop(self) -> None:
        """Let the thread finish the queued jobs, then end (no-op when never started)."""
        if self._started:
            self._jobs.put(None)

    def join(self) -> None:
        if self._started:
            self._thread.join()

    def _main(self) -> None:
        while (job := self._jobs.get()) is not None:
            loop, future, fn = job
            if future.cancelled():
                continue
            try:
                result = fn()
            except BaseException as exc:  # delivered to the caller, never lost here
                _deliver(loop, future, None, exc)
            else:
                _deliver(loop, future, result, None)
        _close(self)


_Job = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[[], Any]]


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


class SQLiteStore(SQLStore):
    """A `Store` in one SQLite database file, safe for several processes.

    `SQLiteStore(path)` opens lazily on first use; `await SQLiteStore.open(path)` opens
    (and creates or migrates the schema) immediately, surfacing errors there.

    Args:
        path: the database file (created with its schema when missing; its directory must
            exist). `:memory:` is rejected: no other process or connection could see it.
        busy_timeout: seconds a writer waits for another process's write lock before the
            operation fails with `StoreError`.
        poll_interval: seconds between the change feed's checks for changes made by other
            processes (only while a worker or event stream waits).

    Raises:
        ValueError: `path` is empty or `:memory:`, `busy_timeout` is negative or
            `poll_interval` is not positive.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout: float = 30.0,
        poll_interval: float = 0.25,
    ) -> None:
        text = os.fspath(path)
        if not text or text == ":memory:" or text.startswith("file::memory:"):
            raise ValueError(f"SQLiteStore needs a database file path, got {text!r}")
        if busy_timeout < 0:
            raise ValueError(f"busy_timeout must be >= 0, got {busy_timeout!r}")
        self.path = Path(text)
        self.busy_timeout = float(busy_timeout)
        self.stats = Stats()
        self.trace: list[tuple[str, tuple[Any, ...]]] | None = None
        """When a list before first use: every statement the store runs, with its parameters
        (benchmarks replay them with raw `sqlite3` to measure the floor)."""
        self._feed = ChangeFeed(self._probe, poll_interval)
        self._writer = _Thread("golem-sqlite-w")
        self._reader = _Thread("golem-sqlite-r")
        self._migrated = False
        self._closed = False

    @classmethod
    async def open(
        cls,
        path: str | os.PathLike[str],
        *,
        busy_timeout: float = 30.0,
        poll_interval: float = 0.25,
    ) -> SQLiteStore:
        """Open the database now, creating or migrating its schema.

        Raises:
            StoreError: the file cannot be opened or its schema is newer than this golem.
        """
        store = cls(path, busy_timeout=busy_timeout, poll_interval=poll_interval)
        try:
            await store.schema_version()
        except BaseException:
            await store.close()
            raise
        return store

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"

    # ------------------------------------------------------------------ threads

    async def _submit(self, write: bool, fn: Callable[..., _T], *args: Any) -> _T:
        if self._closed:
            raise StoreError(f"{self!r} is closed")
        loop = asyncio.get_running_loop()
        self._feed.bind(loop)
        as_writer = write or not self._migrated
        thread = self._writer if as_writer else self._reader
        result: _T = await thread.submit(
            loop, functools.partial(self._transact, thread, as_writer, fn, args)
        )
        return result

    def _transact(self, thread: _Thread, write: bool, fn: Callable[..., _T], args: Any) -> _T:
        """Run `fn` in one transaction on `thread` (the thread itself calls this)."""
        try:
            conn = thread.conn or self._connect(thread)
            raw = conn._conn
            if raw.in_transaction:  # never expected: every path below ends the transaction
                raw.execute("ROLLBACK")
            begin = "BEGIN IMMEDIATE" if write else "BEGIN"
            raw.execute(begin)
            self.stats.transactions += 1
            if conn.trace is not None:
                conn.trace.append((begin, ()))
            tx = Tx(conn)
            try:
                result = fn(tx, *args)
                if tx.entries:
                    self._flush_audit(tx)
                raw.execute("COMMIT")
                if conn.trace is not None:
                    conn.trace.append(("COMMIT", ()))
            except BaseException:
                if raw.in_transaction:
                    raw.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite ({self.path}): {exc}") from exc
        if write:
            self.stats.commits += 1
        if tx.last_id:
            self._feed.publish_threadsafe(tx.last_id, ready=tx.ready)
        return result

    def _connect(self, thread: _Thread) -> _Conn:
        if not self.path.parent.is_dir():
            raise StoreError(
                f"cannot open {self.path}: directory {self.path.parent} does not exist"
            )
        raw = sqlite3.connect(
            self.path,
            timeout=self.busy_timeout,
            isolation_level=None,  # explicit BEGIN / COMMIT only
            check_same_thread=False,  # used from the store's own thread only
            cached_statements=256,
        )
        try:
            mode = raw.execute("PRAGMA journal_mode = WAL").fetchone()
            if mode is None or str(mode[0]).lower() != "wal":
                raise sqlite3.OperationalError(
                    f"could not switch {self.path} to WAL mode (got {mode})"
                )
            raw.execute("PRAGMA synchronous = NORMAL")
            raw.execute("PRAGMA foreign_keys = ON")
            if not self._migrated:
                raw.execute("BEGIN IMMEDIATE")
                try:
                    migrate(_Conn(raw, self.stats), "sqlite", self._to_db(datetime.now(UTC)))
                except BaseException:
                    raw.execute("ROLLBACK")
                    raise
                raw.execute("COMMIT")
                self._migrated = True
        except BaseException:
            raw.close()
            raise
        thread.conn = _Conn(raw, self.stats, self.trace)
        return thread.conn

    # ------------------------------------------------------------------ SQLStore hooks

    def _flush_audit(self, tx: Tx) -> None:
        rows = self._audit_params(tx)
        values = ", ".join(["(?, ?, ?, ?, ?)"] * len(rows))
        ids = tx.fetch(
            f"INSERT INTO golem_audit (run_id, at, actor, action, detail) VALUES {values} "
            "RETURNING id",
            [v for row in rows for v in row],
        )
        tx.last_id = max(int(r[0]) for r in ids)

    def _last_change_id(self, tx: Tx) -> int:
        return int(tx.fetch("SELECT COALESCE(MAX(id), 0) FROM golem_audit")[0][0])

    async def _probe(self) -> int:
        return await self._submit(False, self._last_change_id)

    def _to_db(self, value: datetime) -> str:
        if value.utcoffset():
            value = value.astimezone(UTC)
        return value.replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"

    def _from_db(self, value: Any) -> datetime:
        return datetime.fromisoformat(value)  # always written by _to_db (UTC, "Z")

    async def close(self) -> None:
        """Finish queued transactions, then close both connections and threads."""
        if self._closed:
            return
        self._closed = True
        await self._feed.aclose()
        for thread in (self._writer, self._reader):
            thread.stop()
        await asyncio.to_thread(_join, self._writer, self._reader)


def _join(*threads: _Thread) -> None:
    for thread in threads:
        thread.join()


def _close(thread: _Thread) -> None:
    conn, thread.conn = thread.conn, None
    if conn is not None:
        conn._conn.close()
