"""The ledger agent the seal-resume tests share: tools that defer, then record every execution."""

from __future__ import annotations

from typing import Any

from golem import Agent, Message, RunContext, SealKeys, Tool, ToolCall
from golem.model import ModelResponse
from golem.testing import ScriptedModel
from golem.tool import DeferKind, Deferred, call_approved

KEY = b"s" * 32
CONV = "conv-1"  # the conversation the application recorded for the paused run
OBJ = {"type": "object"}


class Ledger:
    """Tools that defer on the first pass and record every execution (both passes)."""

    def __init__(self) -> None:
        self.executions: list[tuple[str, str, bool, dict[str, Any]]] = []

    def gate(self, name: str, kind: DeferKind = DeferKind.APPROVAL) -> Tool:
        def exec(ctx: RunContext[Any], args: dict[str, Any]) -> str:
            self.executions.append((name, ctx.call_id, call_approved(), args))
            if kind is DeferKind.APPROVAL and call_approved():
                return f"{name} ran with {sorted(args.items())}"
            raise Deferred(kind, f"{name} needs a decision")

        return Tool(name, name, OBJ, exec)


def turn(*calls: ToolCall) -> ModelResponse:
    """A model turn asking for the given tool calls."""
    return ModelResponse(
        Message(role="assistant", tool_calls=list(calls)), finish_reason="tool_call"
    )


TRANSFER = ToolCall("c1", "transfer", '{"to":"bob","amount":10}')
LOOKUP = ToolCall("c2", "lookup", '{"q":"rate"}')


def make_agent(
    *, seal_key: bytes | SealKeys | None = KEY, answers: int = 1
) -> tuple[Agent[None, str], ScriptedModel, Ledger]:
    """An agent that pauses on TRANSFER (approval) and LOOKUP (external), then answers."""
    ledger = Ledger()
    model = ScriptedModel(turn(TRANSFER, LOOKUP), *(["done"] * answers))
    agent: Agent[None, str] = Agent(
        model,
        tools=[
            ledger.gate("transfer"),
            ledger.gate("lookup", DeferKind.EXTERNAL),
            ledger.gate("delete_account"),
        ],
        seal_key=seal_key,
    )
    return agent, model, ledger
