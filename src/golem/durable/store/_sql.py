"""The store's transactions, written once over a small synchronous connection port.

`SQLStore` implements every `Store` method as **one transaction run to completion**: the
async method hands a plain function to the backend (`_submit`), which opens the
transaction, runs the function, appends the audit entries and commits (or rolls back on
any error) before the result reaches the caller. SQLite does this on a database thread, so
no statement runs on the event loop; PostgreSQL runs the function in a greenlet on the
loop, every socket wait awaited (ADR 0039). Either way the event loop never waits on the
database, and cancelling the awaiting task at any point cannot leave a transaction open or
a lock held: the transaction either finishes (applied) or has not started (not applied),
whoever is still waiting for it.

The SQL uses `?` placeholders and runs on SQLite and PostgreSQL alike. A backend supplies
only what differs: opening and ending transactions, timestamps, row-locking clauses
(`FOR UPDATE`, `FOR UPDATE SKIP LOCKED`; empty on SQLite, where the write transaction
already holds the database) and how audit IDs are assigned (`_flush_audit`).

Statements whose result is not needed go through `Conn.run`, and queries whose rows are
needed only after the commit through `Conn.later`; PostgreSQL queues both in a pipeline, so a
transaction costs one network round trip per `fetch` plus one for the commit. A unique
violation can be mapped to an exception per statement (`run(..., conflict=...)`), so an
insert need not read anything back to detect a duplicate.

Histories live in `golem_histories`, out of the hot `golem_runs` row: decisions, claims'
lock and lease renewals never read or rewrite them.
"""

from __future__ import annotations

import abc
import base64
import functools
import json
import logging
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any, Protocol, Self, TypeVar, overload

import msgspec

from golem._tracing import store_op
from golem.durable.store._feed import ChangeFeed
from golem.durable.store._schema import SchemaConn
from golem.durable.store.records import (
    EXPIRY_ACTOR,
    EXPIRY_REASON,
    AuditAction,
    AuditEntry,
    AuditPage,
    CallExpired,
    CallKind,
    CallNotFound,
    ClaimedRun,
    CorruptRecord,
    Decision,
    DecisionConflict,
    DecisionKind,
    DecisionRecord,
    InvalidCursor,
    InvalidDecision,
    LeaseLost,
    NewRun,
    Outcome,
    Page,
    PendingCallRecord,
    RunNotFound,
    RunNotInterrupted,
    RunNotPending,
    RunRecord,
    RunStatus,
    check_run_id,
)
from golem.errors import StoreError
from golem.messages import deep_spans

__all__ = ["Conn", "Later", "SQLStore", "Tx"]

_T = TypeVar("_T")
log = logging.getLogger("golem.durable.store")

_ROW_FAULTS = (
    ValueError,
    TypeError,
    KeyError,
    IndexError,
    AttributeError,
    OverflowError,
    UnicodeError,
    RecursionError,
)
"""What building a record from a row no golem wrote raises (an unknown enum value, a date or
JSON that does not parse): turned into `CorruptRecord` naming the run."""


def _left_out(exc: CorruptRecord) -> None:
    log.error("%s; left out (read it with get_run to see the error)", exc)


def _in_the_row(exc: CorruptRecord, deps_ref: Any) -> bool:
    """Whether a ready run's fault is its stored value's own, the same for every reader.

    Not a `MemoryError`. A `RecursionError` comes from `deps_ref`, the one JSON a ready
    run's record parses: it is the row's fault when that text is not JSON (or nests past
    any reader's limit, 10,000), and this reader's when it is deep but valid JSON, which
    only a reader whose stack is already deep fails to parse (checked without recursion)."""
    cause = exc.__cause__
    if isinstance(cause, MemoryError):
        return False
    if isinstance(cause, RecursionError):
        return not isinstance(deps_ref, str) or deep_spans(deps_ref) is None
    return True


_CLIP = 500
"""Characters of a row's fault kept in an outcome error or audit entry."""


def _clip(text: str) -> str:
    return text if len(text) <= _CLIP else text[:_CLIP] + f"… ({len(text)} characters)"


SWEEP_BATCH = 500
"""At most this many runs change per sweep transaction."""

_RUN_COLS = (
    "id, agent, conversation_id, status, deps_ref, started_by, created_at, "
    "updated_at, expires_at, parent_run_id, child_run_id, lease_owner, lease_expires_at, "
    "outcome_output, outcome_error, attempt, trace_context"
)
_R_RUN_COLS = ", ".join(f"r.{c.strip()}" for c in _RUN_COLS.split(","))
_N_RUN_COLS = len(_RUN_COLS.split(","))
_CALL_COLS = (
    "run_id, call_id, position, kind, tool_name, args, reason, deadline, decision, "
    "decision_reason, decision_text, decided_by, decided_at, rerun_confirmed_by, decision_args, "
    "seal"
)
_C_CALL_COLS = ", ".join(f"c.{c.strip()}" for c in _CALL_COLS.split(","))
_AUDIT_COLS = "id, run_id, at, actor, action, detail"
_AUDIT_COLS_A = "a.id, a.run_id, a.at, a.actor, a.action, a.detail"

_MAX_ID = 2**63 - 1
"""The largest audit ID a store holds (a signed 64-bit integer)."""

_AGENT_ARMS = 32
"""Agents whose index walks one audit-page statement merges; more agents take one statement
per group of this many, merged by the store."""

_FILTER_BATCH = 500
"""Entries read per query while a filtered audit page looks for matches."""


def _storable(text: str) -> bool:
    """Whether a text column can hold `text` (no NUL, no lone surrogate)."""
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


_STATUS: dict[str, RunStatus] = {s.value: s for s in RunStatus}
_KIND: dict[str, CallKind] = {k.value: k for k in CallKind}
_DECISION: dict[str, DecisionKind] = {k.value: k for k in DecisionKind}


def _run_status(value: str) -> RunStatus:
    return _STATUS.get(value) or RunStatus(value)


def _stored_status(value: Any, run_id: str) -> RunStatus:
    """The status stored for `run_id`; a value no golem wrote is a `CorruptRecord`."""
    try:
        return _run_status(value)
    except ValueError as exc:
        raise CorruptRecord(run_id, repr(exc)) from exc


def _json(value: Any) -> str:
    """Compact JSON of golem's own audit details (msgspec; stdlib json for odd strings)."""
    try:
        return msgspec.json.encode(value).decode()
    except (TypeError, ValueError, UnicodeError, msgspec.EncodeError):
        return json.dumps(value)


def _loads(text: str) -> Any:
    """Parse JSON this store wrote (msgspec; stdlib json for what msgspec does not take)."""
    try:
        return msgspec.json.decode(text)
    except (msgspec.DecodeError, ValueError):
        return json.loads(text)


class _NotHeld(Exception):
    """A guarded update found the run's lease not held (the transaction is rolled back)."""


def utc_now() -> datetime:
    """The current time as a timezone-aware UTC datetime."""
    return datetime.now(UTC)


def elapsed() -> float:
    """Seconds on this machine's elapsed-time clock: never stepped by a wall-clock change,
    and (where the system has one: Linux `CLOCK_BOOTTIME`) still counting while the machine
    is suspended, which `time.monotonic()` does not."""
    return _elapsed()


_elapsed: Callable[[], float] = (
    functools.partial(time.clock_gettime, time.CLOCK_BOOTTIME)
    if hasattr(time, "CLOCK_BOOTTIME")
    else time.monotonic
)


class Later:
    """The rows of a statement sent without waiting: they may arrive with the commit.

    Reading `rows` inside the transaction waits for them (one round trip on PostgreSQL);
    after the transaction they are simply there.
    """

    __slots__ = ("_rows", "_wait")

    def __init__(
        self,
        rows: list[tuple[Any, ...]] | None = None,
        wait: Callable[[], object] | None = None,
    ) -> None:
        self._rows = rows
        self._wait = wait

    def set(self, rows: list[tuple[Any, ...]] | None) -> None:
        """Record the rows (None: the statement produced none); never wait again."""
        self._rows = rows
        self._wait = None  # the connection may serve another transaction by now

    @property
    def rows(self) -> list[tuple[Any, ...]]:
        if self._rows is None and self._wait is not None:
            self._wait()
        if self._rows is None:
            raise RuntimeError("the statement's rows never arrived (its transaction failed)")
        return self._rows


class Conn(SchemaConn, Protocol):
    """One open transaction of a backend (`?` placeholders), used by one transaction at a time."""

    def run(self, sql: str, params: Sequence[Any] = (), conflict: Exception | None = None) -> None:
        """Run a statement whose result is not needed (may be deferred to the commit).

        With `conflict`, a unique-constraint violation by this statement raises `conflict`.
        """
        ...

    def later(self, sql: str, params: Sequence[Any] = ()) -> Later:
        """Run a query whose rows are needed only after the commit (may be deferred)."""
        ...

    def require_run_changed(self, rows: Later, run_id: str, error: Exception) -> None:
        """Fail the transaction with `error` unless the `UPDATE golem_runs … RETURNING`
        behind `rows` changed the run `run_id` (may be checked only at the commit)."""
        ...


AuditRow = tuple[str, datetime, str, AuditAction, dict[str, Any]]


class Tx:
    """A transaction plus the audit entries it appends just before commit."""

    __slots__ = ("conn", "entries", "last_id", "ready")

    def __init__(self, conn: Conn) -> None:
        self.conn = conn
        self.entries: list[AuditRow] = []
        self.last_id = 0
        """The ID of the last audit entry this transaction appended (0: none)."""
        self.ready = False
        """Whether this transaction made a run ready (or may have)."""

    def fetch(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self.conn.fetch(sql, params)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        return self.conn.execute(sql, params)

    def run(self, sql: str, params: Sequence[Any] = (), conflict: Exception | None = None) -> None:
        self.conn.run(sql, params, conflict)

    def later(self, sql: str, params: Sequence[Any] = ()) -> Later:
        return self.conn.later(sql, params)

    def require_run_changed(self, rows: Later, run_id: str, error: Exception) -> None:
        self.conn.require_run_changed(rows, run_id, error)

    def audit(
        self,
        run_id: str,
        at: datetime,
        actor: str,
        action: AuditAction,
        detail: dict[str, Any] | None = None,
    ) -> None:
        self.entries.append((run_id, at, actor, action, detail or {}))
        if action is AuditAction.READY:
            self.ready = True


def _aware(value: datetime | None, what: str = "now") -> datetime | None:
    if value is None:
        return None
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{what} must be a timezone-aware datetime, got naive {value!r}")
    return value.astimezone(UTC)


@overload
def _utc(value: datetime) -> datetime: ...
@overload
def _utc(value: None) -> None: ...
def _utc(value: datetime | None) -> datetime | None:
    return None if value is None else value.astimezone(UTC)


def _lease(seconds: float) -> timedelta:
    if not seconds > 0:
        raise ValueError(f"lease_seconds must be positive, got {seconds!r}")
    return timedelta(seconds=seconds)


def _encode_cursor(*parts: Any) -> str:
    raw = json.dumps(parts, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str, shape: tuple[type, ...]) -> list[Any]:
    """The parts of a cursor `_encode_cursor` wrote: the first an aware ISO date (returned
    as a `datetime`), then text and non-negative 64-bit integers, as `shape` says.

    Raises:
        InvalidCursor: anything else (a cursor no store of this kind returned).
    """
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        parts = json.loads(raw)
    except (ValueError, TypeError, RecursionError):
        parts = None
    if (
        not isinstance(parts, list)
        or len(parts) != len(shape)
        or not all(p.__class__ is t for p, t in zip(parts, shape, strict=True))
    ):
        raise InvalidCursor(cursor)
    try:
        created = datetime.fromisoformat(parts[0])
        created.astimezone(UTC)  # an offset that moves it out of datetime's years
        for p in parts:
            if isinstance(p, str) and "\x00" in p.encode("utf-8").decode():
                raise ValueError("NUL")  # a NUL or a lone surrogate: no column holds it
    except (ValueError, OverflowError):
        raise InvalidCursor(cursor) from None
    if created.tzinfo is None or not all(0 <= p < 2**63 for p in parts if isinstance(p, int)):
        raise InvalidCursor(cursor)
    return [created, *parts[1:]]


_RUNS_JOIN_CALLS = "golem_runs r JOIN golem_calls c ON c.run_id = r.id"
"""Pending runs `r` with their calls `c`, as a plain join (the planner picks the order)."""


@dataclass(slots=True)
class Stats:
    """Counters of what the store sent to its database (for benchmarks and tests)."""

    transactions: int = 0
    commits: int = 0
    statements: int = 0
    round_trips: int = 0
    retried_batches: int = 0
    """SQLite: group commits run again with a savepoint per job after one of them raised."""


class SQLStore(abc.ABC):
    """Every `Store` method over a backend's transactions (see the module docstring)."""

    _lock_clause: str = ""
    """Appended to a SELECT that must lock the rows it reads until commit."""
    _skip_locked_clause: str = ""
    """Appended to a SELECT that claims rows other transactions are not holding."""
    _runs_with_calls: str = _RUNS_JOIN_CALLS
    """The FROM of an unfiltered page of calls (`r`, `c`), walked in run order (ADR 0044)."""
    _contains: str = "instr"
    """The SQL function `f(text, part)` that is > 0 when `text` contains `part`."""
    _page_plan: str = ""
    """Run before a page of calls, in its transaction: settings that keep its plan a walk in
    index order whatever the database's statistics say (ADR 0044)."""

    stats: Stats
    _feed: ChangeFeed

    # ------------------------------------------------------------------ backend hooks

    @abc.abstractmethod
    async def _submit(self, write: bool, fn: Callable[..., _T], *args: Any) -> _T:
        """Run `fn(tx, *args)` in one transaction, never blocking the loop; return its result.

        The transaction commits (after `_flush_audit`) when `fn` returns and rolls back
        when it raises; cancelling the caller never interrupts it.
        """

    @abc.abstractmethod
    def _flush_audit(self, tx: Tx) -> None:
        """Append `tx.entries` to the audit log (in order, IDs in commit order)."""

    @abc.abstractmethod
    def _to_db(self, value: datetime) -> Any:
        """Convert an aware datetime to the backend's stored form."""

    @abc.abstractmethod
    def _from_db(self, value: Any) -> datetime:
        """Convert a stored timestamp back to an aware UTC datetime."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release the backend's connections (and threads, where it has them)."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def clock(self) -> datetime:
        """The store's current time (aware UTC): what leases, deadlines and audit entries
        are measured by when a method is not given `now`.

        SQLite: this host's clock, the one every process on the database shares.
        PostgreSQL overrides it with the server's clock, so workers on machines whose
        clocks disagree still agree on when a lease runs out (ADR 0056).
        """
        return utc_now()

    def change_feed(self, *, ready_only: bool = False) -> ChangeFeed:
        """The store's `ChangeFeed`: wait for changes and ready runs without polling.

        `ready_only`: the caller only waits for ready runs (a worker); a store may then
        skip listening for other changes (PostgreSQL does)."""
        return self._feed

    # ------------------------------------------------------------------ plumbing

    def _ts(self, value: datetime | None) -> Any:
        return None if value is None else self._to_db(value)

    def _dt(self, value: Any) -> datetime | None:
        return None if value is None else self._from_db(value)

    def _audit_params(self, tx: Tx) -> list[tuple[str, Any, str, str, str]]:
        to_db = self._to_db
        return [
            (run_id, to_db(at), actor, action.value, _json(detail))
            for run_id, at, actor, action, detail in tx.entries
        ]

    # ------------------------------------------------------------------ row mapping

    def _call_record(self, row: Sequence[Any]) -> PendingCallRecord:
        try:
            return self._read_call(row)
        except _ROW_FAULTS as exc:
            raise CorruptRecord(str(row[0]), f"call {row[1]!r}: {exc!r}") from exc

    def _read_call(self, row: Sequence[Any]) -> PendingCallRecord:
        (run_id, call_id, position, kind, tool_name, args, reason, deadline) = row[:8]
        (decision, d_reason, d_text, decided_by, decided_at, confirmed_by, d_args) = row[8:15]
        seal = row[15]
        record = None
        if decision is not None:
            record = DecisionRecord(
                run_id=run_id,
                call_id=call_id,
                kind=_DECISION.get(decision) or DecisionKind(decision),
                reason=d_reason or "",
                text=d_text or "",
                decided_by=decided_by or "",
                decided_at=self._from_db(decided_at),
                args=d_args,
            )
        return PendingCallRecord(
            run_id=run_id,
            call_id=call_id,
            position=int(position),
            kind=_KIND.get(kind) or CallKind(kind),
            tool_name=tool_name,
            args=args,
            reason=reason,
            deadline=self._dt(deadline),
            decision=record,
            rerun_confirmed_by=confirmed_by,
            seal=seal,
        )

    def _run_record(
        self,
        row: Sequence[Any],
        calls: Sequence[PendingCallRecord],
        history: str,
        out_history: str | None,
    ) -> RunRecord:
        try:
            return self._read_run(row, calls, history, out_history)
        except _ROW_FAULTS as exc:
            raise CorruptRecord(str(row[0]), repr(exc)) from exc

    def _read_run(
        self,
        row: Sequence[Any],
        calls: Sequence[PendingCallRecord],
        history: str,
        out_history: str | None,
    ) -> RunRecord:
        (rid, agent, conv, status, deps_ref, started_by, created, updated) = row[:8]
        (expires, parent, child, owner, lease_exp, out, err, attempt, trace_ctx) = row[8:17]
        st = _run_status(status)
        outcome: Outcome | None = None
        if st.terminal:
            outcome = Outcome(
                status=st,
                output=None if out is None else json.loads(out),
                error=err or "",
                history=out_history,
            )
        return RunRecord(
            id=rid,
            agent=agent,
            conversation_id=conv,
            status=st,
            history=history,
            calls=tuple(calls),
            deps_ref=_loads(deps_ref),
            started_by=started_by,
            created_at=self._from_db(created),
            updated_at=self._from_db(updated),
            expires_at=self._dt(expires),
            parent_run_id=parent,
            child_run_id=child,
            lease_owner=owner,
            lease_expires_at=self._dt(lease_exp),
            outcome=outcome,
            attempt=int(attempt),
            trace_context=trace_ctx or "",
        )

    def _calls_of(
        self, tx: Tx, ids: Sequence[str], corrupt: dict[str, CorruptRecord] | None = None
    ) -> dict[str, list[PendingCallRecord]]:
        """The calls of runs `ids`; a call row that cannot be read raises `CorruptRecord`, or,
        given `corrupt`, is recorded there by run ID (the caller leaves that run out)."""
        by_run: dict[str, list[PendingCallRecord]] = {i: [] for i in ids}
        if not ids:
            return by_run
        marks = ", ".join("?" for _ in ids)
        for cr in tx.fetch(
            f"SELECT {_CALL_COLS} FROM golem_calls WHERE run_id IN ({marks}) "
            "ORDER BY run_id, position",
            ids,
        ):
            try:
                by_run[cr[0]].append(self._call_record(cr))
            except CorruptRecord as exc:
                if corrupt is None:
                    raise
                corrupt[cr[0]] = exc
        return by_run

    def _history_and_calls(self, tx: Tx, run_id: str) -> Later:
        """One run's history and calls (one statement; `_split` reads its rows)."""
        return tx.later(
            f"SELECT h.history, {_C_CALL_COLS} FROM golem_histories h "
            "LEFT JOIN golem_calls c ON c.run_id = h.run_id WHERE h.run_id = ? "
            "ORDER BY c.position",
            (run_id,),
        )

    def _split(self, later: Later, run_id: str) -> tuple[str, list[PendingCallRecord]]:
        rows = later.rows
        if not rows:
            raise RunNotFound(run_id)
        return rows[0][0], [self._call_record(r[1:]) for r in rows if r[2] is not None]

    def _histories_and_calls(self, tx: Tx, ids: Sequence[str]) -> Later:
        """Several runs' histories and calls (one statement; `_split_many` reads its rows)."""
        marks = ", ".join("?" for _ in ids)
        return tx.later(
            f"SELECT h.history, {_C_CALL_COLS}, h.run_id FROM golem_histories h "
            f"LEFT JOIN golem_calls c ON c.run_id = h.run_id WHERE h.run_id IN ({marks}) "
            "ORDER BY h.run_id, c.position",
            ids,
        )

    def _split_many(
        self, later: Later, corrupt: dict[str, CorruptRecord]
    ) -> dict[str, tuple[str, list[PendingCallRecord]]]:
        """Run ID -> (history, calls) from the rows of `_histories_and_calls`; a call row that
        cannot be read is recorded in `corrupt` by run ID."""
        found: dict[str, tuple[str, list[PendingCallRecord]]] = {}
        n = len(_CALL_COLS.split(",")) + 1
        for r in later.rows:
            run_id = r[n]
            got = found.get(run_id)
            if got is None:
                got = found[run_id] = (r[0], [])
            if r[2] is not None:
                try:
                    got[1].append(self._call_record(r[1:n]))
                except CorruptRecord as exc:
                    corrupt[run_id] = exc
        return found

    def _load_runs(
        self, tx: Tx, rows: list[tuple[Any, ...]], *, leave_out: bool = False
    ) -> list[RunRecord]:
        """Records of `rows` (run columns + history + outcome history), with their calls.

        A row that cannot be read is a `CorruptRecord`, or with `leave_out` is logged and
        left out (a listing: the other runs stay readable)."""
        corrupt: dict[str, CorruptRecord] = {}
        calls = self._calls_of(tx, [r[0] for r in rows], corrupt)
        n = _N_RUN_COLS
        out = []
        for r in rows:
            try:
                bad = corrupt.get(r[0])
                if bad is not None:
                    raise bad
                out.append(self._run_record(r, calls[r[0]], r[n], r[n + 1]))
            except CorruptRecord as exc:
                if not leave_out:
                    raise
                _left_out(exc)
        return out

    def _select_runs(self, where: str, tail: str = "") -> str:
        return (
            f"SELECT {_R_RUN_COLS}, h.history, h.outcome_history FROM golem_runs r "
            f"JOIN golem_histories h ON h.run_id = r.id WHERE {where} {tail}"
        )

    def _load_run(
        self, tx: Tx, run_id: str, agents: Collection[str] | None = None
    ) -> RunRecord:
        where, params = "r.id = ?", [run_id]
        if agents is not None:  # another agent's run is read as a missing one: same statement
            names = sorted(agents)
            where += f" AND r.agent IN ({', '.join('?' for _ in names)})" if names else " AND 1 = 0"
            params += names
        rows = tx.fetch(self._select_runs(where), params)
        if not rows:
            raise RunNotFound(run_id)
        return self._load_runs(tx, rows)[0]

    def _lock_calls(self, tx: Tx, run_id: str) -> tuple[RunStatus, list[PendingCallRecord]]:
        """Lock the run's row and its calls; return its status and calls (one statement).

        Every row read is locked, so PostgreSQL re-reads all of them after waiting for a
        concurrent decision (a join locking only the run would return stale calls).
        """
        sql = (
            f"SELECT r.status, {_C_CALL_COLS} FROM golem_runs r "
            "JOIN golem_calls c ON c.run_id = r.id WHERE r.id = ? ORDER BY c.position"
            + self._lock_clause
        )
        rows = tx.fetch(sql, (run_id,))
        if not rows:
            if not self._exists(tx, run_id):
                raise RunNotFound(run_id)
            # committed between the two statements (PostgreSQL reads each with a new
            # snapshot), or a run without calls
            rows = tx.fetch(sql, (run_id,))
            if not rows:
                return RunStatus.COMPLETED, []  # no calls: every call ID is unknown
        status = _stored_status(rows[0][0], run_id)
        return status, [self._call_record(r[1:]) for r in rows]

    # ------------------------------------------------------------------ inserts

    def _check_new(self, run: NewRun) -> tuple[str, datetime | None]:
        """Validate a run before any transaction; return its deps JSON and expiry."""
        check_run_id(run.id)
        ids = [c.call_id for c in run.calls]
        if len(set(ids)) != len(ids):
            dup = next(i for i in ids if ids.count(i) > 1)
            raise ValueError(f'run "{run.id}": call ID "{dup}" appears more than once')
        for c in run.calls:
            _aware(c.deadline, "deadline")
        try:
            # allow_nan=False: NaN/Infinity are not JSON; stored, they break every reader
            deps_ref = json.dumps(run.deps_ref, allow_nan=False)
        except (TypeError, ValueError, RecursionError) as exc:
            raise ValueError(f'run "{run.id}": deps_ref is not JSON-serializable: {exc}') from None
        return deps_ref, _aware(run.expires_at, "expires_at")

    def _exists(self, tx: Tx, run_id: str) -> bool:
        return bool(tx.fetch("SELECT 1 FROM golem_runs WHERE id = ?", (run_id,)))

    def _insert_run(
        self,
        tx: Tx,
        run: NewRun,
        status: RunStatus,
        now: datetime,
        outcome: Outcome | None,
        checked: tuple[str, datetime | None],
    ) -> RunRecord:
        """Insert the run, its history and calls; return the record as stored (no read-back)."""
        deps_ref, expires_at = checked
        out = err = out_history = None
        if outcome is not None:
            out = None if outcome.status is not RunStatus.COMPLETED else json.dumps(outcome.output)
            err = outcome.error or None
            out_history = outcome.history
        ts = self._to_db(now)
        tx.run(
            f"INSERT INTO golem_runs ({_RUN_COLS}) VALUES "
            "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL, NULL, ?, ?, 1, ?)",
            (
                run.id,
                run.agent,
                run.conversation_id,
                status.value,
                deps_ref,
                run.started_by,
                ts,
                ts,
                self._ts(expires_at),
                run.parent_run_id,
                out,
                err,
                run.trace_context or None,
            ),
            ValueError(f'a run with ID "{run.id}" already exists'),
        )
        tx.run(
            "INSERT INTO golem_histories (run_id, history, outcome_history) VALUES (?, ?, ?)",
            (run.id, run.history, out_history),
        )
        calls: list[PendingCallRecord] = []
        params: list[Any] = []
        for pos, c in enumerate(run.calls):
            deadline = expires_at if c.deadline is None else _utc(c.deadline)
            calls.append(
                PendingCallRecord(
                    run_id=run.id,
                    call_id=c.call_id,
                    position=pos,
                    kind=CallKind(c.kind),
                    tool_name=c.tool_name,
                    args=c.args,
                    reason=c.reason,
                    deadline=deadline,
                    decision=None,
                    seal=c.seal,
                )
            )
            params += (
                run.id,
                c.call_id,
                pos,
                CallKind(c.kind).value,
                c.tool_name,
                c.args,
                c.reason,
                self._ts(deadline),
                c.seal,
            )
        if calls:
            values = ", ".join(["(?, ?, ?, ?, ?, ?, ?, ?, ?)"] * len(calls))
            tx.run(
                "INSERT INTO golem_calls (run_id, call_id, position, kind, tool_name, args, "
                f"reason, deadline, seal) VALUES {values}",
                params,
            )
        tx.audit(
            run.id,
            now,
            run.started_by or "unknown",
            AuditAction.CREATED,
            {
                "agent": run.agent,
                "conversation_id": run.conversation_id,
                "status": status.value,
                "calls": [c.call_id for c in run.calls],
                **({"parent_run_id": run.parent_run_id} if run.parent_run_id else {}),
            },
        )
        stored_outcome = None
        if outcome is not None:
            stored_outcome = Outcome(
                status=outcome.status,
                output=None if out is None else json.loads(out),
                error=err or "",
                history=out_history,
            )
        return RunRecord(
            id=run.id,
            agent=run.agent,
            conversation_id=run.conversation_id,
            status=status,
            history=run.history,
            calls=tuple(calls),
            deps_ref=_loads(deps_ref),
            started_by=run.started_by,
            created_at=now,
            updated_at=now,
            expires_at=expires_at,
            parent_run_id=run.parent_run_id,
            child_run_id=None,
            lease_owner=None,
            lease_expires_at=None,
            outcome=stored_outcome,
            trace_context=run.trace_context,
        )

    # ------------------------------------------------------------------ Store API

    async def schema_version(self) -> int:
        """Return the schema version of the opened database."""

        def tx_fn(tx: Tx) -> int:
            return int(tx.fetch("SELECT MAX(version) FROM golem_schema_version")[0][0] or 0)

        return await self._submit(False, tx_fn)

    @store_op("save_pending")
    async def save_pending(self, run: NewRun) -> RunRecord:
        """Save a paused run as PENDING (see `Store.save_pending`)."""
        if not run.calls:
            raise ValueError(f'save_pending: run "{run.id}" has no pending calls')
        checked = self._check_new(run)

        def tx_fn(tx: Tx) -> RunRecord:
            return self._insert_run(tx, run, RunStatus.PENDING, self.clock(), None, checked)

        return await self._submit(True, tx_fn)

    @store_op("save_finished")
    async def save_finished(self, run: NewRun, outcome: Outcome) -> RunRecord:
        """Save a run that ended without pausing (see `Store.save_finished`)."""
        if outcome.status not in (RunStatus.COMPLETED, RunStatus.FAILED):
            raise ValueError(
                f"save_finished: outcome must be completed or failed, got {outcome.status.value}"
            )
        if run.calls:
            raise ValueError(f'save_finished: run "{run.id}" has pending calls; use save_pending')
        checked = self._check_new(run)

        def tx_fn(tx: Tx) -> RunRecord:
            now = self.clock()
            record = self._insert_run(tx, run, outcome.status, now, outcome, checked)
            tx.audit(
                run.id,
                now,
                run.started_by or "unknown",
                _ACTION[outcome.status],
                _outcome_detail(outcome),
            )
            return record

        return await self._submit(True, tx_fn)

    @store_op("get_run")
    async def get_run(self, run_id: str, *, agents: Collection[str] | None = None) -> RunRecord:
        """Return the run (see `Store.get_run`)."""
        return await self._submit(False, self._load_run, run_id, agents)

    def _filters(
        self,
        status: RunStatus | Sequence[RunStatus] | None,
        agent: str | Sequence[str] | None,
        conversation_id: str | None,
        tool_name: str | None,
        lease_owner: str | None = None,
    ) -> tuple[list[str], list[Any]] | None:
        """WHERE clauses over `golem_runs r`; None when the filters match nothing."""
        where: list[str] = []
        params: list[Any] = []
        if status is not None:
            statuses = [status] if isinstance(status, str) else list(status)
            if not statuses:
                return None
            where.append(f"r.status IN ({', '.join('?' for _ in statuses)})")
            params.extend(RunStatus(s).value for s in statuses)
        if agent is not None:
            agents = [agent] if isinstance(agent, str) else list(agent)
            if not agents:
                return None
            where.append(f"r.agent IN ({', '.join('?' for _ in agents)})")
            params.extend(agents)
        if conversation_id is not None:
            where.append("r.conversation_id = ?")
            params.append(conversation_id)
        if tool_name is not None:
            where.append(
                "EXISTS (SELECT 1 FROM golem_calls t WHERE t.run_id = r.id AND t.tool_name = ?)"
            )
            params.append(tool_name)
        if lease_owner is not None:
            where.append("r.lease_owner = ?")
            params.append(lease_owner)
        return where, params

    @store_op("list_runs")
    async def list_runs(
        self,
        *,
        status: RunStatus | Sequence[RunStatus] | None = None,
        agent: str | None = None,
        conversation_id: str | None = None,
        tool_name: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[RunRecord]:
        """Return matching runs, newest first (see `Store.list_runs`)."""
        if limit < 0 or offset < 0:
            raise ValueError(f"limit and offset must be >= 0, got {limit} and {offset}")
        filters = self._filters(status, agent, conversation_id, tool_name)
        if filters is None:
            return []
        where, params = filters
        sql = self._select_runs(
            " AND ".join(where) or "1 = 1",
            "ORDER BY r.created_at DESC, r.id DESC LIMIT ? OFFSET ?",
        )

        def tx_fn(tx: Tx) -> list[RunRecord]:
            return self._load_runs(tx, tx.fetch(sql, [*params, limit, offset]), leave_out=True)

        return await self._submit(False, tx_fn)

    @store_op("list_runs_page")
    async def list_runs_page(
        self,
        *,
        status: RunStatus | Sequence[RunStatus] | None = None,
        agent: str | Sequence[str] | None = None,
        conversation_id: str | None = None,
        tool_name: str | None = None,
        after: str | None = None,
        limit: int = 50,
        newest_first: bool = False,
        lease_owner: str | None = None,
    ) -> Page[RunRecord]:
        """Return one keyset page of matching runs (see `Store.list_runs_page`)."""
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        filters = self._filters(status, agent, conversation_id, tool_name, lease_owner)
        if filters is None:
            return Page([], None)
        where, params = filters
        op, order = ("<", "DESC") if newest_first else (">", "ASC")
        if after is not None:
            created, run_id = _decode_cursor(after, (str, str))
            where.append(f"(r.created_at, r.id) {op} (?, ?)")
            params += (self._to_db(created), run_id)
        sql = self._select_runs(
            " AND ".join(where) or "1 = 1",
            f"ORDER BY r.created_at {order}, r.id {order} LIMIT ?",
        )

        def tx_fn(tx: Tx) -> tuple[list[RunRecord], Any, Any, int]:
            rows = tx.fetch(sql, [*params, limit])
            last = rows[-1] if rows else (None,) * 7
            return self._load_runs(tx, rows, leave_out=True), last[6], last[0], len(rows)

        runs, last_created, last_id, read = await self._submit(False, tx_fn)
        cursor = None
        if read == limit:  # from the last row read, left out or not
            cursor = self._page_cursor(runs, last_created, last_id)
        return Page(runs, cursor)

    def _page_cursor(self, runs: list[RunRecord], created: Any, run_id: Any) -> str | None:
        try:
            return _encode_cursor(self._from_db(created).isoformat(), str(run_id))
        except _ROW_FAULTS:  # the last row's date does not parse: the last readable run's
            return _encode_cursor(runs[-1].created_at.isoformat(), runs[-1].id) if runs else None

    @store_op("list_pending_calls")
    async def list_pending_calls(
        self,
        *,
        agent: str | Sequence[str] | None = None,
        tool_name: str | None = None,
        after: str | None = None,
        limit: int = 50,
    ) -> Page[PendingCallRecord]:
        """Return one keyset page of undecided calls of PENDING runs, oldest run first."""
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        filters = self._filters(None, agent, None, None)
        if filters is None:
            return Page([], None)
        where, params = filters
        where += ["r.status = 'pending'", "c.decision IS NULL"]
        if tool_name is not None:
            where.append("c.tool_name = ?")
            params.append(tool_name)
        if after is not None:
            created, run_id, position = _decode_cursor(after, (str, str, int))
            at = self._to_db(created)
            # the first comparison lets the run index seek; the second is the exact cursor
            where.append("(r.created_at, r.id) >= (?, ?)")
            where.append("(r.created_at, r.id, c.position) > (?, ?, ?)")
            params += (at, run_id, at, run_id, position)
        # by tool: the planner may start from the tool's index (a rare tool would make the
        # walk in run order read every pending run); else: the walk, planned as such
        walk = tool_name is None
        source = self._runs_with_calls if walk else _RUNS_JOIN_CALLS
        sql = (
            f"SELECT {_C_CALL_COLS}, r.created_at FROM {source} WHERE "
            + " AND ".join(where)
            + " ORDER BY r.created_at, r.id, c.position LIMIT ?"
        )
        plan = self._page_plan if walk else ""

        def tx_fn(tx: Tx) -> list[tuple[Any, ...]]:
            if plan:
                tx.run(plan)
            return tx.fetch(sql, [*params, limit])

        rows = await self._submit(False, tx_fn)
        items = []
        for r in rows:
            try:
                items.append(self._call_record(r))
            except CorruptRecord as exc:
                _left_out(exc)
        cursor = None
        if len(rows) == limit:
            for last in reversed(rows):  # the last row whose position and date read
                try:
                    at = self._from_db(last[16]).isoformat()
                    cursor = _encode_cursor(at, last[0], int(last[2]))
                except _ROW_FAULTS:
                    continue
                break
        return Page(items, cursor)

    @store_op("decide")
    async def decide(
        self,
        run_id: str,
        call_id: str,
        decision: Decision,
        *,
        decided_by: str,
        now: datetime | None = None,
    ) -> DecisionRecord:
        """Record a decision on one call (see `Store.decide`)."""
        if not decided_by:
            raise ValueError("decide: decided_by must name who decided")
        at_given = _aware(now)
        kind = DecisionKind(decision.kind)
        decision = Decision(  # only the fields that belong to the kind count
            kind,
            reason=decision.reason if kind is DecisionKind.DENY else "",
            text=decision.text if kind is DecisionKind.EXTERNAL else "",
            args=decision.args if kind is DecisionKind.APPROVE else None,
        )

        def decided_at(at: datetime) -> DecisionRecord:
            return DecisionRecord(
                run_id=run_id,
                call_id=call_id,
                kind=kind,
                reason=decision.reason,
                text=decision.text,
                decided_by=decided_by,
                decided_at=at,
                args=decision.args,
            )

        if decision.args is None:
            plain = await self._decide_plain(lambda: decided_at(at_given or self.clock()))
            if plain is not None:
                return plain
            # not the plain case: the full transaction below sorts out which it is

        def tx_fn(tx: Tx) -> tuple[DecisionRecord, bool]:
            at = at_given or self.clock()
            status, calls = self._lock_calls(tx, run_id)
            call = next((c for c in calls if c.call_id == call_id), None)
            if call is None:
                raise CallNotFound(run_id, call_id)
            _check_fits(run_id, call, kind)
            existing = call.decision
            if existing is not None and decision.same_as(existing):
                return existing, False
            if existing is not None and existing.decided_by == EXPIRY_ACTOR:
                raise CallExpired(run_id, call_id, existing)
            if status is not RunStatus.PENDING:
                raise RunNotPending(run_id, status)
            if existing is not None:
                raise DecisionConflict(run_id, call_id, existing)
            if call.deadline is not None and call.deadline <= at:
                denials = self._expire_calls(tx, run_id, calls, at)
                return denials[call_id], True
            record = decided_at(at)
            self._record_decision(tx, record)
            detail = _decided_detail(record, call.args)
            tx.audit(run_id, at, decided_by, AuditAction.DECIDED, detail)
            undecided = sum(c.decision is None for c in calls) - 1
            self._after_decisions(tx, run_id, at, decided_by, undecided)
            return record, False

        record, expired = await self._submit(True, tx_fn)
        if expired:  # the expiry denial was recorded and committed
            raise CallExpired(run_id, call_id, record)
        return record

    async def _decide_plain(self, record: Callable[[], DecisionRecord]) -> DecisionRecord | None:
        """Record the decision `record()` builds without reading first, if it is the plain
        case; None when it is not (nothing was written) or the backend has no such path.

        The plain case: the run is pending, the call exists, is undecided, takes this kind
        of decision (`_FITS`), is not overdue, and the decision edits no arguments. The run
        becomes READY when no call is left undecided, with the same audit entries as
        `decide`'s full transaction. SQLite has no such path (its full transaction costs no
        round trips); PostgreSQL saves one with it.
        """
        return None

    def _record_decision(self, tx: Tx, d: DecisionRecord) -> None:
        tx.run(
            "UPDATE golem_calls SET decision = ?, decision_reason = ?, decision_text = ?, "
            "decided_by = ?, decided_at = ?, decision_args = ? WHERE run_id = ? AND call_id = ?",
            (
                d.kind.value,
                d.reason,
                d.text,
                d.decided_by,
                self._to_db(d.decided_at),
                d.args,
                d.run_id,
                d.call_id,
            ),
        )

    def _after_decisions(
        self, tx: Tx, run_id: str, at: datetime, actor: str, undecided: int
    ) -> None:
        """Bump `updated_at`; make the run READY when no call is left `undecided`."""
        ready = undecided == 0
        status = RunStatus.READY if ready else RunStatus.PENDING
        tx.run(
            "UPDATE golem_runs SET status = ?, updated_at = ? WHERE id = ?",
            (status.value, self._to_db(at), run_id),
        )
        if ready:
            tx.audit(run_id, at, actor, AuditAction.READY)

    def _expire_calls(
        self, tx: Tx, run_id: str, calls: Sequence[PendingCallRecord], at: datetime
    ) -> dict[str, DecisionRecord]:
        """Deny the run's overdue undecided calls "expired"; return the denials by call ID."""
        denials: dict[str, DecisionRecord] = {}
        for c in calls:
            if c.decision is None and c.deadline is not None and c.deadline <= at:
                d = DecisionRecord(
                    run_id=run_id,
                    call_id=c.call_id,
                    kind=DecisionKind.DENY,
                    reason=EXPIRY_REASON,
                    text="",
                    decided_by=EXPIRY_ACTOR,
                    decided_at=at,
                )
                self._record_decision(tx, d)
                denials[c.call_id] = d
                tx.audit(
                    run_id,
                    at,
                    EXPIRY_ACTOR,
                    AuditAction.EXPIRED,
                    {"call_id": c.call_id, "deadline": c.deadline.isoformat()},
                )
        if denials:
            left = sum(c.decision is None for c in calls) - len(denials)
            self._after_decisions(tx, run_id, at, EXPIRY_ACTOR, left)
        return denials

    @store_op("sweep_expired")
    async def sweep_expired(self, now: datetime | None = None) -> list[str]:
        """Deny overdue undecided calls "expired" (see `Store.sweep_expired`)."""
        at_given = _aware(now)

        def tx_fn(tx: Tx) -> list[str]:
            at = at_given or self.clock()
            rows = tx.fetch(
                "SELECT id FROM golem_runs WHERE status = 'pending' AND EXISTS ("
                "SELECT 1 FROM golem_calls c WHERE c.run_id = golem_runs.id "
                "AND c.decision IS NULL AND c.deadline IS NOT NULL AND c.deadline <= ?) "
                f"ORDER BY id LIMIT {SWEEP_BATCH}" + self._skip_locked_clause,
                (self._to_db(at),),
            )
            changed: list[str] = []
            if not rows:
                return changed
            corrupt: dict[str, CorruptRecord] = {}
            calls = self._calls_of(tx, [r[0] for r in rows], corrupt)
            for (run_id,) in rows:
                if run_id in corrupt:
                    _left_out(corrupt[run_id])
                    continue
                if self._expire_calls(tx, run_id, calls[run_id], at):
                    changed.append(run_id)
            return changed

        return await self._submit(True, tx_fn)

    @store_op("claim_ready")
    async def claim_ready(
        self,
        worker_id: str,
        lease_seconds: float,
        *,
        now: datetime | None = None,
        agents: Sequence[str] | None = None,
    ) -> ClaimedRun | None:
        """Claim the oldest READY run (see `Store.claim_ready`)."""
        claimed = await self._claim("claim_ready", worker_id, lease_seconds, 1, now, agents)
        return claimed[0] if claimed else None

    @store_op("claim_ready_many")
    async def claim_ready_many(
        self,
        worker_id: str,
        lease_seconds: float,
        *,
        limit: int,
        now: datetime | None = None,
        agents: Sequence[str] | None = None,
    ) -> list[ClaimedRun]:
        """Claim up to `limit` of the oldest READY runs at once (see `Store.claim_ready_many`)."""
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"claim_ready_many: limit must be an integer >= 1, got {limit!r}")
        return await self._claim("claim_ready_many", worker_id, lease_seconds, limit, now, agents)

    async def _claim(
        self,
        op: str,
        worker_id: str,
        lease_seconds: float,
        limit: int,
        now: datetime | None,
        agents: Sequence[str] | None,
    ) -> list[ClaimedRun]:
        """One transaction: mark up to `limit` ready runs RUNNING, audit each claim.

        The runs are picked by a materialized subquery (`SKIP LOCKED` on PostgreSQL, so
        concurrent claimers pass over each other's rows instead of waiting or sharing them)
        and updated by one statement; their histories and calls come back with the commit.
        """
        if not worker_id:
            raise ValueError(f"{op}: worker_id must not be empty")
        at_given = _aware(now)
        lease = _lease(lease_seconds)
        only = ""
        agent_params: list[str] = []
        if agents is not None:
            agent_params = [agents] if isinstance(agents, str) else list(agents)
            if not agent_params:
                return []
            only = f" AND agent IN ({', '.join('?' for _ in agent_params)})"
        sql = (
            "WITH picked AS MATERIALIZED (SELECT id FROM golem_runs WHERE status = 'ready'"
            f"{only} ORDER BY updated_at, id LIMIT ?{self._skip_locked_clause}) "
            "UPDATE golem_runs SET status = 'running', lease_owner = ?, lease_expires_at = ?, "
            "updated_at = ? WHERE id IN (SELECT id FROM picked) AND status = 'ready' "
            f"RETURNING {_RUN_COLS}"
        )

        def tx_fn(tx: Tx) -> tuple[Later, Later | None, datetime]:
            at = at_given or self.clock()
            lease_until = at + lease
            rows = tx.later(
                sql,
                (*agent_params, limit, worker_id, self._to_db(lease_until), self._to_db(at)),
            )
            detail = {"worker_id": worker_id, "lease_expires_at": lease_until.isoformat()}
            return rows, self._claimed(tx, rows, worker_id, at, detail), lease_until

        rows_later, later, lease_until = await self._submit(True, tx_fn)
        rows = rows_later.rows
        if later is None or not rows:
            return []
        rows.sort(key=lambda r: (r[6], r[0]))  # creation order (RETURNING has none)
        corrupt: dict[str, CorruptRecord] = {}
        found = self._split_many(later, corrupt)  # the histories and calls came with the commit
        claimed = []
        unreadable: list[CorruptRecord] = []
        for row in rows:
            if row[0] not in found:
                raise RunNotFound(row[0])
            history, calls = found[row[0]]
            try:
                if row[0] in corrupt:
                    raise corrupt[row[0]]
                run = self._run_record(row, calls, history, None)
            except CorruptRecord as exc:  # claimed, not returned
                if _in_the_row(exc, row[4]):
                    unreadable.append(exc)
                else:  # this reader's limits, not the row: the lease runs out as before
                    _left_out(exc)
                continue
            claimed.append(ClaimedRun(run=run, worker_id=worker_id, lease_expires_at=lease_until))
        if unreadable:
            await self._set_aside(worker_id, unreadable, at_given)
        return claimed

    async def _set_aside(
        self, worker_id: str, unreadable: list[CorruptRecord], at_given: datetime | None
    ) -> None:
        """Mark runs this worker just claimed but cannot read INTERRUPTED, each with the
        reason in its outcome error and audit entry, so no claim takes them again; the row
        is kept for the operator to repair, then retry or cancel (ADR 0072). Only a run
        still held under this worker's lease changes. A failure is logged: the run is then
        left to its lease, as before."""

        def tx_fn(tx: Tx) -> list[CorruptRecord]:
            at = at_given or self.clock()
            done = []
            for exc in unreadable:
                problem = _clip(exc.problem)
                error = (
                    f"its stored record cannot be read ({problem}); worker \"{worker_id}\" "
                    "claimed it and resumed nothing, so no call ran: repair the row, then "
                    "retry or cancel the run"
                )
                changed = tx.execute(
                    "UPDATE golem_runs SET status = 'interrupted', updated_at = ?, "
                    f"outcome_error = ? {self._HELD}",
                    (self._to_db(at), error, exc.run_id, worker_id, self._to_db(at)),
                )
                if changed:
                    tx.audit(
                        exc.run_id,
                        at,
                        f"worker:{worker_id}",
                        AuditAction.INTERRUPTED,
                        {"worker_id": worker_id, "unreadable": problem},
                    )
                    done.append(exc)
            return done

        try:
            done = await self._submit(True, tx_fn)
        except StoreError as exc:
            log.error("claimed runs that cannot be read could not be set aside: %s", exc)
            for bad in unreadable:
                _left_out(bad)
            return
        for bad in unreadable:
            if bad in done:
                log.error(
                    "%s; claimed by worker %s and marked interrupted (nothing ran): repair "
                    "the row, then retry or cancel the run",
                    bad,
                    worker_id,
                )
            else:
                _left_out(bad)

    def _claimed(
        self, tx: Tx, rows: Later, worker_id: str, at: datetime, detail: dict[str, Any]
    ) -> Later | None:
        """Audit the runs a claim's update took (`rows`) and read their histories and calls;
        None when it took none. A backend that defers `rows` overrides this to do both
        without waiting for them."""
        got = rows.rows
        if not got:
            return None
        actor = f"worker:{worker_id}"
        for row in sorted(got, key=lambda r: (r[6], r[0])):  # creation order
            tx.audit(row[0], at, actor, AuditAction.CLAIMED, detail)
        return self._histories_and_calls(tx, [r[0] for r in got])

    def _lease_lost(self, tx: Tx, run_id: str, worker_id: str, at: datetime) -> LeaseLost:
        """Why `worker_id` does not hold the run's lease (after a guarded update changed 0 rows)."""
        rows = tx.fetch(
            "SELECT status, lease_owner, lease_expires_at FROM golem_runs WHERE id = ?",
            (run_id,),
        )
        if not rows:
            raise RunNotFound(run_id)
        status, owner, lease_exp = rows[0]
        if status != RunStatus.RUNNING.value:
            return LeaseLost(run_id, worker_id, f"the run is {status}")
        if owner != worker_id:
            return LeaseLost(run_id, worker_id, f'it is held by "{owner}"')
        expired = self._dt(lease_exp)
        return LeaseLost(run_id, worker_id, f"the lease ran out at {expired} (now {at})")

    _HELD = "WHERE id = ? AND status = 'running' AND lease_owner = ? AND lease_expires_at > ?"

    @store_op("renew_lease")
    async def renew_lease(
        self, run_id: str, worker_id: str, lease_seconds: float, *, now: datetime | None = None
    ) -> datetime:
        """Extend a held lease (see `Store.renew_lease`)."""
        at_given = _aware(now)
        lease = _lease(lease_seconds)

        attempt_at: list[datetime] = []

        def tx_fn(tx: Tx) -> datetime:
            at = at_given or self.clock()
            attempt_at.append(at)
            until = at + lease
            changed = tx.later(
                f"UPDATE golem_runs SET lease_expires_at = ? {self._HELD} RETURNING id",
                (self._to_db(until), run_id, worker_id, self._to_db(at)),
            )
            tx.require_run_changed(changed, run_id, _NotHeld())
            return until

        try:
            return await self._submit(True, tx_fn)
        except _NotHeld:
            raise await self._why_not_held(run_id, worker_id, attempt_at[-1]) from None

    async def _why_not_held(self, run_id: str, worker_id: str, at: datetime) -> Exception:
        """After a guarded update found the lease not held: `LeaseLost` saying why, or
        `RunNotFound` (read in a transaction of its own, the failed one rolled back)."""
        try:
            return await self._submit(False, self._lease_lost, run_id, worker_id, at)
        except RunNotFound as exc:
            return exc

    @store_op("finish")
    async def finish(
        self, run_id: str, worker_id: str, outcome: Outcome, *, now: datetime | None = None
    ) -> RunRecord:
        """Save a resume's outcome under the lease (see `Store.finish`)."""
        if outcome.status not in _ACTION or outcome.status is RunStatus.INTERRUPTED:
            raise ValueError(
                f"finish: outcome must be completed, paused or failed, got {outcome.status.value}"
            )
        at_given = _aware(now)
        actor = f"worker:{worker_id}"
        nxt: NewRun | None = None
        checked: tuple[str, datetime | None] | None = None
        if outcome.status is RunStatus.PAUSED:
            if outcome.next_run is None:
                raise ValueError("finish: a paused outcome needs next_run")
            nxt = outcome.next_run
            if nxt.parent_run_id != run_id:
                nxt = replace(nxt, parent_run_id=run_id)
            if not nxt.calls:
                raise ValueError(f'finish: the paused run "{nxt.id}" has no pending calls')
            checked = self._check_new(nxt)
        output = json.dumps(outcome.output) if outcome.status is RunStatus.COMPLETED else None

        attempt_at: list[datetime] = []

        def tx_fn(tx: Tx) -> tuple[Later, Later]:
            at = at_given or self.clock()
            attempt_at.append(at)
            rows = tx.later(
                "UPDATE golem_runs SET status = ?, updated_at = ?, child_run_id = ?, "
                f"outcome_output = ?, outcome_error = ? {self._HELD} RETURNING {_RUN_COLS}",
                (
                    outcome.status.value,
                    self._to_db(at),
                    None if nxt is None else nxt.id,
                    output,
                    outcome.error or None,
                    run_id,
                    worker_id,
                    self._to_db(at),
                ),
            )
            tx.require_run_changed(rows, run_id, _NotHeld())  # before anything else counts
            if nxt is not None:
                assert checked is not None
                self._insert_run(tx, nxt, RunStatus.PENDING, at, None, checked)
            tx.run(
                "UPDATE golem_histories SET outcome_history = ? WHERE run_id = ?",
                (outcome.history, run_id),
            )
            later = self._history_and_calls(tx, run_id)
            tx.audit(run_id, at, actor, _ACTION[outcome.status], _outcome_detail(outcome))
            return rows, later

        try:
            rows, later = await self._submit(True, tx_fn)
        except _NotHeld:
            raise await self._why_not_held(run_id, worker_id, attempt_at[-1]) from None
        history, calls = self._split(later, run_id)  # arrived with the commit
        return self._run_record(rows.rows[0], calls, history, outcome.history)

    @store_op("sweep_interrupted")
    async def sweep_interrupted(self, now: datetime | None = None) -> list[str]:
        """Mark RUNNING runs with a lapsed lease INTERRUPTED (see `Store.sweep_interrupted`)."""
        at_given = _aware(now)

        def tx_fn(tx: Tx) -> list[str]:
            at = at_given or self.clock()
            rows = tx.fetch(
                "SELECT id, lease_owner, lease_expires_at FROM golem_runs WHERE status = 'running' "
                f"AND lease_expires_at <= ? ORDER BY id LIMIT {SWEEP_BATCH}"
                + self._skip_locked_clause,
                (self._to_db(at),),
            )
            for run_id, owner, lease_exp in rows:
                expired_at = self._from_db(lease_exp)
                error = (
                    f'worker "{owner}" lost its lease at {expired_at.isoformat()} while '
                    "resuming; approved calls may have run: check before re-running"
                )
                tx.run(
                    "UPDATE golem_runs SET status = 'interrupted', updated_at = ?, "
                    "outcome_error = ? WHERE id = ? AND status = 'running'",
                    (self._to_db(at), error, run_id),
                )
                tx.audit(
                    run_id,
                    at,
                    "system:sweep",
                    AuditAction.INTERRUPTED,
                    {"worker_id": owner, "lease_expires_at": expired_at.isoformat()},
                )
            return [r[0] for r in rows]

        return await self._submit(True, tx_fn)

    def _lock_interrupted(self, tx: Tx, run_id: str) -> tuple[list[PendingCallRecord], int]:
        """Lock an INTERRUPTED run; return its calls and attempt number."""
        rows = tx.fetch(
            "SELECT status, attempt FROM golem_runs WHERE id = ?" + self._lock_clause, (run_id,)
        )
        if not rows:
            raise RunNotFound(run_id)
        if rows[0][0] != RunStatus.INTERRUPTED.value:
            raise RunNotInterrupted(run_id, _stored_status(rows[0][0], run_id))
        try:
            attempt = int(rows[0][1])
        except _ROW_FAULTS as exc:
            raise CorruptRecord(run_id, repr(exc)) from exc
        return self._calls_of(tx, [run_id])[run_id], attempt

    @store_op("retry_interrupted")
    async def retry_interrupted(
        self,
        run_id: str,
        *,
        resolved_by: str,
        note: str,
        confirm_calls: Sequence[str] = (),
        now: datetime | None = None,
    ) -> RunRecord:
        """Make an interrupted run READY again (see `Store.retry_interrupted`)."""
        if not resolved_by:
            raise ValueError("retry_interrupted: resolved_by must name the operator")
        at_given = _aware(now)
        confirm = list(dict.fromkeys(confirm_calls))

        def tx_fn(tx: Tx) -> RunRecord:
            at = at_given or self.clock()
            calls, attempt = self._lock_interrupted(tx, run_id)
            by_id = {c.call_id: c for c in calls}
            for call_id in confirm:
                call = by_id.get(call_id)
                if call is None:
                    raise CallNotFound(run_id, call_id)
                if call.decision is None or call.decision.kind is not DecisionKind.APPROVE:
                    raise InvalidDecision(
                        f'call "{call_id}" of run "{run_id}" was not approved: only an '
                        "approved call runs again, so there is nothing to confirm"
                    )
                tx.run(
                    "UPDATE golem_calls SET rerun_confirmed_by = ? WHERE run_id = ? AND call_id = ?",
                    (resolved_by, run_id, call_id),
                )
            tx.run(
                "UPDATE golem_runs SET status = 'ready', attempt = ?, updated_at = ?, "
                "lease_owner = NULL, lease_expires_at = NULL, outcome_error = NULL WHERE id = ?",
                (attempt + 1, self._to_db(at), run_id),
            )
            tx.audit(
                run_id,
                at,
                resolved_by,
                AuditAction.RESOLVED,
                {"resolution": "retry", "note": note, "attempt": attempt + 1, "confirmed": confirm},
            )
            tx.audit(run_id, at, resolved_by, AuditAction.READY)
            return self._load_run(tx, run_id)

        return await self._submit(True, tx_fn)

    @store_op("cancel_interrupted")
    async def cancel_interrupted(
        self, run_id: str, *, resolved_by: str, note: str, now: datetime | None = None
    ) -> RunRecord:
        """Close an interrupted run as FAILED (see `Store.cancel_interrupted`)."""
        if not resolved_by:
            raise ValueError("cancel_interrupted: resolved_by must name the operator")
        at_given = _aware(now)

        def tx_fn(tx: Tx) -> RunRecord:
            at = at_given or self.clock()
            self._lock_interrupted(tx, run_id)
            error = f"cancelled by {resolved_by} after an interrupted resume" + (
                f": {note}" if note else ""
            )
            tx.run(
                "UPDATE golem_runs SET status = 'failed', updated_at = ?, outcome_error = ? "
                "WHERE id = ?",
                (self._to_db(at), error, run_id),
            )
            tx.audit(
                run_id,
                at,
                resolved_by,
                AuditAction.RESOLVED,
                {"resolution": "cancel", "note": note},
            )
            tx.audit(run_id, at, resolved_by, AuditAction.FAILED, {"error": error})
            return self._load_run(tx, run_id)

        return await self._submit(True, tx_fn)

    def _audit_entry(self, row: tuple[Any, ...]) -> AuditEntry:
        try:
            return self._read_audit(row)
        except _ROW_FAULTS as exc:
            raise CorruptRecord(str(row[1]), f"audit entry {row[0]!r}: {exc!r}") from exc

    def _read_audit(self, row: tuple[Any, ...]) -> AuditEntry:
        eid, run_id, at, actor, action, detail, *run = row
        agent, status, parent = (*run, None, None, None)[:3]
        return AuditEntry(
            id=int(eid),
            run_id=run_id,
            at=self._from_db(at),
            actor=actor,
            action=AuditAction(action),
            detail=json.loads(detail),
            agent=agent,
            run_status=None if status is None else RunStatus(status),
            parent_run_id=parent,
        )

    @store_op("audit")
    async def audit(self, run_id: str) -> list[AuditEntry]:
        """Return the run's audit entries in order (see `Store.audit`)."""

        def tx_fn(tx: Tx) -> list[tuple[Any, ...]]:
            if not self._exists(tx, run_id):
                raise RunNotFound(run_id)
            return tx.fetch(
                f"SELECT {_AUDIT_COLS} FROM golem_audit WHERE run_id = ? ORDER BY id", (run_id,)
            )

        return [self._audit_entry(r) for r in await self._submit(False, tx_fn)]

    async def changes_since(self, cursor: int = 0, limit: int = 100) -> list[AuditEntry]:
        """Return audit entries after `cursor` (see `Store.changes_since`)."""
        if limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")

        def tx_fn(tx: Tx) -> list[tuple[Any, ...]]:
            # each entry with its run's agent, status and parent (one primary-key lookup), so
            # that views filtering by agent or status need not read every run
            return tx.fetch(
                "SELECT a.id, a.run_id, a.at, a.actor, a.action, a.detail, r.agent, r.status, "
                "r.parent_run_id "
                "FROM golem_audit a LEFT JOIN golem_runs r ON r.id = a.run_id "
                "WHERE a.id > ? ORDER BY a.id LIMIT ?",
                (cursor, limit),
            )

        entries = []
        for r in await self._submit(False, tx_fn):
            try:
                entries.append(self._audit_entry(r))
            except CorruptRecord as exc:  # the feed goes on past it
                _left_out(exc)
        return entries

    @store_op("audit_page")
    async def audit_page(
        self,
        *,
        agents: Collection[str] | None = None,
        action: AuditAction | None = None,
        run_contains: str | None = None,
        actor_contains: str | None = None,
        before: int | None = None,
        limit: int = 100,
        scan: int = 5000,
    ) -> AuditPage:
        """Return one page of matching audit entries, newest first (see `Store.audit_page`)."""
        if limit < 1 or scan < 1:
            raise ValueError(f"limit and scan must be >= 1, got {limit} and {scan}")
        if before is not None and not 0 <= before <= _MAX_ID:
            raise ValueError(f"before must be between 0 and {_MAX_ID}, got {before!r}")
        names = None if agents is None else sorted({a for a in agents if _storable(a)})
        if names == []:
            return AuditPage([], None)  # no stored agent holds such text
        kind = None if action is None else AuditAction(action).value
        fold = actor_contains.casefold() if actor_contains else None
        part = run_contains or None
        filtered = kind is not None or fold is not None or part is not None
        cols = f"SELECT {_AUDIT_COLS_A}, a.agent FROM golem_audit a WHERE "
        walk = "a.id < ? ORDER BY a.id DESC LIMIT ?"
        # (sql, the agent of each of its walks)
        queries: list[tuple[str, list[str | None]]]
        if names is None:
            queries = [(f"{cols}a.agent IS NOT NULL AND {walk}", [None])]
        else:  # one index walk per agent, merged by ID: a batch reads at most its size per agent
            queries = []
            for at in range(0, len(names), _AGENT_ARMS):
                group = names[at : at + _AGENT_ARMS]
                if len(group) == 1:
                    sql = f"{cols}a.agent = ? AND {walk}"
                else:
                    arms = " UNION ALL ".join(
                        f"SELECT * FROM ({cols}a.agent = ? AND {walk}) AS p{i}"
                        for i in range(len(group))
                    )
                    sql = f"SELECT * FROM ({arms}) AS m ORDER BY id DESC LIMIT ?"
                queries.append((sql, list(group)))
        plan = self._page_plan

        def tx_fn(tx: Tx, cursor: int, size: int) -> list[tuple[Any, ...]]:
            if plan:  # each agent's entries walked in index order, statistics or not
                tx.run(plan)
            rows: list[tuple[Any, ...]] = []
            for sql, group in queries:
                args: list[Any] = []
                for name in group:
                    args += [cursor, size] if name is None else [name, cursor, size]
                rows += tx.fetch(sql, args if len(group) == 1 else [*args, size])
            if len(queries) > 1:  # groups of agents: the newest of all of them
                rows.sort(key=lambda r: int(r[0]), reverse=True)
                del rows[size:]
            return rows

        # the filters are matched here, alike on every backend, on the row's plain columns
        # (a row's detail is decoded only when it is shown); a page looks at `limit` + 1
        # entries, or with filters at most `scan` beyond the page's own
        entries: list[AuditEntry] = []
        cursor = _MAX_ID if before is None else before
        budget = limit + 1 + (scan if filtered else 0)
        while budget > 0:
            size = min(budget, max(limit + 1, _FILTER_BATCH) if filtered else budget)
            rows = await self._submit(False, tx_fn, cursor, size)
            budget -= len(rows)
            for r in rows:
                cursor = int(r[0])
                if kind is not None and r[4] != kind:
                    continue
                if part is not None and part not in str(r[1]):
                    continue
                if fold is not None and fold not in str(r[3]).casefold():
                    continue
                if len(entries) == limit:  # one more matches: there is a next page
                    return AuditPage(entries, entries[-1].id)
                try:
                    entries.append(self._audit_entry(r))
                except CorruptRecord as exc:
                    _left_out(exc)
            if len(rows) < size:  # the walk reached the start of the log
                return AuditPage(entries, None)
        return AuditPage(entries, cursor)  # looked at `scan` entries: go on from the last

    def _last_change_id(self, tx: Tx) -> int:
        return int(tx.fetch("SELECT last_id FROM golem_audit_seq WHERE singleton = 1")[0][0])

    async def last_change_id(self) -> int:
        """Return the newest audit entry's ID, 0 when none (see `Store.last_change_id`)."""
        newest = await self._submit(False, self._last_change_id)
        self._feed.publish(newest, ready=False)
        return newest


_ACTION: dict[RunStatus, AuditAction] = {
    RunStatus.COMPLETED: AuditAction.COMPLETED,
    RunStatus.PAUSED: AuditAction.PAUSED,
    RunStatus.FAILED: AuditAction.FAILED,
}


def _outcome_detail(outcome: Outcome) -> dict[str, Any]:
    if outcome.status is RunStatus.FAILED:
        return {"error": outcome.error}
    if outcome.status is RunStatus.PAUSED and outcome.next_run is not None:
        return {"child_run_id": outcome.next_run.id}
    return {}


_FITS: dict[DecisionKind, tuple[str, ...]] = {
    DecisionKind.APPROVE: (CallKind.APPROVAL.value,),
    DecisionKind.DENY: (CallKind.APPROVAL.value, CallKind.EXTERNAL.value),
    DecisionKind.EXTERNAL: (CallKind.EXTERNAL.value,),
}
"""The call kinds each decision kind applies to (`_check_fits` says why not)."""


def _decided_detail(record: DecisionRecord, original_args: str | None) -> dict[str, Any]:
    """The audit detail of a decision."""
    detail: dict[str, Any] = {"call_id": record.call_id, "decision": record.kind.value}
    if record.args is not None:  # what the approver changed, beside what was asked
        detail["original_args"] = original_args
        detail["args"] = record.args
    if record.kind is DecisionKind.DENY:
        detail["reason"] = record.reason
    if record.kind is DecisionKind.EXTERNAL:
        detail["text"] = record.text
    return detail


def _check_fits(run_id: str, call: PendingCallRecord, kind: DecisionKind) -> None:
    if kind is DecisionKind.APPROVE and call.kind is not CallKind.APPROVAL:
        raise InvalidDecision(
            f'call "{call.call_id}" of run "{run_id}" waits for an external result: '
            "submit its result text or deny it, approval does not apply"
        )
    if kind is DecisionKind.EXTERNAL and call.kind is not CallKind.EXTERNAL:
        raise InvalidDecision(
            f'call "{call.call_id}" of run "{run_id}" waits for approval: approve or deny it, '
            "an external result does not apply"
        )
