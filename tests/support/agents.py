"""The agent registry the service tests run against (also `--app tests.support.agents:registry`)."""

from __future__ import annotations

import json

from golem.agent import Agent
from golem.durable.worker import AgentEntry, AgentRegistry
from golem.messages import Message, ToolCall
from golem.model import ModelRequest
from golem.testing import FunctionModel
from golem.tool import DeferKind, Deferred, RunContext, call_approved

__all__ = ["EXECUTED", "build_registry", "registry"]

EXECUTED: list[str] = []
"""Call IDs of approved `deploy` executions in this process (the side-effect counter)."""


async def deploy(ctx: RunContext[None], target: str) -> str:
    """Deploy to a target; needs approval.

    Args:
        target: Where to deploy.
    """
    if not call_approved():
        raise Deferred(DeferKind.APPROVAL, f"deploys to {target}")
    EXECUTED.append(ctx.call_id)
    return f"deployed to {target}"


async def lookup(key: str) -> str:
    """Look a key up in a system only a human can reach.

    Args:
        key: What to look up.
    """
    raise Deferred(DeferKind.EXTERNAL, f"look up {key} by hand")


def _twin(request: ModelRequest) -> Message | str:
    """Two deploy calls in one batch, then a summary of the results."""
    last = request.messages[-1]
    if last.role == "user":
        return Message(
            role="assistant",
            tool_calls=[
                ToolCall("c1", "deploy", json.dumps({"target": "staging"})),
                ToolCall("c2", "deploy", json.dumps({"target": "production"})),
            ],
        )
    return "; ".join(m.content for m in request.messages if m.role == "tool")


def _mixed(request: ModelRequest) -> Message | str:
    """One approval call and one external call whose arguments echo the prompt."""
    last = request.messages[-1]
    if last.role == "user":
        return Message(
            role="assistant",
            content="Working on: " + last.content,
            tool_calls=[
                ToolCall("a1", "deploy", json.dumps({"target": last.content})),
                ToolCall("x1", "lookup", json.dumps({"key": last.content})),
            ],
        )
    return "done: " + " | ".join(m.content for m in request.messages if m.role == "tool")


def _echo(request: ModelRequest) -> str:
    return "echo: " + request.messages[-1].content


def _broken(request: ModelRequest) -> str:
    raise RuntimeError("the model is down")


def build_registry() -> AgentRegistry:
    """twin (2 approvals), mixed (approval + external), echo (answers), broken (fails)."""
    tools = [deploy, lookup]
    return {
        "twin": AgentEntry(Agent(FunctionModel(_twin), tools=tools), description="two deploys"),
        "mixed": AgentEntry(Agent(FunctionModel(_mixed), tools=tools), description="mixed"),
        "echo": AgentEntry(Agent(FunctionModel(_echo)), description="answers at once"),
        "broken": AgentEntry(Agent(FunctionModel(_broken)), description="always fails"),
    }


registry: AgentRegistry = build_registry()
