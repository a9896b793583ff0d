"""`SQLiteStore`: the embedded default store (stdlib `sqlite3`, one WAL file), its
transactions on a writer and a reader thread (ADR 0036, 0042, 0043)."""

from __future__ import annotations

import asyncio
import functools
import os
import sqlite3
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from golem.durable.store._base import Later, Stats, Tx
from golem.durable.store._feed import ChangeFeed
from golem.durable.store._schema import migrate
from golem.durable.store._sql import SQLStore
from golem.durable.store._threads import DatabaseThreads, Slot
from golem.durable.store.records import StoreReadOnly, check_seconds
from golem.errors import StoreError

__all__ = ["SQLiteStore"]

_T = TypeVar("_T")


class _Conn:
    """The `Conn` port over one `sqlite3` connection (used on its thread only)."""

    __slots__ = ("_conn", "_stats", "bare", "broken", "nested", "spoiled", "trace")

    def __init__(
        self,
        conn: sqlite3.Connection,
        stats: Stats,
        trace: list[tuple[str, tuple[Any, ...]]] | None = None,
    ) -> None:
        self._conn = conn
        self._stats = stats
        self.trace = trace
        self.nested = False
        self.bare = False
        self.spoiled = False
        self.broken = False

    def count(self, sql: str, params: Sequence[Any]) -> None:
        """Count a statement (and trace it, when tracing)."""
        self._stats.statements += 1
        if self.trace is not None:
            self.trace.append((sql, tuple(params)))

    def mark(self, sql: str) -> None:
        """Run a transaction-control statement (BEGIN, COMMIT, SAVEPOINT …), traced."""
        self._conn.execute(sql)
        if self.trace is not None:
            self.trace.append((sql, ()))

    def fetch(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        self.count(sql, params)
        return self._conn.execute(sql, params).fetchall()

    def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        self.count(sql, params)
        return self._conn.execute(sql, params).rowcount

    def run(self, sql: str, params: Sequence[Any] = (), conflict: Exception | None = None) -> None:
        self.count(sql, params)
        try:
            self._conn.execute(sql, params)
        except sqlite3.IntegrityError as exc:
            if conflict is not None and exc.sqlite_errorcode in _UNIQUE:
                raise conflict from None
            raise

    def later(self, sql: str, params: Sequence[Any] = ()) -> Later:
        return Later(self.fetch(sql, params))

    def require_run_changed(self, rows: Later, run_id: str, error: Exception) -> None:
        if not rows.rows:  # the statement ran already: nothing to defer
            raise error


_CHECKPOINT_PAGES = 4000

_BATCH_MAX = 32

_SAVEPOINT = "golem_job"

_UNIQUE = frozenset({sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY, sqlite3.SQLITE_CONSTRAINT_UNIQUE})

_GONE = frozenset({1032, 1544})


def _store_error(path: Path, exc: sqlite3.Error) -> StoreError:
    """`StoreReadOnly` for a write SQLite refused as read-only, else `StoreError`."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None and code & 0xFF == sqlite3.SQLITE_READONLY and code not in _GONE:
        return StoreReadOnly(f"sqlite ({path}): the database is read-only: {exc}")
    return StoreError(f"sqlite ({path}): {exc}")


class SQLiteStore(SQLStore):
    """A `Store` in one SQLite file, safe for several processes (`:memory:` is refused).

    `busy_timeout`: seconds a writer waits for another's lock; `poll_interval`: seconds between
    the feed's queries for other processes' changes; `watch_interval`: seconds between looks at
    the write-ahead log (None: none)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout: float = 30.0,
        poll_interval: float = 0.25,
        watch_interval: float | None = 0.05,
    ) -> None:
        text = os.fspath(path)
        if not text or text == ":memory:" or text.startswith("file::memory:"):
            raise ValueError(f"SQLiteStore needs a database file path, got {text!r}")
        busy_timeout = check_seconds("busy_timeout", busy_timeout, zero=True)
        if watch_interval is not None:
            watch_interval = check_seconds("watch_interval", watch_interval)
        self.path = Path(text)
        self.busy_timeout = busy_timeout
        self.stats = Stats()
        self.trace: list[tuple[str, tuple[Any, ...]]] | None = None
        self._wal_watch = _WalWatch(Path(text + "-wal"))
        self._feed = ChangeFeed(
            self._probe,
            poll_interval,
            hint=None if watch_interval is None else self._wal_watch.changed,
            hint_interval=watch_interval,
        )
        self._writer: DatabaseThreads[_Conn] = DatabaseThreads(
            "golem-sqlite-w", 1, _close, batch=self._group_commit, batch_max=_BATCH_MAX
        )
        self._reader: DatabaseThreads[_Conn] = DatabaseThreads("golem-sqlite-r", 1, _close)
        self._migrated = False
        self._closed = False
        self._last_ts: tuple[datetime | None, str] = (None, "")

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"

    # ------------------------------------------------------------------ threads

    async def _submit(self, write: bool, fn: Callable[..., _T], *args: Any) -> _T:
        if self._closed:
            raise StoreError(f"{self!r} is closed")
        loop = asyncio.get_running_loop()
        self._feed.bind(loop)
        as_writer = write or not self._migrated
        threads = self._writer if as_writer else self._reader
        result: _T = await threads.submit(
            loop, functools.partial(self._transact, as_writer, fn, args)
        )
        return result

    def _transact(self, write: bool, fn: Callable[..., _T], args: Any, slot: Slot[_Conn]) -> _T:
        """Run `fn` in one transaction on the thread owning `slot` (the thread calls this)."""
        try:
            conn = slot.state or self._connect(slot)
            if conn.nested:
                return self._in_group(conn, fn, args, slot)
            raw = conn._conn
            if raw.in_transaction:  # never expected: every path below ends the transaction
                raw.execute("ROLLBACK")
            conn.mark("BEGIN IMMEDIATE" if write else "BEGIN")
            self.stats.transactions += 1
            try:
                result, tx = self._work(conn, fn, args)
                conn.mark("COMMIT")
            except BaseException:
                if raw.in_transaction:
                    raw.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise _store_error(self.path, exc) from exc
        if write:
            self.stats.commits += 1
        if tx.last_id:
            self._publish(slot, tx, committed=True)
        return result

    def _work(self, conn: _Conn, fn: Callable[..., _T], args: Any) -> tuple[_T, Tx]:
        """Run a job's `fn` in the open transaction, then write its audit rows."""
        tx = Tx(conn)
        result = fn(tx, *args)
        if tx.entries:
            self._flush_audit(tx)
        return result, tx

    def _in_group(self, conn: _Conn, fn: Callable[..., _T], args: Any, slot: Slot[_Conn]) -> _T:
        """Run `fn` as one job of a group commit: bare on the batch's first attempt (if it
        raises, the attempt is spoiled: `_group_commit` runs the batch again), else in a
        savepoint rolled back alone if it raises. Its publish waits for the batch's commit."""
        bare = conn.bare
        if not bare:
            conn.mark(f"SAVEPOINT {_SAVEPOINT}")
        try:
            result, tx = self._work(conn, fn, args)
            if not bare:
                conn.mark(f"RELEASE {_SAVEPOINT}")
        except BaseException:
            if bare:
                conn.spoiled = True
            elif conn._conn.in_transaction:  # else SQLite rolled the whole batch back
                try:
                    conn.mark(f"ROLLBACK TO {_SAVEPOINT}")
                    conn.mark(f"RELEASE {_SAVEPOINT}")
                except BaseException:
                    conn.broken = True
                    raise
            raise
        if tx.last_id:  # delivered after the batch's COMMIT, with the job's result
            self._publish(slot, tx, committed=False)
        return result

    def _publish(self, slot: Slot[_Conn], tx: Tx, *, committed: bool) -> None:
        """Tell the change feed about `tx`'s audit rows: with the job's result when the feed
        lives on the job's loop (one wake-up for both); else at once if `committed`, or with
        the result (after the batch's commit) if not."""
        feed = self._feed
        if slot.loop is feed.loop:
            slot.on_loop(feed.publish_on_loop, tx.last_id, tx.ready)
        elif committed:
            feed.publish_threadsafe(tx.last_id, ready=tx.ready)
        else:
            slot.on_loop(functools.partial(feed.publish_threadsafe, ready=tx.ready), tx.last_id)

    def _group_commit(self, slot: Slot[_Conn], steps: list[Callable[[], None]]) -> None:
        """Run queued write jobs in one transaction: first without savepoints, and when one
        raises, again with a savepoint per job (ADR 0043)."""
        try:
            conn = slot.state or self._connect(slot)
            raw = conn._conn
            if raw.in_transaction:  # never expected: every path below ends the transaction
                raw.execute("ROLLBACK")
            try:
                if not self._attempt(conn, steps, bare=True):
                    self.stats.retried_batches += 1
                    self._attempt(conn, steps, bare=False)
                conn.nested = False
                conn.mark("COMMIT")
            except BaseException:
                conn.nested = conn.bare = conn.spoiled = conn.broken = False
                if raw.in_transaction:
                    raw.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise _store_error(self.path, exc) from exc
        self.stats.commits += 1

    def _attempt(self, conn: _Conn, steps: list[Callable[[], None]], *, bare: bool) -> bool:
        """Begin the batch's transaction and run `steps` in it; False when a job of a bare
        attempt raised (the attempt is rolled back: run it again with savepoints)."""
        raw = conn._conn
        conn.mark("BEGIN IMMEDIATE")
        self.stats.transactions += 1
        conn.nested, conn.bare = True, bare
        for step in steps:
            step()
            if conn.spoiled:
                conn.spoiled = conn.bare = False
                if raw.in_transaction:
                    conn.mark("ROLLBACK")
                return False
            if conn.broken or not raw.in_transaction:
                raise StoreError(
                    f"sqlite ({self.path}): the transaction of {len(steps)} grouped "
                    "writes was rolled back; none of them happened"
                )
        conn.bare = False
        return True

    def _connect(self, slot: Slot[_Conn]) -> _Conn:
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
            # checkpoint every ~16 MB of WAL, not 4 MB: a quarter of the fsyncs and copies of
            # hot pages back into the database (docs/adr/0034-cheaper-store-hops.md)
            raw.execute(f"PRAGMA wal_autocheckpoint = {_CHECKPOINT_PAGES}")
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
        slot.state = _Conn(raw, self.stats, self.trace)
        return slot.state

    # ------------------------------------------------------------------ SQLStore hooks

    def _flush_audit(self, tx: Tx) -> None:
        rows = self._audit_params(tx)
        one = "(?, ?, ?, ?, ?, (SELECT agent FROM golem_runs WHERE id = ?))"
        values = ", ".join([one] * len(rows)) if len(rows) > 1 else one
        sql = f"INSERT INTO golem_audit (run_id, at, actor, action, detail, agent) VALUES {values}"
        params = [v for row in rows for v in (*row, row[0])]
        conn = tx.conn
        assert isinstance(conn, _Conn)
        conn.count(sql, params)
        # `id` is the rowid: a multi-row insert's last row has the highest
        tx.last_id = conn._conn.execute(sql, params).lastrowid or 0

    def _last_change_id(self, tx: Tx) -> int:
        return int(tx.fetch("SELECT COALESCE(MAX(id), 0) FROM golem_audit")[0][0])

    def _to_db(self, value: datetime) -> str:
        last = self._last_ts  # a transaction stores its "now" several times: format it once
        if last[0] is value:
            return last[1]
        text = value.isoformat(timespec="microseconds")
        if text.endswith("+00:00"):
            text = text[:-6] + "Z"
        else:
            utc = value.astimezone(UTC).replace(tzinfo=None)
            text = utc.isoformat(timespec="microseconds") + "Z"
        self._last_ts = (value, text)
        return text

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


class _WalWatch:
    """Whether any process may have committed since the last look: one `stat` of the
    write-ahead log, a change reported twice (ADR 0042)."""

    __slots__ = ("_again", "_last", "path")

    def __init__(self, path: Path) -> None:
        self.path = path
        self._last: tuple[int, int, int] | None = (-1, -1, -1)
        self._again = False

    def changed(self) -> bool:
        """True when the log changed since the last look, or at the look after (always True
        the first two times)."""
        try:
            st = os.stat(self.path)
        except OSError:
            missing_before = self._last is None
            self._last, self._again = None, False
            return not missing_before
        now = (st.st_mtime_ns, st.st_size, st.st_ino)
        if now != self._last:
            self._last, self._again = now, True
            return True
        again, self._again = self._again, False
        return again


def _join(*threads: DatabaseThreads[_Conn]) -> None:
    for thread in threads:
        thread.join()


def _close(slot: Slot[_Conn]) -> None:
    conn, slot.state = slot.state, None
    if conn is not None:
        conn._conn.close()
