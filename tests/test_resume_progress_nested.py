"""A failed or cancelled resume of a history with paused sub-agents hands back its progress
too (ADR 0076, extending ADR 0071 to `Agent.as_tool`).

The parent's `RunError.partial` (and `ResumeProgress.messages`) is an ordinary paused history:
each sub-agent that answered is answered, each one that ran part of its approved calls has its
record rewritten as its own partial would write it (those calls answered, the failing one and
the rest still pending), and the parent's calls are as ADR 0071 leaves them. Going on from it
with the same resolutions (namespaced IDs), `expected=` and conversation runs nothing twice —
counted here by call, without idempotency keys — and seals still refuse a call nobody approved.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Any

import pytest

from golem import (
    Agent,
    DeferredResults,
    Message,
    ResumeError,
    ResumeProgress,
    RunContext,
    RunError,
    SealError,
    Stage,
    Tool,
    ToolCall,
    ToolError,
    dumps_history,
    loads_history,
)
from golem.agent_tool import PAUSED_MARKER
from golem.errors import SubAgentConversationMismatch
from golem.model import ModelRequest, ModelResponse
from golem.seal import as_seal_keys, seal_call
from golem.testing import FunctionModel
from golem.tool import DeferKind, Deferred, call_approved
from tests.support.nested import (
    EVERY,
    FINAL,
    KEY,
    OBJ,
    RESULTS,
    World,
    act_tool,
    answering,
    janitor,
    parent_of,
    pending_ids,
)


def record_history(history: list[Message], call_id: str) -> list[Message]:
    (m,) = [m for m in history if m.role == "tool" and m.tool_call_id == call_id]
    assert m.content.startswith(PAUSED_MARKER)
    return loads_history(json.loads(m.content.split("\n", 1)[1])["history"])


async def test_a_failing_rerun_in_a_sub_agent_hands_back_the_parent_history() -> None:
    world = World()
    parent = parent_of(world, janitor(world, "j1"), janitor(world, "j2"))
    paused = await parent.run("go")
    assert paused.pending is not None
    assert [p.call_id for p in paused.pending.calls] == [
        "p1/s1", "p1/s2", "a1", "p2/s1", "p2/s2", "x1"
    ]  # fmt: skip
    world.fail.add("j2:s2")
    with pytest.raises(RunError) as info:
        await parent.run_with_deferred_results(paused.messages, RESULTS)
    err = info.value
    assert err.stage is Stage.TOOL
    assert isinstance(err.__cause__, ToolError)
    assert (err.__cause__.tool_name, err.__cause__.call_id) == ("j2", "p2")
    partial = err.partial
    assert partial is not None
    assert partial.is_paused
    assert partial.pending is not None
    # j1 answered; j2's record holds s1 answered, s2 pending; the parent's own calls pending
    assert pending_ids(partial.messages) == ["a1", "p2/s2", "x1"]
    assert [p.call_id for p in partial.pending.approvals] == ["a1", "p2/s2"]
    assert [(p.call_id, p.kind) for p in partial.pending.external] == [("x1", DeferKind.EXTERNAL)]
    assert [p.tool_name for p in partial.pending.calls] == ["act", "j2/act", "job"]
    answered = {m.tool_call_id: m for m in partial.messages if m.role == "tool"}
    assert answered["p1"].content == "j1: acted s1 | acted s2"
    assert answered["p1"].run_id == partial.run_id
    j2 = record_history(partial.messages, "p2")
    assert [(m.tool_call_id, m.content) for m in j2 if m.role == "tool"] == [("s1", "acted s1")]
    assert answered["p2"].run_id == partial.run_id
    assert partial.messages[:2] == paused.messages[:2]
    assert (partial.requests, partial.tool_calls) == (1, 4)  # j1's answer; j2's s1 and s2
    assert world.acted == {"j1:s1": 1, "j1:s2": 1, "j2:s1": 1}
    # it survives JSON, and the same resolutions finish it without running anything twice
    world.fail.clear()
    again = loads_history(dumps_history(partial.messages))
    done = await parent.run_with_deferred_results(again, RESULTS)
    assert done.output == FINAL
    assert world.acted == EVERY


async def test_at_any_depth_the_record_of_the_record_is_rewritten() -> None:
    """manager/janitor: the janitor's progress rewrites its record inside the manager's,
    which the parent's record holds."""
    world = World()
    manager = Agent(
        answering("manager", ToolCall("m1", "janitor", '{"prompt":"clean"}')),
        name="manager",
        tools=[janitor(world, "janitor").as_tool()],
    )
    parent = parent_of(world, manager, own=False)
    paused = await parent.run("go")
    assert paused.pending is not None
    assert [p.call_id for p in paused.pending.calls] == ["p1/m1/s1", "p1/m1/s2"]
    assert [p.tool_name for p in paused.pending.calls] == ["manager/janitor/act"] * 2
    world.fail.add("janitor:s2")
    results = {"approvals": {"p1/m1/s1": True, "p1/m1/s2": True}}
    with pytest.raises(RunError) as info:
        await parent.run_with_deferred_results(paused.messages, results)
    partial = info.value.partial
    assert partial is not None
    assert partial.pending is not None
    assert [p.call_id for p in partial.pending.calls] == ["p1/m1/s2"]
    assert pending_ids(partial.messages) == ["p1/m1/s2"]
    inner = record_history(record_history(partial.messages, "p1"), "m1")
    assert [m.tool_call_id for m in inner if m.role == "tool"] == ["s1"]
    world.fail.clear()
    done = await parent.run_with_deferred_results(partial.messages, results)
    assert done.output == "parent: manager: janitor: acted s1 | acted s2"
    assert world.acted == {"janitor:s1": 1, "janitor:s2": 1}


async def test_an_expected_call_under_a_sub_agent_that_answered_inside_a_record_is_progress() -> (
    None
):
    """The manager's janitor answered, then the manager's own call failed: the manager's
    record holds the janitor's answer, and going on with `expected=` (which names the
    janitor's calls) takes them as progress, not a mismatch (found by the property)."""
    world = World()
    manager = Agent(
        answering(
            "manager",
            ToolCall("m1", "janitor", '{"prompt":"clean"}'),
            ToolCall("mc", "act", '{"n":5}'),
        ),
        name="manager",
        tools=[janitor(world, "janitor").as_tool(), act_tool(world, "manager")],
    )
    parent = parent_of(world, manager, own=False)
    paused = await parent.run("go", conversation_id="conv")
    assert paused.pending is not None
    assert [p.call_id for p in paused.pending.calls] == ["p1/m1/s1", "p1/m1/s2", "p1/mc"]
    results = {"approvals": dict.fromkeys(["p1/m1/s1", "p1/m1/s2", "p1/mc"], True)}
    world.fail.add("manager:mc")
    with pytest.raises(RunError) as info:
        await parent.run_with_deferred_results(
            paused.messages, results, expected=paused.pending, conversation_id="conv"
        )
    partial = info.value.partial
    assert partial is not None
    assert partial.pending is not None
    assert [p.call_id for p in partial.pending.calls] == ["p1/mc"]
    world.fail.clear()
    done = await parent.run_with_deferred_results(
        partial.messages, results, expected=paused.pending, conversation_id="conv"
    )
    assert done.output == "parent: manager: acted mc | janitor: acted s1 | acted s2"
    assert world.acted == {"janitor:s1": 1, "janitor:s2": 1, "manager:mc": 1}


@pytest.mark.parametrize("stream", [False, True])
async def test_a_cancellation_inside_a_sub_agent_hands_back_progress(stream: bool) -> None:
    world = World()
    parent = parent_of(world, janitor(world, "j1"), janitor(world, "j2"))
    paused = await parent.run("go")
    progress = ResumeProgress()
    reached = asyncio.Event()

    async def guard(call: ToolCall) -> None:
        if call.id == "p2/s2":
            reached.set()
            await asyncio.Event().wait()

    async def resume() -> None:
        if not stream:
            await parent.run_with_deferred_results(
                paused.messages, RESULTS, before_approved=guard, progress=progress
            )
            return
        async with parent.run_stream_with_deferred_results(
            paused.messages, RESULTS, before_approved=guard, progress=progress
        ) as s:
            async for _ in s:
                pass

    task = asyncio.ensure_future(resume())
    await reached.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert progress.paused
    assert progress.answered == ("p1/s1", "p1/s2", "p2/s1")
    assert progress.messages is not None
    assert pending_ids(progress.messages) == ["a1", "p2/s2", "x1"]
    done = await parent.run_with_deferred_results(progress.messages, RESULTS)
    assert done.output == FINAL
    assert world.acted == EVERY


async def test_a_cancellation_after_a_sub_agent_merged_continues_it_without_its_calls() -> None:
    """Cancelled during j1's model call after its merge: both its calls ran, so its record
    waits on nothing — the resume continues it (`Agent.run` on its history), re-running
    none of them."""
    world = World()
    reached = asyncio.Event()
    hold = {"on": True}
    inner = answering("j1", ToolCall("s1", "act", '{"n":1}'), ToolCall("s2", "act", '{"n":2}'))

    async def slow(request: ModelRequest) -> ModelResponse:
        if hold["on"] and any(m.role == "tool" for m in request.messages):
            reached.set()
            await asyncio.Event().wait()
        return inner.fn(request)  # type: ignore[return-value]

    j1: Agent[None, str] = Agent(FunctionModel(slow), name="j1", tools=[act_tool(world, "j1")])
    parent = parent_of(world, j1, janitor(world, "j2"))
    paused = await parent.run("go")
    progress = ResumeProgress()
    task = asyncio.ensure_future(
        parent.run_with_deferred_results(paused.messages, RESULTS, progress=progress)
    )
    await reached.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert progress.paused
    assert progress.answered == ("p1/s1", "p1/s2")
    history = progress.messages
    assert history is not None
    assert pending_ids(history) == ["a1", "p2/s1", "p2/s2", "x1"]
    (record,) = [m for m in history if m.tool_call_id == "p1"]
    assert "its calls are answered" in record.content.split("\n", 1)[0]
    hold["on"] = False
    for key in ("p1/zz", "p1/s1/zz"):  # nothing it ran: still unknown
        bad = DeferredResults(approvals={**RESULTS.approvals, key: True}, external=RESULTS.external)
        with pytest.raises(ResumeError, match="unknown tool call"):
            await parent.run_with_deferred_results(history, bad)
    done = await parent.run_with_deferred_results(history, RESULTS)
    assert done.output == FINAL
    assert world.acted == EVERY


async def test_cancelled_in_the_parents_own_reruns_keeps_the_sub_agents_answers() -> None:
    """Every sub-agent answered, then the cancellation came before the parent's own first
    re-run: nothing of the parent's ran, but the sub-agents did — the progress is the
    history with their answers, never None."""
    world = World()
    parent = parent_of(world, janitor(world, "j1"), janitor(world, "j2"))
    paused = await parent.run("go")
    progress = ResumeProgress()
    reached = asyncio.Event()

    async def guard(call: ToolCall) -> None:
        if call.id == "a1":
            reached.set()
            await asyncio.Event().wait()

    task = asyncio.ensure_future(
        parent.run_with_deferred_results(
            paused.messages, RESULTS, before_approved=guard, progress=progress
        )
    )
    await reached.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert progress.paused
    assert progress.answered == ("p1/s1", "p1/s2", "p2/s1", "p2/s2")
    history = progress.messages
    assert history is not None
    assert pending_ids(history) == ["a1", "x1"]  # no record left: both sub-agents answered
    assert not any(m.content.startswith(PAUSED_MARKER) for m in history)
    done = await parent.run_with_deferred_results(history, RESULTS, expected=paused.pending)
    assert done.output == FINAL
    assert world.acted == EVERY


async def test_a_failing_parent_rerun_after_the_sub_agents_hands_back_their_answers() -> None:
    world = World()
    parent = parent_of(world, janitor(world, "j1"), janitor(world, "j2"))
    paused = await parent.run("go")
    world.fail.add("parent:a1")
    with pytest.raises(RunError) as info:
        await parent.run_with_deferred_results(paused.messages, RESULTS)
    partial = info.value.partial
    assert partial is not None
    assert partial.pending is not None
    assert [p.call_id for p in partial.pending.calls] == ["a1", "x1"]
    world.fail.clear()
    done = await parent.run_with_deferred_results(partial.messages, RESULTS)
    assert done.output == FINAL
    assert world.acted == EVERY


async def test_a_sub_agent_that_paused_again_is_continued_from_its_resolved_history() -> None:
    """j1 answers its calls, then pauses again on s9; the parent's own a1 then fails. The
    hand-back continues j1 (its calls answered) rather than keep its new pause, so the same
    resolutions go on — and reach what the uninterrupted resume reaches: the parent paused
    on p1/s9."""
    world = World()
    parent = parent_of(world, janitor(world, "j1", again=True), janitor(world, "j2"))
    paused = await parent.run("go")
    oracle = await parent.run_with_deferred_results(paused.messages, RESULTS)
    assert oracle.pending is not None
    assert [p.call_id for p in oracle.pending.calls] == ["p1/s9"]
    world.acted.clear()
    world.fail.add("parent:a1")
    with pytest.raises(RunError) as info:
        await parent.run_with_deferred_results(paused.messages, RESULTS)
    partial = info.value.partial
    assert partial is not None
    assert partial.pending is not None
    assert [p.call_id for p in partial.pending.calls] == ["a1", "x1"]
    assert pending_ids(partial.messages) == ["a1", "x1"]
    world.fail.clear()
    again = await parent.run_with_deferred_results(partial.messages, RESULTS)
    assert again.pending is not None
    assert [p.call_id for p in again.pending.calls] == ["p1/s9"]
    assert world.acted == EVERY
    done = await parent.run_with_deferred_results(again.messages, {"approvals": {"p1/s9": True}})
    assert done.output.startswith("parent: acted a1 | j1: acted s1 | acted s2 | acted s9")
    assert world.acted == {**EVERY, "j1:s9": 1}


async def test_a_refused_nested_resume_leaves_no_progress() -> None:
    world = World()
    parent = parent_of(world, janitor(world, "j1"), janitor(world, "j2"))
    paused = await parent.run("go")
    progress = ResumeProgress()
    with pytest.raises(ResumeError):
        await parent.run_with_deferred_results(
            paused.messages, {"approvals": {"p1/s1": True}}, progress=progress
        )
    assert progress.messages is None
    assert progress.answered == ()


async def test_a_resolution_for_an_unknown_sub_call_is_still_refused_on_a_partial() -> None:
    world = World()
    parent = parent_of(world, janitor(world, "j1"), janitor(world, "j2"))
    paused = await parent.run("go")
    world.fail.add("j2:s2")
    with pytest.raises(RunError) as info:
        await parent.run_with_deferred_results(paused.messages, RESULTS)
    partial = info.value.partial
    assert partial is not None
    world.fail.clear()
    for key in ("p2/zz", "zz"):
        bad = DeferredResults(approvals={**RESULTS.approvals, key: True}, external=RESULTS.external)
        with pytest.raises(ResumeError, match="unknown tool call"):
            await parent.run_with_deferred_results(partial.messages, bad)
    assert world.acted == {"j1:s1": 1, "j1:s2": 1, "j2:s1": 1}


# --------------------------------------------------------------------------- sealed


async def sealed_partial(
    world: World, conversation: str = "conv"
) -> tuple[Agent[None, str], Any, Any]:
    parent = parent_of(
        world, janitor(world, "j1", keyed=True), janitor(world, "j2", keyed=True), keyed=True
    )
    paused = await parent.run("go", conversation_id=conversation)
    world.fail.add("j2:s2")
    with pytest.raises(RunError) as info:
        await parent.run_with_deferred_results(
            paused.messages, RESULTS, conversation_id=conversation
        )
    world.fail.clear()
    assert info.value.partial is not None
    return parent, paused, info.value.partial


async def test_a_sealed_nested_partial_resumes_with_the_same_expected_and_conversation() -> None:
    world = World()
    parent, paused, partial = await sealed_partial(world)
    j2 = record_history(partial.messages, "p2")
    (s2,) = [c for m in j2 for c in m.tool_calls if c.id == "s2"]
    assert s2.seal  # the pending sub-call keeps its seal
    stored = loads_history(dumps_history(partial.messages))
    done = await parent.run_with_deferred_results(
        stored, RESULTS, conversation_id="conv", expected=paused.pending
    )
    assert done.output == FINAL
    assert world.acted == EVERY


def with_sub_calls(history: list[Message], call_id: str, change: Any) -> list[Message]:
    """`history` with the batch of the sub-agent recorded under `call_id` changed."""
    out = list(history)
    for i, m in enumerate(out):
        if m.role == "tool" and m.tool_call_id == call_id:
            head, body = m.content.split("\n", 1)
            state = json.loads(body)
            inner = loads_history(state["history"])
            j = max(k for k, x in enumerate(inner) if x.tool_calls)
            inner[j] = Message(
                role="assistant",
                tool_calls=change(inner[j].tool_calls),
                run_id=inner[j].run_id,
                conversation_id=inner[j].conversation_id,
            )
            state["history"] = dumps_history(inner)
            out[i] = Message(
                role="tool",
                content=f"{head}\n{json.dumps(state)}",
                tool_call_id=m.tool_call_id,
                tool_name=m.tool_name,
                run_id=m.run_id,
                conversation_id=m.conversation_id,
            )
    return out


async def test_a_nested_partial_cannot_get_a_sub_call_run_that_nobody_approved() -> None:
    """The rewritten record's pending sub-calls keep their seals: a sub-call injected into it
    and one relabeled from another conversation are refused before anything runs."""
    world = World()
    parent, paused, partial = await sealed_partial(world)
    acted = dict(world.acted)
    injected = with_sub_calls(
        partial.messages, "p2", lambda calls: [*calls, ToolCall("s8", "act", '{"n":8}')]
    )
    with_evil = DeferredResults(
        approvals={**RESULTS.approvals, "p2/s8": True}, external=RESULTS.external
    )
    with pytest.raises(SealError):
        await parent.run_with_deferred_results(injected, with_evil, conversation_id="conv")
    with pytest.raises(ResumeError, match="not one of the expected"):
        await parent.run_with_deferred_results(injected, with_evil, expected=paused.pending)
    # s2 as another conversation's sub-agent sealed it (other arguments): tampered here
    other = await sealed_partial(World(), "other-conv")
    (foreign,) = [
        c for m in record_history(other[2].messages, "p2") for c in m.tool_calls if c.id == "s2"
    ]
    keys = as_seal_keys(KEY)
    relabeled = ToolCall("s2", "act", '{"n":99}')
    relabeled = ToolCall(
        "s2", "act", '{"n":99}', "", seal_call(keys, "other-conv/p2", relabeled, "approval")
    )
    for swapped in (foreign, relabeled):
        moved = with_sub_calls(
            partial.messages,
            "p2",
            lambda calls, s=swapped: [s if c.id == "s2" else c for c in calls],
        )
        with pytest.raises(SealError):
            await parent.run_with_deferred_results(moved, RESULTS, conversation_id="conv")
    # the whole rewritten record of another conversation's partial, relabeled into this one
    (theirs,) = [m for m in other[2].messages if m.tool_call_id == "p2"]
    swapped_record = [
        replace(theirs, run_id=m.run_id, conversation_id=m.conversation_id)
        if m.tool_call_id == "p2"
        else m
        for m in partial.messages
    ]
    with pytest.raises(SubAgentConversationMismatch):
        await parent.run_with_deferred_results(swapped_record, RESULTS, conversation_id="conv")
    with pytest.raises(ResumeError, match="another seal"):
        await parent.run_with_deferred_results(
            swapped_record, RESULTS, conversation_id="conv", expected=paused.pending
        )
    assert world.acted == acted


# --------------------------------------------------------------------------- no hand-back


async def test_without_the_hand_back_going_on_runs_a_sub_call_twice() -> None:
    """What the hand-back prevents: going on from the history the caller passed (all it had
    before ADR 0076) runs the sub-agent's approved calls that already acted again."""
    world = World()
    parent = parent_of(world, janitor(world, "j1"), janitor(world, "j2"))
    paused = await parent.run("go")
    world.fail.add("j2:s2")
    with pytest.raises(RunError):
        await parent.run_with_deferred_results(paused.messages, RESULTS)
    world.fail.clear()
    await parent.run_with_deferred_results(paused.messages, RESULTS)
    assert world.acted["j1:s1"] == 2


@pytest.mark.parametrize("forged", ["empty", "ends-with-a-user-message", "no-batch"])
async def test_a_record_that_waits_on_nothing_is_continued_only_as_golem_writes_it(
    forged: str,
) -> None:
    """A record that waits on nothing is continued only when it ends with its answered batch
    (what a failed or cancelled resume writes); an empty or edited one is refused before
    anything runs, as a record without pending calls always was."""
    world = World()
    parent = parent_of(world, janitor(world, "j1"), janitor(world, "j2"))
    paused = await parent.run("go")
    j1 = record_history(paused.messages, "p1")
    answers = [
        Message(role="tool", content="done", tool_call_id=c.id, tool_name=c.name)
        for c in j1[-1].tool_calls
    ]
    inner = {
        "empty": [],
        "ends-with-a-user-message": [*j1, *answers, Message(role="user", content="more")],
        "no-batch": [m for m in j1 if m.role == "user"],
    }[forged]
    history = list(paused.messages)
    for i, m in enumerate(history):
        if m.tool_call_id == "p1":
            head = m.content.split("\n", 1)[0]
            state = json.dumps({"agent": "j1", "history": dumps_history(inner)})
            history[i] = Message(
                role="tool", content=f"{head}\n{state}", tool_call_id="p1", tool_name="j1"
            )
    others = DeferredResults(
        approvals={k: v for k, v in RESULTS.approvals.items() if not k.startswith("p1/")},
        external=RESULTS.external,
    )
    with pytest.raises(ResumeError, match="does not end with its answered batch"):
        await parent.run_with_deferred_results(history, others)
    with pytest.raises(ResumeError):  # its calls' resolutions name no call it has either way
        await parent.run_with_deferred_results(history, RESULTS)
    assert world.acted == {}


async def test_a_tool_result_no_history_can_hold_is_handed_back_as_the_codec_reads_it() -> None:
    """A sub-agent's call that ran returned text with a lone surrogate (no JSON history can
    hold one): the failure is still the `RunError`, and the rewritten record holds that
    result with U+FFFD in its place — the call is answered, never run again."""
    world = World()

    async def act(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, "act?")
        return world.act("j1", ctx) + " \ud800"

    j1: Agent[None, str] = Agent(
        answering("j1", ToolCall("s1", "act", '{"n":1}'), ToolCall("s2", "act", '{"n":2}')),
        name="j1",
        tools=[Tool("act", "Act.", OBJ, act)],
    )
    parent = parent_of(world, j1, own=False)
    paused = await parent.run("go")
    world.fail.add("j1:s2")
    results = {"approvals": {"p1/s1": True, "p1/s2": True}}
    with pytest.raises(RunError) as info:
        await parent.run_with_deferred_results(paused.messages, results)
    partial = info.value.partial
    assert partial is not None
    inner = record_history(partial.messages, "p1")
    assert [(m.tool_call_id, m.content) for m in inner if m.role == "tool"] == [
        ("s1", "acted s1 \ufffd")
    ]
    world.fail.clear()
    done = await parent.run_with_deferred_results(partial.messages, results)
    assert done.output == "parent: j1: acted s1 \ufffd | acted s2 \ud800"
    assert world.acted == {"j1:s1": 1, "j1:s2": 1}
