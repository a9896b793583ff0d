"""Sealed agents the seal attack tests share: gated tools that record what ran, nested parents."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from golem import (
    Agent,
    DeferredRequests,
    Message,
    PausedRun,
    Result,
    RunContext,
    Tool,
    ToolCall,
    dumps_history,
    loads_history,
)
from golem.model import ModelResponse
from golem.seal import seal_pending
from golem.testing import ScriptedModel
from golem.tool import DeferKind, Deferred, call_approved
from tests.support.ledger import KEY, OBJ, turn

__all__ = ["KEY", "OBJ", "Ran", "bound", "legacy", "make_agent", "nested_parent", "turn"]


def bound(
    paused: Result[Any],
    history: list[Message] | None = None,
    conversation: str | None = None,
    pending: Any = None,
) -> PausedRun:
    """`paused.paused_run` (what a resume vouches for: conversation and pending calls), with
    its history, conversation or pending calls replaced."""
    run = paused.paused_run
    assert run is not None
    return replace(
        run,
        messages=run.messages if history is None else history,
        pending=run.pending if pending is None else pending,
        conversation_id=run.conversation_id if conversation is None else conversation,
    )


class Ran:
    """Gated tools that record every approved execution with its raw argument bytes."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []

    def gate(self, name: str) -> Tool:
        def exec(ctx: RunContext[Any], args: dict[str, Any]) -> str:
            if call_approved():
                self.calls.append((name, ctx.call_id, json.dumps(args, sort_keys=True)))
                return "ok"
            raise Deferred(DeferKind.APPROVAL, f"{name}?")

        return Tool(name, name, OBJ, exec)


def make_agent(*responses: ModelResponse | str) -> tuple[Agent[None, str], Ran]:
    """An agent sealed with KEY whose gated `transfer` and `delete_account` record runs."""
    ran = Ran()
    tools = [ran.gate("transfer"), ran.gate("delete_account")]
    return Agent(ScriptedModel(*responses), tools=tools, seal_key=KEY), ran


def nested_parent(
    path: str, log: list[str], *, seal_key: bytes | None = KEY, own: ToolCall | None = None
) -> Agent[None, str]:
    """A parent whose sub-agent "janitor" pauses on delete_file(path); with `own`, the
    parent's batch also holds its own gated call."""
    sub: Agent[None, str] = Agent(
        ScriptedModel(turn(ToolCall("s1", "delete_file", json.dumps({"path": path}))), "Deleted."),
        name="janitor",
        seal_key=seal_key,
    )

    @sub.tool_plain
    def delete_file(path: str) -> str:
        """Delete a file."""
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, f"delete {path}?")
        log.append(path)
        return "deleted"

    ran = Ran()
    batch = [ToolCall("p1", "janitor", '{"prompt":"clean"}'), *([own] if own else [])]
    return Agent(
        ScriptedModel(turn(*batch), "ok"),
        tools=[sub.as_tool(), ran.gate("transfer")],
        seal_key=seal_key,
    )


def legacy(
    paused: Any, conversation: str = "old-sub-conv", key: bytes = KEY
) -> tuple[list[Message], Any]:
    """`paused` as golem < ADR 0065 stored it: the sub-run in a conversation of its own,
    its calls sealed for that one; and the parent's `Result.pending` of that time."""
    record = paused.messages[-1]
    head, _, body = record.content.partition("\n")
    state = json.loads(body)
    inner = [replace(m, conversation_id=conversation) for m in loads_history(state["history"])]
    pending = [c for m in inner for c in m.tool_calls]
    inner = seal_pending(inner, key, conversation, {c.id: DeferKind.APPROVAL for c in pending})
    state["history"] = dumps_history(inner)
    content = head + "\n" + json.dumps(state, ensure_ascii=False, separators=(",", ":"))
    sealed = {c.id: c.seal for m in inner for c in m.tool_calls}
    old_pending = DeferredRequests(
        approvals=[
            replace(p, seal=sealed[p.call_id.split("/", 1)[1]]) for p in paused.pending.approvals
        ]
    )
    return [*paused.messages[:-1], replace(record, content=content)], old_pending
