"""`_checks`: the worker finds a run's stored calls from the end of its history, without a full
pass; `new_run_from_result` files a pause's calls in emission order."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from golem import Result
from golem.deferred import DeferredRequests, PendingToolCall
from golem.durable.worker import new_run_from_result
from golem.durable.worker._checks import latest_calls
from golem.messages import Message, ToolCall
from golem.tool import DeferKind

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


@settings(deadline=None)
@given(histories(), st.sets(IDS))
def test_latest_calls_are_the_last_call_of_each_id(messages: list[Message], ids: set[str]) -> None:
    full = {c.id: c for m in messages for c in m.tool_calls if c.id in ids}
    assert latest_calls(messages, ids) == full


@settings(deadline=None)
@given(histories(), st.lists(st.tuples(IDS, st.booleans()), unique_by=lambda t: t[0]))
def test_a_new_run_files_its_calls_in_emission_order(
    messages: list[Message], pending: list[tuple[str, bool]]
) -> None:
    """Ordered by each ID's last call in the history; IDs it lacks last, approvals first."""
    everything = [c.id for m in messages for c in m.tool_calls]
    full = {cid: i for i, cid in enumerate(everything)}  # the last occurrence wins
    kinds = {True: DeferKind.APPROVAL, False: DeferKind.EXTERNAL}
    calls = {cid: PendingToolCall(cid, "t", "{}", kind=kinds[a]) for cid, a in pending}
    grouped = [cid for cid, a in pending if a] + [cid for cid, a in pending if not a]
    expected = sorted(grouped, key=lambda cid: full.get(cid, len(everything)))
    requests = DeferredRequests(
        approvals=[calls[cid] for cid, a in pending if a],
        external=[calls[cid] for cid, a in pending if not a],
    )
    run = new_run_from_result(Result(None, messages, pending=requests), "ops")
    assert [c.call_id for c in run.calls] == expected


def test_the_scan_stops_at_the_pending_turn() -> None:
    """Messages before the pending calls' turn are never looked at."""

    class Poisoned(list[ToolCall]):
        def __iter__(self):  # type: ignore[no-untyped-def]
            raise AssertionError("an old turn was scanned")

        __reversed__ = __iter__

    old = Message(role="assistant", tool_calls=Poisoned([ToolCall("old", "t")]))
    last = Message(role="assistant", tool_calls=[ToolCall("p1", "t"), ToolCall("p2", "t")])
    history = [old, Message(role="tool", tool_call_id="old", content="x"), last]
    assert set(latest_calls(history, ["p2", "p1"])) == {"p1", "p2"}
