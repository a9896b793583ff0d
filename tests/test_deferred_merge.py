"""Where resolutions land in a paused history: `golem.resume.merge`, its docstring as a test.

The calls of the last assistant message with tool calls get, in emission order, their
resolution or the result the paused run already recorded; leftover results follow;
resolutions for calls of older turns come last, by call ID; other messages after the
paused batch are not carried over.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from golem import Message, ToolCall
from golem._rerun import merge


def asst(*ids: str) -> Message:
    return Message(role="assistant", tool_calls=[ToolCall(i, "t", "{}") for i in ids])


def res(call_id: str, text: str) -> Message:
    return Message(role="tool", content=text, tool_call_id=call_id, tool_name="t")


def texts(messages: list[Message]) -> list[str]:
    return [m.content for m in messages]


def test_batch_calls_get_their_resolution_or_recorded_result_in_emission_order() -> None:
    history = [Message(role="user", content="go"), asst("c1", "c2", "c3"), res("c2", "recorded")]
    merged = merge(history, {"c3": res("c3", "resolved 3"), "c1": res("c1", "resolved 1")})
    assert merged[:2] == history[:2]
    assert texts(merged[2:]) == ["resolved 1", "recorded", "resolved 3"]


def test_leftover_results_follow_the_batch_and_precede_older_resolutions() -> None:
    history = [
        Message(role="user", content="go"),
        asst("old"),
        Message(role="user", content="more"),
        asst("c1", "c2"),
        res("stray", "leftover: no call of the batch"),
        res("c1", "recorded 1"),
        res("c1", "leftover: a second result for c1"),
    ]
    merged = merge(
        history,
        {"old": res("old", "resolved old"), "c2": res("c2", "resolved 2")},
    )
    assert merged[:4] == history[:4]
    assert texts(merged[4:]) == [
        "recorded 1",
        "resolved 2",
        "leftover: no call of the batch",
        "leftover: a second result for c1",
        "resolved old",
    ]


def test_messages_after_the_batch_that_are_not_tool_results_are_dropped() -> None:
    history = [
        asst("c1"),
        Message(role="user", content="typed while paused"),
        res("zz", "leftover"),
        Message(role="assistant", content="stale text"),
    ]
    merged = merge(history, {"c1": res("c1", "resolved")})
    assert merged[0] is history[0]
    assert texts(merged[1:]) == ["resolved", "leftover"]


def test_older_resolutions_come_last_sorted_by_call_id() -> None:
    history = [asst("b", "a"), asst("c1")]
    merged = merge(history, {"b": res("b", "B"), "c1": res("c1", "C1"), "a": res("a", "A")})
    assert texts(merged[2:]) == ["C1", "A", "B"]


CALL_IDS = st.sampled_from(["c1", "c2", "c3", "c4", "x1", "x2"])


@st.composite
def paused_histories(draw: st.DrawFn) -> tuple[list[Message], dict[str, Message]]:
    batch = draw(st.lists(CALL_IDS, min_size=1, max_size=4, unique=True))
    prefix = [Message(role="user", content="go")]
    if draw(st.booleans()):
        prefix.append(asst("old1", "old2"))
    tail = [
        res(cid, f"recorded {cid} #{n}")
        if draw(st.booleans())
        else Message(role="user", content=f"other #{n}")
        for n, cid in enumerate(draw(st.lists(CALL_IDS, max_size=6)))
    ]
    recorded = {m.tool_call_id for m in tail if m.role == "tool"}
    resolvable = [c for c in [*batch, "old1", "old2"] if c not in recorded]
    chosen = draw(st.lists(st.sampled_from(resolvable), unique=True)) if resolvable else []
    resolutions = {cid: res(cid, f"resolved {cid}") for cid in chosen}
    return [*prefix, asst(*batch), *tail], resolutions


@given(paused_histories())
def test_merge_keeps_every_recorded_result_and_every_resolution_exactly_once(
    case: tuple[list[Message], dict[str, Message]],
) -> None:
    history, resolutions = case
    last = max(i for i, m in enumerate(history) if m.role == "assistant" and m.tool_calls)
    merged = merge(history, resolutions)
    assert merged[: last + 1] == history[: last + 1]
    added = Counter(id(m) for m in merged[last + 1 :])
    expected = Counter(id(m) for m in history[last + 1 :] if m.role == "tool")
    expected.update(id(m) for m in resolutions.values())
    assert added == expected
    batch = [c.id for c in history[last].tool_calls]
    answered = [m.tool_call_id for m in merged[last + 1 :]]
    in_batch = [cid for cid in answered if cid in batch]
    first_answers = list(dict.fromkeys(in_batch))
    assert first_answers == [c for c in batch if c in answered], "emission order"
