"""History repair (normalize_history) and how runs apply it to every request."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from golem import Agent, HistoryRepair, normalize_history
from golem.history import INTERRUPTED_TEXT, pair_results
from golem.messages import Message, ToolCall
from golem.testing import ScriptedModel

INTERRUPTED = (
    "Tool call was interrupted before execution; no result was produced. "
    "Call the tool again if you need its result."
)

PROPERTY = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


def user(text: str = "hi") -> Message:
    return Message(role="user", content=text)


def asst(*calls: ToolCall, content: str = "") -> Message:
    return Message(role="assistant", content=content, tool_calls=list(calls))


def result(call_id: str, text: str = "ok", name: str = "t") -> Message:
    return Message(role="tool", content=text, tool_call_id=call_id, tool_name=name)


def interrupted(call_id: str, name: str) -> Message:
    return Message(role="tool", content=INTERRUPTED, tool_call_id=call_id, tool_name=name)


# --------------------------------------------------------------------------- the rules


def test_go_reference_example_exactly() -> None:
    history = [
        user("roll"),
        asst(ToolCall("call-1", "roll", '{"sides":6}'), ToolCall("call-2", "roll", '{"sides":')),
        result("call-1", "4", "roll"),
        result("ghost", "orphaned", "roll"),
    ]
    repaired, report = normalize_history(history)
    assert repaired == [
        history[0],
        history[1],
        interrupted("call-2", "roll"),
        history[2],
    ]
    assert report == HistoryRepair(synthesized=["call-2"], dropped=["ghost"], truncated=["call-2"])

    again, second = normalize_history(repaired)
    assert again == repaired
    assert second == HistoryRepair(synthesized=[], dropped=[], truncated=["call-2"])


_A = asst(ToolCall("a1", "x", "{}"), ToolCall("a2", "y", "{}"), ToolCall("a3", "z", "{}"))
_B = asst(ToolCall("b1", "x", "{}"))
_C1 = asst(ToolCall("c1", "t", "{}"))
_C2 = asst(ToolCall("c2", "t", "{}"))
REPAIRS = {  # history, repaired (indexes into history, or a synthesized result), report
    "valid: unchanged, empty report": (
        [Message(role="system", content="sys"), user(), _C1, result("c1"), asst(content="done")],
        [0, 1, 2, 3, 4],
        HistoryRepair(),
    ),
    "synthesized after their own message, in call order": (
        [user(), _A, result("a2", "two", "y"), user("more"), _B],
        [0, 1, interrupted("a1", "x"), interrupted("a3", "z"), 2, 3, 4, interrupted("b1", "x")],
        HistoryRepair(synthesized=["a1", "a3", "b1"]),
    ),
    "duplicate results keep the first": (
        [_C1, result("c1", "first"), result("c1", "second")],
        [0, 1],
        HistoryRepair(dropped=["c1"]),
    ),
    "a result before its call": (
        [result("c1", "early"), _C1],
        [1, interrupted("c1", "t")],
        HistoryRepair(synthesized=["c1"], dropped=["c1"]),
    ),
    "orphans dropped in order": (
        [user(), result("x"), result("y"), asst(content="hi")],
        [0, 3],
        HistoryRepair(dropped=["x", "y"]),
    ),
    "a result without call id": (
        [_C1, result("c1"), result("")],
        [0, 1],
        HistoryRepair(dropped=[""]),
    ),
    "calls without id are never synthesized": (
        [asst(ToolCall("", "t", "{}"))],
        [0],
        HistoryRepair(),
    ),
    "an earlier turn's result after a later turn is kept": (
        [_C1, _C2, result("c2"), result("c1")],
        [0, 1, 2, 3],
        HistoryRepair(),
    ),
}


@pytest.mark.parametrize(("history", "expected", "report"), REPAIRS.values(), ids=list(REPAIRS))
def test_repair_rules(history: list[Message], expected: list[Any], report: HistoryRepair) -> None:
    repaired, got = normalize_history(history)
    assert repaired == [history[e] if isinstance(e, int) else e for e in expected]
    assert got == report


@pytest.mark.parametrize(
    ("args", "truncated"),
    [
        ('  {"a": 1}  ', False),
        ('{"a": ', True),
        ("[1, 2]", True),  # not an object
        ('"x"', True),
        ("", True),
        ("   ", True),
        ("null", True),
        # the check validates with msgspec first; it keeps its meaning on that fast path:
        ('{"n": 1e400, "m": 123456789012345678901234567890, "z": -0.0}', False),
        ('{"x": NaN}', True),  # not JSON (Go reference §3.4)
        ('{"x": "\\ud800"}', False),  # lone surrogate escapes are JSON's grammar
        ('{"a": 1, "a": 2}', False),
        ("{" + '"a":[' * 100_000 + "1" + "]" * 100_000 + "}", True),  # no RecursionError
        ('{"a": 1} x', True),
    ],
    ids=lambda v: v[:20] if isinstance(v, str) else None,
)
def test_truncated_args_are_reported_and_kept_verbatim(args: str, truncated: bool) -> None:
    history = [asst(ToolCall("c", "t", args)), result("c")]
    repaired, report = normalize_history(history)
    assert report.truncated == (["c"] if truncated else [])
    assert repaired == history


def test_truncated_calls_are_reported_in_history_order_across_messages() -> None:
    history = [
        asst(ToolCall("b", "t", "{")),
        result("b"),
        asst(ToolCall("a", "t", "nope")),
        result("a"),
    ]
    assert normalize_history(history)[1].truncated == ["b", "a"]


def test_normalize_returns_a_new_list_of_any_sequence_deterministically() -> None:
    history = [user()]
    repaired, _ = normalize_history(history)
    assert repaired == history
    assert repaired is not history
    repaired, report = normalize_history((asst(ToolCall("c1", "t", "{}")),))
    assert (report.synthesized, len(repaired)) == (["c1"], 2)
    history = [
        asst(ToolCall("c1", "t", "{"), ToolCall("c2", "t", "{}")),
        result("zz"),
        result("c2"),
    ]
    assert normalize_history(history) == normalize_history(list(history))


# --------------------------------------------------------------------------- properties

ids = st.sampled_from(["", "c1", "c2", "c3", "c4"])
names = st.sampled_from(["a", "b"])
args = st.sampled_from(["{}", '{"x": 1}', '{"x":', "", "[1]", "null", " {} "])
tool_calls = st.builds(ToolCall, id=ids, name=names, args=args)
history_messages = st.one_of(
    st.builds(Message, role=st.just("user"), content=st.sampled_from(["hi", ""])),
    st.builds(Message, role=st.just("system"), content=st.just("sys")),
    st.builds(
        Message,
        role=st.just("assistant"),
        content=st.sampled_from(["", "text"]),
        tool_calls=st.lists(tool_calls, max_size=3),
    ),
    st.builds(
        Message,
        role=st.just("tool"),
        content=st.sampled_from(["r", ""]),
        tool_call_id=ids,
        tool_name=names,
        failed=st.booleans(),
    ),
)
histories = st.lists(history_messages, max_size=8)


@PROPERTY
@given(histories)
def test_repair_pairs_every_call_once_touching_nothing_else_and_is_idempotent(
    history: list[Message],
) -> None:
    snapshot = copy.deepcopy(history)
    repaired, report = normalize_history(history)
    assert history == snapshot  # the input is never mutated
    assert pair_results(history) == repaired  # what a run applies (no truncation report)
    again, second = normalize_history(repaired)
    assert again == repaired
    assert (second.synthesized, second.dropped, second.truncated) == ([], [], report.truncated)
    open_calls: set[str] = set()
    for m in repaired:
        if m.role == "assistant":
            open_calls.update(c.id for c in m.tool_calls if c.id)
        if m.role == "tool":
            assert m.tool_call_id in open_calls, "a kept result answers a call made before it"
            open_calls.discard(m.tool_call_id)
    assert not open_calls
    # only tool messages are added or removed, and none is rewritten
    assert [m for m in repaired if m.role != "tool"] == [m for m in history if m.role != "tool"]
    last_name = {c.id: c.name for m in history if m.role == "assistant" for c in m.tool_calls}
    for m in repaired:
        if m.role == "tool" and m not in history:
            assert m.tool_call_id in report.synthesized
            assert (m.content, m.tool_name) == (INTERRUPTED_TEXT, last_name[m.tool_call_id])
    assert len(repaired) == len(history) - len(report.dropped) + len(report.synthesized)


# --------------------------------------------------------------------------- runs apply it


async def test_every_run_request_carries_the_repaired_history() -> None:
    model = ScriptedModel("fine")
    history = [
        user("roll"),
        asst(ToolCall("call-1", "roll", '{"sides":6}'), ToolCall("call-2", "roll", '{"sides":')),
        result("call-1", "4", "roll"),
        result("ghost", "orphaned", "roll"),
    ]
    snapshot = copy.deepcopy(history)
    res = await Agent(model).run("again", history=history)
    sent = model.requests[0].messages
    assert [(m.role, m.tool_call_id, m.content) for m in sent] == [
        ("user", "", "roll"),
        ("assistant", "", ""),
        ("tool", "call-2", INTERRUPTED),
        ("tool", "call-1", "4"),
        ("user", "", "again"),
    ]
    assert history == snapshot
    assert [m.tool_call_id for m in res.messages if m.role == "tool"] == ["call-2", "call-1"]


async def test_history_system_messages_never_reach_the_model_nor_the_result() -> None:
    model = ScriptedModel("a", "b")
    history = [
        Message(role="system", content="OLD instructions"),
        user("first"),
        Message(role="system", content="injected mid-history"),
        Message(role="assistant", content="reply"),
    ]
    res = await Agent(model, instructions="NEW instructions").run("second", history=history)
    for sent in (model.requests[0].messages, res.messages):
        assert sent[0] == Message(role="system", content="NEW instructions")
        assert [m.role for m in sent].count("system") == 1
        assert all("OLD" not in m.content and "injected" not in m.content for m in sent)
    await Agent(model).run("third", history=history)  # no instructions: no system message
    assert all(m.role != "system" for m in model.requests[1].messages)
