"""`Result`: a completed run's output is its output type; a paused run has none (ADR 0022)."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import pytest

from golem import (
    Agent,
    DeferredRequests,
    GolemError,
    Message,
    PendingToolCall,
    Result,
    RunPaused,
    Tool,
    ToolCall,
    Usage,
)
from golem.testing import ScriptedModel
from golem.tool import DeferKind, Deferred

MESSAGES = [Message(role="user", content="hi"), Message(role="assistant", content="hello")]
PENDING = DeferredRequests(
    approvals=[PendingToolCall("c1", "delete_file", '{"path": "a"}', "delete a?")],
    external=[PendingToolCall("x1", "lookup", "{}")],
)


def completed(output: Any = "hello", **kw: Any) -> Result[Any]:
    return Result(output, MESSAGES, Usage(3, 4), "stop", 1, 0, 0.5, "R1", "C1", **kw)


def paused() -> Result[str]:
    return Result(None, MESSAGES, run_id="R1", pending=PENDING)


def test_a_completed_result_has_its_output_maybe_none_and_is_not_paused() -> None:
    result = completed()
    assert (result.output, result.is_paused, result.pending) == ("hello", False, None)
    assert (result.usage, result.finish_reason, result.requests, result.cost) == (
        *(Usage(3, 4), "stop", 1, 0.5),
    )
    assert completed(None).output is None
    assert Result("x", []).usage == Usage()


def test_reading_the_output_of_a_paused_result_raises_run_paused_naming_the_calls() -> None:
    result = paused()
    assert result.is_paused
    with pytest.raises(RunPaused) as info:
        _ = result.output
    assert isinstance(info.value, GolemError)
    message = str(info.value)
    assert '"delete_file" (call "c1")' in message
    assert '"lookup" (call "x1")' in message
    assert "is_paused" in message
    assert "run_with_deferred_results" in message


def test_a_paused_result_cannot_carry_an_output() -> None:
    with pytest.raises(ValueError, match="paused result"):
        Result("text", MESSAGES, pending=PENDING)


async def test_runs_return_paused_and_completed_results() -> None:
    def gate(path: str) -> str:
        """Delete a file.

        Args:
            path: The file.
        """
        raise Deferred(DeferKind.APPROVAL, f"delete {path}?")

    model = ScriptedModel(
        Message(role="assistant", tool_calls=[ToolCall("c1", "gate", '{"path": "a"}')])
    )
    result = await Agent(model, tools=[Tool.from_function(gate)]).run("go")
    assert result.is_paused
    with pytest.raises(RunPaused, match='"gate" \\(call "c1"\\)'):
        _ = result.output
    done = await Agent(ScriptedModel("fine")).run("hi")
    assert not done.is_paused
    assert done.output == "fine"


@pytest.mark.parametrize("attr", ["output", "run_id", "cost"])
def test_a_result_is_immutable(attr: str) -> None:
    result = completed()
    with pytest.raises(AttributeError, match="immutable"):
        setattr(result, attr, "other")
    with pytest.raises(AttributeError, match="immutable"):
        delattr(result, attr)
    assert result == completed()


def test_results_compare_by_value_and_are_unhashable() -> None:
    assert (completed(), paused()) == (completed(), paused())
    assert completed() not in (completed("other"), paused(), "hello")
    with pytest.raises(TypeError):
        hash(completed())


def test_repr_shows_the_output_or_the_pending_calls() -> None:
    assert repr(completed()).startswith("Result(output='hello', messages=[")
    assert "run_id='R1'" in repr(completed())
    assert repr(paused()).startswith("Result(pending=DeferredRequests(")


@pytest.mark.parametrize("make", [completed, paused])
def test_pickle_and_copy_round_trip(make: Any) -> None:
    result = make()
    for clone in (pickle.loads(pickle.dumps(result)), copy.copy(result), copy.deepcopy(result)):
        assert clone == result
        assert clone.is_paused == result.is_paused
