"""Deferred tools, pausing side (issue 3, "API" and "Pausing").

Black-box tests against the public API: a tool raises `Deferred`, the run returns with
`result.pending` set, and everything the issue says about the paused result, mixed batches,
usage accounting, timeouts, cancellation and the turn limit.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st

from golem import (
    Agent,
    Approval,
    DeferredRequests,
    DeferredResults,
    Message,
    PendingToolCall,
    Result,
    RunContext,
    RunError,
    Stage,
    Tool,
    ToolCall,
    Usage,
    UsageLimitExceeded,
    UsageLimits,
)
from golem.model import ModelResponse
from golem.testing import ScriptedModel
from golem.tool import (
    Canceled,
    DeferKind,
    Deferred,
    Failed,
    ModelRetry,
    approved_call,
    call_approved,
    find_signal,
)

pytestmark = pytest.mark.version

INTERRUPTED = (
    "Tool call was interrupted before execution; no result was produced. "
    "Call the tool again if you need its result."
)
OBJ = {"type": "object"}


# --------------------------------------------------------------------------- helpers


def tool_turn(*calls: ToolCall, usage: Usage | None = None, content: str = "") -> ModelResponse:
    """An assistant turn requesting `calls`."""
    return ModelResponse(
        message=Message(role="assistant", content=content, tool_calls=list(calls)),
        usage=usage or Usage(),
        finish_reason="tool_call",
    )


class Gate:
    """A gated tool: defers unless `call_approved()`, records every pass."""

    def __init__(
        self, name: str, kind: DeferKind | str = DeferKind.APPROVAL, reason: str = "needs sign-off"
    ) -> None:
        self.name = name
        self.kind = kind
        self.reason = reason
        self.passes: list[bool] = []
        self.effects: list[dict[str, Any]] = []
        self.threads: list[threading.Thread] = []

    def exec(self, ctx: RunContext[Any], args: dict[str, Any]) -> str:
        self.threads.append(threading.current_thread())
        approved = call_approved()
        self.passes.append(approved)
        if not approved:
            raise Deferred(self.kind, self.reason)
        self.effects.append(args)
        return f"{self.name} done"

    def tool(self) -> Tool:
        return Tool(self.name, f"{self.name} (gated)", OBJ, self.exec)


class Plain:
    """An ordinary tool returning fixed text and counting executions."""

    def __init__(self, name: str, text: str = "ok") -> None:
        self.name = name
        self.text = text
        self.calls: list[dict[str, Any]] = []

    def exec(self, ctx: RunContext[Any], args: dict[str, Any]) -> str:
        self.calls.append(args)
        return self.text

    def tool(self) -> Tool:
        return Tool(self.name, self.name, OBJ, self.exec)


def raising_tool(name: str, make: Callable[[], BaseException]) -> Tool:
    def exec(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        raise make()

    return Tool(name, name, OBJ, exec)


class Strict(pydantic.BaseModel):
    """An output type that cannot be decoded from an empty text."""

    answer: str


# --------------------------------------------------------------------------- kinds


def test_defer_kind_values_are_the_wire_strings() -> None:
    assert DeferKind.APPROVAL == "approval"
    assert DeferKind.EXTERNAL == "external"


def test_deferred_exposes_kind_and_reason() -> None:
    d = Deferred(DeferKind.EXTERNAL, "job-42")
    assert isinstance(d, Exception)
    assert d.kind == DeferKind.EXTERNAL
    assert d.reason == "job-42"
    assert Deferred(DeferKind.APPROVAL).reason == ""


def _direct(kind: DeferKind) -> None:
    raise Deferred(kind, "why")


def _as_cause(kind: DeferKind) -> None:
    raise RuntimeError("wrapped") from Deferred(kind, "why")


def _as_context(kind: DeferKind) -> None:
    try:
        raise Deferred(kind, "why")
    except Deferred:
        raise RuntimeError("while deferring")  # noqa: B904


def _as_deep_cause(kind: DeferKind) -> None:
    try:
        _as_cause(kind)
    except RuntimeError as exc:
        raise LookupError("outer") from exc


@pytest.mark.parametrize("kind", [DeferKind.APPROVAL, DeferKind.EXTERNAL])
@pytest.mark.parametrize("how", [_direct, _as_cause, _as_context, _as_deep_cause])
async def test_tool_defers_directly_or_through_the_exception_chain(
    kind: DeferKind, how: Callable[[DeferKind], None]
) -> None:
    def exec(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        how(kind)
        return "unreachable"

    model = ScriptedModel(tool_turn(ToolCall("c1", "t", "{}")), "never")
    agent = Agent(model, tools=[Tool("t", "t", OBJ, exec)])
    result = await agent.run("go")
    assert result.pending is not None
    group = result.pending.approvals if kind == DeferKind.APPROVAL else result.pending.external
    other = result.pending.external if kind == DeferKind.APPROVAL else result.pending.approvals
    assert group == [PendingToolCall("c1", "t", "{}", "why", kind)]
    assert other == []
    assert len(model.requests) == 1


def test_as_context_helper_really_chains_through_context() -> None:
    # Guard the test helper itself: the Deferred must be reachable only via __context__.
    with pytest.raises(RuntimeError) as info:
        _as_context(DeferKind.APPROVAL)
    assert info.value.__cause__ is None
    assert isinstance(info.value.__context__, Deferred)


async def test_a_signal_replaced_from_none_is_not_a_deferral() -> None:
    """`raise X from None` inside `except Deferred:` replaces the signal (Python's way of
    saying "not caused by this"): the call fails with X, nothing pauses."""

    def exec(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        try:
            raise Deferred(DeferKind.APPROVAL, "why")
        except Deferred:
            raise ModelRetry("no deferring here, try another tool") from None

    model = ScriptedModel(tool_turn(ToolCall("c1", "t", "{}")), "gave up")
    agent = Agent(model, tools=[Tool("t", "t", OBJ, exec, max_retries=1)])
    result = await agent.run("go")
    assert result.pending is None
    assert result.output == "gave up"
    retry = model.requests[1].messages[-1]
    assert retry.role == "tool"
    assert "no deferring here" in retry.content


async def test_a_deferral_inside_a_task_group_pauses_the_call() -> None:
    """A tool that fans out with `asyncio.TaskGroup` gets its subtask's `Deferred` back inside
    an `ExceptionGroup`: the call pauses as if the tool had raised it itself (Go's errors.As
    walks a joined error the same way)."""

    async def exec(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        async def check() -> None:
            raise Deferred(DeferKind.APPROVAL, "needs a human")

        async def lookup() -> None:
            await asyncio.sleep(0)

        async with asyncio.TaskGroup() as group:
            group.create_task(lookup())
            group.create_task(check())
        return "unreachable"

    model = ScriptedModel(tool_turn(ToolCall("c1", "t", "{}")), "never")
    agent = Agent(model, tools=[Tool("t", "t", OBJ, exec)])
    result = await agent.run("go")
    assert result.pending is not None
    assert result.pending.approvals == [
        PendingToolCall("c1", "t", "{}", "needs a human", DeferKind.APPROVAL)
    ]
    assert len(model.requests) == 1


@pytest.mark.parametrize(
    ("group", "stage"),
    [
        # a Canceled deep in a nested group cancels the run
        (
            lambda: ExceptionGroup(
                "outer",
                [KeyError("k"), ExceptionGroup("inner", [ValueError("x"), Canceled("stop")])],
            ),
            Stage.CANCELED,
        ),
        # a group holding no signal is an ordinary tool error
        (lambda: ExceptionGroup("two failures", [ValueError("a"), KeyError("b")]), Stage.TOOL),
    ],
)
async def test_a_group_fails_the_call_as_the_signal_it_holds_or_as_an_error(
    group: Callable[[], ExceptionGroup[Exception]], stage: Stage
) -> None:
    def exec(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        raise group()

    model = ScriptedModel(tool_turn(ToolCall("c1", "t", "{}")), "never")
    agent = Agent(model, tools=[Tool("t", "t", OBJ, exec)])
    with pytest.raises(RunError) as info:
        await agent.run("go")
    assert info.value.stage == stage


async def test_an_approved_rerun_deferring_again_inside_a_group_is_named() -> None:
    """The approved re-run is checked the same way: a `Deferred` inside a group on the
    approved pass is the 'deferred again' error, not a generic failure."""

    async def exec(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        async with asyncio.TaskGroup() as group:
            group.create_task(_defer_now())
        return "unreachable"

    model = ScriptedModel(tool_turn(ToolCall("c1", "t", "{}")), "never")
    agent = Agent(model, tools=[Tool("t", "t", OBJ, exec)])
    paused = await agent.run("go")
    assert paused.pending is not None
    with pytest.raises(RunError) as info:
        await agent.run_with_deferred_results(
            paused.messages, DeferredResults(approvals={"c1": Approval(True)})
        )
    assert info.value.stage == Stage.TOOL
    assert "deferred again" in str(info.value)


async def _defer_now() -> None:
    raise Deferred(DeferKind.APPROVAL, "again")


async def test_deferred_accepts_the_kind_as_a_plain_string() -> None:
    model = ScriptedModel(tool_turn(ToolCall("c1", "t", "{}")))
    agent = Agent(model, tools=[raising_tool("t", lambda: Deferred("external", "job"))])
    result = await agent.run("go")
    assert result.pending == DeferredRequests(
        approvals=[], external=[PendingToolCall("c1", "t", "{}", "job", DeferKind.EXTERNAL)]
    )


@pytest.mark.parametrize("kind", ["", "later", "APPROVAL", "approve", None])
def test_deferred_with_an_invalid_kind_is_a_value_error_listing_the_kinds(kind: Any) -> None:
    with pytest.raises(ValueError, match="got") as info:
        Deferred(kind, "why")
    text = str(info.value)
    assert '"approval"' in text
    assert '"external"' in text
    assert repr(kind) in text


def test_deferred_normalizes_a_plain_string_kind_to_the_enum() -> None:
    signal = Deferred("external", "job")
    assert signal.kind is DeferKind.EXTERNAL
    assert str(signal) == "tool deferred (external): job"


async def test_a_tool_raising_deferred_with_a_bad_kind_fails_at_stage_tool() -> None:
    model = ScriptedModel(tool_turn(ToolCall("c1", "t", "{}")), "never")
    agent = Agent(model, tools=[raising_tool("t", lambda: Deferred("approve"))])
    with pytest.raises(RunError) as info:
        await agent.run("go")
    assert info.value.stage is Stage.TOOL
    assert "Deferred kind must be" in str(info.value)
    assert len(model.requests) == 1


# --------------------------------------------------------------------------- approved marker


def test_call_approved_is_false_outside_any_run() -> None:
    assert call_approved() is False


def test_approved_call_sets_and_restores_the_marker() -> None:
    assert not call_approved()
    with approved_call():
        assert call_approved()
        with approved_call():
            assert call_approved()
        assert call_approved()
    assert not call_approved()


def test_approved_call_restores_the_marker_after_an_exception() -> None:
    with pytest.raises(KeyError), approved_call():
        assert call_approved()
        raise KeyError("boom")
    assert not call_approved()


async def test_approved_call_is_visible_in_worker_threads_and_tasks() -> None:
    with approved_call():
        assert await asyncio.to_thread(call_approved) is True

        async def probe() -> bool:
            return call_approved()

        assert await asyncio.create_task(probe()) is True
    assert await asyncio.to_thread(call_approved) is False


def test_approved_call_lets_the_application_execute_a_pending_call_itself() -> None:
    gate = Gate("delete_file")
    ctx: RunContext[None] = RunContext(None)
    with pytest.raises(Deferred):
        gate.exec(ctx, {"path": "a"})
    with approved_call():
        assert gate.exec(ctx, {"path": "a"}) == "delete_file done"
    assert gate.effects == [{"path": "a"}]
    assert gate.passes == [False, True]


async def test_call_approved_is_false_on_the_pausing_pass_of_a_sync_tool_in_a_worker_thread() -> (
    None
):
    gate = Gate("delete_file")
    model = ScriptedModel(tool_turn(ToolCall("c1", "delete_file", '{"path":"a"}')))
    agent = Agent(model, tools=[gate.tool()])
    result = await agent.run("go")
    assert result.pending is not None
    assert gate.passes == [False]
    assert gate.effects == []
    assert gate.threads[0] is not threading.main_thread()


async def test_call_approved_is_true_on_the_approved_rerun_of_a_sync_tool_in_a_worker_thread() -> (
    None
):
    gate = Gate("delete_file")
    model = ScriptedModel(tool_turn(ToolCall("c1", "delete_file", '{"path":"a"}')), "deleted")
    agent = Agent(model, tools=[gate.tool()])
    paused = await agent.run("go")
    resumed = await agent.run_with_deferred_results(
        paused.messages, DeferredResults(approvals={"c1": Approval(True)})
    )
    assert resumed.output == "deleted"
    assert gate.passes == [False, True]
    assert gate.effects == [{"path": "a"}]
    assert all(t is not threading.main_thread() for t in gate.threads)


async def test_call_approved_is_true_on_the_approved_rerun_of_an_async_tool() -> None:
    seen: list[bool] = []

    async def exec(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        await asyncio.sleep(0)
        seen.append(call_approved())
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL)
        return "done"

    model = ScriptedModel(tool_turn(ToolCall("c1", "t", "{}")), "fin")
    agent = Agent(model, tools=[Tool("t", "t", OBJ, exec)])
    paused = await agent.run("go")
    await agent.run_with_deferred_results(
        paused.messages, DeferredResults(approvals={"c1": Approval(True)})
    )
    assert seen == [False, True]
    assert not call_approved()


async def test_call_approved_is_false_in_an_ordinary_tool_call() -> None:
    seen: list[bool] = []

    def exec(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        seen.append(call_approved())
        return "x"

    model = ScriptedModel(tool_turn(ToolCall("c1", "t", "{}")), "fin")
    await Agent(model, tools=[Tool("t", "t", OBJ, exec)]).run("go")
    assert seen == [False]


# --------------------------------------------------------------------------- mixed batches


async def test_mixed_batch_executes_the_other_calls_and_leaves_the_deferred_call_unanswered() -> (
    None
):
    gate, stat = Gate("delete_file"), Plain("stat_file", "size=12")
    model = ScriptedModel(
        tool_turn(
            ToolCall("c1", "delete_file", '{"path":"a"}'),
            ToolCall("c2", "stat_file", '{"path":"a"}'),
        ),
        "never",
    )
    agent = Agent(model, tools=[gate.tool(), stat.tool()])
    result = await agent.run("clean up", run_id="R1", conversation_id="C1")
    assert result.pending == DeferredRequests(
        approvals=[PendingToolCall("c1", "delete_file", '{"path":"a"}', "needs sign-off")],
        external=[],
    )
    assert stat.calls == [{"path": "a"}]
    assert [m.role for m in result.messages] == ["user", "assistant", "tool"]
    last = result.messages[-1]
    assert (last.tool_call_id, last.tool_name, last.content) == ("c2", "stat_file", "size=12")
    assert (last.run_id, last.conversation_id) == ("R1", "C1")
    assert not any(m.tool_call_id == "c1" for m in result.messages)
    assert model.remaining == 1  # no model call followed the pause


async def test_mixed_batch_with_failed_and_model_retry_siblings_keeps_their_results() -> None:
    gate = Gate("gate")
    model = ScriptedModel(
        tool_turn(
            ToolCall("c1", "failing", "{}"),
            ToolCall("c2", "gate", "{}"),
            ToolCall("c3", "picky", "{}"),
        )
    )
    agent = Agent(
        model,
        tools=[
            raising_tool("failing", lambda: Failed("disk full")),
            gate.tool(),
            raising_tool("picky", lambda: ModelRetry("path is required")),
        ],
        tool_retries=1,
    )
    result = await agent.run("go")
    assert result.pending is not None
    assert [p.call_id for p in result.pending.approvals] == ["c2"]
    tools = [m for m in result.messages if m.role == "tool"]
    assert [(m.tool_call_id, m.failed) for m in tools] == [("c1", True), ("c3", False)]
    assert tools[0].content == "disk full"
    assert tools[1].content == (
        "Your tool call was rejected: path is required. Correct the arguments and call the tool again."
    )
    assert result.tool_calls == 2


async def test_approval_and_external_in_one_batch_are_grouped_in_emission_order() -> None:
    a1 = Gate("approve_a", DeferKind.APPROVAL, "reason a1")
    e1 = Gate("job_e", DeferKind.EXTERNAL, "job-1")
    plain = Plain("plain")
    model = ScriptedModel(
        tool_turn(
            ToolCall("z-e1", "job_e", '{"n":1}'),
            ToolCall("y-a1", "approve_a", '{"n":2}'),
            ToolCall("x-p", "plain", "{}"),
            ToolCall("w-e2", "job_e", '{"n":3}'),
            ToolCall("v-a2", "approve_a", '{"n":4}'),
        )
    )
    agent = Agent(model, tools=[a1.tool(), e1.tool(), plain.tool()])
    result = await agent.run("go")
    assert result.pending == DeferredRequests(
        approvals=[
            PendingToolCall("y-a1", "approve_a", '{"n":2}', "reason a1"),
            PendingToolCall("v-a2", "approve_a", '{"n":4}', "reason a1"),
        ],
        external=[
            PendingToolCall("z-e1", "job_e", '{"n":1}', "job-1", DeferKind.EXTERNAL),
            PendingToolCall("w-e2", "job_e", '{"n":3}', "job-1", DeferKind.EXTERNAL),
        ],
    )
    assert result.tool_calls == 1


async def test_the_same_tool_can_defer_some_calls_and_execute_others() -> None:
    def exec(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        if args["path"].startswith("/etc") and not call_approved():
            raise Deferred(DeferKind.APPROVAL, f"touches {args['path']}")
        return f"deleted {args['path']}"

    model = ScriptedModel(
        tool_turn(
            ToolCall("c1", "rm", '{"path":"/tmp/x"}'), ToolCall("c2", "rm", '{"path":"/etc/y"}')
        )
    )
    result = await Agent(model, tools=[Tool("rm", "rm", OBJ, exec)]).run("go")
    assert result.pending is not None
    assert result.pending.approvals == [
        PendingToolCall("c2", "rm", '{"path":"/etc/y"}', "touches /etc/y")
    ]
    assert [m.content for m in result.messages if m.role == "tool"] == ["deleted /tmp/x"]


@pytest.mark.parametrize(
    "args",
    [
        '{ "path" :\n\t"a  b" ,  "n" : 1.50 }',
        '{"z":1,"a":2}',
        '{"u":"\\u00e9\\n<&>"}',
        "  {}  ",
    ],
)
async def test_pending_args_are_the_raw_text_byte_exact(args: str) -> None:
    gate = Gate("t")
    model = ScriptedModel(tool_turn(ToolCall("c1", "t", args)))
    result = await Agent(model, tools=[gate.tool()]).run("go")
    assert result.pending is not None
    assert result.pending.approvals[0].args == args
    # The paused evidence keeps the call's args verbatim too.
    assert result.messages[-1].tool_calls[0].args == args


# --------------------------------------------------------------------------- every variant pauses


def _pausing_agent(output_type: Any = Strict) -> tuple[Agent[Any, Any], ScriptedModel, Gate]:
    gate = Gate("delete_file")
    model = ScriptedModel(
        tool_turn(ToolCall("c1", "delete_file", '{"path":"a"}'), usage=Usage(7, 3)),
        "never decoded",
    )
    return Agent(model, output_type=output_type, tools=[gate.tool()]), model, gate


def _assert_paused(result: Result[Any], model: ScriptedModel) -> None:
    assert result.is_paused
    assert result.pending == DeferredRequests(
        approvals=[PendingToolCall("c1", "delete_file", '{"path":"a"}', "needs sign-off")]
    )
    assert model.remaining == 1
    assert result.messages[-1].tool_calls[0].id == "c1"


async def test_run_pauses_without_decoding_the_output() -> None:
    agent, model, _ = _pausing_agent()
    _assert_paused(await agent.run("go"), model)


def test_run_sync_pauses_without_decoding_the_output() -> None:
    agent, model, _ = _pausing_agent()
    _assert_paused(agent.run_sync("go"), model)


async def test_run_with_history_pauses_without_decoding_the_output() -> None:
    agent, model, _ = _pausing_agent()
    history = [Message(role="user", content="earlier"), Message(role="assistant", content="hi")]
    result = await agent.run("go", history=history)
    _assert_paused(result, model)
    assert [m.content for m in result.messages[:3]] == ["earlier", "hi", "go"]


@pytest.mark.parametrize("with_history", [False, True])
async def test_run_stream_pauses_without_decoding_the_output(with_history: bool) -> None:
    agent, model, _ = _pausing_agent()
    history = [Message(role="user", content="earlier"), Message(role="assistant", content="hi")]
    async with agent.run_stream("go", history=history if with_history else None) as stream:
        items = [item async for item in stream]
    result = stream.result
    _assert_paused(result, model)
    assert items  # the pausing turn was streamed
    assert result.usage == Usage(7, 3)
    assert result.requests == 1


async def test_resumed_run_that_pauses_again_does_not_decode_either() -> None:
    gate = Gate("delete_file")
    model = ScriptedModel(
        tool_turn(ToolCall("c1", "delete_file", '{"path":"a"}')),
        tool_turn(ToolCall("c2", "delete_file", '{"path":"b"}')),
        "never decoded",
    )
    agent = Agent(model, output_type=Strict, tools=[gate.tool()])
    paused = await agent.run("go")
    again = await agent.run_with_deferred_results(
        paused.messages, DeferredResults(approvals={"c1": Approval(True)})
    )
    assert again.is_paused
    assert again.pending == DeferredRequests(
        approvals=[PendingToolCall("c2", "delete_file", '{"path":"b"}', "needs sign-off")]
    )
    assert model.remaining == 1


async def test_output_decoder_never_runs_on_a_pause_even_with_decodable_text() -> None:
    decoded: list[Any] = []

    class Counting(pydantic.BaseModel):
        answer: str

        @pydantic.model_validator(mode="before")
        @classmethod
        def count(cls, data: Any) -> Any:
            decoded.append(data)
            return data

    gate = Gate("t")
    model = ScriptedModel(
        tool_turn(ToolCall("c1", "t", "{}"), content='{"answer": "premature"}'),
        '{"answer": "final"}',
    )
    agent = Agent(model, output_type=Counting, tools=[gate.tool()])
    paused = await agent.run("go")
    assert paused.is_paused
    assert decoded == []
    # The same decoder does run on the final answer after resuming (the probe is live).
    resumed = await agent.run_with_deferred_results(
        paused.messages, DeferredResults(approvals={"c1": Approval(True)})
    )
    assert decoded == [{"answer": "final"}]
    assert isinstance(resumed.output, Counting)
    assert resumed.output.answer == "final"


async def test_paused_result_fills_usage_requests_finish_reason_identity_and_cost() -> None:
    gate, plain = Gate("gate"), Plain("plain")
    model = ScriptedModel(
        tool_turn(ToolCall("c0", "plain", "{}"), usage=Usage(10, 2)),
        tool_turn(ToolCall("c1", "gate", "{}"), usage=Usage(5, 1, cache_read_tokens=4)),
    )
    agent = Agent(
        model,
        instructions="be careful",
        tools=[gate.tool(), plain.tool()],
        price=lambda u: u.input_tokens * 0.5 + u.output_tokens,
    )
    result = await agent.run("go", run_id="run-1", conversation_id="conv-1")
    assert result.pending is not None
    assert result.usage == Usage(15, 3, cache_read_tokens=4)
    assert result.requests == 2
    assert result.tool_calls == 1
    assert result.finish_reason == "tool_call"
    assert result.cost == pytest.approx(15 * 0.5 + 3)
    assert (result.run_id, result.conversation_id) == ("run-1", "conv-1")
    assert [m.role for m in result.messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert result.messages[0].content == "be careful"
    for m in result.messages[1:]:
        assert (m.run_id, m.conversation_id) == ("run-1", "conv-1")


async def test_paused_result_mints_identity_when_none_is_given() -> None:
    agent, _, _ = _pausing_agent(str)
    result = await agent.run("go")
    assert result.run_id
    assert result.conversation_id
    assert result.run_id != result.conversation_id
    assert all(m.run_id == result.run_id for m in result.messages)


async def test_plain_run_without_deferral_has_no_pending() -> None:
    model = ScriptedModel(tool_turn(ToolCall("c1", "p", "{}")), "fin")
    result = await Agent(model, tools=[Plain("p").tool()]).run("go")
    assert result.pending is None
    assert result.output == "fin"


# --------------------------------------------------------------------------- usage accounting


async def test_deferrals_do_not_count_as_tool_calls() -> None:
    model = ScriptedModel(
        tool_turn(ToolCall("c1", "g", "{}"), ToolCall("c2", "g", "{}"), ToolCall("c3", "p", "{}"))
    )
    result = await Agent(model, tools=[Gate("g").tool(), Plain("p").tool()]).run("go")
    assert result.pending is not None
    assert len(result.pending.approvals) == 2
    assert result.tool_calls == 1


async def test_deferrals_do_not_count_against_a_tool_calls_limit() -> None:
    model = ScriptedModel(tool_turn(ToolCall("c1", "g", "{}"), ToolCall("c2", "g", "{}")))
    agent = Agent(model, tools=[Gate("g").tool()], usage_limits=UsageLimits(tool_calls=0))
    result = await agent.run("go")
    assert result.pending is not None
    assert result.tool_calls == 0


async def test_executed_sibling_of_a_pause_counts_against_a_tool_calls_limit() -> None:
    plain = Plain("p", "size=12")
    model = ScriptedModel(tool_turn(ToolCall("c1", "g", "{}"), ToolCall("c2", "p", "{}")))
    agent = Agent(
        model, tools=[Gate("g").tool(), plain.tool()], usage_limits=UsageLimits(tool_calls=0)
    )
    with pytest.raises(RunError) as info:
        await agent.run("go")
    assert info.value.stage is Stage.USAGE
    cause = info.value.__cause__
    assert isinstance(cause, UsageLimitExceeded)
    assert (cause.kind, cause.limit, cause.actual) == ("tool call", 0, 1)
    partial = info.value.partial
    assert partial is not None
    assert partial.tool_calls == 1
    assert partial.messages[-1].content == "size=12"


async def test_token_limit_crossed_by_the_pausing_turn_fails_at_stage_usage() -> None:
    model = ScriptedModel(tool_turn(ToolCall("c1", "g", "{}"), usage=Usage(3, 50)))
    agent = Agent(model, tools=[Gate("g").tool()], usage_limits=UsageLimits(output_tokens=10))
    with pytest.raises(RunError) as info:
        await agent.run("go")
    assert info.value.stage is Stage.USAGE
    assert isinstance(info.value.__cause__, UsageLimitExceeded)
    assert info.value.__cause__.kind == "output token"
    assert info.value.partial is not None
    assert info.value.partial.usage == Usage(3, 50)


async def test_request_limit_at_exactly_the_pausing_turn_still_pauses() -> None:
    model = ScriptedModel(
        tool_turn(ToolCall("c0", "p", "{}")), tool_turn(ToolCall("c1", "g", "{}"))
    )
    agent = Agent(
        model,
        tools=[Gate("g").tool(), Plain("p").tool()],
        usage_limits=UsageLimits(requests=2),
    )
    result = await agent.run("go")
    assert result.pending is not None
    assert result.requests == 2


# --------------------------------------------------------------------------- timeout, cancel, turns


async def test_timeout_expiring_while_an_async_deferring_tool_runs_is_a_timeout() -> None:
    async def slow_defer(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        await asyncio.sleep(5)
        raise Deferred(DeferKind.APPROVAL)

    model = ScriptedModel(tool_turn(ToolCall("c1", "t", "{}")), "never")
    agent = Agent(model, tools=[Tool("t", "t", OBJ, slow_defer)], tool_timeout=0.01)
    with pytest.raises(RunError) as info:
        await agent.run("go")
    assert info.value.stage is Stage.TOOL
    assert isinstance(info.value.__cause__, TimeoutError)
    assert model.remaining == 1


async def test_sync_tool_that_defers_after_its_timeout_is_a_timeout_not_a_pause() -> None:
    def slow_defer(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        time.sleep(0.05)
        raise Deferred(DeferKind.EXTERNAL, "job")

    model = ScriptedModel(tool_turn(ToolCall("c1", "t", "{}")), "never")
    agent = Agent(model, tools=[Tool("t", "t", OBJ, slow_defer, timeout=0.01)])
    with pytest.raises(RunError) as info:
        await agent.run("go")
    assert info.value.stage is Stage.TOOL
    assert isinstance(info.value.__cause__, TimeoutError)


async def test_deferring_tool_within_its_timeout_pauses() -> None:
    model = ScriptedModel(tool_turn(ToolCall("c1", "g", "{}")))
    agent = Agent(model, tools=[Gate("g").tool()], tool_timeout=30)
    result = await agent.run("go")
    assert result.pending is not None


def _closing_messages(messages: list[Message], ids: list[str]) -> list[Message]:
    tools = [m for m in messages if m.role == "tool"]
    assert [m.tool_call_id for m in tools] == ids
    return tools


async def test_canceled_in_the_same_batch_wins_over_the_pause_sequential() -> None:
    gate = Gate("g")
    model = ScriptedModel(
        tool_turn(
            ToolCall("c1", "p", "{}"),
            ToolCall("c2", "g", "{}"),
            ToolCall("c3", "stop", "{}"),
            ToolCall("c4", "p", "{}"),
        ),
        "never",
    )
    plain = Plain("p", "ran")
    agent = Agent(
        model, tools=[gate.tool(), plain.tool(), raising_tool("stop", lambda: Canceled("halt"))]
    )
    events: list[str] = []
    with pytest.raises(RunError) as info:
        await agent.run(
            "go", run_id="R", conversation_id="C", on_event=lambda e: events.append(e.kind)
        )
    err = info.value
    assert err.stage is Stage.CANCELED
    assert isinstance(err.__cause__, Canceled)
    assert err.__cause__.reason == "halt"
    assert model.remaining == 1
    assert err.partial is not None
    closing = _closing_messages(err.partial.messages, ["c1", "c2", "c3", "c4"])
    assert closing[0].content == "ran"
    for m in closing[1:]:
        assert m.content == INTERRUPTED
        assert (m.run_id, m.conversation_id) == ("R", "C")
    assert "canceled" in events
    assert len(plain.calls) == 1  # c4 never started


async def test_canceled_in_the_same_batch_wins_over_the_pause_parallel() -> None:
    plain = Plain("p", "ran")
    model = ScriptedModel(
        tool_turn(
            ToolCall("c1", "p", "{}"),
            ToolCall("c2", "g", "{}"),
            ToolCall("c3", "stop", "{}"),
            ToolCall("c4", "p", "{}"),
        ),
        "never",
    )
    agent = Agent(
        model,
        tools=[Gate("g").tool(), plain.tool(), raising_tool("stop", lambda: Canceled("halt"))],
        parallel_tool_calls=True,
    )
    with pytest.raises(RunError) as info:
        await agent.run("go")
    err = info.value
    assert err.stage is Stage.CANCELED
    assert err.partial is not None
    closing = _closing_messages(err.partial.messages, ["c1", "c2", "c3", "c4"])
    assert [m.content for m in closing] == ["ran", INTERRUPTED, INTERRUPTED, INTERRUPTED]


async def test_canceled_before_a_deferral_in_emission_order_also_wins() -> None:
    gate = Gate("g")
    model = ScriptedModel(tool_turn(ToolCall("c1", "stop", "{}"), ToolCall("c2", "g", "{}")))
    agent = Agent(model, tools=[gate.tool(), raising_tool("stop", lambda: Canceled())])
    with pytest.raises(RunError) as info:
        await agent.run("go")
    assert info.value.stage is Stage.CANCELED
    assert info.value.partial is not None
    closing = _closing_messages(info.value.partial.messages, ["c1", "c2"])
    assert [m.content for m in closing] == [INTERRUPTED, INTERRUPTED]
    assert gate.passes == []


async def test_pause_on_the_last_allowed_turn_is_a_pause() -> None:
    model = ScriptedModel(tool_turn(ToolCall("c1", "g", "{}")))
    agent = Agent(model, tools=[Gate("g").tool()], max_iterations=1)
    result = await agent.run("go")
    assert result.pending is not None


async def test_pause_on_the_last_of_several_allowed_turns_is_a_pause() -> None:
    model = ScriptedModel(
        tool_turn(ToolCall("c0", "p", "{}")),
        tool_turn(ToolCall("c1", "p", "{}")),
        tool_turn(ToolCall("c2", "g", "{}")),
    )
    agent = Agent(model, tools=[Gate("g").tool(), Plain("p").tool()], max_iterations=3)
    result = await agent.run("go")
    assert result.pending is not None
    assert result.requests == 3


async def test_the_turn_limit_still_applies_without_a_pause() -> None:
    # Control for the two tests above: one more turn than allowed is a loop error.
    model = ScriptedModel(
        tool_turn(ToolCall("c0", "p", "{}")), tool_turn(ToolCall("c1", "g", "{}"))
    )
    agent = Agent(model, tools=[Gate("g").tool(), Plain("p").tool()], max_iterations=1)
    with pytest.raises(RunError) as info:
        await agent.run("go")
    assert info.value.stage is Stage.LOOP


async def test_unknown_tool_in_a_batch_fails_before_anything_can_defer() -> None:
    gate = Gate("g")
    model = ScriptedModel(tool_turn(ToolCall("c1", "g", "{}"), ToolCall("c2", "nope", "{}")))
    agent = Agent(model, tools=[gate.tool()])
    with pytest.raises(RunError) as info:
        await agent.run("go")
    assert info.value.stage is Stage.TOOL
    assert gate.passes == []


async def test_pause_inside_an_output_correction_round_is_a_pause() -> None:
    gate = Gate("g")
    model = ScriptedModel(
        "not json at all", tool_turn(ToolCall("c1", "g", "{}")), '{"answer": "fixed"}'
    )
    agent = Agent(model, output_type=Strict, output_retries=1, tools=[gate.tool()])
    paused = await agent.run("go")
    assert paused.is_paused
    assert paused.pending is not None
    assert [p.call_id for p in paused.pending.approvals] == ["c1"]
    assert paused.requests == 2
    resumed = await agent.run_with_deferred_results(
        paused.messages, DeferredResults(approvals={"c1": Approval(True)})
    )
    assert resumed.output == Strict(answer="fixed")


async def test_timeout_of_a_sibling_beats_a_deferral_in_the_same_parallel_batch() -> None:
    async def slow(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        await asyncio.sleep(5)
        return "late"

    model = ScriptedModel(tool_turn(ToolCall("c1", "g", "{}"), ToolCall("c2", "slow", "{}")))
    agent = Agent(
        model,
        tools=[Gate("g").tool(), Tool("slow", "slow", OBJ, slow, timeout=0.01)],
        parallel_tool_calls=True,
    )
    with pytest.raises(RunError) as info:
        await agent.run("go")
    assert info.value.stage is Stage.TOOL
    assert isinstance(info.value.__cause__, TimeoutError)


# --------------------------------------------------------------------------- find_signal over trees


@st.composite
def _exception_trees(draw: st.DrawFn, depth: int = 0) -> BaseException:
    """An exception with, at random, a cause or a (possibly suppressed) context, or a group of
    such exceptions; leaves are `Deferred`, `Canceled` or plain errors."""
    leaf = st.sampled_from(
        [
            lambda: Deferred(DeferKind.APPROVAL, "d"),
            lambda: Canceled("c"),
            lambda: ValueError("v"),
            lambda: KeyError("k"),
        ]
    )
    if depth >= 3 or draw(st.booleans()):
        exc: BaseException = draw(leaf)()
    else:
        members = draw(st.lists(_exception_trees(depth + 1), min_size=1, max_size=3))
        exc = ExceptionGroup("g", [m for m in members if isinstance(m, Exception)] or [ValueError()])
    link = draw(st.sampled_from(["none", "cause", "context", "suppressed"]))
    if link != "none" and depth < 3:
        other = draw(_exception_trees(depth + 1))
        if link == "cause":
            exc.__cause__ = other
        else:
            exc.__context__ = other
            exc.__suppress_context__ = link == "suppressed"
    return exc


def _first_in_preorder(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    """The reference: the exception itself, then its group members in order, then its chain."""
    if isinstance(exc, kind):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for member in exc.exceptions:
            found = _first_in_preorder(member, kind)
            if found is not None:
                return found
    nxt = exc.__cause__
    if nxt is None and not exc.__suppress_context__:
        nxt = exc.__context__
    return None if nxt is None else _first_in_preorder(nxt, kind)


@given(_exception_trees())
def test_find_signal_is_the_first_signal_in_preorder_over_chains_and_groups(
    exc: BaseException,
) -> None:
    for kind in (Deferred, Canceled):
        assert find_signal(exc, kind) is _first_in_preorder(exc, kind)
