"""The error types a caller sees: RunError with a stage, ToolError, UsageLimitExceeded."""

from __future__ import annotations

import pytest

from golem import (
    PartialResult,
    RunError,
    Stage,
    ToolError,
    UsageLimitExceeded,
)
from golem.errors import (
    BadRequest,
    GolemError,
    Overloaded,
    ProviderError,
    RateLimited,
)
from golem.messages import Message


@pytest.mark.parametrize(
    ("stage", "value"),
    [
        (Stage.MODEL, "model"),
        (Stage.DECODE, "decode"),
        (Stage.TOOL, "tool"),
        (Stage.LOOP, "loop"),
        (Stage.USAGE, "usage"),
        (Stage.CANCELED, "canceled"),
    ],
)
def test_stage_string_values(stage: Stage, value: str) -> None:
    assert stage.value == value
    assert stage == value
    assert Stage(value) is stage


def test_run_error_carries_stage_partial_and_cause() -> None:
    cause = ValueError("boom")
    partial = PartialResult(messages=[Message(role="user", content="hi")])
    err = RunError(Stage.TOOL, cause, partial)
    assert err.stage is Stage.TOOL
    assert err.partial is partial
    assert err.__cause__ is cause
    assert isinstance(err, GolemError)


def test_run_error_text_names_stage_and_cause() -> None:
    err = RunError(Stage.LOOP, RuntimeError("too many turns"))
    assert str(err) == "golem: loop stage: too many turns"


def test_run_error_partial_defaults_to_none() -> None:
    assert RunError(Stage.MODEL, RuntimeError("x")).partial is None


def test_tool_error_names_tool_and_call() -> None:
    err = ToolError("delete_file", "call-1", "disk on fire")
    assert err.tool_name == "delete_file"
    assert err.call_id == "call-1"
    assert "delete_file" in str(err)
    assert "call-1" in str(err)
    assert "disk on fire" in str(err)
    assert isinstance(err, GolemError)


def test_usage_limit_exceeded_fields_and_text() -> None:
    err = UsageLimitExceeded("request", 3, 4)
    assert (err.kind, err.limit, err.actual) == ("request", 3, 4)
    assert str(err) == "run exceeded the request limit of 3 (used 4)"
    assert isinstance(err, GolemError)


def test_usage_limit_exceeded_formats_fractional_money() -> None:
    assert "limit of 0.5 (used 0.75)" in str(UsageLimitExceeded("cost", 0.5, 0.75))


def test_partial_result_has_the_result_counters() -> None:
    p = PartialResult(messages=[])
    assert p.messages == []
    for name in ("usage", "finish_reason", "requests", "tool_calls", "cost", "run_id"):
        assert hasattr(p, name)
    assert p.conversation_id == ""


def test_provider_errors_classify_retryability() -> None:
    assert RateLimited("slow down", retry_after=2.5).retryable
    assert RateLimited("slow down", retry_after=2.5).retry_after == 2.5
    assert Overloaded("busy").retryable
    assert not BadRequest("nope").retryable
    assert ProviderError("x", retryable=True).retryable
    assert issubclass(ProviderError, GolemError)
