"""Every module of the service, the CLI and the integrations: a sorted `__all__` of names that
exist (when it has one), under 800 lines, no function over 80.

What belongs in `__all__` (public names only) is checked for every public module by
`tests/test_public_api.py`; which modules there are is not pinned here.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

import golem.cli
import golem.integrations
import golem.service

PACKAGES = [golem.service, golem.cli, golem.integrations]
MODULES = sorted(
    {p.__name__ for p in PACKAGES}
    | {m.name for p in PACKAGES for m in pkgutil.walk_packages(p.__path__, p.__name__ + ".")}
)


@pytest.mark.parametrize("module", MODULES)
def test_all_is_sorted_unique_and_names_what_exists(module: str) -> None:
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:  # an integration whose extra is not installed
        pytest.skip(str(exc))
    names = list(getattr(mod, "__all__", []))
    isort_order = sorted(names, key=lambda n: (not n.isupper(), not n[:1].isupper(), n))
    assert names in (sorted(names), isort_order)  # plain, or ruff's RUF022 order
    assert len(names) == len(set(names))
    for name in names:
        assert hasattr(mod, name), f"{module}.__all__ names {name!r}, which does not exist"


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.__name__)
def test_modules_stay_under_800_lines_and_functions_under_80(package: object) -> None:
    for path in Path(package.__file__).parent.rglob("*.py"):  # type: ignore[attr-defined]
        source = path.read_text()
        assert len(source.splitlines()) < 800, path
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                assert node.end_lineno - node.lineno + 1 < 80, (path, node.name)
