"""Runs as an approver may see, start and decide them: one run, listings, pending-call pages,
idempotent starts and decisions (with edited arguments); a run the approver may not see is
answered as a missing one."""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, cast

from golem.durable.store import (
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
from golem.durable.worker import start_run
from golem.errors import StoreError
from golem.service.auth import Credential
from golem.service.errors import ApiError, check_json_value, parse_json, store_error
from golem.service.schemas import MAX_LIST_LIMIT, DecisionBody
from golem.service.settings import ServiceState, require_store

# Internals of `golem.service.create_app`; nothing here is public API.
__all__: list[str] = []


async def load_run(state: ServiceState, cred: Credential, run_id: str) -> RunRecord:
    """The run `run_id` if it exists and the approver may see its agent; else the same
    404 as for a missing run (ADR 0069, ADR 0073)."""
    try:
        run = await require_store(state).get_run(run_id, agents=cred.approver.agents)
        if not cred.approver.may_see(run.agent):
            raise RunNotFound(run_id)
    except RunNotFound:
        raise store_error(RunNotFound(run_id)) from None
    except CorruptRecord as exc:
        # only an approver who sees every agent learns that it exists (ADR 0072)
        if cred.approver.agents is not None:
            raise store_error(RunNotFound(run_id)) from None
        raise ApiError(
            409, "run_unreadable", f"{exc}; an operator must repair the stored row"
        ) from None
    return run


def _names(cred: Credential, agent: str | None) -> list[str | None]:
    """The agents a listing asks the store for (None: every agent; empty: nothing)."""
    if agent is not None:
        return [agent] if cred.approver.may_see(agent) else []
    allowed = cred.approver.agents
    return [None] if allowed is None else [*sorted(allowed)]


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
    store, names = require_store(state), _names(cred, agent)
    if len(names) <= 1:  # one listing: the store skips `offset` runs without loading them
        if not names:
            return []
        return await store.list_runs(
            status=status, agent=names[0], tool_name=tool, limit=limit, offset=offset
        )
    # several agents: one keyset-paged listing, skipping `offset` runs a page at a time
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


_SKIP_PAGE = 500  # runs read per page while skipping to a deep offset


@dataclass(frozen=True)
class PendingPage:
    """One page of pending calls, oldest run first, and the cursor of the next page."""

    calls: list[tuple[RunRecord, PendingCallRecord]]
    next_cursor: str | None


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
    """Undecided calls the approver may decide, `limit` runs a page from the cursor `after`
    (None: the oldest run; keyset paging); 422 for a cursor this listing did not return."""
    names = _names(cred, agent)
    if not names:
        return PendingPage([], None)
    agents: Any = names[0] if len(names) == 1 else names
    try:
        page = await require_store(state).list_runs_page(
            status=RunStatus.PENDING, agent=agents, tool_name=tool, after=after, limit=limit
        )
    except ValueError as exc:
        raise ApiError(422, "invalid_request", f"'after': {exc}") from None
    calls = [
        (run, c)
        for run in page.items
        for c in run.undecided
        if (tool is None or c.tool_name == tool)
        and (kind is None or c.kind == kind)
        and cred.approver.may_decide(run.agent, c.tool_name)
    ]
    return PendingPage(calls, page.next_cursor)


_MICROSECOND = timedelta(microseconds=1)


IDEMPOTENCY_KEY_MAX = 200
_IDEMPOTENT_RUNS = uuid.UUID("5c0ae1a2-6d2e-4f59-9a53-0a7c1c1d6f11")  # UUIDv5 namespace


class _Lookups:
    """The store as `start_run` uses it, noting whether `get_run(run_id)` found the run
    (then the start is a replay of an earlier one)."""

    def __init__(self, store: Store, run_id: str | None) -> None:
        self._store = store
        self._run_id = run_id
        self.found = False

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
    seconds = expires_in if expires_in is not None else state.settings.default_expires_in
    # A deadline counts whole microseconds: a positive `expires_in` shorter than one (5e-324)
    # is one, rather than a zero the store refuses.
    expiry = None if seconds is None else max(timedelta(seconds=seconds), _MICROSECOND)
    # the run ID of the approver's start with this idempotency key
    identity = cred.approver.identity
    run_id = None if key is None else str(uuid.uuid5(_IDEMPOTENT_RUNS, f"{identity}\x00{key}"))
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


_JSON_TYPES: dict[str, type | tuple[type, ...]] = {
    "string": str,
    "integer": int,
    "number": (int, float),
    "boolean": bool,
    "array": list,
    "object": dict,
    "null": type(None),
}


def _schema_problems(args: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    """Required, unknown and mistyped fields of `args` for a tool's JSON schema (a first
    check for the form; the agent validates fully before the re-run)."""
    props: dict[str, Any] = schema.get("properties", {}) or {}
    problems = [f"'{k}' is required" for k in schema.get("required", []) if k not in args]
    if schema.get("additionalProperties") is False:
        problems += [f"'{k}' is not a field of this tool" for k in args if k not in props]
    for key, value in args.items():
        want = props.get(key, {}).get("type")
        names = [want] if isinstance(want, str) else want if isinstance(want, list) else []
        if not names:
            continue
        ok = any(
            isinstance(value, _JSON_TYPES.get(n, object))
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
    try:  # the same JSON, types included (`==` takes `true` for `1`): a plain approval
        if json.dumps(value, sort_keys=True) == json.dumps(json.loads(call.args), sort_keys=True):
            return Decision.approve()
    except (ValueError, TypeError, RecursionError):
        pass
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
