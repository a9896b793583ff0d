"""Every path into a decoded JSON value, for tests that damage a document at a drawn place."""

from __future__ import annotations

from typing import Any


def json_paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """`path` (the root first) and the path of every value nested in `value`: object keys
    and array indexes, depth first."""
    out = [path]
    if isinstance(value, dict):
        for k, v in value.items():
            out += json_paths(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += json_paths(v, (*path, i))
    return out
