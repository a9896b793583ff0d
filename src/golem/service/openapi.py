"""The OpenAPI 3.1 document of the service, kept by hand next to the route table.

`tests/service/test_openapi.py` checks that it is valid and that every route of
`golem.service.app.ROUTES` is described (and nothing else), so the two cannot drift apart.
"""

from __future__ import annotations

from typing import Any

__all__ = ["openapi_document"]

_REF = "#/components/schemas/"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": _REF + name}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _err(description: str) -> dict[str, Any]:
    return _json(_ref("Error"), description)


def _html(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"text/html": {"schema": {"type": "string"}}}}


def _redirect(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "headers": {"Location": {"schema": {"type": "string"}, "description": "where to go"}},
    }


def _param(name: str, where: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    p: dict[str, Any] = {"name": name, "in": where, "description": description, "schema": schema}
    if where == "path":
        p["required"] = True
    return p


_STR = {"type": "string"}
_NSTR = {"type": ["string", "null"]}
_TIME = {"type": "string", "format": "date-time"}
_NTIME = {"type": ["string", "null"], "format": "date-time"}
_STATUSES = ["pending", "ready", "running", "completed", "paused", "failed", "interrupted"]
_RUN_ID = _param("run_id", "path", "The run ID.", _STR)
_CALL_ID = _param("call_id", "path", "The tool call ID.", _STR)
_AGENT_Q = _param("agent", "query", "Only runs of this agent.", _STR)
_TOOL_Q = _param("tool", "query", "Only runs with a pending call of this tool.", _STR)
_LIMIT = _param(
    "limit", "query", "At most this many.", {"type": "integer", "minimum": 1, "maximum": 500}
)

_AUTH_ERRORS = {
    "401": _err("No or unknown bearer token."),
}
_FORM_ERRORS = {
    "401": _html("The session has ended."),
    "403": _html("Wrong CSRF token, or the approver may not do this."),
    "413": _err("The body is too large."),
    "415": _html("The form is not urlencoded."),
    "422": _html("A field is missing or invalid."),
}

_SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["code", "message"],
                "properties": {
                    "code": {
                        "type": "string",
                        "description": "Stable machine-readable code, e.g. run_not_found, "
                        "decision_conflict, call_expired, run_not_pending, invalid_request, "
                        "malformed_json, payload_too_large, unauthenticated, forbidden.",
                    },
                    "message": {"type": "string"},
                    "details": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "loc": {"type": "array", "items": _STR},
                                "message": _STR,
                            },
                        },
                    },
                },
            }
        },
    },
    "Decision": {
        "type": "object",
        "required": ["decision", "reason", "result", "decided_by", "decided_at"],
        "properties": {
            "decision": {"enum": ["approve", "deny", "external"]},
            "reason": {"type": "string", "description": 'Denial reason ("expired" for expiry).'},
            "result": {"type": "string", "description": "External result text."},
            "decided_by": {"type": "string", "description": "The deciding identity."},
            "decided_at": _TIME,
        },
    },
    "Call": {
        "type": "object",
        "required": ["run_id", "call_id", "agent", "kind", "tool_name", "args", "decision"],
        "properties": {
            "run_id": _STR,
            "call_id": _STR,
            "agent": _STR,
            "run_status": {"enum": _STATUSES},
            "position": {"type": "integer"},
            "kind": {"enum": ["approval", "external"]},
            "tool_name": _STR,
            "args": {"type": "string", "description": "Raw JSON text as the model produced it."},
            "reason": {"type": "string", "description": "Why the tool deferred."},
            "created_at": _TIME,
            "deadline": _NTIME,
            "decision": {"oneOf": [_ref("Decision"), {"type": "null"}]},
        },
    },
    "Outcome": {
        "type": "object",
        "required": ["status"],
        "properties": {
            "status": {"enum": ["completed", "paused", "failed", "interrupted"]},
            "output": {"description": "The final output (any JSON value)."},
            "error": {"type": "string"},
        },
    },
    "Run": {
        "type": "object",
        "required": ["id", "agent", "conversation_id", "status", "calls", "created_at"],
        "properties": {
            "id": _STR,
            "agent": _STR,
            "conversation_id": _STR,
            "status": {"enum": _STATUSES},
            "started_by": _STR,
            "created_at": _TIME,
            "updated_at": _TIME,
            "expires_at": _NTIME,
            "parent_run_id": _NSTR,
            "child_run_id": _NSTR,
            "deps_ref": {"description": "The JSON deps reference the run was started with."},
            "lease_owner": _NSTR,
            "calls": {"type": "array", "items": _ref("Call")},
            "outcome": {"oneOf": [_ref("Outcome"), {"type": "null"}]},
        },
    },
    "AuditEntry": {
        "type": "object",
        "required": ["id", "run_id", "at", "actor", "action", "detail"],
        "properties": {
            "id": {"type": "integer", "description": "Global cursor (see /api/events)."},
            "run_id": _STR,
            "at": _TIME,
            "actor": _STR,
            "action": {
                "enum": [
                    "created",
                    "decided",
                    "expired",
                    "ready",
                    "claimed",
                    "completed",
                    "paused",
                    "failed",
                    "interrupted",
                ]
            },
            "detail": {"type": "object"},
        },
    },
    "RunDetail": {
        "allOf": [
            _ref("Run"),
            {
                "type": "object",
                "required": ["messages", "audit"],
                "properties": {
                    "messages": {
                        "type": "array",
                        "description": "The conversation in golem's history JSON form.",
                        "items": {"type": "object"},
                    },
                    "audit": {"type": "array", "items": _ref("AuditEntry")},
                },
            },
        ]
    },
    "StartRun": {
        "type": "object",
        "required": ["agent", "prompt"],
        "additionalProperties": False,
        "properties": {
            "agent": {"type": "string", "minLength": 1},
            "prompt": {"type": "string", "minLength": 1},
            "deps_ref": {"description": "JSON value the agent's deps factory turns into deps."},
            "expires_in": {
                "type": ["number", "null"],
                "exclusiveMinimum": 0,
                "description": "Seconds until undecided calls are denied as expired.",
            },
        },
    },
    "DecisionRequest": {
        "type": "object",
        "required": ["decision"],
        "additionalProperties": False,
        "properties": {
            "decision": {"enum": ["approve", "deny", "external"]},
            "reason": {"type": "string", "description": "Only with deny."},
            "result": {"type": "string", "description": "Required with external, only there."},
        },
    },
    "Agent": {
        "type": "object",
        "required": ["name", "description", "can_start"],
        "properties": {"name": _STR, "description": _STR, "can_start": {"type": "boolean"}},
    },
}


def _op(
    op_id: str,
    summary: str,
    responses: dict[str, Any],
    *,
    tag: str = "api",
    params: list[dict[str, Any]] | None = None,
    body: dict[str, Any] | None = None,
    security: list[dict[str, list[str]]] | None = None,
) -> dict[str, Any]:
    op: dict[str, Any] = {
        "operationId": op_id,
        "summary": summary,
        "tags": [tag],
        "responses": responses,
    }
    if params:
        op["parameters"] = params
    if body is not None:
        op["requestBody"] = body
    if security is not None:
        op["security"] = security
    return op


def _form_body(fields: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "required": True,
        "content": {
            "application/x-www-form-urlencoded": {
                "schema": {"type": "object", "required": required, "properties": fields}
            }
        },
    }


def _paths() -> dict[str, Any]:
    public: list[dict[str, list[str]]] = []
    session: list[dict[str, list[str]]] = [{"session": []}]
    return {
        "/api/health": {
            "get": _op(
                "health",
                "Liveness and store reachability (no token needed).",
                {
                    "200": _json({"type": "object"}, "The service and its store are up."),
                    "503": _json({"type": "object"}, "The store is unreachable or not open."),
                },
                security=public,
            )
        },
        "/api/openapi.json": {
            "get": _op(
                "openapi",
                "This document.",
                {"200": _json({"type": "object"}, "The OpenAPI 3.1 document.")},
                security=public,
            )
        },
        "/api/whoami": {
            "get": {
                "operationId": "whoami",
                "summary": "The identity behind the bearer token and what it may do.",
                "security": [{"bearer": []}],
                "responses": {"200": _json({"type": "object"}, "The approver."), **_AUTH_ERRORS},
            }
        },
        "/api/agents": {
            "get": _op(
                "listAgents",
                "The registered agents the caller may see.",
                {
                    "200": _json(
                        {
                            "type": "object",
                            "properties": {"agents": {"type": "array", "items": _ref("Agent")}},
                        },
                        "Agents.",
                    ),
                    **_AUTH_ERRORS,
                },
            )
        },
        "/api/runs": {
            "get": _op(
                "listRuns",
                "Runs the caller may see, newest first, filtered by status, agent and tool.",
                {
                    "200": _json(
                        {
                            "type": "object",
                            "properties": {"runs": {"type": "array", "items": _ref("Run")}},
                        },
                        "Runs.",
                    ),
                    **_AUTH_ERRORS,
                    "422": _err("A filter value is invalid."),
                },
                params=[
                    _param("status", "query", "Only runs in this state.", {"enum": _STATUSES}),
                    _AGENT_Q,
                    _TOOL_Q,
                    _LIMIT,
                    _param("offset", "query", "Skip this many.", {"type": "integer", "minimum": 0}),
                ],
            ),
            "post": _op(
                "startRun",
                "Run an agent once; a pause is saved as a pending run.",
                {
                    "201": _json(
                        {"type": "object", "properties": {"run": _ref("Run")}},
                        "The saved run: pending, completed or failed.",
                    ),
                    "400": _err("The body is not JSON."),
                    **_AUTH_ERRORS,
                    "403": _err("The approver may not start runs of this agent."),
                    "413": _err("The body is too large."),
                    "422": _err("Missing or invalid fields, or an unknown agent."),
                },
                body={
                    "required": True,
                    "content": {"application/json": {"schema": _ref("StartRun")}},
                },
            ),
        },
        "/api/calls": {
            "get": _op(
                "listPendingCalls",
                "Undecided calls of pending runs that the caller may decide, oldest first.",
                {
                    "200": _json(
                        {
                            "type": "object",
                            "properties": {"calls": {"type": "array", "items": _ref("Call")}},
                        },
                        "Pending calls.",
                    ),
                    **_AUTH_ERRORS,
                    "422": _err("A filter value is invalid."),
                },
                params=[
                    _AGENT_Q,
                    _param("tool", "query", "Only calls of this tool.", _STR),
                    _param(
                        "kind",
                        "query",
                        "Only calls of this kind.",
                        {"enum": ["approval", "external"]},
                    ),
                    _LIMIT,
                ],
            )
        },
        "/api/runs/{run_id}": {
            "get": _op(
                "getRun",
                "A run with its calls, conversation and audit log.",
                {
                    "200": _json(
                        {"type": "object", "properties": {"run": _ref("RunDetail")}}, "The run."
                    ),
                    **_AUTH_ERRORS,
                    "403": _err("The approver may not see runs of this agent."),
                    "404": _err("No such run."),
                },
                params=[_RUN_ID],
            )
        },
        "/api/runs/{run_id}/calls/{call_id}/decision": {
            "post": _op(
                "decideCall",
                "Approve, deny or answer one pending call as the caller's identity.",
                {
                    "200": _json(
                        {
                            "type": "object",
                            "properties": {"decision": _ref("Decision"), "run": _ref("Run")},
                        },
                        "The recorded decision (the same decision again is a no-op).",
                    ),
                    "400": _err("The body is not JSON."),
                    **_AUTH_ERRORS,
                    "403": _err("The approver may not decide calls of this agent or tool."),
                    "404": _err("No such run, or no such call in it."),
                    "409": _err(
                        "The call is already decided differently (decision_conflict), its "
                        "deadline passed (call_expired), or the run is no longer pending "
                        "(run_not_pending)."
                    ),
                    "413": _err("The body is too large."),
                    "422": _err(
                        "Missing or invalid fields, or a decision that does not fit the call."
                    ),
                },
                params=[_RUN_ID, _CALL_ID],
                body={
                    "required": True,
                    "content": {"application/json": {"schema": _ref("DecisionRequest")}},
                },
            )
        },
        "/api/events": {
            "get": _op(
                "streamChanges",
                "Server-sent events (`event: change`) for every audit entry the caller may see.",
                {
                    "200": {
                        "description": "An endless text/event-stream; `id` is the audit cursor.",
                        "content": {"text/event-stream": {"schema": {"type": "string"}}},
                    },
                    **_AUTH_ERRORS,
                    "422": _err("The cursor is not a non-negative integer."),
                },
                params=[
                    _param(
                        "cursor",
                        "query",
                        "Start after this audit ID (default: now).",
                        {"type": "integer", "minimum": 0},
                    ),
                    _param("Last-Event-ID", "header", "Set by EventSource on reconnect.", _STR),
                ],
                security=[{"bearer": []}, {"streamToken": []}, {"session": []}],
            )
        },
        "/api/stream-token": {
            "post": _op(
                "issueStreamToken",
                "A short-lived token for /api/events?stream_token=... (EventSource sends no headers).",
                {
                    "200": _json(
                        {
                            "type": "object",
                            "required": ["stream_token", "expires_at"],
                            "properties": {"stream_token": _STR, "expires_at": _TIME},
                        },
                        "The token and its expiry.",
                    ),
                    **_AUTH_ERRORS,
                },
            )
        },
        "/": {
            "get": _op(
                "inbox",
                "The inbox page: pending calls the signed-in approver may decide.",
                {"200": _html("The page."), "303": _redirect("Not signed in: to /login.")},
                tag="inbox",
                params=[
                    _param("agent", "query", "Only this agent.", _STR),
                    _param("tool", "query", "Only this tool.", _STR),
                    _param("kind", "query", "Only this kind.", _STR),
                ],
                security=session,
            )
        },
        "/login": {
            "get": _op(
                "loginPage",
                "The sign-in form.",
                {"200": _html("The form."), "303": _redirect("Already signed in.")},
                tag="inbox",
                params=[_param("next", "query", "Local path to return to.", _STR)],
                security=public,
            ),
            "post": _op(
                "login",
                "Exchange a token for a signed session cookie.",
                {
                    "303": _redirect("Signed in; the cookie is set."),
                    "401": _html("Unknown token."),
                    "413": _err("The body is too large."),
                    "415": _html("The form is not urlencoded."),
                },
                tag="inbox",
                body=_form_body({"token": _STR, "next": _STR}, ["token"]),
                security=public,
            ),
        },
        "/logout": {
            "post": _op(
                "logout",
                "End the session.",
                {"303": _redirect("Signed out."), **_FORM_ERRORS},
                tag="inbox",
                body=_form_body({"csrf": _STR}, ["csrf"]),
                security=session,
            )
        },
        "/runs": {
            "get": _op(
                "runsPage",
                "The runs page.",
                {"200": _html("The page."), "303": _redirect("Not signed in: to /login.")},
                tag="inbox",
                params=[
                    _param("status", "query", "Only this state.", _STR),
                    _param("agent", "query", "Only this agent.", _STR),
                ],
                security=session,
            ),
            "post": _op(
                "startRunForm",
                "Start a run from the inbox form.",
                {"303": _redirect("To the new run's page."), **_FORM_ERRORS},
                tag="inbox",
                body=_form_body(
                    {"csrf": _STR, "agent": _STR, "prompt": _STR, "deps_ref": _STR},
                    ["csrf", "agent", "prompt"],
                ),
                security=session,
            ),
        },
        "/runs/{run_id}": {
            "get": _op(
                "runPage",
                "A run's page: outcome, calls, conversation, audit trail.",
                {
                    "200": _html("The page."),
                    "303": _redirect("Not signed in: to /login."),
                    "403": _html("The approver may not see this run."),
                    "404": _html("No such run."),
                },
                tag="inbox",
                params=[_RUN_ID],
                security=session,
            )
        },
        "/runs/{run_id}/calls/{call_id}/decision": {
            "post": _op(
                "decideForm",
                "Decide a call from an inbox form.",
                {
                    "303": _redirect("Back to `next` with a notice."),
                    **_FORM_ERRORS,
                    "404": _html("No such run or call."),
                    "409": _html("Already decided differently, expired, or not pending."),
                },
                tag="inbox",
                params=[_RUN_ID, _CALL_ID],
                body=_form_body(
                    {
                        "csrf": _STR,
                        "decision": {"enum": ["approve", "deny", "external"]},
                        "reason": _STR,
                        "result": _STR,
                        "next": _STR,
                    },
                    ["csrf", "decision"],
                ),
                security=session,
            )
        },
    }


def openapi_document(version: str) -> dict[str, Any]:
    """Return the OpenAPI 3.1 document of every route (`version` is golem's version)."""
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "golem approval service",
            "version": version,
            "description": "Start agent runs, decide their paused tool calls, follow changes. "
            'Errors answer {"error": {"code", "message"}} and change nothing.',
        },
        "servers": [{"url": "/"}],
        "tags": [
            {"name": "api", "description": "The JSON API (bearer tokens)."},
            {"name": "inbox", "description": "The web inbox (session cookie, forms)."},
        ],
        "security": [{"bearer": []}],
        "paths": _paths(),
        "components": {
            "schemas": _SCHEMAS,
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "An approver token (GOLEM_APPROVERS).",
                },
                "streamToken": {
                    "type": "apiKey",
                    "in": "query",
                    "name": "stream_token",
                    "description": "From POST /api/stream-token; only for /api/events.",
                },
                "session": {
                    "type": "apiKey",
                    "in": "cookie",
                    "name": "golem_session",
                    "description": "The inbox session set by POST /login.",
                },
            },
        },
    }
