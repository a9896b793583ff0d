"""Pairing repair's truncation report against the Go reference (§3.4 step 1): "each call with
non-empty ID whose args (whitespace-trimmed) do not start with `{` or are not valid JSON → ID
added to Truncated". Valid JSON is Go's `json.Valid`: RFC 8259's grammar, which allows escaped
lone surrogates and big or odd numbers, and has no `NaN`, `Infinity` or `-Infinity`.
"""

from __future__ import annotations

import pytest

from golem import Message, ToolCall, normalize_history


def _report(args: str) -> list[str]:
    history = [
        Message(role="assistant", tool_calls=[ToolCall("c", "t", args)]),
        Message(role="tool", content="ok", tool_call_id="c", tool_name="t"),
    ]
    return normalize_history(history)[1].truncated


@pytest.mark.parametrize(
    "args",
    ['{"x": NaN}', '{"x": Infinity}', '{"x": -Infinity}', '{"x": [1, NaN]}', "{'x': 1}"],
)
def test_args_go_json_valid_refuses_are_reported_truncated(args: str) -> None:
    assert _report(args) == ["c"]


@pytest.mark.parametrize(
    "args",
    [
        '{"x": "\\ud800"}',
        '{"x": 1e400, "y": -0.0, "z": 123456789012345678901234567890}',
        '  {"x": 1}  ',
        '{"x": 1, "x": 2}',
        '{"x": "NaN"}',
    ],
)
def test_args_go_json_valid_accepts_are_not_truncated(args: str) -> None:
    assert _report(args) == []
