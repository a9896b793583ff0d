"""The public names are a contract: `__all__` lists are pinned, sorted, complete and importable."""

from __future__ import annotations

import importlib
import types

import pytest

import golem

ROOT_CONTRACT = {
    "Agent",
    "RunContext",
    "Result",
    "Usage",
    "UsageLimits",
    "UsageLimitExceeded",
    "RunError",
    "Stage",
    "PartialResult",
    "ToolError",
    "RunEvent",
    "EventKind",
    "new_id",
    "normalize_history",
    "HistoryRepair",
    "dumps_history",
    "loads_history",
}

MODULE_CONTRACT = {
    "golem.messages": {"Message", "ToolCall", "Part", "ThinkingBlock"},
    "golem.tool": {"Tool", "ToolResult", "Canceled", "Failed", "ModelRetry"},
    "golem.model": {
        "Model",
        "StreamingModel",
        "ModelRequest",
        "ModelResponse",
        "ToolSpec",
        "ToolChoice",
        "check_tool_choice",
        "Delta",
    },
    "golem.testing": {"ScriptedModel", "FunctionModel"},
}

PUBLIC_MODULES = [
    "golem",
    "golem.agent",
    "golem.agent_tool",
    "golem.cli",
    "golem.deferred",
    "golem.errors",
    "golem.events",
    "golem.history",
    "golem.mcp",
    "golem.messages",
    "golem.model",
    "golem.otel",
    "golem.providers",
    "golem.providers.anthropic",
    "golem.providers.gemini",
    "golem.providers.openai",
    "golem.result",
    "golem.service",
    "golem.store",
    "golem.store.postgres",
    "golem.store.records",
    "golem.store.sqlite",
    "golem.testing",
    "golem.tool",
    "golem.toolset",
    "golem.usage",
    "golem.worker",
]


def test_issue_import_lines_work() -> None:
    ns: dict[str, object] = {}
    exec(
        "from golem import Agent, RunContext, Result, Usage, UsageLimits, UsageLimitExceeded\n"
        "from golem import RunError, Stage, PartialResult, ToolError, RunEvent, EventKind, new_id\n"
        "from golem import normalize_history, HistoryRepair, dumps_history, loads_history\n"
        "from golem.messages import Message, ToolCall, Part, ThinkingBlock\n"
        "from golem.tool import Tool, ToolResult, Canceled, Failed, ModelRetry\n"
        "from golem.model import Model, StreamingModel, ModelRequest, ModelResponse, ToolSpec, Delta\n"
        "from golem.testing import ScriptedModel, FunctionModel\n",
        ns,
    )
    for name in ROOT_CONTRACT:
        assert ns[name] is getattr(golem, name)


def test_root_all_contains_the_contract() -> None:
    missing = ROOT_CONTRACT - set(golem.__all__)
    assert not missing, f"golem.__all__ lacks {sorted(missing)}"


@pytest.mark.parametrize(("module", "names"), sorted(MODULE_CONTRACT.items()))
def test_module_all_contains_the_contract(module: str, names: set[str]) -> None:
    mod = importlib.import_module(module)
    missing = names - set(mod.__all__)
    assert not missing, f"{module}.__all__ lacks {sorted(missing)}"


def _isort_key(name: str) -> tuple[int, str]:
    """ruff RUF022 order: SCREAMING_CASE constants, then CamelCase, then the rest."""
    if name.isupper() and len(name) > 1:
        return (0, name)
    if name[:1].isupper():
        return (1, name)
    return (2, name)


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_all_is_sorted_and_unique(module: str) -> None:
    """Sorted plainly, or in the isort-style order ruff's RUF022 enforces."""
    names = list(importlib.import_module(module).__all__)
    assert names in (sorted(names), sorted(names, key=_isort_key))
    assert len(set(names)) == len(names)


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_every_name_in_all_is_importable(module: str) -> None:
    mod = importlib.import_module(module)
    for name in mod.__all__:
        assert hasattr(mod, name), f"{module}.__all__ names {name!r}, which does not exist"


@pytest.mark.parametrize("module", PUBLIC_MODULES[1:])
def test_all_is_complete(module: str) -> None:
    """Every public class or function defined in a module is listed in its `__all__`."""
    mod = importlib.import_module(module)
    defined = {
        name
        for name, value in vars(mod).items()
        if not name.startswith("_")
        and isinstance(value, type | types.FunctionType)
        and getattr(value, "__module__", None) == module
    }
    missing = defined - set(mod.__all__)
    assert not missing, f"{module} defines public {sorted(missing)} not listed in __all__"


def test_root_all_names_resolve_to_their_home_module_objects() -> None:
    """A name exported at the root is the same object as in its home module (one home)."""
    for module in PUBLIC_MODULES[1:]:
        mod = importlib.import_module(module)
        for name in mod.__all__:
            if name in golem.__all__:
                assert getattr(golem, name) is getattr(mod, name), f"{name} differs in {module}"


def test_store_reexports_every_record_name() -> None:
    """`from golem.store import X` works for every record, enum and error of `golem.store.records`."""
    import golem.store
    import golem.store.records

    missing = set(golem.store.records.__all__) - set(golem.store.__all__)
    assert not missing, f"golem.store.__all__ lacks {sorted(missing)}"
    for name in golem.store.records.__all__:
        assert getattr(golem.store, name) is getattr(golem.store.records, name), name


def test_stage_values_are_the_wire_strings() -> None:
    from golem import Stage

    assert {s.value for s in Stage} == {"model", "decode", "tool", "loop", "usage", "canceled"}
    assert Stage.MODEL == "model"
    assert Stage.CANCELED == "canceled"


def test_event_kind_values_cover_the_core_kinds() -> None:
    from golem import EventKind

    values = {k.value for k in EventKind}
    assert {
        "model_start",
        "model_end",
        "tool_start",
        "tool_end",
        "canceled",
        "output_rejected",
    } <= values
