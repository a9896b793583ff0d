"""Pausing (issue 3; seed: deferred-tools.md; Go reference §2.2): a tool raises `Deferred`
(directly, in its exception chain or a group) and the run returns with `result.pending`;
what cannot pause fails as a run; the paused result; limits, timeouts and the turn limit;
the approved-call marker and its scope; idempotency keys; the `deferred` events. Any batch
against the contract's oracle: test_contract_batches.py."""

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
    RunEvent,
    Stage,
    Tool,
    ToolCall,
    ToolError,
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
    ModelRetry,
    approved_call,
    call_approved,
    find_signal,
    idempotency_key,
)
from tests.support.gates import OBJ, Gate, Plain, raising_tool, tool_turn

pytestmark = pytest.mark.version


APPROVE_C1 = DeferredResults(approvals={"c1": Approval(True)})


class Strict(pydantic.BaseModel):
    """An output type that cannot be decoded from an empty text."""

    answer: str


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
        assert gate.exec(RunContext(None), {"path": "a"}) == "delete_file: done"
    assert (gate.approved_args, gate.passes) == ([{"path": "a"}], [False, True])


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
    assert (gate.passes, gate.approved_args) == ([False], [])
    resumed = await agent.run_with_deferred_results(paused.messages, APPROVE_C1)
    assert resumed.output == "deleted"
    assert (gate.passes, gate.approved_args) == ([False, True], [{"path": "a"}])
    if sync:  # a sync tool runs in a worker thread, both passes
        assert all(t is not threading.main_thread() for t in gate.threads)
    else:
        assert seen == [False, False, True]
    assert not call_approved()


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
        approvals=[
            PendingToolCall("c1", "delete_file", '{"path":"a"}', "delete_file needs sign-off")
        ]
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


class _Unkinded(Deferred):
    """A subclass that skips `Deferred.__init__`: no `kind`, no `reason`."""

    def __init__(self) -> None:
        Exception.__init__(self, "mine")


def _reassigned(kind: Any) -> Deferred:
    signal = Deferred("approval", "why")
    signal.kind = kind
    return signal


BAD_SIGNALS = [
    pytest.param(lambda: _reassigned(""), id="kind-emptied"),
    pytest.param(lambda: _reassigned("approve"), id="kind-misspelled"),
    pytest.param(lambda: _reassigned(None), id="kind-none"),
    pytest.param(lambda: _reassigned(["approval"]), id="kind-unhashable"),
    pytest.param(_Unkinded, id="subclass-without-kind"),
]


@pytest.mark.parametrize("make", BAD_SIGNALS)
@pytest.mark.parametrize("parallel", [False, True])
async def test_a_deferral_without_a_valid_kind_fails_the_run_at_stage_tool(
    make: Any, parallel: bool
) -> None:
    ran: list[str] = []

    def bad(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        raise make()

    def ok(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        ran.append("ok")
        return "fine"

    def gate(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        raise Deferred("approval", "sign-off")

    model = ScriptedModel(
        tool_turn(
            ToolCall("c1", "gate", "{}"), ToolCall("c2", "bad", "{}"), ToolCall("c3", "ok", "{}")
        ),
        "never",
    )
    agent = Agent(
        model,
        tools=[Tool("bad", "b", OBJ, bad), Tool("ok", "o", OBJ, ok), Tool("gate", "g", OBJ, gate)],
        parallel_tool_calls=parallel,
    )
    events: list[RunEvent] = []
    with pytest.raises(RunError) as info:
        await agent.run("go", on_event=events.append)
    err = info.value
    assert err.stage is Stage.TOOL
    cause = err.__cause__
    assert isinstance(cause, ToolError)
    assert (cause.tool_name, cause.call_id) == ("bad", "c2")
    assert "tool deferred without a kind" in str(cause)
    assert len(model.requests) == 1  # no model call follows
    # the deferred event of the bad call was emitted (as in Go), and nothing is pending
    deferred = [(e.call_id, e.reason) for e in events if e.kind == "deferred"]
    assert ("c2", "") in deferred or ("c2", "why") in deferred
    if not parallel:
        assert ran == []  # sequential: the call after the failing one never starts
    # the evidence ends at the requesting assistant turn (a failing batch adds no results)
    assert err.partial is not None
    assert err.partial.messages[-1].role == "assistant"


@pytest.mark.parametrize("approved", ["false", "", 0, 1, None, [], "yes"])
def test_an_approval_decision_must_be_a_bool(approved: Any) -> None:
    # `Approval("false")` used to approve (a truthy string): a decision read from JSON or a
    # form must be converted by the application, never guessed.
    with pytest.raises(TypeError, match="approved must be a bool"):
        Approval(approved)


@pytest.mark.parametrize("reason", [None, 42, b"no"])
def test_an_approval_reason_must_be_text(reason: Any) -> None:
    with pytest.raises(TypeError, match="reason must be a str"):
        Approval(False, reason)


def test_a_results_dict_with_a_non_bool_decision_is_refused() -> None:
    with pytest.raises(TypeError, match="must be an Approval or a bool"):
        DeferredResults({"c1": "false"})  # type: ignore[dict-item]


async def test_a_string_decision_never_reaches_the_tool() -> None:
    ran: list[bool] = []

    def gate(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        ran.append(True)
        raise Deferred("approval", "sign-off")

    model = ScriptedModel(tool_turn(ToolCall("c1", "gate", "{}")), "done")
    agent = Agent(model, tools=[Tool("gate", "g", OBJ, gate)])
    paused = await agent.run("go")
    assert paused.pending is not None
    with pytest.raises(TypeError):
        await agent.run_with_deferred_results(
            paused.messages,
            DeferredResults({"c1": Approval("false")}),  # type: ignore[arg-type]
        )
    assert ran == [True]  # the pausing pass only
    assert len(model.requests) == 1


def _gate(ctx: RunContext[Any], args: dict[str, Any]) -> str:
    from golem.tool import call_approved

    if not call_approved():
        raise Deferred("approval", "sign-off")
    return "done"


@pytest.mark.parametrize(
    ("turns", "says"),
    [pytest.param([tool_turn(ToolCall("", "gate", "{}"))], "has no call ID", id="no-id")],
)
@pytest.mark.parametrize("parallel", [False, True])
async def test_a_pause_no_resume_could_name_fails_the_run_instead(
    turns: list[ModelResponse], says: str, parallel: bool
) -> None:
    # Go pauses and the resume then fails ("has no call ID", or the call counts as answered by
    # the other one's result); golem used to return the pause and refuse every resume of it
    # (`ResumeError`), after an approver had been asked. The run fails at stage tool instead.
    model = ScriptedModel(*turns, "never")
    agent = Agent(
        model,
        tools=[Tool("gate", "g", OBJ, _gate), Tool("stat", "s", OBJ, lambda c, a: "12")],
        parallel_tool_calls=parallel,
    )
    with pytest.raises(RunError) as info:
        await agent.run("go")
    err = info.value
    assert err.stage is Stage.TOOL
    cause = err.__cause__
    assert isinstance(cause, ToolError)
    assert cause.tool_name == "gate"
    assert says in str(cause)
    assert len(model.requests) == len(turns)
    assert err.partial is not None
    assert err.partial.messages[-1].role == "assistant"  # a failing batch adds no results


@pytest.mark.parametrize(
    ("turns", "pending_id"),
    [
        pytest.param(
            [tool_turn(ToolCall("c1", "gate", "{}"), ToolCall("c1", "stat", "{}"))],
            "c1",
            id="id-twice-in-the-batch",
        ),
        pytest.param(
            # a server that numbers its calls per response ("call_0" every turn)
            [
                tool_turn(ToolCall("call_0", "stat", "{}")),
                tool_turn(ToolCall("call_0", "gate", "{}")),
            ],
            "call_0_2",
            id="id-of-an-earlier-turn",
        ),
    ],
)
@pytest.mark.parametrize("parallel", [False, True])
async def test_a_call_whose_id_the_conversation_has_pauses_under_an_id_of_its_own(
    turns: list[ModelResponse], pending_id: str, parallel: bool
) -> None:
    agent = Agent(
        ScriptedModel(*turns),
        tools=[Tool("gate", "g", OBJ, _gate), Tool("stat", "s", OBJ, lambda c, a: "12")],
        parallel_tool_calls=parallel,
    )
    result = await agent.run("go")
    assert result.pending is not None
    assert [c.call_id for c in result.pending.approvals] == [pending_id]
    ids = [c.id for m in result.messages if m.role == "assistant" for c in m.tool_calls]
    assert len(ids) == len(set(ids))


def gated(name: str, kind: DeferKind = DeferKind.APPROVAL) -> Tool:
    def exec(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        if not call_approved():
            raise Deferred(kind, f"{name} needs a decision")
        return f"{name} approved"

    return Tool(name, name, OBJ, exec)


def plain(name: str, text: str = "ok") -> Tool:
    return Tool(name, name, OBJ, lambda ctx, args: text)


def trace(events: list[RunEvent]) -> list[tuple[str, str]]:
    return [(e.kind.value, e.call_id) for e in events]


async def test_parallel_order_all_starts_first_then_ends_and_deferreds_in_emission_order() -> None:
    # c1 cannot finish before c2 and c3 did: completion order differs from emission order.
    c2_done, c3_done = asyncio.Event(), asyncio.Event()

    async def slow_gate(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        await c2_done.wait()
        await c3_done.wait()
        raise Deferred(DeferKind.EXTERNAL, "job")

    async def fast(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        c2_done.set()
        return "fast"

    async def gate3(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        await c2_done.wait()
        c3_done.set()
        raise Deferred(DeferKind.APPROVAL)

    model = ScriptedModel(
        tool_turn(
            ToolCall("c1", "slow", "{}"), ToolCall("c2", "fast", "{}"), ToolCall("c3", "g3", "{}")
        )
    )
    agent = Agent(
        model,
        tools=[
            Tool("slow", "slow", OBJ, slow_gate),
            Tool("fast", "fast", OBJ, fast),
            Tool("g3", "g3", OBJ, gate3),
        ],
        parallel_tool_calls=True,
    )
    events: list[RunEvent] = []
    result = await agent.run("go", on_event=events.append)
    assert result.pending is not None
    assert [p.call_id for p in result.pending.external] == ["c1"]
    assert [p.call_id for p in result.pending.approvals] == ["c3"]
    assert trace(events) == [
        ("model_start", ""),
        ("model_end", ""),
        ("tool_start", "c1"),
        ("tool_start", "c2"),
        ("tool_start", "c3"),
        ("deferred", "c1"),
        ("tool_end", "c2"),
        ("deferred", "c3"),
    ]


async def test_deferred_events_reach_the_agent_observer_then_the_run_observer() -> None:
    seen: list[tuple[str, str]] = []
    model = ScriptedModel(tool_turn(ToolCall("c1", "g", "{}")))
    agent = Agent(
        model, tools=[gated("g")], event_handler=lambda e: seen.append(("agent", e.kind.value))
    )
    await agent.run("go", on_event=lambda e: seen.append(("run", e.kind.value)))
    assert seen[-2:] == [("agent", "deferred"), ("run", "deferred")]


async def test_a_failing_approved_rerun_emits_tool_end_with_the_error() -> None:
    def boom(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, "sign-off")
        raise RuntimeError("disk full")

    model = ScriptedModel(tool_turn(ToolCall("c1", "b", "{}")), "never")
    agent = Agent(model, tools=[Tool("b", "b", {"type": "object"}, boom)])
    paused = await agent.run("go")
    events: list[RunEvent] = []
    with pytest.raises(RunError):
        await agent.run_with_deferred_results(
            paused.messages, DeferredResults(approvals={"c1": True}), on_event=events.append
        )
    assert trace(events) == [("tool_start", "c1"), ("tool_end", "c1")]
    assert events[1].approved
    assert isinstance(events[1].error, ToolError)
    assert "disk full" in str(events[1].error)


async def test_resumed_run_that_pauses_again_emits_its_own_deferred_event() -> None:
    model = ScriptedModel(
        tool_turn(ToolCall("c1", "g", "{}")), tool_turn(ToolCall("c2", "g", "{}"))
    )
    agent = Agent(model, tools=[gated("g")])
    first: list[RunEvent] = []
    paused = await agent.run("go", on_event=first.append)
    second: list[RunEvent] = []
    again = await agent.run_with_deferred_results(
        paused.messages, DeferredResults(approvals={"c1": Approval(True)}), on_event=second.append
    )
    assert trace(second) == [
        ("tool_start", "c1"),
        ("tool_end", "c1"),
        ("model_start", ""),
        ("model_end", ""),
        ("tool_start", "c2"),
        ("deferred", "c2"),
    ]
    assert second[-1].turn == 0
    assert {e.run_id for e in second} == {again.run_id}
    assert again.run_id != paused.run_id
    assert {e.conversation_id for e in second} == {paused.conversation_id}
    assert trace(first)[-1] == ("deferred", "c1")


def sub_agent(wired: list[int]) -> Agent[None, str]:
    """An agent whose own gated tool must pause without its own approval."""
    model = ScriptedModel(tool_turn(ToolCall("s1", "wire_money", '{"amount": 1000000}')), "wired")
    agent: Agent[None, str] = Agent(model)

    @agent.tool
    def wire_money(amount: int) -> str:
        """Wire money."""
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, f"wire {amount}?")
        wired.append(amount)
        return "wired"

    return agent


@pytest.mark.parametrize("entry", ["run", "run_stream", "run_sync_in_thread", "resume"])
async def test_a_sub_agent_started_in_an_approved_tool_does_not_inherit_the_approval(
    entry: str,
) -> None:
    wired: list[int] = []
    inner_results: list[Any] = []
    seen: list[bool] = []

    async def delegate(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        seen.append(call_approved())
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, "run the treasury agent?")
        inner = sub_agent(wired)
        if entry == "run":
            inner_results.append(await inner.run("wire"))
        elif entry == "run_stream":
            async with inner.run_stream("wire") as stream:
                async for _ in stream:
                    pass
            inner_results.append(stream.result)
        elif entry == "run_sync_in_thread":
            inner_results.append(await asyncio.to_thread(inner.run_sync, "wire"))
        else:
            paused = await inner.run("wire")
            # a nested resume: its own approval decides, not the outer marker
            inner.model = ScriptedModel("denied")
            inner_results.append(
                await inner.run_with_deferred_results(paused.messages, {"approvals": {"s1": False}})
            )
        seen.append(call_approved())  # restored for the rest of the approved tool
        return "delegated"

    outer = Agent(
        ScriptedModel(tool_turn(ToolCall("o1", "delegate", "{}")), "done"),
        tools=[Tool("delegate", "d", OBJ, delegate)],
    )
    paused = await outer.run("go")
    done = await outer.run_with_deferred_results(paused.messages, {"approvals": {"o1": True}})
    assert done.output == "done"
    assert wired == []  # the sub-agent's gated tool paused instead of wiring money
    assert seen == [False, True, True]
    if entry != "resume":
        assert inner_results[0].pending is not None
        assert inner_results[0].pending.approvals[0].call_id == "s1"


async def test_dynamic_instructions_of_a_nested_run_see_no_approval() -> None:
    seen: list[bool] = []

    def instructions(ctx: RunContext[Any]) -> str:
        seen.append(call_approved())
        return "be careful"

    inner: Agent[None, str] = Agent(ScriptedModel("ok"), instructions=instructions)
    with approved_call():
        await inner.run("hi")
        assert call_approved()
    assert seen == [False]


async def test_the_idempotency_key_is_the_same_on_every_attempt_at_a_call() -> None:
    keys: list[tuple[str, bool, str]] = []

    def gate(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        keys.append((ctx.call_id, call_approved(), ctx.idempotency_key))
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL)
        return "ok"

    def plain(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        keys.append((ctx.call_id, False, ctx.idempotency_key))
        return "ok"

    model = ScriptedModel(tool_turn(ToolCall("c1", "g", "{}"), ToolCall("c2", "p", "{}")), "a", "b")
    agent = Agent(model, tools=[Tool("g", "g", OBJ, gate), Tool("p", "p", OBJ, plain)])
    paused = await agent.run("go", conversation_id="conv-7")
    # two resumes of the same paused history (a retry): the same key each time
    await agent.run_with_deferred_results(paused.messages, {"approvals": {"c1": True}})
    await agent.run_with_deferred_results(paused.messages, {"approvals": {"c1": True}})
    c1 = {k for cid, _, k in keys if cid == "c1"}
    c2 = {k for cid, _, k in keys if cid == "c2"}
    assert c1 == {idempotency_key("conv-7", "c1")}
    assert c2 == {idempotency_key("conv-7", "c2")}
    assert c1 != c2
    assert len(next(iter(c1))) == 64
    int(next(iter(c1)), 16)


def test_idempotency_keys_differ_by_conversation_and_are_length_prefixed() -> None:
    assert idempotency_key("a", "bc") != idempotency_key("ab", "c")
    assert idempotency_key("conv", "c1") != idempotency_key("conv2", "c1")
    assert idempotency_key("conv", "c1") == idempotency_key("conv", "c1")
    assert RunContext(None).idempotency_key == ""
    assert RunContext(None, "r", "conv", "c1").idempotency_key == idempotency_key("conv", "c1")


def test_tools_declare_idempotency() -> None:
    agent: Agent[None, str] = Agent(ScriptedModel())

    @agent.tool(idempotent=True)
    def refund(order: str) -> str:
        """Refund an order."""
        return "ok"

    @agent.tool
    def charge(order: str) -> str:
        """Charge an order."""
        return "ok"

    assert agent.tools["refund"].idempotent is True
    assert agent.tools["charge"].idempotent is False
    assert Tool("t", "t", OBJ, lambda ctx, a: "", idempotent=True).idempotent is True
    assert Tool.from_function(charge, idempotent=True).idempotent is True


def test_tool_options_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        Tool("t", "t", OBJ, lambda ctx, a: "", 3)  # type: ignore[misc]
