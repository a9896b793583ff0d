"""The error types a caller sees: RunError with a stage, ToolError, UsageLimitExceeded."""

from __future__ import annotations

from golem import PartialResult, RunError, Stage, ToolError, UsageLimitExceeded
from golem.errors import (
    BadRequest,
    GolemError,
    HistoryError,
    Overloaded,
    ProviderError,
    RateLimited,
)
from golem.messages import Message


def test_stages_are_their_wire_strings() -> None:
    assert [s.value for s in Stage] == ["model", "decode", "tool", "loop", "usage", "canceled"]
    assert all(Stage(s.value) is s and s == s.value for s in Stage)


def test_run_error_carries_stage_partial_and_cause_and_names_them() -> None:
    cause = ValueError("boom")
    partial = PartialResult(messages=[Message(role="user", content="hi")])
    err = RunError(Stage.TOOL, cause, partial)
    assert (err.stage, err.partial, err.__cause__) == (Stage.TOOL, partial, cause)
    assert isinstance(err, GolemError)
    err = RunError(Stage.LOOP, RuntimeError("too many turns"))
    assert (str(err), err.partial) == ("golem: loop stage: too many turns", None)


def test_tool_error_and_usage_limit_exceeded_name_what_failed() -> None:
    err = ToolError("delete_file", "call-1", "disk on fire")
    assert (err.tool_name, err.call_id) == ("delete_file", "call-1")
    assert all(s in str(err) for s in ("delete_file", "call-1", "disk on fire"))
    limit = UsageLimitExceeded("request", 3, 4)
    assert (limit.kind, limit.limit, limit.actual) == ("request", 3, 4)
    assert str(limit) == "run exceeded the request limit of 3 (used 4)"
    assert "limit of 0.5 (used 0.75)" in str(UsageLimitExceeded("cost", 0.5, 0.75))
    assert isinstance(err, GolemError)
    assert isinstance(limit, GolemError)


def test_partial_result_has_the_result_counters() -> None:
    p = PartialResult(messages=[])
    assert (p.messages, p.conversation_id) == ([], "")
    for name in ("usage", "finish_reason", "requests", "tool_calls", "cost", "run_id"):
        assert hasattr(p, name)


def test_provider_errors_classify_retryability() -> None:
    limited = RateLimited("slow down", retry_after=2.5)
    assert (limited.retryable, limited.retry_after) == (True, 2.5)
    assert Overloaded("busy").retryable
    assert not BadRequest("nope").retryable
    assert ProviderError("x", retryable=True).retryable
    assert issubclass(ProviderError, GolemError)
    assert issubclass(HistoryError, GolemError)
    assert issubclass(HistoryError, ValueError)  # what loads/dumps raised before it had a name
