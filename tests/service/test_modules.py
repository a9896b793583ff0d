"""Each service-side module has a sorted, complete `__all__` of names that exist."""

from __future__ import annotations

import importlib
import types

import pytest

MODULES = [
    "golem.service",
    "golem.service.api",
    "golem.service.app",
    "golem.service.audit",
    "golem.service.auth",
    "golem.service.inbox",
    "golem.service.limits",
    "golem.service.notify",
    "golem.service.openapi",
    "golem.service.schemas",
    "golem.service.stream",
    "golem.service.views",
    "golem._display",
    "golem.cli",
    "golem.demo",
]


@pytest.mark.parametrize("module", MODULES)
def test_all_is_sorted_unique_and_importable(module: str) -> None:
    mod = importlib.import_module(module)
    names = list(mod.__all__)
    isort_order = sorted(names, key=lambda n: (not n.isupper(), not n[:1].isupper(), n))
    assert names in (sorted(names), isort_order)  # plain, or ruff's RUF022 order
    assert len(names) == len(set(names))
    for name in names:
        assert hasattr(mod, name), f"{module}.__all__ names {name!r}, which does not exist"


@pytest.mark.parametrize("module", MODULES)
def test_all_is_complete(module: str) -> None:
    mod = importlib.import_module(module)
    defined = {
        name
        for name, value in vars(mod).items()
        if not name.startswith("_")
        and isinstance(value, type | types.FunctionType)
        and getattr(value, "__module__", None) == module
    }
    assert not defined - set(mod.__all__), f"{module}: {sorted(defined - set(mod.__all__))}"
