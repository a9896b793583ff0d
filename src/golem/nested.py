"""Paused sub-agents inside a parent's history: their records, checked and resumed.

A parent whose sub-agent (`Agent.as_tool`) paused records the sub-agent's paused history
in the tool message that answers its call (`golem.agent_tool.PAUSED_MARKER`). A resume of
the parent takes namespaced IDs (`<call id>/<sub call id>`): `check_records` and
`check_sub_agents` validate every record and each sub-agent's share of the resolutions
before anything runs, `resume_sub_agents` resumes each sub-agent by its own
`run_with_deferred_results`, and the parent then resolves its own calls (ADR 0076).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from golem._loop import RunState
from golem.agent_tool import (
    PAUSED_MARKER,
    AgentTool,
    copy_result,
    forwarder,
    namespaced,
    output_text,
    paused_record,
    sub_conversation,
)
from golem.deferred import DeferredRequests, DeferredResults, PendingToolCall
from golem.errors import (
    ResumeError,
    Stage,
    SubAgentConversationMismatch,
    ToolError,
)
from golem.events import EventHandler
from golem.history import paused_batch_ids, validate_history
from golem.messages import Message, ToolCall, loads_history
from golem.records import (
    Paused,
    named_conversation,
    owner_of,
    pending_or_none,
    ran_in,
    read_records,
    record_text,
    sub_agent_calls,
    waiting_calls,
)
from golem.result import PartialResult, Result, RunError
from golem.resume import (
    BeforeApproved,
    ResumeProgress,
    answered_calls,
    brief,
    conversation_required,
    same_args,
    with_expected_args,
)
from golem.tool import (
    Canceled,
    DeferKind,
    Tool,
    find_signal,
)
from golem.usage import Usage

# --------------------------------------------------------------------------- resuming




__all__: list[str] = []


async def resume_sub_agents(
    plan: NestedPlan,
    *,
    deps: Any,
    observers: Sequence[EventHandler] = (),
    sink: Callable[[Any], None] | None = None,
    trace_context: str = "",
    run_id: str = "",
    conversation_id: str = "",
    before_approved: BeforeApproved | None = None,
    progress: ResumeProgress | None = None,
    price: Callable[[Usage], float] = lambda usage: 0.0,
) -> Handing:
    """Resume each paused sub-agent of a checked plan by its own `run_with_deferred_results`
    (or `run`, when it has nothing left to resolve) and write its answer, or its new record
    when it paused again, in place of its old record.

    The returned `Handing` holds the rewritten history (`merged`), the sub-agents that paused
    again (`repaused`) and what they spent; `progress` follows it. `before_approved` (the
    parent's) is awaited before every approved re-run, with the call namespaced as in the
    parent's `Result.pending`. The sub-agents' events go to `observers` and `sink`.

    Raises:
        RunError: a sub-agent failed; its `partial` is the parent's history with what ran
            answered or rewritten (ADR 0076).
    """
    handing = Handing(plan.history, plan.records, plan.results, run_id, conversation_id, price)
    if progress is not None:
        progress._follow(handing.read)
    merged = handing.merged = list(plan.history)
    for call_id, rec in plan.records.items():
        forward = forwarder(observers, sink, call_id, rec.tool.name)
        try:
            if rec.continues:
                sub = await rec.tool.agent.run(
                    deps=rec.tool._deps(deps),
                    history=rec.history,
                    conversation_id=rec.conversation,
                    on_event=forward,
                )
            else:
                sub = await rec.tool.agent.run_with_deferred_results(
                    rec.history,
                    DeferredResults(approvals=rec.approvals, external=rec.external),
                    deps=rec.tool._deps(deps),
                    conversation_id=rec.conversation,
                    expected=rec.expected,
                    on_event=forward,
                    trace_context=trace_context,
                    before_approved=_namespaced_guard(before_approved, call_id, rec.tool.name),
                    progress=handing.subs.setdefault(call_id, ResumeProgress()),
                )
        except RunError as failed:
            wrapped = _sub_failed(call_id, rec.tool.name, failed)
            wrapped.partial = handing.partial(failed.partial)
            raise wrapped from wrapped.__cause__
        handing.spent.append(sub)
        if sub.pending is not None:
            handing.repaused[call_id] = (rec.tool, sub)
            merged[rec.index] = paused_record(
                call_id,
                rec.tool.name,
                sub,
                run_id or rec.message.run_id,
                conversation_id or rec.message.conversation_id,
            )
        else:
            merged[rec.index] = handing.answers[call_id] = replace(
                rec.message,
                content=output_text(sub.output),
                run_id=run_id or rec.message.run_id,
                conversation_id=conversation_id or rec.message.conversation_id,
            )
    return handing


@dataclass(slots=True)
class Handing:
    """What a nested resume has done so far, built into a history only when a failure or
    a cancellation hands it back (ADR 0076)."""

    history: list[Message]
    records: Mapping[str, Paused]
    results: DeferredResults
    run_id: str
    conversation_id: str
    price: Callable[[Usage], float]
    spent: list[Result[Any]] = field(default_factory=list)
    """The results of the sub-agents that answered or paused again."""
    answers: dict[str, Message] = field(default_factory=dict)
    """The answer written in place of each record whose sub-agent answered."""
    subs: dict[str, ResumeProgress] = field(default_factory=dict)
    """Each resumed sub-agent's own progress."""
    own: ResumeProgress | None = None
    """The progress of the parent's own pending calls, once they resolve."""
    base: list[Message] | None = None
    """The history the parent's own resume started from (every sub-agent answered)."""
    continued: list[Message] | None = None
    """The resolved history the parent went on from (no call of its own was pending)."""
    merged: list[Message] = field(default_factory=list)
    """The history with each sub-agent's answer, or new record, in place of its old one."""
    repaused: dict[str, tuple[AgentTool, Result[Any]]] = field(default_factory=dict)
    """The sub-agents that paused again, by parent call ID."""

    def paused(self, messages: list[Message], tool_calls: int) -> Result[Any]:
        """The parent, still paused on the sub-agents that paused again (with the resuming
        run's identity), counting what the sub-agents spent."""
        paused = _paused_result(
            messages, self.repaused, tool_calls, self.run_id, self.conversation_id
        )
        return _with_usage(paused, self.spent)

    def read(self) -> tuple[list[Message] | None, bool, tuple[str, ...]]:
        """(the history to go on from or None when nothing ran, whether it is still
        paused, the namespaced IDs of the approved calls that ran)."""
        answered = tuple(f"{cid}/{x}" for cid, p in self.subs.items() for x in p.answered)
        if self.own is not None:
            answered += self.own.answered
        if self.continued is not None:
            return list(self.continued), False, answered
        if self.base is not None and self.own is not None:
            got = self.own.messages
            if got is None:
                return list(self.base), True, answered
            return got, self.own.paused, answered
        out = list(self.history)
        touched = False
        for call_id, rec in self.records.items():
            answer = self.answers.get(call_id)
            if answer is not None:
                out[rec.index] = answer
                touched = True
                continue
            sub = self.subs.get(call_id)
            sub_history = sub.messages if sub is not None else None
            if sub_history is not None:
                out[rec.index] = _progress_record(
                    rec, sub_history, self.run_id, self.conversation_id
                )
                touched = True
        if self.own is not None and self.own.answered:
            out = self.own._answer(out)
            touched = True
        return (out if touched else None), True, answered

    def partial(self, failed: PartialResult | None) -> PartialResult:
        """The partial of a nested resume that failed while a sub-agent resumed (its own
        partial `failed`, for what it spent) or while the parent's own calls resolved."""

        messages = self.read()[0]
        if messages is None:
            messages = list(self.history)
        spent = Spent.of(self.spent)
        usage, requests, tool_calls = spent
        if failed is not None:
            usage = usage + failed.usage
            requests += failed.requests
            tool_calls += failed.tool_calls
        return PartialResult(
            messages=messages,
            usage=usage,
            requests=requests,
            tool_calls=tool_calls,
            cost=self.price(usage),
            run_id=self.run_id,
            conversation_id=self.conversation_id,
            pending=_pending_of(messages, self.results),
        )


def _progress_record(
    rec: Paused, sub_history: list[Message], run_id: str, conversation_id: str
) -> Message:
    """`rec` rewritten to hold `sub_history`, its sub-agent's progress (ADR 0076)."""
    name = rec.tool.name
    waiting = waiting_calls(sub_history)
    if waiting:
        calls = ", ".join(f"{sub_name} ({sub_id})" for sub_id, sub_name in waiting.items())
        line = f'sub-agent "{name}" is paused, waiting for {calls}'
    else:
        line = f'sub-agent "{name}" is paused; its calls are answered and a resume continues it'
    state = json.dumps(
        {"agent": name, "history": record_text(sub_history)},
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return replace(
        rec.message,
        content=f"{PAUSED_MARKER} {line}\n{state}",
        run_id=run_id or rec.message.run_id,
        conversation_id=conversation_id or rec.message.conversation_id,
    )


def _pending_of(history: Sequence[Message], results: DeferredResults) -> DeferredRequests:
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


class Spent(NamedTuple):
    """What resumed sub-agents spent: a resuming parent's run starts counting from it."""

    usage: Usage
    requests: int
    tool_calls: int

    @classmethod
    def of(cls, results: Sequence[Result[Any]]) -> Spent:
        usage, requests, tool_calls = Usage(), 0, 0
        for r in results:
            usage = usage + r.usage
            requests += r.requests
            tool_calls += r.tool_calls
        return cls(usage, requests, tool_calls)

    def seed(self, state: RunState) -> None:
        """Start `state`'s counters from this (before the parent's re-runs and loop)."""
        state.usage = state.usage + self.usage
        state.requests += self.requests
        state.tool_calls += self.tool_calls


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
    """Check a nested resume's records and split the resolutions between the sub-agents
    (namespaced IDs) and the parent; the caller then checks the parent's own resolutions
    on `plan.checked` and calls `check_sub_agents`.

    With `expected` (the paused parent's `Result.pending`), the calls waiting — the
    parent's own and the sub-agents' (namespaced) — must be exactly the expected ones,
    with the same tool names, arguments and seals, each resolved by its kind.

    Raises:
        ResumeError: the first problem found.
        TypeError: `expected` is not a `DeferredRequests`.
    """
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
    """Check each sub-agent's share as the sub-agent itself checks a resume, at any depth,
    in its conversation `sub_conversation(conversation_id, call ID)`.

    A record of a sub-agent with a seal key that names another conversation than its
    derived one (from another conversation, or stored before ADR 0065) is refused
    (`SubAgentConversationMismatch`) unless `expected` carries every one of its calls'
    seals; it then resumes in the conversation it names, bound by those seals.
    Without `conversation_bound`, a sealed call needs `expected` (`ConversationRequired`).

    Raises:
        ResumeError: the first problem found.
    """
    for call_id, rec in plan.records.items():
        rec.conversation = sub_conversation(conversation_id, call_id)
        if rec.continues:  # no pending call to verify: its history is checked, then run
            _check_continuing(call_id, rec)
            continue
        named = named_conversation(rec.history)
        if rec.tool.agent.seal_keys is not None and named and named != rec.conversation:
            rec.expected = _expected_share(plan.expected, call_id, rec)
            if rec.expected is None:
                raise _mismatch(call_id, rec, named)
            rec.conversation = named
        rec.tool.agent._check_sub_resume(
            rec.history,
            DeferredResults(approvals=rec.approvals, external=rec.external),
            rec.conversation,
            rec.expected,
        )
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
        "golem derived sub-run conversations from the parent's (ADR 0065). Resume it with "
        "expected=paused.pending (the paused parent's Result.pending, which carries its "
        "seals), or finish such runs with the golem that paused them; nothing was executed",
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


def _namespaced_guard(
    guard: BeforeApproved | None, call_id: str, tool_name: str
) -> BeforeApproved | None:
    """`guard` for a sub-agent's resume: it sees the sub-agent's calls namespaced."""
    if guard is None:
        return None

    async def namespaced(call: ToolCall) -> None:
        await guard(replace(call, id=f"{call_id}/{call.id}", name=f"{tool_name}/{call.name}"))

    return namespaced


def _sub_failed(call_id: str, tool_name: str, failed: RunError) -> RunError:
    """The parent's failure when a sub-agent it resumes fails: like an approved re-run's —
    stage `canceled` with the sentinel when the sub-agent was canceled, else stage `tool`
    naming the parent's call (the caller sets the parent's partial: the sub-run's is not
    the parent's evidence)."""
    canceled = find_signal(failed, Canceled) if failed.stage is Stage.CANCELED else None
    if canceled is not None:
        return RunError(Stage.CANCELED, canceled)
    err = ToolError(tool_name, call_id, f"sub-agent resume failed: {failed}")
    err.__cause__ = failed
    return RunError(Stage.TOOL, err)


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


def _paused_result(
    messages: list[Message],
    repaused: Mapping[str, tuple[AgentTool, Result[Any]]],
    tool_calls: int,
    run_id: str = "",
    conversation_id: str = "",
) -> Result[Any]:
    """The parent, still paused on the sub-agents that paused again (with the resuming
    run's identity)."""

    last = messages[-1]
    approvals: list[PendingToolCall] = []
    external: list[PendingToolCall] = []
    for call_id, (tool, sub) in repaused.items():
        assert sub.pending is not None
        approvals.extend(namespaced(call_id, tool.name, sub.pending.approvals))
        external.extend(namespaced(call_id, tool.name, sub.pending.external))
    conversation_id = conversation_id or last.conversation_id
    return Result(
        output=None,
        messages=messages,
        tool_calls=tool_calls,
        run_id=run_id or last.run_id,
        conversation_id=conversation_id,
        pending=DeferredRequests(approvals, external, conversation_id),
    )


def _with_usage(result: Result[Any], subs: Sequence[Result[Any]]) -> Result[Any]:
    usage, requests, tool_calls = result.usage, result.requests, result.tool_calls
    for sub in subs:
        usage = usage + sub.usage
        requests += sub.requests
        tool_calls += sub.tool_calls
    return copy_result(result, usage=usage, requests=requests, tool_calls=tool_calls)
