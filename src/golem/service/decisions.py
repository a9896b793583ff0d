"""Deciding a call as an approver: the 404/403 checks, edited arguments, store refusals."""

from __future__ import annotations

import json
from typing import Any

from golem.durable.store import (
    CallNotFound,
    Decision,
    DecisionConflict,
    DecisionRecord,
    InvalidDecision,
    PendingCallRecord,
    RunNotFound,
    RunNotPending,
    RunRecord,
)
from golem.service.auth import Credential
from golem.service.bodies import check_json_value, parse_json
from golem.service.errors import ApiError, store_error
from golem.service.runs import load_run
from golem.service.schemas import DecisionBody
from golem.service.state import ServiceState, require_store

# Internals of `golem.service.create_app`; nothing here is public API.
__all__: list[str] = []


def to_decision(body: DecisionBody) -> Decision:
    """The store decision of a request body; `ApiError(422)` for fields that do not fit."""
    if body.decision != "deny" and body.reason is not None:
        raise ApiError(422, "invalid_request", "'reason' is only accepted with deny")
    if body.decision != "external" and body.result is not None:
        raise ApiError(422, "invalid_request", "'result' is only accepted with external")
    if body.decision == "approve":
        return Decision.approve()
    if body.decision == "deny":
        return Decision.deny(body.reason or "")
    if body.result is None:
        raise ApiError(422, "invalid_request", "external needs 'result' (a string)")
    return Decision.external(body.result)


async def decide_call(
    state: ServiceState, cred: Credential, run_id: str, call_id: str, decision: Decision
) -> tuple[DecisionRecord, RunRecord]:
    """Record `decision` as `cred`'s identity after the 404/403 checks; map store refusals."""
    await _decidable(state, cred, run_id, call_id)
    store = require_store(state)
    identity = cred.approver.identity
    try:
        record = await store.decide(run_id, call_id, decision, decided_by=identity)
    except (RunNotFound, CallNotFound, DecisionConflict, RunNotPending, InvalidDecision) as exc:
        raise store_error(exc) from None
    if record.decided_by != identity:
        # the store's no-op repeat of another approver's decision: only its maker gets 200
        raise ApiError(
            409,
            "decision_conflict",
            f'call "{call_id}" of run "{run_id}" is already decided ({record.kind.value} by '
            f"{record.decided_by})",
        )
    return record, await store.get_run(run_id)


async def _decidable(
    state: ServiceState, cred: Credential, run_id: str, call_id: str
) -> tuple[RunRecord, PendingCallRecord]:
    """The run and its call `call_id`, after the 404/403 checks of a decision."""
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
    return run, call


def _schema_problems(args: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    """Required, unknown and mistyped fields of `args` for a tool's JSON schema (a first
    check for the form; the agent validates fully before the re-run)."""
    props: dict[str, Any] = schema.get("properties", {}) or {}
    problems = [f"'{k}' is required" for k in schema.get("required", []) if k not in args]
    if schema.get("additionalProperties") is False:
        problems += [f"'{k}' is not a field of this tool" for k in args if k not in props]
    types: dict[str, type | tuple[type, ...]] = {
        "string": str,
        "integer": int,
        "number": (int, float),
        "boolean": bool,
        "array": list,
        "object": dict,
        "null": type(None),
    }
    for key, value in args.items():
        want = props.get(key, {}).get("type")
        names = [want] if isinstance(want, str) else want if isinstance(want, list) else []
        if not names:
            continue
        ok = any(
            isinstance(value, types.get(n, object))
            and not (n in ("integer", "number") and isinstance(value, bool))
            for n in names
        )
        if not ok:
            problems.append(f"'{key}' must be {' or '.join(names)}")
    return problems


async def edited_approval(
    state: ServiceState, cred: Credential, run_id: str, call_id: str, text: str
) -> Decision:
    """An approval with the arguments an approver edited (plain when unchanged); 422 for
    text that is not a JSON object or does not fit the tool's schema, 404/403 as usual."""
    run, call = await _decidable(state, cred, run_id, call_id)  # 403 before any 422
    try:
        value = parse_json(text)
    except ApiError as exc:
        raise ApiError(422, "invalid_request", f"the edited arguments: {exc.message}") from None
    if not isinstance(value, dict):
        raise ApiError(422, "invalid_request", "the edited arguments must be a JSON object")
    check_json_value(value, "the edited arguments")
    try:
        original = json.loads(call.args)
    except (ValueError, RecursionError):
        original = None
    if _same_json(value, original):
        return Decision.approve()
    entry = state.registry.get(run.agent)
    tool = entry.agent.tools.get(call.tool_name) if entry is not None else None
    if tool is not None:
        problems = _schema_problems(value, tool.schema)
        if problems:
            raise ApiError(
                422,
                "invalid_args",
                f"the edited arguments do not fit {call.tool_name}: " + "; ".join(problems),
            )
    try:
        return Decision.approve(args=value)
    except InvalidDecision as exc:
        raise store_error(exc) from None


def _same_json(a: Any, b: Any) -> bool:
    """Whether two parsed JSON values are the same JSON, types included (`==` takes `true`
    for `1`, `1.0` for `1`)."""
    try:
        return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    except (TypeError, ValueError):
        return False
