"""Each service-side module has a sorted `__all__` of names that exist.

What belongs in it (public names only; internals shared across modules or `_`-named) is checked
for every public module by `tests/test_public_api.py`.
"""

from __future__ import annotations

import importlib

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
    "golem.cli.commands",
    "golem.cli.demo",
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
