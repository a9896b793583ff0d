"""Claims, leases, finishing a resume, the interrupted sweep and an operator's recovery."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, TypeVar

from golem._tracing import store_op
from golem.durable.store._base import (
    HELD,
    OUTCOME_ACTION,
    ROW_FAULTS,
    RUN_COLS,
    SWEEP_BATCH,
    Later,
    NotHeld,
    SQLBase,
    Tx,
    aware,
    clip,
    held,
    in_the_row,
    lease_delta,
    left_out,
    outcome_detail,
    storable,
    stored_status,
    text_arg,
    texts,
)
from golem.durable.store.records import (
    AuditAction,
    CallNotFound,
    ClaimedRun,
    CorruptRecord,
    DecisionKind,
    InvalidDecision,
    LeaseLost,
    NewRun,
    Outcome,
    PendingCallRecord,
    RunNotFound,
    RunNotInterrupted,
    RunRecord,
    RunStatus,
)
from golem.errors import StoreError

__all__ = ["LeaseOps"]

_T = TypeVar("_T")


log = logging.getLogger("golem.durable.store")


class LeaseOps(SQLBase):
    """Claims, leases, finishing a resume, the interrupted sweep, an operator's retry or cancel."""

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
        """One transaction: mark up to `limit` ready runs RUNNING and audit each claim."""
        if not text_arg("worker_id", worker_id) or not storable(worker_id):
            raise ValueError(f"{op}: worker_id must be a non-empty text, got {worker_id!r:.80}")
        at_given = aware(now)
        lease = lease_delta(lease_seconds)
        only = ""
        agent_params: list[str] = []
        if agents is not None:
            agent_params = texts("agents", [agents] if isinstance(agents, str) else agents)
            if not agent_params:
                return []
            only = f" AND agent IN ({', '.join('?' for _ in agent_params)})"
        sql = (
            "WITH picked AS MATERIALIZED (SELECT id FROM golem_runs WHERE status = 'ready'"
            f"{only} ORDER BY updated_at, id LIMIT ?{self._skip_locked_clause}) "
            "UPDATE golem_runs SET status = 'running', lease_owner = ?, lease_expires_at = ?, "
            "updated_at = ? WHERE id IN (SELECT id FROM picked) AND status = 'ready' "
            f"RETURNING {RUN_COLS}"
        )

        def tx_fn(tx: Tx) -> tuple[Later, Later | None, datetime]:
            at = at_given or self.clock()
            lease_until = at + lease
            rows = tx.later(
                sql, (*agent_params, limit, worker_id, self._to_db(lease_until), self._to_db(at))
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
                if in_the_row(exc, row[4]):
                    unreadable.append(exc)
                else:  # this reader's limits, not the row: the lease runs out as before
                    left_out(exc)
                continue
            claimed.append(ClaimedRun(run=run, worker_id=worker_id, lease_expires_at=lease_until))
        if unreadable:
            await self._set_aside(worker_id, unreadable, at_given)
        return claimed

    async def _set_aside(
        self, worker_id: str, unreadable: list[CorruptRecord], at_given: datetime | None
    ) -> None:
        """Mark claimed runs that cannot be read INTERRUPTED (ADR 0072); failures are logged."""

        def tx_fn(tx: Tx) -> list[CorruptRecord]:
            at = at_given or self.clock()
            done = []
            for exc in unreadable:
                problem = clip(exc.problem)
                error = (
                    f'its stored record cannot be read ({problem}); worker "{worker_id}" '
                    "claimed it and resumed nothing, so no call ran: repair the row, then "
                    "retry or cancel the run"
                )
                changed = tx.execute(
                    "UPDATE golem_runs SET status = 'interrupted', updated_at = ?, "
                    f"outcome_error = ? {HELD}",
                    (self._to_db(at), error, exc.run_id, worker_id, self._to_db(at)),
                )
                if changed:
                    detail = {"worker_id": worker_id, "unreadable": problem}
                    tx.audit(exc.run_id, at, f"worker:{worker_id}", AuditAction.INTERRUPTED, detail)
                    done.append(exc)
            return done

        try:
            done = await self._submit(True, tx_fn)
        except StoreError as exc:
            log.error("claimed runs that cannot be read could not be set aside: %s", exc)
            for bad in unreadable:
                left_out(bad)
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
                left_out(bad)

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
            "SELECT status, lease_owner, lease_expires_at FROM golem_runs WHERE id = ?", (run_id,)
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

    @store_op("renew_lease")
    async def renew_lease(
        self, run_id: str, worker_id: str, lease_seconds: float, *, now: datetime | None = None
    ) -> datetime:
        """Extend a held lease (see `Store.renew_lease`)."""
        at_given = aware(now)
        lease = lease_delta(lease_seconds)
        await self._lease_ids(run_id, worker_id, at_given)

        def renew(tx: Tx, at: datetime) -> datetime:
            until = at + lease
            changed = tx.later(
                f"UPDATE golem_runs SET lease_expires_at = ? {HELD} RETURNING id",
                (self._to_db(until), run_id, worker_id, self._to_db(at)),
            )
            tx.require_run_changed(changed, run_id, NotHeld())
            return until

        return await self._under_lease(run_id, worker_id, at_given, renew)

    async def _under_lease(
        self, run_id: str, worker_id: str, at: datetime | None, fn: Callable[[Tx, datetime], _T]
    ) -> _T:
        """One write transaction `fn(tx, at)` whose guarded update needs the lease held; when
        it was not, the `LeaseLost` (or `RunNotFound`) saying why is raised."""
        tried: list[datetime] = []

        def tx_fn(tx: Tx) -> _T:
            tried.append(at or self.clock())
            return fn(tx, tried[-1])

        try:
            return await self._submit(True, tx_fn)
        except NotHeld:
            raise await self._why_not_held(run_id, worker_id, tried[-1]) from None

    async def _lease_ids(self, run_id: str, worker_id: str, at_given: datetime | None) -> None:
        """Refuse IDs no row can hold: `RunNotFound`, or the `LeaseLost` of a worker ID no
        claim could have recorded (`TypeError` for a value that is not a `str`)."""
        if not held("run_id", run_id):
            raise RunNotFound(run_id)
        if not held("worker_id", worker_id):
            raise await self._why_not_held(run_id, worker_id, at_given or self.clock())

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
        if outcome.status not in OUTCOME_ACTION or outcome.status is RunStatus.INTERRUPTED:
            raise ValueError(
                f"finish: outcome must be completed, paused or failed, got {outcome.status.value}"
            )
        at_given = aware(now)
        await self._lease_ids(run_id, worker_id, at_given)
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
        err = outcome.error or None
        refused = [
            (text_arg("refused call_id", c), text_arg("refused reason", r))
            for c, r in outcome.refused.items()
        ]

        def save(tx: Tx, at: datetime) -> tuple[Later, Later]:
            when, child = self._to_db(at), None if nxt is None else nxt.id
            rows = tx.later(
                "UPDATE golem_runs SET status = ?, updated_at = ?, child_run_id = ?, "
                f"outcome_output = ?, outcome_error = ? {HELD} RETURNING {RUN_COLS}",
                (outcome.status.value, when, child, output, err, run_id, worker_id, when),
            )
            tx.require_run_changed(rows, run_id, NotHeld())  # before anything else counts
            if refused:
                self._record_refusals(tx, run_id, refused, at, actor)
            if nxt is not None:
                assert checked is not None
                self._insert_run(tx, nxt, RunStatus.PENDING, at, None, checked)
            tx.run(
                "UPDATE golem_histories SET outcome_history = ? WHERE run_id = ?",
                (outcome.history, run_id),
            )
            later = self._histories_and_calls(tx, [run_id])
            tx.audit(run_id, at, actor, OUTCOME_ACTION[outcome.status], outcome_detail(outcome))
            return rows, later

        rows, later = await self._under_lease(run_id, worker_id, at_given, save)
        found = self._split_many(later).get(run_id)  # arrived with the commit
        if found is None:
            raise RunNotFound(run_id)
        history, calls = found
        return self._run_record(rows.rows[0], calls, history, outcome.history)

    def _record_refusals(
        self, tx: Tx, run_id: str, refused: list[tuple[str, str]], at: datetime, actor: str
    ) -> None:
        """Turn the approved calls a resume did not execute into denials by `actor`, each
        audited `decided` with the approval it overrode (other call IDs are left alone)."""
        approved = dict(
            tx.fetch(
                "SELECT call_id, decided_by FROM golem_calls "
                "WHERE run_id = ? AND decision = 'approve'",
                (run_id,),
            )
        )
        for call_id, reason in refused:
            if call_id not in approved:
                continue
            tx.run(
                "UPDATE golem_calls SET decision = 'deny', decision_reason = ?, decided_by = ?, "
                "decided_at = ?, decision_args = NULL WHERE run_id = ? AND call_id = ?",
                (reason, actor, self._to_db(at), run_id, call_id),
            )
            detail = {"call_id": call_id, "decision": "deny", "reason": reason}
            detail["approved_by"] = approved[call_id]
            tx.audit(run_id, at, actor, AuditAction.DECIDED, detail)

    @store_op("sweep_interrupted")
    async def sweep_interrupted(self, now: datetime | None = None) -> list[str]:
        """Mark RUNNING runs with a lapsed lease INTERRUPTED (see `Store.sweep_interrupted`)."""
        at_given = aware(now)

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
                detail = {"worker_id": owner, "lease_expires_at": expired_at.isoformat()}
                tx.audit(run_id, at, "system:sweep", AuditAction.INTERRUPTED, detail)
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
