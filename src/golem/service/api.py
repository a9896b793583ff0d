"""The JSON API under `/api`: runs, pending calls, decisions, agents, health.

Every error answers `{"error": {"code": ..., "message": ...}}` (plus `details` for
validation errors) and changes nothing. Checks run in a fixed order, so the first problem
wins: 401 (no or unknown token) → 413 (body too large, see `app.py`) → 400/422 (malformed
or invalid body) → 404 (unknown run) → 403 (agent not allowed) → 404 (unknown call) → 403
(tool not allowed) → 409/422 (the store refused the decision).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from golem.errors import StoreError
from golem.service.auth import AuthConfig, Credential, LoginLimiter
from golem.store import (
    AuditEntry,
    CallExpired,
    CallKind,
    CallNotFound,
    Decision,
    DecisionConflict,
    DecisionRecord,
    InvalidDecision,
    PendingCallRecord,
    RunNotFound,
    RunNotPending,
    RunRecord,
    RunStatus,
    Store,
)
from golem.worker import AgentRegistry, start_run

__all__ = [
    "ApiError",
    "DecisionBody",
    "ServiceState",
    "StartRunBody",
    "agents",
    "audit_json",
    "bearer",
    "call_json",
    "check_json_value",
    "check_text",
    "decide",
    "decide_call",
    "decision_json",
    "health",
    "list_calls",
    "list_runs",
    "load_run",
    "not_found",
    "parse_json",
    "pending_calls",
    "read_json",
    "require_store",
    "run_detail_json",
    "run_json",
    "show_run",
    "start",
    "start_for",
    "store_error",
    "stream_token",
    "visible_runs",
    "whoami",
]

MAX_LIST_LIMIT = 500

MAX_JSON_DEPTH = 64
"""Deepest nesting of arrays and objects accepted in a request body."""

MAX_EXPIRES_IN = 10 * 366 * 24 * 3600.0
"""Longest accepted `expires_in` (seconds): ten years."""


@dataclass
class ServiceState:
    """What every route needs: the registry, the store, auth and limits (`app.state.golem`)."""

    registry: AgentRegistry
    """Agent name → entry."""
    store: Store | None
    """The store (None until the lifespan opened it when the app was given a URL)."""
    auth: AuthConfig
    """Tokens, approvers and signing key."""
    max_body_bytes: int
    """Largest accepted request body."""
    stream_poll_interval: float
    """How often the event stream polls the audit log (seconds)."""
    stream_heartbeat: float
    """How often the event stream sends a keep-alive comment (seconds)."""
    default_expires_in: float | None
    """Default deadline of started runs' pending calls (seconds), None for none."""
    max_streams_per_identity: int = 8
    """Open event streams allowed per approver identity."""
    stream_recheck: float = 5.0
    """Seconds between re-checks of an open stream's session or stream token."""
    open_streams: dict[str, int] = field(default_factory=dict)
    """Identity → event streams open now."""
    login_limiter: LoginLimiter = field(default_factory=LoginLimiter)
    """Sign-in attempts allowed per client address."""


class ApiError(Exception):
    """A 4xx/5xx answer with a JSON error body; raised by handlers, rendered by `app.py`."""

    def __init__(
        self, status: int, code: str, message: str, details: list[dict[str, Any]] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details

    def response(self) -> JSONResponse:
        """The JSON response for this error."""
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details is not None:
            body["details"] = self.details
        headers = {"WWW-Authenticate": 'Bearer realm="golem"'} if self.status == 401 else None
        return JSONResponse({"error": body}, status_code=self.status, headers=headers)


def store_error(exc: Exception) -> ApiError:
    """Translate a store error raised by a decision or lookup into an `ApiError`."""
    if isinstance(exc, RunNotFound):
        return ApiError(404, "run_not_found", str(exc))
    if isinstance(exc, CallNotFound):
        return ApiError(404, "call_not_found", str(exc))
    if isinstance(exc, CallExpired):
        return ApiError(409, "call_expired", str(exc))
    if isinstance(exc, DecisionConflict):
        return ApiError(409, "decision_conflict", str(exc))
    if isinstance(exc, RunNotPending):
        return ApiError(409, "run_not_pending", str(exc))
    if isinstance(exc, InvalidDecision):
        return ApiError(422, "invalid_decision", str(exc))
    raise exc


# --------------------------------------------------------------------------- bodies


class StartRunBody(BaseModel):
    """`POST /api/runs`: start a run of a registered agent."""

    model_config = ConfigDict(extra="forbid", strict=True)

    agent: str = Field(min_length=1)
    prompt: str = Field(min_length=1)
    deps_ref: Any = None
    expires_in: float | None = Field(default=None, gt=0, le=MAX_EXPIRES_IN)


class DecisionBody(BaseModel):
    """`POST /api/runs/{run_id}/calls/{call_id}/decision`: decide one pending call."""

    model_config = ConfigDict(extra="forbid", strict=True)

    decision: Literal["approve", "deny", "external"]
    reason: str | None = None
    result: str | None = None

    def to_decision(self) -> Decision:
        """The store decision; raises `ApiError(422)` for fields that do not fit the kind."""
        if self.decision != "deny" and self.reason is not None:
            raise ApiError(422, "invalid_request", "'reason' is only accepted with deny")
        if self.decision != "external" and self.result is not None:
            raise ApiError(422, "invalid_request", "'result' is only accepted with external")
        if self.decision == "approve":
            return Decision.approve()
        if self.decision == "deny":
            return Decision.deny(self.reason or "")
        if self.result is None:
            raise ApiError(422, "invalid_request", "external needs 'result' (a string)")
        return Decision.external(self.result)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number (numbers must be finite)")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of range (numbers must be finite)")
    return value


def parse_json(raw: bytes | str) -> Any:
    """Parse a request body as strict JSON; `ApiError(400)` for anything else.

    Refuses what Python's `json` accepts but JSON does not (`NaN`, `Infinity`, numbers
    that overflow to infinity), integers longer than Python converts (4300 digits) and
    nesting deep enough to exhaust the parser's stack.
    """
    try:
        return json.loads(raw, parse_constant=_refuse_constant, parse_float=_finite_float)
    except RecursionError:
        raise ApiError(400, "malformed_json", "request body is nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
        raise ApiError(400, "malformed_json", f"request body is not valid JSON: {exc}") from None


def _bad_text(text: str) -> str | None:
    if "\x00" in text:
        return "contains a NUL character"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "contains a lone surrogate (not valid Unicode)"
    return None


def check_text(value: str, where: str) -> None:
    """`ApiError(422)` when `value` holds a NUL or a lone surrogate (no store can keep it)."""
    problem = _bad_text(value)
    if problem is not None:
        raise ApiError(422, "invalid_request", f"{where} {problem}")


def check_json_value(value: Any, where: str = "body") -> None:
    """`ApiError(422)` for nesting deeper than `MAX_JSON_DEPTH` or unstorable strings.

    Walks iteratively, so no input can exhaust the stack.
    """
    stack: list[tuple[Any, str, int]] = [(value, where, 0)]
    while stack:
        node, path, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise ApiError(
                422, "invalid_request", f"{where} is nested deeper than {MAX_JSON_DEPTH} levels"
            )
        if isinstance(node, str):
            check_text(node, path)
        elif isinstance(node, dict):
            for k, v in node.items():
                check_text(k, f"a key of {path}")
                stack.append((v, f"{path}.{k}", depth + 1))
        elif isinstance(node, list):
            stack.extend((v, f"{path}[{i}]", depth + 1) for i, v in enumerate(node))


async def read_json(request: Request, model: type[BaseModel]) -> Any:
    """Parse the request body as JSON into `model`; 400 for bad JSON, 422 for bad fields."""
    data = parse_json(await request.body())
    if not isinstance(data, dict):
        raise ApiError(422, "invalid_request", "request body must be a JSON object")
    check_json_value(data)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        details = [
            {"loc": [str(p) for p in e["loc"]], "message": e["msg"]}
            for e in exc.errors(include_url=False)
        ]
        fields = ", ".join(".".join(d["loc"]) or "body" for d in details)
        raise ApiError(422, "invalid_request", f"invalid fields: {fields}", details) from None


# --------------------------------------------------------------------------- JSON forms


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(UTC).isoformat()


def decision_json(d: DecisionRecord | None) -> dict[str, Any] | None:
    """The JSON form of a decision (None when undecided)."""
    if d is None:
        return None
    return {
        "decision": d.kind.value,
        "reason": d.reason,
        "result": d.text,
        "decided_by": d.decided_by,
        "decided_at": _iso(d.decided_at),
    }


def call_json(run: RunRecord, c: PendingCallRecord) -> dict[str, Any]:
    """The JSON form of a pending call (with its run's agent and status)."""
    return {
        "run_id": c.run_id,
        "call_id": c.call_id,
        "agent": run.agent,
        "run_status": run.status.value,
        "position": c.position,
        "kind": c.kind.value,
        "tool_name": c.tool_name,
        "args": c.args,
        "reason": c.reason,
        "created_at": _iso(run.created_at),
        "deadline": _iso(c.deadline),
        "decision": decision_json(c.decision),
    }


def run_json(run: RunRecord) -> dict[str, Any]:
    """The JSON form of a run without its conversation and audit log."""
    outcome = None
    if run.outcome is not None:
        outcome = {
            "status": run.outcome.status.value,
            "output": run.outcome.output,
            "error": run.outcome.error,
        }
    return {
        "id": run.id,
        "agent": run.agent,
        "conversation_id": run.conversation_id,
        "status": run.status.value,
        "started_by": run.started_by,
        "created_at": _iso(run.created_at),
        "updated_at": _iso(run.updated_at),
        "expires_at": _iso(run.expires_at),
        "parent_run_id": run.parent_run_id,
        "child_run_id": run.child_run_id,
        "deps_ref": run.deps_ref,
        "lease_owner": run.lease_owner,
        "calls": [call_json(run, c) for c in run.calls],
        "outcome": outcome,
    }


def audit_json(e: AuditEntry) -> dict[str, Any]:
    """The JSON form of an audit entry."""
    return {
        "id": e.id,
        "run_id": e.run_id,
        "at": _iso(e.at),
        "actor": e.actor,
        "action": e.action.value,
        "detail": e.detail,
    }


def run_detail_json(run: RunRecord, audit: list[AuditEntry]) -> dict[str, Any]:
    """The JSON form of a run with its conversation (history JSON objects) and audit log."""
    out = run_json(run)
    out["messages"] = json.loads(run.conversation) if run.conversation else []
    out["audit"] = [audit_json(e) for e in audit]
    return out


# --------------------------------------------------------------------------- operations


def require_store(state: ServiceState) -> Store:
    """The store, or 503 while it is still being opened."""
    if state.store is None:
        raise ApiError(503, "unavailable", "the store is not open yet")
    return state.store


async def load_run(state: ServiceState, cred: Credential, run_id: str) -> RunRecord:
    """The run `run_id` if it exists (404) and the approver may see its agent (403)."""
    try:
        run = await require_store(state).get_run(run_id)
    except RunNotFound as exc:
        raise store_error(exc) from None
    if not cred.approver.may_see(run.agent):
        raise ApiError(
            403, "forbidden", f'{cred.approver.identity} may not see runs of agent "{run.agent}"'
        )
    return run


async def visible_runs(
    state: ServiceState,
    cred: Credential,
    *,
    status: RunStatus | None,
    agent: str | None,
    tool: str | None,
    limit: int,
    offset: int = 0,
) -> list[RunRecord]:
    """Runs matching the filters that the approver may see, newest first."""
    store = require_store(state)
    allowed = cred.approver.agents
    if agent is not None:
        if not cred.approver.may_see(agent):
            return []
        names: list[str | None] = [agent]
    elif allowed is None:
        names = [None]
    else:
        names = [*sorted(allowed)]
    found: list[RunRecord] = []
    for name in names:
        found += await store.list_runs(
            status=status, agent=name, tool_name=tool, limit=limit + offset
        )
    found.sort(key=lambda r: (r.created_at, r.id), reverse=True)
    return found[offset : offset + limit]


async def pending_calls(
    state: ServiceState,
    cred: Credential,
    *,
    agent: str | None = None,
    tool: str | None = None,
    kind: CallKind | None = None,
    limit: int = MAX_LIST_LIMIT,
) -> list[tuple[RunRecord, PendingCallRecord]]:
    """Undecided calls of pending runs that the approver may decide, oldest run first."""
    runs = await visible_runs(
        state, cred, status=RunStatus.PENDING, agent=agent, tool=tool, limit=limit
    )
    out: list[tuple[RunRecord, PendingCallRecord]] = []
    for run in reversed(runs):
        for c in run.undecided:
            if tool is not None and c.tool_name != tool:
                continue
            if kind is not None and c.kind != kind:
                continue
            if cred.approver.may_decide(run.agent, c.tool_name):
                out.append((run, c))
    return out


async def decide_call(
    state: ServiceState, cred: Credential, run_id: str, call_id: str, decision: Decision
) -> tuple[DecisionRecord, RunRecord]:
    """Record `decision` as `cred`'s identity after the 404/403 checks; map store refusals."""
    run = await load_run(state, cred, run_id)
    try:
        call = run.call(call_id)
    except CallNotFound as exc:
        raise store_error(exc) from None
    if not cred.approver.may_decide(run.agent, call.tool_name):
        raise ApiError(
            403,
            "forbidden",
            f'{cred.approver.identity} may not decide calls of tool "{call.tool_name}"',
        )
    store = require_store(state)
    try:
        record = await store.decide(run_id, call_id, decision, decided_by=cred.approver.identity)
    except (RunNotFound, CallNotFound, DecisionConflict, RunNotPending, InvalidDecision) as exc:
        raise store_error(exc) from None
    return record, await store.get_run(run_id)


async def start_for(
    state: ServiceState,
    cred: Credential,
    agent: str,
    prompt: str,
    deps_ref: Any = None,
    expires_in: float | None = None,
) -> RunRecord:
    """Start a run of `agent` as `cred`'s identity after the 422/403 checks."""
    if agent not in state.registry:
        raise ApiError(422, "unknown_agent", f'no agent named "{agent}" is registered')
    if not cred.approver.may_start(agent):
        raise ApiError(
            403, "forbidden", f'{cred.approver.identity} may not start runs of agent "{agent}"'
        )
    seconds = expires_in if expires_in is not None else state.default_expires_in
    try:
        return await start_run(
            require_store(state),
            state.registry,
            agent,
            prompt,
            deps_ref=deps_ref,
            started_by=cred.approver.identity,
            expires_in=None if seconds is None else timedelta(seconds=seconds),
        )
    except StoreError:
        raise
    except Exception as exc:  # the run itself cannot raise: a failure is a FAILED run
        # What is left is the agent's deps_factory refusing deps_ref: nothing was saved.
        raise ApiError(
            422,
            "invalid_deps",
            f'agent "{agent}" could not build its deps from deps_ref: {type(exc).__name__}: {exc}',
        ) from None


# --------------------------------------------------------------------------- handlers


def _state(request: Request) -> ServiceState:
    state: ServiceState = request.app.state.golem
    return state


def bearer(request: Request) -> Credential:
    """The credential of the request's bearer token; 401 when missing or unknown."""
    cred = _state(request).auth.from_authorization(request.headers.get("authorization"))
    if cred is None:
        raise ApiError(401, "unauthenticated", "send 'Authorization: Bearer <token>'")
    return cred


def _query_int(request: Request, name: str, default: int, lo: int, hi: int) -> int:
    text = request.query_params.get(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise ApiError(422, "invalid_request", f"'{name}' must be an integer") from None
    if not lo <= value <= hi:
        raise ApiError(422, "invalid_request", f"'{name}' must be between {lo} and {hi}")
    return value


def _query_enum(request: Request, name: str, enum: type[Any]) -> Any:
    text = request.query_params.get(name)
    if text is None or text == "":
        return None
    try:
        return enum(text)
    except ValueError:
        allowed = ", ".join(m.value for m in enum)
        raise ApiError(422, "invalid_request", f"'{name}' must be one of {allowed}") from None


async def health(request: Request) -> Response:
    """Liveness and store reachability; needs no token."""
    state = _state(request)
    if state.store is None:
        return JSONResponse({"status": "starting"}, status_code=503)
    try:
        version = await state.store.schema_version()
    except Exception as exc:
        return JSONResponse({"status": "unavailable", "error": type(exc).__name__}, status_code=503)
    return JSONResponse({"status": "ok", "schema_version": version})


async def whoami(request: Request) -> Response:
    """The identity behind the bearer token and what it may do (the inbox shows it before a
    link's token signs anyone in)."""
    approver = bearer(request).approver
    return JSONResponse(
        {
            "identity": approver.identity,
            "agents": None if approver.agents is None else sorted(approver.agents),
            "tools": None if approver.tools is None else sorted(approver.tools),
            "can_start": approver.can_start,
        }
    )


async def agents(request: Request) -> Response:
    """The registered agents the caller may see."""
    cred = bearer(request)
    entries = _state(request).registry
    return JSONResponse(
        {
            "agents": [
                {
                    "name": name,
                    "description": entries[name].description,
                    "can_start": cred.approver.may_start(name),
                }
                for name in sorted(entries)
                if cred.approver.may_see(name)
            ]
        }
    )


async def start(request: Request) -> Response:
    """Start a run; 201 with the run (pending, completed or failed)."""
    cred = bearer(request)
    body: StartRunBody = await read_json(request, StartRunBody)
    run = await start_for(
        _state(request), cred, body.agent, body.prompt, body.deps_ref, body.expires_in
    )
    return JSONResponse(
        {"run": run_json(run)}, status_code=201, headers={"Location": f"/api/runs/{run.id}"}
    )


async def list_runs(request: Request) -> Response:
    """Runs the caller may see, filtered by status, agent and pending tool; newest first."""
    cred = bearer(request)
    status = _query_enum(request, "status", RunStatus)
    limit = _query_int(request, "limit", 100, 1, MAX_LIST_LIMIT)
    offset = _query_int(request, "offset", 0, 0, 1_000_000)
    runs = await visible_runs(
        _state(request),
        cred,
        status=status,
        agent=request.query_params.get("agent") or None,
        tool=request.query_params.get("tool") or None,
        limit=limit,
        offset=offset,
    )
    return JSONResponse({"runs": [run_json(r) for r in runs]})


async def list_calls(request: Request) -> Response:
    """Undecided calls the caller may decide, filtered by agent, tool and kind."""
    cred = bearer(request)
    kind = _query_enum(request, "kind", CallKind)
    limit = _query_int(request, "limit", MAX_LIST_LIMIT, 1, MAX_LIST_LIMIT)
    calls = await pending_calls(
        _state(request),
        cred,
        agent=request.query_params.get("agent") or None,
        tool=request.query_params.get("tool") or None,
        kind=kind,
        limit=limit,
    )
    return JSONResponse({"calls": [call_json(r, c) for r, c in calls]})


async def show_run(request: Request) -> Response:
    """One run with its calls, conversation and audit log."""
    cred = bearer(request)
    state = _state(request)
    run = await load_run(state, cred, request.path_params["run_id"])
    audit = await require_store(state).audit(run.id)
    return JSONResponse({"run": run_detail_json(run, audit)})


async def decide(request: Request) -> Response:
    """Decide one pending call as the caller's identity."""
    cred = bearer(request)
    body: DecisionBody = await read_json(request, DecisionBody)
    decision = body.to_decision()
    record, run = await decide_call(
        _state(request),
        cred,
        request.path_params["run_id"],
        request.path_params["call_id"],
        decision,
    )
    return JSONResponse({"decision": decision_json(record), "run": run_json(run)})


async def stream_token(request: Request) -> Response:
    """A short-lived token for `GET /api/events?stream_token=...` (EventSource sends no headers)."""
    cred = bearer(request)
    token, exp = _state(request).auth.issue_stream_token(cred)
    return JSONResponse(
        {"stream_token": token, "expires_at": _iso(datetime.fromtimestamp(exp, UTC))}
    )


def not_found(request: Request, exc: HTTPException) -> ApiError:
    """The JSON error for an unknown `/api` route or a wrong method."""
    if exc.status_code == 405:
        return ApiError(405, "method_not_allowed", f"{request.method} is not allowed here")
    if exc.status_code == 404:
        return ApiError(404, "not_found", f"no API route {request.url.path}")
    return ApiError(exc.status_code, "http_error", str(exc.detail))
