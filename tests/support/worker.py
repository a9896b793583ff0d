"""The scripted worker app the worker tests share, and the calls its model makes."""

from __future__ import annotations

import asyncio
from typing import Any

from golem import Agent, Message, RunContext, ToolCall
from golem.durable.worker import AgentEntry
from golem.testing import ScriptedModel
from golem.tool import DeferKind, Deferred, call_approved


class App:
    """A scripted agent with a gated `delete_file` and an external `lookup`."""

    def __init__(self, *script: Any, deps_factory: Any = None) -> None:
        self.model = ScriptedModel(*script)
        self.executed: list[tuple[str, str, Any]] = []
        self.gate: asyncio.Event | None = None
        self.started = asyncio.Event()

        async def delete_file(ctx: RunContext[Any], path: str) -> str:
            """Delete a file."""
            if not call_approved():
                raise Deferred(DeferKind.APPROVAL, f"deletes {path}")
            self.executed.append((ctx.call_id, path, ctx.deps))
            self.started.set()
            if self.gate is not None:
                await self.gate.wait()
            if path == "/boom":
                raise RuntimeError("disk on fire")
            return f"deleted {path}"

        def lookup(q: str) -> str:
            """Look something up (answered by another service)."""
            raise Deferred(DeferKind.EXTERNAL, f"job:{q}")

        self.agent: Agent[Any, str] = Agent(self.model, tools=[delete_file, lookup])
        self.registry = {"ops": AgentEntry(self.agent, deps_factory=deps_factory)}


def calls(*specs: tuple[str, str, str]) -> Message:
    """An assistant message asking for the given (call_id, tool, arguments) calls."""
    return Message(role="assistant", tool_calls=[ToolCall(i, n, a) for i, n, a in specs])


DEL = ("c1", "delete_file", '{"path": "/tmp/a"}')
LOOK = ("c2", "lookup", '{"q":  "weather"}')


def bank_app() -> tuple[dict[str, AgentEntry], list[str]]:
    """A "bank" agent that pays once approved; the registry and the call IDs that ran."""
    ran: list[str] = []

    def pay(ctx: RunContext[Any], amount: int) -> str:
        """Pay (needs approval)."""
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, "money")
        ran.append(ctx.call_id)
        return "paid"

    model = ScriptedModel(
        Message(role="assistant", tool_calls=[ToolCall("c1", "pay", '{"amount": 1}')]), "done"
    )
    return {"bank": AgentEntry(Agent(model, tools=[pay]))}, ran
