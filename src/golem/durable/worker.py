"""Start runs into a store, and resume ready runs from it — each at most once.

An application names its agents in a registry (`name -> AgentEntry`). `start_run` runs an
agent once in-process and saves what happened: a pause becomes a pending run, a final answer a
completed run, an error a failed run. A `Worker` claims ready runs (every pending call decided)
under a lease, resumes them with `Agent.run_with_deferred_results`, and saves the outcome; it
also runs the expiry and interrupted sweeps periodically.

```python
registry = {"ops": AgentEntry(agent, deps_factory=lambda ref: Deps(**ref))}
store = await open_store("sqlite:///golem.db")
record = await start_run(store, registry, "ops", "clean up /tmp", started_by="alice")
...  # people decide through the service or `store.decide(...)`
await Worker(store, registry).run_forever()
```

The at-most-once guarantee (`docs/adr/0011-at-most-once-resume.md`): a run is claimed by one
worker once; if that worker dies, its lease runs out and the run is marked `interrupted`, never
resumed again automatically. Tools with side effects pass `ctx.idempotency_key` (unique per
conversation and call) to what they change.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import inspect
import json
import logging
import os
import socket
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from golem._ids import new_id
from golem._tracing import worker_op
from golem.deferred import DeferredRequests, PendingToolCall
from golem.durable.store import (
    CallKind,
    ChangeFeed,
    ClaimedRun,
    DecisionKind,
    LeaseLost,
    NewCall,
    NewRun,
    Outcome,
    RunNotFound,
    RunRecord,
    RunStatus,
    Store,
    utc_now,
)
from golem.durable.store._sql import elapsed
from golem.errors import StoreError, SubAgentConversationMismatch
from golem.history import paused_batch_ids
from golem.messages import Message, ToolCall, dumps_history, loads_history
from golem.nested import SubAgentCall, paused_records, seal_sub_agent_calls, sub_agent_calls
from golem.seal import SealKey, SealKeys, as_seal_keys, seal_pending, verify_call
from golem.tool import DeferKind

if TYPE_CHECKING:
    from golem.agent import Agent
    from golem.deferred import DeferredResults
    from golem.result import Result

__all__ = [
    "RETRY_REFUSAL",
    "AgentEntry",
    "AgentRegistry",
    "StoredCallMismatch",
    "SweepReport",
    "Worker",
    "load_registry",
    "new_run_from_result",
    "start_run",
]

log = logging.getLogger("golem.durable.worker")

_CONFIRM_READS = 4
"""How many times a worker reads a run to learn whether a finish whose answer was lost
committed (0.05 s, 0.1 s, 0.2 s apart) before it reports the outcome unknown."""


@dataclass(frozen=True, slots=True)
class AgentEntry:
    """One registered agent: the agent, how to rebuild its deps, and a human description."""

    agent: Agent[Any, Any]
    """The agent that starts and resumes the runs saved under this entry's name."""
    deps_factory: Callable[[Any], Any] | None = None
    """Turns a run's JSON `deps_ref` into the deps passed to the agent (may be async).

    None passes `deps_ref` itself as the deps.
    """
    description: str = ""
    """Shown by the service and the CLI."""


AgentRegistry = Mapping[str, AgentEntry]
"""Agent name -> `AgentEntry`; a plain `dict` works."""


def load_registry(spec: str) -> AgentRegistry:
    """Import `module:attribute` and return the registry it names.

    The attribute is a mapping of names to `AgentEntry`, or a zero-argument callable
    returning one.

    Raises:
        ValueError: `spec` is not `module:attribute`, or the value is not such a mapping.
        ImportError / AttributeError: the module or attribute does not exist.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr or module_name.startswith("."):
        raise ValueError(  # a relative module has no package to be relative to
            f"registry spec {spec!r}: want module:attribute (e.g. myapp.agents:registry)"
        )
    value: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        value = getattr(value, part)
    if callable(value) and not isinstance(value, Mapping):
        value = value()
    if not isinstance(value, Mapping):
        raise ValueError(f"registry spec {spec!r}: got {type(value).__name__}, want a mapping")
    for name, entry in value.items():
        if not isinstance(entry, AgentEntry):
            raise ValueError(
                f"registry spec {spec!r}: entry {name!r} is {type(entry).__name__}, want AgentEntry"
            )
    return value


def _entry(registry: AgentRegistry, agent_name: str) -> AgentEntry:
    try:
        return registry[agent_name]
    except KeyError:
        known = ", ".join(sorted(registry)) or "none"
        raise KeyError(f'agent "{agent_name}" is not in the registry (known: {known})') from None


async def _deps(entry: AgentEntry, deps_ref: Any) -> Any:
    if entry.deps_factory is None:
        return deps_ref
    deps = entry.deps_factory(deps_ref)
    if inspect.isawaitable(deps):
        deps = await deps
    return deps


def _jsonable(value: Any) -> Any:
    """The final output as a JSON value (pydantic models and dataclasses as objects)."""
    from pydantic_core import to_jsonable_python

    try:
        return to_jsonable_python(value)
    except Exception:  # an output type pydantic cannot serialize: keep its text
        return str(value)


def _error_text(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    cause = exc.__cause__
    if cause is not None and str(cause) not in text:
        text += f" (caused by {type(cause).__name__}: {cause})"
    return text


def _partial_history(exc: BaseException) -> str | None:
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
    """Describe a `Result` as a `NewRun` to save (with its pending calls when it paused).

    The run ID and conversation ID are the result's; the pending calls keep the model's
    emission order across both kinds. With `seal_key`, every pending call the agent did
    not seal itself is sealed (in the saved history and in the calls table). The result's
    `trace_context` is kept, so the worker's resume span links to the paused run's span.
    """
    calls: list[NewCall] = []
    pending = result.pending
    messages: Sequence[Message] = result.messages
    seals: dict[str, str] = {}
    if pending is not None and seal_key is not None:
        kinds = {p.call_id: p.kind for p in pending.calls if not p.seal}
        if kinds:
            messages = seal_pending(messages, seal_key, result.conversation_id, kinds)
            latest = _latest_calls(messages, kinds)
            if len(latest) < len(kinds):  # a paused sub-agent's calls: sealed in its record
                messages = seal_sub_agent_calls(messages, seal_key, kinds, result.conversation_id)
                latest.update((i, s.call) for i, s in _nested_calls(messages, kinds).items())
            seals = {i: c.seal for i, c in latest.items() if c.seal}
    if pending is not None:
        for kind, group in (
            (CallKind.APPROVAL, pending.approvals),
            (CallKind.EXTERNAL, pending.external),
        ):
            calls.extend(
                NewCall(
                    call_id=p.call_id,
                    kind=kind,
                    tool_name=p.tool_name,
                    args=p.args,
                    reason=p.reason,
                    seal=seals.get(p.call_id) or p.seal or None,
                )
                for p in group
            )
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
    """A sort key (negative, increasing in emission order) for the last call of each of `ids`.

    Scans from the end and stops once every ID is found (pending calls are in the last turns).
    """
    wanted = set(ids)
    order: dict[str, int] = {}
    position = 0
    for m in reversed(messages):
        for c in reversed(m.tool_calls):
            position -= 1
            if c.id in wanted and c.id not in order:
                order[c.id] = position
        if len(order) == len(wanted):
            break
    return order


def _expires_at(expires_in: float | timedelta | None, now: datetime) -> datetime | None:
    if expires_in is None:
        return None
    delta = expires_in if isinstance(expires_in, timedelta) else timedelta(seconds=expires_in)
    if delta <= timedelta(0):
        raise ValueError(f"expires_in must be positive, got {expires_in!r}")
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
    """Run the agent once in-process and save the outcome; return the saved run.

    A pause is saved as a PENDING run whose calls expire `expires_in` (seconds or a
    timedelta) from now (None: never); a final answer as a COMPLETED run; a run error as a
    FAILED run with the partial conversation. The deps are `deps_factory(deps_ref)`.
    With `seal_key` (the workers' key), the store seals every pending call it saves.

    `run_id` makes starting idempotent: the caller picks the run's ID (a UUID, say) and
    sends the same one again when a start failed with `StoreError` and it cannot know
    whether the run was saved (the database went away after the commit). If a run with
    that ID exists — same agent, same `started_by`, same prompt — it is returned as is,
    and the agent does not run again; otherwise the agent runs and the run is saved under
    that ID. Two starts with one ID at once save one run; both return it. Without
    `run_id` every call starts a new run (ADR 0058).

    Raises:
        KeyError: `agent_name` is not in the registry.
        ValueError: `expires_in` is not positive; `run_id` is empty or longer than 200
            characters; a run with `run_id` exists for another agent, starter or prompt.
        StoreError: the store could not save (or, with `run_id`, look up) the run.
    """
    entry = _entry(registry, agent_name)
    expires_at = _expires_at(expires_in, _clock_of(store)())
    if run_id is not None:
        if not isinstance(run_id, str) or not 0 < len(run_id) <= 200:
            raise ValueError(f"run_id must be a string of 1 to 200 characters, got {run_id!r}")
        existing = await _started(store, run_id, agent_name, started_by, prompt)
        if existing is not None:
            return existing
    deps = await _deps(entry, deps_ref)
    key = run_id

    async def save(run: NewRun, outcome: Outcome | None = None) -> RunRecord:
        try:
            if outcome is None:
                return await store.save_pending(run)
            return await store.save_finished(run, outcome)
        except ValueError:
            if key is None:
                raise
            existing = await _started(store, key, agent_name, started_by, prompt)
            if existing is None:  # not a run saved meanwhile under this ID: a real problem
                raise
            return existing  # another start with this ID saved it first

    run_id = key or new_id()
    try:
        result = await entry.agent.run(prompt, deps=deps, run_id=run_id)
    except Exception as exc:
        history = _partial_history(exc) or "[]"
        failed = NewRun(
            id=run_id,
            agent=agent_name,
            conversation_id=_conversation_of(history) or new_id(),
            history=history,
            deps_ref=deps_ref,
            started_by=started_by,
        )
        return await save(failed, Outcome.failed(_error_text(exc), history))
    new = new_run_from_result(
        result,
        agent_name,
        deps_ref=deps_ref,
        started_by=started_by,
        expires_at=expires_at,
        seal_key=seal_key,
    )
    if result.pending is not None:
        problem = _duplicate_calls(new)
        if problem is not None:  # never resumable: save it failed, with its history, audited
            failed = replace(new, calls=(), expires_at=None)
            return await save(failed, Outcome.failed(problem, new.history))
        return await save(new)
    return await save(new, Outcome.completed(_jsonable(result.output), new.history))


async def _started(
    store: Store, run_id: str, agent_name: str, started_by: str, prompt: str
) -> RunRecord | None:
    """The run an earlier start with `run_id` saved, or None when there is none.

    Raises:
        ValueError: the run exists, started for another agent, by someone else or with
            another prompt (the ID was reused for a different start).
    """
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


def _duplicate_calls(run: NewRun) -> str | None:
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


RETRY_REFUSAL = (
    "not run again after an interrupted attempt: it may already have run, its tool is not "
    "declared idempotent and no operator confirmed a re-run"
)
"""The denial reason of an approved call a retry does not re-execute."""


def _idempotent(agent: Agent[Any, Any], tool_name: str) -> bool:
    tool = agent.tools.get(tool_name)
    return bool(getattr(tool, "idempotent", False))


def _deferred_results(claimed: ClaimedRun, agent: Agent[Any, Any]) -> DeferredResults:
    from golem.deferred import Approval, DeferredResults

    approvals: dict[str, Approval] = {}
    external: dict[str, str] = {}
    retry = claimed.run.attempt > 1
    for call in claimed.run.calls:
        d = call.decision
        if d is None:  # a claimed run has every call decided; keep the gate closed regardless
            approvals[call.call_id] = Approval(False, reason="undecided")
        elif d.kind is DecisionKind.APPROVE:
            if retry and not (call.rerun_confirmed_by or _idempotent(agent, call.tool_name)):
                approvals[call.call_id] = Approval(False, reason=RETRY_REFUSAL)
                continue
            if d.args is not None:
                approvals[call.call_id] = _edited_approval(Approval, call.call_id, d.args)
                continue
            approvals[call.call_id] = Approval(True)
        elif d.kind is DecisionKind.DENY:
            approvals[call.call_id] = Approval(False, reason=d.reason)
        else:
            external[call.call_id] = d.text
    return DeferredResults(approvals=approvals, external=external)


class StoredCallMismatch(Exception):
    """The run's history does not hold the pending calls its approvers decided on."""


def _edited_approval(approval: type[Any], call_id: str, args: str) -> Any:
    if "args" not in getattr(approval, "__dataclass_fields__", {}):
        raise StoredCallMismatch(
            f'call "{call_id}" was approved with edited arguments, but this golem cannot '
            "re-run a call with edited arguments: not resuming with the original ones"
        )
    return approval(True, args=args)


def _same_args(history_args: str, decided_args: str) -> bool:
    """Whether the history's argument bytes are the ones the approvers saw.

    Byte equality; the one exception is a history saved before argument bytes were kept
    exact (golem < 0.2 compacted them on dump), whose args are exactly the compact
    re-encoding of the decided ones.
    """
    if history_args == decided_args:
        return True
    try:
        compact = json.dumps(json.loads(decided_args), ensure_ascii=False, separators=(",", ":"))
    except ValueError:
        return False
    return history_args == compact


def _latest_calls(messages: Sequence[Message], ids: Collection[str]) -> dict[str, ToolCall]:
    """The last tool call in the history for each of `ids` (the one a resume resolves).

    Scans from the end and stops once every ID is found: the pending calls of a paused
    history are in its last turns, so this does not grow with the history's length.
    """
    wanted = set(ids)
    found: dict[str, ToolCall] = {}
    for m in reversed(messages):
        for c in reversed(m.tool_calls):
            if c.id in wanted and c.id not in found:
                found[c.id] = c
        if len(found) == len(wanted):
            break
    return found


def _nested_calls(
    messages: Sequence[Message], ids: Collection[str], conversation_id: str = ""
) -> dict[str, SubAgentCall]:
    """The calls among `ids` that paused sub-agents wait on (their records in `messages`;
    with `conversation_id`, the parent's, each bound to its derived sub-run conversation)."""
    if not paused_records(messages):
        return {}
    wanted = set(ids)
    return {i: s for i, s in sub_agent_calls(messages, conversation_id).items() if i in wanted}


def _stored_calls(
    messages: Sequence[Message], ids: Collection[str], conversation_id: str = ""
) -> tuple[dict[str, ToolCall], dict[str, SubAgentCall]]:
    """Each of `ids` as the history holds it, for the checks before a resume.

    A parent's own call is its last tool call with that ID; a paused sub-agent's call
    (namespaced `<parent call>/<sub call>`) is found in its record and stands in the first
    map under its namespaced tool name, so name and arguments compare as decided; the
    second map keeps it as sealed (own ID and name, the sub-run's conversation derived
    from `conversation_id`, the run's).
    """
    latest = _latest_calls(messages, ids)
    nested: dict[str, SubAgentCall] = {}
    if len(latest) < len(set(ids)):
        nested = _nested_calls(messages, [i for i in ids if i not in latest], conversation_id)
        latest.update((i, replace(s.call, name=s.tool_name)) for i, s in nested.items())
    return latest, nested


def _check_calls(run: RunRecord, latest: Mapping[str, ToolCall]) -> None:
    """Every decided call must be in the history as the approvers saw it (name, arguments).

    `latest` maps each call ID to its last tool call in the history (`_latest_calls`).

    Raises:
        StoredCallMismatch: a call is missing from the history or differs from its record.
    """
    for call in run.calls:
        tc = latest.get(call.call_id)
        if tc is None:
            problem = "is not in the stored history"
        elif tc.name != call.tool_name:
            problem = f'is a call of "{tc.name}" in the history, "{call.tool_name}" when decided'
        elif not _same_args(tc.args, call.args):
            problem = "has other arguments in the history than the approvers saw"
        elif call.seal is not None and getattr(tc, "seal", None) != call.seal:
            problem = "carries another seal in the history than when it was decided"
        else:
            continue
        raise StoredCallMismatch(
            f'call "{call.call_id}" of run "{run.id}" {problem}: refusing to resume it'
        )


def _check_seals(
    run: RunRecord,
    latest: Mapping[str, ToolCall],
    keys: SealKeys,
    nested: Mapping[str, SubAgentCall],
    history: Sequence[Message] = (),
) -> None:
    """Every stored pending call must carry a valid seal for its kind (a paused
    sub-agent's call: as its record holds it, bound to the sub-run's conversation derived
    from the run's, or — a record stored before ADR 0065 — to the one its record names
    when the call's recorded seal binds it), and the run's own calls must be in the
    history's paused batch (its last assistant message with tool calls): an answered
    call keeps its seal, so one filed as pending from an older turn would run a second
    time.

    Raises:
        SealError: a call is unsealed, sealed with an unknown key or tampered with
            (`SubAgentConversationMismatch`: a sub-agent record sealed for another
            conversation that no recorded seal binds).
        StoredCallMismatch: a call was sealed as the other kind than the one it was decided
            as, or is not in the paused batch.
    """
    in_batch = paused_batch_ids(history) if history else None
    for call in run.calls:
        tc = latest.get(call.call_id)
        if tc is None:  # _check_calls reports it
            continue
        sub = nested.get(call.call_id)
        if sub is not None:
            conversation = sub.conversation_id
            if _legacy(sub):
                if not call.seal or call.seal != sub.call.seal:
                    raise _legacy_mismatch(run, call.call_id, call.tool_name, sub)
                conversation = sub.recorded_conversation_id  # its recorded seal binds it
            kind = verify_call(keys, conversation, sub.call)
        else:
            kind = verify_call(keys, run.conversation_id, tc)
            if in_batch is not None and call.call_id not in in_batch:
                raise StoredCallMismatch(
                    f'call "{call.call_id}" of run "{run.id}" is not in the paused batch of '
                    "its history: it was answered in an earlier turn; refusing to run it again"
                )
        if kind.value != call.kind.value:
            raise StoredCallMismatch(
                f'call "{call.call_id}" of run "{run.id}" was sealed as {kind.value}, '
                f"stored as {call.kind.value}: refusing to resume it"
            )


def _legacy(sub: SubAgentCall) -> bool:
    """Whether a sub-agent call's record names another conversation than the derived one."""
    return bool(sub.recorded_conversation_id) and sub.recorded_conversation_id != (
        sub.conversation_id
    )


def _legacy_mismatch(
    run: RunRecord, call_id: str, tool_name: str, sub: SubAgentCall
) -> SubAgentConversationMismatch:
    return SubAgentConversationMismatch(
        call_id,
        tool_name,
        "sub_agent_conversation",
        f'golem: call "{call_id}" of run "{run.id}" is in a paused sub-agent record sealed for '
        f'conversation "{sub.recorded_conversation_id}", not "{sub.conversation_id}" (the '
        "run's conversation and the parent call), and no recorded seal binds it: a record "
        "from another conversation, or stored before ADR 0065 without a seal; refusing to "
        "resume it",
    )


def _legacy_expected(
    run: RunRecord, latest: Mapping[str, ToolCall], nested: Mapping[str, SubAgentCall]
) -> DeferredRequests | None:
    """The run's recorded calls as `expected=`, when a paused sub-agent's record names
    another conversation than its derived one (stored before ADR 0065): their recorded
    seals are what binds such a record to this run (else None: nothing to bind)."""
    if not any(_legacy(sub) for sub in nested.values()):
        return None
    approvals: list[PendingToolCall] = []
    external: list[PendingToolCall] = []
    for call in run.calls:
        tc = latest.get(call.call_id)
        group = approvals if call.kind is CallKind.APPROVAL else external
        group.append(
            PendingToolCall(
                call.call_id,
                call.tool_name,
                tc.args if tc is not None else call.args,
                kind=DeferKind.APPROVAL if call.kind is CallKind.APPROVAL else DeferKind.EXTERNAL,
                seal=call.seal or "",
            )
        )
    return DeferredRequests(approvals=approvals, external=external)


class _FailureSpell:
    """The worker's log of sweeps and claims that fail poll after poll: a spell of the same
    failure (a read-only, busy or unreachable database) is logged once with its traceback,
    then once a minute, and its end once — not a traceback every poll."""

    _REPEAT_EVERY = 60.0

    def __init__(self, worker_id: str) -> None:
        self.worker_id = worker_id
        self.since: float | None = None
        self.last_logged = 0.0
        self.last_problem = ""
        self.count = 0

    def failed(self, exc: Exception) -> None:
        now = time.monotonic()
        problem = f"{type(exc).__name__}: {exc}"
        self.count += 1
        if self.since is None or problem != self.last_problem:
            log.error(
                "worker %s: sweeping or claiming failed; retrying every poll",
                self.worker_id,
                exc_info=exc,
            )
            self.since = self.since if self.since is not None else now
            self.last_logged, self.last_problem = now, problem
        elif now - self.last_logged >= self._REPEAT_EVERY:
            log.error(
                "worker %s: sweeping or claiming still fails (%d times in %.0f s): %s",
                self.worker_id,
                self.count,
                now - self.since,
                problem,
            )
            self.last_logged = now

    def ended(self) -> None:
        if self.since is None:
            return
        log.warning(
            "worker %s: sweeping and claiming work again after %d failure(s) in %.1f s",
            self.worker_id,
            self.count,
            time.monotonic() - self.since,
        )
        self.since, self.last_problem, self.count = None, "", 0


@dataclass(frozen=True, slots=True)
class SweepReport:
    """What one sweep changed."""

    expired: list[str] = field(default_factory=list)
    """Runs whose overdue calls were denied "expired"."""
    interrupted: list[str] = field(default_factory=list)
    """Runs marked interrupted because their lease ran out."""


class Worker:
    """Claims ready runs from a store and resumes each one once.

    Args:
        store: the store to claim from.
        registry: the agents, by the names the runs were saved under. The worker claims
            only runs of these agents: runs of an agent it does not know stay ready for
            another worker (a rolling deploy where new agents reach some workers first).
        worker_id: this worker's identity in leases and the audit log (default
            `<hostname>:<pid>:<random>`).
        lease_seconds: how long a claim is held without renewal; the worker renews it
            every third of that while a resume runs, and before re-executing an approved
            call proves it still holds the lease. A worker that dies leaves its run
            `interrupted` once the lease has run out and a sweep has run.
        sweep_interval: seconds between the expiry / interrupted sweeps that `run_once`
            and `run_forever` run (0 sweeps on every call).
        seal_key: the key (or keys) pending calls are sealed with: every stored pending
            call must carry a valid seal before a resume, and pauses are saved sealed.
        concurrency: how many runs `run_forever` resumes at once in this process. Each
            in-flight run has its own lease, heartbeat and fencing; free slots are filled
            with one batched claim (`Store.claim_ready_many`). Raise it when resumes
            mostly wait (on a model, an HTTP API); see the approvals-service guide's
            "Running at scale".

    Raises:
        ValueError: `lease_seconds` is not positive, `sweep_interval` is negative, or
            `concurrency` is not an integer >= 1.
    """

    def __init__(
        self,
        store: Store,
        registry: AgentRegistry,
        *,
        worker_id: str | None = None,
        lease_seconds: float = 60.0,
        sweep_interval: float = 5.0,
        seal_key: SealKey | None = None,
        concurrency: int = 1,
    ) -> None:
        if lease_seconds <= 0:
            raise ValueError(f"lease_seconds must be positive, got {lease_seconds!r}")
        if sweep_interval < 0:
            raise ValueError(f"sweep_interval must be >= 0, got {sweep_interval!r}")
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(
                f"concurrency must be an integer >= 1 (runs resumed at once), got {concurrency!r}"
            )
        self.store = store
        self.registry = registry
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{new_id()[-8:]}"
        self.lease_seconds = float(lease_seconds)
        self.sweep_interval = float(sweep_interval)
        self.seal_keys: SealKeys | None = None if seal_key is None else as_seal_keys(seal_key)
        """With a key: every stored pending call must carry a valid seal before a resume,
        and the pauses this worker saves are sealed."""
        self.concurrency = concurrency
        """How many runs `run_forever` resumes at once."""
        self._last_sweep: float | None = None
        self._clock = _clock_of(store)
        """The store's clock: the claim times and lease arithmetic of this worker."""
        self._unsure_claims: dict[datetime, set[str]] = {}
        """The times of this worker's claims that raised `StoreError`, each with the runs
        already taken back from it: a claim whose connection died after its COMMIT was
        sent may have committed all the same, even later (a server that was frozen, not
        gone, runs what it had received once it thaws)."""

    @property
    def actor(self) -> str:
        """The identity this worker records in the audit log: `worker:<worker_id>`."""
        return f"worker:{self.worker_id}"

    async def sweep(self, now: datetime | None = None) -> SweepReport:
        """Run both sweeps now: deny overdue calls "expired", mark lapsed leases interrupted."""
        self._last_sweep = time.monotonic()
        expired = await self.store.sweep_expired(now)
        interrupted = await self.store.sweep_interrupted(now)
        for run_id in interrupted:
            log.warning("run %s interrupted: its worker's lease ran out mid-resume", run_id)
        return SweepReport(expired=expired, interrupted=interrupted)

    async def _maybe_sweep(self) -> None:
        if self._last_sweep is None or time.monotonic() - self._last_sweep >= self.sweep_interval:
            await self.sweep()

    async def run_once(self) -> bool:
        """Sweep when due, then claim one ready run and resume it; False when none was ready.

        The outcome (completed / paused again / failed) is saved with `Store.finish`. A run
        whose lease is lost meanwhile is abandoned (the resume is cancelled, and no approved
        call starts after the loss) and left to the interrupted sweep. Runs taken by an
        earlier claim whose answer was lost (the database connection died after its
        COMMIT) are resumed first, instead of a new claim.
        """
        await self._maybe_sweep()
        claimed = await self._recover_claims() or await self._claim(1)
        if not claimed:
            return False
        for c in claimed:
            log.info("worker %s claimed run %s (agent %s)", self.worker_id, c.run.id, c.run.agent)
            await self._resume(c)
        return True

    async def run_forever(
        self, poll_interval: float = 1.0, stop_event: asyncio.Event | None = None
    ) -> None:
        """Resume ready runs, up to `concurrency` at once, until stopped.

        While slots are free and runs are ready it claims them (as many as there are free
        slots, in one batched claim) and resumes each in its own task. When none is ready
        it sleeps until the store's change feed signals that a run may have become ready
        (PostgreSQL `NOTIFY` wakes it within milliseconds; SQLite's shared poller within
        its poll interval), or at most `poll_interval` seconds; when every slot is busy,
        until a resume finishes. Sweeps run when due. Store errors while sweeping or
        claiming are logged and retried after `poll_interval`; a resume whose outcome
        could not be saved is logged and does not affect the others.

        Stopping: once `stop_event` is set no further run is claimed, and this returns
        when every in-flight resume has finished and saved its outcome — the runs of a
        claim whose answer was lost count as in flight (a graceful drain;
        bound it with a timeout around this call if resumes may take long). Cancelling
        the task instead cancels the in-flight resumes too and returns once they have
        unwound: each cancelled run keeps its lease until it runs out and is then marked
        interrupted by a sweep, never resumed again automatically, exactly as a worker
        that died mid-resume.
        """
        stop = stop_event or asyncio.Event()
        feed = _feed_of(self.store)
        stopping = asyncio.ensure_future(stop.wait())
        running: dict[asyncio.Task[None], str] = {}  # in-flight resume -> its run ID
        spell = _FailureSpell(self.worker_id)
        try:
            while not stop.is_set():
                mark = feed.ready_mark() if feed is not None else 0
                try:
                    await self._maybe_sweep()
                    for c in await self._recover_claims():  # started before anything can fail
                        running[self._start(c, running)] = c.run.id
                    free = self.concurrency - len(running)
                    claimed = await self._claim(free) if free else []
                except Exception as exc:
                    spell.failed(exc)
                    await asyncio.wait([stopping], timeout=poll_interval)
                    continue
                spell.ended()
                for c in claimed:
                    running[self._start(c, running)] = c.run.id
                if len(running) >= self.concurrency:  # every slot busy: wait for one
                    await asyncio.wait(
                        [stopping, *running],
                        timeout=poll_interval,  # sweeps stay due while slots are busy
                        return_when=asyncio.FIRST_COMPLETED,
                    )
                    for t in [t for t in running if t.done()]:
                        running.pop(t, None)
                    continue
                if claimed and len(claimed) == free:
                    continue  # filled every slot asked for: more may be ready
                if feed is None:
                    await asyncio.wait([stopping], timeout=poll_interval)
                    continue
                woken = asyncio.ensure_future(feed.wait_ready(mark, poll_interval))
                try:
                    await asyncio.wait([stopping, woken], return_when=asyncio.FIRST_COMPLETED)
                finally:
                    woken.cancel()
            if self._unsure_claims:  # stopped: a lost claim answer's runs are in flight too
                try:
                    for c in await self._recover_claims():
                        running[self._start(c, running)] = c.run.id
                except Exception:
                    log.exception(
                        "worker %s stopping: the runs of a claim whose answer was lost could "
                        "not be looked up; they are marked interrupted once their lease runs out",
                        self.worker_id,
                    )
            if running:  # stopped: claim nothing more, let the in-flight resumes finish
                log.info(
                    "worker %s stopping: waiting for %d in-flight resume(s)",
                    self.worker_id,
                    len(running),
                )
                await asyncio.wait(list(running))
        finally:
            stopping.cancel()
            abandoned = [t for t in running if not t.done()]
            if abandoned:  # cancelled (or failed): the resumes are left to the sweep
                for task in abandoned:
                    task.cancel()
                    log.warning(
                        "worker %s cancelled mid-resume: run %s stays running until its "
                        "lease runs out, then a sweep marks it interrupted",
                        self.worker_id,
                        running[task],
                    )
                await asyncio.wait(abandoned)

    async def _claim(self, slots: int) -> list[ClaimedRun]:
        """Claim up to `slots` ready runs of this worker's agents (one transaction).

        The claim's time is chosen here: when the claim raises `StoreError` its outcome is
        unknown, and that time is how `_recover_claims` finds the runs it may have taken.
        """
        agents = list(self.registry)
        at = self._clock()
        try:
            if slots == 1:
                one = await self.store.claim_ready(
                    self.worker_id, self.lease_seconds, now=at, agents=agents
                )
                return [] if one is None else [one]
            return await self.store.claim_ready_many(
                self.worker_id, self.lease_seconds, limit=slots, now=at, agents=agents
            )
        except StoreError:
            self._unsure_claims.setdefault(at, set())
            raise

    async def _recover_claims(self) -> list[ClaimedRun]:
        """The runs taken by claims of this worker that raised: resume each of them once.

        A claim whose connection died after its COMMIT was sent may have committed with
        its answer lost; its runs are then held by this worker, claimed at that claim's
        time, and were never resumed (nothing of them ran). They are this worker's to
        resume, as if the answer had come late; otherwise they would sit out their lease
        and be marked interrupted although no approved call ran (ADR 0045). A server
        that stopped answering without closing the connection (`StoreTimeout`) may
        commit such a claim long after it raised, so each claim is looked for at every
        call until its lease has run out (its runs are the sweep's then), and a run is
        taken back once. The runs whose lease this worker holds are few (its own in
        flight), so they are simply listed, histories read for those only. A store that
        cannot list runs gives every claim up.

        Raises:
            StoreError: the store could not be read (tried again on the next claim).
        """
        if not self._unsure_claims:
            return []
        lease = timedelta(seconds=self.lease_seconds)
        now = self._clock()
        unsure = {at: taken for at, taken in self._unsure_claims.items() if at + lease > now}
        self._unsure_claims = unsure
        list_page = getattr(self.store, "list_runs_page", None)
        if not unsure or list_page is None:
            self._unsure_claims = {}
            return []
        found: list[ClaimedRun] = []
        after: str | None = None
        while True:
            page = await list_page(
                status=RunStatus.RUNNING,
                agent=list(self.registry),
                lease_owner=self.worker_id,
                after=after,
                limit=100,
            )
            for run in page.items:
                taken = unsure.get(run.updated_at)
                if (
                    taken is not None
                    and run.id not in taken
                    and run.lease_owner == self.worker_id
                    and run.lease_expires_at is not None
                ):
                    taken.add(run.id)
                    found.append(ClaimedRun(run, self.worker_id, run.lease_expires_at))
            if page.next_cursor is None:
                break
            after = page.next_cursor
        for c in found:
            log.warning(
                "worker %s: run %s was claimed by a claim whose answer was lost; resuming it",
                self.worker_id,
                c.run.id,
            )
        return found

    def _start(
        self, claimed: ClaimedRun, running: dict[asyncio.Task[None], str]
    ) -> asyncio.Task[None]:
        """Resume `claimed` in its own task, which leaves `running` when it ends."""
        log.info(
            "worker %s claimed run %s (agent %s)", self.worker_id, claimed.run.id, claimed.run.agent
        )
        task = asyncio.ensure_future(self._resume(claimed))

        def done(t: asyncio.Task[None]) -> None:
            running.pop(t, None)
            if not t.cancelled() and (exc := t.exception()) is not None:
                log.error(
                    "worker %s: resuming run %s failed",
                    self.worker_id,
                    claimed.run.id,
                    exc_info=exc,
                )

        task.add_done_callback(done)
        return task

    @worker_op("resume")
    async def _resume(self, claimed: ClaimedRun) -> None:
        run = claimed.run
        lease = _Lease(self, run.id, claimed)
        resume = asyncio.ensure_future(self._outcome(claimed, lease))
        # The heartbeat task starts only once a third of the lease has passed: most resumes
        # finish before that, and then no task is created for it.
        heartbeat: list[asyncio.Task[None]] = []
        beat = asyncio.get_running_loop().call_later(
            self.lease_seconds / 3,
            lambda: heartbeat.append(asyncio.ensure_future(self._heartbeat(lease, resume))),
        )
        try:
            outcome = await resume
        except asyncio.CancelledError:
            if lease.lost is not None:
                log.error("run %s abandoned: %s", run.id, lease.lost)
                return
            raise
        except LeaseLost as exc:  # proven lost before an approved call: nothing more ran
            log.error("run %s abandoned: %s", run.id, exc)
            return
        finally:
            beat.cancel()
            for task in heartbeat:
                task.cancel()
                await asyncio.wait([task])  # never raises the heartbeat's own cancellation
        if lease.lost is not None:
            log.error("run %s abandoned: %s", run.id, lease.lost)
            return
        await self._finish(lease, outcome)

    @worker_op("finish")
    async def _finish(self, lease: _Lease, outcome: Outcome) -> None:
        """Save the outcome; retry transient store errors while the lease is still held.

        An attempt that raised a plain `StoreError` may have committed with its answer lost;
        a retry then finds the run finished (`LeaseLost`), and the run is read to tell "saved
        by that attempt" from "lease lost" (ADR 0045). When that read fails too, the log
        says the outcome is unknown, not that the lease was lost.
        """
        run_id = lease.run_id
        delay = 0.05
        unsure = False  # an earlier attempt raised: it may have committed
        while True:
            try:
                await self.store.finish(run_id, self.worker_id, outcome)
            except LeaseLost as exc:
                saved = await self._already_saved(run_id, outcome) if unsure else False
                if saved is None:
                    log.error(
                        "run %s: its outcome (%s) may have been saved by an earlier attempt "
                        "whose answer was lost; the run could not be read to confirm it, so "
                        "look it up (if still running, the sweep marks it interrupted)",
                        run_id,
                        outcome.status.value,
                    )
                    return
                if saved:
                    break  # an earlier attempt committed but its answer was lost
                log.error("run %s: lease lost before its outcome could be saved: %s", run_id, exc)
                return
            except StoreError as exc:
                unsure = True
                if lease.remaining() <= delay:
                    log.error("run %s: saving the outcome failed until the lease ran out", run_id)
                    raise
                log.warning("run %s: saving the outcome failed (%s); retrying", run_id, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
                continue
            break
        if outcome.status is RunStatus.FAILED:
            log.warning("worker %s: run %s failed: %s", self.worker_id, run_id, outcome.error)
        else:
            log.info("worker %s: run %s %s", self.worker_id, run_id, outcome.status.value)

    async def _already_saved(self, run_id: str, outcome: Outcome) -> bool | None:
        """Whether the run holds `outcome`'s status under this worker's lease (an earlier
        finish committed); None when the run could not be read (a few tries)."""
        delay = 0.05
        for attempt in range(_CONFIRM_READS):
            try:
                run = await self.store.get_run(run_id)
            except StoreError as exc:
                log.warning("run %s: reading it to confirm its outcome failed (%s)", run_id, exc)
                if attempt + 1 < _CONFIRM_READS:
                    await asyncio.sleep(delay)
                    delay *= 2
                continue
            return run.status is outcome.status and run.lease_owner == self.worker_id
        return None

    async def _heartbeat(self, lease: _Lease, resume: asyncio.Future[Outcome]) -> None:
        """Renew the lease now and every third of its length; cancel the resume if it is lost."""
        while True:
            try:
                await lease.renew()
            except LeaseLost:
                resume.cancel()
                return
            except Exception:  # a transient store failure: try again next beat
                log.exception("run %s: renewing the lease failed", lease.run_id)
            await asyncio.sleep(self.lease_seconds / 3)

    async def _outcome(self, claimed: ClaimedRun, lease: _Lease) -> Outcome:
        run = claimed.run
        try:
            entry = _entry(self.registry, run.agent)
            deps = await _deps(entry, run.deps_ref)
            agent = entry.agent
            extra: dict[str, Any] = {}
            params = _resume_parameters(type(agent))
            if "before_approved" in params:  # fencing: prove the lease before each re-run
                extra["before_approved"] = lease.prove
            if "run_id" in params:
                extra["run_id"] = run.id
            if run.trace_context and "trace_context" in params:  # the resume's span links to it
                extra["trace_context"] = run.trace_context
            log.info("worker %s resuming run %s", self.worker_id, run.id)
            if "conversation_id" in params:  # the run's record, not what its history says
                extra["conversation_id"] = run.conversation_id
            history = loads_history(run.history)
            ids = [c.call_id for c in run.calls]
            latest, nested = _stored_calls(history, ids, run.conversation_id)
            _check_calls(run, latest)  # what runs is what the approvers saw
            if self.seal_keys is not None:
                _check_seals(run, latest, self.seal_keys, nested, history)
            legacy = _legacy_expected(run, latest, nested)
            if legacy is not None and "expected" in params:
                extra["expected"] = legacy
            result = await agent.run_with_deferred_results(
                history, _deferred_results(claimed, agent), deps=deps, **extra
            )
        except LeaseLost:
            raise
        except Exception as exc:
            if lease.lost is not None:
                raise lease.lost from exc
            return Outcome.failed(_error_text(exc), _partial_history(exc))
        if result.pending is not None:
            next_run = new_run_from_result(
                result,
                run.agent,
                deps_ref=run.deps_ref,
                started_by=self.actor,
                expires_at=_inherit_expiry(run, self._clock()),
                parent_run_id=run.id,
                seal_key=self.seal_keys,
            )
            if next_run.id == run.id:  # the resume ran under the stored run's ID
                next_run = replace(next_run, id=new_id())
            problem = _duplicate_calls(next_run)
            if problem is not None:
                return Outcome.failed(problem, next_run.history)
            return Outcome.paused(next_run)
        return Outcome.completed(_jsonable(result.output), dumps_history(result.messages))


class _Lease:
    """The worker's view of one lease: a local deadline on the elapsed-time clock (never
    stepped, counting through a suspend), renewed in the store."""

    def __init__(self, worker: Worker, run_id: str, claimed: ClaimedRun) -> None:
        self.worker = worker
        self.run_id = run_id
        remaining = (claimed.lease_expires_at - worker._clock()).total_seconds()
        # the local deadline starts before the claim returned: never later than the store's
        self.deadline = elapsed() + min(remaining, worker.lease_seconds)
        self.lost: LeaseLost | None = None

    def remaining(self) -> float:
        """Seconds left on the lease by the local clock (negative once it ran out)."""
        return self.deadline - elapsed()

    async def renew(self) -> None:
        """Extend the lease in the store; record and raise `LeaseLost` when it is gone."""
        if self.lost is not None:
            raise self.lost
        asked = elapsed()
        try:
            await self.worker.store.renew_lease(
                self.run_id, self.worker.worker_id, self.worker.lease_seconds
            )
        except LeaseLost as exc:
            self.lost = exc
            raise
        self.deadline = asked + self.worker.lease_seconds

    async def prove(self, call: Any = None) -> None:
        """Before an approved call re-executes: raise `LeaseLost` unless the lease is held.

        Renews first when less than half the lease is left (or it already ran out by the
        local clock: then the store decides whether it was taken away meanwhile). A
        renewal failing for want of a database is tried again while the local deadline
        lasts, so a blip does not fail the run; past it, the `StoreError` is raised and
        the call does not run.
        """
        if self.lost is not None:
            raise self.lost
        if self.remaining() >= self.worker.lease_seconds / 2:
            return
        delay = 0.05
        while True:
            try:
                await self.renew()
                return
            except LeaseLost:
                raise
            except StoreError as exc:
                if self.remaining() <= delay:
                    raise
                log.warning(
                    "run %s: renewing the lease before an approved call failed (%s); retrying",
                    self.run_id,
                    exc,
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)


def _resume_parameters(agent_class: type[Agent[Any, Any]]) -> frozenset[str]:
    """The keyword parameters `run_with_deferred_results` of this agent class accepts."""
    return _parameters(agent_class.run_with_deferred_results)


@functools.cache
def _parameters(fn: Callable[..., Any]) -> frozenset[str]:
    return frozenset(inspect.signature(fn).parameters)


def _feed_of(store: Store) -> ChangeFeed | None:
    """The store's change feed, or None for a store without one (then the worker polls)."""
    change_feed = getattr(store, "change_feed", None)
    if change_feed is None:
        return None
    try:
        feed: ChangeFeed = change_feed(ready_only=True)
    except TypeError:  # a custom store whose change_feed takes no options
        feed = change_feed()
    return feed


def _inherit_expiry(run: RunRecord, now: datetime) -> datetime | None:
    """A pause produced by a resume gets as long to be decided as its parent had."""
    if run.expires_at is None:
        return None
    return now + (run.expires_at - run.created_at)


def _clock_of(store: Store) -> Callable[[], datetime]:
    """The store's clock (`SQLStore.clock`: the database server's time on PostgreSQL), or
    this machine's for a store without one."""
    clock = getattr(store, "clock", None)
    return clock if callable(clock) else utc_now
