"""Operator recovery of interrupted runs: retry or cancel."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from golem._tracing import store_op
from golem.durable.store._base import SQLBase
from golem.durable.store._inputs import aware, held, text_arg
from golem.durable.store._rows import ROW_FAULTS, stored_status
from golem.durable.store._tx import Tx
from golem.durable.store.records import (
    AuditAction,
    CallNotFound,
    CorruptRecord,
    DecisionKind,
    InvalidDecision,
    PendingCallRecord,
    RunNotFound,
    RunNotInterrupted,
    RunRecord,
    RunStatus,
)

__all__ = ["RecoveryOps"]


class RecoveryOps(SQLBase):
    """Operator recovery of interrupted runs: retry or cancel."""

    def _lock_interrupted(self, tx: Tx, run_id: str) -> tuple[list[PendingCallRecord], int]:
        """Lock an INTERRUPTED run; return its calls and attempt number."""
        rows = tx.fetch(
            "SELECT status, attempt FROM golem_runs WHERE id = ?" + self._lock_clause, (run_id,)
        )
        if not rows:
            raise RunNotFound(run_id)
        if rows[0][0] != RunStatus.INTERRUPTED.value:
            raise RunNotInterrupted(run_id, stored_status(rows[0][0], run_id))
        try:
            attempt = int(rows[0][1])
        except ROW_FAULTS as exc:
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
        if not held("run_id", run_id):
            raise RunNotFound(run_id)
        if not resolved_by:
            raise ValueError("retry_interrupted: resolved_by must name the operator")
        at_given = aware(now)
        confirm = list(dict.fromkeys(text_arg("confirm_calls", c) for c in confirm_calls))

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
            detail = {"resolution": "retry", "note": note, "attempt": attempt + 1}
            tx.audit(
                run_id, at, resolved_by, AuditAction.RESOLVED, {**detail, "confirmed": confirm}
            )
            tx.audit(run_id, at, resolved_by, AuditAction.READY)
            return self._load_run(tx, run_id)

        return await self._submit(True, tx_fn)

    @store_op("cancel_interrupted")
    async def cancel_interrupted(
        self, run_id: str, *, resolved_by: str, note: str, now: datetime | None = None
    ) -> RunRecord:
        """Close an interrupted run as FAILED (see `Store.cancel_interrupted`)."""
        if not held("run_id", run_id):
            raise RunNotFound(run_id)
        if not resolved_by:
            raise ValueError("cancel_interrupted: resolved_by must name the operator")
        at_given = aware(now)

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
            detail = {"resolution": "cancel", "note": note}
            tx.audit(run_id, at, resolved_by, AuditAction.RESOLVED, detail)
            tx.audit(run_id, at, resolved_by, AuditAction.FAILED, {"error": error})
            return self._load_run(tx, run_id)

        return await self._submit(True, tx_fn)
