"""Answers with fields and item types golem does not know, and how to compare what comes out.

`UNKNOWN` names every made-up field and type; `with_unknown_fields` and `with_unknown_items`
add them to a decoded answer or event (never inside tool arguments); `comparable` and
`essentials` are what must stay the same. `SETTINGS` is the Hypothesis budget of these
properties.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from golem.model import ModelResponse

UNKNOWN = "golem_unknown"
"""The name of every field and type the tests make up."""

SETTINGS = settings(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
"""The settings of the properties over the recorded answers and streams (the number of
examples comes from the Hypothesis profile)."""

KEPT_AS_WRITTEN = frozenset(("input", "args", "arguments", "partialArgs", "partial_json"))
"""Keys whose values are the model's own JSON (tool arguments): an added field would change
what the model said, not the shape of the answer."""

ITEM_LISTS = {
    "anthropic": ("content",),
    "openai-responses": ("output", "content", "summary"),
    "gemini": ("parts",),
    "openai-chat": ("content", "tool_calls", "annotations"),
}
"""The keys, per API, whose lists hold items an unknown item may stand among."""


def with_unknown_fields(value: Any, draw: st.DrawFn) -> Any:
    """`value` with an unknown field added to some of its objects (never inside arguments)."""
    if isinstance(value, dict):
        out = {
            k: v if k in KEPT_AS_WRITTEN else with_unknown_fields(v, draw) for k, v in value.items()
        }
        if draw(st.booleans()):
            extra = draw(
                st.one_of(
                    st.none(),
                    st.integers(-5, 5),
                    st.text(max_size=3),
                    st.just({"type": UNKNOWN, "text": "é"}),
                    st.just([{"type": UNKNOWN}]),
                )
            )
            out[UNKNOWN] = extra
        return out
    if isinstance(value, list):
        return [with_unknown_fields(v, draw) for v in value]
    return value


def strip_unknown(value: Any) -> Any:
    """`value` without the `UNKNOWN` fields."""
    if isinstance(value, dict):
        return {k: strip_unknown(v) for k, v in value.items() if k != UNKNOWN}
    if isinstance(value, list):
        return [strip_unknown(v) for v in value]
    return value


def comparable(value: Any) -> Any:
    """A result as plain data, the provider objects golem keeps verbatim (`raw`) read as
    JSON without the unknown fields."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {}
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            if f.name == "raw" and isinstance(item, str) and item:
                with contextlib.suppress(ValueError):
                    item = json.dumps(strip_unknown(json.loads(item)), sort_keys=True)
            out[f.name] = comparable(item)
        return out
    if isinstance(value, list):
        return [comparable(v) for v in value]
    return value


def unknown_item(api: str) -> dict[str, Any]:
    """An item of a type `api` does not define."""
    if api == "gemini":
        return {UNKNOWN: {"value": "é"}}
    return {"type": UNKNOWN, "id": "x_unknown_1", "value": "é"}


def with_unknown_items(value: Any, api: str, draw: st.DrawFn, key: str = "") -> Any:
    """`value` with an unknown item inserted into some of its item lists (`ITEM_LISTS`)."""
    if isinstance(value, dict):
        return {
            k: v if k in KEPT_AS_WRITTEN else with_unknown_items(v, api, draw, k)
            for k, v in value.items()
        }
    if isinstance(value, list):
        out = [with_unknown_items(v, api, draw) for v in value]
        lists_items = key in ITEM_LISTS[api] and all(isinstance(v, dict) for v in out)
        if lists_items and len(out) > 0 and draw(st.booleans()):
            out.insert(draw(st.integers(0, len(out))), unknown_item(api))
        return out
    return value


def essentials(response: ModelResponse) -> Any:
    """What an unknown item must leave alone: calls, text, thoughts, finish reason, usage."""
    m = response.message
    return (
        [(c.id, c.name, c.args) for c in m.tool_calls],
        m.content.replace("\n\n", ""),
        "".join(t.text for t in m.thinking),  # an unknown item between thoughts parts them
        response.finish_reason,
        response.usage,
    )
