"""Tools whose `RunContext[...]` is not the agent's deps type: `mypy --strict` (its default error
codes, no extra flags) must refuse every line with an "E:" comment (a regex on the message), and
nothing else.

tests/test_typing.py runs mypy on this file; it is never imported. The forms checked are the
documented ways to register a tool that takes a context: `@agent.tool`, `@agent.tool(...)` with
options, and a raw `Tool(name, description, schema, exec)` in `Agent(tools=[...])`. A bare
function in `Agent(tools=[...])` and `Tool.from_function(fn)` are not checked
(docs/adr/0031-tools-typed-by-deps.md).
"""

from __future__ import annotations

from typing import Any

from golem import Agent, RunContext, Tool
from golem.testing import ScriptedModel

agent: Agent[int, str] = Agent(ScriptedModel("x"), deps_type=int)


@agent.tool  # E: Argument 1 to "tool" of "Agent" has incompatible type "Callable\[\[RunContext\[str\], int\], str\]"; expected "Callable\[\[RunContext\[int\], int\], str\]"
def shout(ctx: RunContext[str], times: int) -> str:
    return ctx.deps * times


@agent.tool(name="whisper", timeout=5)  # E: Argument 1 to "__call__" of "_ToolDecorator" has incompatible type "Callable\[\[RunContext\[str\]\], Coroutine\[Any, Any, str\]\]"; expected "Callable\[\[RunContext\[int\]\], Coroutine
async def whisper(ctx: RunContext[str]) -> str:
    return ctx.deps.lower()


@agent.tool  # E: Argument 1 to "tool" of "Agent" has incompatible type "Callable\[\[int\], int\]"
def no_context(n: int) -> int:  # takes no ctx: register it with @agent.tool_plain
    return n


def exec_str(ctx: RunContext[str], args: dict[str, Any]) -> str:
    return ctx.deps


raw: Agent[int, str] = Agent(
    ScriptedModel("x"),
    deps_type=int,
    tools=[Tool("raw", "", {"type": "object"}, exec_str)],  # E: Argument 4 to "Tool" has incompatible type
)
