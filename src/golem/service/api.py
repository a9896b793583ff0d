"""The JSON API under `/api`: runs, pending calls, decisions, agents, health.

Checks run in a fixed order, the first problem wins: 401 → 413 → 400/422 (body) → 404
(unknown run, or one the caller may not see) → 404 (call) → 403 (tool) → 409/422 (store).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import Response

from golem.durable.store import AuditEntry, DecisionRecord, PendingCallRecord, RunRecord
from golem.service import schemas
from golem.service.auth import Credential
from golem.service.credentials import with_bearer
from golem.service.errors import ApiError, read_json, read_query, respond
from golem.service.openapi import operation
from golem.service.positions import entry_id, shown_to
from golem.service.runs import (
    IDEMPOTENCY_KEY_MAX,
    decide_call,
    load_run,
    pending_page,
    start_for,
    to_decision,
    visible_runs,
)
from golem.service.settings import require_store, state_of

# The handlers behind `golem.service.create_app`; nothing here is public API.
__all__: list[str] = []


def _decision_model(d: DecisionRecord) -> schemas.DecisionOut:
    return schemas.DecisionOut(
        decision=d.kind.value,
        reason=d.reason,
        result=d.text,
        decided_by=d.decided_by,
        decided_at=d.decided_at.astimezone(UTC),
    )


def _call_model(run: RunRecord, c: PendingCallRecord) -> schemas.Call:
    """A pending call with its run's agent and status."""
    return schemas.Call(
        **{n: getattr(c, n) for n in _CALL},
        agent=run.agent,
        run_status=run.status,
        created_at=run.created_at,
        decision=None if c.decision is None else _decision_model(c.decision),
    )


_CALL = ("run_id", "call_id", "position", "kind", "tool_name", "args", "reason", "deadline")


def _run_model(run: RunRecord) -> schemas.Run:
    """A run without its conversation and audit log."""
    fields = {n: getattr(run, n) for n in schemas.Run.model_fields if n not in ("calls", "outcome")}
    done = run.outcome
    outcome = None if done is None else schemas.Outcome.model_validate(done, from_attributes=True)
    return schemas.Run(**fields, calls=[_call_model(run, c) for c in run.calls], outcome=outcome)


def audit_model(e: AuditEntry, secret: bytes | None = None) -> schemas.AuditItem:
    """An audit entry (`secret`: see `entry_id`)."""
    return schemas.AuditItem(
        id=entry_id(e, secret),
        run_id=e.run_id,
        at=e.at,
        actor=e.actor,
        action=e.action.value,
        detail=e.detail,
    )


def audit_json(e: AuditEntry, secret: bytes | None = None) -> dict[str, Any]:
    """The JSON form of an audit entry (`secret`: see `entry_id`)."""
    return audit_model(e, secret).model_dump(mode="json")


def _run_detail_model(
    run: RunRecord, audit: list[AuditEntry], secret: bytes | None = None
) -> schemas.RunDetail:
    return schemas.RunDetail(
        **dict(_run_model(run)),
        messages=json.loads(run.conversation) if run.conversation else [],
        audit=[audit_model(e, secret) for e in audit],
    )


def run_detail_json(run: RunRecord, audit: list[AuditEntry]) -> dict[str, Any]:
    """The JSON form of a run with its conversation (history JSON objects) and audit log."""
    return _run_detail_model(run, audit).model_dump(mode="json")


@operation(op_id="health", responses={200: schemas.Health, 503: schemas.Health}, security=())
async def health(request: Request) -> Response:
    """Liveness and store reachability (no token needed)."""
    state = state_of(request)
    if state.store is None:
        return respond(schemas.Health(status="starting"), 503, exclude_none=True)
    try:
        version = await state.store.schema_version()
    except Exception as exc:
        health = schemas.Health(status="unavailable", error=type(exc).__name__)
        return respond(health, 503, exclude_none=True)
    return respond(schemas.Health(status="ok", schema_version=version), exclude_none=True)


@operation(op_id="whoami", responses={200: schemas.WhoAmI})
@with_bearer
async def whoami(request: Request, cred: Credential) -> Response:
    """The identity behind the bearer token and what it may do."""
    a = cred.approver
    return respond(
        schemas.WhoAmI(
            identity=a.identity,
            agents=None if a.agents is None else sorted(a.agents),
            tools=None if a.tools is None else sorted(a.tools),
            can_start=a.can_start,
        )
    )


@operation(op_id="listAgents", responses={200: schemas.AgentList})
@with_bearer
async def agents(request: Request, cred: Credential) -> Response:
    """The registered agents the caller may see."""
    entries = state_of(request).registry
    listed = [
        schemas.AgentInfo(
            name=name,
            description=entries[name].description,
            can_start=cred.approver.may_start(name),
        )
        for name in sorted(entries)
        if cred.approver.may_see(name)
    ]
    return respond(schemas.AgentList(agents=listed))


@operation(
    op_id="startRun",
    body=schemas.StartRunBody,
    responses={201: schemas.RunEnvelope, 200: schemas.RunEnvelope},
    errors=(403, 409),
    headers={
        "Idempotency-Key": "Makes the start safe to send again (after a timeout or a 503): "
        "every start with the same key from the same approver starts one run; a repeat "
        "answers 200 with that run and `Idempotent-Replayed: true`, without running the "
        "agent again. A key already used for another agent or prompt: 409 "
        "idempotency_key_reused.",
    },
    links={
        "showRun": ("showRun", {"run_id": "$response.body#/run/id"}),
        "decideFirstCall": (
            "decideCall",
            {"run_id": "$response.body#/run/id", "call_id": "$response.body#/run/calls/0/call_id"},
        ),
    },
)
@with_bearer
async def start(request: Request, cred: Credential) -> Response:
    """Start a run of an agent; 201 with the run (pending, completed or failed)."""
    key = request.headers.get("idempotency-key")
    if key is not None and not 0 < len(key) <= IDEMPOTENCY_KEY_MAX:
        message = f"Idempotency-Key must be 1 to {IDEMPOTENCY_KEY_MAX} characters, got {len(key)}"
        raise ApiError(422, "invalid_request", message)
    body = await read_json(request, schemas.StartRunBody)
    run, replayed = await start_for(
        state_of(request), cred, body.agent, body.prompt, body.deps_ref, body.expires_in, key
    )
    headers = {"Location": "/api/runs/" + quote(run.id, safe="")}
    if replayed:
        headers["Idempotent-Replayed"] = "true"
    envelope = schemas.RunEnvelope(run=_run_model(run))
    return respond(envelope, 200 if replayed else 201, headers=headers)


@operation(op_id="listRuns", query=schemas.RunsQuery, responses={200: schemas.RunList})
@with_bearer
async def list_runs(request: Request, cred: Credential) -> Response:
    """Runs the caller may see, filtered by status, agent and pending tool; newest first."""
    q = read_query(request, schemas.RunsQuery)
    runs = await visible_runs(state_of(request), cred, **dict(q))
    return respond(schemas.RunList(runs=[_run_model(r) for r in runs]))


@operation(
    op_id="listCalls",
    query=schemas.CallsQuery,
    responses={200: schemas.CallList},
    links={
        "decideFirstCall": (
            "decideCall",
            {
                "run_id": "$response.body#/calls/0/run_id",
                "call_id": "$response.body#/calls/0/call_id",
            },
        ),
        "nextPage": ("listCalls", {"after": "$response.body#/next_cursor"}),
    },
)
@with_bearer
async def list_calls(request: Request, cred: Credential) -> Response:
    """Undecided calls the caller may decide, oldest run first, keyset-paged by run."""
    q = read_query(request, schemas.CallsQuery)
    page = await pending_page(state_of(request), cred, **dict(q))
    calls = [_call_model(r, c) for r, c in page.calls]
    return respond(schemas.CallList(calls=calls, next_cursor=page.next_cursor))


@operation(op_id="showRun", responses={200: schemas.RunDetailEnvelope}, errors=(404,))
@with_bearer
async def show_run(request: Request, cred: Credential) -> Response:
    """One run with its calls, conversation and audit log."""
    state = state_of(request)
    run = await load_run(state, cred, request.path_params["run_id"])
    audit = await require_store(state).audit(run.id)
    detail = _run_detail_model(run, audit, shown_to(cred, state.auth.secret))
    return respond(schemas.RunDetailEnvelope(run=detail))


@operation(
    op_id="decideCall",
    body=schemas.DecisionBody,
    responses={200: schemas.DecisionResult},
    errors=(403, 404, 409),
    links={"showRun": ("showRun", {"run_id": "$response.body#/run/id"})},
)
@with_bearer
async def decide(request: Request, cred: Credential) -> Response:
    """Decide one pending call as the caller's identity."""
    decision = to_decision(await read_json(request, schemas.DecisionBody))
    run_id, call_id = request.path_params["run_id"], request.path_params["call_id"]
    record, run = await decide_call(state_of(request), cred, run_id, call_id, decision)
    return respond(schemas.DecisionResult(decision=_decision_model(record), run=_run_model(run)))


@operation(op_id="issueStreamToken", responses={200: schemas.StreamToken})
@with_bearer
async def stream_token(request: Request, cred: Credential) -> Response:
    """A short-lived token for /api/events?stream_token=... (EventSource sends no headers)."""
    token, exp = state_of(request).auth.issue_stream_token(cred)
    expires_at = datetime.fromtimestamp(exp, UTC)
    return respond(schemas.StreamToken(stream_token=token, expires_at=expires_at))
