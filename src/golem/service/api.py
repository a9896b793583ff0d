"""The JSON API under `/api`: runs, pending calls, decisions, agents, health.

Every error answers `{"error": {"code": ..., "message": ...}}` (plus `details` for
validation errors) and changes nothing. Checks run in a fixed order, so the first problem
wins: 401 (no or unknown token) → 413 (body too large, see `app.py`) → 400/422 (malformed
or invalid body) → 404 (unknown run, or one of an agent the caller may not see: the two
are one answer) → 404 (unknown call) → 403 (tool not allowed) → 409/422 (the store
refused the decision).
"""

from __future__ import annotations

import inspect
import json
import math
import uuid
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar, cast
from urllib.parse import quote

from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from golem.durable.store import (
    AuditEntry,
    CallExpired,
    CallKind,
    CallNotFound,
    CorruptRecord,
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
from golem.durable.worker import AgentRegistry, start_run
from golem.errors import StoreError
from golem.seal import SealKey
from golem.service import schemas
from golem.service.auth import AuthConfig, Credential, LoginLimiter, TokenFailures
from golem.service.openapi import operation
from golem.service.schemas import MAX_LIST_LIMIT, DecisionBody

# The handlers behind `golem.service.create_app`; nothing here is public API.
__all__: list[str] = []

MAX_JSON_DEPTH = 64
"""Deepest nesting of arrays and objects accepted in a request body."""


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
    undo_seconds: float = 5.0
    """The inbox's undo window before a decision is sent (0: send at once; API unaffected)."""
    max_streams_per_identity: int = 8
    """Open event streams allowed per approver identity."""
    stream_recheck: float = 5.0
    """Seconds between re-checks of an open stream's session or stream token."""
    open_streams: dict[str, int] = field(default_factory=dict)
    """Identity → event streams open now."""
    login_limiter: LoginLimiter = field(default_factory=LoginLimiter)
    """Sign-in attempts allowed per client address."""
    token_failures: TokenFailures = field(default_factory=TokenFailures)
    """Wrong bearer tokens allowed per client address (429 beyond, for a while)."""
    presenters: dict[str, Any] = field(default_factory=dict)
    """Tool name → presenter of its calls in the inbox (`golem.service.views.Presentation`)."""
    notifier: Any = None
    """The webhook `Notifier` while the app runs with webhooks (else None)."""
    seal_key: SealKey | None = None
    """The workers' seal key: runs started here are saved with every pending call sealed."""


class ApiError(Exception):
    """A 4xx/5xx answer with a JSON error body; raised by handlers, rendered by `app.py`."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        details: list[dict[str, Any]] | None = None,
        *,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details
        self.headers = headers or {}

    def response(self) -> Response:
        """The JSON response for this error (`schemas.ErrorBody`)."""
        body = schemas.ErrorBody(
            error=schemas.ErrorInfo(
                code=self.code,
                message=self.message,
                details=None
                if self.details is None
                else [schemas.ErrorDetail(**d) for d in self.details],
            )
        )
        headers = dict(self.headers)
        if self.status == 401:
            headers["WWW-Authenticate"] = 'Bearer realm="golem"'
        return Response(
            body.model_dump_json(exclude_none=True),
            status_code=self.status,
            headers=headers,
            media_type="application/json",
        )


def _store_error(exc: Exception) -> ApiError:
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


def _to_decision(body: DecisionBody) -> Decision:
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


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number (numbers must be finite)")


def _quoted(text: str, limit: int = 40) -> str:
    """`text` for an error message: at most `limit` characters of it, and its length."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{_quoted(text)} is out of range (numbers must be finite)")
    return value


_MAX_INT_DIGITS = 4300
"""The longest integer Python converts by default (`sys.get_int_max_str_digits`)."""


def _int(text: str) -> int:
    if len(text.lstrip("-")) > _MAX_INT_DIGITS:
        raise ValueError(
            f"an integer of {len(text.lstrip('-'))} digits is longer than {_MAX_INT_DIGITS}"
        )
    return int(text)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object from its key-value pairs; `ValueError` when a key appears twice."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"the key {_quoted(key)!r} appears twice in one object")
            seen.add(key)
    return obj


def parse_json(raw: bytes | str) -> Any:
    """Parse a request body as strict JSON; `ApiError(400)` for anything else.

    Refuses what Python's `json` accepts but JSON does not (`NaN`, `Infinity`, numbers
    that overflow to infinity), integers longer than Python converts (4300 digits),
    nesting deep enough to exhaust the parser's stack, and an object that names a key
    twice (`{"decision": "deny", "decision": "approve"}`: parsers disagree on which one
    counts, so a proxy or log could read another decision than the one recorded), and
    bytes that are not UTF-8 (RFC 8259; Python's `json` would guess UTF-16 or UTF-32 from
    the first bytes, so a body a proxy or a log reads as garbage was a decision).
    """
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8-sig")  # a leading BOM is ignored, as RFC 8259 allows
        except UnicodeDecodeError as exc:
            raise ApiError(
                400,
                "malformed_json",
                f"request body is not UTF-8 ({exc.reason} at byte {exc.start})",
            ) from None
    try:
        return json.loads(
            raw,
            parse_constant=_refuse_constant,
            parse_float=_finite_float,
            parse_int=_int,
            object_pairs_hook=_unique_keys,
        )
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


M = TypeVar("M", bound=BaseModel)


def _invalid(exc: ValidationError) -> ApiError:
    details = [
        {"loc": [str(p) for p in e["loc"]], "message": e["msg"]}
        for e in exc.errors(include_url=False)
    ]
    fields = ", ".join(".".join(d["loc"]) or "body" for d in details)
    return ApiError(422, "invalid_request", f"invalid fields: {fields}", details)


async def _read_json(request: Request, model: type[M]) -> M:
    """Parse the request body as JSON into `model`; 400 for bad JSON, 422 for bad fields."""
    data = parse_json(await request.body())
    if not isinstance(data, dict):
        raise ApiError(422, "invalid_request", "request body must be a JSON object")
    check_json_value(data)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise _invalid(exc) from None


def read_query(request: Request, model: type[M]) -> M:
    """The query parameters as `model` (empty values count as absent); 422 when invalid."""
    params = {k: v for k, v in request.query_params.items() if v != ""}
    try:
        return model.model_validate(params)
    except ValidationError as exc:
        raise _invalid(exc) from None


def respond(
    model: BaseModel,
    status: int = 200,
    headers: dict[str, str] | None = None,
    *,
    exclude_none: bool = False,
) -> Response:
    """A JSON response of `model` (non-finite numbers as null)."""
    return Response(
        model.model_dump_json(exclude_none=exclude_none),
        status_code=status,
        headers=headers,
        media_type="application/json",
    )


# --------------------------------------------------------------------------- JSON forms


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(UTC).isoformat()


def _decision_model(d: DecisionRecord) -> schemas.DecisionOut:
    """The response model of a decision."""
    return schemas.DecisionOut(
        decision=d.kind.value,
        reason=d.reason,
        result=d.text,
        decided_by=d.decided_by,
        decided_at=d.decided_at.astimezone(UTC),
    )


def _decision_json(d: DecisionRecord | None) -> dict[str, Any] | None:
    """The JSON form of a decision (None when undecided)."""
    return None if d is None else _decision_model(d).model_dump(mode="json")


def _call_model(run: RunRecord, c: PendingCallRecord) -> schemas.Call:
    """The response model of a pending call (with its run's agent and status)."""
    return schemas.Call(
        run_id=c.run_id,
        call_id=c.call_id,
        agent=run.agent,
        run_status=run.status,
        position=c.position,
        kind=c.kind,
        tool_name=c.tool_name,
        args=c.args,
        reason=c.reason,
        created_at=run.created_at,
        deadline=c.deadline,
        decision=None if c.decision is None else _decision_model(c.decision),
    )


def _call_json(run: RunRecord, c: PendingCallRecord) -> dict[str, Any]:
    """The JSON form of a pending call (with its run's agent and status)."""
    return _call_model(run, c).model_dump(mode="json")


def _run_model(run: RunRecord) -> schemas.Run:
    """The response model of a run without its conversation and audit log."""
    outcome = None
    if run.outcome is not None:
        outcome = schemas.Outcome(
            status=run.outcome.status, output=run.outcome.output, error=run.outcome.error
        )
    return schemas.Run(
        id=run.id,
        agent=run.agent,
        conversation_id=run.conversation_id,
        status=run.status,
        started_by=run.started_by,
        created_at=run.created_at,
        updated_at=run.updated_at,
        expires_at=run.expires_at,
        parent_run_id=run.parent_run_id,
        child_run_id=run.child_run_id,
        deps_ref=run.deps_ref,
        lease_owner=run.lease_owner,
        calls=[_call_model(run, c) for c in run.calls],
        outcome=outcome,
    )


def _run_json(run: RunRecord) -> dict[str, Any]:
    """The JSON form of a run without its conversation and audit log."""
    return _run_model(run).model_dump(mode="json")


def entry_id(e: AuditEntry, secret: bytes | None) -> int | str:
    """The entry's ID as a caller is shown it: its audit ID (`secret` None: a caller who
    sees every agent), else its reference sealed under `secret` (ADR 0077)."""
    if secret is None:
        return e.id
    from golem.service.limits import seal_entry

    return seal_entry(secret, e.id)


def shown_to(cred: Credential, secret: bytes) -> bytes | None:
    """`entry_id`'s `secret` for `cred`: None when it sees every agent."""
    return None if cred.approver.agents is None else secret


def audit_model(e: AuditEntry, secret: bytes | None = None) -> schemas.AuditItem:
    """The response model of an audit entry (`secret`: see `entry_id`)."""
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
    """The response model of a run with its conversation and audit log."""
    return schemas.RunDetail(
        **dict(_run_model(run)),
        messages=json.loads(run.conversation) if run.conversation else [],
        audit=[audit_model(e, secret) for e in audit],
    )


def run_detail_json(run: RunRecord, audit: list[AuditEntry]) -> dict[str, Any]:
    """The JSON form of a run with its conversation (history JSON objects) and audit log."""
    return _run_detail_model(run, audit).model_dump(mode="json")


# --------------------------------------------------------------------------- operations


def require_store(state: ServiceState) -> Store:
    """The store, or 503 while it is still being opened."""
    if state.store is None:
        raise ApiError(503, "unavailable", "the store is not open yet")
    return state.store


async def load_run(state: ServiceState, cred: Credential, run_id: str) -> RunRecord:
    """The run `run_id` if it exists and the approver may see its agent; else 404.

    A run the approver may not see is answered as one that does not exist, by the same
    code: same status, code, message and headers, so no answer tells that a run with
    that ID exists (ADR 0069); the store reads it with the same statements as a missing
    one (ADR 0073).
    """
    try:
        run = await require_store(state).get_run(run_id, agents=cred.approver.agents)
        if not cred.approver.may_see(run.agent):
            raise RunNotFound(run_id)
    except RunNotFound:
        raise _store_error(RunNotFound(run_id)) from None
    except CorruptRecord as exc:
        # its agent cannot be read either: only an approver who sees every agent learns
        # that it exists; to anyone else it is a run they may not see (ADR 0072)
        if cred.approver.agents is not None:
            raise _store_error(RunNotFound(run_id)) from None
        raise ApiError(
            409, "run_unreadable", f"{exc}; an operator must repair the stored row"
        ) from None
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
    if len(names) == 1:  # one listing: the store skips `offset` runs without loading them
        return await store.list_runs(
            status=status, agent=names[0], tool_name=tool, limit=limit, offset=offset
        )
    # Several agents: one keyset-paged listing of all of them, newest first, skipping
    # `offset` runs a page at a time, so memory holds one page however deep the offset.
    skip, after = offset, None
    out: list[RunRecord] = []
    while len(out) < limit:
        page = await store.list_runs_page(
            status=status,
            agent=[n for n in names if n is not None],
            tool_name=tool,
            after=after,
            limit=_SKIP_PAGE if skip else limit - len(out),
            newest_first=True,
        )
        items = page.items[skip:]
        skip = max(0, skip - len(page.items))
        out += items[: limit - len(out)]
        if page.next_cursor is None:
            break
        after = page.next_cursor
    return out


_SKIP_PAGE = 500
"""Runs read per page while skipping to a deep offset (`visible_runs`)."""


async def _count(store: Store, **filters: Any) -> int:
    """How many runs match `filters`, found with about 2·log2(n) one-row lookups."""

    async def at_least(n: int) -> bool:
        return n == 0 or bool(await store.list_runs(limit=1, offset=n - 1, **filters))

    high = 1
    while await at_least(high):
        high *= 2
    low = high // 2  # at_least(low) holds, at_least(high) does not
    while high - low > 1:
        mid = (low + high) // 2
        if await at_least(mid):
            low = mid
        else:
            high = mid
    return low


async def _oldest_runs(store: Store, *, skip: int, limit: int, **filters: Any) -> list[RunRecord]:
    """The matching runs from the `skip`-th oldest on, oldest first, at most `limit`.

    `list_runs` pages newest first; counting first lets the oldest page be read directly,
    loading only the runs on it.
    """
    count = await _count(store, **filters)
    end = count - skip
    if end <= 0:
        return []
    start = max(0, end - limit)
    runs = await store.list_runs(limit=end - start, offset=start, **filters)
    return list(reversed(runs))


PendingCalls = list[tuple[RunRecord, PendingCallRecord]]


@dataclass(frozen=True)
class PendingPage:
    """One page of pending calls, oldest run first, and the cursor of the next page."""

    calls: PendingCalls
    """The undecided calls the approver may decide, in run-age order."""
    next_cursor: str | None
    """Pass as `after` for the next page; None on the last page."""


def _names(cred: Credential, agent: str | None) -> list[str | None]:
    if agent is not None:
        return [agent] if cred.approver.may_see(agent) else []
    allowed = cred.approver.agents
    return [None] if allowed is None else [*sorted(allowed)]


async def _oldest_page(
    store: Store, names: list[str | None], tool: str | None, limit: int, after: str | None
) -> tuple[list[RunRecord], str | None]:
    """Pending runs oldest first from `after`: keyset paging where the store has it."""
    keyset = getattr(store, "list_runs_page", None)
    if keyset is not None:  # Store.list_runs_page: reads only the page's runs
        agents: Any = names[0] if len(names) == 1 else names
        try:
            page = await keyset(
                status=RunStatus.PENDING, agent=agents, tool_name=tool, after=after, limit=limit
            )
        except ValueError as exc:
            raise ApiError(422, "invalid_request", f"'after': {exc}") from None
        return list(page.items), page.next_cursor
    skip = 0
    if after is not None:  # this fallback's cursor: "o<runs to skip>"
        if not (after.startswith("o") and after[1:].isdigit() and len(after) < 12):
            raise ApiError(422, "invalid_request", "'after' is not a cursor of this listing")
        skip = int(after[1:])
    runs: list[RunRecord] = []
    for name in names:
        runs += await _oldest_runs(
            store,
            skip=0 if len(names) > 1 else skip,
            limit=limit + 1 + (skip if len(names) > 1 else 0),
            status=RunStatus.PENDING,
            agent=name,
            tool_name=tool,
        )
    runs.sort(key=lambda r: (r.created_at, r.id))
    runs = runs[skip : skip + limit + 1] if len(names) > 1 else runs
    more = len(runs) > limit
    return runs[:limit], f"o{skip + limit}" if more else None


async def pending_page(
    state: ServiceState,
    cred: Credential,
    *,
    agent: str | None = None,
    tool: str | None = None,
    kind: CallKind | None = None,
    limit: int = MAX_LIST_LIMIT,
    after: str | None = None,
) -> PendingPage:
    """Undecided calls of pending runs that the approver may decide, oldest run first.

    Pages by run: `limit` runs a page, from the cursor `after` (None: the oldest), so the
    longest-waiting calls are on the first page however many runs are pending.

    Raises:
        ApiError: 422 for a cursor this listing did not return.
    """
    names = _names(cred, agent)
    if not names:
        return PendingPage([], None)
    runs, nxt = await _oldest_page(require_store(state), names, tool, limit, after)
    out: PendingCalls = []
    for run in runs:
        for c in run.undecided:
            if tool is not None and c.tool_name != tool:
                continue
            if kind is not None and c.kind != kind:
                continue
            if cred.approver.may_decide(run.agent, c.tool_name):
                out.append((run, c))
    return PendingPage(out, nxt)


async def _pending_calls(
    state: ServiceState,
    cred: Credential,
    *,
    agent: str | None = None,
    tool: str | None = None,
    kind: CallKind | None = None,
    limit: int = MAX_LIST_LIMIT,
) -> PendingCalls:
    """The first page of `pending_page` (the `limit` oldest pending runs' calls)."""
    page = await pending_page(state, cred, agent=agent, tool=tool, kind=kind, limit=limit)
    return page.calls


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
        raise _store_error(exc) from None
    if record.decided_by != identity:
        # The store takes the same decision again from anyone as a no-op and returns the
        # recorded one: another approver decided first (say, at the same moment). Only
        # the approver who decided gets 200 for it, so a repeat is safe to send and no
        # one is told they decided what someone else did.
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
        raise _store_error(exc) from None
    if not cred.approver.may_decide(run.agent, call.tool_name):
        raise ApiError(
            403,
            "forbidden",
            f'{cred.approver.identity} may not decide calls of tool "{call.tool_name}"',
        )
    return run, call


def _schema_problems(args: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    """What is wrong with `args` for a tool's JSON schema: required, unknown and mistyped fields.

    A first check in the service, so the approver sees the problem on the form; the agent
    validates edited arguments fully before the approved re-run.
    """
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
    """An approval with the arguments an approver edited (plain approval when unchanged).

    Raises:
        ApiError: 422 when the text is not a JSON object, does not fit the tool's schema,
            or the store cannot record edited arguments; 404/403 as for any decision.
    """
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
    approve: Any = Decision.approve
    if "args" not in inspect.signature(approve).parameters:
        raise ApiError(
            422, "unsupported", "this store cannot record edited arguments yet: approve as is"
        )
    try:
        decision: Decision = approve(args=value)
    except InvalidDecision as exc:
        raise _store_error(exc) from None
    return decision


def _same_json(a: Any, b: Any) -> bool:
    """Whether two parsed JSON values are the same JSON, types included.

    Python's `==` takes `true` for `1`, `false` for `0`, `1.0` for `1` and `-0.0` for `0`:
    an approver who changed one into the other would see the edit dropped.
    """
    try:
        return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    except (TypeError, ValueError):
        return False


_MICROSECOND = timedelta(microseconds=1)


IDEMPOTENCY_KEY_MAX = 200
"""The longest `Idempotency-Key` a start accepts."""

_IDEMPOTENT_RUNS = uuid.UUID("5c0ae1a2-6d2e-4f59-9a53-0a7c1c1d6f11")
"""The UUIDv5 namespace of run IDs derived from an approver's idempotency key."""


def _idempotent_run_id(identity: str, key: str) -> str:
    """The run ID a start with `Idempotency-Key: key` by `identity` saves under: the same
    for every repeat of that start, distinct across approvers (a key names one caller's
    request, so another approver's equal key is another run)."""
    return str(uuid.uuid5(_IDEMPOTENT_RUNS, f"{identity}\x00{key}"))


def _request_idempotency_key(request: Request) -> str | None:
    """The request's `Idempotency-Key` header (None without one).

    Raises:
        ApiError: 422 for an empty key or one longer than `IDEMPOTENCY_KEY_MAX`.
    """
    key = request.headers.get("idempotency-key")
    if key is not None and not 0 < len(key) <= IDEMPOTENCY_KEY_MAX:
        raise ApiError(
            422,
            "invalid_request",
            f"Idempotency-Key must be 1 to {IDEMPOTENCY_KEY_MAX} characters, got {len(key)}",
        )
    return key


class _Lookups:
    """The store as `start_run` uses it, noting whether a lookup found the run `run_id`.

    A keyed start's only read of its run is `start_run`'s own lookup: the run it returns
    is an earlier start's (a replay) exactly when that lookup found it — before running
    the agent, or after losing the race to save to a concurrent repeat.
    """

    def __init__(self, store: Store, run_id: str | None) -> None:
        self._store = store
        self._run_id = run_id
        self.found = False
        """Whether `get_run(run_id)` returned a run."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def get_run(self, run_id: str, *, agents: Collection[str] | None = None) -> RunRecord:
        run = await self._store.get_run(run_id, agents=agents)
        if run_id == self._run_id:
            self.found = True
        return run


async def start_for(
    state: ServiceState,
    cred: Credential,
    agent: str,
    prompt: str,
    deps_ref: Any = None,
    expires_in: float | None = None,
    key: str | None = None,
) -> tuple[RunRecord, bool]:
    """Start a run of `agent` as `cred`'s identity after the 422/403 checks; the run and
    whether it is the one an earlier start with the same idempotency `key` saved."""
    if agent not in state.registry or not cred.approver.may_see(agent):
        # an agent the caller may not see is answered as one that does not exist: the
        # answer is no oracle of other teams' agents' names
        raise ApiError(
            422,
            "unknown_agent",
            f'no agent named "{agent}" is registered for {cred.approver.identity}',
        )
    if not cred.approver.may_start(agent):
        raise ApiError(
            403, "forbidden", f'{cred.approver.identity} may not start runs of agent "{agent}"'
        )
    seconds = expires_in if expires_in is not None else state.default_expires_in
    # A deadline counts whole microseconds: a positive `expires_in` shorter than one (5e-324)
    # is one, rather than a zero the store refuses.
    expiry = None if seconds is None else max(timedelta(seconds=seconds), _MICROSECOND)
    run_id = None if key is None else _idempotent_run_id(cred.approver.identity, key)
    store = _Lookups(require_store(state), run_id)
    try:
        run = await start_run(
            cast(Store, store),
            state.registry,
            agent,
            prompt,
            deps_ref=deps_ref,
            started_by=cred.approver.identity,
            expires_in=expiry,
            seal_key=state.seal_key,
            run_id=run_id,
        )
        return run, store.found
    except StoreError:
        raise
    except ValueError as exc:
        if not store.found:
            raise _invalid_deps(agent, exc) from None
        # start_run found a run under the key's ID and compared it: another start
        raise ApiError(
            409,
            "idempotency_key_reused",
            "this Idempotency-Key already started a run with another agent or prompt; use "
            "a new key for a different start",
        ) from None
    except Exception as exc:  # the run itself cannot raise: a failure is a FAILED run
        # What is left is the agent's deps_factory refusing deps_ref: nothing was saved.
        raise _invalid_deps(agent, exc) from None


def _invalid_deps(agent: str, exc: Exception) -> ApiError:
    return ApiError(
        422,
        "invalid_deps",
        f'agent "{agent}" could not build its deps from deps_ref: {type(exc).__name__}: {exc}',
    )


# --------------------------------------------------------------------------- handlers


def _state(request: Request) -> ServiceState:
    state: ServiceState = request.app.state.golem
    return state


def token_credential(request: Request) -> Credential | None:
    """The credential of the request's `Authorization: Bearer` token (None without one,
    with another scheme, or with a wrong token), counting wrong tokens per client address.

    Raises:
        ApiError: 429 (with `Retry-After`) when the address sent too many wrong tokens
            lately (`TokenFailures`); the token is then not even looked at.
    """
    header = request.headers.get("authorization") or ""
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    state = _state(request)
    address = request.client.host if request.client else "unknown"
    wait = state.token_failures.blocked(address)
    if wait > 0:
        seconds = max(1, math.ceil(wait))
        raise ApiError(
            429,
            "too_many_failures",
            f"too many wrong tokens from this address: wait {seconds} s",
            headers={"Retry-After": str(seconds)},
        )
    cred = state.auth.authenticate(token)
    if cred is None:
        state.token_failures.fail(address)
    return cred


def bearer(request: Request) -> Credential:
    """The credential of the request's bearer token; 401 when missing or unknown, 429
    after too many wrong tokens from the address (`token_credential`)."""
    cred = token_credential(request)
    if cred is None:
        raise ApiError(401, "unauthenticated", "send 'Authorization: Bearer <token>'")
    return cred


_AUTH = (401, 429)
_BODY = (400, 401, 408, 413, 422, 429)


@operation(
    op_id="health",
    summary="Liveness and store reachability (no token needed).",
    responses={200: schemas.Health, 503: schemas.Health},
    security=(),
)
async def health(request: Request) -> Response:
    """Liveness and store reachability; needs no token."""
    state = _state(request)
    if state.store is None:
        return respond(schemas.Health(status="starting"), 503, exclude_none=True)
    try:
        version = await state.store.schema_version()
    except Exception as exc:
        health = schemas.Health(status="unavailable", error=type(exc).__name__)
        return respond(health, 503, exclude_none=True)
    return respond(schemas.Health(status="ok", schema_version=version), exclude_none=True)


@operation(
    op_id="whoami",
    summary="The identity behind the bearer token and what it may do.",
    responses={200: schemas.WhoAmI},
    errors=_AUTH,
)
async def whoami(request: Request) -> Response:
    """The identity behind the bearer token and what it may do (the inbox shows it before a
    link's token signs anyone in)."""
    approver = bearer(request).approver
    return respond(
        schemas.WhoAmI(
            identity=approver.identity,
            agents=None if approver.agents is None else sorted(approver.agents),
            tools=None if approver.tools is None else sorted(approver.tools),
            can_start=approver.can_start,
        )
    )


@operation(
    op_id="listAgents",
    summary="The registered agents the caller may see.",
    responses={200: schemas.AgentList},
    errors=_AUTH,
)
async def agents(request: Request) -> Response:
    """The registered agents the caller may see."""
    cred = bearer(request)
    entries = _state(request).registry
    return respond(
        schemas.AgentList(
            agents=[
                schemas.AgentInfo(
                    name=name,
                    description=entries[name].description,
                    can_start=cred.approver.may_start(name),
                )
                for name in sorted(entries)
                if cred.approver.may_see(name)
            ]
        )
    )


@operation(
    op_id="startRun",
    summary="Start a run of an agent; 201 with the run (pending, completed or failed).",
    body=schemas.StartRunBody,
    responses={201: schemas.RunEnvelope, 200: schemas.RunEnvelope},
    errors=(*_BODY, 403, 409),
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
async def start(request: Request) -> Response:
    """Start a run; 201 with the run (pending, completed or failed)."""
    cred = bearer(request)
    key = _request_idempotency_key(request)
    body = await _read_json(request, schemas.StartRunBody)
    run, replayed = await start_for(
        _state(request), cred, body.agent, body.prompt, body.deps_ref, body.expires_in, key
    )
    headers = {"Location": "/api/runs/" + quote(run.id, safe="")}
    if replayed:
        headers["Idempotent-Replayed"] = "true"
    return respond(
        schemas.RunEnvelope(run=_run_model(run)), 200 if replayed else 201, headers=headers
    )


@operation(
    op_id="listRuns",
    summary="Runs the caller may see, filtered by status, agent and pending tool; newest first.",
    query=schemas.RunsQuery,
    responses={200: schemas.RunList},
    errors=(401, 422, 429),
)
async def list_runs(request: Request) -> Response:
    """Runs the caller may see, filtered by status, agent and pending tool; newest first."""
    cred = bearer(request)
    q = read_query(request, schemas.RunsQuery)
    runs = await visible_runs(
        _state(request),
        cred,
        status=q.status,
        agent=q.agent,
        tool=q.tool,
        limit=q.limit,
        offset=q.offset,
    )
    return respond(schemas.RunList(runs=[_run_model(r) for r in runs]))


@operation(
    op_id="listCalls",
    summary="Undecided calls the caller may decide, oldest run first, keyset-paged by run.",
    query=schemas.CallsQuery,
    responses={200: schemas.CallList},
    errors=(401, 422, 429),
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
async def list_calls(request: Request) -> Response:
    """Undecided calls the caller may decide, filtered by agent, tool and kind."""
    cred = bearer(request)
    q = read_query(request, schemas.CallsQuery)
    page = await pending_page(
        _state(request), cred, agent=q.agent, tool=q.tool, kind=q.kind, limit=q.limit, after=q.after
    )
    return respond(
        schemas.CallList(
            calls=[_call_model(r, c) for r, c in page.calls], next_cursor=page.next_cursor
        )
    )


@operation(
    op_id="showRun",
    summary="One run with its calls, conversation and audit log.",
    responses={200: schemas.RunDetailEnvelope},
    errors=(401, 404, 429),
)
async def show_run(request: Request) -> Response:
    """One run with its calls, conversation and audit log."""
    cred = bearer(request)
    state = _state(request)
    run = await load_run(state, cred, request.path_params["run_id"])
    audit = await require_store(state).audit(run.id)
    secret = shown_to(cred, state.auth.secret)
    return respond(schemas.RunDetailEnvelope(run=_run_detail_model(run, audit, secret)))


@operation(
    op_id="decideCall",
    summary="Decide one pending call as the caller's identity.",
    body=schemas.DecisionBody,
    responses={200: schemas.DecisionResult},
    errors=(*_BODY, 403, 404, 409),
    links={"showRun": ("showRun", {"run_id": "$response.body#/run/id"})},
)
async def decide(request: Request) -> Response:
    """Decide one pending call as the caller's identity."""
    cred = bearer(request)
    body = await _read_json(request, schemas.DecisionBody)
    decision = _to_decision(body)
    record, run = await decide_call(
        _state(request),
        cred,
        request.path_params["run_id"],
        request.path_params["call_id"],
        decision,
    )
    return respond(schemas.DecisionResult(decision=_decision_model(record), run=_run_model(run)))


@operation(
    op_id="issueStreamToken",
    summary="A short-lived token for /api/events?stream_token=... (EventSource sends no headers).",
    responses={200: schemas.StreamToken},
    errors=_AUTH,
)
async def stream_token(request: Request) -> Response:
    """A short-lived token for `GET /api/events?stream_token=...` (EventSource sends no headers)."""
    cred = bearer(request)
    token, exp = _state(request).auth.issue_stream_token(cred)
    return respond(
        schemas.StreamToken(stream_token=token, expires_at=datetime.fromtimestamp(exp, UTC))
    )


def not_found(request: Request, exc: HTTPException) -> ApiError:
    """The JSON error for an unknown `/api` route or a wrong method."""
    if exc.status_code == 405:
        return ApiError(405, "method_not_allowed", f"{request.method} is not allowed here")
    if exc.status_code == 404:
        return ApiError(404, "not_found", f"no API route {request.url.path}")
    return ApiError(exc.status_code, "http_error", str(exc.detail))
