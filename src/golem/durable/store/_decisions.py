"""Decisions on pending calls and the expiry sweep."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from golem._tracing import store_op
from golem.durable.store._base import SWEEP_BATCH, SQLBase, Tx, aware, held, left_out
from golem.durable.store.records import (
    EXPIRY_ACTOR,
    EXPIRY_REASON,
    AuditAction,
    CallExpired,
    CallKind,
    CallNotFound,
    CorruptRecord,
    Decision,
    DecisionConflict,
    DecisionKind,
    DecisionRecord,
    InvalidDecision,
    PendingCallRecord,
    RunNotFound,
    RunNotPending,
    RunStatus,
)

__all__ = ["FITS", "DecisionOps", "decided_detail"]


class DecisionOps(SQLBase):
    """Decisions on pending calls and the expiry sweep."""

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
        if not held("run_id", run_id):
            raise RunNotFound(run_id)
        if not held("call_id", call_id):
            await self._submit(False, self._load_run, run_id)  # RunNotFound first, as ever
            raise CallNotFound(run_id, call_id)
        if not decided_by:
            raise ValueError("decide: decided_by must name who decided")
        at_given = aware(now)
        kind = DecisionKind(decision.kind)
        decision = Decision(  # only the fields that belong to the kind count
            kind,
            reason=decision.reason if kind is DecisionKind.DENY else "",
            text=decision.text if kind is DecisionKind.EXTERNAL else "",
            args=decision.args if kind is DecisionKind.APPROVE else None,
        )

        def decided_at(at: datetime) -> DecisionRecord:
            d = decision
            return DecisionRecord(run_id, call_id, kind, d.reason, d.text, decided_by, at, d.args)

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
            detail = decided_detail(record, call.args)
            tx.audit(run_id, at, decided_by, AuditAction.DECIDED, detail)
            undecided = sum(c.decision is None for c in calls) - 1
            self._after_decisions(tx, run_id, at, decided_by, undecided)
            return record, False

        record, expired = await self._submit(True, tx_fn)
        if expired:  # the expiry denial was recorded and committed
            raise CallExpired(run_id, call_id, record)
        return record

    async def _decide_plain(self, record: Callable[[], DecisionRecord]) -> DecisionRecord | None:
        """Record a plain decision without reading first (PostgreSQL, ADR 0038); None when the
        case is not plain or the backend has no such path."""
        return None

    def _record_decision(self, tx: Tx, d: DecisionRecord) -> None:
        at = self._to_db(d.decided_at)
        tx.run(
            "UPDATE golem_calls SET decision = ?, decision_reason = ?, decision_text = ?, "
            "decided_by = ?, decided_at = ?, decision_args = ? WHERE run_id = ? AND call_id = ?",
            (d.kind.value, d.reason, d.text, d.decided_by, at, d.args, d.run_id, d.call_id),
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
                deny = DecisionKind.DENY
                d = DecisionRecord(run_id, c.call_id, deny, EXPIRY_REASON, "", EXPIRY_ACTOR, at)
                self._record_decision(tx, d)
                denials[c.call_id] = d
                detail = {"call_id": c.call_id, "deadline": c.deadline.isoformat()}
                tx.audit(run_id, at, EXPIRY_ACTOR, AuditAction.EXPIRED, detail)
        if denials:
            left = sum(c.decision is None for c in calls) - len(denials)
            self._after_decisions(tx, run_id, at, EXPIRY_ACTOR, left)
        return denials

    @store_op("sweep_expired")
    async def sweep_expired(self, now: datetime | None = None) -> list[str]:
        """Deny overdue undecided calls "expired" (see `Store.sweep_expired`)."""
        at_given = aware(now)

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
                    left_out(corrupt[run_id])
                    continue
                if self._expire_calls(tx, run_id, calls[run_id], at):
                    changed.append(run_id)
            return changed

        return await self._submit(True, tx_fn)


FITS: dict[DecisionKind, tuple[str, ...]] = {
    DecisionKind.APPROVE: (CallKind.APPROVAL.value,),
    DecisionKind.DENY: (CallKind.APPROVAL.value, CallKind.EXTERNAL.value),
    DecisionKind.EXTERNAL: (CallKind.EXTERNAL.value,),
}


def decided_detail(record: DecisionRecord, original_args: str | None) -> dict[str, Any]:
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


_MISFIT = {
    DecisionKind.APPROVE: "waits for an external result: submit its result text or deny it, "
    "approval does not apply",
    DecisionKind.EXTERNAL: "waits for approval: approve or deny it, an external result does "
    "not apply",
}


def _check_fits(run_id: str, call: PendingCallRecord, kind: DecisionKind) -> None:
    if call.kind.value not in FITS[kind]:
        raise InvalidDecision(f'call "{call.call_id}" of run "{run_id}" {_MISFIT[kind]}')
