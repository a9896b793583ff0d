"""Gated and plain tools, model turns and the fixed texts the pausing and resuming tests share."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from golem import Message, RunContext, Tool, ToolCall, Usage
from golem.model import ModelResponse
from golem.tool import DeferKind, Deferred, call_approved

OBJ: dict[str, Any] = {"type": "object"}
INTERRUPTED = (
    "Tool call was interrupted before execution; no result was produced. "
    "Call the tool again if you need its result."
)
DENIED = "Your tool call was denied. Do not call it again; continue without its result."


def tool_turn(*calls: ToolCall, usage: Usage | None = None, content: str = "") -> ModelResponse:
    """A model turn asking for `calls` (with `content` beside them)."""
    return ModelResponse(
        message=Message(role="assistant", content=content, tool_calls=list(calls)),
        usage=usage or Usage(),
        finish_reason="tool_call",
    )


class Gate:
    """Defers (`kind`, `reason`) unless `call_approved()`; the approved pass runs `effect`
    (default: the text "<name>: done"). Records every pass, thread, approved args and deps."""

    def __init__(
        self,
        name: str,
        kind: DeferKind | str = DeferKind.APPROVAL,
        reason: str = "",
        effect: Callable[[RunContext[Any], dict[str, Any]], Any] | None = None,
    ) -> None:
        self.name, self.kind, self.effect = name, kind, effect
        self.reason = reason or f"{name} needs sign-off"
        self.passes: list[bool] = []
        self.approved_args: list[dict[str, Any]] = []
        self.deps: list[Any] = []
        self.threads: list[threading.Thread] = []

    def exec(self, ctx: RunContext[Any], args: dict[str, Any]) -> Any:
        self.threads.append(threading.current_thread())
        self.passes.append(call_approved())
        if not call_approved():
            raise Deferred(self.kind, self.reason)
        self.approved_args.append(args)
        self.deps.append(ctx.deps)
        return self.effect(ctx, args) if self.effect is not None else f"{self.name}: done"

    def tool(self, **kw: Any) -> Tool:
        return Tool(self.name, self.name, OBJ, self.exec, **kw)


class Plain:
    """An ordinary tool returning fixed text and recording the args of every execution."""

    def __init__(self, name: str, text: str = "ok") -> None:
        self.name, self.text = name, text
        self.calls: list[dict[str, Any]] = []

    def exec(self, ctx: RunContext[Any], args: dict[str, Any]) -> str:
        self.calls.append(args)
        return self.text

    def tool(self) -> Tool:
        return Tool(self.name, self.name, OBJ, self.exec)


def raising_tool(name: str, make: Callable[[], BaseException]) -> Tool:
    """A tool that raises what `make` builds."""

    def exec(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        raise make()

    return Tool(name, name, OBJ, exec)
