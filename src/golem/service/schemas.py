"""The pydantic models of the JSON API: they validate requests, shape responses (numbers
that are not finite as `null`) and are the OpenAPI document's schemas."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer, WithJsonSchema
from pydantic.config import JsonDict

from golem.durable.store import AuditAction, CallKind, RunStatus

__all__ = [
    "MAX_EXPIRES_IN",
    "MAX_LIST_LIMIT",
    "AgentInfo",
    "AgentList",
    "AuditItem",
    "AuditList",
    "AuditListItem",
    "AuditPageQuery",
    "AuditQuery",
    "BulkDecisionForm",
    "Call",
    "CallList",
    "CallsQuery",
    "DecisionBody",
    "DecisionForm",
    "DecisionOut",
    "DecisionResult",
    "DeliveryAttempt",
    "DeliveryItem",
    "DeliveryList",
    "ErrorBody",
    "ErrorDetail",
    "ErrorInfo",
    "EventsQuery",
    "Health",
    "LoginForm",
    "LogoutForm",
    "OpenApiDocument",
    "Outcome",
    "ResolveForm",
    "Run",
    "RunDetail",
    "RunDetailEnvelope",
    "RunEnvelope",
    "RunList",
    "RunsQuery",
    "StartForm",
    "StartRunBody",
    "StreamToken",
    "WhoAmI",
]

MAX_LIST_LIMIT = 500
"""Largest `limit` of a listing."""

MAX_EXPIRES_IN = 10 * 366 * 24 * 3600.0
"""Longest accepted `expires_in` (seconds): ten years."""


def _iso(value: datetime) -> str:
    return value.astimezone(UTC).isoformat()


Time = Annotated[
    datetime,
    PlainSerializer(_iso, return_type=str),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]
"""A timestamp, sent as ISO 8601 in UTC (`2026-01-02T03:04:05.678+00:00`)."""


class _Out(BaseModel):
    model_config = ConfigDict(ser_json_inf_nan="null")


class _Query(BaseModel):
    model_config = ConfigDict(extra="ignore")


class _Form(BaseModel):
    model_config = ConfigDict(extra="ignore")  # a form's other fields are ignored

    csrf: str = Field(description="The session's CSRF token.")


# --------------------------------------------------------------------------- requests


class StartRunBody(BaseModel):
    """`POST /api/runs`: start a run of a registered agent."""

    model_config = ConfigDict(extra="forbid", strict=True)

    agent: str = Field(min_length=1, description="A registered agent's name.")
    prompt: str = Field(min_length=1, description="The user message that starts the run.")
    deps_ref: Any = Field(
        default=None,
        description="JSON the agent's deps_factory turns into its deps (finite numbers, "
        "nesting up to 64 levels).",
    )
    expires_in: float | None = Field(
        default=None,
        gt=0,
        le=MAX_EXPIRES_IN,
        description="Seconds until the run's pending calls expire (denied as expired).",
    )


_NULL: JsonDict = {"type": "null"}

_DECISION_SHAPES: JsonDict = {
    "oneOf": [
        {"properties": {"decision": {"const": "approve"}, "reason": _NULL, "result": _NULL}},
        {"properties": {"decision": {"const": "deny"}, "result": _NULL}},
        {
            "properties": {
                "decision": {"const": "external"},
                "reason": _NULL,
                "result": {"type": "string"},
            },
            "required": ["result"],
        },
    ]
}
"""Which fields go with which decision (the handler refuses other mixes with 422)."""


class DecisionBody(BaseModel):
    """`POST /api/runs/{run_id}/calls/{call_id}/decision`: decide one pending call."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra=_DECISION_SHAPES)

    decision: Literal["approve", "deny", "external"]
    reason: str | None = Field(default=None, description="Only with deny: told to the model.")
    result: str | None = Field(
        default=None, description="Only with external: the tool's result, verbatim."
    )


class RunsQuery(_Query):
    """`GET /api/runs` query parameters."""

    status: RunStatus | None = Field(default=None, description="Only runs in this status.")
    agent: str | None = Field(default=None, description="Only runs of this agent.")
    tool: str | None = Field(
        default=None, description="Only runs with a pending call of this tool."
    )
    limit: int = Field(default=100, ge=1, le=MAX_LIST_LIMIT, description="At most this many.")
    offset: int = Field(default=0, ge=0, le=1_000_000, description="Skip this many.")


class CallsQuery(_Query):
    """`GET /api/calls` query parameters."""

    agent: str | None = Field(default=None, description="Only calls of runs of this agent.")
    tool: str | None = Field(default=None, description="Only calls of this tool.")
    kind: CallKind | None = Field(default=None, description="Only calls of this kind.")
    limit: int = Field(
        default=MAX_LIST_LIMIT, ge=1, le=MAX_LIST_LIMIT, description="At most this many runs."
    )
    after: str | None = Field(
        default=None, max_length=500, description="The `next_cursor` of the previous page."
    )


class AuditQuery(_Query):
    """`GET /api/audit` and `GET /audit` query parameters."""

    actor: str | None = Field(default=None, description="Actor contains this (any case).")
    action: AuditAction | None = Field(default=None, description="Only this action.")
    agent: str | None = Field(default=None, description="Only runs of this agent.")
    run: str | None = Field(default=None, description="Run ID contains this.")
    limit: int = Field(default=500, ge=1, le=5000, description="At most this many entries.")
    before: str | None = Field(
        default=None,
        max_length=100,
        description="Only entries older than this: the `next_cursor` of the previous page, or "
        "an entry's `id` as this caller was shown it (400 `invalid_cursor` for anything else).",
    )


class AuditPageQuery(AuditQuery):
    """`GET /audit` query parameters: the API's, and a download format."""

    format: Literal["csv", "json"] | None = Field(
        default=None, description="Download the rows as CSV or JSON instead of the page."
    )


_SealedCursor = Annotated[str, Field(pattern=r"^(s[A-Za-z0-9_-]{48}|e[A-Za-z0-9_-]{32})$")]
"""The opaque start cursor a stream's `hello` event names (ADR 0073), or an entry reference
(ADR 0077)."""


class EventsQuery(_Query):
    """`GET /api/events` query parameters."""

    cursor: Annotated[int, Field(ge=0, le=2**63 - 1)] | _SealedCursor | None = Field(
        default=None,
        description="Start after this audit ID (only 0 for an approver who does not see "
        "every agent), at the sealed cursor of an event, or after the entry an entry "
        "reference names (default: now; `Last-Event-ID` wins).",
    )
    stream_token: str | None = Field(
        default=None, description="From POST /api/stream-token (EventSource sends no headers)."
    )


class LoginForm(_Query):
    """`POST /login` (urlencoded; same-site only)."""

    token: str = Field(description="An approver token.")
    next: str | None = Field(default=None, description="A local path to go to afterwards.")


class LogoutForm(_Form):
    """`POST /logout` (urlencoded)."""


class DecisionForm(_Form):
    """`POST /runs/{run_id}/calls/{call_id}/decision` (urlencoded)."""

    decision: Literal["approve", "deny", "external"]
    reason: str | None = Field(default=None, description="With deny: told to the model.")
    result: str | None = Field(default=None, description="With external: the tool's result.")
    args: str | None = Field(
        default=None,
        description="With approve: edited arguments, a JSON object the tool's schema accepts.",
    )
    next: str | None = Field(default=None, description="A local path to go back to.")
    after: str | None = Field(default=None, description="The `call-…` anchor to go back to.")


class BulkDecisionForm(_Form):
    """`POST /runs/{run_id}/decisions` (urlencoded): approve all or deny all."""

    decision: Literal["approve", "deny"]
    reason: str | None = Field(default=None, description="With deny: told to the model.")
    next: str | None = Field(default=None, description="A local path to go back to.")


class ResolveForm(_Form):
    """`POST /runs/{run_id}/resolve` (urlencoded): operator recovery of an interrupted run."""

    action: Literal["retry", "cancel"]
    note: str = Field(pattern=r"\S", description="What the operator checked (not blank; audited).")
    confirm: list[str] = Field(
        default=[], description="Approved calls confirmed not to have run (re-run on retry)."
    )


class StartForm(_Form):
    """`POST /runs` (urlencoded)."""

    agent: str = Field(min_length=1, description="A registered agent's name.")
    prompt: str = Field(pattern=r"\S", description="The first message (not blank).")
    deps_ref: str | None = Field(default=None, description="Optional JSON.")
    idempotency_key: str | None = Field(
        default=None,
        max_length=200,
        description="Drawn anew with each form: the same form sent twice starts one run "
        "(empty: none).",
    )


# --------------------------------------------------------------------------- responses


class ErrorDetail(_Out):
    """One invalid field."""

    loc: list[str]
    message: str


class ErrorInfo(_Out):
    """What went wrong; nothing was changed."""

    code: str = Field(
        description="Stable machine-readable code, e.g. run_not_found, decision_conflict, "
        "call_expired, run_not_pending, invalid_request, malformed_json, payload_too_large, "
        "unauthenticated, forbidden, invalid_deps, too_many_streams."
    )
    message: str
    details: list[ErrorDetail] | None = None


class ErrorBody(_Out):
    """Every error answer."""

    error: ErrorInfo


class DecisionOut(_Out):
    """A recorded decision."""

    decision: Literal["approve", "deny", "external"]
    reason: str = Field(description='Denial reason ("expired" for expiry).')
    result: str = Field(description="External result text.")
    decided_by: str = Field(description="The deciding identity.")
    decided_at: Time


class Call(_Out):
    """A deferred tool call of a run, with its decision (null while undecided)."""

    run_id: str
    call_id: str
    agent: str
    run_status: RunStatus
    position: int
    kind: CallKind
    tool_name: str
    args: str = Field(description="The call's arguments, a JSON object as text.")
    reason: str = Field(description="Why the tool deferred (its Deferred reason).")
    created_at: Time | None
    deadline: Time | None
    decision: DecisionOut | None


class Outcome(_Out):
    """How a finished run ended."""

    status: RunStatus
    output: Any = None
    error: str | None = None


class Run(_Out):
    """A run without its conversation and audit log."""

    id: str
    agent: str
    conversation_id: str
    status: RunStatus
    started_by: str
    created_at: Time | None
    updated_at: Time | None
    expires_at: Time | None
    parent_run_id: str | None
    child_run_id: str | None
    deps_ref: Any = None
    lease_owner: str | None
    calls: list[Call]
    outcome: Outcome | None


class AuditItem(_Out):
    """One audit-log entry."""

    id: int | Annotated[str, Field(pattern=r"^e[A-Za-z0-9_-]{32}$")] = Field(
        description="The entry's audit ID (its place in the whole log) for an approver who "
        "sees every agent; for others an opaque reference, the same for the same entry "
        "(ADR 0077)."
    )
    run_id: str
    at: Time | None
    actor: str
    action: str
    detail: dict[str, Any]


class AuditListItem(AuditItem):
    """An audit entry with its run's agent."""

    agent: str


class AuditList(_Out):
    """`{"entries": [...], "next_cursor": ...}`, newest first."""

    entries: list[AuditListItem]
    next_cursor: str | None = Field(
        description="Pass as `before` for the next (older) page; null on the last page. "
        "Sealed: opaque, different on every answer."
    )


class RunDetail(Run):
    """A run with its conversation (history JSON objects) and audit log."""

    messages: list[dict[str, Any]]
    audit: list[AuditItem]


class RunEnvelope(_Out):
    """`{"run": ...}`."""

    run: Run


class RunDetailEnvelope(_Out):
    """`{"run": ...}` with the conversation and audit log."""

    run: RunDetail


class RunList(_Out):
    """`{"runs": [...]}`."""

    runs: list[Run]


class CallList(_Out):
    """`{"calls": [...], "next_cursor": ...}`: one page, oldest run first."""

    calls: list[Call]
    next_cursor: str | None = Field(
        default=None, description="Pass as `?after=` for the next page (null: the last page)."
    )


class DecisionResult(_Out):
    """The recorded decision and the run after it."""

    decision: DecisionOut
    run: Run


class AgentInfo(_Out):
    """A registered agent the caller may see."""

    name: str
    description: str
    can_start: bool


class AgentList(_Out):
    """`{"agents": [...]}`."""

    agents: list[AgentInfo]


class Health(_Out):
    """Liveness and store reachability."""

    status: Literal["ok", "starting", "unavailable"]
    schema_version: int | None = None
    error: str | None = None


class StreamToken(_Out):
    """A token for `GET /api/events?stream_token=...`."""

    stream_token: str
    expires_at: Time


class WhoAmI(_Out):
    """The approver behind a bearer token."""

    identity: str
    agents: list[str] | None = Field(description="Agents it may see (null: all).")
    tools: list[str] | None = Field(description="Tools it may decide (null: all).")
    can_start: bool


class OpenApiDocument(_Out):
    """The OpenAPI 3.1 document."""

    model_config = ConfigDict(extra="allow")

    openapi: str


class DeliveryAttempt(_Out):
    """One try to deliver a notification."""

    at: str
    status: int | None = Field(description="The HTTP status (null: no answer).")
    error: str = Field(description="Empty when the attempt succeeded.")


class DeliveryItem(_Out):
    """A webhook notification and its attempts."""

    id: str
    event: str
    run_id: str
    agent: str
    url: str = Field(description="The webhook URL without query string or user info.")
    created_at: Time
    state: Literal["pending", "delivered", "failed"]
    attempts: list[DeliveryAttempt]


class DeliveryList(_Out):
    """`{"deliveries": [...]}`, newest first."""

    deliveries: list[DeliveryItem]
