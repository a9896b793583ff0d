"""The records, enums and errors of the durable store (all importable from `golem.durable.store`).

Inputs a caller builds (`NewRun`, `NewCall`, `Decision`, `Outcome`), records the store returns
(`RunRecord`, `PendingCallRecord`, `DecisionRecord`, `ClaimedRun`, `AuditEntry`), the enums
whose values are the strings stored in the database (`RunStatus`, `CallKind`, `DecisionKind`,
`AuditAction`) and the store's errors. The `Store` protocol and `open_store` are in
`golem.durable.store`.

Errors (all subclass `golem.errors.StoreError`):

```text
StoreError
├── RunNotFound          no run with that ID
├── CallNotFound         the run has no pending call with that ID
├── RunNotPending        a decision on a run that is no longer pending (ready, running, …)
├── DecisionConflict     a different decision on an already decided call
│   └── CallExpired      a decision on a call whose deadline has passed
├── InvalidDecision      the decision does not fit the call (approve on an external call, …)
├── LeaseLost            finish/renew by a worker that no longer holds the run's lease
├── RunNotInterrupted    retry/cancel of a run that is not interrupted
├── StoreBusy            the database has no free connection slot for a new connection
├── StoreReadOnly        the database refused a write: it is read-only just now
└── StoreTimeout         the database did not answer within the store's command timeout
```
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Generic, TypeVar

from golem.errors import StoreError

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
"""The denial reason `sweep_expired` records for a call past its deadline."""
EXPIRY_ACTOR = "system:expiry"
"""The `decided_by` identity of expiry denials."""


# --------------------------------------------------------------------------- enums


class RunStatus(StrEnum):
    """The state of a stored run (values are the strings stored in the database)."""

    PENDING = "pending"
    """Waiting for decisions on its pending calls."""
    READY = "ready"
    """Every pending call is decided; waiting for a worker."""
    RUNNING = "running"
    """Claimed by a worker under a lease and being resumed."""
    COMPLETED = "completed"
    """Finished with a final answer (`RunRecord.outcome.output`)."""
    PAUSED = "paused"
    """The resume paused again; the new pause is a new pending run (`child_run_id`)."""
    FAILED = "failed"
    """The run or its resume failed (`RunRecord.outcome.error`)."""
    INTERRUPTED = "interrupted"
    """A worker's lease ran out while running; never resumed automatically again."""

    @property
    def terminal(self) -> bool:
        """True for states no store operation leaves (completed, paused, failed, interrupted)."""
        return self in _TERMINAL


_TERMINAL = frozenset(
    {RunStatus.COMPLETED, RunStatus.PAUSED, RunStatus.FAILED, RunStatus.INTERRUPTED}
)


class CallKind(StrEnum):
    """How a pending call waits: for a human decision or for an external result."""

    APPROVAL = "approval"
    """The call waits for approve / deny (the tool deferred with `DeferKind.APPROVAL`)."""
    EXTERNAL = "external"
    """The call waits for a result text (the tool deferred with `DeferKind.EXTERNAL`)."""


class DecisionKind(StrEnum):
    """What was decided on one pending call."""

    APPROVE = "approve"
    """Re-execute the tool with `call_approved()` true (approval calls only)."""
    DENY = "deny"
    """Do not execute; the model is told the call was denied (any call kind)."""
    EXTERNAL = "external"
    """Use the supplied text as the tool result (external calls only)."""


class AuditAction(StrEnum):
    """The kind of state change an `AuditEntry` records."""

    CREATED = "created"
    """A run was saved (pending, or already finished by `save_finished`)."""
    DECIDED = "decided"
    """A person (or service) decided a call; detail: call_id, decision, reason/text."""
    EXPIRED = "expired"
    """A call passed its deadline and was denied by the expiry sweep; detail: call_id."""
    READY = "ready"
    """Every pending call of the run is decided."""
    CLAIMED = "claimed"
    """A worker claimed the run; detail: worker_id, lease_expires_at."""
    COMPLETED = "completed"
    """The run finished with a final answer."""
    PAUSED = "paused"
    """The resume paused again; detail: child_run_id."""
    FAILED = "failed"
    """The run failed; detail: error."""
    INTERRUPTED = "interrupted"
    """The lease ran out while running; detail: worker_id, lease_expires_at."""
    RESOLVED = "resolved"
    """An operator resolved an interrupted run; detail: resolution ("retry" or "cancel"),
    note, and for a retry the attempt and the calls confirmed for a re-run."""


# --------------------------------------------------------------------------- errors


class RunNotFound(StoreError, LookupError):
    """No run with the given ID exists (`run_id`)."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f'run "{run_id}" not found')
        self.run_id = run_id


class CorruptRecord(StoreError):
    """A stored row of run `run_id` cannot be read back (a value no golem wrote: an unknown
    status or kind, a date or JSON that does not parse). Nothing was changed.

    Reading that run (`get_run`, `decide`, `audit`) raises it; listings and the change feed
    leave the row out (and log it), so every other run stays readable. A claim that takes such
    a run marks it INTERRUPTED with the fault in its outcome error and audit entry, so no claim
    takes it again; the row is kept for the operator to repair, then retry or cancel.
    """

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
    """The call's deadline has passed: it is (or will be, at the next sweep) denied "expired".

    Raised by `Store.decide` for any decision other than the expiry denial itself; the store
    records the expiry denial in the same transaction, so `existing` is that denial.
    """

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
    """A page cursor (`after=`) that no store of this kind returned as `next_cursor`.

    Also a `ValueError`, as it always was; nothing was read.
    """

    def __init__(self, cursor: str) -> None:
        super().__init__(
            f"invalid page cursor {cursor[:80]!r}: pass a next_cursor this store returned"
        )
        self.cursor = cursor


class InvalidRunId(StoreError, ValueError):
    """A new run's ID cannot be kept or reached (`run_id`; `problem` says why).

    A run ID must be 1 to `MAX_RUN_ID` characters of valid Unicode without NUL, and not
    `.` or `..`: those two are path segments every URL client normalizes away, so no URL
    could name the run.
    """

    def __init__(self, run_id: str, problem: str) -> None:
        super().__init__(f"run ID {run_id[:80]!r} {problem}")
        self.run_id = run_id
        self.problem = problem


MAX_RUN_ID = 200
"""The longest run ID a store saves (characters): an ID that fits in any URL, escaped."""


MAX_SECONDS = 10 * 366 * 24 * 3600.0
"""The longest duration, in seconds (about ten years), that a store, a worker or the command
line takes for a lease, an interval or an expiry: a longer one is a typo, and past the year
9999 no deadline can be written down."""


def check_seconds(name: str, value: float, *, zero: bool = False) -> float:
    """`value` as a float, when it is a finite number of seconds above 0 (or 0 itself, given
    `zero`) and at most `MAX_SECONDS`.

    Raises:
        ValueError: anything else (named `name` in the message).
    """
    low = "0 or more" if zero else "above 0"
    problem = f"{name} must be a number of seconds {low} and at most {MAX_SECONDS:.0f}"
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{problem}, got {value!r}")
    seconds = float(value) if abs(value) <= MAX_SECONDS else math.inf  # no float of 10**400
    if not math.isfinite(seconds) or not (seconds >= 0 if zero else seconds > 0):
        raise ValueError(f"{problem}, got {value!r}")
    return seconds


def check_run_id(run_id: str) -> None:
    """Refuse a run ID no store can keep or no URL can name.

    Raises:
        InvalidRunId: empty, longer than `MAX_RUN_ID`, `.` or `..`, a NUL, a lone surrogate.
    """
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


# --------------------------------------------------------------------------- inputs


class StoreTimeout(StoreError, TimeoutError):
    """The database did not answer a store call within the store's `command_timeout`.

    The store closed the connection, so the server rolls back whatever it had not committed.
    `commit_sent` says whether the COMMIT had been sent: then the transaction may have
    committed, and the caller finds out by reading (as after a lost connection).
    """

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
    """The database refused a new connection: it has no free connection slot
    (`max_connections`, or a role's or database's connection limit, is reached).

    Nothing was done; the same call succeeds once other clients free slots. Calls that find
    an open connection in the store's pool are not affected.
    """


class StoreReadOnly(StoreError):
    """The database refused a write because it accepts none just now: read-only by default
    (`default_transaction_read_only`, set on the database, a role or the server), or a hot
    standby the connection reached after a failover.

    Nothing was written: the transaction was rolled back. Reads still work; the same call
    succeeds once the database accepts writes again.
    """


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
    """A pending call to save with a new run (one `PendingToolCall` of the paused result)."""

    call_id: str
    """The tool call's ID (unique within the run)."""
    kind: CallKind
    """Whether it waits for approval or for an external result."""
    tool_name: str
    """The name of the tool that deferred."""
    args: str = "{}"
    """The call's arguments as raw JSON text, byte-exact as the model produced them."""
    reason: str = ""
    """The reason the tool gave when it deferred."""
    deadline: datetime | None = None
    """When an undecided call is denied "expired"; None means the run's `expires_at`."""
    seal: str | None = None
    """The call's seal when the agent seals pending calls (`Agent(seal_key=...)`): kept so a
    resume can check that the history still holds the very call that was decided."""


@dataclass(frozen=True, slots=True)
class NewRun:
    """A run to save: a paused result (`save_pending`) or a finished one (`save_finished`)."""

    id: str
    """The run ID (the paused `Result.run_id`); must be new to the store."""
    agent: str
    """The registry name of the agent that produced the run."""
    conversation_id: str
    """The conversation the run belongs to."""
    history: str
    """The history JSON (`golem.dumps_history(result.messages)`)."""
    calls: tuple[NewCall, ...] = ()
    """The pending calls in the model's emission order (empty for a finished run)."""
    deps_ref: Any = None
    """A JSON value from which the registry's deps factory rebuilds the run's deps."""
    started_by: str = ""
    """The identity that started the run (or `worker:<id>` for a pause saved by a worker)."""
    expires_at: datetime | None = None
    """Default deadline of the pending calls; None means they never expire."""
    parent_run_id: str | None = None
    """The run whose resume produced this one (set by `finish` for a paused outcome)."""
    trace_context: str = ""
    """The W3C `traceparent` of the paused run's span (`Result.trace_context`; "" when the
    run was not traced): the resume's span links to it (`golem.integrations.otel`)."""


@dataclass(frozen=True, slots=True)
class Decision:
    """A decision to record on one pending call; build it with the class methods."""

    kind: DecisionKind
    """Approve, deny or external."""
    reason: str = ""
    """For a denial: why (shown to the model)."""
    text: str = ""
    """For an external result: the tool result text, verbatim (may be empty)."""
    args: str | None = None
    """For an approval with edited arguments: the arguments to run with, as JSON object
    text (None: run the call as the model asked)."""

    def __post_init__(self) -> None:
        if self.args is None:
            return
        if self.kind is not DecisionKind.APPROVE:
            raise InvalidDecision("edited arguments belong to an approval only")
        object.__setattr__(self, "args", _json_object_text(self.args))

    @classmethod
    def approve(cls, args: str | dict[str, Any] | None = None) -> Decision:
        """Approve the call: the tool re-executes on resume.

        `args` (a dict, or JSON object text) approves it with edited arguments: the re-run
        uses them (after they pass the tool's schema) and the model is told they changed.

        Raises:
            InvalidDecision: `args` is not a JSON object.
        """
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
    """Edited arguments as compact JSON object text (what the store keeps and shows): strict
    JSON (no NaN or Infinity), UTF-8 text (no lone surrogate), a parser's nesting at most."""
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
    """How a resumed run ended; passed to `Store.finish` (and `Store.save_finished`).

    Build it with `Outcome.completed`, `Outcome.paused` or `Outcome.failed`.
    """

    status: RunStatus
    """COMPLETED, PAUSED or FAILED."""
    output: Any = None
    """For COMPLETED: the final output as a JSON value."""
    error: str = ""
    """For FAILED: the error text (type and message)."""
    history: str | None = None
    """The conversation after the run (history JSON), when there is one to show."""
    next_run: NewRun | None = None
    """For PAUSED: the new pending run (its `parent_run_id` is set by the store).

    None on outcomes read back from the store: see `RunRecord.child_run_id`.
    """
    refused: Mapping[str, str] = field(default_factory=dict)
    """For `Store.finish`: approved calls of the run this resume did not execute, each with
    the reason (a retry of an interrupted run refuses a call that may already have run).
    `finish` records each as a denial by the worker, audited `decided`, so an approved
    call of a finished run reads as executed only when it was. Empty when read back.
    """

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


# --------------------------------------------------------------------------- records


@dataclass(frozen=True, slots=True)
class DecisionRecord:
    """A decision recorded on one pending call."""

    run_id: str
    """The run the call belongs to."""
    call_id: str
    """The decided call."""
    kind: DecisionKind
    """Approve, deny or external."""
    reason: str
    """For a denial: the reason ("expired" for expiry denials); "" otherwise."""
    text: str
    """For an external result: the text; "" otherwise."""
    decided_by: str
    """The identity that decided ("system:expiry" for expiry denials)."""
    decided_at: datetime
    """When the decision was recorded (UTC)."""
    args: str | None = None
    """For an approval with edited arguments: the JSON object text the call runs with (the
    model's original arguments stay on the call, `PendingCallRecord.args`)."""


@dataclass(frozen=True, slots=True)
class PendingCallRecord:
    """A saved pending call and its decision, if any."""

    run_id: str
    """The run the call belongs to."""
    call_id: str
    """The tool call's ID (a tool sees it as `ctx.call_id`; its idempotency key, unique across
    conversations, is `ctx.idempotency_key`)."""
    position: int
    """0-based index in the model's emission order among the run's pending calls."""
    kind: CallKind
    """Approval or external."""
    tool_name: str
    """The tool that deferred."""
    args: str
    """The arguments as raw JSON text, byte-exact."""
    reason: str
    """The reason the tool gave when it deferred."""
    deadline: datetime | None
    """When an undecided call is denied "expired" (None: never)."""
    decision: DecisionRecord | None
    """The decision, or None while undecided."""
    rerun_confirmed_by: str | None = None
    """Who confirmed that this approved call may run again on a retry of an interrupted run
    (`Store.retry_interrupted`); None when nobody did."""
    seal: str | None = None
    """The seal the call carried when it was saved (None: unsealed)."""

    @property
    def decided(self) -> bool:
        """True once a decision is recorded."""
        return self.decision is not None


@dataclass(frozen=True, slots=True)
class RunRecord:
    """A stored run with its pending calls and outcome."""

    id: str
    """The run ID."""
    agent: str
    """The registry name of the agent."""
    conversation_id: str
    """The conversation it belongs to."""
    status: RunStatus
    """The current state."""
    history: str
    """The history JSON saved with the run (the paused evidence, or the finished conversation)."""
    calls: tuple[PendingCallRecord, ...]
    """Pending calls in emission order (empty for a run saved finished)."""
    deps_ref: Any
    """The JSON deps reference given when the run was started."""
    started_by: str
    """The identity that started the run."""
    created_at: datetime
    """When the run was saved."""
    updated_at: datetime
    """When the run's state last changed."""
    expires_at: datetime | None
    """The run's default call deadline (None: never)."""
    parent_run_id: str | None
    """The run whose resume produced this one."""
    child_run_id: str | None
    """For a PAUSED run: the new pending run its resume produced."""
    lease_owner: str | None
    """The worker that claimed the run (kept after it finishes, for the record)."""
    lease_expires_at: datetime | None
    """When the current (or last) lease runs out."""
    outcome: Outcome | None
    """How the run ended (None until it is completed, paused, failed or interrupted)."""
    attempt: int = 1
    """1 for the first resume; each operator retry of an interrupted run adds one."""
    trace_context: str = ""
    """The W3C `traceparent` of the span of the run that paused ("" when it was not traced);
    a worker passes it to the resume so the resume's span links to it."""

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


@dataclass(frozen=True, slots=True)
class ClaimedRun:
    """A run claimed by a worker: resume it, then `finish` before `lease_expires_at`."""

    run: RunRecord
    """The run (status RUNNING), every call decided."""
    worker_id: str
    """The worker holding the lease."""
    lease_expires_at: datetime
    """When the lease runs out unless renewed (`Store.renew_lease`)."""


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One appended state change. IDs increase in commit order across processes."""

    id: int
    """Position in the global log (use as the cursor of `changes_since`)."""
    run_id: str
    """The run that changed."""
    at: datetime
    """When (UTC)."""
    actor: str
    """Who: a decider identity, `worker:<id>`, `system:expiry`, `system:sweep`, the starter."""
    action: AuditAction
    """What happened."""
    detail: dict[str, Any] = field(default_factory=dict)
    """Action-specific JSON object (call_id, decision, reason, worker_id, error, …)."""
    agent: str | None = field(default=None, compare=False)
    """The run's agent, where the listing reads it along (`changes_since`); else None."""
    run_status: RunStatus | None = field(default=None, compare=False)
    """The run's status when the listing was read (not when the entry was written), where
    the listing reads it along (`changes_since`); else None."""
    parent_run_id: str | None = field(default=None, compare=False)
    """The run's `parent_run_id`, where the listing reads it along (`changes_since`)."""


@dataclass(frozen=True, slots=True)
class AuditPage:
    """One page of the audit log, newest first (`Store.audit_page`)."""

    entries: list[AuditEntry]
    """The matching entries, newest first, each with its `agent`."""
    next_before: int | None
    """Pass as `before=` for the next (older) page; None when the log has no older entry
    to look at. A page may hold fewer entries than asked (even none) and still have a next
    one: it stopped after looking at `scan` entries."""


_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Page(Generic[_T]):
    """One page of a keyset-paged listing (`Store.list_pending_calls`, `Store.list_runs_page`).

    Pass `next_cursor` as `after=` to get the following page; it is None on the last page
    (a page shorter than the limit). Cursors are opaque strings, stable across processes
    and store instances: a cursor names a position in the order, not an offset, so rows
    inserted meanwhile before it do not shift the pages after it.
    """

    items: list[_T]
    """The rows of this page, in the listing's order."""
    next_cursor: str | None
    """The cursor of the next page, or None when this page is the last."""
