"""`PostgresStore`: the store for several machines (psycopg 3, async; extra `[postgres]`).

Claims use `SELECT … FOR UPDATE SKIP LOCKED`, so concurrent workers never wait on, or take,
each other's runs; decisions and lease checks lock the run's row (`FOR UPDATE`). Reads run
as `REPEATABLE READ READ ONLY` so a run and its calls are one consistent snapshot. The
schema is created or migrated on open under an advisory lock, so many processes may start
at once. A small built-in pool (`pool_size` connections) serves concurrent callers.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import UTC, datetime
from typing import Any

from golem.errors import StoreError
from golem.store._schema import migrate
from golem.store._sql import SQLStore

try:
    import psycopg
    from psycopg import pq
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "PostgresStore needs psycopg 3: pip install 'golem-agents[postgres]'"
    ) from exc

__all__ = ["PostgresStore"]

_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


class _Conn:
    """The `Conn` port over one psycopg connection (`?` placeholders become `%s`)."""

    _sql_cache: dict[str, str] = {}  # noqa: RUF012 - shared translation cache

    def __init__(self, conn: psycopg.AsyncConnection[tuple[Any, ...]]) -> None:
        self._conn = conn

    @classmethod
    def _sql(cls, sql: str) -> str:
        out = cls._sql_cache.get(sql)
        if out is None:
            out = cls._sql_cache[sql] = sql.replace("?", "%s")
        return out

    async def fetch(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        try:
            cur = await self._conn.execute(self._sql(sql), tuple(params))
            return await cur.fetchall()
        except psycopg.Error as exc:
            raise StoreError(f"postgresql: {exc}") from exc

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        try:
            cur = await self._conn.execute(self._sql(sql), tuple(params))
            return cur.rowcount
        except psycopg.Error as exc:
            raise StoreError(f"postgresql: {exc}") from exc


class PostgresStore(SQLStore):
    """A `Store` in a PostgreSQL database, shared by any number of processes and machines.

    `PostgresStore(dsn)` connects lazily on first use; `await PostgresStore.open(dsn)`
    connects and creates or migrates the schema immediately.

    Args:
        dsn: a libpq connection string or `postgresql://` URL.
        schema: keep golem's tables in this schema (created when missing; lowercase
            letters, digits and `_`); None uses the connection's search_path.
        pool_size: at most this many connections are open at once.
        connect_timeout: seconds to wait for a connection to be established.

    Raises:
        ValueError: `schema` is not a plain lowercase identifier or `pool_size` < 1.
    """

    _lock_clause = " FOR UPDATE"
    _skip_locked_clause = " FOR UPDATE SKIP LOCKED"
    _peek_before_claim = False

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
        self._idle: list[psycopg.AsyncConnection[tuple[Any, ...]]] = []
        self._slots = asyncio.Semaphore(pool_size)
        self._open_lock = asyncio.Lock()
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
            await store._ensure_migrated()
        except BaseException:
            await store.close()
            raise
        return store

    def __repr__(self) -> str:
        where = f", schema={self.schema!r}" if self.schema else ""
        return f"PostgresStore({_redact(self.dsn)!r}{where})"

    # ------------------------------------------------------------------ connections

    async def _connect(self) -> psycopg.AsyncConnection[tuple[Any, ...]]:
        options = f"-c search_path={self.schema}" if self.schema else None
        try:
            kwargs: dict[str, Any] = {"autocommit": True, "connect_timeout": self.connect_timeout}
            if options:
                kwargs["options"] = options
            return await psycopg.AsyncConnection.connect(self.dsn, **kwargs)
        except psycopg.Error as exc:
            raise StoreError(f"cannot connect to PostgreSQL {_redact(self.dsn)}: {exc}") from exc

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[psycopg.AsyncConnection[tuple[Any, ...]]]:
        if self._closed:
            raise StoreError(f"{self!r} is closed")
        async with self._slots:
            conn = self._idle.pop() if self._idle else await self._connect()
            try:
                yield conn
            finally:
                healthy = (
                    not conn.closed
                    and conn.info.transaction_status == pq.TransactionStatus.IDLE
                    and not self._closed
                )
                if healthy:
                    self._idle.append(conn)
                else:
                    await conn.close()

    async def _ensure_migrated(self) -> None:
        if self._migrated:
            return
        async with self._open_lock:
            if self._migrated:
                return
            async with self._connection() as raw:
                conn = _Conn(raw)
                await conn.execute("BEGIN")
                try:
                    key = f"golem_schema:{self.schema or ''}"
                    await conn.execute("SELECT pg_advisory_xact_lock(hashtext(?))", (key,))
                    if self.schema:
                        await conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{self.schema}"')
                    await migrate(conn, "postgresql", datetime.now(UTC))
                except BaseException:
                    await raw.execute("ROLLBACK")
                    raise
                await conn.execute("COMMIT")
            self._migrated = True

    # ------------------------------------------------------------------ SQLStore hooks

    def _transaction(self, *, write: bool) -> AbstractAsyncContextManager[_Conn]:
        return self._pg_transaction(write)

    @asynccontextmanager
    async def _pg_transaction(self, write: bool) -> AsyncIterator[_Conn]:
        await self._ensure_migrated()
        async with self._connection() as raw:
            conn = _Conn(raw)
            await conn.execute(
                "BEGIN" if write else "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
            )
            try:
                yield conn
            except BaseException:
                if not raw.closed:
                    try:
                        await raw.execute("ROLLBACK")
                    except psycopg.Error:
                        await raw.close()
                raise
            await conn.execute("COMMIT")

    def _to_db(self, value: datetime) -> datetime:
        return value.astimezone(UTC)

    def _from_db(self, value: Any) -> datetime:
        if not isinstance(value, datetime):
            raise StoreError(f"postgresql returned {value!r} where a timestamp was expected")
        return value.astimezone(UTC)

    async def close(self) -> None:
        """Close every pooled connection; the store cannot be used afterwards."""
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            await conn.close()


def _redact(dsn: str) -> str:
    """The DSN without its password (for messages and reprs)."""
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", re.sub(r"password=\S+", "password=***", dsn))
