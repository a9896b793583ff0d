"""The provider modules keep the project's size rules: none over 800 lines and no function over
80 (import circles and private imports are checked for all of src in tests/test_architecture.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import golem.providers

ROOT = Path(golem.providers.__file__).resolve().parent
MODULES = sorted(ROOT.rglob("*.py"))


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
