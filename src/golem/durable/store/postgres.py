"""`PostgresStore`: the store for several machines (psycopg 3, extra `[postgres]`): the pool,
the server's clock, the `LISTEN` feed and the statements PostgreSQL runs instead of the shared
ones (ADR 0038, 0044, 0079)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import math
import os
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from golem.durable._clock import elapsed
from golem.durable.store._base import Stats, Tx, utc_now
from golem.durable.store._feed import ChangeFeed
from golem.durable.store._schema import LATEST_VERSION, migrate
from golem.durable.store._threads import DatabaseThreads
from golem.durable.store.records import StoreBusy, StoreTimeout
from golem.errors import StoreError

try:
    import psycopg
    from psycopg import errors as pg_errors
    from psycopg import pq
    from psycopg.conninfo import conninfo_to_dict
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "PostgresStore needs psycopg 3 and greenlet: pip install 'golem-agents[postgres]'"
    ) from exc
from golem.durable.store._base import C_CALL_COLS, Later, to_json
from golem.durable.store._decisions import FITS, decided_detail
from golem.durable.store._pg_setup import (
    CONNECT_TIMEOUT,
    IDLE_FLOOR,
    IDLE_SESSION_TIMEOUT,
    LISTENER_IDLE,
    SCHEMA_NAME,
    SESSION_SETUP_13,
    no_slot,
    redact,
    session_setup,
    store_error,
)
from golem.durable.store._pg_wire import (
    BEGIN_READ,
    BEGIN_WRITE,
    FATAL,
    IDLE,
    MIN_SERVER_VERSION,
    TUPLES_OK,
    Connection,
    NoAnswer,
    NotPlain,
    PgConn,
    PgSchemaConn,
    close_if_opened,
    connect_on_thread,
    drive,
    nothing,
    settle,
    socket_ready,
    wait_socket,
)
from golem.durable.store._sql import SQLStore
from golem.durable.store.records import AuditAction, DecisionRecord

__all__ = ["PostgresStore"]


_T = TypeVar("_T")


log = logging.getLogger("golem.durable.store")


class PostgresStore(SQLStore):
    """A `Store` in PostgreSQL, shared by any number of processes and machines.

    `schema`: keep the tables there; `pool_size`: connections at most; `connect_timeout` (None:
    the DSN's or 10 s); `command_timeout`: past it a call raises `StoreTimeout` (None: wait)."""

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
        if schema is not None and not SCHEMA_NAME.fullmatch(schema):
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
        self.ready_channel = f"golem_ready:{schema or ''}"
        self._feed = ChangeFeed(self._probe, 3600.0)
        self._feed_started = False
        self._listen_all = False
        self._listener: asyncio.Task[None] | None = None
        self._idle: list[PgConn] = []
        self._opened = 0
        self._queue: collections.deque[asyncio.Future[None]] = collections.deque()
        self._pool_lock = threading.Lock()
        self._orphans: set[asyncio.Future[Any]] = set()
        self._thread_pool: DatabaseThreads[None] | None = None
        self._listening: PgConn | None = None
        self.listen_check_interval: float | None = 10.0
        self._connecting: set[asyncio.Future[PgConn]] = set()
        self._migrate_lock = threading.Lock()
        self._migrated = False
        self._closed = False
        self._short_idle_session = False
        self._server_clock: tuple[datetime, float] | None = None

    def __repr__(self) -> str:
        where = f", schema={self.schema!r}" if self.schema else ""
        return f"PostgresStore({redact(self.dsn)!r}{where})"

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
            kwargs["connect_timeout"] = CONNECT_TIMEOUT
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
            return max(IDLE_FLOOR, math.ceil(LISTENER_IDLE * interval * 1000))
        return IDLE_FLOOR

    def _connect(self, listener: bool = False) -> PgConn:
        where = redact(self.dsn)
        while True:
            try:
                conn = psycopg.Connection.connect(self.dsn, **self._connect_kwargs(listener))
            except psycopg.Error as exc:
                if no_slot(exc):
                    raise StoreBusy(
                        f"cannot connect to PostgreSQL {where}: no free connection slot ({exc})"
                    ) from exc
                raise StoreError(f"cannot connect to PostgreSQL {where}: {exc}") from exc
            version = conn.info.server_version  # 0 once the connection broke
            try:
                self._read_server_clock(conn, listener)
                self._ensure_migrated(conn)
                return PgConn(conn, self.stats, self.command_timeout)
            except psycopg.Error as exc:  # killed, or the server went away, right after connecting
                # closed for idling before its first query could raise the timeout (the
                # server says so, or, before any connection told its settings, the
                # connection just broke: its message can be lost to the reset): connect
                # again with the floor in the startup packet (ADR 0068)
                idle = exc.sqlstate == IDLE_SESSION_TIMEOUT or (
                    exc.sqlstate is None
                    and conn.broken
                    and self._server_clock is None
                    and version >= 140000
                )
                conn.close()
                if idle and not self._short_idle_session:
                    self._short_idle_session = True
                    continue
                raise store_error(exc) from exc
            except BaseException:
                conn.close()
                raise

    def clock(self) -> datetime:
        """The database server's time, counted on with this machine's elapsed clock (ADR 0056)."""
        anchor = self._server_clock
        if anchor is None:
            return utc_now()
        server, at = anchor
        return server + timedelta(seconds=elapsed() - at)

    def _read_server_clock(self, conn: Connection, listener: bool = False) -> None:
        """Anchor `clock()` on the server's time read on the new connection, and pin the session's
        idle timeouts in the same query (ADR 0056, 0068)."""
        pg = conn.pgconn
        sent = elapsed()
        if conn.info.server_version >= 140000:  # PostgreSQL 13 has no idle_session_timeout
            query = session_setup(self._idle_session_floor(listener))
        else:
            query = SESSION_SETUP_13
        pg.send_query(query)
        while pg.flush():
            if not wait_socket(pg.socket, True, self.command_timeout):
                raise StoreTimeout(self.command_timeout or 0.0, commit_sent=False)
        text: bytes | None = None
        while True:
            while pg.is_busy():
                if not wait_socket(pg.socket, False, self.command_timeout):
                    raise StoreTimeout(self.command_timeout or 0.0, commit_sent=False)
                pg.consume_input()
            result = pg.get_result()
            if result is None:
                break
            if result.status == TUPLES_OK and result.ntuples == 1:
                text = result.get_value(0, 0)
                if result.nfields > 2 and result.get_value(0, 1) == b"t":
                    # this server closes idle sessions too soon: later connections raise
                    # the timeout in their startup packet, before any window (ADR 0068)
                    self._short_idle_session = True
            elif result.status == FATAL:
                raise pg_errors.error_from_result(result, encoding=conn.info.encoding)
        got = elapsed()
        if text is not None:
            server = datetime.fromtimestamp(float(text), UTC)
            self._server_clock = (server, (sent + got) / 2)

    def _ensure_migrated(self, conn: Connection) -> None:
        if self._migrated:
            return
        with self._migrate_lock:
            if self._migrated:
                return
            version = conn.info.server_version
            if version < MIN_SERVER_VERSION:
                raise StoreError(
                    f"golem needs PostgreSQL {MIN_SERVER_VERSION // 10000} or later; "
                    f"{redact(self.dsn)} runs {version // 10000}.{version % 10000}"
                )
            c = PgSchemaConn(conn, self.stats)
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

    def _schema_is_current(self, c: PgSchemaConn) -> bool:
        """Whether the schema is at this golem's version, read in one statement outside
        any transaction: then opening writes nothing and takes no lock, so a read-only
        database (or a hot standby) still serves reads."""
        try:
            rows = c.fetch("SELECT max(version) FROM golem_schema_version")
        except pg_errors.UndefinedTable:  # a new database (or schema): migrate
            return False
        return bool(rows) and rows[0][0] == LATEST_VERSION

    async def _checkout(self) -> PgConn:
        """An idle live connection, or a new one once the pool has room (waited for, also on
        `StoreBusy` while the pool holds any)."""
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

    def _open_connection(self) -> asyncio.Future[PgConn]:
        """Open (and first migrate) a connection on a short-lived thread of its own (ADR 0057)."""

        def unclaimed() -> None:  # its loop closed meanwhile: it never joins the pool
            with self._pool_lock:
                self._opened -= 1

        return connect_on_thread(self._connect, unclaimed)

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
                        "golem-pg", self.pool_size + 2, nothing
                    )
        return threads

    def _adopt(self, connecting: asyncio.Future[PgConn]) -> None:
        """Pool a connection whose caller stopped waiting while it was being opened."""
        if connecting.cancelled() or connecting.exception() is not None:
            with self._pool_lock:
                self._opened -= 1
            self._wake_next()
        else:
            self._checkin(connecting.result())

    def _checkin(self, c: PgConn) -> None:
        """Give the connection back (closed ones and ones left mid-transaction are dropped)."""
        drop = self._closed or c.conn.closed or c.pg.transaction_status != IDLE
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
            settle(waiter)
        else:
            with contextlib.suppress(RuntimeError):  # that loop closed: nobody waits
                loop.call_soon_threadsafe(settle, waiter)

    # ------------------------------------------------------------------ transactions

    async def _submit(self, write: bool, fn: Callable[..., _T], *args: Any) -> _T:
        if self._closed:
            raise StoreError(f"{self!r} is closed")
        self._feed.bind(asyncio.get_running_loop())
        for attempt in (1, 2):
            c = await self._checkout()
            try:
                return await drive(
                    c,
                    functools.partial(self._attempt, c, write, fn, args),
                    timeout=self.command_timeout,
                    threads=self._threads,
                    orphans=self._orphans,
                    checkin=self._checkin,
                )
            except NoAnswer:
                timeout = self.command_timeout or 0.0
                raise StoreTimeout(timeout, commit_sent=write and c.sent_commit) from None
            except psycopg.OperationalError as exc:
                broken = c.conn.broken or c.conn.closed
                if broken or c.pg.transaction_status != IDLE:
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
                raise store_error(exc) from exc
            finally:
                if not c.handed_off:
                    self._checkin(c)
        raise AssertionError("unreachable")  # pragma: no cover

    def _attempt(self, c: PgConn, write: bool, fn: Callable[..., _T], args: Any) -> _T:
        self.stats.transactions += 1
        tx = Tx(c)
        try:
            c.begin(BEGIN_WRITE if write else BEGIN_READ)
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

    # ------------------------------------------------------------------ notifications

    def change_feed(self, *, ready_only: bool = False) -> ChangeFeed:
        """The `LISTEN`-fed feed; `ready_only` listens on `ready_channel` alone until a caller
        asks for every change."""
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
        """Fan `NOTIFY` out to the feed, checking a silent listener every
        `listen_check_interval`; reconnect after a failure, waking every waiter."""
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
            except NoAnswer:
                if self._closed:
                    return
                log.warning(
                    "change feed: the listener connection did not answer within %gs; replacing it",
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

    async def _connect_listener(self) -> PgConn:
        """A connection for `LISTEN`, opened on a thread of its own (as the pool's are)."""
        connecting = connect_on_thread(lambda: self._connect(listener=True))
        try:
            return await asyncio.shield(connecting)
        except asyncio.CancelledError:  # closed once open: nobody listens on it
            connecting.add_done_callback(close_if_opened)
            raise

    async def _hear(self, loop: asyncio.AbstractEventLoop, c: PgConn, within: float | None) -> bool:
        """Wait up to `within` seconds for the server to send something; publish the
        notifications it sent. False when it sent nothing."""
        try:
            await socket_ready(loop, (c.pg.socket, False), within, self._threads)
        except NoAnswer:
            return False
        c.pg.consume_input()  # raises once the server closed the connection
        self._publish_notes(c)
        return True

    async def _ask(self, loop: asyncio.AbstractEventLoop, c: PgConn, sql: bytes) -> None:
        """Send `sql` outside the pipeline and wait for its answers, each wait bounded by
        `command_timeout` (`NoAnswer` past it); raise the first error the server sent."""
        pg = c.pg
        timeout = self.command_timeout
        pg.send_query(sql)
        while pg.flush():
            await socket_ready(loop, (pg.socket, True), timeout, self._threads)
            pg.consume_input()
        error: pq.abc.PGresult | None = None
        while True:
            while pg.is_busy():
                await socket_ready(loop, (pg.socket, False), timeout, self._threads)
                pg.consume_input()
            result = pg.get_result()
            if result is None:
                break
            if result.status == FATAL and error is None:
                error = result
        self._publish_notes(c)
        if error is not None:
            raise pg_errors.error_from_result(error, encoding=c.conn.info.encoding)

    def _publish_notes(self, c: PgConn) -> None:
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

    def _flush_audit(self, tx: Tx) -> None:
        rows = self._audit_params(tx)
        n = len(rows)
        notice = (self.ready_channel, " ready") if tx.ready else (self.channel, "")
        values = ", ".join(f"({i}, ?, ?::timestamptz, ?, ?, ?)" for i in range(1, n + 1))
        tx.run(
            "WITH s AS (UPDATE golem_audit_seq SET last_id = last_id + ? WHERE singleton = 1 "
            "RETURNING last_id), i AS (INSERT INTO golem_audit "
            f"(id, run_id, at, actor, action, detail, agent) SELECT s.last_id - {n} + v.n, "
            "v.run_id, v.at, v.actor, v.action, v.detail, "
            f"(SELECT r.agent FROM golem_runs r WHERE r.id = v.run_id) FROM s, (VALUES {values}) "
            "AS v(n, run_id, at, actor, action, detail)) "
            "SELECT pg_notify(?, s.last_id::text || ?) FROM s",
            (n, *(v for row in rows for v in row), *notice),
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
        when, actor = self._to_db(at), f"worker:{worker_id}"
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
                actor,
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

    async def _decide_plain(self, record: Callable[[], DecisionRecord]) -> DecisionRecord | None:
        def plain(tx: Tx) -> DecisionRecord:
            d = record()
            self._record_if_plain(tx, d, FITS[d.kind], decided_detail(d, None))
            return d

        try:
            return await self._submit(True, plain)
        except NotPlain:
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
            "SELECT 1 FROM golem_runs WHERE id = ? AND status = 'pending' FOR UPDATE", (d.run_id,)
        )
        kinds = ", ".join("?" for _ in call_kinds)
        decision = (d.kind.value, d.reason, d.text, d.decided_by, when, d.run_id, d.call_id)
        tx.run(
            "UPDATE golem_calls SET decision = ?, decision_reason = ?, decision_text = ?, "
            "decided_by = ?, decided_at = ?, decision_args = NULL "
            "WHERE run_id = ? AND call_id = ? AND decision IS NULL "
            f"AND kind IN ({kinds}) AND (deadline IS NULL OR deadline > ?) "
            "AND EXISTS (SELECT 1 FROM golem_runs WHERE id = ? AND status = 'pending')",
            (*decision, *call_kinds, when, d.run_id),
        )
        conn = tx.conn
        assert isinstance(conn, PgConn)
        conn.guard(
            "SELECT 1 / (SELECT count(*) FROM golem_calls "
            "WHERE run_id = ? AND call_id = ? AND xmin = pg_current_xact_id()::xid)",
            (d.run_id, d.call_id),
            NotPlain(),
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
                *(d.run_id, when, d.run_id, d.run_id, when, d.decided_by),
                *(AuditAction.DECIDED.value, to_json(detail), AuditAction.READY.value),
                *(self.ready_channel, self.channel),
            ),
        )

    def _to_db(self, value: datetime) -> datetime:
        return value.astimezone(UTC)

    def _from_db(self, value: Any) -> datetime:
        if not isinstance(value, datetime):
            raise StoreError(f"postgresql returned {value!r} where a timestamp was expected")
        return value.astimezone(UTC)
