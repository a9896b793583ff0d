"""Tool and output schemas as the OpenAI APIs take them (Chat Completions and Responses
alike): whether a schema can be sent `strict`, and the name an output schema goes by."""

from __future__ import annotations

import re
from typing import Any

__all__ = ["schema_name", "strict_compatible"]


_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]+")


def schema_name(schema: dict[str, Any]) -> str:
    title = schema.get("title")
    if isinstance(title, str):
        name = _NAME_CHARS.sub("_", title).strip("_")[:64]
        if name:
            return name
    return "result"


_STRICT_INCOMPATIBLE = frozenset(
    [
        "minLength",
        "maxLength",
        "patternProperties",
        "unevaluatedProperties",
        "propertyNames",
        "minProperties",
        "maxProperties",
        "unevaluatedItems",
        "contains",
        "minContains",
        "maxContains",
        "uniqueItems",
        "default",
        "oneOf",
        "allOf",
        "not",
        "if",
        "then",
        "else",
        "dependentRequired",
        "dependentSchemas",
    ]
)


_STRICT_FORMATS = frozenset(
    ("date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid")
)


_TYPE_KEYS = ("type", "$ref", "anyOf", "enum", "const")


_DEF_REF = re.compile(r"#/(\$defs|definitions)/[^/]+")


_LOOKAROUND = ("(?=", "(?!", "(?<=", "(?<!")


def strict_compatible(schema: dict[str, Any]) -> bool:
    """Whether `schema` already satisfies OpenAI's strict-mode subset, unchanged."""
    return schema.get("type") == "object" and _strict_node(schema)


def _strict_node(node: Any) -> bool:
    if not isinstance(node, dict):
        return False
    if not _STRICT_INCOMPATIBLE.isdisjoint(node):
        return False
    fmt = node.get("format")
    if fmt is not None and fmt not in _STRICT_FORMATS:
        return False
    pattern = node.get("pattern")
    if isinstance(pattern, str) and any(tok in pattern for tok in _LOOKAROUND):
        return False
    ref = node.get("$ref")
    if ref is not None and ((ref != "#" and not _DEF_REF.fullmatch(str(ref))) or len(node) > 1):
        return False
    kind = node.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    if "object" in kinds:
        props, required = node.get("properties"), node.get("required")
        if not isinstance(props, dict) or not isinstance(required, list):
            return False
        if node.get("additionalProperties") is not False or not set(props) <= set(required):
            return False
        if not all(_strict_node(v) for v in props.values()):
            return False
    if "array" in kinds:
        items = node.get("items")
        if not isinstance(items, dict) or not any(k in items for k in _TYPE_KEYS):
            return False
        if not _strict_node(items):
            return False
    any_of = node.get("anyOf")
    if any_of is not None and (
        not isinstance(any_of, list) or not all(_strict_node(s) for s in any_of)
    ):
        return False
    for key in ("$defs", "definitions"):
        defs = node.get(key)
        if defs is not None and (
            not isinstance(defs, dict) or not all(_strict_node(s) for s in defs.values())
        ):
            return False
    return True
