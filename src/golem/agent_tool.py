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
from typing import TYPE_CHECKING, Any, NamedTuple

import pydantic_core

from golem import deferred
from golem.deferred import DeferredRequests, DeferredResults, PendingToolCall
from golem.errors import ResumeError, RunError, Stage, ToolError
from golem.events import EventHandler, RunEvent, dispatch
from golem.messages import Message, ToolCall, dumps_history, loads_history
from golem.seal import SealKey, seal_pending
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

if TYPE_CHECKING:
    from golem._loop import RunState
    from golem.agent import Agent
    from golem.result import PartialResult, Result

__all__ = [
    "PAUSED_MARKER",
    "AgentTool",
    "SubAgentCall",
    "SubAgentPaused",
    "forwarder",
    "seal_sub_agent_calls",
    "sub_agent_calls",
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
        agent: Agent[Any, Any],
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
        result = await self.agent.run(prompt, deps=self._deps(ctx.deps), on_event=forward)
        if scope is not None:
            _absorb(scope.state, result)
        if result.pending is not None:
            if scope is None:
                raise RuntimeError(
                    f'sub-agent "{self.name}" paused outside an agent run; call it from an agent'
                )
            scope.paused[ctx.call_id] = (self, result)
            kind = DeferKind.APPROVAL if result.pending.approvals else DeferKind.EXTERNAL
            raise SubAgentPaused(kind, _waiting(self.name, result.pending), result)
        return ToolResult(_output_text(result.output))


def agent_tool(
    agent: Agent[Any, Any],
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


def _absorb(state: RunState, result: Result[Any] | Any) -> None:
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


def _partial(result: Result[Any], messages: list[Message]) -> PartialResult:
    from golem.result import PartialResult

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
    apply_parent: Callable[[Any], Awaitable[tuple[list[Message], int]]],
    resume_parent: Callable[[Any], Awaitable[Result[Any]]],
    continue_parent: Callable[[list[Message]], Awaitable[Result[Any]]],
    observers: Sequence[EventHandler] = (),
    sink: Callable[[Any], None] | None = None,
    trace_context: str = "",
    expected: DeferredRequests | None = None,
    run_id: str = "",
    conversation_id: str = "",
    before_approved: deferred.BeforeApproved | None = None,
) -> Result[Any]:
    """Resume the paused sub-agents recorded in `history`, then the parent.

    `before_approved` (the parent's) is awaited before every approved re-run, the
    sub-agents' too, with the call namespaced as in the parent's `Result.pending`.

    `run_id` / `conversation_id` are the resuming parent's: a parent still paused after
    this resume (a sub-agent paused again) carries them, as does each record rewritten.

    The sub-agents' events are forwarded to the parent's `observers` and stream `sink`
    (see `forwarder`); with tracing on, their resume spans link to the paused parent's
    span (`trace_context`), as the parent's does.

    The parent's own pending calls go through the agent's callbacks: `check_parent`
    validates them (seals, kinds, tools) and returns a plan, `apply_parent(plan)`
    resolves them without continuing (when a sub-agent pauses again),
    `resume_parent(plan)` resolves them and continues, and `continue_parent(history)`
    continues a parent with none left.

    Raises:
        ResumeError: before anything runs, when a namespaced ID names no pending call of
            a paused sub-agent, a sub-agent's pending call has no resolution, a record
            cannot be read, its tool is not an agent tool of this agent, or the
            parent's own resolutions are invalid.
    """
    records, own, own_pending = check(history, results, tools, check_parent, expected)

    merged = list(history)
    usage_from: list[Result[Any]] = []
    repaused: dict[str, tuple[AgentTool, Result[Any]]] = {}
    for call_id, rec in records.items():
        try:
            sub = await rec.tool.agent.run_with_deferred_results(
                rec.history,
                DeferredResults(approvals=rec.approvals, external=rec.external),
                deps=rec.tool._deps(deps),
                on_event=forwarder(observers, sink, call_id, rec.tool.name),
                trace_context=trace_context,
                before_approved=_namespaced_guard(before_approved, call_id, rec.tool.name),
            )
        except RunError as failed:
            wrapped = _sub_failed(call_id, rec.tool.name, failed)
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
            merged[rec.index] = replace(rec.message, content=_output_text(sub.output))
    if repaused:
        tool_calls = 0
        if own_pending:
            merged, tool_calls = await apply_parent(check_parent(merged, own))
        paused = _paused_result(merged, repaused, tool_calls, run_id, conversation_id)
        return _with_usage(paused, usage_from)
    merged = deferred.merge(merged, {})
    if own_pending:
        result = await resume_parent(check_parent(merged, own))
    else:
        result = await continue_parent(merged)
    return _with_usage(result, usage_from)


def check(
    history: list[Message],
    results: DeferredResults,
    tools: Mapping[str, Tool],
    check_parent: Callable[[list[Message], DeferredResults], Any],
    expected: DeferredRequests | None = None,
) -> tuple[dict[str, _Paused], DeferredResults, bool]:
    """Validate a nested resume completely, before anything runs: every record, every
    sub-agent's share of the results (as the sub-agent itself checks it, at any depth)
    and the parent's own resolutions.

    With `expected` (the paused parent's `Result.pending`), the calls waiting — the
    parent's own and the sub-agents' (namespaced) — must be exactly the expected ones,
    with the same tool names and arguments, each resolved by its kind.

    Returns the records (each holding its share), the parent's own resolutions, and
    whether the parent has pending calls of its own.

    Raises:
        ResumeError: the first problem found.
        TypeError: `expected` is not a `DeferredRequests`.
    """
    if expected is not None:
        _check_expected(history, results, expected)
    records = _records(history, tools)
    own_ids = {c.id for c in _pending_or_none(history)}  # a record answers its call
    own = _split(records, results, own_ids)
    for call_id, rec in records.items():
        for sub_id, sub_name in rec.waiting.items():
            if sub_id not in rec.approvals and sub_id not in rec.external:
                raise ResumeError(
                    f'golem: pending tool call "{call_id}/{sub_id}" ({rec.tool.name}/{sub_name}) '
                    "has no resolution"
                )
        for sub_id in [*rec.approvals, *rec.external]:
            if sub_id not in rec.waiting:
                raise ResumeError(f'golem: resolution for unknown tool call "{call_id}/{sub_id}"')
    if own_ids:
        check_parent(history, own)
    elif own.approvals or own.external:
        unknown = next(iter([*own.approvals, *own.external]))
        raise ResumeError(f'golem: resolution for unknown tool call "{unknown}"')
    for rec in records.values():
        rec.tool.agent._check_sub_resume(
            rec.history, DeferredResults(approvals=rec.approvals, external=rec.external)
        )
    return records, own, bool(own_ids)


def _check_expected(
    history: Sequence[Message], results: DeferredResults, expected: DeferredRequests
) -> None:
    if not isinstance(expected, DeferredRequests):
        raise TypeError(
            f"expected is the paused run's Result.pending (DeferredRequests), "
            f"got {type(expected).__name__}"
        )
    waiting: dict[str, tuple[str, str, str | None]] = {
        c.id: (c.name, c.args, None) for c in _pending_or_none(history)
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
        if p.tool_name != name or p.args != args:
            what = "tool name differs" if p.tool_name != name else "arguments differ"
            raise ResumeError(
                f'golem: pending tool call "{call_id}": its {what} from the expected '
                f"pending call ({p.tool_name} {deferred._brief(p.args)}, got {name} "
                f"{deferred._brief(args)})"
            )
        if seal is not None and p.seal and seal != p.seal:  # a sub-agent's sealed call
            raise ResumeError(
                f'golem: pending tool call "{call_id}" ({name}) carries another seal than '
                "the expected pending call (a sub-agent record from another run?)"
            )
    if wanted:
        raise ResumeError(
            f'golem: expected pending call "{next(iter(wanted))}" is not pending in the history'
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
    guard: deferred.BeforeApproved | None, call_id: str, tool_name: str
) -> deferred.BeforeApproved | None:
    """`guard` for a sub-agent's resume: it sees the sub-agent's calls namespaced."""
    if guard is None:
        return None

    async def namespaced(call: ToolCall) -> None:
        await guard(replace(call, id=f"{call_id}/{call.id}", name=f"{tool_name}/{call.name}"))

    return namespaced


def _sub_failed(call_id: str, tool_name: str, failed: RunError) -> RunError:
    """The parent's failure when a sub-agent it resumes fails: like an approved re-run's —
    stage `canceled` with the sentinel when the sub-agent was canceled, else stage `tool`
    naming the parent's call; no partial (the sub-run's is not the parent's evidence)."""
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
    """The sub-run's conversation ID, which the call's seal (if any) is bound to."""


def sub_agent_calls(history: Sequence[Message]) -> dict[str, SubAgentCall]:
    """The calls the paused sub-agents recorded in a parent's `history` wait on, by
    namespaced ID (`<parent call id>/<sub call id>`, nested sub-agents at any depth), in
    history order.

    What a worker needs to check a stored sub-agent call against the history before a
    resume: the parent's own pending calls are tool calls of `history`; these are not. An
    unreadable record is skipped (the resume itself reports it).
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
        conversation = next((x.conversation_id for x in reversed(inner) if x.conversation_id), "")
        for c in _pending_or_none(inner):
            found[f"{m.tool_call_id}/{c.id}"] = SubAgentCall(
                c, f"{m.tool_name}/{c.name}", conversation
            )
        for sub_id, sub in sub_agent_calls(inner).items():
            found[f"{m.tool_call_id}/{sub_id}"] = sub._replace(
                tool_name=f"{m.tool_name}/{sub.tool_name}"
            )
    return found


def seal_sub_agent_calls(
    history: Sequence[Message], keys: SealKey, kinds: Mapping[str, DeferKind | str]
) -> list[Message]:
    """A copy of `history` in which the paused sub-agents' calls named in `kinds`
    (namespaced ID → kind) carry seals, each bound to its own sub-run's conversation.

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
        conversation = next((x.conversation_id for x in reversed(inner) if x.conversation_id), "")
        inner = seal_pending(inner, keys, conversation, mine)
        inner = seal_sub_agent_calls(inner, keys, mine)
        state["history"] = dumps_history(inner)
        text = json.dumps(state, ensure_ascii=False, separators=(",", ":"))
        out[i] = replace(m, content=f"{head}{sep}{text}")
    return out


def _pending_or_none(history: Sequence[Message]) -> list[Any]:
    try:
        return deferred.pending_calls(history)
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
    from golem.result import Result

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
    from golem.result import Result

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
