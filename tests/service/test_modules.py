"""Each service-side module has a sorted `__all__` of names that exist.

What belongs in it (public names only; internals shared across modules or `_`-named) is checked
for every public module by `tests/test_public_api.py`.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import golem.service

MODULES = [
    "golem.service",
    "golem.service.api",
    "golem.service.app",
    "golem.service.audit",
    "golem.service.auth",
    "golem.service.credentials",
    "golem.service.errors",
    "golem.service.inbox",
    "golem.service.middleware",
    "golem.service.notify",
    "golem.service.openapi",
    "golem.service.pages",
    "golem.service.positions",
    "golem.service.runs",
    "golem.service.schemas",
    "golem.service.settings",
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


SERVICE = Path(golem.service.__file__).parent


@pytest.mark.parametrize("name", ["api.py", "inbox.py"])
def test_the_split_modules_stay_under_800_lines(name: str) -> None:
    assert len((SERVICE / name).read_text().splitlines()) < 800


@pytest.mark.parametrize(
    ("name", "function"), [("app.py", "create_app"), ("openapi.py", "openapi_document")]
)
def test_the_factories_stay_under_80_lines(name: str, function: str) -> None:
    tree = ast.parse((SERVICE / name).read_text())
    found = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function)
    assert found.end_lineno is not None
    assert found.end_lineno - found.lineno + 1 < 80
