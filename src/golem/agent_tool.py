"""Agents as tools: a parent agent calls a sub-agent, whose pauses surface in the parent.

```python
researcher = Agent(model, name="researcher", tools=[...])
parent = Agent(model, tools=[researcher.as_tool("research", "Research a question.")])
```

The sub-agent runs inside the parent's tool call on the prompt the parent's model wrote;
its answer is the call's result, its usage (tokens, requests, tool calls) counts in the
parent's, and the parent's usage limits are checked over both. Its run events reach the
parent's observers and stream too, marked with `RunEvent.agent` / `.namespace` and
namespaced call IDs (docs/adr/0027).

When the sub-agent pauses, the parent pauses too. The parent's `Result.pending` lists the
sub-agent's pending calls with namespaced IDs (`<parent call id>/<sub call id>`, tool
names `<tool>/<sub tool>`), and the parent's history records the sub-agent's paused
history in the parent call's result (a tool message starting with `PAUSED_MARKER`).
`parent.run_with_deferred_results(history, results)` — in any process — resumes each
paused sub-agent with its share of the results (the namespaced IDs), puts its answer in
place of the record, and then resumes the parent. A sub-agent that pauses again keeps
the parent paused, with the new pending calls (docs/guides/agents-as-tools.md, docs/adr/0021).
"""

from __future__ import annotations

import contextvars
import json
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple, Protocol

import pydantic_core

from golem._loop import RunState
from golem.deferred import DeferredRequests, DeferredResults, PendingToolCall, pending_calls
from golem.errors import (
    HistoryError,
    ResumeError,
    Stage,
    SubAgentConversationMismatch,
    ToolError,
)
from golem.events import EventHandler, RunEvent, dispatch
from golem.history import paused_batch_ids, validate_history
from golem.messages import Message, ToolCall, dumps_history, loads_history
from golem.result import PartialResult, Result, RunError
from golem.resume import (
    BeforeApproved,
    ResumeProgress,
    answered_calls,
    brief,
    conversation_required,
    merge,
    same_args,
    with_expected_args,
)
from golem.seal import SealKey, SealKeys, seal_pending
from golem.tool import (
    Canceled,
    DeferKind,
    Deferred,
    ModelRetry,
    RunContext,
    Tool,
    ToolResult,
    find_signal,
)
from golem.usage import Usage

__all__ = [
    "PAUSED_MARKER",
    "AgentTool",
    "SubAgent",
    "SubAgentCall",
    "SubAgentPaused",
    "forwarder",
    "seal_sub_agent_calls",
    "sub_agent_calls",
    "sub_conversation",
]

PAUSED_MARKER = "[golem: sub-agent paused]"
"""How the result recorded for a paused sub-agent's call starts (the state follows)."""

_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "prompt": {"type": "string", "description": "The task for the sub-agent, self-contained."}
    },
    "required": ["prompt"],
    "additionalProperties": False,
}


class SubAgentPaused(Deferred):
    """Raised by an `AgentTool` whose sub-agent paused; carries the sub-agent's `Result`."""

    def __init__(self, kind: DeferKind, reason: str, result: Result[Any]) -> None:
        super().__init__(kind, reason)
        self.result = result


@dataclass(slots=True)
class _Scope:
    """One parent run: where its sub-agents' usage and pauses go."""

    state: RunState
    paused: dict[str, tuple[AgentTool, Result[Any]]] = field(default_factory=dict)


_SCOPE: contextvars.ContextVar[_Scope | None] = contextvars.ContextVar(
    "golem_agent_tool_scope", default=None
)

SUB_RUN: contextvars.ContextVar[list[RunState] | None] = contextvars.ContextVar(
    "golem_agent_tool_sub_run", default=None
)
"""Set by an `AgentTool` call around its sub-run: the sub-run's `Agent._prepare` appends its
`RunState` (and clears the variable, so deeper runs do not), so the call can add what the
sub-run spent to its parent's — also when the sub-run fails, times out or is cancelled."""


class SubAgent(Protocol):
    """What an `AgentTool` needs of the agent it runs (an `Agent`)."""

    @property
    def name(self) -> str: ...
    @property
    def tools(self) -> Mapping[str, Tool]: ...
    @property
    def seal_keys(self) -> SealKeys | None: ...
    @property
    def run(self) -> Callable[..., Awaitable[Result[Any]]]: ...
    @property
    def run_with_deferred_results(self) -> Callable[..., Awaitable[Result[Any]]]: ...
    @property
    def _check_sub_resume(self) -> Callable[..., None]: ...


class AgentTool(Tool):
    """A `Tool` that runs another `Agent` (build it with `Agent.as_tool`).

    Args:
        agent: The sub-agent.
        name: The tool name the parent's model calls.
        description: What the sub-agent does, for the parent's model.
        deps: Maps the parent's `deps` to the sub-agent's (default: passed unchanged).
        timeout: Seconds the whole sub-run may take (None: the parent's `tool_timeout`).
    """

    __slots__ = ("agent", "map_deps")

    def __init__(
        self,
        agent: SubAgent,
        name: str,
        description: str,
        *,
        deps: Callable[[Any], Any] | None = None,
        timeout: float | None = None,
    ) -> None:
        super().__init__(name, description, dict(_SCHEMA), self._call, timeout=timeout)
        self.agent = agent
        self.map_deps = deps

    def _deps(self, parent_deps: Any) -> Any:
        return self.map_deps(parent_deps) if self.map_deps is not None else parent_deps

    async def _call(self, ctx: RunContext[Any], args: dict[str, Any]) -> ToolResult:
        prompt = args.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            raise ModelRetry("prompt must be a non-empty string")
        scope = _SCOPE.get()
        forward = None
        if scope is not None:
            forward = forwarder(scope.state.observers, scope.state.sink, ctx.call_id, self.name)
        spent: list[RunState] = []
        token = SUB_RUN.set(spent)
        try:
            result = await self.agent.run(
                prompt,
                deps=self._deps(ctx.deps),
                on_event=forward,
                conversation_id=sub_conversation(ctx.conversation_id, ctx.call_id) or None,
            )
        finally:
            SUB_RUN.reset(token)
            if scope is not None:
                for sub_state in spent:  # what the sub-run spent, whatever its outcome
                    _absorb(scope.state, sub_state)
        if result.pending is not None:
            if scope is None:
                raise RuntimeError(
                    f'sub-agent "{self.name}" paused outside an agent run; call it from an agent'
                )
            scope.paused[ctx.call_id] = (self, result)
            kind = DeferKind.APPROVAL if result.pending.approvals else DeferKind.EXTERNAL
            raise SubAgentPaused(kind, _waiting(self.name, result.pending), result)
        return ToolResult(_output_text(result.output))


def sub_conversation(conversation_id: str, call_id: str) -> str:
    """The conversation of the sub-run under parent call `call_id` of `conversation_id`:
    `<conversation>/<call id>` (ADR 0065), so the sub-agent's seals bind the parent's
    conversation and call; empty when the parent's conversation is unknown.

    `%` and `/` in the call ID are written `%25` and `%2F`: the call ID is then the part
    after the last `/`, so no two (conversation, call) pairs share a sub-run conversation
    (`a` + `b/p1` and `a/b` + `p1` would otherwise both be `a/b/p1`)."""
    if not conversation_id:
        return ""
    return f"{conversation_id}/{call_id.replace('%', '%25').replace('/', '%2F')}"


def agent_tool(
    agent: SubAgent,
    name: str | None = None,
    description: str | None = None,
    *,
    deps: Callable[[Any], Any] | None = None,
    timeout: float | None = None,
) -> AgentTool:
    """`agent` as a tool another agent can call (see `Agent.as_tool`)."""
    tool_name = name or agent.name
    if not tool_name:
        raise ValueError("an agent tool needs a name: pass name=... or give the agent a name")
    if "/" in tool_name:
        raise ValueError(f"an agent tool name cannot contain '/', got {tool_name!r}")
    text = description if description is not None else f"Ask the {tool_name} agent."
    return AgentTool(agent, tool_name, text, deps=deps, timeout=timeout)


def forwarder(
    observers: Sequence[EventHandler],
    sink: Callable[[Any], None] | None,
    call_id: str,
    tool_name: str,
) -> EventHandler | None:
    """The `on_event` of a sub-run under the parent's call `call_id` of `tool_name`: each
    event goes to the parent's observers (and stream) marked with `agent` and `namespace`,
    its call ID and tool name namespaced like the parent's pending calls; None when the
    parent has no observer."""
    if not observers and sink is None:
        return None

    def forward(event: RunEvent) -> None:
        marked = replace(
            event,
            call_id=f"{call_id}/{event.call_id}" if event.call_id else "",
            tool_name=f"{tool_name}/{event.tool_name}" if event.tool_name else "",
            agent=f"{tool_name}/{event.agent}" if event.agent else tool_name,
            namespace=f"{call_id}/{event.namespace}" if event.namespace else call_id,
        )
        dispatch(observers, marked)
        if sink is not None:
            sink(marked)

    return forward


def _absorb(state: RunState, result: RunState | Result[Any] | Any) -> None:
    state.usage = state.usage + result.usage
    state.requests += result.requests
    state.tool_calls += result.tool_calls


def _output_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    return pydantic_core.to_json(output).decode()


def _waiting(name: str, pending: DeferredRequests) -> str:
    calls = ", ".join(f"{p.tool_name} ({p.call_id})" for p in pending.calls)
    return f'sub-agent "{name}" is paused, waiting for {calls}'


# --------------------------------------------------------------------------- pausing


def has_agent_tools(tools: Mapping[str, Tool]) -> bool:
    """Whether any of `tools` is an `AgentTool` (the agent then scopes its runs)."""
    return any(isinstance(t, AgentTool) for t in tools.values())


@contextmanager
def run_scope(state: RunState) -> Iterator[_Scope]:
    """Collect the usage and pauses of the sub-agents called during one parent run."""
    scope = _Scope(state)
    token = _SCOPE.set(scope)
    try:
        yield scope
    finally:
        _SCOPE.reset(token)


def surface(result: Result[Any], scope: _Scope) -> Result[Any]:
    """A paused parent result with its paused sub-agents' calls surfaced (namespaced) and
    their paused histories recorded in the parent's history.

    Pending calls keep the model's emission order within each kind (a sub-agent's calls
    where its parent call stands), and the records answer their calls in emission order
    among the batch's recorded results.

    Raises:
        RunError: stage `tool` when a pending call ID occurs twice (a parent call named
            like a sub-agent's namespaced call): no resolution could tell them apart.
    """
    pending = result.pending
    if pending is None or not scope.paused:
        return result
    messages = result.messages
    last = len(messages) - 1
    while last >= 0 and not (messages[last].role == "assistant" and messages[last].tool_calls):
        last -= 1
    batch = messages[last].tool_calls
    own = {p.call_id: p for p in pending.calls if p.call_id not in scope.paused}
    own_approvals = {p.call_id for p in pending.approvals}
    approvals: list[PendingToolCall] = []
    external: list[PendingToolCall] = []
    records: dict[str, Message] = {}
    for c in batch:
        found = scope.paused.get(c.id)
        if found is None:
            p = own.pop(c.id, None)
            if p is not None:
                (approvals if c.id in own_approvals else external).append(p)
            continue
        tool, sub = found
        assert sub.pending is not None
        approvals.extend(_namespaced(c.id, tool.name, sub.pending.approvals))
        external.extend(_namespaced(c.id, tool.name, sub.pending.external))
        records[c.id] = _record(c.id, tool.name, sub, result.run_id, result.conversation_id)
    for p in own.values():  # not a call of the batch (never the case for a pause the loop made)
        (approvals if p.call_id in own_approvals else external).append(p)
    ordered = list(messages[: last + 1])
    tail = list(messages[last + 1 :])
    for c in batch:
        record = records.get(c.id)
        if record is not None:
            ordered.append(record)
            continue
        for j, m in enumerate(tail):
            if m.tool_call_id == c.id:
                ordered.append(tail.pop(j))
                break
    ordered.extend(tail)
    _refuse_collisions(result, ordered, [*approvals, *external], batch)
    return copy_result(
        result,
        messages=ordered,
        pending=DeferredRequests(approvals=approvals, external=external),
    )


def _refuse_collisions(
    result: Result[Any],
    messages: list[Message],
    pending: Sequence[PendingToolCall],
    batch: Sequence[ToolCall],
) -> None:
    seen: set[str] = set()
    for p in pending:
        if p.call_id not in seen:
            seen.add(p.call_id)
            continue
        call = next((c for c in batch if c.id == p.call_id), None)
        err = ToolError(
            call.name if call is not None else p.tool_name,
            p.call_id,
            f'pending call ID "{p.call_id}" collides with a sub-agent\'s namespaced call ID '
            "(<parent call id>/<sub call id>); no resolution could tell the two apart",
        )
        raise RunError(Stage.TOOL, err, _partial(result, messages))


def partial_of(result: Result[Any]) -> PartialResult:
    """`result` as the evidence of a run that failed after producing it."""
    return _partial(result, result.messages)


def _partial(result: Result[Any], messages: list[Message]) -> PartialResult:

    return PartialResult(
        messages=messages,
        usage=result.usage,
        finish_reason=result.finish_reason,
        requests=result.requests,
        tool_calls=result.tool_calls,
        cost=result.cost,
        run_id=result.run_id,
        conversation_id=result.conversation_id,
    )


def _namespaced(
    call_id: str, tool_name: str, calls: Sequence[PendingToolCall]
) -> list[PendingToolCall]:
    return [
        replace(p, call_id=f"{call_id}/{p.call_id}", tool_name=f"{tool_name}/{p.tool_name}")
        for p in calls
    ]


def _record(call_id: str, tool_name: str, sub: Result[Any], run_id: str, conv: str) -> Message:
    assert sub.pending is not None
    state = json.dumps(
        {"agent": tool_name, "history": dumps_history(sub.messages)},
        ensure_ascii=False,
        separators=(",", ":"),
    )
    text = f"{PAUSED_MARKER} {_waiting(tool_name, sub.pending)}\n{state}"
    return Message(
        role="tool",
        content=text,
        tool_call_id=call_id,
        tool_name=tool_name,
        run_id=run_id,
        conversation_id=conv,
    )


# --------------------------------------------------------------------------- resuming


@dataclass(slots=True)
class _Paused:
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


async def resume(
    history: list[Message],
    results: DeferredResults,
    tools: Mapping[str, Tool],
    *,
    deps: Any,
    check_parent: Callable[[list[Message], DeferredResults], Any],
    apply_parent: Callable[[Any, ResumeProgress], Awaitable[tuple[list[Message], int]]],
    resume_parent: Callable[[Any, Spent, ResumeProgress], Awaitable[Result[Any]]],
    continue_parent: Callable[[list[Message], Spent], Awaitable[Result[Any]]],
    paused_parent: Callable[[Result[Any]], Result[Any]] = lambda result: result,
    price: Callable[[Usage], float] = lambda usage: 0.0,
    observers: Sequence[EventHandler] = (),
    sink: Callable[[Any], None] | None = None,
    trace_context: str = "",
    expected: DeferredRequests | None = None,
    run_id: str = "",
    conversation_id: str = "",
    conversation_bound: bool = True,
    before_approved: BeforeApproved | None = None,
    progress: ResumeProgress | None = None,
) -> Result[Any]:
    """Resume the paused sub-agents recorded in `history`, then the parent.

    `before_approved` (the parent's) is awaited before every approved re-run, the
    sub-agents' too, with the call namespaced as in the parent's `Result.pending`.

    `run_id` / `conversation_id` are the resuming parent's: a parent still paused after
    this resume (a sub-agent paused again) carries them, as does each record rewritten.
    Each sub-agent resumes in `sub_conversation(conversation_id, call ID)`.
    `conversation_bound` is false when `conversation_id` is only what the history names:
    sealed calls then need `expected` (`ConversationRequired`).

    The sub-agents' events are forwarded to the parent's `observers` and stream `sink`
    (see `forwarder`); with tracing on, their resume spans link to the paused parent's
    span (`trace_context`), as the parent's does.

    The parent's own pending calls go through the agent's callbacks: `check_parent`
    validates them (seals, kinds, tools) and returns a plan, `apply_parent(plan,
    progress)` resolves them without continuing (when a sub-agent pauses again),
    `resume_parent(plan, spent, progress)` resolves them and continues, and
    `continue_parent(history, spent)` continues a parent with none left; `spent` is what
    the resumed sub-agents spent, which the parent's run starts with (its usage limits
    cover it). `paused_parent(result)` finishes a parent still paused (its limits, its
    cost); `price(usage)` is the cost a partial reports.

    A resume that fails or is cancelled hands back what ran (ADR 0076): a `RunError`
    raised while a sub-agent resumes, or while the parent's own calls resolve under a
    sub-agent that paused again, carries as `partial` the paused history in which each
    sub-agent that answered is answered, each one that ran part of its calls has its
    record rewritten from its own progress, and the parent's calls that ran are answered;
    `progress` follows the same history.

    Raises:
        ResumeError: before anything runs, when a namespaced ID names no pending call of
            a paused sub-agent, a sub-agent's pending call has no resolution, a record
            cannot be read, its tool is not an agent tool of this agent, or the
            parent's own resolutions are invalid.
    """
    if progress is not None:
        progress._reset()
    if expected is not None:
        history = with_expected_args(history, expected)
    records, own, own_pending = check(
        history,
        results,
        tools,
        check_parent,
        expected,
        conversation_id=conversation_id,
        conversation_bound=conversation_bound,
    )

    handing = _Handing(history, records, results, run_id, conversation_id, price)
    if progress is not None:
        progress._follow(handing.read)
    merged = list(history)
    usage_from = handing.spent
    repaused: dict[str, tuple[AgentTool, Result[Any]]] = {}
    for call_id, rec in records.items():
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
        usage_from.append(sub)
        if sub.pending is not None:
            repaused[call_id] = (rec.tool, sub)
            merged[rec.index] = _record(
                call_id,
                rec.tool.name,
                sub,
                run_id or rec.message.run_id,
                conversation_id or rec.message.conversation_id,
            )
        else:
            merged[rec.index] = handing.answers[call_id] = replace(
                rec.message,
                content=_output_text(sub.output),
                run_id=run_id or rec.message.run_id,
                conversation_id=conversation_id or rec.message.conversation_id,
            )
    if repaused:
        tool_calls = 0
        if own_pending:
            handing.own = ResumeProgress()
            try:
                merged, tool_calls = await apply_parent(check_parent(merged, own), handing.own)
            except RunError as failed:
                failed.partial = handing.partial(None)
                raise
        paused = _paused_result(merged, repaused, tool_calls, run_id, conversation_id)
        return paused_parent(_with_usage(paused, usage_from))
    merged = merge(merged, {})
    spent = Spent.of(usage_from)
    if own_pending:
        handing.own, handing.base = ResumeProgress(), merged
        return await resume_parent(check_parent(merged, own), spent, handing.own)
    handing.continued = merged
    return await continue_parent(merged, spent)


@dataclass(slots=True)
class _Handing:
    """What a nested resume has done so far, built into a history only when a failure or
    a cancellation hands it back (ADR 0076)."""

    history: list[Message]
    records: Mapping[str, _Paused]
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
    rec: _Paused, sub_history: list[Message], run_id: str, conversation_id: str
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


def check(
    history: list[Message],
    results: DeferredResults,
    tools: Mapping[str, Tool],
    check_parent: Callable[[list[Message], DeferredResults], Any],
    expected: DeferredRequests | None = None,
    *,
    conversation_id: str = "",
    conversation_bound: bool = True,
) -> tuple[dict[str, _Paused], DeferredResults, bool]:
    """Validate a nested resume completely, before anything runs: every record, every
    sub-agent's share of the results (as the sub-agent itself checks it, at any depth,
    in its conversation `sub_conversation(conversation_id, call ID)`) and the parent's
    own resolutions.

    With `expected` (the paused parent's `Result.pending`), the calls waiting — the
    parent's own and the sub-agents' (namespaced) — must be exactly the expected ones,
    with the same tool names, arguments and seals, each resolved by its kind.

    A record of a sub-agent with a seal key that names another conversation than its
    derived one (from another conversation, or stored before ADR 0065) is refused
    (`SubAgentConversationMismatch`) unless `expected` carries every one of its calls'
    seals; it then resumes in the conversation it names, bound by those seals.
    Without `conversation_bound`, a sealed call needs `expected` (`ConversationRequired`).

    Returns the records (each holding its share), the parent's own resolutions, and
    whether the parent has pending calls of its own.

    Raises:
        ResumeError: the first problem found.
        TypeError: `expected` is not a `DeferredRequests`.
    """
    results, expected = drop_finished(history, results, expected, tools)
    if expected is not None:
        history = with_expected_args(history, expected)
        _check_expected(history, results, expected)
    records = _records(history, tools)
    batch = paused_batch_ids(history)
    for call_id, rec in records.items():
        if call_id not in batch:
            raise ResumeError(
                f'golem: the paused sub-agent record of tool call "{call_id}" '
                f"({rec.tool.name}) is not in the paused batch: a sub-agent paused in an "
                "earlier turn was resumed then, and its answer was replaced by its old record "
                "to run it again; a paused history records sub-agents only for its last pause"
            )
    own_ids = {c.id for c in _pending_or_none(history)}  # a record answers its call
    own = _split(records, results, own_ids)
    for call_id, rec in records.items():
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
                    raise ResumeError(
                        f'golem: resolution for unknown tool call "{call_id}/{sub_id}"'
                    )
                if rec.continues:  # nothing of it resumes: a no-op (ADR 0076)
                    del share[sub_id]
    if own_ids:
        check_parent(history, own)
    else:
        done = answered_calls(history)
        unknown = next((k for k in [*own.approvals, *own.external] if k not in done), None)
        if unknown is not None:
            raise ResumeError(f'golem: resolution for unknown tool call "{unknown}"')
    for call_id, rec in records.items():
        rec.conversation = sub_conversation(conversation_id, call_id)
        if rec.continues:  # no pending call to verify: its history is checked, then run
            _check_continuing(call_id, rec)
            continue
        named = _named_conversation(rec.history)
        if rec.tool.agent.seal_keys is not None and named and named != rec.conversation:
            rec.expected = _expected_share(expected, call_id, rec)
            if rec.expected is None:
                raise _mismatch(call_id, rec, named)
            rec.conversation = named
        rec.tool.agent._check_sub_resume(
            rec.history,
            DeferredResults(approvals=rec.approvals, external=rec.external),
            rec.conversation,
            rec.expected,
        )
    if not conversation_bound and expected is None:
        keyed = _keyed_waiting(records)
        if keyed is not None:
            raise conversation_required(*keyed)
    return records, own, bool(own_ids)


def _check_continuing(call_id: str, rec: _Paused) -> None:
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


def _ran_in(history: Sequence[Message], key: str, tools: Mapping[str, Tool]) -> bool:
    """Whether `key` names a call `history` answers, or one under an answered call of an
    agent tool of `tools` (a sub-agent's, `<call id>/<sub call id>`): a resolution a resume
    that failed or was cancelled already used (ADR 0071, ADR 0076)."""
    answered = {m.tool_call_id for m in history if m.role == "tool"}
    return any(
        c.id in answered
        and (
            key == c.id
            or (key.startswith(c.id + "/") and isinstance(tools.get(c.name), AgentTool))
        )
        for m in history
        for c in m.tool_calls
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


def _named_conversation(history: Sequence[Message]) -> str:
    return next((m.conversation_id for m in reversed(history) if m.conversation_id), "")


def _expected_share(
    expected: DeferredRequests | None, call_id: str, rec: _Paused
) -> DeferredRequests | None:
    """The sub-agent's share of `expected` (its own IDs and tool names), when it carries a
    seal for every call the record waits on (`check` compared them); else None."""
    if expected is None:
        return None
    prefix, name_prefix = f"{call_id}/", f"{rec.tool.name}/"

    def share(calls: Sequence[PendingToolCall]) -> list[PendingToolCall]:
        return [
            replace(
                p, call_id=p.call_id[len(prefix) :], tool_name=p.tool_name[len(name_prefix) :]
            )
            for p in calls
            if p.call_id.startswith(prefix) and p.call_id[len(prefix) :] in rec.waiting
        ]

    mine = DeferredRequests(approvals=share(expected.approvals), external=share(expected.external))
    if {p.call_id for p in mine.calls} != set(rec.waiting) or not all(p.seal for p in mine.calls):
        return None
    return mine


def _mismatch(call_id: str, rec: _Paused, named: str) -> SubAgentConversationMismatch:
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


def _keyed_waiting(records: Mapping[str, _Paused]) -> tuple[str, str] | None:
    """The first call (namespaced ID, tool name) a sub-agent with a seal key waits on."""
    for call_id, rec in records.items():
        agent = rec.tool.agent
        if agent.seal_keys is not None and rec.waiting:
            sub_id, sub_name = next(iter(rec.waiting.items()))
            return f"{call_id}/{sub_id}", f"{rec.tool.name}/{sub_name}"
        try:
            inner = _records(rec.history, agent.tools)
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
        c.id: (c.name, c.args, c.seal) for c in _pending_or_none(history)
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


def _records(history: Sequence[Message], tools: Mapping[str, Tool]) -> dict[str, _Paused]:
    records: dict[str, _Paused] = {}
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
        records[m.tool_call_id] = _Paused(i, m, tool, sub_history, _waiting_calls(sub_history))
    return records


def _split(
    records: Mapping[str, _Paused], results: DeferredResults, own_ids: set[str]
) -> DeferredResults:
    """Hand each namespaced resolution to its record; return the parent's own ones."""
    approvals: dict[str, Any] = {}
    external: dict[str, str] = {}
    for key, decision in results.approvals.items():
        owner = _owner(records, key, own_ids)
        if owner is None:
            approvals[key] = decision
        else:
            records[owner].approvals[key[len(owner) + 1 :]] = decision
    for key, text in results.external.items():
        owner = _owner(records, key, own_ids)
        if owner is None:
            external[key] = text
        else:
            records[owner].external[key[len(owner) + 1 :]] = text
    return DeferredResults(approvals=approvals, external=external)


def _owner(records: Mapping[str, _Paused], key: str, own_ids: set[str]) -> str | None:
    """The record whose sub-agent a resolution's key names (None: the parent's own call).

    A key goes to the record it names a waiting call of; a key naming none goes to the
    parent when it is one of the parent's pending calls, else to the record its prefix
    names (which reports it unknown).

    Raises:
        ResumeError: the key names a waiting call of two of them (IDs that collide).
    """
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
    waiting = {c.id: c.name for c in _pending_or_none(history)}
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
    """The calls the paused sub-agents recorded in a parent's `history` wait on, by
    namespaced ID (`<parent call id>/<sub call id>`, nested sub-agents at any depth), in
    history order.

    What a worker needs to check a stored sub-agent call against the history before a
    resume: the parent's own pending calls are tool calls of `history`; these are not. An
    unreadable record is skipped (the resume itself reports it). With `conversation_id`
    (the parent's, from your own record), each call's `conversation_id` is its sub-run's
    derived from it, which is what its seal must verify for.
    """
    found: dict[str, SubAgentCall] = {}
    for m in history:
        if m.role != "tool" or not m.content.startswith(PAUSED_MARKER):
            continue
        try:
            state = json.loads(m.content.split("\n", 1)[1])
            inner = loads_history(state["history"])
        except (IndexError, KeyError, TypeError, ValueError, RecursionError):
            continue
        named = _named_conversation(inner)
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
    """A copy of `history` in which the paused sub-agents' calls named in `kinds`
    (namespaced ID → kind) carry seals, each bound to its own sub-run's conversation
    (derived from `conversation_id`, the parent's, when given; else the one its record
    names).

    The counterpart of `golem.seal.seal_pending` for the calls `sub_agent_calls` finds:
    they live in the sub-agent's history inside its parent's record, so that is where
    they are sealed (nested sub-agents at any depth). Records holding none of them are
    shared, nothing is mutated, and an unreadable record is left as it is.
    """
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
        conversation = conversation or _named_conversation(inner)
        inner = seal_pending(inner, keys, conversation, mine)
        inner = seal_sub_agent_calls(inner, keys, mine, conversation if conversation_id else "")
        state["history"] = dumps_history(inner)
        text = json.dumps(state, ensure_ascii=False, separators=(",", ":"))
        out[i] = replace(m, content=f"{head}{sep}{text}")
    return out


def _pending_or_none(history: Sequence[Message]) -> list[Any]:
    try:
        return pending_calls(history)
    except ResumeError:
        return []


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
        approvals.extend(_namespaced(call_id, tool.name, sub.pending.approvals))
        external.extend(_namespaced(call_id, tool.name, sub.pending.external))
    return Result(
        output=None,
        messages=messages,
        tool_calls=tool_calls,
        run_id=run_id or last.run_id,
        conversation_id=conversation_id or last.conversation_id,
        pending=DeferredRequests(approvals=approvals, external=external),
    )


def _with_usage(result: Result[Any], subs: Sequence[Result[Any]]) -> Result[Any]:
    usage, requests, tool_calls = result.usage, result.requests, result.tool_calls
    for sub in subs:
        usage = usage + sub.usage
        requests += sub.requests
        tool_calls += sub.tool_calls
    return copy_result(result, usage=usage, requests=requests, tool_calls=tool_calls)


def copy_result(result: Result[Any], **changes: Any) -> Result[Any]:
    """A copy of `result` with `changes` (a paused result is copied without reading its
    output, which a paused `Result` does not have)."""

    fields: dict[str, Any] = {
        "output": None if result.pending is not None else result.output,
        "messages": result.messages,
        "usage": result.usage,
        "finish_reason": result.finish_reason,
        "requests": result.requests,
        "tool_calls": result.tool_calls,
        "cost": result.cost,
        "run_id": result.run_id,
        "conversation_id": result.conversation_id,
        "pending": result.pending,
        "trace_context": result.trace_context,
    }
    fields.update(changes)
    return Result(**fields)
