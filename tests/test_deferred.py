"""Pausing (issue 3): a tool raises `Deferred`, the run returns with `result.pending` set —
the paused result, mixed batches, usage accounting, timeouts, cancellation, the turn limit
and the approved-call marker."""

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
APPROVE_C1 = DeferredResults(approvals={"c1": Approval(True)})


def tool_turn(*calls: ToolCall, usage: Usage | None = None, content: str = "") -> ModelResponse:
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
        self.name, self.kind, self.reason = name, kind, reason
        self.passes: list[bool] = []
        self.effects: list[dict[str, Any]] = []
        self.threads: list[threading.Thread] = []

    def exec(self, ctx: RunContext[Any], args: dict[str, Any]) -> str:
        self.threads.append(threading.current_thread())
        self.passes.append(call_approved())
        if not call_approved():
            raise Deferred(self.kind, self.reason)
        self.effects.append(args)
        return f"{self.name} done"

    def tool(self) -> Tool:
        return Tool(self.name, f"{self.name} (gated)", OBJ, self.exec)


class Plain:
    """An ordinary tool returning fixed text and counting executions."""

    def __init__(self, name: str, text: str = "ok") -> None:
        self.name, self.text = name, text
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


# --------------------------------------------------------------------------- how a tool defers


def _as_context(kind: DeferKind) -> None:
    try:
        raise Deferred(kind, "why")
    except Deferred:
        raise RuntimeError("while deferring")  # noqa: B904


def _as_deep_cause(kind: DeferKind) -> None:
    try:
        raise RuntimeError("wrapped") from Deferred(kind, "why")
    except RuntimeError as exc:
        raise LookupError("outer") from exc


async def _in_a_task_group(kind: DeferKind) -> None:
    async def check() -> None:
        raise Deferred(kind, "why")

    async with asyncio.TaskGroup() as group:
        group.create_task(asyncio.sleep(0))
        group.create_task(check())


def _direct(kind: DeferKind) -> None:
    raise Deferred(kind, "why")


def _plain_string_kind(kind: DeferKind) -> None:
    raise Deferred(kind.value, "why")


def _as_cause(kind: DeferKind) -> None:
    raise RuntimeError("wrapped") from Deferred(kind, "why")


DEFERRING: dict[str, Callable[[DeferKind], Any]] = {
    "direct": _direct,
    "plain-string-kind": _plain_string_kind,
    "as-cause": _as_cause,
    "as-context": _as_context,
    "as-deep-cause": _as_deep_cause,
    "in-a-task-group": _in_a_task_group,
}


@pytest.mark.parametrize("kind", list(DeferKind))
@pytest.mark.parametrize("how", list(DEFERRING))
async def test_a_tool_defers_directly_or_through_the_exception_chain_or_a_group(
    kind: DeferKind, how: str
) -> None:
    async def exec(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        made = DEFERRING[how](kind)
        if asyncio.iscoroutine(made):
            await made
        return "unreachable"

    model = ScriptedModel(tool_turn(ToolCall("c1", "t", "{}")), "never")
    result = await Agent(model, tools=[Tool("t", "t", OBJ, exec)]).run("go")
    assert result.pending is not None
    pending = [PendingToolCall("c1", "t", "{}", "why", kind)]
    assert (result.pending.approvals, result.pending.external) == (
        (pending, []) if kind is DeferKind.APPROVAL else ([], pending)
    )
    assert len(model.requests) == 1


def test_deferred_carries_its_kind_and_reason_and_refuses_other_kinds() -> None:
    assert (DeferKind.APPROVAL, DeferKind.EXTERNAL) == ("approval", "external")
    d = Deferred("external", "job-42")
    assert (d.kind, d.reason, str(d)) == (
        DeferKind.EXTERNAL,
        "job-42",
        "tool deferred (external): job-42",
    )
    assert d.kind is DeferKind.EXTERNAL
    assert isinstance(d, Exception)
    assert Deferred(DeferKind.APPROVAL).reason == ""
    for kind in ["", "later", "APPROVAL", "approve", None]:
        with pytest.raises(ValueError, match="got") as info:
            Deferred(kind, "why")  # type: ignore[arg-type]
        assert '"approval"' in str(info.value)
        assert '"external"' in str(info.value)
        assert repr(kind) in str(info.value)


@pytest.mark.parametrize(
    ("make", "stage", "text"),
    [
        (lambda: Deferred("approve"), Stage.TOOL, "Deferred kind must be"),
        (
            lambda: ExceptionGroup(
                "outer",
                [KeyError("k"), ExceptionGroup("inner", [ValueError("x"), Canceled("stop")])],
            ),
            Stage.CANCELED,
            "",
        ),
        (lambda: ExceptionGroup("two failures", [ValueError("a"), KeyError("b")]), Stage.TOOL, ""),
    ],
    ids=["bad-kind", "canceled-deep-in-a-group", "group-without-a-signal"],
)
async def test_a_call_that_cannot_pause_fails_as_the_signal_it_holds_or_as_an_error(
    make: Callable[[], BaseException], stage: Stage, text: str
) -> None:
    model = ScriptedModel(tool_turn(ToolCall("c1", "t", "{}")), "never")
    with pytest.raises(RunError, match=text or None) as info:
        await Agent(model, tools=[raising_tool("t", make)]).run("go")
    assert info.value.stage is stage
    assert len(model.requests) == 1


async def test_a_signal_replaced_from_none_is_not_a_deferral() -> None:
    """`raise X from None` inside `except Deferred:` replaces the signal: nothing pauses."""

    def exec(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        try:
            raise Deferred(DeferKind.APPROVAL, "why")
        except Deferred:
            raise ModelRetry("no deferring here, try another tool") from None

    model = ScriptedModel(tool_turn(ToolCall("c1", "t", "{}")), "gave up")
    result = await Agent(model, tools=[Tool("t", "t", OBJ, exec, max_retries=1)]).run("go")
    assert (result.pending, result.output) == (None, "gave up")
    assert "no deferring here" in model.requests[1].messages[-1].content


async def test_an_approved_rerun_deferring_again_inside_a_group_is_named() -> None:
    async def exec(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        await _in_a_task_group(DeferKind.APPROVAL)
        return "unreachable"

    agent = Agent(
        ScriptedModel(tool_turn(ToolCall("c1", "t", "{}"))), tools=[Tool("t", "t", OBJ, exec)]
    )
    paused = await agent.run("go")
    with pytest.raises(RunError, match="deferred again") as info:
        await agent.run_with_deferred_results(paused.messages, APPROVE_C1)
    assert info.value.stage == Stage.TOOL


@st.composite
def _exception_trees(draw: st.DrawFn, depth: int = 0) -> BaseException:
    """An exception with a cause or a (possibly suppressed) context, or a group of such;
    leaves are `Deferred`, `Canceled` or plain errors."""
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
        exc = ExceptionGroup(
            "g", [m for m in members if isinstance(m, Exception)] or [ValueError()]
        )
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
    """The reference: the exception, then its group members in order, then its chain."""
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


# --------------------------------------------------------------------------- the approved marker


async def test_approved_call_sets_and_restores_the_marker_everywhere_it_is_read() -> None:
    assert call_approved() is False
    with approved_call():
        assert call_approved()
        with approved_call():
            assert call_approved()
        assert call_approved()
        assert await asyncio.to_thread(call_approved) is True

        async def probe() -> bool:
            return call_approved()

        assert await asyncio.create_task(probe()) is True
    assert not call_approved()
    assert await asyncio.to_thread(call_approved) is False
    with pytest.raises(KeyError), approved_call():
        raise KeyError("boom")
    assert not call_approved()
    gate = Gate("delete_file")  # the application executes a pending call itself
    with pytest.raises(Deferred):
        gate.exec(RunContext(None), {"path": "a"})
    with approved_call():
        assert gate.exec(RunContext(None), {"path": "a"}) == "delete_file done"
    assert (gate.effects, gate.passes) == ([{"path": "a"}], [False, True])


@pytest.mark.parametrize("sync", [True, False])
async def test_call_approved_is_true_only_on_the_approved_rerun(sync: bool) -> None:
    gate = Gate("delete_file")
    seen: list[bool] = []

    async def async_exec(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        await asyncio.sleep(0)
        seen.append(call_approved())
        return gate.exec(ctx, args)

    def plain(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        seen.append(call_approved())
        return "x"

    tool = gate.tool() if sync else Tool("delete_file", "d", OBJ, async_exec)
    model = ScriptedModel(
        tool_turn(ToolCall("c0", "plain", "{}"), ToolCall("c1", "delete_file", '{"path":"a"}')),
        "deleted",
    )
    agent = Agent(model, tools=[tool, Tool("plain", "p", OBJ, plain)])
    paused = await agent.run("go")
    assert (gate.passes, gate.effects) == ([False], [])
    resumed = await agent.run_with_deferred_results(paused.messages, APPROVE_C1)
    assert resumed.output == "deleted"
    assert (gate.passes, gate.effects) == ([False, True], [{"path": "a"}])
    if sync:  # a sync tool runs in a worker thread, both passes
        assert all(t is not threading.main_thread() for t in gate.threads)
    else:
        assert seen == [False, False, True]
    assert not call_approved()


# --------------------------------------------------------------------------- batches


async def test_a_mixed_batch_runs_the_other_calls_and_leaves_the_deferred_one_unanswered() -> None:
    gate, stat = Gate("delete_file"), Plain("stat_file", "size=12")
    calls = (
        ToolCall("c1", "delete_file", '{"path":"a"}'),
        ToolCall("c2", "stat_file", '{"path":"a"}'),
    )
    model = ScriptedModel(tool_turn(*calls), "never")
    result = await Agent(model, tools=[gate.tool(), stat.tool()]).run(
        "clean up", run_id="R1", conversation_id="C1"
    )
    assert result.pending == DeferredRequests(
        approvals=[PendingToolCall("c1", "delete_file", '{"path":"a"}', "needs sign-off")]
    )
    assert stat.calls == [{"path": "a"}]
    assert [m.role for m in result.messages] == ["user", "assistant", "tool"]
    last = result.messages[-1]
    assert (last.tool_call_id, last.tool_name, last.content) == ("c2", "stat_file", "size=12")
    assert (last.run_id, last.conversation_id) == ("R1", "C1")
    assert model.remaining == 1  # no model call followed the pause


async def test_failed_and_model_retry_siblings_of_a_pause_keep_their_results() -> None:
    model = ScriptedModel(
        tool_turn(
            ToolCall("c1", "failing", "{}"),
            ToolCall("c2", "gate", "{}"),
            ToolCall("c3", "picky", "{}"),
        )
    )
    tools = [
        raising_tool("failing", lambda: Failed("disk full")),
        Gate("gate").tool(),
        raising_tool("picky", lambda: ModelRetry("path is required")),
    ]
    result = await Agent(model, tools=tools, tool_retries=1).run("go")
    assert result.pending is not None
    assert [p.call_id for p in result.pending.approvals] == ["c2"]
    answers = [(m.tool_call_id, m.failed, m.content) for m in result.messages if m.role == "tool"]
    assert answers == [
        ("c1", True, "disk full"),
        (
            "c3",
            False,
            "Your tool call was rejected: path is required. Correct the arguments and call the tool again.",
        ),
    ]
    assert result.tool_calls == 2


async def test_approvals_and_external_calls_are_grouped_in_emission_order() -> None:
    model = ScriptedModel(
        tool_turn(
            ToolCall("z-e1", "job_e", '{"n":1}'),
            ToolCall("y-a1", "approve_a", '{"n":2}'),
            ToolCall("x-p", "plain", "{}"),
            ToolCall("w-e2", "job_e", '{"n":3}'),
            ToolCall("v-a2", "approve_a", '{"n":4}'),
        )
    )
    tools = [
        Gate("approve_a", reason="reason a1").tool(),
        Gate("job_e", DeferKind.EXTERNAL, "job-1").tool(),
        Plain("plain").tool(),
    ]
    result = await Agent(model, tools=tools).run("go")
    ext = DeferKind.EXTERNAL
    assert result.pending == DeferredRequests(
        approvals=[
            PendingToolCall("y-a1", "approve_a", '{"n":2}', "reason a1"),
            PendingToolCall("v-a2", "approve_a", '{"n":4}', "reason a1"),
        ],
        external=[
            PendingToolCall("z-e1", "job_e", '{"n":1}', "job-1", ext),
            PendingToolCall("w-e2", "job_e", '{"n":3}', "job-1", ext),
        ],
    )
    assert result.tool_calls == 1  # deferrals are no tool calls


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
    ['{ "path" :\n\t"a  b" ,  "n" : 1.50 }', '{"z":1,"a":2}', '{"u":"\\u00e9\\n<&>"}', "  {}  "],
)
async def test_pending_args_are_the_raw_text_byte_exact(args: str) -> None:
    result = await Agent(
        ScriptedModel(tool_turn(ToolCall("c1", "t", args))), tools=[Gate("t").tool()]
    ).run("go")
    assert result.pending is not None
    assert result.pending.approvals[0].args == result.messages[-1].tool_calls[0].args == args


# --------------------------------------------------------------------------- every entry point pauses

HISTORY = [Message(role="user", content="earlier"), Message(role="assistant", content="hi")]


@pytest.mark.parametrize(
    "entry", ["run", "run_sync", "history", "stream", "stream-history", "resumed"]
)
async def test_every_entry_point_pauses_without_decoding_the_output(entry: str) -> None:
    first = [tool_turn(ToolCall("c0", "delete_file", '{"path":"0"}'))] if entry == "resumed" else []
    model = ScriptedModel(
        *first,
        tool_turn(ToolCall("c1", "delete_file", '{"path":"a"}'), usage=Usage(7, 3)),
        "never decoded",
    )
    agent = Agent(model, output_type=Strict, tools=[Gate("delete_file").tool()])
    if entry == "run_sync":
        result = await asyncio.to_thread(agent.run_sync, "go")
    elif entry.startswith("stream"):
        async with agent.run_stream(
            "go", history=HISTORY if entry.endswith("history") else None
        ) as stream:
            assert [item async for item in stream]  # the pausing turn was streamed
        result = stream.result
    elif entry == "resumed":
        paused = await agent.run("go")
        result = await agent.run_with_deferred_results(
            paused.messages, DeferredResults(approvals={"c0": Approval(True)})
        )
    else:
        result = await agent.run("go", history=HISTORY if entry == "history" else None)
    assert result.is_paused
    assert result.pending == DeferredRequests(
        approvals=[PendingToolCall("c1", "delete_file", '{"path":"a"}', "needs sign-off")]
    )
    assert model.remaining == 1
    assert result.messages[-1].tool_calls[0].id == "c1"
    assert (result.usage, result.requests) == (Usage(7, 3), 1)
    if entry.endswith("history"):
        assert [m.content for m in result.messages[:3]] == ["earlier", "hi", "go"]


async def test_the_output_decoder_never_runs_on_a_pause_even_with_decodable_text() -> None:
    decoded: list[Any] = []

    class Counting(pydantic.BaseModel):
        answer: str

        @pydantic.model_validator(mode="before")
        @classmethod
        def count(cls, data: Any) -> Any:
            decoded.append(data)
            return data

    model = ScriptedModel(
        tool_turn(ToolCall("c1", "t", "{}"), content='{"answer": "premature"}'),
        '{"answer": "final"}',
    )
    agent = Agent(model, output_type=Counting, tools=[Gate("t").tool()])
    paused = await agent.run("go")
    assert paused.is_paused
    assert decoded == []
    resumed = await agent.run_with_deferred_results(paused.messages, APPROVE_C1)
    assert decoded == [{"answer": "final"}]
    assert resumed.output == Counting(answer="final")


async def test_a_paused_result_has_usage_requests_finish_reason_identity_and_cost() -> None:
    model = ScriptedModel(
        tool_turn(ToolCall("c0", "plain", "{}"), usage=Usage(10, 2)),
        tool_turn(ToolCall("c1", "gate", "{}"), usage=Usage(5, 1, cache_read_tokens=4)),
    )
    agent = Agent(
        model,
        instructions="be careful",
        tools=[Gate("gate").tool(), Plain("plain").tool()],
        price=lambda u: u.input_tokens * 0.5 + u.output_tokens,
    )
    result = await agent.run("go", run_id="run-1", conversation_id="conv-1")
    assert result.pending is not None
    assert (result.usage, result.requests, result.tool_calls) == (
        Usage(15, 3, cache_read_tokens=4),
        2,
        1,
    )
    assert result.finish_reason == "tool_call"
    assert result.cost == pytest.approx(15 * 0.5 + 3)
    assert [m.role for m in result.messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert result.messages[0].content == "be careful"
    assert {(m.run_id, m.conversation_id) for m in result.messages[1:]} == {("run-1", "conv-1")}
    minted = await Agent(
        ScriptedModel(tool_turn(ToolCall("c1", "g", "{}"))), tools=[Gate("g").tool()]
    ).run("go")
    assert minted.run_id
    assert minted.conversation_id not in ("", minted.run_id)
    assert all(m.run_id == minted.run_id for m in minted.messages)
    done = await Agent(
        ScriptedModel(tool_turn(ToolCall("c1", "p", "{}")), "fin"), tools=[Plain("p").tool()]
    ).run("go")
    assert (done.pending, done.output) == (None, "fin")


# --------------------------------------------------------------------------- limits, timeouts, cancellation


async def test_deferrals_do_not_count_against_a_tool_calls_limit_but_their_siblings_do() -> None:
    model = ScriptedModel(tool_turn(ToolCall("c1", "g", "{}"), ToolCall("c2", "g", "{}")))
    result = await Agent(
        model, tools=[Gate("g").tool()], usage_limits=UsageLimits(tool_calls=0)
    ).run("go")
    assert result.pending is not None
    assert result.tool_calls == 0
    model = ScriptedModel(tool_turn(ToolCall("c1", "g", "{}"), ToolCall("c2", "p", "{}")))
    agent = Agent(
        model,
        tools=[Gate("g").tool(), Plain("p", "size=12").tool()],
        usage_limits=UsageLimits(tool_calls=0),
    )
    with pytest.raises(RunError) as info:
        await agent.run("go")
    assert info.value.stage is Stage.USAGE
    cause = info.value.__cause__
    assert isinstance(cause, UsageLimitExceeded)
    assert (cause.kind, cause.limit, cause.actual) == ("tool call", 0, 1)
    assert info.value.partial is not None
    assert (info.value.partial.tool_calls, info.value.partial.messages[-1].content) == (
        1,
        "size=12",
    )


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


@pytest.mark.parametrize(
    ("turns", "limits", "paused"),
    [
        (0, {"max_iterations": 1}, True),
        (2, {"max_iterations": 3}, True),
        (1, {"max_iterations": 1}, False),  # control: one turn more than allowed is a loop error
        (1, {"usage_limits": UsageLimits(requests=2)}, True),
    ],
    ids=[
        "last-of-one-turn",
        "last-of-three-turns",
        "one-turn-too-many",
        "request-limit-at-the-pause",
    ],
)
async def test_a_pause_on_the_last_allowed_turn_is_a_pause(
    turns: int, limits: dict[str, Any], paused: bool
) -> None:
    before = [tool_turn(ToolCall(f"p{i}", "p", "{}")) for i in range(turns)]
    model = ScriptedModel(*before, tool_turn(ToolCall("c1", "g", "{}")))
    agent = Agent(model, tools=[Gate("g").tool(), Plain("p").tool()], **limits)
    if not paused:
        with pytest.raises(RunError) as info:
            await agent.run("go")
        assert info.value.stage is Stage.LOOP
        return
    result = await agent.run("go")
    assert result.pending is not None
    assert result.requests == turns + 1


async def _slow_async_defer(ctx: RunContext[Any], args: dict[str, Any]) -> str:
    await asyncio.sleep(5)
    raise Deferred(DeferKind.APPROVAL)


def _slow_sync_defer(ctx: RunContext[Any], args: dict[str, Any]) -> str:
    time.sleep(0.05)
    raise Deferred(DeferKind.EXTERNAL, "job")


async def _slow(ctx: RunContext[Any], args: dict[str, Any]) -> str:
    await asyncio.sleep(5)
    return "late"


@pytest.mark.parametrize(
    ("tools", "options"),
    [
        ([Tool("g", "t", OBJ, _slow_async_defer)], {"tool_timeout": 0.01}),
        ([Tool("g", "t", OBJ, _slow_sync_defer, timeout=0.01)], {}),
        (
            [Gate("g").tool(), Tool("slow", "slow", OBJ, _slow, timeout=0.01)],
            {"parallel_tool_calls": True},
        ),
    ],
    ids=[
        "async-defers-after-the-agent-timeout",
        "sync-defers-after-its-timeout",
        "a-parallel-sibling-times-out",
    ],
)
async def test_a_timeout_beats_a_deferral(tools: list[Tool], options: dict[str, Any]) -> None:
    model = ScriptedModel(
        tool_turn(
            ToolCall("c1", "g", "{}"), *([ToolCall("c2", "slow", "{}")] if len(tools) == 2 else [])
        ),
        "never",
    )
    with pytest.raises(RunError) as info:
        await Agent(model, tools=tools, **options).run("go")
    assert info.value.stage is Stage.TOOL
    assert isinstance(info.value.__cause__, TimeoutError)
    assert model.remaining == 1
    fine = await Agent(
        ScriptedModel(tool_turn(ToolCall("c1", "g", "{}"))),
        tools=[Gate("g").tool()],
        tool_timeout=30,
    ).run("go")
    assert fine.pending is not None  # within its timeout, a deferral pauses


@pytest.mark.parametrize(
    ("calls", "parallel", "contents"),
    [
        (["p", "g", "stop", "p"], False, ["ran", INTERRUPTED, INTERRUPTED, INTERRUPTED]),
        (["p", "g", "stop", "p"], True, ["ran", INTERRUPTED, INTERRUPTED, INTERRUPTED]),
        (["stop", "g"], False, [INTERRUPTED, INTERRUPTED]),
    ],
    ids=["sequential", "parallel", "canceled-first"],
)
async def test_canceled_in_the_same_batch_wins_over_the_pause(
    calls: list[str], parallel: bool, contents: list[str]
) -> None:
    gate, plain = Gate("g"), Plain("p", "ran")
    ids = [f"c{i + 1}" for i in range(len(calls))]
    model = ScriptedModel(
        tool_turn(*[ToolCall(i, n, "{}") for i, n in zip(ids, calls, strict=True)]), "never"
    )
    tools = [gate.tool(), plain.tool(), raising_tool("stop", lambda: Canceled("halt"))]
    agent = Agent(model, tools=tools, parallel_tool_calls=parallel)
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
    closing = [m for m in err.partial.messages if m.role == "tool"]
    assert [(m.tool_call_id, m.content) for m in closing] == list(zip(ids, contents, strict=True))
    assert {(m.run_id, m.conversation_id) for m in closing} == {("R", "C")}
    assert "canceled" in events
    if not parallel:  # nothing after the cancellation starts
        assert len(plain.calls) == contents.count("ran")
        assert gate.passes == ([] if calls[0] == "stop" else [False])


async def test_an_unknown_tool_in_a_batch_fails_before_anything_can_defer() -> None:
    gate = Gate("g")
    model = ScriptedModel(tool_turn(ToolCall("c1", "g", "{}"), ToolCall("c2", "nope", "{}")))
    with pytest.raises(RunError) as info:
        await Agent(model, tools=[gate.tool()]).run("go")
    assert info.value.stage is Stage.TOOL
    assert gate.passes == []


async def test_a_pause_inside_an_output_correction_round_is_a_pause() -> None:
    model = ScriptedModel(
        "not json at all", tool_turn(ToolCall("c1", "g", "{}")), '{"answer": "fixed"}'
    )
    agent = Agent(model, output_type=Strict, output_retries=1, tools=[Gate("g").tool()])
    paused = await agent.run("go")
    assert paused.pending is not None
    assert ([p.call_id for p in paused.pending.approvals], paused.requests) == (["c1"], 2)
    resumed = await agent.run_with_deferred_results(paused.messages, APPROVE_C1)
    assert resumed.output == Strict(answer="fixed")
