"""Starting a run: run the agent once in-process and save what happened."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from golem._ids import new_id
from golem.durable.store import (
    CallKind,
    NewCall,
    NewRun,
    Outcome,
    RunNotFound,
    RunRecord,
    Store,
    utc_now,
)
from golem.durable.store.records import check_seconds
from golem.durable.worker._checks import latest_calls, nested_calls
from golem.durable.worker._registry import AgentRegistry, deps_of, registered
from golem.messages import Message, dumps_history, loads_history
from golem.records import seal_sub_agent_calls
from golem.seal import SealKey, seal_pending

if TYPE_CHECKING:
    from golem.result import Result


def jsonable(value: Any) -> Any:
    """The final output as a JSON value (pydantic models and dataclasses as objects)."""
    from pydantic_core import to_jsonable_python

    try:
        return to_jsonable_python(value)
    except Exception:  # an output type pydantic cannot serialize: keep its text
        return str(value)


def error_text(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    cause = exc.__cause__
    if cause is not None and str(cause) not in text:
        text += f" (caused by {type(cause).__name__}: {cause})"
    return text


def partial_history(exc: BaseException) -> str | None:
    partial = getattr(exc, "partial", None)
    messages = getattr(partial, "messages", None)
    if messages is None:
        return None
    return dumps_history(messages)


def new_run_from_result(
    result: Result[Any],
    agent_name: str,
    *,
    deps_ref: Any = None,
    started_by: str = "",
    expires_at: datetime | None = None,
    parent_run_id: str | None = None,
    seal_key: SealKey | None = None,
) -> NewRun:
    """Describe a `Result` as a `NewRun` (its pending calls in emission order, sealed with
    `seal_key` when the agent did not seal them)."""
    calls: list[NewCall] = []
    pending = result.pending
    messages: Sequence[Message] = result.messages
    seals: dict[str, str] = {}
    if pending is not None and seal_key is not None:
        kinds = {p.call_id: p.kind for p in pending.calls if not p.seal}
        if kinds:
            messages = seal_pending(messages, seal_key, result.conversation_id, kinds)
            latest = latest_calls(messages, kinds)
            if len(latest) < len(kinds):  # a paused sub-agent's calls: sealed in its record
                messages = seal_sub_agent_calls(messages, seal_key, kinds, result.conversation_id)
                latest.update((i, s.call) for i, s in nested_calls(messages, kinds).items())
            seals = {i: c.seal for i, c in latest.items() if c.seal}
    if pending is not None:
        groups = ((CallKind.APPROVAL, pending.approvals), (CallKind.EXTERNAL, pending.external))
        for kind, group in groups:
            for p in group:
                seal = seals.get(p.call_id) or p.seal or None
                calls.append(NewCall(p.call_id, kind, p.tool_name, p.args, p.reason, seal=seal))
        if len(calls) > 1:
            order = _emission_order(result.messages, [c.call_id for c in calls])
            calls.sort(key=lambda c: order.get(c.call_id, 0))
    return NewRun(
        id=result.run_id,
        agent=agent_name,
        conversation_id=result.conversation_id,
        history=dumps_history(messages),
        calls=tuple(calls),
        deps_ref=deps_ref,
        started_by=started_by,
        expires_at=expires_at,
        parent_run_id=parent_run_id,
        trace_context=result.trace_context,
    )


def _emission_order(messages: Sequence[Message], ids: Collection[str]) -> dict[str, int]:
    """A sort key (negative, in emission order) for the last call of each of `ids`."""
    return {call_id: -i for i, call_id in enumerate(latest_calls(messages, ids), 1)}


def _expires_at(expires_in: float | timedelta | None, now: datetime) -> datetime | None:
    if expires_in is None:
        return None
    seconds = expires_in.total_seconds() if isinstance(expires_in, timedelta) else expires_in
    check_seconds("expires_in", seconds)
    delta = expires_in if isinstance(expires_in, timedelta) else timedelta(seconds=seconds)
    if delta <= timedelta(0):  # a deadline counts whole microseconds
        raise ValueError(f"expires_in must be at least a microsecond, got {expires_in!r}")
    return now + delta


async def start_run(
    store: Store,
    registry: AgentRegistry,
    agent_name: str,
    prompt: str,
    *,
    deps_ref: Any = None,
    started_by: str,
    expires_in: float | timedelta | None = None,
    seal_key: SealKey | None = None,
    run_id: str | None = None,
) -> RunRecord:
    """Run the agent once in-process and save the outcome (pending, completed or failed).

    Pending calls expire `expires_in` from now (None: never); with `seal_key` they are sealed.
    A `run_id` makes the start idempotent: a run saved under it by the same agent, starter and
    prompt is returned as is (ADR 0058). Raises `KeyError` (unknown agent), `ValueError`,
    `StoreError`."""
    entry = registered(registry, agent_name)
    expires_at = _expires_at(expires_in, clock_of(store)())
    if run_id is not None:
        if not isinstance(run_id, str) or not 0 < len(run_id) <= 200:
            raise ValueError(f"run_id must be a string of 1 to 200 characters, got {run_id!r}")
        existing = await _started(store, run_id, agent_name, started_by, prompt)
        if existing is not None:
            return existing
    deps = await deps_of(entry, deps_ref)
    outcome: Outcome | None = None  # None: a pause, saved pending
    rid = run_id or new_id()
    try:
        result = await entry.agent.run(prompt, deps=deps, run_id=rid)
    except Exception as exc:
        history = partial_history(exc) or "[]"
        conversation = _conversation_of(history) or new_id()
        run = NewRun(
            rid, agent_name, conversation, history, deps_ref=deps_ref, started_by=started_by
        )
        outcome = Outcome.failed(error_text(exc), history)
    else:
        run = new_run_from_result(
            result,
            agent_name,
            deps_ref=deps_ref,
            started_by=started_by,
            expires_at=expires_at,
            seal_key=seal_key,
        )
        problem = None if result.pending is None else duplicate_calls(run)
        if result.pending is None:
            outcome = Outcome.completed(jsonable(result.output), run.history)
        elif problem is not None:  # never resumable: saved failed, with its history, audited
            run, outcome = (
                replace(run, calls=(), expires_at=None),
                Outcome.failed(problem, run.history),
            )
    try:
        if outcome is None:
            return await store.save_pending(run)
        return await store.save_finished(run, outcome)
    except ValueError:
        if run_id is None:
            raise
        existing = await _started(store, run_id, agent_name, started_by, prompt)
        if existing is None:  # not a run saved meanwhile under this ID: a real problem
            raise
        return existing  # another start with this ID saved it first


async def _started(
    store: Store, run_id: str, agent_name: str, started_by: str, prompt: str
) -> RunRecord | None:
    """The run an earlier start with `run_id` saved, or None (`ValueError`: started differently)."""
    try:
        run = await store.get_run(run_id)
    except RunNotFound:
        return None
    first = _first_prompt(run.history)
    if run.agent != agent_name or run.started_by != started_by or first not in (None, prompt):
        raise ValueError(
            f'run_id "{run_id}" names a run started differently (agent, starter or prompt): '
            "an ID that makes a start idempotent must be new for each different start"
        )
    return run


def _first_prompt(history: str) -> str | None:
    """The content of the history's first user message (None: it has none)."""
    for m in loads_history(history):
        if m.role == "user":
            return m.content
    return None


def duplicate_calls(run: NewRun) -> str | None:
    """Why a paused run cannot be saved pending (call IDs that repeat), or None."""
    ids = [c.call_id for c in run.calls]
    dups = sorted({i for i in ids if ids.count(i) > 1})
    if not dups:
        return None
    return (
        "the run paused with pending calls that share an ID ("
        + ", ".join(f'"{d}"' for d in dups)
        + "): a decision could not name one of them, so the run is not resumable"
    )


def _conversation_of(history: str) -> str:
    for m in reversed(loads_history(history)):
        if m.conversation_id:
            return m.conversation_id
    return ""


def clock_of(store: Store) -> Callable[[], datetime]:
    """The store's clock (`SQLStore.clock`: the database server's time on PostgreSQL), or
    this machine's for a store without one."""
    clock = getattr(store, "clock", None)
    return clock if callable(clock) else utc_now
