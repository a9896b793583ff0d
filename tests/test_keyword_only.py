"""Options are keyword-only (issue 12): a constructor or function takes its subject
positionally (`Worker(store, registry, *, ...)`, `Tool(name, description, schema, exec, *,
...)`) and every option by name, so adding an option never shifts another and a call reads
the same in every codebase. Data records (`Message`, `Usage`, `RunEvent`...) are values, not
configuration, and are not listed here."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

from golem import Agent, Tool
from golem.durable.worker import Worker, start_run
from golem.integrations.mcp import MCPServer, ToolHints
from golem.providers import FallbackModel
from golem.providers.anthropic import AnthropicModel
from golem.providers.gemini import GeminiModel
from golem.providers.openai import OpenAIChatModel, OpenAIResponsesModel
from golem.service import Approver, AuthConfig, ServiceSettings, create_app
from golem.service.notify import Webhook
from golem.service.views import Presentation
from golem.testing import FunctionModel, ScriptedModel

# callable -> the parameters it takes positionally (everything else must be keyword-only)
SUBJECTS: dict[str, tuple[Callable[..., Any], tuple[str, ...]]] = {
    "Agent": (Agent, ("model",)),
    "Agent.as_tool": (Agent.as_tool, ("self", "name", "description")),
    "Tool": (Tool, ("name", "description", "schema", "exec")),
    "Tool.from_function": (Tool.from_function, ("fn",)),
    "Worker": (Worker, ("store", "registry")),
    "start_run": (start_run, ("store", "registry", "agent_name", "prompt")),
    "create_app": (create_app, ("settings",)),
    "ServiceSettings": (ServiceSettings, ("registry", "store")),
    "MCPServer": (MCPServer, ("connect",)),
    "MCPServer.stdio": (MCPServer.stdio, ("command", "args")),
    "MCPServer.http": (MCPServer.http, ("url",)),
    "FallbackModel": (FallbackModel, ("primary",)),
    "OpenAIChatModel": (OpenAIChatModel, ("model",)),
    "OpenAIResponsesModel": (OpenAIResponsesModel, ("model",)),
    "AnthropicModel": (AnthropicModel, ("model",)),
    "GeminiModel": (GeminiModel, ("model",)),
    "ScriptedModel": (ScriptedModel, ()),
    "FunctionModel": (FunctionModel, ("fn",)),
    "Approver": (Approver, ("identity",)),
    "AuthConfig": (AuthConfig, ("tokens",)),
    "Webhook": (Webhook, ("url",)),
    "Presentation": (Presentation, ()),
    "ToolHints": (ToolHints, ()),
}


@pytest.mark.parametrize("name", sorted(SUBJECTS))
def test_options_are_keyword_only(name: str) -> None:
    fn, positional = SUBJECTS[name]
    params = inspect.signature(fn).parameters.values()
    taken = tuple(
        p.name
        for p in params
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name != "self"
    )
    assert taken == tuple(p for p in positional if p != "self")


def test_a_positional_option_is_refused_with_a_type_error() -> None:
    with pytest.raises(TypeError):
        Approver("alice@example.com", frozenset({"ops"}))  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Webhook("https://hooks.example/golem", b"s" * 32)  # type: ignore[call-arg]
