"""The source's shape: no import circle of any kind (counting imports under `TYPE_CHECKING`
and inside functions) and no private name imported from another module — a name two modules
share is package-public or lives in the module that owns it."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def _modules() -> dict[str, Path]:
    found = {}
    for path in SRC.rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _owner(name: str) -> str:
    """The module `name` (a module, or a name in one) belongs to."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def _imports() -> tuple[dict[str, set[str]], list[str]]:
    edges: dict[str, set[str]] = {m: set() for m in MODULES}
    private: list[str] = []
    for module, path in MODULES.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [(_owner(a.name), "") for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                targets = []
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    if full in MODULES:
                        targets.append((full, ""))
                    else:
                        targets.append((_owner(base), alias.name))
            else:
                continue
            for target, name in targets:
                if not target or target == module:
                    continue
                edges[module].add(target)
                if name.startswith("_") and not name.startswith("__"):
                    private.append(f"{module} imports {target}.{name}")
    return edges, private


def test_no_module_imports_its_way_back_to_itself() -> None:
    edges, _ = _imports()
    try:
        tuple(graphlib.TopologicalSorter(edges).static_order())
    except graphlib.CycleError as circle:
        raise AssertionError(f"an import circle: {' -> '.join(circle.args[1])}") from None


def test_no_module_imports_another_modules_private_name() -> None:
    _, private = _imports()
    assert private == []


