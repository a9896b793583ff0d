"""What a resume is given and checked against: the decisions as deferred results, the
calls a retry refuses, and the stored calls and seals the history must still hold."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from golem.deferred import Approval, DeferredResults, PausedRun, PendingToolCall
from golem.durable.store import ClaimedRun, DecisionKind, RunRecord
from golem.errors import SubAgentConversationMismatch
from golem.history import paused_batch_ids
from golem.messages import Message, ToolCall
from golem.records import SubAgentCall, paused_records, sub_agent_calls
from golem.seal import SealKeys, verify_call

if TYPE_CHECKING:
    from golem.agent import Agent


RETRY_REFUSAL = (
    "not run again after an interrupted attempt: it may already have run, its tool is not "
    "declared idempotent and no operator confirmed a re-run"
)


def _idempotent(agent: Agent[Any, Any], tool_name: str) -> bool:
    tool = agent.tools.get(tool_name)
    return bool(getattr(tool, "idempotent", False))


def refused_calls(run: RunRecord, agent: Agent[Any, Any]) -> dict[str, str]:
    """The approved calls a retry of `run` does not execute, each with the reason: neither
    confirmed by an operator nor of a tool declared idempotent (none on a first attempt)."""
    if run.attempt <= 1:
        return {}
    return {
        call.call_id: RETRY_REFUSAL
        for call in run.calls
        if call.decision is not None
        and call.decision.kind is DecisionKind.APPROVE
        and not (call.rerun_confirmed_by or _idempotent(agent, call.tool_name))
    }


def deferred_results(claimed: ClaimedRun, agent: Agent[Any, Any]) -> DeferredResults:
    """The run's decisions as the resume's resolutions (a call a retry refuses is denied)."""
    approvals: dict[str, Approval] = {}
    external: dict[str, str] = {}
    refused = refused_calls(claimed.run, agent)
    for call in claimed.run.calls:
        d = call.decision
        if d is None:  # a claimed run has every call decided; keep the gate closed regardless
            approvals[call.call_id] = Approval(False, reason="undecided")
        elif d.kind is DecisionKind.APPROVE and call.call_id in refused:
            approvals[call.call_id] = Approval(False, reason=refused[call.call_id])
        elif d.kind is DecisionKind.APPROVE:
            approvals[call.call_id] = Approval(True, args=d.args)
        elif d.kind is DecisionKind.DENY:
            approvals[call.call_id] = Approval(False, reason=d.reason)
        else:
            external[call.call_id] = d.text
    return DeferredResults(approvals=approvals, external=external)


class StoredCallMismatch(Exception):
    """The run's history does not hold the pending calls its approvers decided on."""


def _same_args(history_args: str, decided_args: str) -> bool:
    """Whether the history's argument bytes are the decided ones (or their compact form,
    which golem < 0.2 wrote)."""
    if history_args == decided_args:
        return True
    try:
        compact = json.dumps(json.loads(decided_args), ensure_ascii=False, separators=(",", ":"))
    except ValueError:
        return False
    return history_args == compact


def latest_calls(messages: Sequence[Message], ids: Collection[str]) -> dict[str, ToolCall]:
    """The last tool call in the history for each of `ids`, scanning back from the end."""
    wanted = set(ids)
    found: dict[str, ToolCall] = {}
    for m in reversed(messages):
        for c in reversed(m.tool_calls):
            if c.id in wanted and c.id not in found:
                found[c.id] = c
        if len(found) == len(wanted):
            break
    return found


def nested_calls(
    messages: Sequence[Message], ids: Collection[str], conversation_id: str = ""
) -> dict[str, SubAgentCall]:
    """The calls among `ids` that paused sub-agents wait on (their records in `messages`;
    with `conversation_id`, the parent's, each bound to its derived sub-run conversation)."""
    if not paused_records(messages):
        return {}
    wanted = set(ids)
    return {i: s for i, s in sub_agent_calls(messages, conversation_id).items() if i in wanted}


def stored_calls(
    messages: Sequence[Message], ids: Collection[str], conversation_id: str = ""
) -> tuple[dict[str, ToolCall], dict[str, SubAgentCall]]:
    """Each of `ids` as the history holds it: the last own call, or a paused sub-agent's call
    under its namespaced tool name (the second map keeps those as sealed)."""
    latest = latest_calls(messages, ids)
    nested: dict[str, SubAgentCall] = {}
    if len(latest) < len(set(ids)):
        nested = nested_calls(messages, [i for i in ids if i not in latest], conversation_id)
        latest.update((i, replace(s.call, name=s.tool_name)) for i, s in nested.items())
    return latest, nested


def as_held(paused: PausedRun, latest: Mapping[str, ToolCall]) -> PausedRun:
    """`paused` expecting each call's arguments as the history holds them (compacted in a
    history golem < 0.2 wrote, which `check_calls` accepts)."""

    def held(p: PendingToolCall) -> PendingToolCall:
        tc = latest.get(p.call_id)
        return p if tc is None or tc.args == p.args else replace(p, args=tc.args)

    was = paused.pending
    approvals, external = [held(p) for p in was.approvals], [held(p) for p in was.external]
    return replace(paused, pending=replace(was, approvals=approvals, external=external))


def check_calls(run: RunRecord, latest: Mapping[str, ToolCall]) -> None:
    """Raise `StoredCallMismatch` unless every decided call is in the history as decided."""
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


def check_seals(
    run: RunRecord,
    latest: Mapping[str, ToolCall],
    keys: SealKeys,
    nested: Mapping[str, SubAgentCall],
    history: Sequence[Message] = (),
) -> None:
    """Every stored call must carry a valid seal of its kind and the run's own calls be in the
    paused batch; a sub-agent's call is checked as its record holds it (ADR 0065)."""
    in_batch = paused_batch_ids(history) if history else None
    for call in run.calls:
        tc = latest.get(call.call_id)
        if tc is None:  # check_calls reports it
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
