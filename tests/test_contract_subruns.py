"""What an agent tool's sub-run spends counts in its parent, whatever the sub-run's outcome,
and a resuming parent's usage limits cover what its resumed sub-agents spent (ADR 0067).

Before: a sub-run that failed, timed out or was cancelled added nothing to its parent (its
tokens and requests vanished from the parent's `partial`), and a parent resuming paused
sub-agents added their usage to its `Result` after its own run, unchecked against its
`usage_limits` (a request bound of 3 let 4 requests through).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from golem import (
    Agent,
    RunError,
    Stage,
    ToolTimeout,
    Usage,
    UsageLimitExceeded,
    UsageLimits,
)
from golem.model import ModelRequest, ModelResponse
from golem.testing import FunctionModel, ScriptedModel
from golem.tool import DeferKind, Deferred, RunContext, Tool, call_approved
from tests.support.subagents import calls, text

OBJ: dict[str, Any] = {"type": "object"}


def ask(call_id: str = "p1", tokens: int = 3) -> ModelResponse:
    return calls((call_id, "sub", {"prompt": "go"}), tokens=tokens)


async def _time_out_a_sub_run(timeout: float) -> tuple[bool, RunError]:
    """A parent whose agent tool (with `timeout`) runs a sub-run that makes one tool call, then
    waits forever on its second model request; whether that request began, and the error."""
    answered = asyncio.Event()

    async def sub_model(request: ModelRequest) -> ModelResponse:
        if request.messages[-1].role == "user":
            return calls(("s1", "work", {}), tokens=5)
        answered.set()
        await asyncio.Event().wait()  # the sub-run's second request never answers
        raise AssertionError("unreachable")

    sub: Agent[None, str] = Agent(
        FunctionModel(sub_model), name="sub", tools=[Tool("work", "w", OBJ, lambda c, a: "ok")]
    )
    parent = Agent(ScriptedModel(ask()), tools=[sub.as_tool(timeout=timeout)])
    with pytest.raises(RunError) as info:
        await parent.run("go")
    return answered.is_set(), info.value


async def test_a_timed_out_sub_run_still_counts_what_it_spent() -> None:
    # The timeout is wall-clock time, and the sub-run's tool runs in a thread: on a loaded
    # machine 0.05 s can pass before the sub-run reaches its second request. The case under
    # test is a timeout that fires during that request, so a timeout that fired earlier is
    # tried again with a longer one (each attempt is a fresh parent and sub-run).
    for timeout in (0.05, 0.2, 0.8, 3.2, 12.8):
        answered, error = await _time_out_a_sub_run(timeout)
        if answered:
            break
    assert answered, "the sub-run never reached its second request before the timeout"
    assert isinstance(error.__cause__, ToolTimeout)
    partial = error.partial
    assert partial is not None
    assert (partial.requests, partial.tool_calls) == (1 + 2, 1 + 1)
    assert partial.usage == Usage(input_tokens=3 + 5, output_tokens=3 + 5)


def _paused_pair(
    requests_bound: int | None, *sub_outcomes: Any, price: bool = False
) -> tuple[Agent[None, str], Agent[None, str], list[str]]:
    log: list[str] = []
    sub: Agent[None, str] = Agent(ScriptedModel(*sub_outcomes), name="sub")

    def delete(ctx: RunContext[None], args: dict[str, Any]) -> str:
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, "delete?")
        log.append(ctx.call_id)
        return "deleted"

    sub.tools["delete"] = Tool("delete", "d", OBJ, delete)
    sub.tools["look"] = Tool("look", "l", OBJ, lambda c, a: "seen")
    parent: Agent[None, str] = Agent(
        ScriptedModel(ask(), text("fin", tokens=1)),
        tools=[sub.as_tool()],
        usage_limits=UsageLimits(requests=requests_bound) if requests_bound else None,
        price=(lambda u: float(u.input_tokens)) if price else None,
    )
    return parent, sub, log


async def test_a_resuming_parents_limits_cover_its_resumed_sub_agents() -> None:
    parent, _, log = _paused_pair(
        3,
        calls(("s1", "delete", {}), tokens=5),
        calls(("s2", "look", {}), tokens=5),
        calls(("s3", "look", {}), tokens=5),
        text("done"),
    )
    paused = await parent.run("go")
    with pytest.raises(RunError) as info:
        await parent.run_with_deferred_results(paused.messages, {"approvals": {"p1/s1": True}})
    assert info.value.stage is Stage.USAGE
    cause = info.value.__cause__
    assert isinstance(cause, UsageLimitExceeded)
    assert (cause.kind, cause.actual) == ("request", 3 + 1)  # checked before the parent's call
    assert log == ["s1"]
    partial = info.value.partial
    assert partial is not None
    # the evidence answers the parent's call with the sub-agent's answer: nothing is pending,
    # so continuing from it never runs the approved call again
    assert [m.content for m in partial.messages if m.role == "tool"] == ["done"]


async def test_a_resumed_parents_result_counts_its_sub_agents_once_and_prices_the_total() -> None:
    parent, _, _ = _paused_pair(
        None, calls(("s1", "delete", {}), tokens=5), text("done", tokens=2), price=True
    )
    paused = await parent.run("go")
    done = await parent.run_with_deferred_results(paused.messages, {"approvals": {"p1/s1": True}})
    assert done.output == "fin"
    assert (done.requests, done.tool_calls) == (1 + 1, 1)
    assert done.usage == Usage(input_tokens=2 + 1, output_tokens=2 + 1)
    assert done.cost == 3.0  # the parent's price of the total, as on the run path


async def test_a_parent_still_paused_after_its_resume_checks_its_limits() -> None:
    parent, _, _ = _paused_pair(
        1,
        calls(("s1", "delete", {}), tokens=5),
        calls(("s2", "look", {}), tokens=5),
        calls(("s3", "delete", {}), tokens=5),
    )
    parent.usage_limits = UsageLimits(requests=10)
    paused = await parent.run("go")
    parent.usage_limits = UsageLimits(requests=1)
    with pytest.raises(RunError) as info:
        await parent.run_with_deferred_results(paused.messages, {"approvals": {"p1/s1": True}})
    assert info.value.stage is Stage.USAGE
    assert info.value.partial is not None
    assert info.value.partial.requests == 2


async def test_a_resumed_sub_agents_answer_is_stamped_with_the_resuming_run() -> None:
    parent, _, _ = _paused_pair(None, calls(("s1", "delete", {}), tokens=5), text("done"))
    paused = await parent.run("go", conversation_id="conv")
    done = await parent.run_with_deferred_results(
        paused.messages, {"approvals": {"p1/s1": True}}, run_id="resume-1"
    )
    answer = next(m for m in done.messages if m.role == "tool" and m.tool_call_id == "p1")
    assert answer.content == "done"
    # a resolution the resume wrote, as an approved re-run's result is (reference §2.5, §2.9)
    assert (answer.run_id, answer.conversation_id) == ("resume-1", "conv")


# --------------------------------------------------------------------------- property

BEHAVIOURS = ["answer", "tool-then-answer", "fail-model", "fail-tool", "pause"]


class Counter:
    def __init__(self) -> None:
        self.executions = 0  # tool executions that did not defer


def sub_agent(name: str, behaviour: str, counter: Counter) -> Agent[None, str]:
    outcomes: list[Any] = {
        "answer": [text("ok", tokens=1)],
        "tool-then-answer": [calls(("t1", "work", {}), tokens=1), text("ok", tokens=1)],
        "fail-model": [RuntimeError("provider down")],
        "fail-tool": [calls(("t1", "boom", {}), tokens=1)],
        "pause": [calls(("t1", "gate", {}), tokens=1), text("ok", tokens=1)],
    }[behaviour]
    agent: Agent[None, str] = Agent(ScriptedModel(*outcomes), name=name)

    def work(ctx: RunContext[None], args: dict[str, Any]) -> str:
        counter.executions += 1
        return "done"

    def boom(ctx: RunContext[None], args: dict[str, Any]) -> str:
        counter.executions += 1
        raise ValueError("broken")

    def gate(ctx: RunContext[None], args: dict[str, Any]) -> str:
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, "?")
        counter.executions += 1
        return "approved work"

    for tool in (work, boom, gate):
        agent.tools[tool.__name__] = Tool(tool.__name__, "t", OBJ, tool)
    return agent


def models_of(*agents: Agent[None, str]) -> list[ScriptedModel]:
    found: list[ScriptedModel] = []
    for agent in agents:
        assert isinstance(agent.model, ScriptedModel)
        found.append(agent.model)
    return found


@settings(max_examples=int(os.environ.get("GOLEM_SUBRUN_EXAMPLES", "120")), deadline=None)
@given(
    behaviours=st.lists(st.sampled_from(BEHAVIOURS), min_size=1, max_size=3),
    parallel=st.booleans(),
)
@example(["answer"], False)  # counted once
@example(["fail-tool"], False)  # a failing sub-run still counts in the parent's partial
@example(["fail-model"], False)  # so does a sub-run whose first request failed
def test_a_parents_counts_are_every_model_request_and_tool_execution_of_its_tree(
    behaviours: list[str], parallel: bool
) -> None:
    """Whatever its sub-agents do — answer, use a tool, fail in their model or a tool, pause
    — the parent's `Result` (or `partial`) counts exactly the requests every model of the
    tree received, the tool executions every tool made (agent-tool calls that did not pause
    included, deferrals not), and one token per answered request; its resume likewise."""
    counter = Counter()
    subs = [sub_agent(f"sub{i}", b, counter) for i, b in enumerate(behaviours)]
    parent: Agent[None, str] = Agent(
        ScriptedModel(
            calls(*((f"p{i}", f"sub{i}", {"prompt": "go"}) for i in range(len(subs))), tokens=1),
            text("fin", tokens=1),
        ),
        tools=[s.as_tool() for s in subs],
        parallel_tool_calls=parallel,
    )
    models = models_of(parent, *subs)

    def requests() -> int:
        return sum(m.request_count for m in models)

    def answered() -> int:  # requests that got a response (each carries one token)
        failed = sum(
            1
            for b, sub in zip(behaviours, subs, strict=True)
            if b == "fail-model" and models_of(sub)[0].request_count
        )
        return requests() - failed

    def agent_tool_executions() -> int:
        return sum(
            1
            for b, s in zip(behaviours, subs, strict=True)
            if models_of(s)[0].request_count and b != "pause"
        )

    async def go() -> None:
        failure: RunError | None = None
        try:
            result = await parent.run("go")
        except RunError as failed:
            failure = failed
        if failure is not None:
            assert failure.stage is Stage.TOOL
            assert failure.partial is not None
            assert failure.partial.requests == requests()
            assert failure.partial.tool_calls == counter.executions + agent_tool_executions()
            assert failure.partial.usage.input_tokens == answered()
            return
        assert result.requests == requests()
        assert result.tool_calls == counter.executions + agent_tool_executions()
        assert result.usage.input_tokens == answered()
        if not result.is_paused:
            return
        before_requests, before_executions = requests(), counter.executions
        assert result.pending is not None
        done = await parent.run_with_deferred_results(
            result.messages, {"approvals": {p.call_id: True for p in result.pending.calls}}
        )
        assert done.output == "fin"
        assert done.requests == requests() - before_requests
        assert done.tool_calls == counter.executions - before_executions
        assert done.usage.input_tokens == done.requests

    asyncio.run(go())
