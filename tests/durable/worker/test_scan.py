"""The worker finds a run's stored calls from the end of its history, without a full pass."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from golem.durable.worker._checks import latest_calls as _latest_calls
from golem.durable.worker._start import _emission_order
from golem.messages import Message, ToolCall

IDS = st.sampled_from(["a", "b", "c", "d", ""])


@st.composite
def histories(draw: st.DrawFn) -> list[Message]:
    """Histories whose call IDs repeat (a tampered or odd history) and mix with other turns."""
    out: list[Message] = []
    for turn in range(draw(st.integers(0, 8))):
        if draw(st.booleans()):
            out.append(Message(role="user", content=f"u{turn}"))
            continue
        calls = [
            ToolCall(draw(IDS), f"tool{turn}.{j}", f'{{"t":{turn},"j":{j}}}')
            for j in range(draw(st.integers(0, 3)))
        ]
        out.append(Message(role="assistant", tool_calls=calls))
    return out


def _full_pass(messages: list[Message], ids: set[str]) -> dict[str, ToolCall]:
    return {c.id: c for m in messages for c in m.tool_calls if c.id in ids}


@settings(deadline=None)
@given(histories(), st.sets(IDS))
def test_latest_calls_are_the_last_call_of_each_id(messages: list[Message], ids: set[str]) -> None:
    assert _latest_calls(messages, ids) == _full_pass(messages, ids)


@settings(deadline=None)
@given(histories(), st.lists(IDS, unique=True))
def test_emission_order_sorts_like_a_full_pass(messages: list[Message], ids: list[str]) -> None:
    everything = [c.id for m in messages for c in m.tool_calls]
    full = {cid: i for i, cid in enumerate(everything)}  # the last occurrence wins
    expected = sorted(ids, key=lambda cid: full.get(cid, len(everything)))  # missing: last
    order = _emission_order(messages, ids)
    assert sorted(ids, key=lambda cid: order.get(cid, 0)) == expected


def test_the_scan_stops_at_the_pending_turn() -> None:
    """Messages before the pending calls' turn are never looked at."""

    class Poisoned(list[ToolCall]):
        def __iter__(self):  # type: ignore[no-untyped-def]
            raise AssertionError("an old turn was scanned")

        __reversed__ = __iter__

    old = Message(role="assistant", tool_calls=Poisoned([ToolCall("old", "t")]))
    last = Message(role="assistant", tool_calls=[ToolCall("p1", "t"), ToolCall("p2", "t")])
    history = [old, Message(role="tool", tool_call_id="old", content="x"), last]
    assert set(_latest_calls(history, ["p2", "p1"])) == {"p1", "p2"}
    assert _emission_order(history, ["p2", "p1"]) == {"p2": -1, "p1": -2}
