"""A paused sub-agent's record in its parent's history (after `PAUSED_MARKER`): reading,
writing and sealing it, and checking a nested resume's share of each, at any depth (ADR 0076)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from golem._checks import (
    answered_calls,
    check,
    compare_expected,
    conversation_required,
    drop_finished,
    with_expected_args,
)
from golem.agent_tool import PAUSED_MARKER, AgentTool, SubAgent, record_text, sub_conversation
from golem.deferred import (
    DeferredRequests,
    DeferredResults,
    PendingToolCall,
    grouped,
    pending_calls,
)
from golem.errors import HistoryError, ResumeError, SubAgentConversationMismatch
from golem.history import conversation_of, paused_batch_ids, validate_history
from golem.messages import Message, ToolCall, dumps_history, loads_history
from golem.seal import SealKey, seal_pending
from golem.tool import DeferKind, Tool

__all__ = ["SubAgentCall", "seal_sub_agent_calls", "sub_agent_calls"]


@dataclass(slots=True)
class Paused:
    index: int
    message: Message
    tool: AgentTool
    history: list[Message]
    waiting: dict[str, str]  # the calls it waits on (nested ones namespaced) → tool name
    approvals: dict[str, Any] = field(default_factory=dict)
    external: dict[str, str] = field(default_factory=dict)
    conversation: str = ""  # the sub-run's conversation its seals are verified in
    expected: DeferredRequests | None = None  # its share of `expected`, for a foreign record

    @property
    def continues(self) -> bool:
        """Whether the record waits on nothing (left by a failed resume): it goes on with `run`."""
        return not self.waiting and not paused_records(self.history)


def paused_records(history: Sequence[Message]) -> bool:
    """Whether `history` holds a paused sub-agent's record (cheap check before a resume)."""
    return any(_is_record(m) for m in history)


def _is_record(m: Message) -> bool:
    return m.role == "tool" and m.content.startswith(PAUSED_MARKER)


def _read(m: Message) -> tuple[dict[str, Any], list[Message]]:
    """A record's state and its sub-agent's history (`ValueError` and kin when unreadable)."""
    state = json.loads(m.content.split("\n", 1)[1])
    return state, loads_history(state["history"])


_UNREADABLE = (IndexError, KeyError, TypeError, ValueError, RecursionError)


def _record_text(history: list[Message]) -> str:
    """`history` as a record's JSON, a lone surrogate in a text written as U+FFFD."""
    try:
        return dumps_history(history)
    except HistoryError:
        fix = [(m, m.content.encode("utf-16", "surrogatepass")) for m in history]
        return dumps_history([replace(m, content=b.decode("utf-16", "replace")) for m, b in fix])


def _ran_in(history: Sequence[Message], key: str, tools: Mapping[str, Tool]) -> bool:
    """Whether `key` names an answered call, or one under an answered agent-tool call."""
    answered = {m.tool_call_id for m in history if m.role == "tool"}
    return any(
        c.id in answered
        and (
            key == c.id or (key.startswith(c.id + "/") and isinstance(tools.get(c.name), AgentTool))
        )
        for m in history
        for c in m.tool_calls
    )


def _read_records(history: Sequence[Message], tools: Mapping[str, Tool]) -> dict[str, Paused]:
    records: dict[str, Paused] = {}
    for i, m in enumerate(history):
        if not _is_record(m):
            continue
        tool = tools.get(m.tool_name)
        if not isinstance(tool, AgentTool):
            raise ResumeError(
                f'golem: tool call "{m.tool_call_id}" records a paused sub-agent, but '
                f'"{m.tool_name}" is not an agent tool of this agent'
            )
        try:
            sub_history = _read(m)[1]
        except _UNREADABLE as exc:
            raise ResumeError(
                f'golem: the paused sub-agent record of tool call "{m.tool_call_id}" is '
                f"unreadable: {exc}"
            ) from exc
        records[m.tool_call_id] = Paused(i, m, tool, sub_history, _waiting_calls(sub_history))
    return records


def _owner_of(records: Mapping[str, Paused], key: str, own_ids: set[str]) -> str | None:
    """The record a resolution key names (None: the parent's own); `ResumeError` if two."""
    owners = [
        call_id
        for call_id, rec in records.items()
        if key.startswith(call_id + "/") and key[len(call_id) + 1 :] in rec.waiting
    ]
    if key in own_ids:
        owners.append("")
    if len(owners) > 1:
        raise ResumeError(
            f'golem: resolution key "{key}" names more than one pending call (a parent call ID '
            "colliding with a sub-agent's namespaced one); no resolution can tell them apart"
        )
    if owners:
        return owners[0] or None
    for call_id in records:
        if key.startswith(call_id + "/"):
            return call_id
    return None


def _waiting(history: Sequence[Message]) -> dict[str, tuple[str, str, str]]:
    """Each call a paused history waits on (nested ones namespaced) → name, args, seal."""
    waiting = {c.id: (c.name, c.args, c.seal) for c in _pending_or_none(history)}
    for k, sub in sub_agent_calls(history).items():
        waiting[k] = (sub.tool_name, sub.call.args, sub.call.seal)
    return waiting


def _waiting_calls(history: Sequence[Message]) -> dict[str, str]:
    return {k: v[0] for k, v in _waiting(history).items()}


class SubAgentCall(NamedTuple):
    """A call a paused sub-agent waits on, found in its parent's history (`sub_agent_calls`)."""

    call: ToolCall
    """The call as the sub-agent's history holds it: its own ID, name, arguments and seal."""
    tool_name: str
    """The namespaced tool name, as the parent's `Result.pending` and a store name it
    (`<agent tool>/<sub tool>`)."""
    conversation_id: str
    """The sub-run's conversation ID, which the call's seal (if any) is bound to: derived
    from the parent's (`<parent conversation>/<parent call id>`, ADR 0065) when
    `sub_agent_calls` was given the parent's conversation, else the one the record names."""
    recorded_conversation_id: str = ""
    """The conversation the sub-agent's record names: the same as `conversation_id` for a
    genuine record paused since ADR 0065; another for a record from another conversation
    or stored before it."""


def sub_agent_calls(
    history: Sequence[Message], conversation_id: str = ""
) -> dict[str, SubAgentCall]:
    """The calls the paused sub-agents recorded in `history` wait on, by namespaced ID, at
    any depth; with the parent's `conversation_id`, each carries its sub-run's conversation."""
    found: dict[str, SubAgentCall] = {}
    for m in history:
        if not _is_record(m):
            continue
        try:
            inner = _read(m)[1]
        except _UNREADABLE:
            continue
        named = conversation_of(inner)
        conversation = sub_conversation(conversation_id, m.tool_call_id) or named
        for c in _pending_or_none(inner):
            found[f"{m.tool_call_id}/{c.id}"] = SubAgentCall(
                c, f"{m.tool_name}/{c.name}", conversation, named
            )
        for sub_id, sub in sub_agent_calls(inner, conversation if conversation_id else "").items():
            found[f"{m.tool_call_id}/{sub_id}"] = sub._replace(
                tool_name=f"{m.tool_name}/{sub.tool_name}"
            )
    return found


def seal_sub_agent_calls(
    history: Sequence[Message],
    keys: SealKey,
    kinds: Mapping[str, DeferKind | str],
    conversation_id: str = "",
) -> list[Message]:
    """A copy of `history` whose paused sub-agents' calls named in `kinds` (namespaced ID →
    kind) are sealed for their sub-runs' conversations, at any depth."""
    out = list(history)
    for i, m in enumerate(out):
        if not _is_record(m):
            continue
        prefix = f"{m.tool_call_id}/"
        mine = {k[len(prefix) :]: v for k, v in kinds.items() if k.startswith(prefix)}
        if not mine:
            continue
        try:
            state, inner = _read(m)
        except _UNREADABLE:
            continue
        conversation = sub_conversation(conversation_id, m.tool_call_id)
        conversation = conversation or conversation_of(inner)
        inner = seal_pending(inner, keys, conversation, mine)
        inner = seal_sub_agent_calls(inner, keys, mine, conversation if conversation_id else "")
        state["history"] = dumps_history(inner)
        text = json.dumps(state, ensure_ascii=False, separators=(",", ":"))
        head = m.content.split("\n", 1)[0]
        out[i] = replace(m, content=f"{head}\n{text}")
    return out


def _pending_or_none(history: Sequence[Message]) -> list[Any]:
    try:
        return pending_calls(history)
    except ResumeError:
        return []


def progress_record(
    rec: Paused, sub_history: list[Message], run_id: str, conversation_id: str
) -> Message:
    """`rec` rewritten to hold `sub_history`, its sub-agent's progress (ADR 0076)."""
    text = record_text(
        rec.tool.name, _waiting_calls(sub_history).items(), _record_text(sub_history)
    )
    return replace(
        rec.message,
        content=text,
        run_id=run_id or rec.message.run_id,
        conversation_id=conversation_id or rec.message.conversation_id,
    )


def pending_of(history: Sequence[Message], results: DeferredResults) -> DeferredRequests:
    """The calls a paused `history` waits on, its own and its paused sub-agents' (namespaced,
    any depth), in history order, grouped by the kind `results` gives them."""
    answered = {m.tool_call_id for m in history if m.role == "tool"}
    records = {m.tool_call_id: m for m in history if _is_record(m)}
    pending: list[PendingToolCall] = []

    def add(call_id: str, tool_name: str, call: ToolCall) -> None:
        kind = DeferKind.APPROVAL if call_id in results.approvals else DeferKind.EXTERNAL
        pending.append(PendingToolCall(call_id, tool_name, call.args, "", kind, call.seal))

    for m in history:
        if m.role != "assistant":
            continue
        for c in m.tool_calls:
            record = records.get(c.id)
            if record is not None:
                for key, sub in sub_agent_calls([record]).items():
                    add(key, sub.tool_name, sub.call)
            elif c.id not in answered:
                add(c.id, c.name, c)
    return grouped(pending)


@dataclass(slots=True)
class NestedPlan:
    """A nested resume checked so far: the records and who resolves what."""

    history: list[Message]  # the paused history (with `expected`'s arguments) to rewrite
    results: DeferredResults  # every resolution, as given
    checked: list[Message]  # the history the parent's own resolutions are checked on
    records: dict[str, Paused]
    own: DeferredResults  # the parent's own resolutions
    own_pending: bool  # whether the parent has pending calls of its own
    expected: DeferredRequests | None


def check_records(
    history: list[Message],
    results: DeferredResults,
    tools: Mapping[str, Tool],
    expected: DeferredRequests | None = None,
) -> NestedPlan:
    """Check a nested resume's records and split the resolutions between the parent and each
    sub-agent, against `expected` when given (`ResumeError`; `TypeError` for `expected`)."""
    if expected is not None:
        history = with_expected_args(history, expected)
    given, checked = results, history
    results, expected = drop_finished(checked, results, expected, tools)
    if expected is not None:
        checked = with_expected_args(checked, expected)
        _check_expected(checked, results, expected)
    records = _read_records(checked, tools)
    batch = paused_batch_ids(checked)
    for call_id, rec in records.items():
        if call_id not in batch:
            raise ResumeError(
                f'golem: the paused sub-agent record of tool call "{call_id}" '
                f"({rec.tool.name}) is not in the paused batch: a sub-agent paused in an "
                "earlier turn was resumed then, and its answer was replaced by its old record "
                "to run it again; a paused history records sub-agents only for its last pause"
            )
    own_ids = {c.id for c in _pending_or_none(checked)}  # a record answers its call
    own = _split(records, results, own_ids)
    for call_id, rec in records.items():
        _check_share(call_id, rec)
    if not own_ids:
        done = answered_calls(checked)
        unknown = next((k for k in [*own.approvals, *own.external] if k not in done), None)
        if unknown is not None:
            raise ResumeError(f'golem: resolution for unknown tool call "{unknown}"')
    return NestedPlan(history, given, checked, records, own, bool(own_ids), expected)


def _check_share(call_id: str, rec: Paused) -> None:
    """Every call the sub-agent waits on is resolved, and nothing else of it."""
    for sub_id, sub_name in rec.waiting.items():
        if sub_id not in rec.approvals and sub_id not in rec.external:
            raise ResumeError(
                f'golem: pending tool call "{call_id}/{sub_id}" ({rec.tool.name}/{sub_name}) '
                "has no resolution"
            )
    for share in (rec.approvals, rec.external):
        for sub_id in list(share):
            if sub_id in rec.waiting:
                continue
            if not _ran_in(rec.history, sub_id, rec.tool.agent.tools):
                raise ResumeError(f'golem: resolution for unknown tool call "{call_id}/{sub_id}"')
            if rec.continues:  # nothing of it resumes: a no-op (ADR 0076)
                del share[sub_id]


def check_sub_agents(
    plan: NestedPlan, *, conversation_id: str = "", conversation_bound: bool = True
) -> None:
    """Check each sub-agent's share as it checks its own resume, at any depth, in its
    sub-run's conversation (`SubAgentConversationMismatch`, `ConversationRequired`)."""
    for call_id, rec in plan.records.items():
        rec.conversation = sub_conversation(conversation_id, call_id)
        if rec.continues:  # no pending call to verify: its history is checked, then run
            _check_continuing(call_id, rec)
            continue
        named = conversation_of(rec.history)
        if rec.tool.agent.seal_keys is not None and named and named != rec.conversation:
            rec.expected = _expected_share(plan.expected, call_id, rec)
            if rec.expected is None:
                raise _mismatch(call_id, rec, named)
            rec.conversation = named
        shares = DeferredResults(approvals=rec.approvals, external=rec.external)
        _check_sub(rec.tool.agent, rec.history, shares, rec.conversation, rec.expected)
    if not conversation_bound and plan.expected is None:
        keyed = _keyed_waiting(plan.records)
        if keyed is not None:
            raise conversation_required(*keyed)


def _check_continuing(call_id: str, rec: Paused) -> None:
    """A record waiting on nothing must end with its answered last batch (`ResumeError`)."""
    history = rec.history
    try:
        validate_history(history)
    except ValueError as exc:
        raise ResumeError(
            f'golem: the paused sub-agent record of tool call "{call_id}" is unreadable: {exc}'
        ) from exc
    last = len(history) - 1
    while last >= 0 and history[last].role == "tool":
        last -= 1
    answered = {m.tool_call_id for m in history[last + 1 :]}
    if (
        last < 0
        or not history[last].tool_calls
        or not answered.issuperset(c.id for c in history[last].tool_calls)
    ):
        raise ResumeError(
            f'golem: the paused sub-agent record of tool call "{call_id}" ({rec.tool.name}) '
            "waits on no call and does not end with its answered batch: it is not a record "
            "golem writes, and no resume continues it"
        )


def _answered_nested(history: Sequence[Message], key: str) -> bool:
    """Whether `key` names an answered call of the paused batch, or one under it, at any depth."""
    done = answered_calls(history) & paused_batch_ids(history)
    if key in done:
        return True
    for m in history:
        if m.role != "tool" or not key.startswith(m.tool_call_id + "/"):
            continue
        if not m.content.startswith(PAUSED_MARKER):
            if m.tool_call_id in done:  # the sub-agent answered: everything under it ran
                return True
            continue
        try:
            inner = _read(m)[1]
        except _UNREADABLE:
            continue
        if _answered_nested(inner, key[len(m.tool_call_id) + 1 :]):
            return True
    return False


def _expected_share(
    expected: DeferredRequests | None, call_id: str, rec: Paused
) -> DeferredRequests | None:
    """The sub-agent's share of `expected` when it seals every call it waits on, else None."""
    if expected is None:
        return None
    prefix, name_prefix = f"{call_id}/", f"{rec.tool.name}/"

    def share(calls: Sequence[PendingToolCall]) -> list[PendingToolCall]:
        return [
            replace(p, call_id=p.call_id[len(prefix) :], tool_name=p.tool_name[len(name_prefix) :])
            for p in calls
            if p.call_id.startswith(prefix) and p.call_id[len(prefix) :] in rec.waiting
        ]

    mine = DeferredRequests(approvals=share(expected.approvals), external=share(expected.external))
    if {p.call_id for p in mine.calls} != set(rec.waiting) or not all(p.seal for p in mine.calls):
        return None
    return mine


def _mismatch(call_id: str, rec: Paused, named: str) -> SubAgentConversationMismatch:
    sub_id, sub_name = next(iter(rec.waiting.items()), ("", ""))
    return SubAgentConversationMismatch(
        f"{call_id}/{sub_id}",
        f"{rec.tool.name}/{sub_name}",
        "sub_agent_conversation",
        f'golem: the paused sub-agent record of tool call "{call_id}" ({rec.tool.name}) is '
        f'sealed for conversation "{named}", not "{rec.conversation}" (its parent\'s '
        "conversation and call): a record from another conversation, or one stored before "
        "golem derived sub-run conversations from the parent's (ADR 0065). Resume it as the "
        "paused parent's PausedRun (its pending calls carry their seals), or finish such "
        "runs with the golem that paused them; nothing was executed",
    )


def _keyed_waiting(records: Mapping[str, Paused]) -> tuple[str, str] | None:
    """The first call (namespaced ID, tool name) a sub-agent with a seal key waits on."""
    for call_id, rec in records.items():
        agent = rec.tool.agent
        if agent.seal_keys is not None and rec.waiting:
            sub_id, sub_name = next(iter(rec.waiting.items()))
            return f"{call_id}/{sub_id}", f"{rec.tool.name}/{sub_name}"
        try:
            inner = _read_records(rec.history, agent.tools)
        except ResumeError:
            continue
        found = _keyed_waiting(inner)
        if found is not None:
            return f"{call_id}/{found[0]}", f"{rec.tool.name}/{found[1]}"
    return None


def _check_expected(
    history: Sequence[Message], results: DeferredResults, expected: DeferredRequests
) -> None:
    left = compare_expected(_waiting(history), expected)
    for call_id in left:  # answered by a resume that failed or was cancelled: progress
        if not _answered_nested(history, call_id):
            raise ResumeError(
                f'golem: expected pending call "{call_id}" is not pending in the history'
            )
    for p in expected.approvals:
        if p.call_id in results.external:
            raise ResumeError(
                f'golem: pending tool call "{p.call_id}" ({p.tool_name}) waits for an approval; '
                "an external result cannot stand in for it: resolve it in approvals={...}"
            )
    for p in expected.external:
        if p.call_id in results.approvals:
            raise ResumeError(
                f'golem: pending tool call "{p.call_id}" ({p.tool_name}) waits for an external '
                "result, not an approval; resolve it in external={...}"
            )


def _split(
    records: Mapping[str, Paused], results: DeferredResults, own_ids: set[str]
) -> DeferredResults:
    """Hand each namespaced resolution to its record; return the parent's own ones."""
    own: tuple[dict[str, Any], dict[str, Any]] = ({}, {})
    given: tuple[Mapping[str, Any], ...] = (results.approvals, results.external)
    for i, values in enumerate(given):
        for key, value in values.items():
            owner = _owner_of(records, key, own_ids)
            if owner is None:
                own[i][key] = value
            else:
                share: dict[str, Any] = (records[owner].approvals, records[owner].external)[i]
                share[key[len(owner) + 1 :]] = value
    return DeferredResults(approvals=own[0], external=own[1])


def _check_sub(
    agent: SubAgent,
    history: list[Message],
    results: DeferredResults,
    conversation_id: str,
    expected: DeferredRequests | None,
) -> None:
    """Check `agent`'s resume as a sub-agent in `conversation_id` (toolsets: when it resumes)."""
    if agent.toolsets:
        return
    policy = agent._policy(agent.tools)
    if policy.nested and paused_records(history):
        plan = check_records(history, results, policy.tools, expected)
        if plan.own_pending:
            check(policy, plan.checked, plan.own, conversation_id, None, True)
        check_sub_agents(plan, conversation_id=conversation_id)
    else:
        check(policy, history, results, conversation_id, expected, True)
