"""Resuming a paused run (issue 3, "Resuming" and "History and trust").

Validation (`ResumeError`) before any model call or re-execution; approved re-runs, denials
and external results; where resolutions land in the history; the optional prompt; pausing
again; identity; usage accounting of re-runs; re-run failures and cancellation; resuming
from JSON on a new `Agent`; and what a plain `run(history=...)` does with a paused history.
"""

from __future__ import annotations

import asyncio
import threading
import time
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
    PendingToolCall,
    ResumeError,
    RunContext,
    RunError,
    Stage,
    Tool,
    ToolCall,
    ToolError,
    Usage,
    UsageLimitExceeded,
    UsageLimits,
    dumps_history,
    loads_history,
)
from golem.errors import Overloaded
from golem.model import ModelResponse
from golem.testing import ScriptedModel
from golem.tool import Canceled, DeferKind, Deferred, Failed, ModelRetry, call_approved

INTERRUPTED = (
    "Tool call was interrupted before execution; no result was produced. "
    "Call the tool again if you need its result."
)
DENIED = "Your tool call was denied. Do not call it again; continue without its result."
OBJ = {"type": "object"}


# --------------------------------------------------------------------------- helpers


def tool_turn(*calls: ToolCall, usage: Usage | None = None) -> ModelResponse:
    return ModelResponse(
        message=Message(role="assistant", tool_calls=list(calls)),
        usage=usage or Usage(),
        finish_reason="tool_call",
    )


class Gate:
    """Defers unless approved; on the approved pass runs `effect` (default: return a text)."""

    def __init__(
        self,
        name: str,
        kind: DeferKind = DeferKind.APPROVAL,
        effect: Callable[[RunContext[Any], dict[str, Any]], Any] | None = None,
    ) -> None:
        self.name = name
        self.kind = kind
        self.effect = effect
        self.passes: list[bool] = []
        self.approved_args: list[dict[str, Any]] = []
        self.deps: list[Any] = []

    def exec(self, ctx: RunContext[Any], args: dict[str, Any]) -> Any:
        self.passes.append(call_approved())
        if not call_approved():
            raise Deferred(self.kind, f"{self.name} needs sign-off")
        self.approved_args.append(args)
        self.deps.append(ctx.deps)
        if self.effect is not None:
            return self.effect(ctx, args)
        return f"{self.name}: done"

    def tool(self, **kw: Any) -> Tool:
        return Tool(self.name, self.name, OBJ, self.exec, **kw)


class Plain:
    def __init__(self, name: str, text: str = "ok") -> None:
        self.name = name
        self.text = text
        self.calls = 0

    def exec(self, ctx: RunContext[Any], args: dict[str, Any]) -> str:
        self.calls += 1
        return self.text

    def tool(self) -> Tool:
        return Tool(self.name, self.name, OBJ, self.exec)


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
    return [
        user("clean up"),
        asst(
            ToolCall("c1", "delete_file", '{"path":"a"}'),
            ToolCall("c2", "stat_file", '{"path":"a"}'),
        ),
        tool_msg("c2", "stat_file", "size=12"),
    ]


def summary(messages: list[Message]) -> list[tuple[str, str, str]]:
    return [(m.role, m.tool_call_id, m.content) for m in messages]


# --------------------------------------------------------------------------- ResumeError


def test_resume_error_is_a_value_error_and_a_golem_error() -> None:
    assert issubclass(ResumeError, ValueError)
    assert issubclass(ResumeError, GolemError)


class Untouched:
    """A resuming agent whose model and tools must stay untouched by a rejected resume."""

    def __init__(self) -> None:
        self.delete = Gate("delete_file")
        self.stat = Gate("stat_file")
        self.model = ScriptedModel("would answer")
        self.agent: Agent[Any, Any] = Agent(
            self.model, tools=[self.delete.tool(), self.stat.tool()]
        )

    async def reject(
        self, history: list[Message], results: DeferredResults, *phrases: str
    ) -> ResumeError:
        with pytest.raises(ResumeError) as info:
            await self.agent.run_with_deferred_results(history, results, "and then?")
        for phrase in phrases:
            assert phrase in str(info.value)
        assert isinstance(info.value, ValueError)
        assert self.model.requests == []
        assert self.model.remaining == 1
        assert self.delete.passes == []
        assert self.stat.passes == []
        return info.value


async def test_resume_rejects_a_history_without_pending_calls() -> None:
    u = Untouched()
    answered = [*paused_history(), tool_msg("c1", "delete_file", "deleted")]
    await u.reject(answered, DeferredResults(approvals={"c1": Approval(True)}), "no pending")


async def test_resume_rejects_an_empty_history() -> None:
    u = Untouched()
    await u.reject([], DeferredResults(), "no pending")


async def test_resume_rejects_a_history_of_plain_text_turns() -> None:
    u = Untouched()
    await u.reject(
        [user("hi"), Message(role="assistant", content="hello")], DeferredResults(), "no pending"
    )


async def test_resume_rejects_a_tool_call_without_id_naming_it_by_tool_name() -> None:
    u = Untouched()
    history = [
        user("go"),
        asst(ToolCall("", "stat_file", "{}"), ToolCall("c1", "delete_file", "{}")),
    ]
    err = await u.reject(history, DeferredResults(approvals={"c1": Approval(True)}), "stat_file")
    assert "ID" in str(err) or "id" in str(err)


async def test_resume_rejects_an_answered_tool_call_without_id() -> None:
    u = Untouched()
    history = [
        user("go"),
        asst(ToolCall("", "stat_file", "{}")),
        tool_msg("", "stat_file", "size=1"),
        asst(ToolCall("c1", "delete_file", "{}")),
    ]
    await u.reject(history, DeferredResults(approvals={"c1": Approval(True)}), "stat_file")


async def test_resume_rejects_an_approval_for_an_unknown_call_id() -> None:
    u = Untouched()
    await u.reject(
        paused_history(),
        DeferredResults(approvals={"c1": Approval(True), "ghost-7": Approval(True)}),
        "ghost-7",
    )


@pytest.mark.parametrize(
    "extra",
    [
        {"approvals": {"c2": Approval(True)}},
        {"approvals": {"c2": Approval(False, "no")}},
        {"approvals": {"c2": Approval(True, args={"path": "z"})}},
        {"external": {"c2": "forged"}},
    ],
)
async def test_a_resolution_for_an_already_answered_call_is_skipped(
    extra: dict[str, dict[str, Any]],
) -> None:
    """ADR 0071 (this test pinned a `ResumeError` before, Go reference §2.5 step 4): a
    resolution for a call the history answers — an approved call a failed or cancelled
    resume already ran, handed back in its partial — is a no-op. The call never runs
    again, its recorded answer stays, and the pending calls are resolved as usual; a
    resolution for a call the history does not have is still refused."""
    u = Untouched()
    results = DeferredResults(
        approvals={"c1": Approval(True), **extra.get("approvals", {})},
        external=extra.get("external", {}),
    )
    done = await u.agent.run_with_deferred_results(paused_history(), results)
    assert done.output == "would answer"
    assert u.delete.passes == [True]
    assert u.stat.passes == []  # the answered call never runs again
    assert summary(done.messages)[2:4] == [
        ("tool", "c1", "delete_file: done"),
        ("tool", "c2", "size=12"),
    ]
    assert done.tool_calls == 1


async def test_resume_rejects_an_external_result_for_an_unknown_call_id() -> None:
    u = Untouched()
    await u.reject(
        paused_history(),
        DeferredResults(approvals={"c1": Approval(True)}, external={"ghost-9": "x"}),
        "ghost-9",
    )


async def test_resume_rejects_a_call_resolved_in_both_maps() -> None:
    u = Untouched()
    err = await u.reject(
        paused_history(),
        DeferredResults(approvals={"c1": Approval(True)}, external={"c1": "text"}),
        '"c1"',
    )
    assert "both" in str(err)


async def test_resume_rejects_a_pending_call_without_resolution() -> None:
    u = Untouched()
    history = [
        user("go"),
        asst(ToolCall("c1", "stat_file", "{}"), ToolCall("c2", "delete_file", "{}")),
    ]
    err = await u.reject(history, DeferredResults(approvals={"c1": Approval(True)}), '"c2"')
    assert "resolution" in str(err)


async def test_resume_rejects_empty_results_naming_the_first_pending_call() -> None:
    u = Untouched()
    await u.reject(paused_history(), DeferredResults(), '"c1"')


async def test_resume_rejects_an_approved_call_whose_tool_is_not_registered() -> None:
    # c1's tool is registered and approved too: it must not run before the rejection.
    stat = Gate("stat_file")
    model = ScriptedModel("would answer")
    agent = Agent(model, tools=[stat.tool()])
    history = [
        user("go"),
        asst(ToolCall("c1", "stat_file", "{}"), ToolCall("c2", "delete_file", "{}")),
    ]
    with pytest.raises(ResumeError) as info:
        await agent.run_with_deferred_results(
            history, DeferredResults(approvals={"c1": Approval(True), "c2": Approval(True)})
        )
    assert '"c2"' in str(info.value)
    assert "delete_file" in str(info.value)
    assert model.requests == []
    assert stat.passes == []


async def test_denials_and_external_results_need_no_registered_tool() -> None:
    model = ScriptedModel("answered")
    agent: Agent[Any, str] = Agent(model)  # no tools at all
    history = [
        user("go"),
        asst(ToolCall("c1", "delete_file", "{}"), ToolCall("c2", "fetch_report", "{}")),
    ]
    result = await agent.run_with_deferred_results(
        history,
        DeferredResults(approvals={"c1": Approval(False, "no")}, external={"c2": "report"}),
    )
    assert result.output == "answered"
    assert result.tool_calls == 0


async def test_resolution_kind_is_not_checked_against_the_deferral_kind() -> None:
    # An approval-kind call may receive an external text (kinds are not in the history).
    model = ScriptedModel(tool_turn(ToolCall("c1", "g", "{}")), "fin")
    gate = Gate("g")
    agent = Agent(model, tools=[gate.tool()])
    paused = await agent.run("go")
    resumed = await agent.run_with_deferred_results(
        paused.messages, DeferredResults(external={"c1": "supplied"})
    )
    assert resumed.output == "fin"
    assert gate.passes == [False]


# --------------------------------------------------------------------------- approved re-runs


async def test_approved_rerun_uses_original_args_run_deps_and_its_result() -> None:
    gate = Gate("delete_file", effect=lambda ctx, args: f"deleted {args['path']}")
    model = ScriptedModel(
        tool_turn(ToolCall("c1", "delete_file", '{ "path" : "a b" , "force": true }')), "ok"
    )
    agent = Agent(model, tools=[gate.tool()])
    paused = await agent.run("go", deps="pause-deps")
    deps = object()
    resumed = await agent.run_with_deferred_results(
        paused.messages, DeferredResults(approvals={"c1": Approval(True)}), deps=deps
    )
    assert gate.approved_args == [{"path": "a b", "force": True}]
    assert gate.deps == [deps]
    req = model.requests[-1].messages
    assert summary(req)[-1] == ("tool", "c1", "deleted a b")
    assert req[-1].tool_name == "delete_file"
    assert resumed.output == "ok"


async def test_approved_rerun_result_keeps_the_tools_parts() -> None:
    from golem import Part, ToolResult

    part = Part(kind="image", url="https://example.com/a.png")
    gate = Gate("shot", effect=lambda ctx, args: ToolResult("see image", [part]))
    model = ScriptedModel(tool_turn(ToolCall("c1", "shot", "{}")), "ok")
    agent = Agent(model, tools=[gate.tool()])
    paused = await agent.run("go")
    await agent.run_with_deferred_results(
        paused.messages, DeferredResults(approvals={"c1": Approval(True)})
    )
    last = model.requests[-1].messages[-1]
    assert (last.content, list(last.parts)) == ("see image", [part])


async def test_approved_rerun_gets_the_run_identity_in_its_context() -> None:
    seen: list[tuple[str, str, str, str]] = []

    def effect(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        seen.append((ctx.run_id, ctx.conversation_id, ctx.call_id, ctx.tool_name))
        return "x"

    gate = Gate("g", effect=effect)
    model = ScriptedModel(tool_turn(ToolCall("c1", "g", "{}")), "ok")
    agent = Agent(model, tools=[gate.tool()])
    paused = await agent.run("go", conversation_id="conv")
    resumed = await agent.run_with_deferred_results(
        paused.messages, DeferredResults(approvals={"c1": Approval(True)}), run_id="resume-1"
    )
    assert resumed.run_id == "resume-1"
    assert seen == [("resume-1", "conv", "c1", "g")]


async def test_approved_rerun_overrunning_the_agent_timeout_fails_at_stage_tool() -> None:
    # The timeout also bounds the first pass, so the run pauses on an agent without one and
    # resumes on an agent with a short one; the re-run never finishes, so the timeout fires
    # however slow the machine is.
    async def exec(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL)
        await asyncio.Event().wait()
        return "never"

    model = ScriptedModel(tool_turn(ToolCall("c1", "t", "{}")), "never")
    tools = [Tool("t", "t", OBJ, exec)]
    paused = await Agent(model, tools=tools).run("go")
    with pytest.raises(RunError) as info:
        await Agent(model, tools=tools, tool_timeout=0.05).run_with_deferred_results(
            paused.messages, DeferredResults(approvals={"c1": Approval(True)})
        )
    assert info.value.stage is Stage.TOOL
    assert isinstance(info.value.__cause__, TimeoutError)
    assert model.remaining == 1


async def test_approved_sync_rerun_overrunning_the_tool_timeout_fails_at_stage_tool() -> None:
    # A sync tool's thread runs to completion and the deadline is checked afterwards: the
    # re-run sleeps past the timeout, so it overruns however slow the machine is. The run
    # pauses on a tool without the timeout, which would also bound the first pass.
    def slow(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        time.sleep(0.1)
        return "late"

    gate = Gate("t", effect=slow)
    model = ScriptedModel(tool_turn(ToolCall("c1", "t", "{}")), "never")
    paused = await Agent(model, tools=[gate.tool()]).run("go")
    with pytest.raises(RunError) as info:
        await Agent(model, tools=[gate.tool(timeout=0.05)]).run_with_deferred_results(
            paused.messages, DeferredResults(approvals={"c1": Approval(True)})
        )
    assert info.value.stage is Stage.TOOL
    assert isinstance(info.value.__cause__, TimeoutError)
    assert model.remaining == 1
    assert gate.passes == [False, True]


def _raise(exc: BaseException) -> Callable[[RunContext[Any], dict[str, Any]], Any]:
    def effect(ctx: RunContext[Any], args: dict[str, Any]) -> Any:
        raise exc

    return effect


@pytest.mark.parametrize(
    "exc",
    [
        RuntimeError("disk on fire"),
        Deferred(DeferKind.APPROVAL, "again"),
        Deferred(DeferKind.EXTERNAL, "again"),
        Failed("cannot delete"),
        ModelRetry("bad path"),
    ],
    ids=["plain", "defer-approval", "defer-external", "failed", "model-retry"],
)
async def test_failing_approved_rerun_fails_the_resume_at_stage_tool_before_any_model_call(
    exc: BaseException,
) -> None:
    gate = Gate("delete_file", effect=_raise(exc))
    pause_model = ScriptedModel(tool_turn(ToolCall("c1", "delete_file", '{"path":"a"}')))
    paused = await Agent(pause_model, tools=[Gate("delete_file").tool()]).run("go")
    model = ScriptedModel("never")
    agent = Agent(model, tools=[gate.tool()], tool_retries=5)  # no budget applies to re-runs
    with pytest.raises(RunError) as info:
        await agent.run_with_deferred_results(
            paused.messages, DeferredResults(approvals={"c1": Approval(True)})
        )
    err = info.value
    assert err.stage is Stage.TOOL
    assert model.requests == []
    assert gate.passes == [True]
    cause = err.__cause__
    assert isinstance(cause, ToolError)
    assert (cause.tool_name, cause.call_id) == ("delete_file", "c1")


async def test_rerun_failure_wrapped_around_a_signal_is_still_a_tool_failure() -> None:
    def effect(ctx: RunContext[Any], args: dict[str, Any]) -> Any:
        raise RuntimeError("wrapper") from Failed("inner")

    gate = Gate("g", effect=effect)
    model = ScriptedModel(tool_turn(ToolCall("c1", "g", "{}")), "never")
    agent = Agent(model, tools=[gate.tool()])
    paused = await agent.run("go")
    with pytest.raises(RunError) as info:
        await agent.run_with_deferred_results(
            paused.messages, DeferredResults(approvals={"c1": Approval(True)})
        )
    assert info.value.stage is Stage.TOOL
    assert model.remaining == 1


async def test_first_failing_rerun_aborts_before_later_reruns() -> None:
    first = Gate("a", effect=_raise(RuntimeError("boom")))
    second = Gate("b")
    history = [user("go"), asst(ToolCall("c1", "a", "{}"), ToolCall("c2", "b", "{}"))]
    model = ScriptedModel("never")
    agent = Agent(model, tools=[first.tool(), second.tool()])
    with pytest.raises(RunError) as info:
        await agent.run_with_deferred_results(
            history, DeferredResults(approvals={"c1": Approval(True), "c2": Approval(True)})
        )
    assert info.value.stage is Stage.TOOL
    assert first.passes == [True]
    assert second.passes == []
    assert model.requests == []


async def test_approved_rerun_returning_an_invalid_part_fails_at_stage_tool() -> None:
    from golem import Part, ToolResult

    bad = Part(kind="hologram", url="https://example.com/x")
    gate = Gate("shot", effect=lambda ctx, args: ToolResult("see", [bad]))
    model = ScriptedModel(tool_turn(ToolCall("c1", "shot", "{}")), "never")
    agent = Agent(model, tools=[gate.tool()])
    paused = await agent.run("go")
    with pytest.raises(RunError) as info:
        await agent.run_with_deferred_results(
            paused.messages, DeferredResults(approvals={"c1": Approval(True)})
        )
    assert info.value.stage is Stage.TOOL
    assert model.remaining == 1


@pytest.mark.parametrize("wrapped", [False, True])
async def test_rerun_raising_canceled_ends_the_resume_at_stage_canceled(wrapped: bool) -> None:
    def effect(ctx: RunContext[Any], args: dict[str, Any]) -> Any:
        if wrapped:
            raise RuntimeError("outer") from Canceled("operator stop")
        raise Canceled("operator stop")

    gate = Gate("g", effect=effect)
    model = ScriptedModel(tool_turn(ToolCall("c1", "g", "{}")), "never")
    agent = Agent(model, tools=[gate.tool()])
    paused = await agent.run("go")
    with pytest.raises(RunError) as info:
        await agent.run_with_deferred_results(
            paused.messages, DeferredResults(approvals={"c1": Approval(True)})
        )
    assert info.value.stage is Stage.CANCELED
    assert "operator stop" in str(info.value)
    assert model.remaining == 1


@pytest.mark.parametrize("timeout", [None, 30.0])
async def test_caller_cancellation_during_a_rerun_propagates_as_cancelled_error(
    timeout: float | None,
) -> None:
    started = asyncio.Event()

    async def exec(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL)
        started.set()
        await asyncio.Event().wait()
        return "never"

    model = ScriptedModel(tool_turn(ToolCall("c1", "t", "{}")), "never")
    agent = Agent(model, tools=[Tool("t", "t", OBJ, exec)], tool_timeout=timeout)
    paused = await agent.run("go")
    task = asyncio.create_task(
        agent.run_with_deferred_results(
            paused.messages, DeferredResults(approvals={"c1": Approval(True)})
        )
    )
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert model.remaining == 1


async def test_caller_cancellation_during_a_sync_rerun_propagates_as_cancelled_error() -> None:
    started, release = threading.Event(), threading.Event()

    def slow(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        started.set()
        release.wait(5)
        return "late"

    gate = Gate("t", effect=slow)
    model = ScriptedModel(tool_turn(ToolCall("c1", "t", "{}")), "never")
    agent = Agent(model, tools=[gate.tool()], tool_timeout=30)
    paused = await agent.run("go")
    task = asyncio.create_task(
        agent.run_with_deferred_results(
            paused.messages, DeferredResults(approvals={"c1": Approval(True)})
        )
    )
    try:
        assert await asyncio.to_thread(started.wait, 5)
        task.cancel()
        release.set()  # the resume ends once the thread does (ADR 0067)
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        release.set()
    assert model.remaining == 1


# --------------------------------------------------------------------------- denial and external


async def test_denial_without_reason_has_the_exact_text_and_executes_nothing() -> None:
    gate = Gate("delete_file")
    model = ScriptedModel("ok")
    agent = Agent(model, tools=[gate.tool()])
    await agent.run_with_deferred_results(
        paused_history(), DeferredResults(approvals={"c1": Approval(False)})
    )
    denial = model.requests[0].messages[2]
    assert (denial.role, denial.tool_call_id, denial.tool_name) == ("tool", "c1", "delete_file")
    assert denial.content == DENIED
    assert not denial.failed
    assert gate.passes == []


async def test_denial_with_reason_has_the_exact_text() -> None:
    model = ScriptedModel("ok")
    agent: Agent[Any, str] = Agent(model)
    await agent.run_with_deferred_results(
        paused_history(), DeferredResults(approvals={"c1": Approval(False, "not on Fridays")})
    )
    assert model.requests[0].messages[2].content == (
        "Your tool call was denied: not on Fridays. Do not call it again; continue without its result."
    )


async def test_reason_on_an_approval_is_not_shown_to_the_model() -> None:
    gate = Gate("delete_file")
    model = ScriptedModel("ok")
    agent = Agent(model, tools=[gate.tool()])
    await agent.run_with_deferred_results(
        paused_history(), DeferredResults(approvals={"c1": Approval(True, "looks fine")})
    )
    assert model.requests[0].messages[2].content == "delete_file: done"


@pytest.mark.parametrize("text", ["", "  spaced  \n", '{"json": true}', "multi\nline ünïcode <&>"])
async def test_external_result_is_used_verbatim(text: str) -> None:
    model = ScriptedModel("ok")
    agent: Agent[Any, str] = Agent(model)
    await agent.run_with_deferred_results(paused_history(), DeferredResults(external={"c1": text}))
    msg = model.requests[0].messages[2]
    assert (msg.role, msg.tool_call_id, msg.tool_name, msg.content) == (
        "tool",
        "c1",
        "delete_file",
        text,
    )
    assert list(msg.parts) == []
    assert not msg.failed


# --------------------------------------------------------------------------- ordering


async def test_resolution_interleaves_with_already_executed_results_reference_example() -> None:
    gate = Gate("delete_file", effect=lambda ctx, args: "deleted")
    model = ScriptedModel("ok")
    agent = Agent(model, tools=[gate.tool()])
    await agent.run_with_deferred_results(
        paused_history(), DeferredResults(approvals={"c1": Approval(True)})
    )
    req = model.requests[0].messages
    assert summary(req) == [
        ("user", "", "clean up"),
        ("assistant", "", ""),
        ("tool", "c1", "deleted"),
        ("tool", "c2", "size=12"),
    ]


async def test_resolutions_follow_the_models_emission_order_not_the_id_order() -> None:
    model = ScriptedModel("ok")
    agent: Agent[Any, str] = Agent(model)
    history = [
        user("go"),
        asst(
            ToolCall("z", "t", "{}"),
            ToolCall("m", "done_already", "{}"),
            ToolCall("a", "t", "{}"),
            ToolCall("q", "done_already", "{}"),
        ),
        tool_msg("q", "done_already", "Q"),
        tool_msg("m", "done_already", "M"),
    ]
    await agent.run_with_deferred_results(
        history, DeferredResults(approvals={"a": Approval(False, "A")}, external={"z": "Z"})
    )
    req = model.requests[0].messages
    assert [m.tool_call_id for m in req[2:]] == ["z", "m", "a", "q"]
    assert req[2].content == "Z"
    assert req[3].content == "M"


@settings(deadline=None)
@given(
    n=st.integers(min_value=1, max_value=7),
    data=st.data(),
)
def test_resolutions_and_recorded_results_always_come_out_in_emission_order(
    n: int, data: st.DataObject
) -> None:
    ids = data.draw(
        st.lists(
            st.text("abcxyz0189-", min_size=1, max_size=6), min_size=n, max_size=n, unique=True
        )
    )
    answered = data.draw(st.lists(st.sampled_from(ids), unique=True, max_size=n - 1))
    recorded_order = data.draw(st.permutations(answered))
    history = [
        user("go"),
        asst(*(ToolCall(i, "t", "{}") for i in ids)),
        *(tool_msg(i, "t", f"recorded {i}") for i in recorded_order),
    ]
    pending = [i for i in ids if i not in answered]
    split = data.draw(st.integers(min_value=0, max_value=len(pending)))
    results = DeferredResults(
        approvals={i: Approval(False) for i in pending[:split]},
        external={i: f"external {i}" for i in pending[split:]},
    )
    model = ScriptedModel("ok")
    agent: Agent[Any, str] = Agent(model)
    asyncio.run(agent.run_with_deferred_results(history, results))
    tools = model.requests[0].messages[2:]
    assert [m.tool_call_id for m in tools] == ids
    for m in tools:
        if m.tool_call_id in answered:
            assert m.content == f"recorded {m.tool_call_id}"
        elif m.tool_call_id in results.external:
            assert m.content == f"external {m.tool_call_id}"
        else:
            assert m.content == DENIED


async def test_only_the_paused_batch_is_pending_and_older_open_calls_are_closed_as_interrupted() -> None:
    # An older turn's unanswered call is not a pending call (it was never paused on): a
    # resolution for it is refused, and the resumed run closes it as any run repairs it.
    model = ScriptedModel("ok")
    agent: Agent[Any, str] = Agent(model)
    history = [
        user("go"),
        asst(ToolCall("old-b", "t", "{}"), ToolCall("old-a", "t", "{}")),
        asst(ToolCall("new-x", "t", "{}"), ToolCall("new-y", "t", "{}")),
        tool_msg("new-y", "t", "Y"),
    ]
    with pytest.raises(ResumeError, match='unknown tool call "old-b"'):
        await agent.run_with_deferred_results(
            history, DeferredResults(external={"old-b": "B", "new-x": "X"})
        )
    assert model.requests == []
    await agent.run_with_deferred_results(history, DeferredResults(external={"new-x": "X"}))
    req = model.requests[0].messages
    assert summary(req) == [
        ("user", "", "go"),
        ("assistant", "", ""),
        ("tool", "old-b", INTERRUPTED),
        ("tool", "old-a", INTERRUPTED),
        ("assistant", "", ""),
        ("tool", "new-x", "X"),
        ("tool", "new-y", "Y"),
    ]


async def test_prompt_is_appended_after_the_resolutions_and_stamped() -> None:
    model = ScriptedModel("ok")
    agent: Agent[Any, str] = Agent(model)
    result = await agent.run_with_deferred_results(
        paused_history(), DeferredResults(external={"c1": "x"}), "now summarize"
    )
    req = model.requests[0].messages
    assert summary(req)[-3:] == [
        ("tool", "c1", "x"),
        ("tool", "c2", "size=12"),
        ("user", "", "now summarize"),
    ]
    assert (req[-1].run_id, req[-1].conversation_id) == (result.run_id, "C1")


async def test_prompt_with_parts_is_appended_after_the_resolutions() -> None:
    from golem import Part

    image = Part(kind="image", url="https://example.com/after.png")
    model = ScriptedModel("ok")
    agent: Agent[Any, str] = Agent(model)
    await agent.run_with_deferred_results(
        paused_history(), DeferredResults(external={"c1": "x"}), ["and this", image]
    )
    last = model.requests[0].messages[-1]
    assert (last.role, last.content, list(last.parts)) == ("user", "and this", [image])


async def test_empty_prompt_adds_no_user_message() -> None:
    model = ScriptedModel("ok")
    agent: Agent[Any, str] = Agent(model)
    await agent.run_with_deferred_results(paused_history(), DeferredResults(external={"c1": "x"}))
    req = model.requests[0].messages
    assert [m.role for m in req] == ["user", "assistant", "tool", "tool"]


async def test_resume_puts_the_resuming_agents_instructions_first_and_drops_old_system() -> None:
    model = ScriptedModel("ok")
    agent: Agent[Any, str] = Agent(model, instructions="new rules")
    history = [Message(role="system", content="old rules"), *paused_history()]
    result = await agent.run_with_deferred_results(history, DeferredResults(external={"c1": "x"}))
    req = model.requests[0].messages
    assert [(m.role, m.content) for m in req[:2]] == [("system", "new rules"), ("user", "clean up")]
    assert not any(m.content == "old rules" for m in result.messages)


# --------------------------------------------------------------------------- continuing


async def test_resumed_run_continues_through_the_ordinary_loop() -> None:
    gate, stat = Gate("delete_file"), Plain("stat_file", "gone")
    model = ScriptedModel(
        tool_turn(ToolCall("c1", "delete_file", "{}")),
        tool_turn(ToolCall("c2", "stat_file", "{}")),
        "all clean",
    )
    agent = Agent(model, tools=[gate.tool(), stat.tool()])
    paused = await agent.run("go")
    resumed = await agent.run_with_deferred_results(
        paused.messages, DeferredResults(approvals={"c1": Approval(True)})
    )
    assert resumed.output == "all clean"
    assert resumed.pending is None
    assert resumed.tool_calls == 2
    assert resumed.requests == 2
    assert stat.calls == 1
    assert summary(resumed.messages)[-4:] == [
        ("tool", "c1", "delete_file: done"),
        ("assistant", "", ""),
        ("tool", "c2", "gone"),
        ("assistant", "", "all clean"),
    ]


async def test_resume_pause_resume_cycle() -> None:
    gate = Gate("delete_file")
    model = ScriptedModel(
        tool_turn(ToolCall("c1", "delete_file", '{"path":"a"}')),
        tool_turn(ToolCall("c2", "delete_file", '{"path":"b"}')),
        "both handled",
    )
    agent = Agent(model, tools=[gate.tool()])
    paused = await agent.run("go")
    again = await agent.run_with_deferred_results(
        paused.messages, DeferredResults(approvals={"c1": Approval(True)})
    )
    assert again.pending == DeferredRequests(
        approvals=[
            PendingToolCall("c2", "delete_file", '{"path":"b"}', "delete_file needs sign-off")
        ]
    )
    assert again.is_paused
    assert again.tool_calls == 1  # the re-run of c1; the new deferral does not count
    final = await agent.run_with_deferred_results(
        again.messages, DeferredResults(approvals={"c2": Approval(False, "keep b")})
    )
    assert final.output == "both handled"
    assert gate.approved_args == [{"path": "a"}]
    assert gate.passes == [False, True, False]
    assert summary(model.requests[-1].messages)[-1][2].startswith(
        "Your tool call was denied: keep b"
    )
    assert final.conversation_id == paused.conversation_id == again.conversation_id
    assert len({paused.run_id, again.run_id, final.run_id}) == 3


async def test_later_model_failure_partial_includes_the_resolutions() -> None:
    gate = Gate("delete_file")
    model = ScriptedModel(tool_turn(ToolCall("c1", "delete_file", "{}")))
    agent = Agent(model, tools=[gate.tool()])
    paused = await agent.run("go")
    model.fail(Overloaded("busy"))
    with pytest.raises(RunError) as info:
        await agent.run_with_deferred_results(
            paused.messages, DeferredResults(approvals={"c1": Approval(True)}), "next"
        )
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


async def test_resumed_run_keeps_conversation_gets_new_run_id_and_stamps_added_messages() -> None:
    model = ScriptedModel("ok")
    agent: Agent[Any, str] = Agent(model)
    history = paused_history()
    result = await agent.run_with_deferred_results(
        history, DeferredResults(external={"c1": "x"}), "more"
    )
    assert result.conversation_id == "C1"
    assert result.run_id
    assert result.run_id != "R1"
    stamps = [(m.role, m.tool_call_id, m.run_id, m.conversation_id) for m in result.messages]
    assert stamps == [
        ("user", "", "R1", "C1"),
        ("assistant", "", "R1", "C1"),
        ("tool", "c1", result.run_id, "C1"),
        ("tool", "c2", "R1", "C1"),
        ("user", "", result.run_id, "C1"),
        ("assistant", "", result.run_id, "C1"),
    ]
    assert history == paused_history()  # the input was not mutated


async def test_resume_accepts_explicit_run_and_conversation_ids() -> None:
    model = ScriptedModel("ok")
    agent: Agent[Any, str] = Agent(model)
    result = await agent.run_with_deferred_results(
        paused_history(), DeferredResults(external={"c1": "x"}), run_id="R2", conversation_id="C9"
    )
    assert (result.run_id, result.conversation_id) == ("R2", "C9")
    resolution = model.requests[0].messages[2]
    assert (resolution.run_id, resolution.conversation_id) == ("R2", "C9")


def test_run_with_deferred_results_sync() -> None:
    model = ScriptedModel("ok")
    agent: Agent[Any, str] = Agent(model)
    result = agent.run_with_deferred_results_sync(
        paused_history(), DeferredResults(approvals={"c1": Approval(False)})
    )
    assert result.output == "ok"
    assert model.requests[0].messages[2].content == DENIED


def test_run_with_deferred_results_sync_raises_resume_error() -> None:
    agent: Agent[Any, str] = Agent(ScriptedModel("ok"))
    with pytest.raises(ResumeError):
        agent.run_with_deferred_results_sync(paused_history(), DeferredResults())


# --------------------------------------------------------------------------- usage accounting


async def test_resumed_result_counts_approved_reruns_not_denials_or_externals() -> None:
    history = [
        user("go"),
        asst(ToolCall("c1", "g", "{}"), ToolCall("c2", "g", "{}"), ToolCall("c3", "g", "{}")),
    ]
    model = ScriptedModel("ok")
    agent = Agent(model, tools=[Gate("g").tool()])
    result = await agent.run_with_deferred_results(
        history,
        DeferredResults(
            approvals={"c1": Approval(True), "c2": Approval(False)}, external={"c3": "e"}
        ),
    )
    assert result.tool_calls == 1


async def test_tool_calls_bound_of_one_is_consumed_by_the_rerun_not_the_pause() -> None:
    gate = Gate("g")
    model = ScriptedModel(tool_turn(ToolCall("c1", "g", "{}")), "fin")
    agent = Agent(model, tools=[gate.tool()], usage_limits=UsageLimits(tool_calls=1))
    paused = await agent.run("go")
    assert paused.pending is not None
    assert paused.tool_calls == 0
    resumed = await agent.run_with_deferred_results(
        paused.messages, DeferredResults(approvals={"c1": Approval(True)})
    )
    assert resumed.output == "fin"
    assert resumed.tool_calls == 1


async def test_tool_calls_bound_of_one_leaves_no_room_after_the_rerun() -> None:
    gate, plain = Gate("g"), Plain("p")
    model = ScriptedModel(
        tool_turn(ToolCall("c1", "g", "{}")), tool_turn(ToolCall("c2", "p", "{}")), "fin"
    )
    agent = Agent(model, tools=[gate.tool(), plain.tool()], usage_limits=UsageLimits(tool_calls=1))
    paused = await agent.run("go")
    with pytest.raises(RunError) as info:
        await agent.run_with_deferred_results(
            paused.messages, DeferredResults(approvals={"c1": Approval(True)})
        )
    assert info.value.stage is Stage.USAGE
    cause = info.value.__cause__
    assert isinstance(cause, UsageLimitExceeded)
    assert (cause.kind, cause.actual) == ("tool call", 2)


async def test_tool_calls_bound_of_zero_on_the_resuming_agent_fails_at_usage_after_the_rerun() -> (
    None
):
    gate = Gate("g")
    paused = await Agent(
        ScriptedModel(tool_turn(ToolCall("c1", "g", "{}"))), tools=[Gate("g").tool()]
    ).run("go")
    model = ScriptedModel("fin")
    agent = Agent(model, tools=[gate.tool()], usage_limits=UsageLimits(tool_calls=0))
    with pytest.raises(RunError) as info:
        await agent.run_with_deferred_results(
            paused.messages, DeferredResults(approvals={"c1": Approval(True)})
        )
    assert info.value.stage is Stage.USAGE
    cause = info.value.__cause__
    assert isinstance(cause, UsageLimitExceeded)
    assert (cause.kind, cause.limit, cause.actual) == ("tool call", 0, 1)
    assert gate.passes == [True]  # the re-run happened before the limit fired
    assert info.value.partial is not None
    assert info.value.partial.tool_calls == 1


async def test_resumed_run_starts_fresh_usage_and_request_counters() -> None:
    model = ScriptedModel(
        tool_turn(ToolCall("c1", "g", "{}"), usage=Usage(100, 10)),
        ModelResponse(Message(role="assistant", content="fin"), Usage(5, 1), "stop"),
    )
    agent = Agent(model, tools=[Gate("g").tool()])
    paused = await agent.run("go")
    resumed = await agent.run_with_deferred_results(
        paused.messages, DeferredResults(approvals={"c1": Approval(True)})
    )
    assert (resumed.usage, resumed.requests, resumed.finish_reason) == (Usage(5, 1), 1, "stop")


# --------------------------------------------------------------------------- across processes


async def test_pause_dump_load_and_resume_on_a_new_agent_instance() -> None:
    deleted: list[str] = []

    def make_agent(model: ScriptedModel) -> Agent[Any, str]:
        # A fresh tool object every time: only the name must match.
        def exec(ctx: RunContext[Any], args: dict[str, Any]) -> str:
            if not call_approved():
                raise Deferred(DeferKind.APPROVAL, "deletes need sign-off")
            deleted.append(args["path"])
            return f"deleted {args['path']}"

        return Agent(
            model,
            tools=[
                Tool("delete_file", "delete", OBJ, exec),
                Tool("stat_file", "stat", OBJ, lambda ctx, args: "size=12"),
            ],
        )

    first = make_agent(
        ScriptedModel(
            tool_turn(
                ToolCall("call-1", "delete_file", '{"path": "a"}'),
                ToolCall("call-2", "stat_file", '{"path": "a"}'),
                ToolCall("call-3", "delete_file", '{"path": "b"}'),
            )
        )
    )
    paused = await first.run("clean up", conversation_id="conv-1")
    assert paused.pending is not None
    stored = dumps_history(paused.messages)
    assert deleted == []

    second_model = ScriptedModel("cleaned a, kept b")
    second = make_agent(second_model)
    resumed = await second.run_with_deferred_results(
        loads_history(stored),
        DeferredResults(
            approvals={"call-1": Approval(True), "call-3": Approval(False, "b is precious")}
        ),
    )
    assert resumed.output == "cleaned a, kept b"
    assert deleted == ["a"]
    assert resumed.conversation_id == "conv-1"
    assert summary(second_model.requests[0].messages)[2:] == [
        ("tool", "call-1", "deleted a"),
        ("tool", "call-2", "size=12"),
        (
            "tool",
            "call-3",
            "Your tool call was denied: b is precious. Do not call it again; continue without its result.",
        ),
    ]


async def test_resume_from_json_text_equals_resume_from_messages() -> None:
    model_a, model_b = ScriptedModel("ok"), ScriptedModel("ok")
    results = DeferredResults(approvals={"c1": Approval(False)})
    await Agent(model_a).run_with_deferred_results(paused_history(), results)
    await Agent(model_b).run_with_deferred_results(
        loads_history(dumps_history(paused_history())), results
    )
    assert summary(model_a.requests[0].messages) == summary(model_b.requests[0].messages)


async def test_plain_run_on_a_paused_history_closes_pending_calls_as_interrupted() -> None:
    gate = Gate("delete_file")
    model = ScriptedModel("I could not delete it")
    agent = Agent(model, tools=[gate.tool()])
    result = await agent.run("what happened?", history=paused_history())
    assert result.pending is None
    assert result.output == "I could not delete it"
    assert gate.passes == []
    req = model.requests[0].messages
    assert summary(req) == [
        ("user", "", "clean up"),
        ("assistant", "", ""),
        ("tool", "c1", INTERRUPTED),
        ("tool", "c2", "size=12"),
        ("user", "", "what happened?"),
    ]
    assert req[2].tool_name == "delete_file"
    # The gate is lost: the repaired history has nothing left to resume.
    with pytest.raises(ResumeError, match="no pending"):
        await agent.run_with_deferred_results(
            result.messages, DeferredResults(approvals={"c1": Approval(True)})
        )
    assert gate.passes == []
