"""Checking a resume whose history records paused sub-agents, as a tree.

A paused sub-agent's record (`golem.records`) answers its parent's call. `check_records`
splits the namespaced resolutions (`<call id>/<sub call id>`) between the parent and each
record; `check_sub_agents` checks each sub-agent's share as that sub-agent checks its own
resume, at any depth, before anything runs (ADR 0076).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from golem._checks import (
    answered_calls,
    brief,
    check,
    conversation_required,
    same_args,
    with_expected_args,
)
from golem._run import conversation_of
from golem.agent_tool import PAUSED_MARKER, SubAgent, sub_conversation
from golem.deferred import DeferredRequests, DeferredResults, PendingToolCall
from golem.errors import ResumeError, SubAgentConversationMismatch
from golem.history import paused_batch_ids, validate_history
from golem.messages import Message, loads_history
from golem.records import (
    Paused,
    drop_finished,
    owner_of,
    paused_records,
    pending_or_none,
    ran_in,
    read_records,
    sub_agent_calls,
)
from golem.tool import Tool

__all__: list[str] = []


@dataclass(slots=True)
class NestedPlan:
    """A nested resume checked so far: the records and who resolves what."""

    history: list[Message]
    """The paused history (with `expected`'s arguments), which the resume rewrites."""
    results: DeferredResults
    """Every resolution, as given."""
    checked: list[Message]
    """The history the parent's own resolutions are checked on."""
    records: dict[str, Paused]
    own: DeferredResults
    """The parent's own resolutions."""
    own_pending: bool
    """Whether the parent has pending calls of its own."""
    expected: DeferredRequests | None


def check_records(
    history: list[Message],
    results: DeferredResults,
    tools: Mapping[str, Tool],
    expected: DeferredRequests | None = None,
) -> NestedPlan:
    """Check a nested resume's records and split the resolutions between the parent and
    each sub-agent; with `expected`, the waiting calls (the sub-agents' namespaced) must be
    exactly the expected ones. Raises `ResumeError`, or `TypeError` for `expected`."""
    if expected is not None:
        history = with_expected_args(history, expected)
    given, checked = results, history
    results, expected = drop_finished(checked, results, expected, tools)
    if expected is not None:
        checked = with_expected_args(checked, expected)
        _check_expected(checked, results, expected)
    records = read_records(checked, tools)
    batch = paused_batch_ids(checked)
    for call_id, rec in records.items():
        if call_id not in batch:
            raise ResumeError(
                f'golem: the paused sub-agent record of tool call "{call_id}" '
                f"({rec.tool.name}) is not in the paused batch: a sub-agent paused in an "
                "earlier turn was resumed then, and its answer was replaced by its old record "
                "to run it again; a paused history records sub-agents only for its last pause"
            )
    own_ids = {c.id for c in pending_or_none(checked)}  # a record answers its call
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
            if not ran_in(rec.history, sub_id, rec.tool.agent.tools):
                raise ResumeError(f'golem: resolution for unknown tool call "{call_id}/{sub_id}"')
            if rec.continues:  # nothing of it resumes: a no-op (ADR 0076)
                del share[sub_id]


def check_sub_agents(
    plan: NestedPlan, *, conversation_id: str = "", conversation_bound: bool = True
) -> None:
    """Check each sub-agent's share as it checks its own resume, at any depth, in
    `sub_conversation(conversation_id, call ID)`; a keyed record naming another conversation
    needs `expected` with its seals (`SubAgentConversationMismatch`), and an unbound keyed
    resume needs `expected` (`ConversationRequired`)."""
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
    """A record that waits on nothing is one a failed or cancelled resume wrote (ADR 0076):
    a valid history ending with its last batch, every call of it answered.

    Raises:
        ResumeError: anything else (an empty or edited record), which no resume continues.
    """
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
    """Whether `key` names a call of the paused batch that `history` answers, or (namespaced)
    one under such a call: a sub-agent that answered, or a call a paused sub-agent's record
    answers, at any depth."""
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
            inner = loads_history(json.loads(m.content.split("\n", 1)[1])["history"])
        except (IndexError, KeyError, TypeError, ValueError, RecursionError):
            continue
        if _answered_nested(inner, key[len(m.tool_call_id) + 1 :]):
            return True
    return False


def _expected_share(
    expected: DeferredRequests | None, call_id: str, rec: Paused
) -> DeferredRequests | None:
    """The sub-agent's share of `expected` (its own IDs and tool names), when it carries a
    seal for every call the record waits on (`check` compared them); else None."""
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
            inner = read_records(rec.history, agent.tools)
        except ResumeError:
            continue
        found = _keyed_waiting(inner)
        if found is not None:
            return f"{call_id}/{found[0]}", f"{rec.tool.name}/{found[1]}"
    return None


def _check_expected(
    history: Sequence[Message], results: DeferredResults, expected: DeferredRequests
) -> None:
    if not isinstance(expected, DeferredRequests):
        raise TypeError(
            f"expected is the paused run's Result.pending (DeferredRequests), "
            f"got {type(expected).__name__}"
        )
    waiting: dict[str, tuple[str, str, str]] = {
        c.id: (c.name, c.args, c.seal) for c in pending_or_none(history)
    }
    waiting.update(
        (k, (v.tool_name, v.call.args, v.call.seal)) for k, v in sub_agent_calls(history).items()
    )
    wanted = {p.call_id: p for p in expected.calls}
    for call_id, (name, args, seal) in waiting.items():
        p = wanted.pop(call_id, None)
        if p is None:
            raise ResumeError(
                f'golem: pending tool call "{call_id}" ({name}) is not one of the expected '
                "pending calls (added to the history after the pause?)"
            )
        if p.tool_name != name or not same_args(p.args, args):
            what = "tool name differs" if p.tool_name != name else "arguments differ"
            raise ResumeError(
                f'golem: pending tool call "{call_id}": its {what} from the expected '
                f"pending call ({p.tool_name} {brief(p.args)}, got {name} "
                f"{brief(args)})"
            )
        if p.seal and seal != p.seal:
            raise ResumeError(
                f'golem: pending tool call "{call_id}" ({name}) carries another seal than '
                "the expected pending call (a call or sub-agent record sealed in another "
                "conversation?)"
            )
    for call_id in wanted:  # answered by a resume that failed or was cancelled: progress
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
    approvals: dict[str, Any] = {}
    external: dict[str, str] = {}
    for key, decision in results.approvals.items():
        owner = owner_of(records, key, own_ids)
        if owner is None:
            approvals[key] = decision
        else:
            records[owner].approvals[key[len(owner) + 1 :]] = decision
    for key, text in results.external.items():
        owner = owner_of(records, key, own_ids)
        if owner is None:
            external[key] = text
        else:
            records[owner].external[key[len(owner) + 1 :]] = text
    return DeferredResults(approvals=approvals, external=external)


def _check_sub(
    agent: SubAgent,
    history: list[Message],
    results: DeferredResults,
    conversation_id: str,
    expected: DeferredRequests | None,
) -> None:
    """Check `agent`'s resume as a sub-agent in conversation `conversation_id`, nested
    sub-agents included; an agent with toolsets is checked when it resumes."""
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
