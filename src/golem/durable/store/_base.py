"""The base of the SQL stores: the driver port (`Conn`, `Tx`, `Later`), argument checks,
columns and row mapping, shared reads and the insert of a new run (ADR 0079)."""

from __future__ import annotations

import abc
import base64
import json
import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any, Protocol, Self, TypeVar

import msgspec

from golem.durable.store._feed import ChangeFeed
from golem.durable.store._schema import SchemaConn
from golem.durable.store.records import (
    AuditAction,
    AuditEntry,
    CallKind,
    CorruptRecord,
    DecisionKind,
    DecisionRecord,
    InvalidCursor,
    NewRun,
    Outcome,
    PendingCallRecord,
    RunNotFound,
    RunRecord,
    RunStatus,
    check_run_id,
    check_seconds,
)
from golem.messages import deep_spans

__all__ = [
    "HELD",
    "AuditRow",
    "Conn",
    "Later",
    "NotHeld",
    "SQLBase",
    "Stats",
    "Tx",
    "aware",
    "decode_cursor",
    "encode_cursor",
    "held",
    "lease_delta",
    "storable",
    "text_arg",
    "texts",
    "utc_now",
]


def utc_now() -> datetime:
    """The current time as a timezone-aware UTC datetime."""
    return datetime.now(UTC)


class Later:
    """The rows of a statement sent without waiting; reading them inside the transaction waits."""

    __slots__ = ("_rows", "_wait")

    def __init__(
        self, rows: list[tuple[Any, ...]] | None = None, wait: Callable[[], object] | None = None
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

    __slots__ = (
        "conn",
        "entries",
        "execute",
        "fetch",
        "last_id",
        "later",
        "ready",
        "require_run_changed",
        "run",
    )

    def __init__(self, conn: Conn) -> None:
        self.conn = conn
        self.entries: list[AuditRow] = []
        self.last_id = 0
        self.ready = False
        self.fetch, self.execute = conn.fetch, conn.execute
        self.run, self.later = conn.run, conn.later
        self.require_run_changed = conn.require_run_changed

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


@dataclass(slots=True)
class Stats:
    """Counters of what the store sent to its database (for benchmarks and tests)."""

    transactions: int = 0
    commits: int = 0
    statements: int = 0
    round_trips: int = 0
    retried_batches: int = 0


log = logging.getLogger("golem.durable.store")


ROW_FAULTS = (
    ValueError,
    TypeError,
    KeyError,
    IndexError,
    AttributeError,
    OverflowError,
    UnicodeError,
    RecursionError,
)


def left_out(exc: CorruptRecord) -> None:
    log.error("%s; left out (read it with get_run to see the error)", exc)


def in_the_row(exc: CorruptRecord, deps_ref: Any) -> bool:
    """Whether a ready run's fault is its stored value's own (a deep but valid JSON is not)."""
    cause = exc.__cause__
    if isinstance(cause, MemoryError):
        return False
    if isinstance(cause, RecursionError):
        return not isinstance(deps_ref, str) or deep_spans(deps_ref) is None
    return True


_CLIP = 500


def clip(text: str) -> str:
    return text if len(text) <= _CLIP else text[:_CLIP] + f"… ({len(text)} characters)"


SWEEP_BATCH = 500

RUN_COLS = (
    "id, agent, conversation_id, status, deps_ref, started_by, created_at, "
    "updated_at, expires_at, parent_run_id, child_run_id, lease_owner, lease_expires_at, "
    "outcome_output, outcome_error, attempt, trace_context"
)
R_RUN_COLS = ", ".join(f"r.{c.strip()}" for c in RUN_COLS.split(","))
N_RUN_COLS = len(RUN_COLS.split(","))
CALL_COLS = (
    "run_id, call_id, position, kind, tool_name, args, reason, deadline, decision, "
    "decision_reason, decision_text, decided_by, decided_at, rerun_confirmed_by, decision_args, "
    "seal"
)
C_CALL_COLS = ", ".join(f"c.{c.strip()}" for c in CALL_COLS.split(","))
AUDIT_COLS = "id, run_id, at, actor, action, detail"
AUDIT_COLS_A = "a.id, a.run_id, a.at, a.actor, a.action, a.detail"

_STATUS: dict[str, RunStatus] = {s.value: s for s in RunStatus}
KIND: dict[str, CallKind] = {k.value: k for k in CallKind}
DECISION: dict[str, DecisionKind] = {k.value: k for k in DecisionKind}


def run_status(value: str) -> RunStatus:
    return _STATUS.get(value) or RunStatus(value)


def stored_status(value: Any, run_id: str) -> RunStatus:
    """The status stored for `run_id`; a value no golem wrote is a `CorruptRecord`."""
    try:
        return run_status(value)
    except ValueError as exc:
        raise CorruptRecord(run_id, repr(exc)) from exc


def to_json(value: Any) -> str:
    """Compact JSON of golem's own audit details (msgspec; stdlib json for odd strings)."""
    try:
        return msgspec.json.encode(value).decode()
    except (TypeError, ValueError, UnicodeError, msgspec.EncodeError):
        return json.dumps(value)


def from_json(text: str) -> Any:
    """Parse JSON this store wrote (msgspec; stdlib json for what msgspec does not take)."""
    try:
        return msgspec.json.decode(text)
    except (msgspec.DecodeError, ValueError):
        return json.loads(text)


RUNS_JOIN_CALLS = "golem_runs r JOIN golem_calls c ON c.run_id = r.id"


OUTCOME_ACTION: dict[RunStatus, AuditAction] = {
    RunStatus.COMPLETED: AuditAction.COMPLETED,
    RunStatus.PAUSED: AuditAction.PAUSED,
    RunStatus.FAILED: AuditAction.FAILED,
}


def outcome_detail(outcome: Outcome) -> dict[str, Any]:
    if outcome.status is RunStatus.FAILED:
        return {"error": outcome.error}
    if outcome.status is RunStatus.PAUSED and outcome.next_run is not None:
        return {"child_run_id": outcome.next_run.id}
    return {}


def storable(text: str) -> bool:
    """Whether a text column can hold `text` (no NUL, no lone surrogate)."""
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def text_arg(name: str, value: object) -> str:
    """`value` when it is a `str` (an ID or filter a caller passed); else a `TypeError`."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__} {value!r:.80}")
    return value


def held(name: str, value: object) -> bool:
    """Whether the ID `value` can be stored at all: a `str` no text column refuses (else no
    row has it: not found). Raises `TypeError` for a value that is not a `str`."""
    return storable(text_arg(name, value))


def texts(name: str, values: Collection[str]) -> list[str]:
    """The storable ones of `values` (the others match no row); `TypeError` for a non-`str`."""
    return [v for v in values if held(name, v)]


def aware(value: datetime | None, what: str = "now") -> datetime | None:
    if value is None:
        return None
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{what} must be a timezone-aware datetime, got naive {value!r}")
    return value.astimezone(UTC)


def lease_delta(seconds: float) -> timedelta:
    return timedelta(seconds=check_seconds("lease_seconds", seconds))


def encode_cursor(*parts: Any) -> str:
    raw = json.dumps(parts, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, shape: tuple[type, ...]) -> list[Any]:
    """The parts of a cursor `encode_cursor` wrote, as `shape` says (`InvalidCursor` else)."""
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


_T = TypeVar("_T")


class NotHeld(Exception):
    """A guarded update found the run's lease not held (the transaction is rolled back)."""


HELD = "WHERE id = ? AND status = 'running' AND lease_owner = ? AND lease_expires_at > ?"


class SQLBase(abc.ABC):
    """What every store operation shares: the backend's hooks, row mapping, reads of runs
    and calls, and the insert of a new run."""

    _lock_clause: str = ""
    _skip_locked_clause: str = ""
    _runs_with_calls: str = RUNS_JOIN_CALLS
    _page_plan: str = ""

    stats: Stats
    _feed: ChangeFeed

    # ------------------------------------------------------------------ backend hooks

    @abc.abstractmethod
    async def _submit(self, write: bool, fn: Callable[..., _T], *args: Any) -> _T:
        """Run `fn(tx, *args)` in one transaction off the loop; cancelling never interrupts it."""

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
        """The store's current time (PostgreSQL: the server's)."""
        return utc_now()

    def change_feed(self, *, ready_only: bool = False) -> ChangeFeed:
        """The store's `ChangeFeed`."""
        return self._feed

    # ------------------------------------------------------------------ plumbing

    def _ts(self, value: datetime | None) -> Any:
        return None if value is None else self._to_db(value)

    def _dt(self, value: Any) -> datetime | None:
        return None if value is None else self._from_db(value)

    def _audit_params(self, tx: Tx) -> list[tuple[str, Any, str, str, str]]:
        to_db = self._to_db
        return [
            (run_id, to_db(at), actor, action.value, to_json(detail))
            for run_id, at, actor, action, detail in tx.entries
        ]

    # ------------------------------------------------------------------ row mapping

    def _call_record(self, row: Sequence[Any]) -> PendingCallRecord:
        try:
            (run_id, call_id, position, kind, tool_name, args, reason, deadline) = row[:8]
            (decision, d_reason, d_text, decided_by, decided_at, confirmed_by, d_args) = row[8:15]
            record = None
            if decision is not None:
                d_kind = DECISION.get(decision) or DecisionKind(decision)
                d_texts = (d_reason or "", d_text or "", decided_by or "")
                d_at = self._from_db(decided_at)
                record = DecisionRecord(run_id, call_id, d_kind, *d_texts, d_at, d_args)
            call_kind, until = KIND.get(kind) or CallKind(kind), self._dt(deadline)
            fields = (run_id, call_id, int(position), call_kind, tool_name, args, reason, until)
            return PendingCallRecord(*fields, record, confirmed_by, row[15])
        except ROW_FAULTS as exc:
            raise CorruptRecord(str(row[0]), f"call {row[1]!r}: {exc!r}") from exc

    def _run_record(
        self, row: Sequence[Any], calls: Sequence[PendingCallRecord], history: str, out: str | None
    ) -> RunRecord:
        try:
            (rid, agent, conv, status, deps_ref, started_by, created, updated) = row[:8]
            (expires, parent, child, owner, lease_exp, output, err, attempt, trace) = row[8:17]
            st = run_status(status)
            outcome: Outcome | None = None
            if st.terminal:
                value = None if output is None else json.loads(output)
                outcome = Outcome(status=st, output=value, error=err or "", history=out)
            head = (rid, agent, conv, st, history, tuple(calls), from_json(deps_ref), started_by)
            times = (self._from_db(created), self._from_db(updated), self._dt(expires))
            rest = (parent, child, owner, self._dt(lease_exp), outcome, int(attempt), trace or "")
            return RunRecord(*(*head, *times, *rest))
        except ROW_FAULTS as exc:
            raise CorruptRecord(str(row[0]), repr(exc)) from exc

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
            f"SELECT {CALL_COLS} FROM golem_calls WHERE run_id IN ({marks}) "
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

    def _histories_and_calls(self, tx: Tx, ids: Sequence[str]) -> Later:
        """Runs' histories and calls (one statement; `_split_many` reads its rows)."""
        marks = ", ".join("?" for _ in ids)
        return tx.later(
            f"SELECT h.history, {C_CALL_COLS}, h.run_id FROM golem_histories h "
            f"LEFT JOIN golem_calls c ON c.run_id = h.run_id WHERE h.run_id IN ({marks}) "
            "ORDER BY h.run_id, c.position",
            ids,
        )

    def _split_many(
        self, later: Later, corrupt: dict[str, CorruptRecord] | None = None
    ) -> dict[str, tuple[str, list[PendingCallRecord]]]:
        """Run ID -> (history, calls) from the rows of `_histories_and_calls`; a call row that
        cannot be read raises `CorruptRecord`, or is recorded in `corrupt` by run ID."""
        found: dict[str, tuple[str, list[PendingCallRecord]]] = {}
        n = len(CALL_COLS.split(",")) + 1
        for r in later.rows:
            run_id = r[n]
            got = found.get(run_id)
            if got is None:
                got = found[run_id] = (r[0], [])
            if r[2] is not None:
                try:
                    got[1].append(self._call_record(r[1:n]))
                except CorruptRecord as exc:
                    if corrupt is None:
                        raise
                    corrupt[run_id] = exc
        return found

    def _load_runs(
        self, tx: Tx, rows: list[tuple[Any, ...]], *, leave_out: bool = False
    ) -> list[RunRecord]:
        """Records of `rows` with their calls; a corrupt row raises, or with `leave_out` is logged."""
        corrupt: dict[str, CorruptRecord] = {}
        calls = self._calls_of(tx, [r[0] for r in rows], corrupt)
        n = N_RUN_COLS
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
                left_out(exc)
        return out

    def _select_runs(self, where: str, tail: str = "") -> str:
        return (
            f"SELECT {R_RUN_COLS}, h.history, h.outcome_history FROM golem_runs r "
            f"JOIN golem_histories h ON h.run_id = r.id WHERE {where} {tail}"
        )

    def _load_run(self, tx: Tx, run_id: str, agents: Collection[str] | None = None) -> RunRecord:
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
        """Lock the run's row and its calls; its status and calls."""
        sql = (
            f"SELECT r.status, {C_CALL_COLS} FROM golem_runs r "
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
        status = stored_status(rows[0][0], run_id)
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
            aware(c.deadline, "deadline")
        try:
            # allow_nan=False: NaN/Infinity are not JSON; stored, they break every reader
            deps_ref = json.dumps(run.deps_ref, allow_nan=False)
        except (TypeError, ValueError, RecursionError) as exc:
            raise ValueError(f'run "{run.id}": deps_ref is not JSON-serializable: {exc}') from None
        return deps_ref, aware(run.expires_at, "expires_at")

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
        row = (
            *(run.id, run.agent, run.conversation_id, status.value, deps_ref, run.started_by),
            *(ts, ts, self._ts(expires_at), run.parent_run_id, None, None, None),
            *(out, err, 1, run.trace_context or None),
        )
        marks = ", ".join("?" * len(row))
        tx.run(
            f"INSERT INTO golem_runs ({RUN_COLS}) VALUES ({marks})",
            row,
            ValueError(f'a run with ID "{run.id}" already exists'),
        )
        tx.run(
            "INSERT INTO golem_histories (run_id, history, outcome_history) VALUES (?, ?, ?)",
            (run.id, run.history, out_history),
        )
        calls = self._insert_calls(tx, run, expires_at)
        detail = {
            "agent": run.agent,
            "conversation_id": run.conversation_id,
            "status": status.value,
            "calls": [c.call_id for c in run.calls],
            **({"parent_run_id": run.parent_run_id} if run.parent_run_id else {}),
        }
        tx.audit(run.id, now, run.started_by or "unknown", AuditAction.CREATED, detail)
        return self._run_record(row, calls, run.history, out_history)  # as a read gives it back

    def _insert_calls(
        self, tx: Tx, run: NewRun, expires_at: datetime | None
    ) -> list[PendingCallRecord]:
        """Insert the run's pending calls (one statement); return them as stored."""
        calls: list[PendingCallRecord] = []
        params: list[Any] = []
        for pos, c in enumerate(run.calls):
            deadline = self._ts(expires_at if c.deadline is None else c.deadline.astimezone(UTC))
            row = (run.id, c.call_id, pos, CallKind(c.kind).value, c.tool_name, c.args, c.reason)
            params += (*row, deadline, c.seal)
            calls.append(self._call_record((*row, deadline, *(None,) * 7, c.seal)))  # as read back
        if calls:
            values = ", ".join(["(?, ?, ?, ?, ?, ?, ?, ?, ?)"] * len(calls))
            tx.run(
                "INSERT INTO golem_calls (run_id, call_id, position, kind, tool_name, args, "
                f"reason, deadline, seal) VALUES {values}",
                params,
            )
        return calls

    def _audit_entry(self, row: tuple[Any, ...]) -> AuditEntry:
        try:
            eid, run_id, at, actor, action, detail, *run = row
            agent, status, parent = (*run, None, None, None)[:3]
            fields = (int(eid), run_id, self._from_db(at), actor, AuditAction(action))
            run_status = None if status is None else RunStatus(status)
            return AuditEntry(*fields, json.loads(detail), agent, run_status, parent)
        except ROW_FAULTS as exc:
            raise CorruptRecord(str(row[1]), f"audit entry {row[0]!r}: {exc!r}") from exc
