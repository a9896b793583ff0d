"""Conformance of pausing and of resolutions with the contract (seed: deferred-tools.md; Go
reference §2.2, §2.5), for inputs the other tests do not build: a deferral whose kind is not
one of the two, and decisions that are not decisions.

Go reference §2.2 step 4: "deferral with a kind other than approval/external → the run fails:
RunError{Stage: "tool"}, cause text contains "tool deferred without a kind" (the deferred
event was already emitted). Any pending list is discarded." `Deferred(kind)` refuses a bad kind
at construction (issue 12), but a signal can still arrive with one: a subclass that does not
call `Deferred.__init__`, or an instance whose `kind` was reassigned. Such a run must fail as a
run (a `RunError` at stage `tool`), never escape as a bare `ValueError`/`AttributeError` from
inside the loop.
"""

from __future__ import annotations

from typing import Any

import pytest

from golem import (
    Agent,
    Approval,
    DeferredResults,
    Message,
    RunContext,
    RunError,
    RunEvent,
    Stage,
    Tool,
    ToolCall,
    ToolError,
)
from golem.model import ModelResponse
from golem.testing import ScriptedModel
from golem.tool import Deferred

OBJ = {"type": "object"}


def tool_turn(*calls: ToolCall) -> ModelResponse:
    return ModelResponse(
        message=Message(role="assistant", tool_calls=list(calls)), finish_reason="tool_call"
    )


class _Unkinded(Deferred):
    """A subclass that skips `Deferred.__init__`: no `kind`, no `reason`."""

    def __init__(self) -> None:
        Exception.__init__(self, "mine")


def _reassigned(kind: Any) -> Deferred:
    signal = Deferred("approval", "why")
    signal.kind = kind
    return signal


BAD_SIGNALS = [
    pytest.param(lambda: _reassigned(""), id="kind-emptied"),
    pytest.param(lambda: _reassigned("approve"), id="kind-misspelled"),
    pytest.param(lambda: _reassigned(None), id="kind-none"),
    pytest.param(lambda: _reassigned(["approval"]), id="kind-unhashable"),
    pytest.param(_Unkinded, id="subclass-without-kind"),
]


@pytest.mark.parametrize("make", BAD_SIGNALS)
@pytest.mark.parametrize("parallel", [False, True])
async def test_a_deferral_without_a_valid_kind_fails_the_run_at_stage_tool(
    make: Any, parallel: bool
) -> None:
    ran: list[str] = []

    def bad(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        raise make()

    def ok(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        ran.append("ok")
        return "fine"

    def gate(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        raise Deferred("approval", "sign-off")

    model = ScriptedModel(
        tool_turn(
            ToolCall("c1", "gate", "{}"), ToolCall("c2", "bad", "{}"), ToolCall("c3", "ok", "{}")
        ),
        "never",
    )
    agent = Agent(
        model,
        tools=[Tool("bad", "b", OBJ, bad), Tool("ok", "o", OBJ, ok), Tool("gate", "g", OBJ, gate)],
        parallel_tool_calls=parallel,
    )
    events: list[RunEvent] = []
    with pytest.raises(RunError) as info:
        await agent.run("go", on_event=events.append)
    err = info.value
    assert err.stage is Stage.TOOL
    cause = err.__cause__
    assert isinstance(cause, ToolError)
    assert (cause.tool_name, cause.call_id) == ("bad", "c2")
    assert "tool deferred without a kind" in str(cause)
    assert len(model.requests) == 1  # no model call follows
    # the deferred event of the bad call was emitted (as in Go), and nothing is pending
    deferred = [(e.call_id, e.reason) for e in events if e.kind == "deferred"]
    assert ("c2", "") in deferred or ("c2", "why") in deferred
    if not parallel:
        assert ran == []  # sequential: the call after the failing one never starts
    # the evidence ends at the requesting assistant turn (a failing batch adds no results)
    assert err.partial is not None
    assert err.partial.messages[-1].role == "assistant"


# --------------------------------------------------------------------------- decisions


@pytest.mark.parametrize("approved", ["false", "", 0, 1, None, [], "yes"])
def test_an_approval_decision_must_be_a_bool(approved: Any) -> None:
    # `Approval("false")` used to approve (a truthy string): a decision read from JSON or a
    # form must be converted by the application, never guessed.
    with pytest.raises(TypeError, match="approved must be a bool"):
        Approval(approved)


@pytest.mark.parametrize("reason", [None, 42, b"no"])
def test_an_approval_reason_must_be_text(reason: Any) -> None:
    with pytest.raises(TypeError, match="reason must be a str"):
        Approval(False, reason)


def test_a_results_dict_with_a_non_bool_decision_is_refused() -> None:
    with pytest.raises(TypeError, match="must be an Approval or a bool"):
        DeferredResults({"c1": "false"})  # type: ignore[dict-item]


async def test_a_string_decision_never_reaches_the_tool() -> None:
    ran: list[bool] = []

    def gate(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        ran.append(True)
        raise Deferred("approval", "sign-off")

    model = ScriptedModel(tool_turn(ToolCall("c1", "gate", "{}")), "done")
    agent = Agent(model, tools=[Tool("gate", "g", OBJ, gate)])
    paused = await agent.run("go")
    assert paused.pending is not None
    with pytest.raises(TypeError):
        await agent.run_with_deferred_results(
            paused.messages,
            DeferredResults({"c1": Approval("false")}),  # type: ignore[arg-type]
        )
    assert ran == [True]  # the pausing pass only
    assert len(model.requests) == 1


# --------------------------------------------------------------------------- unresumable pauses


def _gate(ctx: RunContext[Any], args: dict[str, Any]) -> str:
    from golem.tool import call_approved

    if not call_approved():
        raise Deferred("approval", "sign-off")
    return "done"


@pytest.mark.parametrize(
    ("turns", "says"),
    [
        pytest.param([tool_turn(ToolCall("", "gate", "{}"))], "has no call ID", id="no-id"),
    ],
)
@pytest.mark.parametrize("parallel", [False, True])
async def test_a_pause_no_resume_could_name_fails_the_run_instead(
    turns: list[ModelResponse], says: str, parallel: bool
) -> None:
    # Go pauses and the resume then fails ("has no call ID", or the call counts as answered by
    # the other one's result); golem used to return the pause and refuse every resume of it
    # (`ResumeError`), after an approver had been asked. The run fails at stage tool instead.
    model = ScriptedModel(*turns, "never")
    agent = Agent(
        model,
        tools=[Tool("gate", "g", OBJ, _gate), Tool("stat", "s", OBJ, lambda c, a: "12")],
        parallel_tool_calls=parallel,
    )
    with pytest.raises(RunError) as info:
        await agent.run("go")
    err = info.value
    assert err.stage is Stage.TOOL
    cause = err.__cause__
    assert isinstance(cause, ToolError)
    assert cause.tool_name == "gate"
    assert says in str(cause)
    assert len(model.requests) == len(turns)
    assert err.partial is not None
    assert err.partial.messages[-1].role == "assistant"  # a failing batch adds no results


@pytest.mark.parametrize(
    ("turns", "pending_id"),
    [
        pytest.param(
            [tool_turn(ToolCall("c1", "gate", "{}"), ToolCall("c1", "stat", "{}"))],
            "c1",
            id="id-twice-in-the-batch",
        ),
        pytest.param(
            # a server that numbers its calls per response ("call_0" every turn)
            [
                tool_turn(ToolCall("call_0", "stat", "{}")),
                tool_turn(ToolCall("call_0", "gate", "{}")),
            ],
            "call_0_2",
            id="id-of-an-earlier-turn",
        ),
    ],
)
@pytest.mark.parametrize("parallel", [False, True])
async def test_a_call_whose_id_the_conversation_has_pauses_under_an_id_of_its_own(
    turns: list[ModelResponse], pending_id: str, parallel: bool
) -> None:
    agent = Agent(
        ScriptedModel(*turns),
        tools=[Tool("gate", "g", OBJ, _gate), Tool("stat", "s", OBJ, lambda c, a: "12")],
        parallel_tool_calls=parallel,
    )
    result = await agent.run("go")
    assert result.pending is not None
    assert [c.call_id for c in result.pending.approvals] == [pending_id]
    ids = [c.id for m in result.messages if m.role == "assistant" for c in m.tool_calls]
    assert len(ids) == len(set(ids))
