"""Histories exchanged with a real Go program (issue 3: "A paused history written by the Go
golem loads and resumes here, and vice versa").

`tests/fixtures/gohistory/main.go` is the Go golem's message model (Go reference §3.1: the
same fields, the same JSON tags, tool-call args a `json.RawMessage`) read and written with
`encoding/json`. It is built with the Go toolchain when one is installed (`go` on PATH);
without one these tests are skipped. For each document it reports what Go holds (every field,
args as their raw bytes) and the history as Go writes it again.

Checked both ways: Go reads everything golem writes, holding each call's args as the very
bytes golem wrote; what Go writes back loads here; and Go's view of a history is a fixed point
of a trip through golem's codec (only a string literal golem reads as its content — ADR 0015 —
comes back escaped golem's way, as the same string).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from golem import Message, PausedRun, ToolCall, dumps_history, loads_history
from golem.messages import Part
from tests.support.go import Views, golem_view, without_args
from tests.support.gojson import go_history, raw_args
from tests.support.histories import histories

FIXTURE = Path(__file__).parent / "fixtures" / "go_paused_history.json"
PROPERTY = settings(max_examples=int(os.environ.get("GOLEM_GO_EXAMPLES", "100")), deadline=None)


def args_of(view: Views) -> list[list[str]]:
    return [[c["args"] for c in m["toolCalls"]] for m in view]


def as_values(args: list[list[str]]) -> list[list[str]]:
    """Args bytes, with each string literal replaced by its value."""
    return [[json.loads(a) if a.startswith('"') else a for a in m] for m in args]


LONE = st.sampled_from(['{"to":"bob\\ud800"}', '["\\udfff",1e400]', '"\\ud800"', '""'])


def with_odd_args(history: list[Message], extra: list[str]) -> list[Message]:
    """`history` with one more assistant message calling with each of `extra`'s args."""
    if not extra:
        return history
    calls = [ToolCall(f"x{i}", "n", a) for i, a in enumerate(extra)]
    return [*history, Message(role="assistant", tool_calls=calls)]


@PROPERTY
@example(
    [
        Message(
            role="user",
            content="<b>&</b>\u2028",
            parts=[Part("image", data=b"\xfb\xff", media_type="image/png")],
        )
    ],
    ['{ "a" : [1, 2] }', '{"a":"\\ud800"}', "1e400", "", '"plain"', '"{\\"a\\":1}"'],
)
@example([], ['"0', '""', '"'])  # found here: a 2-character `"0` was embedded as if `""`
@given(histories(), st.lists(LONE, max_size=3))
def test_go_reads_what_golem_writes_and_golem_reads_what_go_writes_back(
    go: Any, history: list[Message], extra: list[str]
) -> None:
    history = with_odd_args(history, extra)
    ours = dumps_history(history)
    (first,) = go(ours)
    assert first["ok"], first.get("err")
    # Go holds every field as golem holds it, and each call's args as the bytes golem wrote
    assert without_args(first["view"]) == golem_view(history)
    assert args_of(first["view"]) == raw_args(ours)
    # what Go writes back loads here, and Go's view survives a trip through golem's codec
    back = loads_history(first["out"])
    assert golem_view(back) == golem_view(history)
    again, (reread,) = dumps_history(back), go(first["out"])
    (after,) = go(again)
    assert after["ok"], after.get("err")
    assert without_args(after["view"]) == without_args(reread["view"])
    assert as_values(args_of(after["view"])) == as_values(args_of(reread["view"]))
    assert dumps_history(loads_history(again)) == again


@PROPERTY
@given(go_history())
def test_golem_loads_go_written_documents_as_go_holds_them(
    go: Any, case: tuple[str, list[Message]]
) -> None:
    document, expected = case
    (answer,) = go(document)
    assert answer["ok"], answer.get("err")  # the modelled Go writer writes what Go reads
    loaded = loads_history(document)
    assert loaded == expected
    assert golem_view(loaded) == without_args(answer["view"])
    # the real Go writer's output loads here too, args as Go holds them
    written = loads_history(answer["out"])
    (reread,) = go(answer["out"])
    assert golem_view(written) == without_args(reread["view"])
    held = args_of(reread["view"])
    for m, calls in zip(written, held, strict=True):
        for c, raw in zip(m.tool_calls, calls, strict=True):
            if raw.startswith('"'):
                assert c.args in (raw, json.loads(raw))  # ADR 0015: a literal or its content
            else:
                assert c.args == ("" if raw == "null" else raw)


def test_the_go_paused_fixture_round_trips_through_go(go: Any) -> None:
    text = FIXTURE.read_text().strip()
    (answer,) = go(text)
    assert answer["ok"]
    assert answer["out"] == text  # the fixture is what Go writes
    assert dumps_history(loads_history(answer["out"])) == text


# --------------------------------------------------------------------------- media answers

SHORT = st.text(st.characters(codec="utf-8"), max_size=8)


@st.composite
def answer_parts(draw: st.DrawFn) -> Part:
    """A part as golem holds it now: media with or without a signature (a Gemini thought
    signature on a generated image), or a text part between media."""
    if draw(st.booleans()):
        return Part("text", text=draw(SHORT.filter(bool)))
    kind = draw(st.sampled_from(["image", "document", "audio", "video"]))
    signature = draw(st.just("") | SHORT)
    if draw(st.booleans()):
        return Part(kind, url=draw(SHORT.filter(bool)), signature=signature)
    data = draw(st.binary(min_size=1, max_size=6))  # b"" is absent data in JSON
    return Part(kind, data=data, media_type=draw(SHORT.filter(bool)), signature=signature)


@st.composite
def media_histories(draw: st.DrawFn) -> list[Message]:
    """Histories whose messages of every role may carry parts — assistant answers with
    media (ADR 0060) among them."""
    return draw(
        st.lists(
            st.builds(
                Message,
                role=st.sampled_from(["user", "assistant", "tool"]),
                content=SHORT,
                parts=st.lists(answer_parts(), max_size=3),
                run_id=SHORT,
            ),
            max_size=4,
        )
    )


@PROPERTY
@example(
    [
        Message(
            role="assistant",
            content="here",
            parts=[
                Part("text", text="caption"),
                Part("image", data=b"\x89PNG", media_type="image/png", signature="c2ln"),
            ],
        )
    ]
)
@given(media_histories())
def test_assistant_media_and_part_signatures_cross_to_go_and_back(
    go: Any, history: list[Message]
) -> None:
    # Go's Part has no "signature" or "text": it ignores both keys (the JSON contract is
    # additive), holds every other field as golem does, and writes the parts back without
    # them. golem's own text stays a fixed point with them.
    ours = dumps_history(history)
    assert dumps_history(loads_history(ours)) == ours
    assert loads_history(ours) == history
    (first,) = go(ours)
    assert first["ok"], first.get("err")
    assert without_args(first["view"]) == golem_view(history)
    back = loads_history(first["out"])
    assert golem_view(back) == golem_view(history)
    for theirs, mine in zip(back, history, strict=True):
        assert [(p.kind, p.url, p.data, p.media_type) for p in theirs.parts] == [
            (p.kind, p.url, p.data, p.media_type) for p in mine.parts
        ]
        assert all(p.signature == "" and p.text == "" for p in theirs.parts)
    again = dumps_history(back)
    assert dumps_history(loads_history(again)) == again
    (after,) = go(again)
    assert after["ok"], after.get("err")
    assert after["out"] == first["out"]  # Go's writing is a fixed point through golem


# --------------------------------------------------------------------------- a resume's partial


def test_a_failed_resumes_partial_is_a_paused_history_go_reads(go: Any) -> None:
    """ADR 0071: the partial of a resume whose approved re-run failed is a paused history
    like any other — Go reads it (seals aside) with the calls that ran answered and the
    rest unanswered, which is what Go counts as pending (reference §2.5 step 3), and what
    Go writes back resumes here, running only the calls that did not run."""
    import asyncio

    from golem import Agent, DeferredResults, RunError, Tool
    from golem.testing import ScriptedModel
    from golem.tool import DeferKind, Deferred, call_approved

    acted: list[str] = []
    broken = {"c2"}

    def act(ctx: Any, args: dict[str, Any]) -> str:
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, "act?")
        if ctx.call_id in broken:
            raise RuntimeError("down")
        acted.append(ctx.call_id)
        return f"acted {ctx.call_id}"

    batch = Message(
        role="assistant",
        tool_calls=[ToolCall(f"c{i}", "act", f'{{"n":{i}}}') for i in range(1, 4)],
    )
    results = DeferredResults(approvals={"c1": True, "c2": True, "c3": False})

    def agent(key: bytes | None, *script: Any) -> Agent[None, str]:
        tool = Tool("act", "Act.", {"type": "object"}, act)
        return Agent(ScriptedModel(*script), tools=[tool], seal_key=key)

    async def scenario() -> None:
        keyed = agent(b"s" * 32, batch)
        paused = await keyed.run("go", conversation_id="conv")
        with pytest.raises(RunError) as info:
            await keyed.run_with_deferred_results(
                PausedRun(paused.messages, paused.pending, "conv"), results
            )
        partial = info.value.partial
        assert partial is not None
        assert partial.pending is not None
        (answer,) = go(dumps_history(partial.messages))
        assert answer["ok"], answer.get("err")
        assert without_args(answer["view"]) == golem_view(partial.messages)
        view = answer["view"]
        answered = {m["toolCallId"] for m in view if m["role"] == "tool"}
        go_pending = [c["id"] for m in view for c in m["toolCalls"] if c["id"] not in answered]
        assert go_pending == [p.call_id for p in partial.pending.calls] == ["c2", "c3"]
        broken.clear()
        done = await agent(None, "done").run_with_deferred_results(
            loads_history(answer["out"]), results
        )
        assert done.output == "done"
        assert acted == ["c1", "c2"]

    asyncio.run(scenario())


def test_a_nested_resumes_partial_crosses_to_go_and_back(go: Any) -> None:
    """ADR 0076: the partial of a nested resume — a sub-agent answered, another's record
    rewritten with the calls that ran answered — is a history Go reads field for field
    (the records are tool results to Go, whose `AsTool` never pauses, reference §2.12: its
    pending calls are the parent's own), and what Go writes back resumes here, running only
    what did not run."""
    import asyncio

    from golem import RunError
    from tests.support.nested import (
        EVERY,
        FINAL,
        RESULTS,
        World,
        janitor,
        parent_of,
        pending_ids,
    )

    async def scenario() -> None:
        world = World()
        parent = parent_of(world, janitor(world, "j1"), janitor(world, "j2"))
        paused = await parent.run("go")
        world.fail.add("j2:s2")
        with pytest.raises(RunError) as info:
            await parent.run_with_deferred_results(paused.messages, RESULTS)
        partial = info.value.partial
        assert partial is not None
        assert partial.pending is not None
        (answer,) = go(dumps_history(partial.messages))
        assert answer["ok"], answer.get("err")
        assert without_args(answer["view"]) == golem_view(partial.messages)
        view = answer["view"]
        answered = {m["toolCallId"] for m in view if m["role"] == "tool"}
        go_pending = [c["id"] for m in view for c in m["toolCalls"] if c["id"] not in answered]
        assert go_pending == ["a1", "x1"]
        back = loads_history(answer["out"])
        assert pending_ids(back) == pending_ids(partial.messages) == ["a1", "p2/s2", "x1"]
        world.fail.clear()
        done = await parent.run_with_deferred_results(back, RESULTS)
        assert done.output == FINAL
        assert world.acted == EVERY

    asyncio.run(scenario())
