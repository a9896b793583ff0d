"""The agents a worker knows, by the names their runs were saved under."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from golem.agent import Agent


@dataclass(frozen=True, slots=True)
class AgentEntry:
    """One registered agent: the agent, how to rebuild its deps, and a human description."""

    agent: Agent[Any, Any]
    deps_factory: Callable[[Any], Any] | None = None
    description: str = ""


AgentRegistry = Mapping[str, AgentEntry]


def load_registry(spec: str) -> AgentRegistry:
    """Import `module:attribute`: a mapping of names to `AgentEntry`, or a callable giving one."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr or module_name.startswith("."):
        raise ValueError(  # a relative module has no package to be relative to
            f"registry spec {spec!r}: want module:attribute (e.g. myapp.agents:registry)"
        )
    value: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        value = getattr(value, part)
    if callable(value) and not isinstance(value, Mapping):
        value = value()
    if not isinstance(value, Mapping):
        raise ValueError(f"registry spec {spec!r}: got {type(value).__name__}, want a mapping")
    for name, entry in value.items():
        if not isinstance(entry, AgentEntry):
            raise ValueError(
                f"registry spec {spec!r}: entry {name!r} is {type(entry).__name__}, want AgentEntry"
            )
    return value


def registered(registry: AgentRegistry, agent_name: str) -> AgentEntry:
    try:
        return registry[agent_name]
    except KeyError:
        known = ", ".join(sorted(registry)) or "none"
        raise KeyError(f'agent "{agent_name}" is not in the registry (known: {known})') from None


async def deps_of(entry: AgentEntry, deps_ref: Any) -> Any:
    if entry.deps_factory is None:
        return deps_ref
    deps = entry.deps_factory(deps_ref)
    if inspect.isawaitable(deps):
        deps = await deps
    return deps
