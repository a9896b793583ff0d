"""The records of paused sub-agents in a parent's history (after `PAUSED_MARKER`):
reading them, the calls they wait on, and sealing those calls."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from golem._run import conversation_of
from golem.agent_tool import (
    PAUSED_MARKER,
    AgentTool,
    sub_conversation,
)
from golem.deferred import DeferredRequests, DeferredResults, PendingToolCall, pending_calls
from golem.errors import (
    HistoryError,
    ResumeError,
)
from golem.messages import Message, ToolCall, dumps_history, loads_history
from golem.seal import SealKey, seal_pending
from golem.tool import (
    DeferKind,
    Tool,
)

__all__ = ["SubAgentCall", "seal_sub_agent_calls", "sub_agent_calls"]


@dataclass(slots=True)
class Paused:
    index: int
    message: Message
    tool: AgentTool
    history: list[Message]
    waiting: dict[str, str]
    """The calls the sub-agent waits on (nested ones namespaced) → tool name."""
    approvals: dict[str, Any] = field(default_factory=dict)
    external: dict[str, str] = field(default_factory=dict)
    conversation: str = ""
    """The sub-run's conversation its resume verifies seals for (`sub_conversation`)."""
    expected: DeferredRequests | None = None
    """The sub-agent's share of the parent's `expected` (only for a record sealed for
    another conversation, which it alone binds)."""

    @property
    def continues(self) -> bool:
        """Whether the record waits on nothing: a resume that failed or was cancelled
        after the sub-agent's calls were all answered left it (ADR 0076); the sub-agent
        goes on with `Agent.run` on its history."""
        return not self.waiting and not paused_records(self.history)


def paused_records(history: Sequence[Message]) -> bool:
    """Whether `history` holds a paused sub-agent's record (cheap check before a resume)."""
    return any(m.role == "tool" and m.content.startswith(PAUSED_MARKER) for m in history)


def _record_text(history: list[Message]) -> str:
    """`history` as a record holds it: its JSON, with a lone surrogate in a message's text
    (a tool's result; no JSON history can hold one) written as U+FFFD, as the codec reads
    text that is not UTF-8, so that what ran is handed back rather than lost."""
    try:
        return dumps_history(history)
    except HistoryError:
        return dumps_history(
            [replace(m, content=_unpaired(m.content)) if m.content else m for m in history]
        )


def _unpaired(text: str) -> str:
    """`text` with each lone surrogate replaced by U+FFFD."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def ran_in(history: Sequence[Message], key: str, tools: Mapping[str, Tool]) -> bool:
    """Whether `key` names a call `history` answers, or one under an answered call of an
    agent tool of `tools` (a sub-agent's, `<call id>/<sub call id>`): a resolution a resume
    that failed or was cancelled already used (ADR 0071, ADR 0076)."""
    answered = {m.tool_call_id for m in history if m.role == "tool"}
    return any(
        c.id in answered
        and (
            key == c.id or (key.startswith(c.id + "/") and isinstance(tools.get(c.name), AgentTool))
        )
        for m in history
        for c in m.tool_calls
    )


def read_records(history: Sequence[Message], tools: Mapping[str, Tool]) -> dict[str, Paused]:
    records: dict[str, Paused] = {}
    for i, m in enumerate(history):
        if m.role != "tool" or not m.content.startswith(PAUSED_MARKER):
            continue
        tool = tools.get(m.tool_name)
        if not isinstance(tool, AgentTool):
            raise ResumeError(
                f'golem: tool call "{m.tool_call_id}" records a paused sub-agent, but '
                f'"{m.tool_name}" is not an agent tool of this agent'
            )
        try:
            state = json.loads(m.content.split("\n", 1)[1])
            sub_history = loads_history(state["history"])
        except (IndexError, KeyError, TypeError, ValueError, RecursionError) as exc:
            raise ResumeError(
                f'golem: the paused sub-agent record of tool call "{m.tool_call_id}" is '
                f"unreadable: {exc}"
            ) from exc
        records[m.tool_call_id] = Paused(i, m, tool, sub_history, _waiting_calls(sub_history))
    return records


def owner_of(records: Mapping[str, Paused], key: str, own_ids: set[str]) -> str | None:
    """The record whose sub-agent a resolution key names, or None for the parent's own
    call; `ResumeError` when it names a waiting call of two of them."""
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


def _waiting_calls(history: Sequence[Message]) -> dict[str, str]:
    """Every call a paused history waits on, by ID (nested ones namespaced) → tool name."""
    waiting = {c.id: c.name for c in pending_or_none(history)}
    waiting.update((call_id, sub.tool_name) for call_id, sub in sub_agent_calls(history).items())
    return waiting


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
    """The calls the paused sub-agents recorded in `history` wait on, by namespaced ID, in
    history order, at any depth (unreadable records skipped). With the parent's
    `conversation_id`, each call's `conversation_id` is its sub-run's derived one."""
    found: dict[str, SubAgentCall] = {}
    for m in history:
        if m.role != "tool" or not m.content.startswith(PAUSED_MARKER):
            continue
        try:
            state = json.loads(m.content.split("\n", 1)[1])
            inner = loads_history(state["history"])
        except (IndexError, KeyError, TypeError, ValueError, RecursionError):
            continue
        named = conversation_of(inner)
        conversation = sub_conversation(conversation_id, m.tool_call_id) or named
        for c in pending_or_none(inner):
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
    """A copy of `history` whose paused sub-agents' calls named in `kinds` (namespaced ID
    → kind) are sealed, each for its sub-run's conversation (derived from `conversation_id`
    when given, else the record's), at any depth; nothing is mutated."""
    out = list(history)
    for i, m in enumerate(out):
        if m.role != "tool" or not m.content.startswith(PAUSED_MARKER):
            continue
        prefix = f"{m.tool_call_id}/"
        mine = {k[len(prefix) :]: v for k, v in kinds.items() if k.startswith(prefix)}
        if not mine:
            continue
        head, sep, body = m.content.partition("\n")
        try:
            state = json.loads(body)
            inner = loads_history(state["history"])
        except (KeyError, TypeError, ValueError, RecursionError):
            continue
        conversation = sub_conversation(conversation_id, m.tool_call_id)
        conversation = conversation or conversation_of(inner)
        inner = seal_pending(inner, keys, conversation, mine)
        inner = seal_sub_agent_calls(inner, keys, mine, conversation if conversation_id else "")
        state["history"] = dumps_history(inner)
        text = json.dumps(state, ensure_ascii=False, separators=(",", ":"))
        out[i] = replace(m, content=f"{head}{sep}{text}")
    return out


def pending_or_none(history: Sequence[Message]) -> list[Any]:
    try:
        return pending_calls(history)
    except ResumeError:
        return []


def drop_finished(
    history: Sequence[Message],
    results: DeferredResults,
    expected: DeferredRequests | None,
    tools: Mapping[str, Tool],
) -> tuple[DeferredResults, DeferredRequests | None]:
    """`results` and `expected` without the namespaced calls of sub-agents that answered:
    a key `<call id>/...` naming no call of `history`, whose call an agent tool's answer
    (not a paused record) answers — left by a nested resume that failed or was cancelled
    after that sub-agent answered (ADR 0076). Like a resolution for any answered call
    (ADR 0071), it is skipped; nothing of it runs."""
    keys = [*results.approvals, *results.external]
    if expected is not None:
        keys.extend(p.call_id for p in expected.calls)
    if not any("/" in k for k in keys):
        return results, expected
    names = {c.id: c.name for m in history for c in m.tool_calls}
    finished = [
        m.tool_call_id + "/"
        for m in history
        if m.role == "tool"
        and m.tool_call_id
        and not m.content.startswith(PAUSED_MARKER)
        and isinstance(tools.get(names.get(m.tool_call_id, "")), AgentTool)
    ]
    if not finished:
        return results, expected

    def gone(key: str) -> bool:
        return key not in names and any(key.startswith(f) for f in finished)

    if not any(gone(k) for k in keys):
        return results, expected
    kept = DeferredResults(
        approvals={k: v for k, v in results.approvals.items() if not gone(k)},
        external={k: v for k, v in results.external.items() if not gone(k)},
    )
    if expected is not None:
        expected = DeferredRequests(
            approvals=[p for p in expected.approvals if not gone(p.call_id)],
            external=[p for p in expected.external if not gone(p.call_id)],
        )
    return kept, expected


def progress_record(
    rec: Paused, sub_history: list[Message], run_id: str, conversation_id: str
) -> Message:
    """`rec` rewritten to hold `sub_history`, its sub-agent's progress (ADR 0076)."""
    name = rec.tool.name
    waiting = _waiting_calls(sub_history)
    if waiting:
        calls = ", ".join(f"{sub_name} ({sub_id})" for sub_id, sub_name in waiting.items())
        line = f'sub-agent "{name}" is paused, waiting for {calls}'
    else:
        line = f'sub-agent "{name}" is paused; its calls are answered and a resume continues it'
    state = json.dumps(
        {"agent": name, "history": _record_text(sub_history)},
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return replace(
        rec.message,
        content=f"{PAUSED_MARKER} {line}\n{state}",
        run_id=run_id or rec.message.run_id,
        conversation_id=conversation_id or rec.message.conversation_id,
    )


def pending_of(history: Sequence[Message], results: DeferredResults) -> DeferredRequests:
    """The calls a paused `history` waits on — its own pending calls and, where each
    paused sub-agent's record stands, that sub-agent's (namespaced, at any depth) — in
    history order, grouped by the kind `results` gives them (reasons are empty: a history
    keeps none)."""
    answered = {m.tool_call_id for m in history if m.role == "tool"}
    records = {
        m.tool_call_id: m
        for m in history
        if m.role == "tool" and m.content.startswith(PAUSED_MARKER)
    }
    approvals: list[PendingToolCall] = []
    external: list[PendingToolCall] = []

    def add(call_id: str, tool_name: str, call: ToolCall) -> None:
        approval = call_id in results.approvals
        kind = DeferKind.APPROVAL if approval else DeferKind.EXTERNAL
        pending = PendingToolCall(call_id, tool_name, call.args, "", kind, call.seal)
        (approvals if approval else external).append(pending)

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
    return DeferredRequests(approvals=approvals, external=external)
