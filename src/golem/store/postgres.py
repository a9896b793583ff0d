"""`PostgresStore`: the store for several machines (psycopg 3; extra `[postgres]`).

Claims use `FOR UPDATE SKIP LOCKED`, so concurrent workers never wait on, or take, each
other's runs; decisions and lease checks lock the run's row. Reads run as `REPEATABLE READ
READ ONLY` so a run and its calls are one consistent snapshot. The schema is created or
migrated on open under an advisory lock, so many processes may start at once.

Transactions run on a small pool of threads, each using a **synchronous** psycopg
connection in pipeline mode (`pool_size` connections at most): statements whose result is
not needed are queued and sent with the next query or the commit, so a decision costs two
round trips and saving a paused run one. Async psycopg spends about three times the client
CPU per statement; a thread hop per transaction costs far less. As on SQLite, a cancelled
caller never interrupts a transaction: it runs to commit or rollback on its thread.

Before a pooled connection is reused, its socket is checked without a round trip: a
connection the server closed while it sat idle (restart, `idle_session_timeout`, a killed
backend) is replaced, and a transaction that fails on a broken connection before its
commit was sent is retried once on a fresh one.

Every writing transaction ends with `pg_notify`, and the store's `ChangeFeed` listens on
one extra connection (`LISTEN`, opened when the first worker or event stream waits), so
workers and streams in every process wake within milliseconds of a change instead of
polling.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import re
import select
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, TypeVar

from golem.errors import StoreError
from golem.store._feed import ChangeFeed
from golem.store._schema import migrate
from golem.store._sql import SQLStore, Stats, Tx

try:
    import psycopg
    from psycopg import pq
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "PostgresStore needs psycopg 3: pip install 'golem-agents[postgres]'"
    ) from exc

__all__ = ["PostgresStore"]

_T = TypeVar("_T")
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_PIPELINE = psycopg.Pipeline.is_supported()
log = logging.getLogger("golem.store")

_sql_cache: dict[str, str] = {}


def _pg_sql(sql: str) -> str:
    out = _sql_cache.get(sql)
    if out is None:
        out = _sql_cache[sql] = sql.replace("?", "%s")
    return out


class _Conn:
    """The `Conn` port over one sync psycopg connection (`?` placeholders become `%s`)."""

    __slots__ = ("_conn", "_stats", "sent_commit")

    def __init__(self, conn: psycopg.Connection[tuple[Any, ...]], stats: Stats) -> None:
        self._conn = conn
        self._stats = stats
        self.sent_commit = False

    def fetch(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        self._stats.statements += 1
        self._stats.round_trips += 1
        return self._conn.execute(_pg_sql(sql), params).fetchall()

    def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        self._stats.statements += 1
        self._stats.round_trips += 1
        return self._conn.execute(_pg_sql(sql), params).rowcount  # never in a pipeline

    def run(self, sql: str, params: Sequence[Any] = ()) -> None:
        self._stats.statements += 1
        if not _PIPELINE:
            self._stats.round_trips += 1
        self._conn.execute(_pg_sql(sql), params)


class PostgresStore(SQLStore):
    """A `Store` in a PostgreSQL database, shared by any number of processes and machines.

    `PostgresStore(dsn)` connects lazily on first use; `await PostgresStore.open(dsn)`
    connects and creates or migrates the schema immediately.

    Args:
        dsn: a libpq connection string or `postgresql://` URL.
        schema: keep golem's tables in this schema (created when missing; lowercase
            letters, digits and `_`); None uses the connection's search_path.
        pool_size: at most this many connections (and transactions) at once.
        connect_timeout: seconds to wait for a connection to be established.

    Raises:
        ValueError: `schema` is not a plain lowercase identifier or `pool_size` < 1.
    """

    _lock_clause = " FOR UPDATE"
    _skip_locked_clause = " FOR UPDATE SKIP LOCKED"

    def __init__(
        self,
        dsn: str,
        *,
        schema: str | None = None,
        pool_size: int = 4,
        connect_timeout: float = 10.0,
    ) -> None:
        if schema is not None and not _SCHEMA_NAME.fullmatch(schema):
            raise ValueError(
                f"schema must be a lowercase identifier ([a-z_][a-z0-9_]*), got {schema!r}"
            )
        if pool_size < 1:
            raise ValueError(f"pool_size must be at least 1, got {pool_size}")
        self.dsn = dsn
        self.schema = schema
        self.pool_size = pool_size
        self.connect_timeout = connect_timeout
        self.stats = Stats()
        self.channel = f"golem_changes:{schema or ''}"
        """The `NOTIFY` channel of this store's tables."""
        self._feed = ChangeFeed(self._probe, 3600.0)
        self._feed_started = False
        self._listener: asyncio.Task[None] | None = None
        self._idle: queue.LifoQueue[psycopg.Connection[tuple[Any, ...]]] = queue.LifoQueue()
        self._executor = ThreadPoolExecutor(pool_size, thread_name_prefix="golem-pg")
        self._migrate_lock = threading.Lock()
        self._migrated = False
        self._closed = False

    @classmethod
    async def open(
        cls,
        dsn: str,
        *,
        schema: str | None = None,
        pool_size: int = 4,
        connect_timeout: float = 10.0,
    ) -> PostgresStore:
        """Connect now and create or migrate the schema.

        Raises:
            StoreError: the database cannot be reached or its schema is newer than this golem.
        """
        store = cls(dsn, schema=schema, pool_size=pool_size, connect_timeout=connect_timeout)
        try:
            await store.schema_version()
        except BaseException:
            await store.close()
            raise
        return store

    def __repr__(self) -> str:
        where = f", schema={self.schema!r}" if self.schema else ""
        return f"PostgresStore({_redact(self.dsn)!r}{where})"

    # ------------------------------------------------------------------ connections

    def _connect_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"autocommit": True, "connect_timeout": self.connect_timeout}
        if self.schema:
            kwargs["options"] = f"-c search_path={self.schema}"
        return kwargs

    def _connect(self) -> psycopg.Connection[tuple[Any, ...]]:
        try:
            conn = psycopg.Connection.connect(self.dsn, **self._connect_kwargs())
        except psycopg.Error as exc:
            raise StoreError(f"cannot connect to PostgreSQL {_redact(self.dsn)}: {exc}") from exc
        conn.prepare_threshold = 0 if _PIPELINE else 5
        try:
            self._ensure_migrated(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _ensure_migrated(self, conn: psycopg.Connection[tuple[Any, ...]]) -> None:
        if self._migrated:
            return
        with self._migrate_lock:
            if self._migrated:
                return
            c = _Conn(conn, self.stats)
            c.execute("BEGIN")
            try:
                key = f"golem_schema:{self.schema or ''}"
                c.execute("SELECT pg_advisory_xact_lock(hashtext(?))", (key,))
                if self.schema:
                    c.execute(f'CREATE SCHEMA IF NOT EXISTS "{self.schema}"')
                migrate(c, "postgresql", datetime.now(UTC))
            except BaseException:
                with contextlib.suppress(psycopg.Error):
                    conn.execute("ROLLBACK")
                raise
            c.execute("COMMIT")
            self._migrated = True

    def _checkout(self) -> psycopg.Connection[tuple[Any, ...]]:
        """An idle connection that still looks alive, or a new one."""
        while True:
            try:
                conn = self._idle.get_nowait()
            except queue.Empty:
                return self._connect()
            if not conn.closed and _socket_quiet(conn):
                return conn
            conn.close()  # closed by the server while idle: replace it

    def _checkin(self, conn: psycopg.Connection[tuple[Any, ...]]) -> None:
        if self._closed or conn.closed or conn.info.transaction_status != pq.TransactionStatus.IDLE:
            conn.close()
        else:
            self._idle.put(conn)

    # ------------------------------------------------------------------ transactions

    async def _submit(self, write: bool, fn: Callable[..., _T], *args: Any) -> _T:
        if self._closed:
            raise StoreError(f"{self!r} is closed")
        self._feed.bind(asyncio.get_running_loop())
        try:
            future: Future[_T] = self._executor.submit(self._transact, write, fn, args)
        except RuntimeError as exc:  # the executor shut down: the store was closed
            raise StoreError(f"{self!r} is closed") from exc
        return await asyncio.wrap_future(future)

    def _transact(self, write: bool, fn: Callable[..., _T], args: Any) -> _T:
        for attempt in (1, 2):
            conn = self._checkout()
            c = _Conn(conn, self.stats)
            try:
                result = self._attempt(conn, c, write, fn, args)
            except psycopg.OperationalError as exc:
                broken = conn.broken or conn.closed
                conn.close()
                if broken and not c.sent_commit and attempt == 1 and not self._closed:
                    log.info("postgresql connection lost before commit; retrying: %s", exc)
                    continue
                raise StoreError(f"postgresql: {exc}") from exc
            except psycopg.Error as exc:
                self._checkin(conn)
                raise StoreError(f"postgresql: {exc}") from exc
            except BaseException:
                self._checkin(conn)
                raise
            self._checkin(conn)
            return result
        raise AssertionError("unreachable")  # pragma: no cover

    def _attempt(
        self,
        conn: psycopg.Connection[tuple[Any, ...]],
        c: _Conn,
        write: bool,
        fn: Callable[..., _T],
        args: Any,
    ) -> _T:
        self.stats.transactions += 1
        tx = Tx(c)
        try:
            with conn.pipeline() if _PIPELINE else contextlib.nullcontext():
                c.run("BEGIN" if write else "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                result = fn(tx, *args)
                if tx.entries:
                    self._flush_audit(tx)
                c.sent_commit = True
                c.run("COMMIT")
                self.stats.round_trips += 1 if _PIPELINE else 0
        except BaseException:
            if not conn.closed and not conn.broken:
                try:
                    conn.execute("ROLLBACK")
                except psycopg.Error:
                    conn.close()
            raise
        if write:
            self.stats.commits += 1
        return result

    # ------------------------------------------------------------------ SQLStore hooks

    def _flush_audit(self, tx: Tx) -> None:
        rows = self._audit_params(tx)
        n = len(rows)
        values = ", ".join(f"({i}, ?, ?::timestamptz, ?, ?, ?)" for i in range(1, n + 1))
        tx.run(
            "WITH s AS (UPDATE golem_audit_seq SET last_id = last_id + ? WHERE singleton = 1 "
            "RETURNING last_id), i AS (INSERT INTO golem_audit "
            f"(id, run_id, at, actor, action, detail) SELECT s.last_id - {n} + v.n, v.run_id, "
            f"v.at, v.actor, v.action, v.detail FROM s, (VALUES {values}) "
            "AS v(n, run_id, at, actor, action, detail)) "
            "SELECT pg_notify(?, s.last_id::text || ?) FROM s",
            (n, *(v for row in rows for v in row), self.channel, " ready" if tx.ready else ""),
        )

    async def _probe(self) -> int:
        return await self._submit(False, self._last_change_id)

    def _to_db(self, value: datetime) -> datetime:
        return value.astimezone(UTC)

    def _from_db(self, value: Any) -> datetime:
        if not isinstance(value, datetime):
            raise StoreError(f"postgresql returned {value!r} where a timestamp was expected")
        return value.astimezone(UTC)

    # ------------------------------------------------------------------ notifications

    def change_feed(self) -> ChangeFeed:
        """The store's `ChangeFeed`, fed by `LISTEN` on `channel` (started on first use)."""
        if not self._feed_started and not self._closed:
            self._feed_started = True
            self._listener = asyncio.get_running_loop().create_task(
                self._listen(), name="golem-pg-listener"
            )
        return self._feed

    async def _listen(self) -> None:
        """Fan `NOTIFY` out to the feed; reconnect (waking every waiter) after a failure."""
        delay = 0.1
        while not self._closed:
            try:
                conn = await psycopg.AsyncConnection.connect(self.dsn, **self._connect_kwargs())
            except (psycopg.Error, OSError) as exc:
                log.warning("change feed: cannot connect to PostgreSQL: %s", exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            try:
                async with conn:
                    await conn.execute(f'LISTEN "{self.channel}"')
                    delay = 0.1
                    self._feed.publish(self._feed.last_id, ready=True)  # may have missed some
                    async for note in conn.notifies():
                        last, _, flag = note.payload.partition(" ")
                        self._feed.publish(int(last), ready=flag == "ready")
            except (psycopg.Error, OSError, ValueError) as exc:
                if self._closed:
                    return
                log.warning("change feed: listener connection lost: %s", exc)
                await asyncio.sleep(delay)

    async def close(self) -> None:
        """Finish running transactions, then close every connection and the listener."""
        if self._closed:
            return
        self._closed = True
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await listener
        await self._feed.aclose()
        await asyncio.to_thread(self._executor.shutdown, True)
        while True:
            try:
                self._idle.get_nowait().close()
            except queue.Empty:
                break


def _socket_quiet(conn: psycopg.Connection[tuple[Any, ...]]) -> bool:
    """True when an idle connection has nothing to read (the server did not close it)."""
    try:
        readable, _, _ = select.select([conn.fileno()], [], [], 0)
    except (OSError, ValueError):
        return False
    return not readable


def _redact(dsn: str) -> str:
    """The DSN without its password (for messages and reprs)."""
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", re.sub(r"password=\S+", "password=***", dsn))
