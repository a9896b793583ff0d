"""Scripted turns and the janitor sub-agent the agent-as-tool tests share."""

from __future__ import annotations

import json
from typing import Any

from golem import Agent, Usage
from golem.messages import Message, ToolCall
from golem.model import ModelResponse
from golem.testing import ScriptedModel
from golem.tool import DeferKind, Deferred, call_approved


def calls(*items: tuple[str, str, dict[str, Any]], tokens: int = 0) -> ModelResponse:
    """A model turn asking for (call_id, tool, args) calls, with `tokens` of usage each way."""
    return ModelResponse(
        message=Message(
            role="assistant",
            tool_calls=[ToolCall(cid, name, json.dumps(args)) for cid, name, args in items],
        ),
        usage=Usage(input_tokens=tokens, output_tokens=tokens),
        finish_reason="tool_call",
    )


def text(content: str, tokens: int = 0) -> ModelResponse:
    """A final model answer, with `tokens` of usage each way."""
    return ModelResponse(
        message=Message(role="assistant", content=content),
        usage=Usage(input_tokens=tokens, output_tokens=tokens),
        finish_reason="stop",
    )


def janitor(*outcomes: Any, log: list[str]) -> Agent:
    """A sub-agent whose delete_file needs approval; deletions are appended to `log`."""
    agent = Agent(ScriptedModel(*outcomes), name="janitor")

    @agent.tool
    def delete_file(path: str) -> str:
        """Delete a file."""
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, f"delete {path}?")
        log.append(path)
        return f"deleted {path}"

    @agent.tool
    def list_files() -> str:
        """List files."""
        assert not call_approved()
        return "a.log, b.log"

    return agent


def ask(prompt: str, call_id: str = "p1", tool: str = "janitor") -> ModelResponse:
    """A parent turn that hands `prompt` to the sub-agent tool."""
    return calls((call_id, tool, {"prompt": prompt}), tokens=3)
