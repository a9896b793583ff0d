"""Decisions, edited arguments, tool arguments and seals under fuzzing (ADR 0070).

Every input a resume or a store takes from outside — an approval's edited arguments (a dict or
JSON text), a stored decision, a model's argument text, a seal string — is either accepted or
refused with a named golem error (`ResumeError`, `InvalidDecision`, `InvalidArguments` as a
correction, `SealError`). Hostile sizes (10^5-deep nesting, 10^5-digit numbers, `NaN`, lone
surrogates) are explicit cases; each one that escaped bare before is marked.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from golem import (
    Agent,
    Approval,
    DeferredResults,
    GolemError,
    Message,
    ResumeError,
    RunContext,
    SealError,
    Tool,
    ToolCall,
)
from golem.agent_tool import PAUSED_MARKER
from golem.durable.store import Decision, InvalidDecision
from golem.records import seal_sub_agent_calls, sub_agent_calls
from golem.seal import verify_call
from golem.testing import ScriptedModel
from golem.tool import DeferKind, Deferred, InvalidArguments, call_approved

FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
BIG = 100_000
KEY = b"k" * 32

_leaves = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(max_size=6)
    | st.sampled_from(["\ud800", "\x00", "\ufeff"])
)
json_values = st.recursive(
    _leaves,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(max_size=4) | st.sampled_from(["\udfff"]), inner, max_size=3)
    ),
    max_leaves=10,
)
arg_texts = (
    json_values.map(lambda v: json.dumps(v, allow_nan=True))
    | st.text(max_size=30)
    | st.sampled_from(
        ['{"a":1e999999}', '{"a":NaN}', '{"a":1,"a":2}', ' {"a":1} ', '{"a":"\\ud800"}']
    )
)


def _deep_dict(n: int) -> dict[str, Any]:
    root: dict[str, Any] = {}
    node = root
    for _ in range(n):
        node["a"] = {}
        node = node["a"]
    return root


DEEP_TEXT = '{"a":' + "[" * BIG + "]" * BIG + "}"
DEEP_OBJECT_TEXT = '{"a":' * BIG + "1" + "}" * BIG


# --------------------------------------------------------------------------- edited arguments


def _act(ctx: RunContext[None], args: dict[str, Any]) -> str:
    if not call_approved():
        raise Deferred(DeferKind.APPROVAL, "needs sign-off")
    return "done"


PAUSED = [
    Message(role="user", content="go"),
    Message(role="assistant", tool_calls=[ToolCall("c1", "act", '{"a":1}')]),
]


def _resume_with(args: dict[str, Any] | str) -> None:
    agent: Agent[None, str] = Agent(
        ScriptedModel(Message(role="assistant", content="ok")),
        tools=[Tool("act", "acts", {"type": "object"}, _act, run_in_thread=False)],
    )
    try:
        approval = Approval(True, args=args)
    except TypeError:  # documented: args that are neither a dict nor a string
        assert not isinstance(args, dict | str)
        return
    try:
        result = agent.run_with_deferred_results_sync(
            PAUSED, DeferredResults(approvals={"c1": approval})
        )
    except ResumeError:
        return
    assert result.output == "ok"


ARG_DICTS = st.dictionaries(st.text(max_size=4), json_values, max_size=3)


@FUZZ
@example(_deep_dict(BIG))  # was a bare RecursionError
@example({"a": math.nan})
@example({"\ud800": 1})
@example(DEEP_TEXT)  # was a bare RecursionError
@example(DEEP_OBJECT_TEXT)  # was a bare RecursionError
@example("{" + '"a":' + "9" * BIG + "}")
@given(ARG_DICTS | arg_texts)
def test_edited_arguments_as_a_dict_or_text_resume_or_are_a_resume_error(
    args: dict[str, Any] | str,
) -> None:
    _resume_with(args)


def test_deeply_nested_edited_arguments_are_a_resume_error_that_says_so() -> None:
    agent: Agent[None, str] = Agent(
        ScriptedModel(Message(role="assistant", content="ok")),
        tools=[Tool("act", "acts", {"type": "object"}, _act)],
    )
    for args in (_deep_dict(BIG), DEEP_TEXT):
        with pytest.raises(ResumeError, match=r'tool call "c1" \(act\)'):
            agent.run_with_deferred_results_sync(
                PAUSED, DeferredResults(approvals={"c1": Approval(True, args=args)})
            )


# --------------------------------------------------------------------------- model arguments


def test_a_model_sending_deeply_nested_arguments_gets_a_correction() -> None:
    ran: list[dict[str, Any]] = []

    def act(ctx: RunContext[None], args: dict[str, Any]) -> str:
        ran.append(args)
        return "done"

    model = ScriptedModel(
        Message(role="assistant", tool_calls=[ToolCall("c1", "act", DEEP_TEXT)]),
        Message(role="assistant", content="fine"),
    )
    agent: Agent[None, str] = Agent(
        model, tools=[Tool("act", "acts", {"type": "object"}, act)], tool_retries=1
    )
    result = agent.run_sync("go")
    assert result.output == "fine"
    assert ran == []
    (feedback,) = [m for m in result.messages if m.role == "tool"]
    assert "nested too deeply" in feedback.content
    with pytest.raises(InvalidArguments, match="nested too deeply"):  # not a RecursionError
        Tool("act", "acts", {"type": "object"}, _act).decode_args(DEEP_TEXT)


@FUZZ
@given(arg_texts)
def test_any_model_argument_text_decodes_or_is_invalid_arguments(args: str) -> None:
    tool = Tool("act", "acts", {"type": "object"}, _act)
    try:
        value = tool.validate_args(args)
    except InvalidArguments:
        return
    assert isinstance(value, dict)


# --------------------------------------------------------------------------- stored decisions


def _stored_args_are_sound(text: str) -> None:
    value = json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} stored"))
    assert isinstance(value, dict)
    text.encode("utf-8")  # storable: no lone surrogate


@FUZZ
@example(_deep_dict(BIG))  # was a bare RecursionError
@example({"a": math.nan})  # was stored as NaN, which no JSON reader takes
@example({"a": "\ud800"})  # was stored as text no database can hold
@example({"\udfff": 1})
@example(DEEP_TEXT)  # was a bare RecursionError
@example(DEEP_OBJECT_TEXT)
@example('{"a":NaN}')  # was stored as is
@example('{"a":"\ud800"}')  # a raw lone surrogate: was stored as is
@example('{"a":"é"}')
@given(ARG_DICTS | arg_texts | json_values)
def test_a_decisions_edited_arguments_are_stored_sound_or_are_an_invalid_decision(
    args: Any,
) -> None:
    """A dict, JSON text, or any value a decision body's `args` field decodes to."""
    try:
        decision = Decision.approve(args)
    except InvalidDecision:
        return
    if not isinstance(args, dict | str):
        return  # any other value a decision body decodes to: accepted or refused named
    assert decision.args is not None
    value = json.loads(decision.args, parse_constant=lambda name: pytest.fail(f"{name} stored"))
    assert isinstance(value, dict)
    decision.args.encode("utf-8")  # storable: no lone surrogate


# --------------------------------------------------------------------------- seals

CALL = ToolCall("c1", "act", '{"a":1}')


@FUZZ
@example("v1.k1.approval." + "A" * 43)
@example("v1." + "k" * BIG + ".approval." + "A" * 43)
@example("." * BIG)
@example("v1.k1.approval." + "\ud800" * 43)
@example("v1.k1.approval." + "é" * 43)
@example("v1.k1.\x00." + "A" * 43)
@given(st.text(max_size=80))
def test_any_seal_text_verifies_or_is_a_seal_error(seal: str) -> None:
    call = ToolCall(CALL.id, CALL.name, CALL.args, seal=seal)
    with pytest.raises(SealError) as info:
        verify_call(KEY, "conv", call)
    assert info.value.problem in ("unsealed", "malformed", "unknown_key", "tampered")
    assert info.value.call_id == "c1"


# --------------------------------------------------------------------------- resolutions


@FUZZ
@given(json_values)
def test_resolutions_from_any_json_value_are_accepted_or_refused_before_a_model_call(
    value: Any,
) -> None:
    """A resolutions dict decoded from JSON: a `DeferredResults` (then the resume runs or is a
    `ResumeError`), or the documented `TypeError` naming what is wrong (a programming mistake:
    the application converts JSON into decisions, golem never guesses)."""
    agent: Agent[None, str] = Agent(
        ScriptedModel(Message(role="assistant", content="ok")),
        tools=[Tool("act", "acts", {"type": "object"}, _act)],
    )
    problem: BaseException | None = None
    try:
        agent.run_with_deferred_results_sync(PAUSED, value)
    except (TypeError, GolemError) as exc:
        problem = exc
    if problem is not None:
        assert str(problem)


# --------------------------------------------------------------------------- sub-agent records

DEEP_RECORD = [
    Message(role="user", content="go"),
    Message(role="assistant", tool_calls=[ToolCall("p1", "helper", '{"task":"x"}')]),
    Message(
        role="tool",
        tool_call_id="p1",
        tool_name="helper",
        content=PAUSED_MARKER + "\n" + "[" * BIG,  # was a bare RecursionError
    ),
]


@pytest.mark.parametrize(
    "body",
    ["[" * BIG, '{"history":' + "[" * BIG, '{"history":5}', '"x"', "", "{" * BIG],
    ids=["deep", "deep history", "history not text", "a string", "empty", "deep objects"],
)
def test_an_unreadable_sub_agent_record_is_a_resume_error_and_skipped_by_the_readers(
    body: str,
) -> None:
    history = [*DEEP_RECORD[:2], replace(DEEP_RECORD[2], content=PAUSED_MARKER + "\n" + body)]
    helper: Agent[None, str] = Agent(ScriptedModel(Message(role="assistant", content="ok")))
    parent: Agent[None, str] = Agent(
        ScriptedModel(Message(role="assistant", content="ok")),
        tools=[helper.as_tool("helper", "helps")],
    )
    with pytest.raises(ResumeError, match="unreadable"):
        parent.run_with_deferred_results_sync(history, DeferredResults())
    assert sub_agent_calls(history) == {}
    assert seal_sub_agent_calls(history, KEY, {"p1/c1": "approval"}) == history
