"""The run loop's policy: turn limit, model-call retries, tool self-correction budgets,
timeouts, parallel execution, usage limits, caller cancellation, call identity.

What any batch does — Failed, Canceled and the calls it closes, unknown tools, errors, bad
arguments, sequential tools, parallel groups and their event order, what counts as a tool
call — is `tests/test_contract_batches.py`'s oracle property."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from golem import (
    Agent,
    EventKind,
    RunContext,
    RunError,
    RunEvent,
    Stage,
    ToolError,
    Usage,
    UsageLimitExceeded,
    UsageLimits,
)
from golem.errors import (
    BadRequest,
    Overloaded,
    ProviderConnectionError,
    ProviderError,
    ProviderTimeout,
    RateLimited,
)
from golem.messages import Message, ToolCall
from golem.model import ModelRequest, ModelResponse
from golem.testing import FunctionModel, ScriptedModel
from golem.tool import DeferKind, Deferred, Failed, ModelRetry, Tool, call_approved

pytestmark = pytest.mark.version

OBJ = {"type": "object"}
INTERRUPTED = (
    "Tool call was interrupted before execution; no result was produced. "
    "Call the tool again if you need its result."
)


def calls(*items: tuple[str, str, str]) -> Message:
    return Message(role="assistant", tool_calls=[ToolCall(i, n, a) for i, n, a in items])


def tool_messages(messages: list[Message]) -> list[Message]:
    return [m for m in messages if m.role == "tool"]


def text_tool(name: str, text: str = "ok") -> Tool:
    return Tool(name, name, OBJ, lambda ctx, args: text)


def no_wait(attempt: int) -> float:
    return 0


# --------------------------------------------------------------------------- turn limit


@pytest.mark.parametrize(("limit", "output"), [(3, "done"), (2, None), (1, "hi")])
async def test_max_iterations_counts_model_turns(limit: int, output: str | None) -> None:
    script = ["hi"] if limit == 1 else [calls(("c1", "t", "{}")), calls(("c2", "t", "{}")), "done"]
    model = ScriptedModel(*script)
    agent = Agent(model, tools=[text_tool("t")], max_iterations=limit)
    if output is None:
        with pytest.raises(RunError) as info:
            await agent.run("go")
        err = info.value
        assert err.stage is Stage.LOOP
        assert "2" in str(err.__cause__)
        assert model.remaining == 1  # the third turn never happened
        assert err.partial is not None
        assert (err.partial.requests, err.partial.tool_calls) == (2, 2)
        return
    res = await agent.run("go")
    assert (res.output, res.requests) == (output, len(script))


async def test_turn_limit_applies_per_output_correction_round() -> None:
    model = ScriptedModel("not an int", "5")
    res = await Agent(model, output_type=int, output_retries=1, max_iterations=1).run("go")
    assert res.output == 5


# --------------------------------------------------------------------------- model-call retries


@pytest.mark.parametrize(
    ("error", "attempts", "retried"),
    [
        (RateLimited("429"), 2, True),
        (Overloaded("529"), 2, True),
        (ProviderTimeout("slow"), 2, True),
        (ProviderConnectionError("reset"), 2, True),
        (ProviderError("custom", retryable=True), 2, True),
        (RateLimited("429"), 1, False),  # max_attempts=1 (the default): no retry
        (BadRequest("400"), 5, False),
        (ProviderError("plain"), 5, False),
        (RuntimeError("bug"), 5, False),
        (ValueError("bad"), 5, False),
    ],
)
async def test_only_retryable_provider_errors_are_retried(
    error: Exception, attempts: int, retried: bool
) -> None:
    model = ScriptedModel(error, "ok")
    agent = Agent(model, max_attempts=attempts, retry_backoff=no_wait)
    if retried:
        res = await agent.run("go")
        assert (res.output, res.requests, len(model.requests)) == ("ok", 2, 2)
        return
    with pytest.raises(RunError) as info:
        await agent.run("go")
    assert info.value.stage is Stage.MODEL
    assert info.value.__cause__ is error
    assert len(model.requests) == 1


async def test_exhausted_attempts_fail_at_stage_model_naming_the_attempts() -> None:
    last = Overloaded("third")
    model = ScriptedModel(Overloaded("first"), Overloaded("second"), last, "never")
    with pytest.raises(RunError) as info:
        await Agent(model, max_attempts=3, retry_backoff=no_wait).run("go")
    err = info.value
    assert err.stage is Stage.MODEL
    assert err.__cause__ is last  # the ProviderError itself, as with max_attempts=1
    assert "golem: the model failed after 3 attempts" in last.__notes__
    assert err.partial is None or err.partial.requests == 3
    assert model.remaining == 1


async def test_retries_count_as_requests_call_the_backoff_and_emit_events_per_attempt() -> None:
    events: list[RunEvent] = []
    seen: list[int] = []

    def backoff(attempt: int) -> float:
        seen.append(attempt)
        return 0

    model = ScriptedModel(RateLimited("a"), Overloaded("b"), "ok")
    res = await Agent(model, max_attempts=3, retry_backoff=backoff).run(
        "go", on_event=events.append
    )
    assert (res.requests, seen) == (3, [1, 2])
    starts = [(e.turn, e.attempt) for e in events if e.kind is EventKind.MODEL_START]
    ends = [(e.turn, e.attempt, e.error) for e in events if e.kind is EventKind.MODEL_END]
    assert starts == [(0, 1), (0, 2), (0, 3)]
    assert [(t, a) for t, a, _ in ends] == [(0, 1), (0, 2), (0, 3)]
    assert isinstance(ends[0][2], RateLimited)
    assert ends[2][2] is None
    first_end = next(e for e in events if e.kind is EventKind.MODEL_END)
    assert first_end.usage in (None, Usage())  # a failed attempt used nothing


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The delays the run sleeps (asyncio.sleep answers at once)."""
    seen: list[float] = []
    real_sleep = asyncio.sleep

    async def fake_sleep(delay: float, result: Any = None) -> Any:
        seen.append(delay)
        return await real_sleep(0, result)

    monkeypatch.setattr(asyncio, "sleep", fake_sleep)
    return seen


async def test_retry_after_is_honoured_when_longer_than_the_backoff_up_to_max_retry_wait(
    waits: list[float],
) -> None:
    model = ScriptedModel(RateLimited("429", retry_after=7.5), Overloaded("529"), "ok")
    res = await Agent(model, max_attempts=3, retry_backoff=lambda n: 0.25).run("go")
    assert (res.output, waits) == ("ok", [7.5, 0.25])  # Retry-After beat the backoff
    model = ScriptedModel(RateLimited("429", retry_after=3600.0), "ok")
    res = await Agent(model, max_attempts=2, max_retry_wait=None).run("go")
    assert (res.output, waits[2:]) == ("ok", [3600.0])  # None: as long as asked
    for bad in (-1.0, float("nan")):
        with pytest.raises(ValueError, match="max_retry_wait"):
            Agent(ScriptedModel("ok"), max_retry_wait=bad)


@pytest.mark.parametrize("asked", [601.0, 1e11, 10.0**300])
async def test_a_retry_after_beyond_max_retry_wait_fails_at_once_instead_of_parking_the_run(
    waits: list[float], asked: float
) -> None:
    model = ScriptedModel(RateLimited("429", retry_after=asked), "never")
    with pytest.raises(RunError) as info:
        await Agent(model, max_attempts=3).run("go")
    assert info.value.stage == Stage.MODEL
    cause = info.value.__cause__
    assert isinstance(cause, RateLimited)
    assert any("max_retry_wait" in note for note in cause.__notes__)
    assert (waits, len(model.requests)) == ([], 1)


# --------------------------------------------------------------------------- tool self-correction


def picky(name: str = "picky") -> tuple[Tool, list[str]]:
    seen: list[str] = []

    def run(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        seen.append(args.get("v", ""))
        if args.get("v") != "good":
            raise ModelRetry(f"v must be good, not {args.get('v')}")
        return "accepted"

    return Tool(name, name, OBJ, run), seen


def rejected(v: str) -> str:
    return f"Your tool call was rejected: v must be good, not {v}. Correct the arguments and call the tool again."


@pytest.mark.parametrize(
    ("tries", "agent_retries", "tool_retries", "outcome"),
    [
        (["bad", "worse", "good"], 2, None, [rejected("bad"), rejected("worse"), "accepted"]),
        (
            ["bad", "bad", "good"],
            1,
            2,
            [rejected("bad"), rejected("bad"), "accepted"],
        ),  # the tool's own budget
        (["bad", "bad"], 1, None, "c2"),  # beyond the budget
        (["bad"], 0, None, "c1"),  # no budget: fails at once
        (["bad"], 5, 0, "c1"),  # the tool's budget of 0 beats the agent's 5
    ],
    ids=[
        "within-the-budget",
        "tool-budget-above-the-agents",
        "beyond",
        "no-budget",
        "tool-budget-below",
    ],
)
async def test_model_retry_feedback_within_the_tools_retry_budget(
    tries: list[str], agent_retries: int, tool_retries: int | None, outcome: Any
) -> None:
    tool, seen = picky()
    if tool_retries is not None:
        tool = Tool("picky", "p", OBJ, tool.exec, max_retries=tool_retries)
    script = [calls((f"c{i + 1}", "picky", f'{{"v": "{v}"}}')) for i, v in enumerate(tries)]
    agent = Agent(ScriptedModel(*script, "done"), tools=[tool], tool_retries=agent_retries)
    if isinstance(outcome, list):
        res = await agent.run("go")
        assert seen == tries
        assert [m.content for m in tool_messages(res.messages)] == outcome
        assert (res.output, res.tool_calls) == ("done", len(tries))
        return
    with pytest.raises(RunError) as info:
        await agent.run("go")
    err = info.value
    assert err.stage is Stage.TOOL
    assert isinstance(err.__cause__, ToolError)
    assert (err.__cause__.tool_name, err.__cause__.call_id) == ("picky", outcome)
    assert "v must be good" in str(err.__cause__)
    assert seen == tries
    if len(tries) > 1:
        assert f"after {len(tries)} attempts" in str(err.__cause__)


async def test_retry_budget_is_per_tool_name_and_per_run() -> None:
    a, _ = picky("a")
    b, _ = picky("b")
    script = [
        calls(("c1", "a", '{"v": "x"}')),
        calls(("c2", "b", '{"v": "x"}')),
        calls(("c3", "a", '{"v": "good"}'), ("c4", "b", '{"v": "good"}')),
        "done",
    ]
    agent = Agent(ScriptedModel(*script), tools=[a, b], tool_retries=1)
    assert (await agent.run("go")).output == "done"
    agent.model = ScriptedModel(*script)  # a fresh run starts with a fresh budget
    assert (await agent.run("go")).output == "done"
    # within one run the budget spans turns: a second rejection of `a` exhausts it
    agent.model = ScriptedModel(
        calls(("c1", "a", '{"v": "x"}')), calls(("c2", "a", '{"v": "y"}')), "never"
    )
    with pytest.raises(RunError) as info:
        await agent.run("go")
    assert info.value.stage is Stage.TOOL


# --------------------------------------------------------------------------- timeouts


async def _sleepy(ctx: RunContext[Any], args: dict[str, Any]) -> str:
    await asyncio.sleep(args.get("s", 30))
    return "woke"


def _slow_sync(ctx: RunContext[Any], args: dict[str, Any]) -> str:
    time.sleep(0.2)
    if args.get("fail"):
        raise Failed("too late to matter")
    return "late"


@pytest.mark.parametrize(
    ("tool", "options", "batch", "timed_out"),
    [
        (Tool("t", "s", OBJ, _sleepy), {"tool_timeout": 0.05}, ['{"s": 30}'], True),
        (Tool("t", "s", OBJ, _sleepy, timeout=0.05), {"tool_timeout": 60}, ['{"s": 30}'], True),
        (Tool("t", "s", OBJ, _sleepy, timeout=60), {"tool_timeout": 0.01}, ['{"s": 0.1}'], False),
        (Tool("t", "s", OBJ, _slow_sync, timeout=0.02), {}, ["{}"], True),
        (
            Tool("t", "s", OBJ, _slow_sync, timeout=0.02),
            {},
            ['{"fail": true}'],
            True,
        ),  # a late signal
        (Tool("t", "s", OBJ, _sleepy, timeout=5), {}, ['{"s": 0.05}', '{"s": 0.05}'], False),
        (
            Tool("t", "s", OBJ, _sleepy, timeout=0.05),
            {"parallel_tool_calls": True},
            ['{"s": 0}', '{"s": 30}'],
            True,
        ),
    ],
    ids=[
        "agent-timeout",
        "tool-timeout-shorter",
        "tool-timeout-longer",
        "sync-overrun",
        "sync-late-signal",
        "per-call-not-per-batch",
        "parallel-overrun",
    ],
)
async def test_a_tool_overrunning_its_timeout_fails_at_stage_tool(
    tool: Tool, options: dict[str, Any], batch: list[str], timed_out: bool
) -> None:
    model = ScriptedModel(calls(*((f"c{i}", "t", a) for i, a in enumerate(batch))), "done")
    agent = Agent(model, tools=[tool], **options)
    if not timed_out:
        res = await agent.run("go")
        assert res.output == "done"
        assert tool_messages(res.messages)[0].content == "woke"
        return
    with pytest.raises(RunError) as info:
        await agent.run("go")
    assert info.value.stage is Stage.TOOL
    assert isinstance(info.value.__cause__, TimeoutError)
    assert model.remaining == 1


# --------------------------------------------------------------------------- parallel tool calls


def rendezvous_tools() -> list[Tool]:
    """Two tools that each wait for the other: they only finish when run concurrently.

    `first` also finishes last, so completion order differs from emission order.
    """
    first_in, second_in, second_out = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def first(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        first_in.set()
        await second_in.wait()
        await second_out.wait()
        return "first result"

    async def second(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        second_in.set()
        await first_in.wait()
        second_out.set()
        return "second result"

    return [Tool("first", "f", OBJ, first), Tool("second", "s", OBJ, second)]


async def test_parallel_calls_run_concurrently_and_keep_emission_order() -> None:
    events: list[RunEvent] = []
    model = ScriptedModel(calls(("c1", "first", "{}"), ("c2", "second", "{}")), "done")
    agent = Agent(model, tools=rendezvous_tools(), parallel_tool_calls=True)
    res = await asyncio.wait_for(agent.run("go", on_event=events.append), timeout=10)
    assert [(m.tool_call_id, m.content) for m in tool_messages(res.messages)] == [
        ("c1", "first result"),
        ("c2", "second result"),
    ]
    assert [m.tool_call_id for m in model.requests[1].messages if m.role == "tool"] == ["c1", "c2"]
    tool_events = [(e.kind, e.call_id) for e in events if e.kind.value.startswith("tool_")]
    assert tool_events == [
        (EventKind.TOOL_START, "c1"),
        (EventKind.TOOL_START, "c2"),
        (EventKind.TOOL_END, "c1"),
        (EventKind.TOOL_END, "c2"),
    ]
    assert res.tool_calls == 2


# --------------------------------------------------------------------------- usage


async def test_usage_is_summed_over_every_turn_and_output_correction_round() -> None:
    model = ScriptedModel(
        ModelResponse(calls(("c1", "t", "{}")), usage=Usage(10, 1, 2, 3, 4)),
        ModelResponse(calls(("c2", "t", "{}")), usage=Usage(20, 2, 0, 0, 1)),
        ModelResponse(Message(role="assistant", content="x"), usage=Usage(30, 3, 5, 0, 0)),
    )
    res = await Agent(model, tools=[text_tool("t")]).run("go")
    assert res.usage == Usage(60, 6, 7, 3, 5)
    model = ScriptedModel(
        ModelResponse(Message(role="assistant", content="nope"), usage=Usage(5, 5)),
        ModelResponse(Message(role="assistant", content="3"), usage=Usage(7, 1)),
    )
    res = await Agent(model, output_type=int, output_retries=1).run("go")
    assert (res.output, res.usage, res.requests) == (3, Usage(12, 6), 2)


def _limited_run_script() -> list[Any]:
    return [
        ModelResponse(calls(("c1", "t", "{}"), ("c2", "t", "{}")), usage=Usage(60, 10)),
        ModelResponse(Message(role="assistant", content="done"), usage=Usage(70, 20)),
    ]


# The full run uses: input 130, output 30, total 160, requests 2, tool calls 2, cost 1.6.
# Reaching a limit exactly is not crossing it (kind None).
@pytest.mark.parametrize(
    ("limits", "kind", "limit", "actual"),
    [
        (UsageLimits(input_tokens=100), "input token", 100, 130),
        (UsageLimits(output_tokens=25), "output token", 25, 30),
        (UsageLimits(total_tokens=150), "total token", 150, 160),
        (UsageLimits(requests=1), "request", 1, 2),
        (UsageLimits(tool_calls=1), "tool call", 1, 2),
        (UsageLimits(cost=1.5), "cost", 1.5, 1.6),
        *(
            (limits, None, 0, 0)
            for limits in (
                UsageLimits(input_tokens=130),
                UsageLimits(output_tokens=30),
                UsageLimits(total_tokens=160),
                UsageLimits(requests=2),
                UsageLimits(tool_calls=2),
                UsageLimits(cost=1.6),
                UsageLimits(),
            )
        ),
    ],
)
async def test_each_usage_limit_dimension(
    limits: UsageLimits, kind: str | None, limit: float, actual: float
) -> None:
    model = ScriptedModel(*_limited_run_script())
    agent = Agent(
        model, tools=[text_tool("t")], usage_limits=limits, price=lambda u: u.total_tokens / 100
    )
    if kind is None:
        assert (await agent.run("go")).output == "done"
        return
    with pytest.raises(RunError) as info:
        await agent.run("go")
    err = info.value
    assert err.stage is Stage.USAGE
    cause = err.__cause__
    assert isinstance(cause, UsageLimitExceeded)
    assert (cause.kind, cause.limit) == (kind, limit)
    assert cause.actual == pytest.approx(actual)
    assert err.partial is not None


# --------------------------------------------------------------------------- caller cancellation


@pytest.mark.parametrize(
    "where",
    ["tool", "tool-with-timeout", "parallel-tools", "sync-tool", "model-call", "retry-backoff"],
)
async def test_cancelling_the_run_propagates_cancelled_error(where: str) -> None:
    started, release = threading.Event(), threading.Event()
    cleaned_up: list[bool] = []
    model_calls = 0

    async def hang(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            cleaned_up.append(True)
        return "never"

    def block(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        started.set()
        release.wait(10)
        return "done"

    async def model_fn(request: ModelRequest) -> ModelResponse:
        nonlocal model_calls
        model_calls += 1
        if where == "model-call":
            started.set()
            await asyncio.Event().wait()
        if where == "retry-backoff":
            started.set()
            raise Overloaded("busy")
        batch = (
            [("c1", "t", "{}"), ("c2", "t", "{}")]
            if where == "parallel-tools"
            else [("c1", "t", "{}")]
        )
        return ModelResponse(calls(*batch), finish_reason="tool_call")

    tool = Tool("t", "t", OBJ, block if where == "sync-tool" else hang)
    agent = Agent(
        FunctionModel(model_fn),
        tools=[tool],
        tool_timeout=60 if where == "tool-with-timeout" else None,
        parallel_tool_calls=where == "parallel-tools",
        max_attempts=5,
        retry_backoff=lambda n: 60,
    )
    task = asyncio.create_task(agent.run("go"))
    try:
        assert await asyncio.to_thread(started.wait, 10)
        task.cancel()
        release.set()  # the run ends once a sync tool's thread does (ADR 0067)
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        release.set()
    assert model_calls == 1
    if where == "tool":
        assert cleaned_up == [True]


async def test_a_tool_raising_cancelled_error_itself_is_not_swallowed() -> None:
    async def cancels(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        raise asyncio.CancelledError

    agent = Agent(
        ScriptedModel(calls(("c1", "x", "{}")), "never"), tools=[Tool("x", "x", OBJ, cancels)]
    )
    with pytest.raises(asyncio.CancelledError):
        await agent.run("go")


# --------------------------------------------------------------------------- more edges


async def test_partial_result_reports_cost() -> None:
    model = ScriptedModel(
        ModelResponse(calls(("c1", "t", "{}")), usage=Usage(100, 0)), BadRequest("down")
    )
    agent = Agent(model, tools=[text_tool("t")], price=lambda u: u.input_tokens * 0.01)
    with pytest.raises(RunError) as info:
        await agent.run("go")
    assert info.value.partial is not None
    assert info.value.partial.cost == pytest.approx(1.0)


async def test_parallel_sync_tools_run_concurrently_in_worker_threads() -> None:
    barrier = threading.Barrier(2, timeout=10)  # breaks (fails the call) if run one by one

    def meet(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        barrier.wait()
        return ctx.call_id

    model = ScriptedModel(calls(("c1", "meet", "{}"), ("c2", "meet", "{}")), "done")
    agent = Agent(model, tools=[Tool("meet", "m", OBJ, meet)], parallel_tool_calls=True)
    res = await agent.run("go")
    assert [m.content for m in tool_messages(res.messages)] == ["c1", "c2"]


# --------------------------------------------------------------------------- memory


async def test_a_paused_run_leaves_no_reference_cycles_behind() -> None:
    """A deferral's traceback must not hold the run's state in a cycle (only the GC could free it)."""
    import gc

    from golem.tool import DeferKind, Deferred

    def make() -> Agent[None, str]:
        model = ScriptedModel(
            Message(
                role="assistant",
                tool_calls=[ToolCall("c1", "gate", "{}"), ToolCall("c2", "fail", "{}")],
            )
        )
        agent: Agent[None, str] = Agent(model)

        @agent.tool
        async def gate() -> str:
            raise Deferred(DeferKind.APPROVAL, "needs sign-off")

        @agent.tool
        async def fail() -> str:
            raise Failed("no luck")

        return agent

    await make().run("warm up")
    agent = make()  # building tools creates pydantic classes, which have cycles of their own
    gc.collect()
    gc.disable()
    try:
        result = await agent.run("go")
        assert result.pending is not None
        del result
        assert gc.collect() == 0
    finally:
        gc.enable()


# --------------------------------------------------------------------------- call identity


def counting_from_zero(*turns: list[tuple[str, str]]) -> ScriptedModel:
    """A server that numbers its calls from `call_0` in every response."""
    responses: list[Any] = [
        ModelResponse(
            Message(
                role="assistant",
                tool_calls=[ToolCall(f"call_{i}", name, args) for i, (name, args) in enumerate(t)],
            ),
            finish_reason="tool_call",
        )
        for t in turns
    ]
    return ScriptedModel(*responses, "done")


async def test_a_call_id_reused_in_a_later_turn_gets_an_identity_of_its_own() -> None:
    keys: list[tuple[str, str]] = []

    def pay(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        keys.append((ctx.call_id, ctx.idempotency_key))
        return "paid"

    model = counting_from_zero([("pay", '{"n":1}')], [("pay", '{"n":2}')])
    agent = Agent(model, tools=[Tool("pay", "pay", {"type": "object"}, pay)])
    result = await agent.run("pay twice")
    assert [k[0] for k in keys] == ["call_0", "call_0_2"]
    assert len({k[1] for k in keys}) == 2  # a payment API keyed on it takes both payments
    sent = model.requests[2].messages  # what the provider is sent back is consistent
    assert [c.id for m in sent if m.role == "assistant" for c in m.tool_calls] == [
        "call_0",
        "call_0_2",
    ]
    assert [m.tool_call_id for m in sent if m.role == "tool"] == ["call_0", "call_0_2"]
    assert result.output == "done"


async def test_two_calls_sharing_an_id_in_one_answer_run_under_two_identities() -> None:
    seen: list[str] = []

    def note(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        seen.append(ctx.idempotency_key)
        return "ok"

    turn = ModelResponse(
        Message(
            role="assistant", tool_calls=[ToolCall("x", "note", "{}"), ToolCall("x", "note", "{}")]
        ),
        finish_reason="tool_call",
    )
    agent = Agent(ScriptedModel(turn, "done"), tools=[Tool("note", "n", {"type": "object"}, note)])
    result = await agent.run("go")
    assert len(set(seen)) == 2
    assert [m.tool_call_id for m in result.messages if m.role == "tool"] == ["x", "x_2"]


async def test_an_approval_tool_called_again_under_a_reused_id_pauses_and_resumes() -> None:
    def gate(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, "sign-off")
        return "done " + ctx.call_id

    tools = [Tool("gate", "g", {"type": "object"}, gate)]
    first = await Agent(counting_from_zero([("gate", "{}")]), tools=tools).run("go")
    assert first.pending is not None
    resumed = Agent(
        ScriptedModel(
            ModelResponse(
                Message(role="assistant", tool_calls=[ToolCall("call_0", "gate", "{}")]),
                finish_reason="tool_call",
            )
        ),
        tools=tools,
    )
    second = await resumed.run_with_deferred_results(
        first.messages, {"approvals": {"call_0": True}}
    )
    assert second.pending is not None
    assert [c.call_id for c in second.pending.approvals] == ["call_0_2"]
