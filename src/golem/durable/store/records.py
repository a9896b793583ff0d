"""The records, enums and errors of the durable store (all importable from `golem.durable.store`).

Every error subclasses `golem.errors.StoreError`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Generic, TypeVar

from golem.deferred import DeferredRequests, PausedRun, PendingToolCall
from golem.errors import StoreError
from golem.messages import loads_history
from golem.tool import DeferKind

__all__ = [
    "EXPIRY_ACTOR",
    "EXPIRY_REASON",
    "MAX_RUN_ID",
    "MAX_SECONDS",
    "AuditAction",
    "AuditEntry",
    "AuditPage",
    "CallExpired",
    "CallKind",
    "CallNotFound",
    "ClaimedRun",
    "CorruptRecord",
    "Decision",
    "DecisionConflict",
    "DecisionKind",
    "DecisionRecord",
    "InvalidCursor",
    "InvalidDecision",
    "InvalidRunId",
    "LeaseLost",
    "NewCall",
    "NewRun",
    "Outcome",
    "Page",
    "PendingCallRecord",
    "RunNotFound",
    "RunNotInterrupted",
    "RunNotPending",
    "RunRecord",
    "RunStatus",
    "StoreBusy",
    "StoreReadOnly",
    "StoreTimeout",
]

EXPIRY_REASON = "expired"
EXPIRY_ACTOR = "system:expiry"


class RunStatus(StrEnum):
    """The state of a stored run (values are the strings stored in the database)."""

    PENDING = "pending"
    READY = "ready"
    RUNNING = "running"
    COMPLETED = "completed"
    PAUSED = "paused"
    FAILED = "failed"
    INTERRUPTED = "interrupted"

    @property
    def terminal(self) -> bool:
        """True for states no store operation leaves."""
        return self in _TERMINAL


_TERMINAL = frozenset(
    {RunStatus.COMPLETED, RunStatus.PAUSED, RunStatus.FAILED, RunStatus.INTERRUPTED}
)


class CallKind(StrEnum):
    """How a pending call waits: for a human decision or for an external result."""

    APPROVAL = "approval"
    EXTERNAL = "external"


class DecisionKind(StrEnum):
    """What was decided on one pending call."""

    APPROVE = "approve"
    DENY = "deny"
    EXTERNAL = "external"


class AuditAction(StrEnum):
    """The kind of state change an `AuditEntry` records."""

    CREATED = "created"
    DECIDED = "decided"
    EXPIRED = "expired"
    READY = "ready"
    CLAIMED = "claimed"
    COMPLETED = "completed"
    PAUSED = "paused"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    RESOLVED = "resolved"


class RunNotFound(StoreError, LookupError):
    """No run with the given ID exists (`run_id`)."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f'run "{run_id}" not found')
        self.run_id = run_id


class CorruptRecord(StoreError):
    """A stored row of run `run_id` holds a value no golem wrote; listings leave it out and a
    claim marks the run INTERRUPTED (ADR 0072)."""

    def __init__(self, run_id: str, problem: str) -> None:
        super().__init__(f'run "{run_id}": a stored record cannot be read: {problem}')
        self.run_id = run_id
        self.problem = problem


class CallNotFound(StoreError, LookupError):
    """The run exists but has no pending call with the given ID (`run_id`, `call_id`)."""

    def __init__(self, run_id: str, call_id: str) -> None:
        super().__init__(f'run "{run_id}" has no pending call "{call_id}"')
        self.run_id = run_id
        self.call_id = call_id


class RunNotPending(StoreError):
    """A decision was made on a run that no longer waits for decisions (`status` tells why)."""

    def __init__(self, run_id: str, status: RunStatus) -> None:
        super().__init__(
            f'run "{run_id}" is {status.value}, not pending: its calls can no longer be decided'
        )
        self.run_id = run_id
        self.status = status


class DecisionConflict(StoreError):
    """A call already has a different decision (`existing`); the new one was not recorded."""

    def __init__(
        self, run_id: str, call_id: str, existing: DecisionRecord, message: str = ""
    ) -> None:
        super().__init__(
            message
            or (
                f'call "{call_id}" of run "{run_id}" is already decided '
                f"({existing.kind.value} by {existing.decided_by}); a different decision is rejected"
            )
        )
        self.run_id = run_id
        self.call_id = call_id
        self.existing = existing


class CallExpired(DecisionConflict):
    """The call's deadline has passed; `existing` is its expiry denial, recorded with the refusal."""

    def __init__(self, run_id: str, call_id: str, existing: DecisionRecord) -> None:
        super().__init__(
            run_id,
            call_id,
            existing,
            f'call "{call_id}" of run "{run_id}" expired at '
            f"{existing.decided_at.isoformat()}; it was denied with reason "
            f'"{EXPIRY_REASON}"',
        )


class InvalidDecision(StoreError, ValueError):
    """The decision does not fit the call: approve on an external call, external on an approval call."""


class InvalidCursor(StoreError, ValueError):
    """A page cursor (`after=`) that no store of this kind returned as `next_cursor`."""

    def __init__(self, cursor: str) -> None:
        super().__init__(
            f"invalid page cursor {cursor[:80]!r}: pass a next_cursor this store returned"
        )
        self.cursor = cursor


class InvalidRunId(StoreError, ValueError):
    """A new run's ID is not 1 to `MAX_RUN_ID` characters of Unicode without NUL, `.` or `..`."""

    def __init__(self, run_id: str, problem: str) -> None:
        super().__init__(f"run ID {run_id[:80]!r} {problem}")
        self.run_id = run_id
        self.problem = problem


MAX_RUN_ID = 200


MAX_SECONDS = 10 * 366 * 24 * 3600.0


def check_seconds(name: str, value: float, *, zero: bool = False) -> float:
    """`value` as float seconds, finite, above 0 (or 0, given `zero`), at most `MAX_SECONDS`;
    else `ValueError`."""
    low = "0 or more" if zero else "above 0"
    problem = f"{name} must be a number of seconds {low} and at most {MAX_SECONDS:.0f}"
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{problem}, got {value!r}")
    seconds = float(value) if abs(value) <= MAX_SECONDS else math.inf  # no float of 10**400
    if not math.isfinite(seconds) or not (seconds >= 0 if zero else seconds > 0):
        raise ValueError(f"{problem}, got {value!r}")
    return seconds


def check_run_id(run_id: str) -> None:
    """Raise `InvalidRunId` for a run ID no store can keep or no URL can name."""
    if not isinstance(run_id, str) or not run_id:
        raise InvalidRunId(str(run_id), "is empty: a run needs a non-empty id")
    if len(run_id) > MAX_RUN_ID:
        raise InvalidRunId(run_id, f"is longer than {MAX_RUN_ID} characters")
    if run_id in (".", ".."):
        raise InvalidRunId(run_id, "is a dot segment, which no URL can name")
    if "\x00" in run_id:
        raise InvalidRunId(run_id, "contains a NUL character")
    try:
        run_id.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidRunId(run_id, "contains a lone surrogate (not valid Unicode)") from None


class LeaseLost(StoreError):
    """The worker does not hold the run's lease any more (it expired, or the run is not running)."""

    def __init__(self, run_id: str, worker_id: str, detail: str = "") -> None:
        super().__init__(
            f'worker "{worker_id}" does not hold the lease on run "{run_id}"'
            + (f": {detail}" if detail else "")
        )
        self.run_id = run_id
        self.worker_id = worker_id


class StoreTimeout(StoreError, TimeoutError):
    """No answer within `command_timeout`; the connection was closed (`commit_sent`: the
    transaction may have committed)."""

    def __init__(self, timeout: float, *, commit_sent: bool) -> None:
        self.timeout = timeout
        self.commit_sent = commit_sent
        super().__init__(
            f"postgresql: no answer from the server within {timeout:g}s (command_timeout); "
            "the connection was closed"
            + (
                "; its COMMIT had been sent, so the transaction may have committed"
                if commit_sent
                else ""
            )
        )


class StoreBusy(StoreError):
    """The database has no free connection slot for a new connection; nothing was done."""


class StoreReadOnly(StoreError):
    """The database refused a write (read-only just now, or a hot standby); nothing was written."""


class RunNotInterrupted(StoreError):
    """An operator tried to retry or cancel a run that is not INTERRUPTED."""

    def __init__(self, run_id: str, status: RunStatus) -> None:
        self.run_id = run_id
        self.status = status
        super().__init__(
            f'run "{run_id}" is {status.value}: only an interrupted run can be retried or cancelled'
        )


@dataclass(frozen=True, slots=True)
class NewCall:
    """A pending call to save with a new run: `args` byte-exact JSON text; `deadline` None
    means the run's `expires_at`; `seal` when the agent seals its calls."""

    call_id: str
    kind: CallKind
    tool_name: str
    args: str = "{}"
    reason: str = ""
    deadline: datetime | None = None
    seal: str | None = None


@dataclass(frozen=True, slots=True)
class NewRun:
    """A run to save (`save_pending` / `save_finished`): `history` is `dumps_history` text,
    `calls` in emission order, `trace_context` the paused span's `traceparent` ("": none)."""

    id: str
    agent: str
    conversation_id: str
    history: str
    calls: tuple[NewCall, ...] = ()
    deps_ref: Any = None
    started_by: str = ""
    expires_at: datetime | None = None
    parent_run_id: str | None = None
    trace_context: str = ""


@dataclass(frozen=True, slots=True)
class Decision:
    """A decision on one pending call (build it with the class methods); `args`: edited
    arguments of an approval, as JSON object text."""

    kind: DecisionKind
    reason: str = ""
    text: str = ""
    args: str | None = None

    def __post_init__(self) -> None:
        if self.args is None:
            return
        if self.kind is not DecisionKind.APPROVE:
            raise InvalidDecision("edited arguments belong to an approval only")
        object.__setattr__(self, "args", _json_object_text(self.args))

    @classmethod
    def approve(cls, args: str | dict[str, Any] | None = None) -> Decision:
        """Approve the call, optionally with edited `args` (`InvalidDecision`: not a JSON object)."""
        return cls(DecisionKind.APPROVE, args=None if args is None else _json_object_text(args))

    @classmethod
    def deny(cls, reason: str = "") -> Decision:
        """Deny the call, optionally with a reason the model will see."""
        return cls(DecisionKind.DENY, reason=reason)

    @classmethod
    def external(cls, text: str) -> Decision:
        """Supply the call's result text."""
        return cls(DecisionKind.EXTERNAL, text=text)

    def same_as(self, other: Decision | DecisionRecord) -> bool:
        """True when `other` decides the same thing (kind, reason, text and args all equal)."""
        return (self.kind, self.reason, self.text, self.args) == (
            other.kind,
            other.reason,
            other.text,
            other.args,
        )


def _json_object_text(args: str | dict[str, Any]) -> str:
    """Edited arguments as strict, compact JSON object text (no NaN, no lone surrogate)."""
    if isinstance(args, dict):
        try:
            text = json.dumps(args, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError, RecursionError) as exc:
            raise InvalidDecision(f"edited arguments are not JSON-serializable: {exc}") from None
    elif isinstance(args, str):
        text = args
        try:
            value = json.loads(text, parse_constant=_not_json)
        except ValueError as exc:
            raise InvalidDecision(f"edited arguments are not valid JSON: {exc}") from None
        except RecursionError:
            raise InvalidDecision(
                "edited arguments are not valid JSON: nested too deeply"
            ) from None
        if not isinstance(value, dict):
            raise InvalidDecision("edited arguments must be a JSON object")
    else:
        raise InvalidDecision(
            f"edited arguments must be a dict or JSON object text, got {type(args).__name__}"
        )
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidDecision(
                "edited arguments hold a lone surrogate, which is not valid Unicode text"
            ) from None
    return text


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a run ended (`Outcome.completed`, `.paused`, `.failed`): `next_run` the new pending
    run of a pause (None when read back); `refused` the approved calls a retry did not run,
    each with its reason, which `finish` records as denials."""

    status: RunStatus
    output: Any = None
    error: str = ""
    history: str | None = None
    next_run: NewRun | None = None
    refused: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def completed(cls, output: Any, history: str | None = None) -> Outcome:
        """A final answer (`output` must be JSON-serializable) and the final conversation."""
        json.dumps(output)
        return cls(RunStatus.COMPLETED, output=output, history=history)

    @classmethod
    def paused(cls, next_run: NewRun) -> Outcome:
        """The resume paused again; `next_run` is saved as a new pending run."""
        if not next_run.calls:
            raise ValueError(f'paused outcome: run "{next_run.id}" has no pending calls')
        return cls(RunStatus.PAUSED, history=next_run.history, next_run=next_run)

    @classmethod
    def failed(cls, error: str, history: str | None = None) -> Outcome:
        """The run failed with `error`; `history` is the partial evidence when known."""
        return cls(RunStatus.FAILED, error=error, history=history)


@dataclass(frozen=True, slots=True)
class DecisionRecord:
    """A decision recorded on one pending call."""

    run_id: str
    call_id: str
    kind: DecisionKind
    reason: str
    text: str
    decided_by: str
    decided_at: datetime
    args: str | None = None


@dataclass(frozen=True, slots=True)
class PendingCallRecord:
    """A saved pending call (`position`: 0-based emission order) and its decision, if any."""

    run_id: str
    call_id: str
    position: int
    kind: CallKind
    tool_name: str
    args: str
    reason: str
    deadline: datetime | None
    decision: DecisionRecord | None
    rerun_confirmed_by: str | None = None
    seal: str | None = None

    @property
    def decided(self) -> bool:
        """True once a decision is recorded."""
        return self.decision is not None


@dataclass(frozen=True, slots=True)
class RunRecord:
    """A stored run with its pending calls and outcome (`attempt` grows with each retry)."""

    id: str
    agent: str
    conversation_id: str
    status: RunStatus
    history: str
    calls: tuple[PendingCallRecord, ...]
    deps_ref: Any
    started_by: str
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None
    parent_run_id: str | None
    child_run_id: str | None
    lease_owner: str | None
    lease_expires_at: datetime | None
    outcome: Outcome | None
    attempt: int = 1
    trace_context: str = ""

    @property
    def conversation(self) -> str:
        """The latest conversation JSON: the outcome's history when there is one, else `history`."""
        if self.outcome is not None and self.outcome.history is not None:
            return self.outcome.history
        return self.history

    @property
    def undecided(self) -> tuple[PendingCallRecord, ...]:
        """The pending calls that still wait for a decision."""
        return tuple(c for c in self.calls if c.decision is None)

    def call(self, call_id: str) -> PendingCallRecord:
        """Return the pending call with `call_id`; raises `CallNotFound`."""
        for c in self.calls:
            if c.call_id == call_id:
                return c
        raise CallNotFound(self.id, call_id)

    def paused_run(self) -> PausedRun:
        """The run as the `PausedRun` a resume takes: its history, its calls as the pending
        ones, its conversation, ID and trace context (`HistoryError`: the history does not load)."""
        groups: dict[CallKind, list[PendingToolCall]] = {k: [] for k in CallKind}
        for c in self.calls:
            kind = DeferKind(c.kind.value)
            groups[c.kind].append(
                PendingToolCall(c.call_id, c.tool_name, c.args, c.reason, kind, c.seal or "")
            )
        pending = DeferredRequests(
            groups[CallKind.APPROVAL], groups[CallKind.EXTERNAL], self.conversation_id
        )
        messages = loads_history(self.history)
        return PausedRun(messages, pending, self.conversation_id, self.id, self.trace_context)


@dataclass(frozen=True, slots=True)
class ClaimedRun:
    """A run claimed by a worker: resume it, then `finish` before `lease_expires_at`."""

    run: RunRecord
    worker_id: str
    lease_expires_at: datetime


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One appended state change; IDs increase in commit order. `agent`, `run_status` and
    `parent_run_id` are the run's when a listing reads them along."""

    id: int
    run_id: str
    at: datetime
    actor: str
    action: AuditAction
    detail: dict[str, Any] = field(default_factory=dict)
    agent: str | None = field(default=None, compare=False)
    run_status: RunStatus | None = field(default=None, compare=False)
    parent_run_id: str | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class AuditPage:
    """One page of the audit log, newest first; `next_before` None when nothing older is left."""

    entries: list[AuditEntry]
    next_before: int | None


_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Page(Generic[_T]):
    """One page of a keyset-paged listing; pass `next_cursor` as `after=` (None: the last)."""

    items: list[_T]
    next_cursor: str | None
