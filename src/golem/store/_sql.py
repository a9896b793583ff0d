"""The store's transactions, written once over a small connection port.

`SQLStore` implements every `Store` method as one transaction of `?`-placeholder SQL that
runs on SQLite and PostgreSQL alike. A backend supplies only what differs: how a
transaction is opened (`BEGIN IMMEDIATE` / row locks), how timestamps are stored, and the
row-locking clauses (`FOR UPDATE`, `FOR UPDATE SKIP LOCKED`, empty on SQLite where the
write transaction already holds the database).

Audit IDs come from a one-row counter bumped as the last statement of each transaction;
the row lock it takes until commit makes IDs visible in commit order, which is what lets
`changes_since` pollers advance a cursor without missing entries.
"""

from __future__ import annotations

import abc
import json
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any, Protocol, Self, overload

from golem.store import (
    EXPIRY_ACTOR,
    EXPIRY_REASON,
    AuditAction,
    AuditEntry,
    CallExpired,
    CallKind,
    ClaimedRun,
    Decision,
    DecisionConflict,
    DecisionKind,
    DecisionRecord,
    InvalidDecision,
    LeaseLost,
    NewRun,
    Outcome,
    PendingCallRecord,
    RunNotFound,
    RunNotPending,
    RunRecord,
    RunStatus,
    utc_now,
)
from golem.store._schema import SchemaConn

__all__ = ["Conn", "SQLStore"]

SWEEP_BATCH = 500
"""At most this many runs change per sweep transaction."""

_RUN_COLS = (
    "id, agent, conversation_id, status, history, deps_ref, started_by, created_at, "
    "updated_at, expires_at, parent_run_id, child_run_id, lease_owner, lease_expires_at, "
    "outcome_output, outcome_error, outcome_history"
)
_CALL_COLS = (
    "run_id, call_id, position, kind, tool_name, args, reason, deadline, decision, "
    "decision_reason, decision_text, decided_by, decided_at"
)
_AUDIT_COLS = "id, run_id, at, actor, action, detail"


class Conn(SchemaConn, Protocol):
    """One open transaction of a backend (`?` placeholders)."""


class _Tx:
    """A transaction plus the audit entries it will append just before commit."""

    def __init__(self, conn: Conn) -> None:
        self.conn = conn
        self.entries: list[tuple[str, datetime, str, AuditAction, dict[str, Any]]] = []

    async def fetch(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return await self.conn.fetch(sql, params)

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        return await self.conn.execute(sql, params)

    def audit(
        self,
        run_id: str,
        at: datetime,
        actor: str,
        action: AuditAction,
        detail: dict[str, Any] | None = None,
    ) -> None:
        self.entries.append((run_id, at, actor, action, detail or {}))


def _aware(value: datetime | None, what: str = "now") -> datetime:
    if value is None:
        return utc_now()
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


class SQLStore(abc.ABC):
    """Every `Store` method over a backend's transactions (see the module docstring)."""

    _lock_clause: str = ""
    """Appended to a single-row SELECT that must lock the row until commit."""
    _skip_locked_clause: str = ""
    _peek_before_claim: bool = True
    """Look for a ready run in a read transaction before taking the write lock (SQLite:
    idle polling then never contends with writers; PostgreSQL's SKIP LOCKED needs no peek)."""
    """Appended to a SELECT that claims rows other transactions are not holding."""

    # ------------------------------------------------------------------ backend hooks

    @abc.abstractmethod
    def _transaction(self, *, write: bool) -> AbstractAsyncContextManager[Conn]:
        """Open a transaction; commit on normal exit, roll back on an exception."""

    @abc.abstractmethod
    def _to_db(self, value: datetime) -> Any:
        """Convert an aware datetime to the backend's stored form."""

    @abc.abstractmethod
    def _from_db(self, value: Any) -> datetime:
        """Convert a stored timestamp back to an aware UTC datetime."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release the backend's connections."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # ------------------------------------------------------------------ plumbing

    def _ts(self, value: datetime | None) -> Any:
        return None if value is None else self._to_db(value)

    def _dt(self, value: Any) -> datetime | None:
        return None if value is None else self._from_db(value)

    def _tx(self, *, write: bool) -> _TxScope:
        return _TxScope(self, write)

    async def _flush_audit(self, tx: _Tx) -> None:
        if not tx.entries:
            return
        n = len(tx.entries)
        rows = await tx.fetch(
            "UPDATE golem_audit_seq SET last_id = last_id + ? WHERE singleton = 1 RETURNING last_id",
            (n,),
        )
        first = int(rows[0][0]) - n + 1
        params: list[Any] = []
        for i, (run_id, at, actor, action, detail) in enumerate(tx.entries):
            params += (first + i, run_id, self._to_db(at), actor, action.value, json.dumps(detail))
        values = ", ".join(["(?, ?, ?, ?, ?, ?)"] * n)
        await tx.execute(f"INSERT INTO golem_audit ({_AUDIT_COLS}) VALUES {values}", params)
        tx.entries.clear()

    # ------------------------------------------------------------------ row mapping

    def _call_record(self, row: tuple[Any, ...]) -> PendingCallRecord:
        (run_id, call_id, position, kind, tool_name, args, reason, deadline) = row[:8]
        (decision, d_reason, d_text, decided_by, decided_at) = row[8:]
        record = None
        if decision is not None:
            record = DecisionRecord(
                run_id=run_id,
                call_id=call_id,
                kind=DecisionKind(decision),
                reason=d_reason or "",
                text=d_text or "",
                decided_by=decided_by or "",
                decided_at=self._from_db(decided_at),
            )
        return PendingCallRecord(
            run_id=run_id,
            call_id=call_id,
            position=int(position),
            kind=CallKind(kind),
            tool_name=tool_name,
            args=args,
            reason=reason,
            deadline=self._dt(deadline),
            decision=record,
        )

    def _run_record(self, row: tuple[Any, ...], calls: Sequence[PendingCallRecord]) -> RunRecord:
        (rid, agent, conv, status, history, deps_ref, started_by, created, updated) = row[:9]
        (expires, parent, child, owner, lease_exp, out, err, out_history) = row[9:]
        st = RunStatus(status)
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
            deps_ref=json.loads(deps_ref),
            started_by=started_by,
            created_at=self._from_db(created),
            updated_at=self._from_db(updated),
            expires_at=self._dt(expires),
            parent_run_id=parent,
            child_run_id=child,
            lease_owner=owner,
            lease_expires_at=self._dt(lease_exp),
            outcome=outcome,
        )

    async def _load_runs(self, tx: _Tx, rows: list[tuple[Any, ...]]) -> list[RunRecord]:
        if not rows:
            return []
        ids = [r[0] for r in rows]
        marks = ", ".join("?" for _ in ids)
        call_rows = await tx.fetch(
            f"SELECT {_CALL_COLS} FROM golem_calls WHERE run_id IN ({marks}) "
            "ORDER BY run_id, position",
            ids,
        )
        by_run: dict[str, list[PendingCallRecord]] = {i: [] for i in ids}
        for cr in call_rows:
            by_run[cr[0]].append(self._call_record(cr))
        return [self._run_record(r, by_run[r[0]]) for r in rows]

    async def _load_run(self, tx: _Tx, run_id: str, *, lock: bool = False) -> RunRecord:
        rows = await tx.fetch(
            f"SELECT {_RUN_COLS} FROM golem_runs WHERE id = ?"
            + (self._lock_clause if lock else ""),
            (run_id,),
        )
        if not rows:
            raise RunNotFound(run_id)
        return (await self._load_runs(tx, rows))[0]

    # ------------------------------------------------------------------ inserts

    async def _insert_run(
        self, tx: _Tx, run: NewRun, status: RunStatus, now: datetime, outcome: Outcome | None
    ) -> RunRecord:
        """Insert the run and its calls; return the record as stored (no read-back)."""
        ids = [c.call_id for c in run.calls]
        if len(set(ids)) != len(ids):
            dup = next(i for i in ids if ids.count(i) > 1)
            raise ValueError(f'run "{run.id}": call ID "{dup}" appears more than once')
        if not run.id:
            raise ValueError("a run needs a non-empty id")
        expires_at = None if run.expires_at is None else _aware(run.expires_at, "expires_at")
        try:
            deps_ref = json.dumps(run.deps_ref)
        except (TypeError, ValueError) as exc:
            raise ValueError(f'run "{run.id}": deps_ref is not JSON-serializable: {exc}') from None
        out = err = out_history = None
        if outcome is not None:
            out = None if outcome.status is not RunStatus.COMPLETED else json.dumps(outcome.output)
            err = outcome.error or None
            out_history = outcome.history
        inserted = await tx.execute(
            f"INSERT INTO golem_runs ({_RUN_COLS}) VALUES "
            "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL, NULL, ?, ?, ?) "
            "ON CONFLICT (id) DO NOTHING",
            (
                run.id,
                run.agent,
                run.conversation_id,
                status.value,
                run.history,
                deps_ref,
                run.started_by,
                self._to_db(now),
                self._to_db(now),
                self._ts(expires_at),
                run.parent_run_id,
                out,
                err,
                out_history,
            ),
        )
        if inserted != 1:
            raise ValueError(f'a run with ID "{run.id}" already exists')
        calls: list[PendingCallRecord] = []
        for pos, c in enumerate(run.calls):
            deadline = expires_at if c.deadline is None else _aware(c.deadline, "deadline")
            calls.append(
                PendingCallRecord(
                    run_id=run.id,
                    call_id=c.call_id,
                    position=pos,
                    kind=CallKind(c.kind),
                    tool_name=c.tool_name,
                    args=c.args,
                    reason=c.reason,
                    deadline=_utc(deadline),
                    decision=None,
                )
            )
            await tx.execute(
                f"INSERT INTO golem_calls ({_CALL_COLS}) VALUES "
                "(?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL, NULL, NULL, NULL)",
                (
                    run.id,
                    c.call_id,
                    pos,
                    CallKind(c.kind).value,
                    c.tool_name,
                    c.args,
                    c.reason,
                    self._ts(deadline),
                ),
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
            deps_ref=json.loads(deps_ref),
            started_by=run.started_by,
            created_at=_utc(now),
            updated_at=_utc(now),
            expires_at=_utc(expires_at),
            parent_run_id=run.parent_run_id,
            child_run_id=None,
            lease_owner=None,
            lease_expires_at=None,
            outcome=stored_outcome,
        )

    # ------------------------------------------------------------------ Store API

    async def schema_version(self) -> int:
        """Return the schema version of the opened database."""
        async with self._tx(write=False) as tx:
            rows = await tx.fetch("SELECT MAX(version) FROM golem_schema_version")
        return int(rows[0][0] or 0)

    async def save_pending(self, run: NewRun) -> RunRecord:
        """Save a paused run as PENDING (see `Store.save_pending`)."""
        if not run.calls:
            raise ValueError(f'save_pending: run "{run.id}" has no pending calls')
        now = utc_now()
        async with self._tx(write=True) as tx:
            record = await self._insert_run(tx, run, RunStatus.PENDING, now, None)
        return record

    async def save_finished(self, run: NewRun, outcome: Outcome) -> RunRecord:
        """Save a run that ended without pausing (see `Store.save_finished`)."""
        if outcome.status not in (RunStatus.COMPLETED, RunStatus.FAILED):
            raise ValueError(
                f"save_finished: outcome must be completed or failed, got {outcome.status.value}"
            )
        if run.calls:
            raise ValueError(f'save_finished: run "{run.id}" has pending calls; use save_pending')
        now = utc_now()
        async with self._tx(write=True) as tx:
            record = await self._insert_run(tx, run, outcome.status, now, outcome)
            tx.audit(
                run.id,
                now,
                run.started_by or "unknown",
                _ACTION[outcome.status],
                _outcome_detail(outcome),
            )
        return record

    async def get_run(self, run_id: str) -> RunRecord:
        """Return the run (see `Store.get_run`)."""
        async with self._tx(write=False) as tx:
            return await self._load_run(tx, run_id)

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
        where: list[str] = []
        params: list[Any] = []
        if status is not None:
            statuses = [status] if isinstance(status, str) else list(status)
            if not statuses:
                return []
            where.append(f"status IN ({', '.join('?' for _ in statuses)})")
            params.extend(RunStatus(s).value for s in statuses)
        if agent is not None:
            where.append("agent = ?")
            params.append(agent)
        if conversation_id is not None:
            where.append("conversation_id = ?")
            params.append(conversation_id)
        if tool_name is not None:
            where.append(
                "EXISTS (SELECT 1 FROM golem_calls c WHERE c.run_id = golem_runs.id "
                "AND c.tool_name = ?)"
            )
            params.append(tool_name)
        sql = f"SELECT {_RUN_COLS} FROM golem_runs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created_at DESC, id DESC LIMIT ? OFFSET ?"
        params.extend((limit, offset))
        async with self._tx(write=False) as tx:
            rows = await tx.fetch(sql, params)
            return await self._load_runs(tx, rows)

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
        at = _aware(now)
        kind = DecisionKind(decision.kind)
        decision = Decision(  # only the field that belongs to the kind counts
            kind,
            reason=decision.reason if kind is DecisionKind.DENY else "",
            text=decision.text if kind is DecisionKind.EXTERNAL else "",
        )
        expired: DecisionRecord | None = None
        async with self._tx(write=True) as tx:
            run = await self._load_run(tx, run_id, lock=True)
            call = run.call(call_id)
            _check_fits(run_id, call, kind)
            existing = call.decision
            if existing is not None and decision.same_as(existing):
                return existing
            if existing is not None and existing.decided_by == EXPIRY_ACTOR:
                raise CallExpired(run_id, call_id, existing)
            if run.status is not RunStatus.PENDING:
                raise RunNotPending(run_id, run.status)
            if existing is not None:
                raise DecisionConflict(run_id, call_id, existing)
            if call.deadline is not None and call.deadline <= at:
                await self._expire_calls(tx, run, at)
                expired = (await self._load_run(tx, run_id)).call(call_id).decision
            else:
                record = DecisionRecord(
                    run_id=run_id,
                    call_id=call_id,
                    kind=kind,
                    reason=decision.reason,
                    text=decision.text,
                    decided_by=decided_by,
                    decided_at=at,
                )
                await self._record_decision(tx, record)
                detail: dict[str, Any] = {"call_id": call_id, "decision": kind.value}
                if kind is DecisionKind.DENY:
                    detail["reason"] = record.reason
                if kind is DecisionKind.EXTERNAL:
                    detail["text"] = record.text
                tx.audit(run_id, at, decided_by, AuditAction.DECIDED, detail)
                await self._after_decisions(tx, run_id, at, decided_by, len(run.undecided) - 1)
                return record
        assert expired is not None  # the expiry denial was just recorded and committed
        raise CallExpired(run_id, call_id, expired)

    async def _record_decision(self, tx: _Tx, d: DecisionRecord) -> None:
        await tx.execute(
            "UPDATE golem_calls SET decision = ?, decision_reason = ?, decision_text = ?, "
            "decided_by = ?, decided_at = ? WHERE run_id = ? AND call_id = ?",
            (
                d.kind.value,
                d.reason,
                d.text,
                d.decided_by,
                self._to_db(d.decided_at),
                d.run_id,
                d.call_id,
            ),
        )

    async def _after_decisions(
        self, tx: _Tx, run_id: str, at: datetime, actor: str, undecided: int
    ) -> None:
        """Bump `updated_at`; make the run READY when no call is left `undecided`."""
        ready = undecided == 0
        status = RunStatus.READY if ready else RunStatus.PENDING
        await tx.execute(
            "UPDATE golem_runs SET status = ?, updated_at = ? WHERE id = ?",
            (status.value, self._to_db(at), run_id),
        )
        if ready:
            tx.audit(run_id, at, actor, AuditAction.READY)

    async def _expire_calls(self, tx: _Tx, run: RunRecord, at: datetime) -> bool:
        """Deny the run's overdue undecided calls "expired"; True when any was."""
        overdue = [
            c
            for c in run.calls
            if c.decision is None and c.deadline is not None and c.deadline <= at
        ]
        for c in overdue:
            await self._record_decision(
                tx,
                DecisionRecord(
                    run_id=run.id,
                    call_id=c.call_id,
                    kind=DecisionKind.DENY,
                    reason=EXPIRY_REASON,
                    text="",
                    decided_by=EXPIRY_ACTOR,
                    decided_at=at,
                ),
            )
            assert c.deadline is not None
            tx.audit(
                run.id,
                at,
                EXPIRY_ACTOR,
                AuditAction.EXPIRED,
                {"call_id": c.call_id, "deadline": c.deadline.isoformat()},
            )
        if overdue:
            left = len(run.undecided) - len(overdue)
            await self._after_decisions(tx, run.id, at, EXPIRY_ACTOR, left)
        return bool(overdue)

    async def sweep_expired(self, now: datetime | None = None) -> list[str]:
        """Deny overdue undecided calls "expired" (see `Store.sweep_expired`)."""
        at = _aware(now)
        changed: list[str] = []
        async with self._tx(write=True) as tx:
            rows = await tx.fetch(
                "SELECT id FROM golem_runs WHERE status = 'pending' AND EXISTS ("
                "SELECT 1 FROM golem_calls c WHERE c.run_id = golem_runs.id "
                "AND c.decision IS NULL AND c.deadline IS NOT NULL AND c.deadline <= ?) "
                f"ORDER BY id LIMIT {SWEEP_BATCH}" + self._skip_locked_clause,
                (self._to_db(at),),
            )
            for (run_id,) in rows:
                run = await self._load_run(tx, run_id)
                if run.status is RunStatus.PENDING and await self._expire_calls(tx, run, at):
                    changed.append(run_id)
        return changed

    async def claim_ready(
        self, worker_id: str, lease_seconds: float, *, now: datetime | None = None
    ) -> ClaimedRun | None:
        """Claim the oldest READY run (see `Store.claim_ready`)."""
        if not worker_id:
            raise ValueError("claim_ready: worker_id must not be empty")
        at = _aware(now)
        lease_until = at + _lease(lease_seconds)
        if self._peek_before_claim:
            async with self._tx(write=False) as tx:
                if not await tx.fetch("SELECT 1 FROM golem_runs WHERE status = 'ready' LIMIT 1"):
                    return None
        async with self._tx(write=True) as tx:
            rows = await tx.fetch(
                "SELECT id FROM golem_runs WHERE status = 'ready' ORDER BY updated_at, id LIMIT 1"
                + self._skip_locked_clause
            )
            if not rows:
                return None
            run_id = rows[0][0]
            changed = await tx.execute(
                "UPDATE golem_runs SET status = 'running', lease_owner = ?, lease_expires_at = ?, "
                "updated_at = ? WHERE id = ? AND status = 'ready'",
                (worker_id, self._to_db(lease_until), self._to_db(at), run_id),
            )
            if changed != 1:  # pragma: no cover - the row is locked by this transaction
                return None
            tx.audit(
                run_id,
                at,
                f"worker:{worker_id}",
                AuditAction.CLAIMED,
                {"worker_id": worker_id, "lease_expires_at": lease_until.isoformat()},
            )
            run = await self._load_run(tx, run_id)
        return ClaimedRun(run=run, worker_id=worker_id, lease_expires_at=lease_until)

    async def _held(self, tx: _Tx, run_id: str, worker_id: str, at: datetime) -> RunRecord:
        run = await self._load_run(tx, run_id, lock=True)
        if run.status is not RunStatus.RUNNING:
            raise LeaseLost(run_id, worker_id, f"the run is {run.status.value}")
        if run.lease_owner != worker_id:
            raise LeaseLost(run_id, worker_id, f'it is held by "{run.lease_owner}"')
        if run.lease_expires_at is None or run.lease_expires_at <= at:
            raise LeaseLost(run_id, worker_id, "the lease ran out")
        return run

    async def renew_lease(
        self, run_id: str, worker_id: str, lease_seconds: float, *, now: datetime | None = None
    ) -> datetime:
        """Extend a held lease (see `Store.renew_lease`)."""
        at = _aware(now)
        until = at + _lease(lease_seconds)
        async with self._tx(write=True) as tx:
            await self._held(tx, run_id, worker_id, at)
            await tx.execute(
                "UPDATE golem_runs SET lease_expires_at = ? WHERE id = ?",
                (self._to_db(until), run_id),
            )
        return until

    async def finish(
        self, run_id: str, worker_id: str, outcome: Outcome, *, now: datetime | None = None
    ) -> RunRecord:
        """Save a resume's outcome under the lease (see `Store.finish`)."""
        if outcome.status not in _ACTION or outcome.status is RunStatus.INTERRUPTED:
            raise ValueError(
                f"finish: outcome must be completed, paused or failed, got {outcome.status.value}"
            )
        at = _aware(now)
        actor = f"worker:{worker_id}"
        async with self._tx(write=True) as tx:
            run = await self._held(tx, run_id, worker_id, at)
            child: str | None = None
            if outcome.status is RunStatus.PAUSED:
                if outcome.next_run is None:
                    raise ValueError("finish: a paused outcome needs next_run")
                nxt = outcome.next_run
                child = nxt.id
                if nxt.parent_run_id != run_id:
                    nxt = _replace_parent(nxt, run_id)
                await self._insert_run(tx, nxt, RunStatus.PENDING, at, None)
            output = json.dumps(outcome.output) if outcome.status is RunStatus.COMPLETED else None
            await tx.execute(
                "UPDATE golem_runs SET status = ?, updated_at = ?, child_run_id = ?, "
                "outcome_output = ?, outcome_error = ?, outcome_history = ? WHERE id = ?",
                (
                    outcome.status.value,
                    self._to_db(at),
                    child,
                    output,
                    outcome.error or None,
                    outcome.history,
                    run.id,
                ),
            )
            tx.audit(run_id, at, actor, _ACTION[outcome.status], _outcome_detail(outcome))
        return replace(
            run,
            status=outcome.status,
            updated_at=_utc(at),
            child_run_id=child,
            outcome=Outcome(
                status=outcome.status,
                output=None if output is None else json.loads(output),
                error=outcome.error,
                history=outcome.history,
            ),
        )

    async def sweep_interrupted(self, now: datetime | None = None) -> list[str]:
        """Mark RUNNING runs with a lapsed lease INTERRUPTED (see `Store.sweep_interrupted`)."""
        at = _aware(now)
        async with self._tx(write=True) as tx:
            rows = await tx.fetch(
                "SELECT id, lease_owner, lease_expires_at FROM golem_runs WHERE status = 'running' "
                f"AND lease_expires_at <= ? ORDER BY id LIMIT {SWEEP_BATCH}"
                + self._skip_locked_clause,
                (self._to_db(at),),
            )
            for run_id, owner, lease_exp in rows:
                expired_at = self._from_db(lease_exp)
                error = (
                    f'worker "{owner}" lost its lease at {expired_at.isoformat()} while resuming; '
                    "approved calls may have run: check before re-running"
                )
                await tx.execute(
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

    def _audit_entry(self, row: tuple[Any, ...]) -> AuditEntry:
        eid, run_id, at, actor, action, detail = row
        return AuditEntry(
            id=int(eid),
            run_id=run_id,
            at=self._from_db(at),
            actor=actor,
            action=AuditAction(action),
            detail=json.loads(detail),
        )

    async def audit(self, run_id: str) -> list[AuditEntry]:
        """Return the run's audit entries in order (see `Store.audit`)."""
        async with self._tx(write=False) as tx:
            if not await tx.fetch("SELECT 1 FROM golem_runs WHERE id = ?", (run_id,)):
                raise RunNotFound(run_id)
            rows = await tx.fetch(
                f"SELECT {_AUDIT_COLS} FROM golem_audit WHERE run_id = ? ORDER BY id", (run_id,)
            )
        return [self._audit_entry(r) for r in rows]

    async def changes_since(self, cursor: int = 0, limit: int = 100) -> list[AuditEntry]:
        """Return audit entries after `cursor` (see `Store.changes_since`)."""
        if limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        async with self._tx(write=False) as tx:
            rows = await tx.fetch(
                f"SELECT {_AUDIT_COLS} FROM golem_audit WHERE id > ? ORDER BY id LIMIT ?",
                (cursor, limit),
            )
        return [self._audit_entry(r) for r in rows]

    async def last_change_id(self) -> int:
        """Return the newest audit entry's ID, 0 when none (see `Store.last_change_id`)."""
        async with self._tx(write=False) as tx:
            rows = await tx.fetch("SELECT last_id FROM golem_audit_seq WHERE singleton = 1")
        return int(rows[0][0])


class _TxScope:
    """`async with store._tx(write=...) as tx`: a backend transaction plus audit flush."""

    def __init__(self, store: SQLStore, write: bool) -> None:
        self._store = store
        self._write = write
        self._cm: AbstractAsyncContextManager[Conn] | None = None
        self._tx: _Tx | None = None

    async def __aenter__(self) -> _Tx:
        self._cm = self._store._transaction(write=self._write)
        conn = await self._cm.__aenter__()
        self._tx = _Tx(conn)
        return self._tx

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._cm is not None
        assert self._tx is not None
        if exc is None:
            try:
                await self._store._flush_audit(self._tx)
            except BaseException as flush_exc:
                await self._cm.__aexit__(type(flush_exc), flush_exc, flush_exc.__traceback__)
                raise
        return await self._cm.__aexit__(exc_type, exc, tb)


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


def _replace_parent(run: NewRun, parent: str) -> NewRun:
    return replace(run, parent_run_id=parent)


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
