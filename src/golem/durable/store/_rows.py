"""The stored rows' columns and what reading them needs: JSON, statuses, row faults.

Shared by the store's transaction modules; the records themselves are built in `_base`.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import msgspec

from golem.durable.store.records import (
    AuditAction,
    CallKind,
    CorruptRecord,
    DecisionKind,
    Outcome,
    RunStatus,
)
from golem.messages import deep_spans

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
