"""`SQLiteStore`: the embedded default store (stdlib `sqlite3`, one file, WAL).

Several processes may use one database file: WAL lets readers proceed while one writer
commits, every writing transaction starts with `BEGIN IMMEDIATE` (so a claim or decision
takes the write lock before it reads what it will change), and a busy timeout makes
contending writers wait instead of failing. The schema is created or migrated when the
store opens. Statements run inline (microseconds each); only waiting for a write lock that
another process holds happens on a helper thread, so the event loop never blocks on a lock.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from golem.errors import StoreError
from golem.store._schema import migrate
from golem.store._sql import SQLStore

__all__ = ["SQLiteStore"]

_T = TypeVar("_T")
_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


class _Conn:
    """The `Conn` port over the store's connection.

    Statements run inline: inside a transaction that already holds its locks each takes
    microseconds, and a thread hop per statement would cost more than the statement.
    """

    def __init__(self, store: SQLiteStore) -> None:
        self._store = store

    async def fetch(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self._store._inline(_fetch, sql, params)

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        return self._store._inline(_execute, sql, params)


def _fetch(conn: sqlite3.Connection, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    return conn.execute(sql, tuple(params)).fetchall()


def _execute(conn: sqlite3.Connection, sql: str, params: Sequence[Any]) -> int:
    return conn.execute(sql, tuple(params)).rowcount


class SQLiteStore(SQLStore):
    """A `Store` in one SQLite database file, safe for several processes.

    `SQLiteStore(path)` opens lazily on first use; `await SQLiteStore.open(path)` opens
    (and creates or migrates the schema) immediately, surfacing errors there.

    Args:
        path: the database file (created with its schema when missing; its directory must
            exist). `:memory:` is rejected: no other process or connection could see it.
        busy_timeout: seconds a writer waits for another process's write lock before the
            operation fails with `StoreError`.

    Raises:
        ValueError: `path` is empty or `:memory:`, or `busy_timeout` is negative.
    """

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout: float = 30.0) -> None:
        text = os.fspath(path)
        if not text or text == ":memory:" or text.startswith("file::memory:"):
            raise ValueError(f"SQLiteStore needs a database file path, got {text!r}")
        if busy_timeout < 0:
            raise ValueError(f"busy_timeout must be >= 0, got {busy_timeout!r}")
        self.path = Path(text)
        self.busy_timeout = float(busy_timeout)
        self._busy_ms = int(self.busy_timeout * 1000)
        self._conn: sqlite3.Connection | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._lock = asyncio.Lock()
        self._closed = False

    @classmethod
    async def open(cls, path: str | os.PathLike[str], *, busy_timeout: float = 30.0) -> SQLiteStore:
        """Open the database now, creating or migrating its schema.

        Raises:
            StoreError: the file cannot be opened or its schema is newer than this golem.
        """
        store = cls(path, busy_timeout=busy_timeout)
        try:
            async with store._lock:
                await store._ensure_open()
        except BaseException:
            await store.close()
            raise
        return store

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"

    # ------------------------------------------------------------------ thread plumbing

    async def _call(self, fn: Callable[..., _T], *args: Any) -> _T:
        conn, executor = self._conn, self._executor
        if conn is None or executor is None:
            raise StoreError(f"{self!r} is closed")
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(executor, fn, conn, *args)
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite ({self.path}): {exc}") from exc

    def _inline(self, fn: Callable[..., _T], *args: Any) -> _T:
        conn = self._conn
        if conn is None:
            raise StoreError(f"{self!r} is closed")
        try:
            return fn(conn, *args)
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite ({self.path}): {exc}") from exc

    async def _ensure_open(self) -> None:
        """Connect and migrate once; the caller holds `self._lock`."""
        if self._closed:
            raise StoreError(f"{self!r} is closed")
        if self._conn is not None:
            return
        if not self.path.parent.is_dir():
            raise StoreError(
                f"cannot open {self.path}: directory {self.path.parent} does not exist"
            )
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="golem-sqlite")
        loop = asyncio.get_running_loop()
        try:
            self._conn = await loop.run_in_executor(self._executor, self._connect)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open {self.path}: {exc}") from exc
        conn = _Conn(self)
        await self._call(_begin, "BEGIN IMMEDIATE")
        try:
            await migrate(conn, "sqlite", self._to_db(datetime.now(UTC)))
        except BaseException:
            await self._call(_rollback)
            raise
        await self._call(_commit)

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path,
            timeout=self.busy_timeout,
            isolation_level=None,  # explicit BEGIN / COMMIT only
            check_same_thread=False,  # used from the store's one executor thread
        )
        conn.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()
        if mode is None or str(mode[0]).lower() != "wal":
            conn.close()
            raise sqlite3.OperationalError(f"could not switch {self.path} to WAL mode (got {mode})")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        return conn

    # ------------------------------------------------------------------ SQLStore hooks

    def _transaction(self, *, write: bool) -> AbstractAsyncContextManager[_Conn]:
        return self._sqlite_transaction(write)

    @asynccontextmanager
    async def _sqlite_transaction(self, write: bool) -> AsyncIterator[_Conn]:
        async with self._lock:
            await self._ensure_open()
            conn = _Conn(self)
            if not write:  # WAL readers do not wait for writers
                self._inline(_begin, "BEGIN")
            elif not self._inline(_try_begin_immediate, self._busy_ms):
                # another process holds the write lock: wait for it off the event loop
                await self._call(_begin, "BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                self._inline(_rollback)
                raise
            self._inline(_commit)

    def _to_db(self, value: datetime) -> str:
        return value.astimezone(UTC).strftime(_FORMAT)

    def _from_db(self, value: Any) -> datetime:
        return datetime.fromisoformat(value)  # always written as _FORMAT (UTC, "Z")

    async def close(self) -> None:
        """Close the connection and its thread; the store cannot be used afterwards."""
        self._closed = True
        conn, executor = self._conn, self._executor
        self._conn = self._executor = None
        if executor is None:
            return
        if conn is not None:
            await asyncio.get_running_loop().run_in_executor(executor, conn.close)
        executor.shutdown(wait=True)


def _begin(conn: sqlite3.Connection, statement: str) -> None:
    if conn.in_transaction:  # left open by a cancelled rollback: start clean
        conn.execute("ROLLBACK")
    conn.execute(statement)


def _try_begin_immediate(conn: sqlite3.Connection, busy_ms: int) -> bool:
    """Take the write lock if it is free right now; False when another process holds it."""
    if conn.in_transaction:
        conn.execute("ROLLBACK")
    conn.execute("PRAGMA busy_timeout = 0")
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        if getattr(exc, "sqlite_errorcode", 0) & 0xFF in (
            sqlite3.SQLITE_BUSY,
            sqlite3.SQLITE_LOCKED,
        ):
            return False
        raise
    finally:
        conn.execute(f"PRAGMA busy_timeout = {busy_ms}")
    return True


def _commit(conn: sqlite3.Connection) -> None:
    conn.execute("COMMIT")


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        conn.execute("ROLLBACK")
