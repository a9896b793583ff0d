"""The provider modules keep the project's layout rules: none over 800 lines and no function
over 80, no private name imported from another module, no import circle — counting imports
under `TYPE_CHECKING` and inside functions."""

from __future__ import annotations

import ast
from pathlib import Path

import golem.providers

ROOT = Path(golem.providers.__file__).resolve().parent
MODULES = sorted(ROOT.rglob("*.py"))


def _name(path: Path) -> str:
    parts = ["golem", *path.relative_to(ROOT.parent).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """`(module, names)` of every `import` / `from ... import` anywhere in the file."""
    out: list[tuple[str, list[str]]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out.extend((a.name, []) for a in node.names)
    return out


def test_no_module_or_function_is_too_long() -> None:
    long = []
    for path in MODULES:
        text = path.read_text()
        if len(text.splitlines()) > 800:
            long.append(f"{path.name}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                size = (node.end_lineno or node.lineno) - node.lineno + 1
                if size > 80:
                    long.append(f"{path.name}: {node.name} is {size} lines")
    assert long == []


def test_no_private_name_comes_from_another_module() -> None:
    private = [
        f"{_name(path)} imports {name} from {module}"
        for path in MODULES
        for module, names in _imports(path)
        if module.startswith("golem.")
        for name in names
        if name.startswith("_") and not name.startswith("__")
    ]
    assert private == []


def test_the_provider_modules_import_no_circle() -> None:
    names = {_name(p): p for p in MODULES}
    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        edges = graph.setdefault(name, set())
        for module, imported in _imports(path):
            subs = {f"{module}.{n}" for n in imported} & names.keys()  # `from pkg import mod`
            edges |= (subs or ({module} & names.keys())) - {name}
    circles: list[str] = []
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                circles.append(" -> ".join([*trail[trail.index(nxt) :], nxt]))
            elif nxt not in state:
                visit(nxt, [*trail, nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert circles == []
