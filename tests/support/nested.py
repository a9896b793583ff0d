"""Nested agents the resume-progress tests share: a janitor sub-agent, its parent, a World."""

from __future__ import annotations

from typing import Any

from golem import Agent, DeferredResults, Message, RunContext, Tool, ToolCall
from golem.agent_tool import PAUSED_MARKER
from golem.model import ModelRequest, ModelResponse
from golem.records import sub_agent_calls
from golem.testing import FunctionModel
from golem.tool import DeferKind, Deferred, call_approved

OBJ: dict[str, Any] = {"type": "object"}
KEY = b"n" * 32


class World:
    """Side effects by (agent, call ID) — no idempotency key involved."""

    def __init__(self) -> None:
        self.acted: dict[str, int] = {}
        self.fail: set[str] = set()

    def act(self, where: str, ctx: RunContext[Any]) -> str:
        name = f"{where}:{ctx.call_id}"
        if name in self.fail:
            raise RuntimeError(f"broke {name}")
        self.acted[name] = self.acted.get(name, 0) + 1
        return f"acted {ctx.call_id}"


def act_tool(world: World, where: str) -> Tool:
    """A gated `act` tool whose approved runs `world` counts under `where`."""

    async def act(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, "act?")
        return world.act(where, ctx)

    return Tool("act", "Act.", OBJ, act)


def job_tool() -> Tool:
    """A `job` tool answered by another service (always deferred)."""

    def job(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        raise Deferred(DeferKind.EXTERNAL, "job")

    return Tool("job", "Job.", OBJ, job)


def said(request: ModelRequest) -> list[str]:
    """The tool results the request carries, sorted."""
    return sorted(m.content for m in request.messages if m.role == "tool")


def answering(name: str, *batch: ToolCall, again: ToolCall | None = None) -> FunctionModel:
    """A stateless model: `batch` first, then (with `again`) one more call, then its answer."""

    def answer(request: ModelRequest) -> ModelResponse:
        tool_ids = {m.tool_call_id for m in request.messages if m.role == "tool"}
        if not tool_ids:
            return ModelResponse(
                Message(role="assistant", tool_calls=list(batch)), finish_reason="tool_call"
            )
        if again is not None and again.id not in tool_ids:
            return ModelResponse(
                Message(role="assistant", tool_calls=[again]), finish_reason="tool_call"
            )
        return ModelResponse(
            Message(role="assistant", content=f"{name}: " + " | ".join(said(request))),
            finish_reason="stop",
        )

    async def stream(request: ModelRequest) -> Any:
        yield answer(request)

    return FunctionModel(answer, stream=stream)


def janitor(
    world: World, name: str, *, keyed: bool = False, again: bool = False
) -> Agent[None, str]:
    """A sub-agent that asks to act twice (s1, s2), optionally once more (s9) after."""
    return Agent(
        answering(
            name,
            ToolCall("s1", "act", '{"n":1}'),
            ToolCall("s2", "act", '{"n":2}'),
            again=ToolCall("s9", "act", '{"n":9}') if again else None,
        ),
        name=name,
        tools=[act_tool(world, name)],
        seal_key=KEY if keyed else None,
    )


def parent_of(
    world: World, *subs: Agent[None, str], keyed: bool = False, own: bool = True
) -> Agent[None, str]:
    """p1 and p2 delegate to `subs`; with `own`, the parent's own a1 (approval) and x1
    (external) wait in the same batch."""
    batch = [ToolCall(f"p{i + 1}", s.name or "", '{"prompt":"clean"}') for i, s in enumerate(subs)]
    tools: list[Tool] = [s.as_tool() for s in subs]
    if own:
        batch[1:1] = [ToolCall("a1", "act", '{"n":0}')]
        batch.append(ToolCall("x1", "job", "{}"))
        tools += [act_tool(world, "parent"), job_tool()]
    return Agent(answering("parent", *batch), tools=tools, seal_key=KEY if keyed else None)


RESULTS = DeferredResults(
    approvals={"p1/s1": True, "p1/s2": True, "a1": True, "p2/s1": True, "p2/s2": True},
    external={"x1": "job done"},
)
FINAL = "parent: acted a1 | j1: acted s1 | acted s2 | j2: acted s1 | acted s2 | job done"
EVERY = {"j1:s1": 1, "j1:s2": 1, "j2:s1": 1, "j2:s2": 1, "parent:a1": 1}


def pending_ids(history: list[Message]) -> list[str]:
    """The calls a (nested) paused history waits on, namespaced, in history order."""
    answered = {m.tool_call_id for m in history if m.role == "tool"}
    records = {
        m.tool_call_id: m
        for m in history
        if m.role == "tool" and m.content.startswith(PAUSED_MARKER)
    }
    out: list[str] = []
    for m in history:
        for c in m.tool_calls:
            if c.id in records:
                out.extend(sub_agent_calls([records[c.id]]))
            elif c.id not in answered:
                out.append(c.id)
    return out
