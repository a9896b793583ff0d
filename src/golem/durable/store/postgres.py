"""`PostgresStore`: the store for several machines (psycopg 3; extra `[postgres]`).

Claims use `FOR UPDATE SKIP LOCKED`, so concurrent workers never wait on, or take, each
other's runs; decisions and lease checks lock the run's row. Reads run as `REPEATABLE READ
READ ONLY` so a run and its calls are one consistent snapshot. The schema is created or
migrated on open under an advisory lock, so many processes may start at once.

Transactions run on the event loop, on a pool of at most `pool_size` connections, and speak
to the server at the libpq level in pipeline mode: statements whose result is not needed, or
needed only after the commit, are queued and sent with the next query or the commit. Saving
a paused run, deciding, claiming, finishing a resume and renewing a lease cost one round trip
each: a lease check is a guard statement queued behind the update, which fails the pipeline
when the update changed nothing; a claim reads what it took as the rows its transaction
wrote; a plain decision is recorded without reading first, other cases falling back to the
full transaction (ADR 0038). Each statement is prepared once per connection, and rows come
back in binary; going through psycopg's cursors instead costs several times the client CPU
per statement (ADR 0023).

A transaction's code is synchronous, shared with SQLite. It runs in a greenlet that hands
every socket wait to the event loop, so there is no thread hop and the loop never blocks on
the network (ADR 0039). As on SQLite, a cancelled caller never interrupts a transaction: the
caller is let go at once, and a task of its own drives the transaction to commit or
rollback. Only an event loop that shuts down under it cuts it short: its connection is then
closed, and the server rolls back whatever it had not committed.

A new connection raises a server's `idle_in_transaction_session_timeout` and
`idle_session_timeout` below 10 s to 10 s for its own session, in the query that reads the
server's clock (a transaction is idle between its round trips only while this process reads
rows; a pooled connection is checked before use); the listener's `idle_session_timeout`
goes to three check intervals. Writes run at READ COMMITTED and reads at REPEATABLE READ
whatever the server's default isolation; a write a read-only database refuses raises
`StoreReadOnly` (ADR 0068).

Before a connection is reused, its socket is checked without a round trip: a
connection the server closed while it sat idle (restart, `idle_session_timeout`, a killed
backend) is replaced, and a transaction that fails on a broken connection before its
commit was sent is retried once on a fresh one.

Every writing transaction ends with `pg_notify`, and the store's `ChangeFeed` listens on
one extra connection (`LISTEN`, opened when the first worker or event stream waits), so
workers and streams in every process wake within milliseconds of a change instead of
polling. A listener silent for `listen_check_interval` is asked an empty query; one that
does not answer within `command_timeout` is replaced (ADR 0062).

On an event loop that cannot watch sockets (Windows' Proactor loop), transactions and
socket waits run on the store's own threads, never on the loop's default executor.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
import math
import os
import re
import select
import threading
import weakref
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeAlias, TypeVar
from urllib.parse import unquote

from golem.durable._clock import elapsed
from golem.durable.store._decisions import FITS, decided_detail
from golem.durable.store._feed import ChangeFeed
from golem.durable.store._pg_messages import no_slot_message
from golem.durable.store._rows import C_CALL_COLS, to_json
from golem.durable.store._schema import LATEST_VERSION, migrate
from golem.durable.store._sql import SQLStore
from golem.durable.store._threads import DatabaseThreads, Slot
from golem.durable.store._tx import Later, Stats, Tx, utc_now
from golem.durable.store.records import (
    AuditAction,
    DecisionRecord,
    StoreBusy,
    StoreReadOnly,
    StoreTimeout,
)
from golem.errors import StoreError

try:
    import greenlet
    import psycopg
    from psycopg import errors as pg_errors
    from psycopg import pq
    from psycopg.adapt import Transformer
    from psycopg.conninfo import conninfo_to_dict
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "PostgresStore needs psycopg 3 and greenlet: pip install 'golem-agents[postgres]'"
    ) from exc

__all__ = ["PostgresStore"]

_T = TypeVar("_T")
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
log = logging.getLogger("golem.durable.store")

_Connection = psycopg.Connection[tuple[Any, ...]]

_sql_cache: dict[str, bytes] = {}


def _pg_sql(sql: str) -> bytes:
    """`sql` with its `?` placeholders numbered the libpq way (`$1`, `$2`, ...)."""
    out = _sql_cache.get(sql)
    if out is None:
        if len(_sql_cache) > 2000:  # listings build many IN (...) shapes: stay bounded
            _sql_cache.clear()
        head, *rest = sql.split("?")
        text = head + "".join(f"${i}{part}" for i, part in enumerate(rest, 1))
        out = _sql_cache[sql] = text.encode()
    return out


_OID_UNKNOWN = 0
_OID_BOOL = 16
_OID_INT8 = 20
_OID_TIMESTAMPTZ = 1184


def _dump(params: Sequence[Any]) -> tuple[list[bytes | None], tuple[int, ...]]:
    """Parameters in libpq's text format, with their type OIDs.

    Strings and NULLs go as `unknown` (the server takes the type from the context, as
    psycopg does), integers as `int8`, datetimes as `timestamptz`.
    """
    values: list[bytes | None] = []
    types: list[int] = []
    for v in params:
        t = type(v)
        if t is str:
            if "\x00" in v:
                raise psycopg.DataError("PostgreSQL text fields cannot contain NUL (0x00) bytes")
            values.append(v.encode())
            types.append(_OID_UNKNOWN)
        elif v is None:
            values.append(None)
            types.append(_OID_UNKNOWN)
        elif t is int:
            values.append(b"%d" % v)
            types.append(_OID_INT8)
        elif t is bool:
            values.append(b"t" if v else b"f")
            types.append(_OID_BOOL)
        elif isinstance(v, datetime) and v.utcoffset() is not None:
            values.append(v.isoformat().encode())
            types.append(_OID_TIMESTAMPTZ)
        else:
            raise TypeError(f"PostgresStore cannot send a {t.__name__} parameter: {v!r}")
    return values, tuple(types)


_MIN_SERVER_VERSION = 130000
"""PostgreSQL 13: `pg_current_xact_id()`, which the guard statements compare `xmin` with."""

_MAX_PREPARED = 256
"""Prepared statements per connection; statements beyond are sent unnamed."""
_statement_names = itertools.count(1)

class _Guard:
    """A guard statement's result: its division by zero means `error`."""

    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error


_Then: TypeAlias = tuple[bytes, tuple[int, ...]] | Later | Exception | _Guard | None
"""What to do with a message's result: confirm a prepare (its cache key), fill in rows, map a
unique violation to an exception, map a guard's failure to its exception, or nothing."""

_RUN_CHANGED = (
    "SELECT 1 / (SELECT count(*) FROM golem_runs "
    "WHERE id = ? AND xmin = pg_current_xact_id()::xid)"
)
"""Divides by zero unless this transaction wrote the run's row (its current version's
`xmin` is the transaction's ID; golem opens no subtransactions on PostgreSQL)."""

_BEGIN_WRITE = b"BEGIN ISOLATION LEVEL READ COMMITTED"
"""Writes run at READ COMMITTED whatever the server's `default_transaction_isolation`:
their locking takes a fresh snapshot per statement (a decision waits for the run's row
lock, then sees what the transaction it waited for committed), and every write updates the
audit sequence's one row, which REPEATABLE READ or SERIALIZABLE would refuse to do after a
concurrent commit (ADR 0068)."""
_BEGIN_READ = b"BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
"""Reads see a run and its calls as one snapshot."""

_IDLE = pq.TransactionStatus.IDLE
_FATAL = pq.ExecStatus.FATAL_ERROR
_TUPLES_OK = pq.ExecStatus.TUPLES_OK
_SQLSTATE = pq.DiagnosticField.SQLSTATE
_UNIQUE = b"23505"
_DIVISION_BY_ZERO = b"22012"
_SYNC = pq.ExecStatus.PIPELINE_SYNC
_COMMAND_OK = pq.ExecStatus.COMMAND_OK
_BINARY = pq.Format.BINARY


class _Conn:
    """The `Conn` port over one connection, spoken at the libpq level in pipeline mode.

    A transaction is `begin` → `fetch`/`run` … → `end`. `run` only queues its statement;
    `fetch` sends what is queued plus itself and waits for the answers (one round trip);
    `end` sends the rest with COMMIT. Statements are prepared on first use (named, per
    connection) and results come back in binary, loaded by psycopg's own loaders: this
    skips psycopg's cursor layer, which costs several times the client CPU per statement.
    """

    __slots__ = (
        "_loader",
        "_poll",
        "_prepared",
        "_sent",
        "_stats",
        "conn",
        "handed_off",
        "pg",
        "sent_commit",
        "timeout",
    )

    def __init__(self, conn: _Connection, stats: Stats, timeout: float | None = None) -> None:
        self.conn = conn
        self.pg = conn.pgconn
        self.timeout = timeout
        """Seconds a socket wait may last (`PostgresStore.command_timeout`)."""
        self._stats = stats
        self._loader = Transformer(conn)
        self._prepared: dict[tuple[bytes, tuple[int, ...]], bytes] = {}
        self._sent: list[_Then] = []
        """One entry per message awaiting its result."""
        self._poll = select.poll()
        self._poll.register(self.pg.socket, select.POLLIN)
        self.sent_commit = False
        self.handed_off = False
        """A cancelled caller left its transaction to a task that will give this back."""

    # -------------------------------------------------------------- the Conn port

    def fetch(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        self._stats.statements += 1
        self._stats.round_trips += 1
        later = Later()
        self._send(sql, params, later)
        self._sync()
        return later.rows

    def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        self._stats.statements += 1
        self._stats.round_trips += 1
        self._send(sql, params)
        return self._sync()[-1].command_tuples or 0

    def run(self, sql: str, params: Sequence[Any] = (), conflict: Exception | None = None) -> None:
        self._stats.statements += 1
        self._send(sql, params, conflict)

    def later(self, sql: str, params: Sequence[Any] = ()) -> Later:
        self._stats.statements += 1
        later = Later(wait=self._wait)
        self._send(sql, params, later)
        return later

    def require_run_changed(self, rows: Later, run_id: str, error: Exception) -> None:
        self.guard(_RUN_CHANGED, (run_id,), error)

    def guard(self, sql: str, params: Sequence[Any], error: Exception) -> None:
        """Queue a guard: a statement whose division by zero fails the transaction with
        `error` (sent with what follows, so the check costs no round trip of its own; a
        failure makes the server skip everything after it, COMMIT included)."""
        self._stats.statements += 1
        self._send(sql, params, _Guard(error))

    def _wait(self) -> None:
        self._stats.round_trips += 1
        self._sync()

    def quiet(self) -> bool:
        """True when the idle connection has nothing to read (the server did not close it)."""
        try:
            return not self._poll.poll(0)
        except (OSError, ValueError):
            return False

    # -------------------------------------------------------------- transactions

    def begin(self, sql: bytes) -> None:
        self.sent_commit = False
        self.pg.enter_pipeline_mode()
        self._send_plain(sql)

    def end(self) -> None:
        """Send COMMIT with whatever is queued and wait for the answers."""
        self.sent_commit = True
        self._send_plain(b"COMMIT")
        self._stats.round_trips += 1
        self._sync()
        self.pg.exit_pipeline_mode()

    def abort(self) -> None:
        """Roll back after a failure; close the connection if that is not possible."""
        pg = self.pg
        try:
            if pg.pipeline_status == pq.PipelineStatus.OFF:
                if pg.transaction_status != pq.TransactionStatus.IDLE:
                    pg.exec_(b"ROLLBACK")
                return
            self._send_plain(b"ROLLBACK")
            try:
                self._sync()
            except psycopg.OperationalError:
                raise
            except Exception:  # the failure being rolled back: the caller reports it
                pass
            pg.exit_pipeline_mode()
        except (psycopg.Error, OSError):
            self.conn.close()

    # -------------------------------------------------------------- protocol

    def _send_plain(self, sql: bytes) -> None:
        self.pg.send_query_params(sql, None)
        self._sent.append(None)

    def _send(self, sql: str, params: Sequence[Any], then: _Then = None) -> None:
        query = _pg_sql(sql)
        values, types = _dump(params)
        pg = self.pg
        key = (query, types)
        name = self._prepared.get(key)
        if name is None and len(self._prepared) < _MAX_PREPARED:
            name = self._prepared[key] = b"golem_%d" % next(_statement_names)
            pg.send_prepare(name, query, param_types=types)
            self._sent.append(key)
        if name is None:
            pg.send_query_params(query, values, param_types=types, result_format=_BINARY)
        else:
            pg.send_query_prepared(name, values, result_format=_BINARY)
        self._sent.append(then)

    def _sync(self) -> list[pq.abc.PGresult]:
        """Send a sync point; return the results of every message sent since the last one.

        Raises the first error among them (the server skipped the statements after it).
        """
        pg = self.pg
        pg.pipeline_sync()
        self._flush()
        results: list[pq.abc.PGresult] = []
        while True:
            result = self._next_result()
            if result is None:
                continue
            if result.status == _SYNC:
                break
            results.append(result)
        sent, self._sent = self._sent, []
        if len(sent) != len(results):
            self.conn.close()
            raise psycopg.OperationalError(
                f"postgresql pipeline out of step: {len(results)} results for {len(sent)} messages"
            )
        error: tuple[pq.abc.PGresult, _Then] | None = None
        for then, result in zip(sent, results, strict=True):
            status = result.status
            if status == _FATAL:
                if type(then) is tuple:  # a prepare the server refused (a timeout while it
                    self._prepared.pop(then, None)  # waited for a table lock): not prepared
                if error is None:
                    error = result, then
            elif type(then) is Later:
                rows = None
                if status == _TUPLES_OK:
                    loader = self._loader
                    loader.set_pgresult(result)
                    rows = loader.load_rows(0, result.ntuples, tuple)
                then.set(rows)
            elif type(then) is tuple and status != _COMMAND_OK:
                self._prepared.pop(then, None)  # the server skipped or refused the prepare
        if error is not None:
            result, then = error
            state = result.error_field(_SQLSTATE)
            if isinstance(then, Exception) and state == _UNIQUE:
                raise then
            if type(then) is _Guard and state == _DIVISION_BY_ZERO:
                raise then.error
            raise pg_errors.error_from_result(result, encoding=self.conn.info.encoding)
        return results

    def _next_result(self) -> pq.abc.PGresult | None:
        pg = self.pg
        while pg.is_busy():
            self._wait_socket(False)
            pg.consume_input()
        return pg.get_result()

    def _flush(self) -> None:
        pg = self.pg
        while pg.flush():  # 1: libpq could not send everything without blocking
            self._wait_socket(True)
            pg.consume_input()  # the server may be waiting for us to read

    def _wait_socket(self, write: bool) -> None:
        """Wait until the socket is readable (or, with `write`, readable or writable).

        Inside a transaction's greenlet this hands the wait to the event loop (`_drive`),
        which switches back once the socket is ready, or ends the transaction when the
        server stays silent for `timeout`; anywhere else it blocks the calling thread, and
        a silence that long closes the connection (`_submit` raises `StoreTimeout`).
        """
        fd = self.pg.socket
        parent = greenlet.getcurrent().parent
        if parent is not None:
            parent.switch((fd, write))
        elif not _wait_socket(fd, write, self.timeout):
            self.conn.close()  # the server rolls back whatever it had not committed
            raise _NoAnswer


def _wait_socket(fd: int, write: bool, timeout: float | None) -> bool:
    """Block until the socket is readable (or, with `write`, writable); False on timeout."""
    readable, writable, _ = select.select([fd], [fd] if write else [], [], timeout)
    return bool(readable or writable)


class _SchemaConn:
    """The `SchemaConn` port over psycopg's own API (migrations, outside the hot path)."""

    __slots__ = ("_conn", "_stats")

    def __init__(self, conn: _Connection, stats: Stats) -> None:
        self._conn = conn
        self._stats = stats

    def fetch(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        self._stats.statements += 1
        self._stats.round_trips += 1
        return self._conn.execute(sql.replace("?", "%s"), params).fetchall()

    def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        self._stats.statements += 1
        self._stats.round_trips += 1
        return self._conn.execute(sql.replace("?", "%s"), params).rowcount


class PostgresStore(SQLStore):
    """A `Store` in a PostgreSQL database, shared by any number of processes and machines.

    `PostgresStore(dsn)` connects lazily on first use; `await PostgresStore.open(dsn)`
    connects and creates or migrates the schema immediately.

    Args:
        dsn: a libpq connection string or `postgresql://` URL.
        schema: keep golem's tables in this schema (created when missing; lowercase
            letters, digits and `_`); None uses the connection's search_path.
        pool_size: at most this many connections (and transactions) at once.
        connect_timeout: seconds to wait for a connection to be established; None takes
            the DSN's `connect_timeout` (or `PGCONNECT_TIMEOUT`), else 10.
        command_timeout: seconds a store call waits for any answer from the server (a
            lock held elsewhere, a frozen server, a network that drops packets without
            closing the connection); past it the connection is closed, the server rolls
            back what it had not committed, and the call raises `StoreTimeout`. None
            waits as long as it takes.

    Raises:
        ValueError: `schema` is not a plain lowercase identifier, `pool_size` < 1, or
            a timeout is not a positive number of seconds.
    """

    _lock_clause = " FOR UPDATE"
    _skip_locked_clause = " FOR UPDATE SKIP LOCKED"
    # A page of calls walks the pending runs in index order and stops at the page's end,
    # whatever the statistics say (missing after a bulk load, stale while autovacuum lags):
    # each run's calls come from a fenced lateral subquery (OFFSET 0: never a join of every
    # pending call, nor a per-run scan of the open-deadline index), and the transaction rules
    # out the plans that read everything and sort (ADR 0044).
    _runs_with_calls = (
        "golem_runs r CROSS JOIN LATERAL "
        "(SELECT * FROM golem_calls c WHERE c.run_id = r.id OFFSET 0) c"
    )
    _contains = "strpos"
    _page_plan = (
        "SELECT set_config('enable_hashjoin', 'off', true), "
        "set_config('enable_mergejoin', 'off', true), "
        "set_config('enable_bitmapscan', 'off', true), "
        "set_config('enable_seqscan', 'off', true), "
        "set_config('enable_sort', 'off', true)"
    )

    def __init__(
        self,
        dsn: str,
        *,
        schema: str | None = None,
        pool_size: int = 4,
        connect_timeout: float | None = None,
        command_timeout: float | None = 60.0,
    ) -> None:
        if schema is not None and not _SCHEMA_NAME.fullmatch(schema):
            raise ValueError(
                f"schema must be a lowercase identifier ([a-z_][a-z0-9_]*), got {schema!r}"
            )
        if pool_size < 1:
            raise ValueError(f"pool_size must be at least 1, got {pool_size}")
        if connect_timeout is not None and not 0 < connect_timeout < math.inf:
            raise ValueError(f"connect_timeout must be positive seconds, got {connect_timeout}")
        if command_timeout is not None and not 0 < command_timeout < math.inf:
            raise ValueError(
                f"command_timeout must be positive seconds or None, got {command_timeout}"
            )
        self.dsn = dsn
        self.schema = schema
        self.pool_size = pool_size
        self.connect_timeout = connect_timeout
        self.command_timeout = command_timeout
        self.stats = Stats()
        self.channel = f"golem_changes:{schema or ''}"
        """The `NOTIFY` channel of this store's changes that make no run ready."""
        self.ready_channel = f"golem_ready:{schema or ''}"
        """The `NOTIFY` channel of this store's changes that may make a run ready."""
        self._feed = ChangeFeed(self._probe, 3600.0)
        self._feed_started = False
        self._listen_all = False
        """Whether the listener hears every change (an event stream waits in this process),
        not only the ones that make runs ready (all a worker waits for)."""
        self._listener: asyncio.Task[None] | None = None
        self._idle: list[_Conn] = []
        """Open connections no transaction uses now."""
        self._opened = 0
        """Connections open or being opened (at most `pool_size`)."""
        self._queue: collections.deque[asyncio.Future[None]] = collections.deque()
        """Transactions waiting for a connection, first come first served."""
        self._pool_lock = threading.Lock()
        self._orphans: set[asyncio.Future[Any]] = set()
        """Transactions finishing after their caller was cancelled."""
        self._thread_pool: DatabaseThreads[None] | None = None
        """Threads for loops that cannot watch sockets (`_threads`)."""
        self._listening: _Conn | None = None
        """The change feed's `LISTEN` connection, while it is open."""
        self.listen_check_interval: float | None = 10.0
        """Seconds the change feed's `LISTEN` connection may stay silent before it is asked
        an empty query, which must be answered within `command_timeout` (else it is
        replaced); None never asks. Short enough to keep a middlebox's idle timeout from
        closing the listener; a server's `idle_session_timeout` shorter than three
        intervals is raised to that on the listener's own session (ADR 0068)."""
        self._connecting: set[asyncio.Future[_Conn]] = set()
        """Connections being opened on threads (`close` waits for them)."""
        self._migrate_lock = threading.Lock()
        self._migrated = False
        self._closed = False
        self._short_idle_session = False
        """The server closed a new connection for idling before its first query could
        raise `idle_session_timeout`: new connections raise it in their startup packet."""
        self._server_clock: tuple[datetime, float] | None = None
        """The server's time and this process's `elapsed()` when it was read (newest
        connection): `clock()` counts on from there."""

    @classmethod
    async def open(
        cls,
        dsn: str,
        *,
        schema: str | None = None,
        pool_size: int = 4,
        connect_timeout: float | None = None,
        command_timeout: float | None = 60.0,
    ) -> PostgresStore:
        """Connect now and create or migrate the schema.

        Raises:
            StoreError: the database cannot be reached or its schema is newer than this golem.
        """
        store = cls(
            dsn,
            schema=schema,
            pool_size=pool_size,
            connect_timeout=connect_timeout,
            command_timeout=command_timeout,
        )
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

    def _connect_kwargs(self, listener: bool = False) -> dict[str, Any]:
        # a keyword argument replaces the DSN's own setting: pass only what was asked for
        try:
            params = conninfo_to_dict(self.dsn)
        except psycopg.Error:  # connecting will say what is wrong with the DSN
            params = {}
        kwargs: dict[str, Any] = {"autocommit": True}
        if self.connect_timeout is not None:
            kwargs["connect_timeout"] = self.connect_timeout
        elif "connect_timeout" not in params and not os.environ.get("PGCONNECT_TIMEOUT"):
            kwargs["connect_timeout"] = _CONNECT_TIMEOUT
        options = []
        if self.schema:
            options.append(f"-c search_path={self.schema}")
        if self._short_idle_session:  # raised from the start: no window before the first query
            options.append(f"-c idle_session_timeout={self._idle_session_floor(listener)}")
        if options:
            # keep the DSN's (or PGOPTIONS') own settings, statement_timeout say
            given = params.get("options") or os.environ.get("PGOPTIONS")
            kwargs["options"] = " ".join([str(given), *options] if given else options)
        return kwargs

    def _idle_session_floor(self, listener: bool) -> int:
        """Milliseconds: the shortest `idle_session_timeout` a connection keeps."""
        interval = self.listen_check_interval
        if listener and interval is not None:
            return max(_IDLE_FLOOR, math.ceil(_LISTENER_IDLE * interval * 1000))
        return _IDLE_FLOOR

    def _connect(self, listener: bool = False) -> _Conn:
        where = _redact(self.dsn)
        while True:
            try:
                conn = psycopg.Connection.connect(self.dsn, **self._connect_kwargs(listener))
            except psycopg.Error as exc:
                if _no_slot(exc):
                    raise StoreBusy(
                        f"cannot connect to PostgreSQL {where}: no free connection slot ({exc})"
                    ) from exc
                raise StoreError(f"cannot connect to PostgreSQL {where}: {exc}") from exc
            version = conn.info.server_version  # 0 once the connection broke
            try:
                self._read_server_clock(conn, listener)
                self._ensure_migrated(conn)
                return _Conn(conn, self.stats, self.command_timeout)
            except psycopg.Error as exc:  # killed, or the server went away, right after connecting
                # closed for idling before its first query could raise the timeout (the
                # server says so, or, before any connection told its settings, the
                # connection just broke: its message can be lost to the reset): connect
                # again with the floor in the startup packet (ADR 0068)
                idle = exc.sqlstate == _IDLE_SESSION_TIMEOUT or (
                    exc.sqlstate is None
                    and conn.broken
                    and self._server_clock is None
                    and version >= 140000
                )
                conn.close()
                if idle and not self._short_idle_session:
                    self._short_idle_session = True
                    continue
                raise _store_error(exc) from exc
            except BaseException:
                conn.close()
                raise

    def clock(self) -> datetime:
        """The database server's current time (aware UTC), as this process tells it.

        The server's clock is read on every new connection (`clock_timestamp()`, the
        middle of that round trip) and counted on with this machine's elapsed-time clock,
        which no wall-clock step or skew touches; before the first connection it is this
        machine's clock. Every lease, deadline and audit time is taken from it, so
        workers on machines whose clocks disagree still agree on when a lease runs out:
        a clock minutes off can neither interrupt a live run nor keep a dead one
        (ADR 0056).
        """
        anchor = self._server_clock
        if anchor is None:
            return utc_now()
        server, at = anchor
        return server + timedelta(seconds=elapsed() - at)

    def _read_server_clock(self, conn: _Connection, listener: bool = False) -> None:
        """Anchor `clock()` on the server's time, read on the new connection `conn` (on a
        connector thread; bounded by `command_timeout` like every wait for the server).

        The same query pins the session's idle timeouts (ADR 0068): an
        `idle_in_transaction_session_timeout` or `idle_session_timeout` shorter than
        `_IDLE_FLOOR` is raised to it (a transaction is idle between its round trips only
        while this process reads rows, and a pooled connection is checked before use, so
        a shorter timeout only kills healthy work); on the listener's connection, an
        `idle_session_timeout` that would expire before three of its checks is raised to
        that. Both are pinned to the session, so a reload that lowers them later does not
        reach connections already open.

        Raises:
            StoreError: the server did not answer in time.
            psycopg.Error: the server refused the query or closed the connection.
        """
        pg = conn.pgconn
        sent = elapsed()
        if conn.info.server_version >= 140000:  # PostgreSQL 13 has no idle_session_timeout
            query = _session_setup(self._idle_session_floor(listener))
        else:
            query = _SESSION_SETUP_13
        pg.send_query(query)
        while pg.flush():
            if not _wait_socket(pg.socket, True, self.command_timeout):
                raise StoreTimeout(self.command_timeout or 0.0, commit_sent=False)
        text: bytes | None = None
        while True:
            while pg.is_busy():
                if not _wait_socket(pg.socket, False, self.command_timeout):
                    raise StoreTimeout(self.command_timeout or 0.0, commit_sent=False)
                pg.consume_input()
            result = pg.get_result()
            if result is None:
                break
            if result.status == _TUPLES_OK and result.ntuples == 1:
                text = result.get_value(0, 0)
                if result.nfields > 2 and result.get_value(0, 1) == b"t":
                    # this server closes idle sessions too soon: later connections raise
                    # the timeout in their startup packet, before any window (ADR 0068)
                    self._short_idle_session = True
            elif result.status == _FATAL:
                raise pg_errors.error_from_result(result, encoding=conn.info.encoding)
        got = elapsed()
        if text is not None:
            server = datetime.fromtimestamp(float(text), UTC)
            self._server_clock = (server, (sent + got) / 2)

    def _ensure_migrated(self, conn: _Connection) -> None:
        if self._migrated:
            return
        with self._migrate_lock:
            if self._migrated:
                return
            version = conn.info.server_version
            if version < _MIN_SERVER_VERSION:
                raise StoreError(
                    f"golem needs PostgreSQL {_MIN_SERVER_VERSION // 10000} or later; "
                    f"{_redact(self.dsn)} runs {version // 10000}.{version % 10000}"
                )
            c = _SchemaConn(conn, self.stats)
            if self._schema_is_current(c):
                self._migrated = True
                return
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

    def _schema_is_current(self, c: _SchemaConn) -> bool:
        """Whether the schema is at this golem's version, read in one statement outside
        any transaction: then opening writes nothing and takes no lock, so a read-only
        database (or a hot standby) still serves reads."""
        try:
            rows = c.fetch("SELECT max(version) FROM golem_schema_version")
        except pg_errors.UndefinedTable:  # a new database (or schema): migrate
            return False
        return bool(rows) and rows[0][0] == LATEST_VERSION

    async def _checkout(self) -> _Conn:
        """An idle connection that still looks alive, or a new one once the pool has room.

        When the server has no slot for a new connection (`StoreBusy`) the call waits for
        one of the pool's own instead, if it holds any; only a pool with none raises it.

        The pool may serve several event loops at once (an app run by a test client on a
        thread of its own, say): its state changes under a lock, and a waiter of another
        loop is woken through that loop.
        """
        while True:
            if self._closed:
                raise StoreError(f"{self!r} is closed")
            waiter: asyncio.Future[None] | None = None
            with self._pool_lock:
                c = self._idle.pop() if self._idle else None
                grow = c is None and self._opened < self.pool_size
                if grow:
                    self._opened += 1
                elif c is None:
                    waiter = asyncio.get_running_loop().create_future()
                    self._queue.append(waiter)
            if c is not None:
                if not c.conn.closed and c.quiet():
                    return c
                c.conn.close()  # closed by the server while idle: replace it
                with self._pool_lock:
                    self._opened -= 1
                continue
            if grow:  # connecting (and migrating, the first time) blocks: not on the loop
                connecting = self._open_connection()
                self._connecting.add(connecting)
                connecting.add_done_callback(self._connecting.discard)
                try:
                    return await asyncio.shield(connecting)
                except asyncio.CancelledError:
                    connecting.add_done_callback(self._adopt)  # it joins the pool when open
                    raise
                except StoreBusy:
                    # the server has no slot for another connection: while the pool holds
                    # some, wait for one of them (ADR 0068); with none, nothing will come
                    with self._pool_lock:
                        self._opened -= 1
                        others = self._opened > 0
                        if others and not self._idle:
                            waiter = asyncio.get_running_loop().create_future()
                            self._queue.append(waiter)
                    if not others:
                        self._wake_next()
                        raise
                    if waiter is None:
                        continue  # one of ours came back meanwhile
                except BaseException:
                    with self._pool_lock:
                        self._opened -= 1
                    self._wake_next()
                    raise
            assert waiter is not None
            try:
                await waiter
            except BaseException:
                with self._pool_lock, contextlib.suppress(ValueError):
                    self._queue.remove(waiter)
                if waiter.done() and not waiter.cancelled():
                    self._wake_next()  # pass on the turn this waiter was given
                raise

    def _open_connection(self) -> asyncio.Future[_Conn]:
        """Open a connection (and migrate, the first time) on a short-lived thread of its
        own, which blocks on the network; never the loop's default executor, which
        blocking sync tools may all be holding while a lease renewal waits for a
        connection (ADR 0057)."""

        def unclaimed() -> None:  # its loop closed meanwhile: it never joins the pool
            with self._pool_lock:
                self._opened -= 1

        return _connect_on_thread(self._connect, unclaimed)

    def _threads(self) -> DatabaseThreads[None]:
        """The store's own threads for event loops that cannot watch sockets (Windows'
        Proactor): each holds one transaction's or socket wait's blocking call. Started on
        first use; enough for `pool_size` transactions and the change feed's listener."""
        threads = self._thread_pool
        if threads is None:
            with self._pool_lock:
                threads = self._thread_pool
                if threads is None:
                    threads = self._thread_pool = DatabaseThreads(
                        "golem-pg", self.pool_size + 2, _nothing
                    )
        return threads

    def _adopt(self, connecting: asyncio.Future[_Conn]) -> None:
        """Pool a connection whose caller stopped waiting while it was being opened."""
        if connecting.cancelled() or connecting.exception() is not None:
            with self._pool_lock:
                self._opened -= 1
            self._wake_next()
        else:
            self._checkin(connecting.result())

    def _checkin(self, c: _Conn) -> None:
        """Give the connection back (closed ones and ones left mid-transaction are dropped)."""
        drop = self._closed or c.conn.closed or c.pg.transaction_status != _IDLE
        if drop:
            c.conn.close()
        with self._pool_lock:
            if drop:
                self._opened -= 1
            else:
                self._idle.append(c)
            waiting = bool(self._queue)
        if waiting:
            self._wake_next()

    def _wake_next(self) -> None:
        """Let the longest-waiting transaction look for a connection again."""
        with self._pool_lock:
            waiter = self._queue.popleft() if self._queue else None
        if waiter is None:
            return
        loop = waiter.get_loop()
        try:
            same = asyncio.get_running_loop() is loop
        except RuntimeError:
            same = False
        if same:
            _settle(waiter)
        else:
            with contextlib.suppress(RuntimeError):  # that loop closed: nobody waits
                loop.call_soon_threadsafe(_settle, waiter)

    # ------------------------------------------------------------------ transactions

    async def _submit(self, write: bool, fn: Callable[..., _T], *args: Any) -> _T:
        if self._closed:
            raise StoreError(f"{self!r} is closed")
        self._feed.bind(asyncio.get_running_loop())
        for attempt in (1, 2):
            c = await self._checkout()
            try:
                return await self._drive(c, write, fn, args)
            except _NoAnswer:
                timeout = self.command_timeout or 0.0
                raise StoreTimeout(timeout, commit_sent=write and c.sent_commit) from None
            except psycopg.OperationalError as exc:
                broken = c.conn.broken or c.conn.closed
                if broken or c.pg.transaction_status != _IDLE:
                    c.conn.close()
                # else the server refused the statement (statement_timeout, lock_timeout, a
                # cancel) and the transaction was rolled back: the connection stays pooled
                # a read is safe to repeat whenever it broke; a write only before its COMMIT
                # went out (after, it may have committed: ADR 0045)
                unsent = not write or not c.sent_commit
                if broken and unsent and attempt == 1 and not self._closed:
                    when = "before commit" if write else "during a read"
                    log.info("postgresql connection lost %s; retrying: %s", when, exc)
                    continue
                raise StoreError(f"postgresql: {exc}") from exc
            except psycopg.Error as exc:
                raise _store_error(exc) from exc
            finally:
                if not c.handed_off:
                    self._checkin(c)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _drive(self, c: _Conn, write: bool, fn: Callable[..., _T], args: Any) -> _T:
        """Run the transaction on `c` in a greenlet, its socket waits awaited on the loop.

        The transaction's code is synchronous (shared with SQLite); each time libpq would
        block, the greenlet switches back here with the socket to wait for, and is switched
        into again once the socket is ready: no thread hop, no blocked loop. A caller
        cancelled meanwhile is let go at once, and a task of its own finishes the
        transaction (commit or rollback), as a database thread would.
        """
        loop = asyncio.get_running_loop()
        if loop in _NO_READERS:
            return await self._on_thread(loop, c, write, fn, args)
        g = greenlet.greenlet(self._attempt)
        request: Any = g.switch(c, write, fn, args)
        timeout = self.command_timeout
        while not g.dead:
            try:
                await _socket_ready(loop, request, timeout, self._threads)
            except _NoAnswer:
                c.conn.close()  # the server rolls back whatever it had not committed
                with contextlib.suppress(BaseException):
                    g.throw(_Abandoned())
                raise
            except asyncio.CancelledError:
                c.handed_off = True  # `_finish` gives the connection back, not `_submit`
                finish = loop.create_task(self._finish(g, c, request))
                self._orphans.add(finish)
                finish.add_done_callback(self._orphans.discard)
                raise
            request = g.switch()
        result: _T = request
        return result

    async def _on_thread(
        self, loop: asyncio.AbstractEventLoop, c: _Conn, write: bool, fn: Callable[..., _T], args: Any
    ) -> _T:
        """The transaction on one of the store's own threads, for an event loop that cannot
        watch sockets; never the loop's default executor, which blocking sync tools may all
        be holding while a lease renewal waits (ADR 0062). A cancelled caller is let go and
        the connection comes back once the thread is done."""
        done: asyncio.Future[_T] = self._threads().submit(
            loop, lambda _slot: self._attempt(c, write, fn, args)
        )
        try:
            return await asyncio.shield(done)
        except asyncio.CancelledError:
            c.handed_off = True
            self._orphans.add(done)
            done.add_done_callback(self._orphans.discard)

            def back(finished: asyncio.Future[_T]) -> None:
                if not finished.cancelled() and finished.exception() is not None:
                    log.debug("a transaction finishing for a cancelled caller failed")
                c.handed_off = False
                self._checkin(c)

            done.add_done_callback(back)
            raise

    async def _finish(self, g: greenlet.greenlet, c: _Conn, request: Any) -> None:
        """Drive a transaction whose caller was cancelled to its end, then give the
        connection back (the caller's own `_submit` no longer does)."""
        loop = asyncio.get_running_loop()
        try:
            while not g.dead:  # a socket that was ready as the caller left is ready still
                await _socket_ready(loop, request, self.command_timeout, self._threads)
                request = g.switch()
        except BaseException as exc:  # the loop is shutting down, or the transaction failed
            if not g.dead:
                c.conn.close()  # the server rolls back whatever was not committed
                with contextlib.suppress(BaseException):
                    g.throw(_Abandoned())
            if not isinstance(exc, Exception):
                raise
            log.debug("a transaction finishing for a cancelled caller failed", exc_info=True)
        finally:
            c.handed_off = False
            self._checkin(c)

    def _attempt(self, c: _Conn, write: bool, fn: Callable[..., _T], args: Any) -> _T:
        self.stats.transactions += 1
        tx = Tx(c)
        try:
            c.begin(_BEGIN_WRITE if write else _BEGIN_READ)
            result = fn(tx, *args)
            if tx.entries:
                self._flush_audit(tx)
            c.end()
        except BaseException:
            if not c.conn.closed and not c.conn.broken:
                c.abort()
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
            f"(id, run_id, at, actor, action, detail, agent) SELECT s.last_id - {n} + v.n, "
            "v.run_id, v.at, v.actor, v.action, v.detail, "
            f"(SELECT r.agent FROM golem_runs r WHERE r.id = v.run_id) FROM s, (VALUES {values}) "
            "AS v(n, run_id, at, actor, action, detail)) "
            "SELECT pg_notify(?, s.last_id::text || ?) FROM s",
            (
                n,
                *(v for row in rows for v in row),
                self.ready_channel if tx.ready else self.channel,
                " ready" if tx.ready else "",
            ),
        )

    def _claimed(
        self, tx: Tx, rows: Later, worker_id: str, at: datetime, detail: dict[str, Any]
    ) -> Later:
        # The claimed runs are known only to the server until the commit: both statements
        # find them as the rows this transaction wrote (`xmin`), so the claim is one round
        # trip, and an empty claim takes no audit lock and notifies nobody.
        mine = (
            "SELECT id, created_at, agent FROM golem_runs WHERE status = 'running' "
            "AND updated_at = ? "
            "AND lease_owner = ? AND xmin = pg_current_xact_id()::xid"
        )
        when = self._to_db(at)
        tx.run(
            f"WITH c AS MATERIALIZED ({mine}), n AS (SELECT count(*) AS n FROM c), "
            "s AS (UPDATE golem_audit_seq SET last_id = last_id + n.n FROM n "
            "WHERE singleton = 1 AND n.n > 0 RETURNING last_id, n.n), "
            "i AS (INSERT INTO golem_audit (id, run_id, at, actor, action, detail, agent) "
            # numbered in creation order, ties by ID in byte order, as Python sorts the rows
            "SELECT s.last_id - s.n + row_number() OVER "
            '(ORDER BY c.created_at, c.id COLLATE "C"), c.id, '
            "?::timestamptz, ?, ?, ?, c.agent FROM s, c) "
            "SELECT pg_notify(?, s.last_id::text) FROM s",
            (
                when,
                worker_id,
                when,
                f"worker:{worker_id}",
                AuditAction.CLAIMED.value,
                to_json(detail),
                self.channel,
            ),
        )
        return tx.later(
            f"SELECT h.history, {C_CALL_COLS}, h.run_id FROM golem_histories h "
            "LEFT JOIN golem_calls c ON c.run_id = h.run_id "
            f"WHERE h.run_id IN (SELECT id FROM ({mine}) AS r) ORDER BY h.run_id, c.position",
            (when, worker_id),
        )

    async def _decide_plain(
        self, record: Callable[[], DecisionRecord]
    ) -> DecisionRecord | None:
        def plain(tx: Tx) -> DecisionRecord:
            d = record()
            self._record_if_plain(tx, d, FITS[d.kind], decided_detail(d, None))
            return d

        try:
            return await self._submit(True, plain)
        except _NotPlain:
            return None  # rolled back: `decide` runs its full transaction

    def _record_if_plain(
        self, tx: Tx, d: DecisionRecord, call_kinds: tuple[str, ...], detail: dict[str, Any]
    ) -> None:
        # Four statements in one pipeline, nothing read until the commit. Locking the run
        # first, alone, makes every later statement see each decision committed before
        # (READ COMMITTED takes a snapshot per statement): two approvers deciding a run's
        # two calls at once take turns, and the second one sees the run become ready.
        when = self._to_db(d.decided_at)
        tx.run(
            "SELECT 1 FROM golem_runs WHERE id = ? AND status = 'pending' FOR UPDATE",
            (d.run_id,),
        )
        kinds = ", ".join("?" for _ in call_kinds)
        tx.run(
            "UPDATE golem_calls SET decision = ?, decision_reason = ?, decision_text = ?, "
            "decided_by = ?, decided_at = ?, decision_args = NULL "
            "WHERE run_id = ? AND call_id = ? AND decision IS NULL "
            f"AND kind IN ({kinds}) AND (deadline IS NULL OR deadline > ?) "
            "AND EXISTS (SELECT 1 FROM golem_runs WHERE id = ? AND status = 'pending')",
            (
                d.kind.value,
                d.reason,
                d.text,
                d.decided_by,
                when,
                d.run_id,
                d.call_id,
                *call_kinds,
                when,
                d.run_id,
            ),
        )
        conn = tx.conn
        assert isinstance(conn, _Conn)
        conn.guard(
            "SELECT 1 / (SELECT count(*) FROM golem_calls "
            "WHERE run_id = ? AND call_id = ? AND xmin = pg_current_xact_id()::xid)",
            (d.run_id, d.call_id),
            _NotPlain(),
        )
        # the run's new status, its audit entries (DECIDED, then READY when no call is left
        # undecided) and the notice, as `decide`'s full transaction writes them
        tx.run(
            "WITH u AS (UPDATE golem_runs SET status = CASE WHEN EXISTS (SELECT 1 FROM "
            "golem_calls WHERE run_id = ? AND decision IS NULL) THEN 'pending' ELSE 'ready' "
            "END, updated_at = ? WHERE id = ? RETURNING status = 'ready' AS ready, agent), "
            "n AS (SELECT u.ready, CASE WHEN u.ready THEN 2 ELSE 1 END AS n FROM u), "
            "s AS (UPDATE golem_audit_seq SET last_id = last_id + n.n FROM n "
            "WHERE singleton = 1 RETURNING last_id, n.n, n.ready), "
            "i AS (INSERT INTO golem_audit (id, run_id, at, actor, action, detail, agent) "
            "SELECT s.last_id - s.n + v.k, ?, ?::timestamptz, ?, v.action, v.detail, u.agent "
            "FROM s, u, (VALUES (1, ?, ?), (2, ?, '{}')) AS v(k, action, detail) "
            "WHERE v.k <= s.n) "
            "SELECT pg_notify(CASE WHEN s.ready THEN ? ELSE ? END, "
            "s.last_id::text || CASE WHEN s.ready THEN ' ready' ELSE '' END) FROM s",
            (
                d.run_id,
                when,
                d.run_id,
                d.run_id,
                when,
                d.decided_by,
                AuditAction.DECIDED.value,
                to_json(detail),
                AuditAction.READY.value,
                self.ready_channel,
                self.channel,
            ),
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

    def change_feed(self, *, ready_only: bool = False) -> ChangeFeed:
        """The store's `ChangeFeed`, fed by `LISTEN` (started on first use).

        With `ready_only` (what a worker asks for) the process listens only on
        `ready_channel`, so the commits that make no run ready — most of them — wake no
        worker-only process; the first caller without it (an event stream) makes the
        listener hear `channel` too, for the rest of the store's life.
        """
        if self._closed:
            return self._feed
        if not ready_only and not self._listen_all:
            self._listen_all = True
            if self._listener is not None:  # listening to ready changes only: listen to all
                self._listener.cancel()
                self._feed_started = False
        if not self._feed_started:
            self._feed_started = True
            self._listener = asyncio.get_running_loop().create_task(
                self._listen(), name="golem-pg-listener"
            )
        return self._feed

    def _channels(self) -> tuple[str, ...]:
        """The channels the listener hears now."""
        return (self.ready_channel, self.channel) if self._listen_all else (self.ready_channel,)

    async def _listen(self) -> None:
        """Fan `NOTIFY` out to the feed; reconnect (waking every waiter) after a failure.

        After `listen_check_interval` seconds without a message the connection is asked an
        empty query, which must be answered within `command_timeout`: a listener whose
        server stopped answering (a frozen server, a network that drops packets, a
        middlebox that forgot the idle connection) is closed and replaced. A wake-up is
        then late by at most the two, never by a poll interval.
        """
        loop = asyncio.get_running_loop()
        delay = 0.1
        while not self._closed:
            try:
                c = await self._connect_listener()
            except StoreError as exc:
                log.warning("change feed: %s", exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            try:
                listen = "; ".join(f'LISTEN "{channel}"' for channel in self._channels())
                await self._ask(loop, c, listen.encode())
                self._listening = c
                delay = 0.1
                # changes committed before LISTEN took effect sent no notice we heard:
                # read the newest ID now (every later commit notifies)
                self._feed.publish(await self._probe(), ready=True)
                while True:
                    if not await self._hear(loop, c, self.listen_check_interval):
                        await self._ask(loop, c, b"")  # silent for a while: still there?
            except _NoAnswer:
                if self._closed:
                    return
                log.warning(
                    "change feed: the listener connection did not answer within %gs; "
                    "replacing it",
                    self.command_timeout,
                )
            except (psycopg.Error, OSError, ValueError, StoreError) as exc:
                if self._closed:
                    return
                log.warning("change feed: listener connection lost: %s", exc)
                await asyncio.sleep(delay)
            finally:
                self._listening = None
                c.conn.close()  # the server forgets its LISTEN with it

    async def _connect_listener(self) -> _Conn:
        """A connection for `LISTEN`, opened on a thread of its own (as the pool's are)."""
        connecting = _connect_on_thread(lambda: self._connect(listener=True))
        try:
            return await asyncio.shield(connecting)
        except asyncio.CancelledError:  # closed once open: nobody listens on it
            connecting.add_done_callback(_close_if_opened)
            raise

    async def _hear(
        self, loop: asyncio.AbstractEventLoop, c: _Conn, within: float | None
    ) -> bool:
        """Wait up to `within` seconds for the server to send something; publish the
        notifications it sent. False when it sent nothing."""
        try:
            await _socket_ready(loop, (c.pg.socket, False), within, self._threads)
        except _NoAnswer:
            return False
        c.pg.consume_input()  # raises once the server closed the connection
        self._publish_notes(c)
        return True

    async def _ask(self, loop: asyncio.AbstractEventLoop, c: _Conn, sql: bytes) -> None:
        """Send `sql` outside the pipeline and wait for its answers, each wait bounded by
        `command_timeout` (`_NoAnswer` past it); raise the first error the server sent."""
        pg = c.pg
        timeout = self.command_timeout
        pg.send_query(sql)
        while pg.flush():
            await _socket_ready(loop, (pg.socket, True), timeout, self._threads)
            pg.consume_input()
        error: pq.abc.PGresult | None = None
        while True:
            while pg.is_busy():
                await _socket_ready(loop, (pg.socket, False), timeout, self._threads)
                pg.consume_input()
            result = pg.get_result()
            if result is None:
                break
            if result.status == _FATAL and error is None:
                error = result
        self._publish_notes(c)
        if error is not None:
            raise pg_errors.error_from_result(error, encoding=c.conn.info.encoding)

    def _publish_notes(self, c: _Conn) -> None:
        while (note := c.pg.notifies()) is not None:
            last, _, flag = note.extra.decode().partition(" ")
            self._feed.publish(int(last), ready=flag == "ready")

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
        loop = asyncio.get_running_loop()
        orphans = [t for t in list(self._orphans) if not t.done() and t.get_loop() is loop]
        if orphans:  # let the transactions of cancelled callers finish
            await asyncio.wait(orphans)
        opening = [f for f in list(self._connecting) if not f.done() and f.get_loop() is loop]
        if opening:  # connections still being opened: pooled, so closed, once open
            await asyncio.wait(opening)
        with self._pool_lock:
            idle, self._idle = self._idle, []
            self._opened -= len(idle)
        for c in idle:
            c.conn.close()
        while self._queue:  # waiters find the store closed
            self._wake_next()
        if self._thread_pool is not None:
            self._thread_pool.stop()  # daemon threads: they end once their last wait does


_CONNECT_TIMEOUT = 10
"""Seconds to connect when neither the store nor the DSN says."""

_IDLE_FLOOR = 10_000
"""Milliseconds: the shortest `idle_in_transaction_session_timeout` and
`idle_session_timeout` a store connection keeps. A store transaction is idle only while
this process reads the rows of one round trip before sending the next, and a pooled
connection the server closed is replaced before use, so shorter settings only kill healthy
work; a process frozen mid-transaction still loses it (and its locks) this long after."""

_IDLE_SESSION_TIMEOUT = "57P05"
"""SQLSTATE `idle_session_timeout`: the server closed a connection that idled too long."""

_LISTENER_IDLE = 3
"""The listener's connection keeps an `idle_session_timeout` of at least this many
`listen_check_interval`s: it sends an empty query every interval it hears nothing."""


def _pin_timeout(name: str, floor_ms: int) -> str:
    """A select-list item that sets the session's `name` to its current value, raised to
    `floor_ms` when it is positive and shorter."""
    current = f"current_setting('{name}')"
    return (
        f", set_config('{name}', CASE WHEN {current}::interval > interval '0' "
        f"AND {current}::interval < interval '{floor_ms} ms' THEN '{floor_ms}ms' "
        f"ELSE {current} END, false)"
    )


_SESSION_SETUP_13 = (
    "SELECT extract(epoch FROM clock_timestamp())::text"
    + _pin_timeout("idle_in_transaction_session_timeout", _IDLE_FLOOR)
).encode()
"""A new connection's first query on PostgreSQL 13: the server's clock, and the pinned
idle-in-transaction timeout."""


def _session_setup(idle_session_floor_ms: int) -> bytes:
    """A new connection's first query: the server's clock; whether the server's
    `idle_session_timeout` is positive and below `_IDLE_FLOOR` (read before it is pinned:
    the materialized CTE is evaluated first); and both idle timeouts pinned."""
    current = "current_setting('idle_session_timeout')::interval"
    return (
        f"WITH s AS MATERIALIZED (SELECT {current} AS idle) "
        "SELECT extract(epoch FROM clock_timestamp())::text, "
        f"s.idle > interval '0' AND s.idle < interval '{_IDLE_FLOOR} ms'"
        + _pin_timeout("idle_in_transaction_session_timeout", _IDLE_FLOOR)
        + _pin_timeout("idle_session_timeout", idle_session_floor_ms)
        + " FROM s"
    ).encode()


_TOO_MANY_CONNECTIONS = "53300"
"""SQLSTATE `too_many_connections`: no free connection slot."""

_READ_ONLY = "25006"
"""SQLSTATE `read_only_sql_transaction`: a write in a read-only transaction."""


def _no_slot(exc: psycopg.Error) -> bool:
    """Whether the server refused a new connection for want of a slot: by SQLSTATE when
    the error carries one; else (libpq keeps the code of a connection that failed during
    startup to itself) by the message, in any language PostgreSQL ships (ADR 0072)."""
    if exc.sqlstate is not None:
        return exc.sqlstate == _TOO_MANY_CONNECTIONS
    return no_slot_message(str(exc))


def _store_error(exc: psycopg.Error) -> StoreError:
    """The store's error for a failure the server reported, by its SQLSTATE (never its
    message, which follows the server's `lc_messages`): `StoreReadOnly` for a write the
    database refused as read-only, `StoreBusy` for no free connection slot, else a plain
    `StoreError`."""
    state = exc.sqlstate
    if state == _READ_ONLY:
        return StoreReadOnly(f"postgresql: the database is read-only: {exc}")
    if state == _TOO_MANY_CONNECTIONS:
        return StoreBusy(f"postgresql: no free connection slot: {exc}")
    return StoreError(f"postgresql: {exc}")


_URL_OPTIONS = ("pool_size", "command_timeout", "schema")
"""Query parameters of a store URL that configure the store, not libpq."""


def split_url(url: str) -> tuple[str, dict[str, Any]]:
    """The libpq URL and the `PostgresStore` keywords of a store URL.

    `postgresql://…/db?pool_size=8&command_timeout=30&schema=golem&sslmode=require` gives
    the URL without the first three (libpq would refuse them) and `{"pool_size": 8,
    "command_timeout": 30.0, "schema": "golem"}`; `command_timeout=none` waits forever.

    Raises:
        ValueError: a value that is not a number where one is needed, or an option given
            twice.
    """
    base, sep, query = url.partition("?")
    if not sep:
        return url, {}
    kept: list[str] = []
    options: dict[str, Any] = {}
    for item in query.split("&"):
        key, _, raw = item.partition("=")
        name = unquote(key)
        if name not in _URL_OPTIONS:
            kept.append(item)
            continue
        if name in options:
            raise ValueError(f"store URL: {name} is given twice")
        value = unquote(raw)
        try:
            if name == "pool_size":
                options[name] = int(value)
            elif name == "command_timeout":
                none = value.strip().lower() in ("none", "off")
                options[name] = None if none else float(value)
            else:
                options[name] = value
        except ValueError:
            raise ValueError(f"store URL: {name} must be a number, got {value!r}") from None
    return base + ("?" + "&".join(kept) if kept else ""), options


_NO_READERS: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()
"""Event loops without `add_reader` (Windows' Proactor loop): transactions run on threads."""


class _NotPlain(Exception):
    """A decision sent without reading found no plain case (its transaction rolls back)."""


class _Abandoned(BaseException):
    """Unwinds a transaction's greenlet whose connection was closed under it."""


class _NoAnswer(Exception):
    """A socket wait outlasted the command timeout (`_submit` raises `StoreTimeout`)."""


def _nothing(slot: Slot[None]) -> None:
    """What a store thread has to release when it ends: nothing (connections are pooled)."""


def _close_if_opened(connecting: asyncio.Future[_Conn]) -> None:
    if not connecting.cancelled() and connecting.exception() is None:
        connecting.result().conn.close()


def _connect_on_thread(
    connect: Callable[[], _Conn], unclaimed: Callable[[], None] | None = None
) -> asyncio.Future[_Conn]:
    """`connect()` on a short-lived thread of its own, its result delivered to the running
    loop; a connection whose loop closed before it arrived is closed (then `unclaimed`)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[_Conn] = loop.create_future()

    def deliver(conn: _Conn | None, error: BaseException | None) -> None:
        if future.done():  # nobody cancels it (callers shield it): never expected
            if conn is not None:
                conn.conn.close()
        elif error is not None:
            future.set_exception(error)
        else:
            assert conn is not None
            future.set_result(conn)

    def run() -> None:
        conn: _Conn | None = None
        error: BaseException | None = None
        try:
            conn = connect()
        except BaseException as exc:
            error = exc
        try:
            loop.call_soon_threadsafe(deliver, conn, error)
        except RuntimeError:  # that loop closed meanwhile: nobody waits
            if conn is not None:
                conn.conn.close()
            if unclaimed is not None:
                unclaimed()

    threading.Thread(target=run, name="golem-connect", daemon=True).start()
    return future


async def _socket_ready(
    loop: asyncio.AbstractEventLoop,
    request: tuple[int, bool],
    timeout: float | None,
    threads: Callable[[], DatabaseThreads[None]],
) -> None:
    """Wait until the socket `request` names is readable (or, with its flag, writable);
    raise `_NoAnswer` after `timeout` seconds.

    A loop that cannot watch sockets (Windows' Proactor) is remembered on its first try:
    this wait and every later transaction of that loop go to the store's own `threads`.
    """
    fd, write = request
    if loop not in _NO_READERS:
        ready = loop.create_future()
        try:
            loop.add_reader(fd, _settle, ready)
        except NotImplementedError:
            _NO_READERS.add(loop)
        else:
            if write:
                loop.add_writer(fd, _settle, ready)
            timer = None if timeout is None else loop.call_later(timeout, _expire, ready)
            try:
                await ready
            finally:
                loop.remove_reader(fd)
                if write:
                    loop.remove_writer(fd)
                if timer is not None:
                    timer.cancel()
            return
    if not await threads().submit(loop, lambda _slot: _wait_socket(fd, write, timeout)):
        raise _NoAnswer


def _settle(ready: asyncio.Future[None]) -> None:
    if not ready.done():
        ready.set_result(None)


def _expire(ready: asyncio.Future[None]) -> None:
    if not ready.done():
        ready.set_exception(_NoAnswer())


def _redact(dsn: str) -> str:
    """The DSN without its password (for messages and reprs)."""
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", re.sub(r"password=\S+", "password=***", dsn))
