"""PostgreSQL at the libpq level: the `Conn` port in pipeline mode, prepared statements,
binary rows, and socket waits handed to the event loop (ADR 0023, 0038, 0039, 0079).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import select
import threading
import weakref
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeAlias, TypeVar

from golem.durable.store._base import Later, Stats
from golem.durable.store._threads import DatabaseThreads, Slot

try:
    import greenlet
    import psycopg
    from psycopg import errors as pg_errors
    from psycopg import pq
    from psycopg.adapt import Transformer
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "PostgresStore needs psycopg 3 and greenlet: pip install 'golem-agents[postgres]'"
    ) from exc

_T = TypeVar("_T")
log = logging.getLogger("golem.durable.store")

Connection = psycopg.Connection[tuple[Any, ...]]

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
OID_TIMESTAMPTZ = 1184


def _dump(params: Sequence[Any]) -> tuple[list[bytes | None], tuple[int, ...]]:
    """Parameters in libpq's text format, with their type OIDs."""
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
            types.append(OID_TIMESTAMPTZ)
        else:
            raise TypeError(f"PostgresStore cannot send a {t.__name__} parameter: {v!r}")
    return values, tuple(types)


MIN_SERVER_VERSION = 130000

_MAX_PREPARED = 256
_statement_names = itertools.count(1)


class _Guard:
    """A guard statement's result: its division by zero means `error`."""

    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error


_Then: TypeAlias = tuple[bytes, tuple[int, ...]] | Later | Exception | _Guard | None

_RUN_CHANGED = (
    "SELECT 1 / (SELECT count(*) FROM golem_runs WHERE id = ? AND xmin = pg_current_xact_id()::xid)"
)

BEGIN_WRITE = b"BEGIN ISOLATION LEVEL READ COMMITTED"
BEGIN_READ = b"BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"

IDLE = pq.TransactionStatus.IDLE
FATAL = pq.ExecStatus.FATAL_ERROR
TUPLES_OK = pq.ExecStatus.TUPLES_OK
_SQLSTATE = pq.DiagnosticField.SQLSTATE
_UNIQUE = b"23505"
_DIVISION_BY_ZERO = b"22012"
_SYNC = pq.ExecStatus.PIPELINE_SYNC
_COMMAND_OK = pq.ExecStatus.COMMAND_OK
_BINARY = pq.Format.BINARY


class PgConn:
    """The `Conn` port over one connection in libpq pipeline mode, statements prepared once,
    binary rows (ADR 0023)."""

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

    def __init__(self, conn: Connection, stats: Stats, timeout: float | None = None) -> None:
        self.conn = conn
        self.pg = conn.pgconn
        self.timeout = timeout
        self._stats = stats
        self._loader = Transformer(conn)
        self._prepared: dict[tuple[bytes, tuple[int, ...]], bytes] = {}
        self._sent: list[_Then] = []
        self._poll = select.poll()
        self._poll.register(self.pg.socket, select.POLLIN)
        self.sent_commit = False
        self.handed_off = False

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
        """Send a sync point; the results since the last one (raising the first error)."""
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
            if status == FATAL:
                if type(then) is tuple:  # a prepare the server refused (a timeout while it
                    self._prepared.pop(then, None)  # waited for a table lock): not prepared
                if error is None:
                    error = result, then
            elif type(then) is Later:
                rows = None
                if status == TUPLES_OK:
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
        """Wait for the socket: in a transaction's greenlet, on the loop; else blocking."""
        fd = self.pg.socket
        parent = greenlet.getcurrent().parent
        if parent is not None:
            parent.switch((fd, write))
        elif not wait_socket(fd, write, self.timeout):
            self.conn.close()  # the server rolls back whatever it had not committed
            raise NoAnswer


def wait_socket(fd: int, write: bool, timeout: float | None) -> bool:
    """Block until the socket is readable (or, with `write`, writable); False on timeout."""
    readable, writable, _ = select.select([fd], [fd] if write else [], [], timeout)
    return bool(readable or writable)


class PgSchemaConn:
    """The `SchemaConn` port over psycopg's own API (migrations, outside the hot path)."""

    __slots__ = ("_conn", "_stats")

    def __init__(self, conn: Connection, stats: Stats) -> None:
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


NO_READERS: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()


class NotPlain(Exception):
    """A decision sent without reading found no plain case (its transaction rolls back)."""


class Abandoned(BaseException):
    """Unwinds a transaction's greenlet whose connection was closed under it."""


class NoAnswer(Exception):
    """A socket wait outlasted the command timeout (`_submit` raises `StoreTimeout`)."""


def close_if_opened(connecting: asyncio.Future[PgConn]) -> None:
    if not connecting.cancelled() and connecting.exception() is None:
        connecting.result().conn.close()


def connect_on_thread(
    connect: Callable[[], PgConn], unclaimed: Callable[[], None] | None = None
) -> asyncio.Future[PgConn]:
    """`connect()` on a short-lived thread of its own, its result delivered to the running
    loop; a connection whose loop closed before it arrived is closed (then `unclaimed`)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[PgConn] = loop.create_future()

    def deliver(conn: PgConn | None, error: BaseException | None) -> None:
        if future.done():  # nobody cancels it (callers shield it): never expected
            if conn is not None:
                conn.conn.close()
        elif error is not None:
            future.set_exception(error)
        else:
            assert conn is not None
            future.set_result(conn)

    def run() -> None:
        conn: PgConn | None = None
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


async def socket_ready(
    loop: asyncio.AbstractEventLoop,
    request: tuple[int, bool],
    timeout: float | None,
    threads: Callable[[], DatabaseThreads[None]],
) -> None:
    """Wait until the socket is ready; `NoAnswer` after `timeout`."""
    fd, write = request
    if loop not in NO_READERS:
        ready = loop.create_future()
        try:
            loop.add_reader(fd, settle, ready)
        except NotImplementedError:
            NO_READERS.add(loop)
        else:
            if write:
                loop.add_writer(fd, settle, ready)
            timer = None if timeout is None else loop.call_later(timeout, expire, ready)
            try:
                await ready
            finally:
                loop.remove_reader(fd)
                if write:
                    loop.remove_writer(fd)
                if timer is not None:
                    timer.cancel()
            return
    if not await threads().submit(loop, lambda _slot: wait_socket(fd, write, timeout)):
        raise NoAnswer


def settle(ready: asyncio.Future[None]) -> None:
    if not ready.done():
        ready.set_result(None)


def expire(ready: asyncio.Future[None]) -> None:
    if not ready.done():
        ready.set_exception(NoAnswer())


def nothing(slot: Slot[None]) -> None:
    """What a store thread has to release when it ends: nothing (connections are pooled)."""


async def drive(
    c: PgConn,
    attempt: Callable[[], _T],
    *,
    timeout: float | None,
    threads: Callable[[], DatabaseThreads[None]],
    orphans: set[asyncio.Future[Any]],
    checkin: Callable[[PgConn], None],
) -> _T:
    """Run the transaction in a greenlet whose socket waits are awaited on the loop (ADR 0039);
    a cancelled caller is let go while a task in `orphans` finishes it."""
    loop = asyncio.get_running_loop()
    if loop in NO_READERS:
        return await _on_thread(loop, c, attempt, threads, orphans, checkin)
    g = greenlet.greenlet(attempt)
    request: Any = g.switch()
    while not g.dead:
        try:
            await socket_ready(loop, request, timeout, threads)
        except NoAnswer:
            c.conn.close()  # the server rolls back whatever it had not committed
            with contextlib.suppress(BaseException):
                g.throw(Abandoned())
            raise
        except asyncio.CancelledError:
            c.handed_off = True  # `_finish` gives the connection back, not the caller
            finish = loop.create_task(_finish(g, c, request, timeout, threads, checkin))
            orphans.add(finish)
            finish.add_done_callback(orphans.discard)
            raise
        request = g.switch()
    result: _T = request
    return result


async def _on_thread(
    loop: asyncio.AbstractEventLoop,
    c: PgConn,
    attempt: Callable[[], _T],
    threads: Callable[[], DatabaseThreads[None]],
    orphans: set[asyncio.Future[Any]],
    checkin: Callable[[PgConn], None],
) -> _T:
    """The transaction on one of the store's own threads, for a loop that cannot watch
    sockets (ADR 0062)."""
    done: asyncio.Future[_T] = threads().submit(loop, lambda _slot: attempt())
    try:
        return await asyncio.shield(done)
    except asyncio.CancelledError:
        c.handed_off = True
        orphans.add(done)
        done.add_done_callback(orphans.discard)

        def back(finished: asyncio.Future[_T]) -> None:
            if not finished.cancelled() and finished.exception() is not None:
                log.debug("a transaction finishing for a cancelled caller failed")
            c.handed_off = False
            checkin(c)

        done.add_done_callback(back)
        raise


async def _finish(
    g: greenlet.greenlet,
    c: PgConn,
    request: Any,
    timeout: float | None,
    threads: Callable[[], DatabaseThreads[None]],
    checkin: Callable[[PgConn], None],
) -> None:
    """Drive a transaction whose caller was cancelled to its end, then give the connection
    back (the caller no longer does)."""
    loop = asyncio.get_running_loop()
    try:
        while not g.dead:  # a socket that was ready as the caller left is ready still
            await socket_ready(loop, request, timeout, threads)
            request = g.switch()
    except BaseException as exc:  # the loop is shutting down, or the transaction failed
        if not g.dead:
            c.conn.close()  # the server rolls back whatever was not committed
            with contextlib.suppress(BaseException):
                g.throw(Abandoned())
        if not isinstance(exc, Exception):
            raise
        log.debug("a transaction finishing for a cancelled caller failed", exc_info=True)
    finally:
        c.handed_off = False
        checkin(c)
