"""Resuming a paused run (issue 3, issue 8 §2 edits, issue 12 shorthands; seed:
deferred-tools.md; Go reference §2.5, §2.6, §3.4; `golem.resume`): refusals before any
model call or re-run; approved re-runs, denials, edits and external results and the exact
texts the model reads; where resolutions land (`merge`); the prompt; pausing again;
identity and usage; re-run failures, timeouts and cancellation; `before_approved`;
resuming from JSON on a new `Agent`; what `run(history=...)` does with a paused history."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from golem import (
    Agent,
    Approval,
    DeferredRequests,
    DeferredResults,
    GolemError,
    Message,
    Part,
    PausedRun,
    PendingToolCall,
    ResumeError,
    ResumeProgress,
    RunContext,
    RunError,
    RunEvent,
    Stage,
    Tool,
    ToolCall,
    ToolError,
    ToolResult,
    Usage,
    UsageLimitExceeded,
    UsageLimits,
    dumps_history,
    loads_history,
    normalize_history,
)
from golem.errors import Overloaded
from golem.model import ModelResponse
from golem.resume import merge
from golem.seal import verify_call
from golem.testing import ScriptedModel
from golem.tool import Canceled, DeferKind, Deferred, Failed, ModelRetry, call_approved
from tests.support.gates import DENIED, INTERRUPTED, OBJ, Gate, tool_turn

APPROVE_C1 = DeferredResults(approvals={"c1": Approval(True)})


def asst(*calls: ToolCall, run: str = "R1", conv: str = "C1") -> Message:
    return Message(role="assistant", tool_calls=list(calls), run_id=run, conversation_id=conv)


def tool_msg(call_id: str, name: str, text: str, run: str = "R1", conv: str = "C1") -> Message:
    return Message(
        role="tool",
        content=text,
        tool_call_id=call_id,
        tool_name=name,
        run_id=run,
        conversation_id=conv,
    )


def user(text: str, run: str = "R1", conv: str = "C1") -> Message:
    return Message(role="user", content=text, run_id=run, conversation_id=conv)


def paused_history() -> list[Message]:
    """The reference §2.6 example: c1 pending (delete_file), c2 already answered."""
    calls = (
        ToolCall("c1", "delete_file", '{"path":"a"}'),
        ToolCall("c2", "stat_file", '{"path":"a"}'),
    )
    return [user("clean up"), asst(*calls), tool_msg("c2", "stat_file", "size=12")]


def summary(messages: list[Message]) -> list[tuple[str, str, str]]:
    return [(m.role, m.tool_call_id, m.content) for m in messages]


def two_calls(a: str = "stat_file", b: str = "delete_file") -> list[Message]:
    return [user("go"), asst(ToolCall("c1", a, "{}"), ToolCall("c2", b, "{}"))]


REFUSALS: list[tuple[str, Callable[[], list[Message]], DeferredResults, list[str]]] = [
    (
        "answered",
        lambda: [*paused_history(), tool_msg("c1", "delete_file", "deleted")],
        APPROVE_C1,
        ["no pending"],
    ),
    ("empty", lambda: [], DeferredResults(), ["no pending"]),
    (
        "plain-text-turns",
        lambda: [user("hi"), Message(role="assistant", content="hello")],
        DeferredResults(),
        ["no pending"],
    ),
    (
        "call-without-id",
        lambda: [
            user("go"),
            asst(ToolCall("", "stat_file", "{}"), ToolCall("c1", "delete_file", "{}")),
        ],
        APPROVE_C1,
        ["stat_file", "ID"],
    ),
    (
        "answered-call-without-id",
        lambda: [
            user("go"),
            asst(ToolCall("", "stat_file", "{}")),
            tool_msg("", "stat_file", "size=1"),
            asst(ToolCall("c1", "delete_file", "{}")),
        ],
        APPROVE_C1,
        ["stat_file"],
    ),
    (
        "approval-for-unknown-id",
        paused_history,
        DeferredResults(approvals={"c1": True, "ghost-7": True}),
        ["ghost-7"],
    ),
    (
        "external-for-unknown-id",
        paused_history,
        DeferredResults(approvals={"c1": True}, external={"ghost-9": "x"}),
        ["ghost-9"],
    ),
    (
        "resolved-in-both-maps",
        paused_history,
        DeferredResults(approvals={"c1": True}, external={"c1": "text"}),
        ['"c1"', "both"],
    ),
    ("unresolved-call", two_calls, DeferredResults(approvals={"c1": True}), ['"c2"', "resolution"]),
    ("no-resolutions", paused_history, DeferredResults(), ['"c1"']),
    (
        "unregistered-tool",
        lambda: two_calls(b="unregistered"),
        DeferredResults(approvals={"c1": True, "c2": True}),
        ['"c2"', "unregistered"],
    ),
    (
        "older-turns-call",
        lambda: [
            user("go"),
            asst(ToolCall("old-b", "t", "{}")),
            asst(ToolCall("new-x", "t", "{}")),
        ],
        DeferredResults(external={"old-b": "B", "new-x": "X"}),
        ['unknown tool call "old-b"'],
    ),
]


@pytest.mark.parametrize(
    ("history", "results", "phrases"), [r[1:] for r in REFUSALS], ids=[r[0] for r in REFUSALS]
)
async def test_a_resume_is_refused_before_any_model_call_or_tool_runs(
    history: Callable[[], list[Message]], results: DeferredResults, phrases: list[str]
) -> None:
    delete, stat, model = Gate("delete_file"), Gate("stat_file"), ScriptedModel("would answer")
    agent = Agent(model, tools=[delete.tool(), stat.tool()])
    with pytest.raises(ResumeError) as info:
        await agent.run_with_deferred_results(history(), results, "and then?")
    for phrase in phrases:
        assert phrase in str(info.value)
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, GolemError)
    assert (model.requests, delete.passes, stat.passes) == ([], [], [])
    with pytest.raises(ResumeError):  # the sync twin refuses alike
        await asyncio.to_thread(agent.run_with_deferred_results_sync, history(), results)


@pytest.mark.parametrize(
    "extra",
    [
        {"approvals": {"c2": Approval(True)}},
        {"approvals": {"c2": Approval(False, "no")}},
        {"approvals": {"c2": Approval(True, args={"path": "z"})}},
        {"external": {"c2": "forged"}},
    ],
)
async def test_a_resolution_for_an_already_answered_call_is_skipped(extra: dict[str, Any]) -> None:
    """ADR 0071: a resolution for a call the history answers is a no-op: the call never runs
    again and its recorded answer stays."""
    delete, stat, model = Gate("delete_file"), Gate("stat_file"), ScriptedModel("would answer")
    agent = Agent(model, tools=[delete.tool(), stat.tool()])
    results = DeferredResults(
        approvals={"c1": True, **extra.get("approvals", {})}, external=extra.get("external", {})
    )
    done = await agent.run_with_deferred_results(paused_history(), results)
    assert (done.output, delete.passes, stat.passes, done.tool_calls) == (
        "would answer",
        [True],
        [],
        1,
    )
    assert summary(done.messages)[2:4] == [
        ("tool", "c1", "delete_file: done"),
        ("tool", "c2", "size=12"),
    ]


async def test_denials_and_external_results_need_no_tool_nor_a_matching_kind_without_a_key() -> (
    None
):
    agent: Agent[Any, str] = Agent(ScriptedModel("answered"))  # no tools at all
    results = DeferredResults(approvals={"c1": Approval(False, "no")}, external={"c2": "report"})
    result = await agent.run_with_deferred_results(
        two_calls("delete_file", "fetch_report"), results
    )
    assert (result.output, result.tool_calls) == ("answered", 0)
    gate = Gate("g")  # an approval-kind call may get an external text: kinds are not in the history
    agent = Agent(ScriptedModel(tool_turn(ToolCall("c1", "g", "{}")), "fin"), tools=[gate.tool()])
    paused = await agent.run("go")
    resumed = await agent.run_with_deferred_results(
        paused.messages, DeferredResults(external={"c1": "supplied"})
    )
    assert (resumed.output, gate.passes) == ("fin", [False])


async def test_an_approved_rerun_gets_the_original_args_its_deps_and_identity_and_its_result_parts() -> (
    None
):
    part = Part(kind="image", url="https://example.com/a.png")
    seen: list[tuple[str, str, str, str]] = []

    def effect(ctx: RunContext[Any], args: dict[str, Any]) -> Any:
        seen.append((ctx.run_id, ctx.conversation_id, ctx.call_id, ctx.tool_name))
        return ToolResult(f"deleted {args['path']}", [part])

    gate = Gate("delete_file", effect=effect)
    model = ScriptedModel(
        tool_turn(ToolCall("c1", "delete_file", '{ "path" : "a b" , "force": true }')), "ok"
    )
    agent = Agent(model, tools=[gate.tool()])
    paused = await agent.run("go", deps="pause-deps", conversation_id="conv")
    deps = object()
    resumed = await agent.run_with_deferred_results(paused.messages, APPROVE_C1, deps=deps)
    assert (gate.approved_args, gate.deps) == ([{"path": "a b", "force": True}], [deps])
    assert seen == [(resumed.run_id, "conv", "c1", "delete_file")]
    last = model.requests[-1].messages[-1]
    assert (last.tool_call_id, last.tool_name, last.content, list(last.parts)) == (
        "c1",
        "delete_file",
        "deleted a b",
        [part],
    )
    assert resumed.output == "ok"
    assert resumed.run_id not in ("", paused.run_id)


def _raise(exc: BaseException) -> Callable[[RunContext[Any], dict[str, Any]], Any]:
    def effect(ctx: RunContext[Any], args: dict[str, Any]) -> Any:
        raise exc

    return effect


def _wrapped(exc: BaseException) -> Callable[[RunContext[Any], dict[str, Any]], Any]:
    def effect(ctx: RunContext[Any], args: dict[str, Any]) -> Any:
        raise RuntimeError("outer") from exc

    return effect


@pytest.mark.parametrize(
    ("effect", "stage", "text"),
    [
        (_raise(RuntimeError("disk on fire")), Stage.TOOL, "disk on fire"),
        (
            _raise(Deferred(DeferKind.APPROVAL, "again")),
            Stage.TOOL,
            r"deferred again.*call_approved\(\)",
        ),
        (_raise(Deferred(DeferKind.EXTERNAL, "again")), Stage.TOOL, "deferred again"),
        (_raise(Failed("cannot delete")), Stage.TOOL, "cannot delete"),
        (_raise(ModelRetry("bad path")), Stage.TOOL, "bad path"),
        (_wrapped(Failed("inner")), Stage.TOOL, "outer"),
        (
            lambda ctx, args: ToolResult("see", [Part(kind="hologram", url="https://e.com/x")]),
            Stage.TOOL,
            "",
        ),
        (_raise(Canceled("operator stop")), Stage.CANCELED, "operator stop"),
        (_wrapped(Canceled("operator stop")), Stage.CANCELED, "operator stop"),
    ],
    ids=[
        "plain",
        "defer-approval",
        "defer-external",
        "failed",
        "model-retry",
        "wrapped-signal",
        "invalid-part",
        "canceled",
        "wrapped-canceled",
    ],
)
async def test_a_failing_approved_rerun_ends_the_resume_before_any_model_call_or_later_rerun(
    effect: Callable[[RunContext[Any], dict[str, Any]], Any], stage: Stage, text: str
) -> None:
    gate, later = Gate("delete_file", effect=effect), Gate("b")
    model = ScriptedModel("never")
    agent = Agent(model, tools=[gate.tool(), later.tool()], tool_retries=5)  # no budget for re-runs
    history = two_calls("delete_file", "b")
    with pytest.raises(RunError, match=text or None) as info:
        await agent.run_with_deferred_results(
            history, DeferredResults(approvals={"c1": True, "c2": True})
        )
    err = info.value
    assert err.stage is stage
    assert (model.requests, gate.passes, later.passes) == ([], [True], [])
    if stage is Stage.TOOL:
        assert isinstance(err.__cause__, ToolError)
        assert (err.__cause__.tool_name, err.__cause__.call_id) == ("delete_file", "c1")


async def _forever(ctx: RunContext[Any], args: dict[str, Any]) -> str:
    if not call_approved():
        raise Deferred(DeferKind.APPROVAL)
    await asyncio.Event().wait()
    return "never"


@pytest.mark.parametrize("sync", [False, True])
async def test_an_approved_rerun_overrunning_its_timeout_fails_at_stage_tool(sync: bool) -> None:
    """The timeout also bounds the first pass: pause without one, resume with a short one; the
    async re-run never finishes, the sync one sleeps past it (checked once its thread ends)."""

    def slow(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        time.sleep(0.1)
        return "late"

    gate = Gate("t", effect=slow)
    model = ScriptedModel(tool_turn(ToolCall("c1", "t", "{}")), "never")
    tool = gate.tool() if sync else Tool("t", "t", OBJ, _forever)
    paused = await Agent(model, tools=[tool]).run("go")
    resuming = (
        Agent(model, tools=[gate.tool(timeout=0.05)])
        if sync
        else Agent(model, tools=[tool], tool_timeout=0.05)
    )
    with pytest.raises(RunError) as info:
        await resuming.run_with_deferred_results(paused.messages, APPROVE_C1)
    assert info.value.stage is Stage.TOOL
    assert isinstance(info.value.__cause__, TimeoutError)
    assert model.remaining == 1


@pytest.mark.parametrize(
    ("results", "text"),
    [
        (DeferredResults(approvals={"c1": Approval(False)}), DENIED),
        (
            DeferredResults(approvals={"c1": Approval(False, "not on Fridays")}),
            "Your tool call was denied: not on Fridays. Do not call it again; continue without its result.",
        ),
        (DeferredResults(approvals={"c1": Approval(True, "looks fine")}), "delete_file: done"),
        *[
            (DeferredResults(external={"c1": t}), t)
            for t in ["", "  spaced  \n", '{"json": true}', "multi\nline ünïcode <&>"]
        ],
    ],
    ids=[
        "denied",
        "denied-with-reason",
        "approved-with-reason",
        "external-empty",
        "external-spaced",
        "external-json",
        "external-unicode",
    ],
)
async def test_each_resolution_reaches_the_model_as_its_exact_text(
    results: DeferredResults, text: str
) -> None:
    gate, model = Gate("delete_file"), ScriptedModel("ok")
    await Agent(model, tools=[gate.tool()]).run_with_deferred_results(paused_history(), results)
    msg = model.requests[0].messages[2]
    assert (msg.role, msg.tool_call_id, msg.tool_name, msg.content) == (
        "tool",
        "c1",
        "delete_file",
        text,
    )
    assert (list(msg.parts), msg.failed) == ([], False)
    assert gate.passes == ([True] if text == "delete_file: done" else [])


def res(call_id: str, text: str) -> Message:
    return Message(role="tool", content=text, tool_call_id=call_id, tool_name="t")


def batch(*ids: str) -> Message:
    return Message(role="assistant", tool_calls=[ToolCall(i, "t", "{}") for i in ids])


def test_merge_places_batch_answers_then_leftovers_then_older_resolutions_by_id() -> None:
    history = [
        Message(role="user", content="go"),
        batch("old-b", "old-a"),
        Message(role="user", content="more"),
        batch("c1", "c2", "c3"),
        res("stray", "leftover: no call of the batch"),
        res("c1", "recorded 1"),
        Message(role="user", content="typed while paused"),
        res("c1", "leftover: a second result for c1"),
        Message(role="assistant", content="stale text"),
    ]
    resolutions = {k: res(k, f"resolved {k}") for k in ("old-b", "c3", "old-a", "c2")}
    merged = merge(history, resolutions)
    assert merged[:4] == history[:4]
    assert merged[3] is history[3]
    assert [m.content for m in merged[4:]] == [
        "recorded 1",
        "resolved c2",
        "resolved c3",
        "leftover: no call of the batch",
        "leftover: a second result for c1",
        "resolved old-a",
        "resolved old-b",
    ]


CALL_IDS = st.sampled_from(["c1", "c2", "c3", "c4", "x1", "x2"])


@st.composite
def merge_cases(draw: st.DrawFn) -> tuple[list[Message], dict[str, Message]]:
    ids = draw(st.lists(CALL_IDS, min_size=1, max_size=4, unique=True))
    prefix = [
        Message(role="user", content="go"),
        *([batch("old1", "old2")] if draw(st.booleans()) else []),
    ]
    tail = [
        res(cid, f"recorded {cid} #{n}")
        if draw(st.booleans())
        else Message(role="user", content=f"other #{n}")
        for n, cid in enumerate(draw(st.lists(CALL_IDS, max_size=6)))
    ]
    recorded = {m.tool_call_id for m in tail if m.role == "tool"}
    resolvable = [c for c in [*ids, "old1", "old2"] if c not in recorded]
    chosen = draw(st.lists(st.sampled_from(resolvable), unique=True)) if resolvable else []
    return [*prefix, batch(*ids), *tail], {cid: res(cid, f"resolved {cid}") for cid in chosen}


@given(merge_cases())
def test_merge_keeps_every_recorded_result_and_every_resolution_once_in_emission_order(
    case: tuple[list[Message], dict[str, Message]],
) -> None:
    history, resolutions = case
    last = max(i for i, m in enumerate(history) if m.role == "assistant" and m.tool_calls)
    merged = merge(history, resolutions)
    assert merged[: last + 1] == history[: last + 1]
    expected = Counter(id(m) for m in history[last + 1 :] if m.role == "tool")
    expected.update(id(m) for m in resolutions.values())
    assert Counter(id(m) for m in merged[last + 1 :]) == expected
    ids = [c.id for c in history[last].tool_calls]
    answered = [m.tool_call_id for m in merged[last + 1 :]]
    assert list(dict.fromkeys(c for c in answered if c in ids)) == [c for c in ids if c in answered]


@pytest.mark.parametrize(
    "prompt",
    ["", "now summarize", ["and this", Part(kind="image", url="https://example.com/after.png")]],
)
async def test_the_prompt_follows_the_resolutions_and_the_resuming_agents_instructions_lead(
    prompt: Any,
) -> None:
    model = ScriptedModel("ok")
    agent: Agent[Any, str] = Agent(model, instructions="new rules")
    history = [Message(role="system", content="old rules"), *paused_history()]
    result = await agent.run_with_deferred_results(
        history, DeferredResults(external={"c1": "x"}), prompt
    )
    req = model.requests[0].messages
    assert summary(req)[:5] == [
        ("system", "", "new rules"),
        ("user", "", "clean up"),
        ("assistant", "", ""),
        ("tool", "c1", "x"),
        ("tool", "c2", "size=12"),
    ]
    assert not any(m.content == "old rules" for m in result.messages)
    if not prompt:
        assert len(req) == 5
        return
    last = req[-1]
    text, parts = (prompt, []) if isinstance(prompt, str) else (prompt[0], prompt[1:])
    assert (last.role, last.content, list(last.parts)) == ("user", text, parts)
    assert (last.run_id, last.conversation_id) == (result.run_id, "C1")


async def test_a_resumed_run_goes_on_through_the_loop_pauses_again_and_is_denied() -> None:
    gate = Gate("delete_file")
    model = ScriptedModel(
        tool_turn(ToolCall("c1", "delete_file", '{"path":"a"}')),
        tool_turn(ToolCall("s1", "stat_file", "{}")),
        tool_turn(ToolCall("c2", "delete_file", '{"path":"b"}')),
        "both handled",
    )
    agent = Agent(model, tools=[gate.tool(), Tool("stat_file", "s", OBJ, lambda ctx, args: "gone")])
    paused = await agent.run("go")
    again = await agent.run_with_deferred_results(paused.messages, APPROVE_C1)
    assert again.pending == DeferredRequests(
        approvals=[
            PendingToolCall("c2", "delete_file", '{"path":"b"}', "delete_file needs sign-off")
        ]
    )
    assert (again.tool_calls, again.requests) == (
        2,
        2,
    )  # c1's re-run and s1; the deferral does not count
    assert summary(again.messages)[-4:] == [
        ("tool", "c1", "delete_file: done"),
        ("assistant", "", ""),
        ("tool", "s1", "gone"),
        ("assistant", "", ""),
    ]
    final = await agent.run_with_deferred_results(
        again.messages, {"approvals": {"c2": Approval(False, "keep b")}}
    )
    assert final.output == "both handled"
    assert (gate.approved_args, gate.passes) == ([{"path": "a"}], [False, True, False])
    assert model.requests[-1].messages[-1].content.startswith("Your tool call was denied: keep b")
    assert final.conversation_id == paused.conversation_id == again.conversation_id
    assert len({paused.run_id, again.run_id, final.run_id}) == 3


async def test_a_later_model_failures_partial_includes_the_resolutions() -> None:
    model = ScriptedModel(tool_turn(ToolCall("c1", "delete_file", "{}")))
    agent = Agent(model, tools=[Gate("delete_file").tool()])
    paused = await agent.run("go")
    model.fail(Overloaded("busy"))
    with pytest.raises(RunError) as info:
        await agent.run_with_deferred_results(paused.messages, APPROVE_C1, "next")
    err = info.value
    assert err.stage is Stage.MODEL
    assert err.partial is not None
    assert summary(err.partial.messages)[-2:] == [
        ("tool", "c1", "delete_file: done"),
        ("user", "", "next"),
    ]
    assert err.partial.tool_calls == 1
    assert err.partial.run_id != paused.run_id
    assert err.partial.conversation_id == paused.conversation_id


async def test_a_resumed_run_keeps_its_conversation_gets_a_new_run_id_and_stamps_what_it_adds() -> (
    None
):
    model = ScriptedModel("ok", "ok")
    agent: Agent[Any, str] = Agent(model)
    history = paused_history()
    result = await agent.run_with_deferred_results(
        history, DeferredResults(external={"c1": "x"}), "more"
    )
    assert result.conversation_id == "C1"
    assert result.run_id not in ("", "R1")
    assert [(m.role, m.tool_call_id, m.run_id, m.conversation_id) for m in result.messages] == [
        ("user", "", "R1", "C1"),
        ("assistant", "", "R1", "C1"),
        ("tool", "c1", result.run_id, "C1"),
        ("tool", "c2", "R1", "C1"),
        ("user", "", result.run_id, "C1"),
        ("assistant", "", result.run_id, "C1"),
    ]
    assert history == paused_history()  # the input was not mutated
    pending = DeferredRequests([PendingToolCall("c1", "delete_file", '{"path":"a"}')])
    result = await agent.run_with_deferred_results(
        PausedRun(paused_history(), pending, "C9"), DeferredResults(approvals={"c1": False})
    )
    assert result.conversation_id == "C9"  # the paused run's word over the history's
    resolution = model.requests[1].messages[2]
    assert (resolution.run_id, resolution.conversation_id) == (result.run_id, "C9")


async def test_a_resume_counts_approved_reruns_only_with_fresh_usage_and_requests() -> None:
    history = [
        user("go"),
        asst(ToolCall("c1", "g", "{}"), ToolCall("c2", "g", "{}"), ToolCall("c3", "g", "{}")),
    ]
    fin = ModelResponse(Message(role="assistant", content="fin"), Usage(5, 1), "stop")
    agent = Agent(ScriptedModel(fin), tools=[Gate("g").tool()])
    results = DeferredResults(approvals={"c1": True, "c2": False}, external={"c3": "e"})
    result = await agent.run_with_deferred_results(history, results)
    assert (result.tool_calls, result.usage, result.requests, result.finish_reason) == (
        1,
        Usage(5, 1),
        1,
        "stop",
    )


@pytest.mark.parametrize(
    ("later", "limit", "outcome"),
    [(False, 1, "fin"), (True, 1, ("tool call", 1, 2)), (False, 0, ("tool call", 0, 1))],
    ids=["bound-1-taken-by-the-rerun", "bound-1-leaves-no-room", "bound-0-on-the-resuming-agent"],
)
async def test_approved_reruns_count_against_the_tool_calls_limit_not_the_pause(
    later: bool, limit: int, outcome: Any
) -> None:
    gate = Gate("g")
    paused = await Agent(
        ScriptedModel(tool_turn(ToolCall("c1", "g", "{}"))),
        tools=[Gate("g").tool()],
        usage_limits=UsageLimits(tool_calls=limit),
    ).run("go")
    assert (paused.pending is not None, paused.tool_calls) == (True, 0)
    turns = [tool_turn(ToolCall("c2", "p", "{}"))] if later else []
    tools = [gate.tool(), Tool("p", "p", OBJ, lambda ctx, args: "ok")]
    agent = Agent(
        ScriptedModel(*turns, "fin"), tools=tools, usage_limits=UsageLimits(tool_calls=limit)
    )
    if outcome == "fin":
        resumed = await agent.run_with_deferred_results(paused.messages, APPROVE_C1)
        assert (resumed.output, resumed.tool_calls) == ("fin", 1)
        return
    with pytest.raises(RunError) as info:
        await agent.run_with_deferred_results(paused.messages, APPROVE_C1)
    assert info.value.stage is Stage.USAGE
    cause = info.value.__cause__
    assert isinstance(cause, UsageLimitExceeded)
    assert (cause.kind, cause.limit, cause.actual) == outcome
    assert gate.passes == [True]  # the re-run happened before the limit fired
    assert info.value.partial is not None


async def test_a_plain_run_on_a_paused_history_closes_pending_calls_as_interrupted() -> None:
    gate, model = Gate("delete_file"), ScriptedModel("I could not delete it")
    agent = Agent(model, tools=[gate.tool()])
    result = await agent.run("what happened?", history=paused_history())
    assert (result.pending, result.output, gate.passes) == (None, "I could not delete it", [])
    req = model.requests[0].messages
    assert summary(req) == [
        ("user", "", "clean up"),
        ("assistant", "", ""),
        ("tool", "c1", INTERRUPTED),
        ("tool", "c2", "size=12"),
        ("user", "", "what happened?"),
    ]
    assert req[2].tool_name == "delete_file"
    with pytest.raises(ResumeError, match="no pending"):  # the gate is lost
        await agent.run_with_deferred_results(result.messages, APPROVE_C1)
    assert gate.passes == []


KEY = b"e" * 32


ORIGINAL = '{"to":"mallory","amount":10000}'


SCHEMA = {
    "type": "object",
    "properties": {"to": {"type": "string"}, "amount": {"type": "integer"}},
    "required": ["to", "amount"],
    "additionalProperties": False,
}


def edited_note(original: str, ran: str, result: str) -> str:
    return (
        "The approver changed the arguments of this call before approving it: "
        f"you proposed {original}, it ran with {ran}." + (f"\n{result}" if result else "")
    )


class Bank:
    def __init__(self) -> None:
        self.transfers: list[tuple[str, int]] = []

    def agent(
        self, *, seal_key: bytes | None = None, raw: bool = False, args: str = ORIGINAL
    ) -> Agent[None, str]:
        model = ScriptedModel(tool_turn(ToolCall("c1", "transfer", args)), "sent")
        if raw:
            tool = Tool(
                "transfer",
                "Send money.",
                SCHEMA,
                lambda ctx, a: self.transfer(a["to"], a["amount"]),
            )
            return Agent(model, tools=[tool], seal_key=seal_key)
        agent: Agent[None, str] = Agent(model, seal_key=seal_key)

        @agent.tool
        def transfer(to: str, amount: int) -> str:
            """Send money."""
            return self.transfer(to, amount)

        return agent

    def transfer(self, to: str, amount: int) -> str:
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, f"send {amount} to {to}?")
        self.transfers.append((to, amount))
        return f"sent {amount} to {to}"


def edit(args: Any) -> DeferredResults:
    return DeferredResults(approvals={"c1": Approval(True, args=args)})


@pytest.mark.parametrize("args", [{"to": "bob", "amount": 100}, '{"to": "bob", "amount": 100}'])
async def test_an_edited_approval_runs_with_the_approvers_arguments_and_the_model_is_told(
    args: Any,
) -> None:
    bank = Bank()
    agent = bank.agent()
    paused = await agent.run("pay")
    events: list[RunEvent] = []
    done = await agent.run_with_deferred_results(
        paused.messages, edit(args), on_event=events.append
    )
    text = args if isinstance(args, str) else '{"to":"bob","amount":100}'
    assert (bank.transfers, done.output) == ([("bob", 100)], "sent")
    assert [c.args for m in done.messages for c in m.tool_calls] == [
        text
    ]  # the history shows what ran
    (result,) = [m for m in done.messages if m.role == "tool"]
    assert result.content == edited_note(ORIGINAL, text, "sent 100 to bob")
    assert isinstance(agent.model, ScriptedModel)
    assert agent.model.requests[-1].messages[-1].content == result.content
    assert (events[0].args, events[0].approved) == (text, True)
    plain = Bank().agent()  # an unedited approval keeps the call and its text
    paused = await plain.run("pay")
    done = await plain.run_with_deferred_results(paused.messages, {"approvals": {"c1": True}})
    assert [m.content for m in done.messages if m.role == "tool"] == ["sent 10000 to mallory"]
    assert [c.args for m in done.messages for c in m.tool_calls] == [ORIGINAL]


async def test_the_note_shortens_long_arguments() -> None:
    long = json.dumps({"to": "x" * 500, "amount": 1})
    agent = Bank().agent(args=long)
    paused = await agent.run("pay")
    done = await agent.run_with_deferred_results(paused.messages, edit({"to": "b", "amount": 1}))
    (result,) = [m for m in done.messages if m.role == "tool"]
    assert len(result.content) < 500
    assert "…" in result.content
    assert result.content.endswith('it ran with {"to":"b","amount":1}.\nsent 1 to b')


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        ({"to": "bob"}, "amount: Field required"),
        ({"to": "bob", "amount": "lots"}, "amount"),
        ({"to": "bob", "amount": 1, "memo": "x"}, "memo"),
        ("not json", "must be a JSON object"),
        ("[1, 2]", "must be a JSON object"),
        ("", "must be a JSON object"),
        ('{"to": "\ud800", "amount": 1}', "rejected"),
        ({"to": "\ud800", "amount": 1}, "lone surrogate"),
        ({"to": "bob", "amount": float("nan")}, "JSON"),
    ],
)
@pytest.mark.parametrize("raw", [False, True], ids=["function-tool", "raw-tool"])
async def test_invalid_edited_arguments_are_refused_before_anything_runs(
    args: Any, problem: str, raw: bool
) -> None:
    bank = Bank()
    agent = bank.agent(raw=raw)
    paused = await agent.run("pay")
    assert isinstance(agent.model, ScriptedModel)
    requests = len(agent.model.requests)
    with pytest.raises(
        ResumeError, match=r'edited arguments for tool call "c1" \(transfer\)'
    ) as info:
        await agent.run_with_deferred_results(paused.messages, edit(args))
    assert problem in str(info.value)
    assert (bank.transfers, len(agent.model.requests)) == ([], requests)
    if raw:  # a raw tool's schema rejects a boolean for an integer
        with pytest.raises(ResumeError, match="amount: expected integer, got bool"):
            await agent.run_with_deferred_results(
                paused.messages, edit({"to": "b", "amount": True})
            )


async def test_edits_on_a_denial_another_type_or_an_external_call_are_refused() -> None:
    with pytest.raises(ValueError, match="a denial takes no args"):
        Approval(False, args={"to": "bob"})
    with pytest.raises(TypeError, match="dict or JSON object text"):
        Approval(True, args=[1, 2])  # type: ignore[arg-type]

    def fetch(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        raise Deferred(DeferKind.EXTERNAL, "job")

    agent = Agent(
        ScriptedModel(tool_turn(ToolCall("c1", "fetch", "{}"))),
        tools=[Tool("fetch", "f", OBJ, fetch)],
        seal_key=KEY,
    )
    paused = await agent.run("go")
    with pytest.raises(ResumeError, match="waits for an external result"):
        await agent.run_with_deferred_results(paused.paused_run, edit({}))


async def test_an_edited_call_is_resealed_with_a_key_and_loses_its_stale_seal_without() -> None:
    bank = Bank()
    agent = bank.agent(seal_key=KEY)
    paused = await agent.run("pay", conversation_id="conv")
    assert paused.paused_run is not None
    done = await agent.run_with_deferred_results(
        PausedRun.loads(paused.paused_run.dumps()), edit({"to": "bob", "amount": 5})
    )
    (call,) = [c for m in loads_history(dumps_history(done.messages)) for c in m.tool_calls]
    assert call.args == '{"to":"bob","amount":5}'
    assert verify_call(KEY, "conv", call) is DeferKind.APPROVAL
    plain = bank.agent()
    plain.model = ScriptedModel("sent")
    done = await plain.run_with_deferred_results(paused.messages, edit({"to": "bob", "amount": 5}))
    assert [c.seal for m in done.messages for c in m.tool_calls] == [""]


class Recorder:
    """A gate tool's `exec` that records the calls it ran approved."""

    def __init__(self) -> None:
        self.effects: list[str] = []

    def exec(self, ctx: RunContext[Any], args: dict[str, Any]) -> str:
        if not call_approved():
            raise Deferred("approval", "sign-off")
        self.effects.append(ctx.call_id)
        return "done"


async def paused(gate: Recorder) -> list[Message]:
    model = ScriptedModel(
        ModelResponse(
            Message(
                role="assistant",
                tool_calls=[ToolCall("c1", "gate", "{}"), ToolCall("c2", "stat", "{}")],
            ),
            finish_reason="tool_call",
        )
    )
    agent = Agent(
        model, tools=[Tool("gate", "g", OBJ, gate.exec), Tool("stat", "s", OBJ, lambda c, a: "12")]
    )
    result = await agent.run("go")
    assert result.pending is not None
    return result.messages


@pytest.mark.parametrize(
    "appended",
    [
        Message(role="user", content="also, keep b.log"),
        Message(role="assistant", content="stale text"),
        Message(role="system", content="be terse"),
    ],
)
async def test_a_message_appended_after_the_paused_batch_is_refused_not_dropped(
    appended: Message,
) -> None:
    gate = Recorder()
    history = [*await paused(gate), appended]
    model = ScriptedModel("never")
    agent = Agent(model, tools=[Tool("gate", "g", OBJ, gate.exec)])
    with pytest.raises(ResumeError) as info:
        await agent.run_with_deferred_results(history, DeferredResults(approvals={"c1": True}))
    text = str(info.value)
    assert f"history message {len(history) - 1} ({appended.role}) follows the paused batch" in text
    assert "prompt" in text
    assert gate.effects == []  # nothing re-ran
    assert model.requests == []  # no model call
    # the same resume from JSON is refused the same way
    with pytest.raises(ResumeError):
        await agent.run_with_deferred_results(
            dumps_history(history), DeferredResults(approvals={"c1": True})
        )


async def test_tool_results_after_the_batch_are_fine_in_any_number() -> None:
    # results the paused run recorded, a stray one, a duplicate: repair's business, not refused
    gate = Recorder()
    history = await paused(gate)
    history += [
        Message(role="tool", content="stray", tool_call_id="zz", tool_name="stat"),
        Message(role="tool", content="12 again", tool_call_id="c2", tool_name="stat"),
    ]
    model = ScriptedModel("ok")
    agent = Agent(model, tools=[Tool("gate", "g", OBJ, gate.exec)])
    result = await agent.run_with_deferred_results(history, DeferredResults(approvals={"c1": True}))
    assert result.output == "ok"
    sent = model.requests[0].messages
    assert [(m.role, m.tool_call_id) for m in sent] == [
        ("user", ""),
        ("assistant", ""),
        ("tool", "c1"),
        ("tool", "c2"),
    ]


POOL = ["c1", "c2", "c3", "old"]


@st.composite
def resumes(
    draw: st.DrawFn,
) -> tuple[list[Message], dict[str, Approval | bool], dict[str, str], list[str]]:
    """A paused history (a batch, maybe an older pending call, some results recorded) and
    any resolutions at all, well-formed or not; also the pending call IDs in history order."""
    batch = draw(st.lists(st.sampled_from(["c1", "c2", "c3"]), min_size=1, unique=True))
    recorded = draw(st.lists(st.sampled_from(batch), unique=True, max_size=len(batch) - 1))
    history = [Message(role="user", content="go")]
    pending: list[str] = []
    if draw(st.booleans()):
        history.append(Message(role="assistant", tool_calls=[ToolCall("old", "gate", "{}")]))
        history.append(Message(role="user", content="and then"))  # closed, never pending
    history.append(Message(role="assistant", tool_calls=[ToolCall(c, "gate", "{}") for c in batch]))
    history += [
        Message(role="tool", content=f"recorded {c}", tool_call_id=c, tool_name="gate")
        for c in recorded
    ]
    pending += [c for c in batch if c not in recorded]
    approvals: dict[str, Approval | bool] = {}
    external: dict[str, str] = {}
    for call_id in [*POOL, "ghost"]:
        how = draw(st.sampled_from(["none", "approve", "deny", "external", "both"]))
        if how in ("approve", "both"):
            approvals[call_id] = True
        if how == "deny":
            approvals[call_id] = Approval(False, "no")
        if how in ("external", "both"):
            external[call_id] = f"ext {call_id}"
    return history, approvals, external, pending


@settings(deadline=None)
@given(resumes())
def test_any_resolutions_either_resume_every_pending_call_once_or_are_refused_untouched(
    case: tuple[list[Message], dict[str, Approval | bool], dict[str, str], list[str]],
) -> None:
    history, approvals, external, pending = case
    before = list(history)
    ran: list[str] = []

    def gate(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        ran.append(ctx.call_id)
        return f"ran {ctx.call_id}"

    model = ScriptedModel("ok")
    agent = Agent(model, tools=[Tool("gate", "g", OBJ, gate)])
    # a resolution for a call the history already answers (a recorded result) is skipped,
    # never run (ADR 0071; refused before); one for a call the history lacks is refused
    answered = {m.tool_call_id for m in history if m.role == "tool"}
    valid = (
        set(approvals) <= set(pending) | answered
        and set(external) <= set(pending) | answered
        and not set(approvals) & set(external)
        and set(pending) <= set(approvals) | set(external)
    )
    results = DeferredResults(approvals=approvals, external=external)
    if not valid:
        with pytest.raises(ResumeError):
            agent.run_with_deferred_results_sync(history, results)
        assert ran == []
        assert model.requests == []
        assert history == before  # the caller's history is untouched, nothing is lost
        return
    result = agent.run_with_deferred_results_sync(history, results)
    assert result.output == "ok"
    approved = [c for c in pending if approvals.get(c) is True]
    assert ran == approved  # in history order, each once
    sent = model.requests[0].messages
    answers = [m.tool_call_id for m in sent if m.role == "tool"]
    calls = [c.id for m in sent if m.role == "assistant" for c in m.tool_calls]
    assert sorted(answers) == sorted(calls)  # every call answered exactly once
    last = max(i for i, m in enumerate(sent) if m.role == "assistant")
    batch = [c.id for c in sent[last].tool_calls]
    # right after the batch: its answers in emission order, then the older call's resolution
    after = [m.tool_call_id for m in sent[last + 1 :]]
    assert after == batch + (["old"] if "old" in pending else [])
    for call_id in pending:
        (msg,) = [m for m in sent if m.role == "tool" and m.tool_call_id == call_id]
        if call_id in external:
            assert msg.content == external[call_id]
        elif approvals[call_id] is True:
            assert msg.content == f"ran {call_id}"
        else:
            assert msg.content.startswith("Your tool call was denied: no.")
        assert msg.run_id == result.run_id
    for call_id in answered:  # a skipped resolution leaves the recorded answer as it was
        (msg,) = [m for m in sent if m.role == "tool" and m.tool_call_id == call_id]
        assert msg.content == f"recorded {call_id}"
    assert history == before


@pytest.mark.parametrize(
    ("history", "says"),
    [
        ("[{", "history is not valid JSON"),
        ('[{"role":"robot"}]', "history message 0: role must be one of"),
        ('{"role":"user"}', "history must be a JSON array"),
        (
            [
                Message(role="assistant", tool_calls=[ToolCall("c1", "gate", "{}")]),
                Message(role="system", parts=[Part("image", url="https://x/a.png")]),
            ],
            "history message 1: parts are only supported on user, tool and assistant messages",
        ),
    ],
)
async def test_a_history_that_does_not_load_or_validate_is_a_resume_error(
    history: Any, says: str
) -> None:
    # "Resume validation failures raise golem.ResumeError (a ValueError)" — the loader's and
    # the validator's refusals included, with their messages
    gate = Recorder()
    model = ScriptedModel("never")
    agent = Agent(model, tools=[Tool("gate", "g", OBJ, gate.exec)])
    results = DeferredResults(approvals={"c1": True})
    with pytest.raises(ResumeError, match=says) as info:
        await agent.run_with_deferred_results(history, results)
    assert isinstance(info.value, ValueError)
    with pytest.raises(ResumeError, match=says):
        async with agent.run_stream_with_deferred_results(history, results) as stream:
            async for _ in stream:
                pass
    assert gate.effects == []
    assert model.requests == []


GO_JSON_VALID = [  # Go reference §3.4 step 1: Go's json.Valid (RFC 8259), not Python's json
    *[(a, False) for a in ['{"x": NaN}', '{"x": Infinity}', '{"x": -Infinity}', '{"x": [1, NaN]}']],
    ("{'x': 1}", False),
    *[(a, True) for a in ['{"x": "\\ud800"}', '  {"x": 1}  ', '{"x": 1, "x": 2}', '{"x": "NaN"}']],
    ('{"x": 1e400, "y": -0.0, "z": 123456789012345678901234567890}', True),
]


@pytest.mark.parametrize(("args", "valid"), GO_JSON_VALID)
def test_repair_reports_as_truncated_exactly_the_args_go_json_valid_refuses(
    args: str, valid: bool
) -> None:
    history = [
        Message(role="assistant", tool_calls=[ToolCall("c", "t", args)]),
        Message(role="tool", content="ok", tool_call_id="c", tool_name="t"),
    ]
    assert normalize_history(history)[1].truncated == ([] if valid else ["c"])


def two_gates() -> tuple[Agent[None, str], list[str]]:
    ran: list[str] = []

    def gate(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL)
        ran.append(ctx.call_id)
        return "ok"

    model = ScriptedModel(
        tool_turn(ToolCall("c1", "g", "{}"), ToolCall("c2", "g", '{"n":2}')), "done"
    )
    return Agent(model, tools=[Tool("g", "g", OBJ, gate)]), ran


async def test_before_approved_is_awaited_right_before_each_approved_rerun_only() -> None:
    agent, ran = two_gates()
    agent.model = ScriptedModel(
        tool_turn(ToolCall("c1", "g", "{}"), ToolCall("c2", "g", '{"n":2}')), "done", "done"
    )
    paused = await agent.run("go")
    order: list[str] = []

    async def fence(call: ToolCall) -> None:
        order.append(f"fence {call.id} {call.args} ran={ran}")

    results = {"approvals": {"c1": True, "c2": Approval(True, args={"n": 3})}}
    done = await agent.run_with_deferred_results(paused.messages, results, progress=ResumeProgress(before_approved=fence)
    )
    assert done.output == "done"
    assert order == ["fence c1 {} ran=[]", "fence c2 {\"n\":3} ran=['c1']"]
    order.clear()
    ran.clear()  # skipped for denials (and external results)
    await agent.run_with_deferred_results(
        paused.messages, {"approvals": {"c1": False, "c2": True}},
        progress=ResumeProgress(before_approved=fence),
    )
    assert (order, ran) == (['fence c2 {"n":2} ran=[]'], ["c2"])


async def test_an_exception_from_before_approved_propagates_unchanged_and_stops_everything() -> (
    None
):
    agent, ran = two_gates()
    paused = await agent.run("go")
    assert isinstance(agent.model, ScriptedModel)
    requests = len(agent.model.requests)

    class LeaseLost(Exception):
        pass

    lost = LeaseLost("lease gone")

    async def fence(call: ToolCall) -> None:
        if call.id == "c2":
            raise lost

    with pytest.raises(LeaseLost) as info:
        await agent.run_with_deferred_results(
            paused.messages, {"approvals": {"c1": True, "c2": True}},
            progress=ResumeProgress(before_approved=fence),
        )
    assert info.value is lost
    assert ran == ["c1"]
    assert len(agent.model.requests) == requests


@pytest.mark.parametrize(
    "results",
    [
        DeferredResults(approvals={"c1": True, "c2": False}),
        {"approvals": {"c1": True, "c2": Approval(False, "no")}},
    ],
    ids=["bare-booleans", "plain-dict"],
)
async def test_bare_booleans_and_a_plain_dict_stand_for_results(results: Any) -> None:
    assert DeferredResults(approvals={"c1": True, "c2": False}).approvals == {
        "c1": Approval(True),
        "c2": Approval(False),
    }
    agent, ran = two_gates()
    paused = await agent.run("go")
    done = await agent.run_with_deferred_results(paused.messages, results)
    assert (done.output, ran) == ("done", ["c1"])


@pytest.mark.parametrize(
    ("results", "match"),
    [
        ({"approve": {"c1": True}}, r"keys 'approvals' and 'external', got \['approve'\]"),
        ({"c1": True}, "DeferredResults"),
        ([("c1", True)], "must be DeferredResults"),
        ({"approvals": {"c1": "yes"}}, 'approval for "c1" must be an Approval or a bool'),
        ({"external": {"c1": 3}}, 'external result for "c1" must be text'),
        ({"approvals": {1: True}}, "call IDs"),
    ],
)
async def test_wrong_results_are_a_type_error_saying_how(results: Any, match: str) -> None:
    agent, ran = two_gates()
    paused = await agent.run("go")
    with pytest.raises(TypeError, match=match):
        await agent.run_with_deferred_results(paused.messages, results)
    assert ran == []
