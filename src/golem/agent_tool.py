"""Agents as tools: a sub-agent runs inside its parent's tool call (usage and events
included, ADR 0027); its pause surfaces in the parent, namespaced and recorded after
`PAUSED_MARKER` (docs/guides/agents-as-tools.md, ADR 0021)."""

from __future__ import annotations

import contextvars
import json
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import pydantic_core

from golem._loop import Policy, RunState
from golem.deferred import DeferredRequests, PendingToolCall
from golem.errors import Stage, ToolError
from golem.events import EventHandler, RunEvent, dispatch
from golem.messages import Message, ToolCall, dumps_history
from golem.result import RESULT_FIELDS, PartialResult, Result, RunError
from golem.seal import SealKeys
from golem.tool import DeferKind, Deferred, ModelRetry, RunContext, Tool, ToolResult

__all__ = [
    "PAUSED_MARKER",
    "AgentTool",
    "SubAgent",
    "SubAgentPaused",
    "forwarder",
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
"""Set by an `AgentTool` call around its sub-run: the sub-run's `golem._run.prepare` appends its
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
    def toolsets(self) -> Sequence[Any]: ...
    @property
    def run(self) -> Callable[..., Awaitable[Result[Any]]]: ...
    def _toolsets_entered(self) -> AbstractAsyncContextManager[Mapping[str, Tool]]: ...
    def _policy(self, tools: Mapping[str, Tool]) -> Policy: ...


class AgentTool(Tool):
    """A `Tool` that runs another `Agent` (`Agent.as_tool`), `deps` mapped, whole sub-run timed."""

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
                    absorb(scope.state, sub_state)
        if result.pending is not None:
            if scope is None:
                raise RuntimeError(
                    f'sub-agent "{self.name}" paused outside an agent run; call it from an agent'
                )
            scope.paused[ctx.call_id] = (self, result)
            kind = DeferKind.APPROVAL if result.pending.approvals else DeferKind.EXTERNAL
            raise SubAgentPaused(
                kind,
                _waiting(self.name, [(p.call_id, p.tool_name) for p in result.pending.calls]),
                result,
            )
        return ToolResult(output_text(result.output))


def sub_conversation(conversation_id: str, call_id: str) -> str:
    """The conversation of the sub-run under parent call `call_id`: `<conversation>/<call id>`
    with `%` and `/` in the ID escaped (ADR 0065); empty when the parent's is unknown."""
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
    """The `on_event` of a sub-run under parent call `call_id`: events go to the parent's
    observers marked with `agent` and `namespace`, IDs namespaced; None without observers."""
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


def absorb(state: RunState, result: RunState | Result[Any] | Any) -> None:
    """Count what `result` (a sub-run's state or result) spent in `state`."""
    state.usage = state.usage + result.usage
    state.requests += result.requests
    state.tool_calls += result.tool_calls


def output_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    return pydantic_core.to_json(output).decode()


def _waiting(name: str, waiting: Iterable[tuple[str, str]]) -> str:
    calls = ", ".join(f"{tool} ({call_id})" for call_id, tool in waiting)
    if not calls:
        return f'sub-agent "{name}" is paused; its calls are answered and a resume continues it'
    return f'sub-agent "{name}" is paused, waiting for {calls}'


def record_text(name: str, waiting: Iterable[tuple[str, str]], history: str) -> str:
    """A paused sub-agent's record: the marker, the calls (ID, tool) it waits on, its history."""
    state = json.dumps(
        {"agent": name, "history": history}, ensure_ascii=False, separators=(",", ":")
    )
    return f"{PAUSED_MARKER} {_waiting(name, waiting)}\n{state}"


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
    """The paused parent result with its paused sub-agents' calls surfaced (namespaced) and
    their histories recorded; `RunError` (stage `tool`) when a pending call ID repeats."""
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
        approvals.extend(namespaced(c.id, tool.name, sub.pending.approvals))
        external.extend(namespaced(c.id, tool.name, sub.pending.external))
        records[c.id] = paused_record(c.id, tool.name, sub, result.run_id, result.conversation_id)
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
        pending=DeferredRequests(approvals, external, result.conversation_id),
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


def namespaced(
    call_id: str, tool_name: str, calls: Sequence[PendingToolCall]
) -> list[PendingToolCall]:
    return [
        replace(p, call_id=f"{call_id}/{p.call_id}", tool_name=f"{tool_name}/{p.tool_name}")
        for p in calls
    ]


def paused_record(
    call_id: str, tool_name: str, sub: Result[Any], run_id: str, conv: str
) -> Message:
    assert sub.pending is not None
    waiting = [(p.call_id, p.tool_name) for p in sub.pending.calls]
    text = record_text(tool_name, waiting, dumps_history(sub.messages))
    return Message(
        role="tool",
        content=text,
        tool_call_id=call_id,
        tool_name=tool_name,
        run_id=run_id,
        conversation_id=conv,
    )


def copy_result(result: Result[Any], **changes: Any) -> Result[Any]:
    """A copy of `result` with `changes` (a paused result's output is never read)."""

    fields: dict[str, Any] = {name: getattr(result, name) for name in RESULT_FIELDS}
    fields["output"] = None if result.pending is not None else result.output
    fields.update(changes)
    return Result(**fields)
