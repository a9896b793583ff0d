"""Toolsets: tools from elsewhere (an MCP server...), async context managers the agent
enters per run (reference counted) and lists again before every model turn."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from contextlib import AsyncExitStack
from types import TracebackType
from typing import Protocol, Self, runtime_checkable

from golem.tool import Tool

__all__ = ["Toolset"]


@runtime_checkable
class Toolset(Protocol):
    """A source of tools for an agent's runs (see the module docstring)."""

    async def __aenter__(self) -> Self:
        """Make the tools callable (connect); re-entrant, reference counted."""
        ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Leave; the last exit releases what the first entry acquired."""
        ...

    async def list_tools(self) -> Sequence[Tool]:
        """The tools as of now (called before every model turn; cache what is costly)."""
        ...


async def enter_all(stack: AsyncExitStack, toolsets: Iterable[Toolset]) -> None:
    """Enter every toolset on `stack` (left in reverse order when the stack closes)."""
    for toolset in toolsets:
        await stack.enter_async_context(toolset)


async def resolve_tools(own: Mapping[str, Tool], toolsets: Iterable[Toolset]) -> dict[str, Tool]:
    """The agent's own tools plus every toolset's current tools, by name (`ValueError` for
    two tools sharing a name)."""
    tools = dict(own)
    for toolset in toolsets:
        for tool in await toolset.list_tools():
            if tool.name in tools:
                raise ValueError(
                    f'duplicate tool name "{tool.name}": {toolset!r} lists a tool the agent '
                    "already has; give the toolset a different prefix"
                )
            tools[tool.name] = tool
    return tools
