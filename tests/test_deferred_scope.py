"""Approval scope (issue 8 §3), idempotency keys and `before_approved` (§4), and the
resume shorthands (issue 12): what an approved re-run sees and what nested runs do not."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from golem import (
    Agent,
    Approval,
    DeferredResults,
    Message,
    RunContext,
    RunError,
    Stage,
    Tool,
    ToolCall,
    ToolError,
)
from golem.model import ModelResponse
from golem.testing import ScriptedModel
from golem.tool import DeferKind, Deferred, approved_call, call_approved, idempotency_key

OBJ = {"type": "object"}


def turn(*calls: ToolCall) -> ModelResponse:
    return ModelResponse(
        Message(role="assistant", tool_calls=list(calls)), finish_reason="tool_call"
    )


def sub_agent(wired: list[int]) -> Agent[None, str]:
    """An agent whose own gated tool must pause without its own approval."""
    model = ScriptedModel(turn(ToolCall("s1", "wire_money", '{"amount": 1000000}')), "wired")
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
        ScriptedModel(turn(ToolCall("o1", "delegate", "{}")), "done"),
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


# --------------------------------------------------------------------------- idempotency


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

    model = ScriptedModel(turn(ToolCall("c1", "g", "{}"), ToolCall("c2", "p", "{}")), "a", "b")
    agent = Agent(model, tools=[Tool("g", "g", OBJ, gate), Tool("p", "p", OBJ, plain)])
    paused = await agent.run("go", conversation_id="conv-7")
    # two resumes of the same paused history (a retry): the same key each time
    await agent.run_with_deferred_results(paused.messages, {"approvals": {"c1": True}})
    await agent.run_with_deferred_results(
        paused.messages, {"approvals": {"c1": True}}, run_id="another-run"
    )
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


# --------------------------------------------------------------------------- before_approved


def two_gates() -> tuple[Agent[None, str], list[str]]:
    ran: list[str] = []

    def gate(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL)
        ran.append(ctx.call_id)
        return "ok"

    model = ScriptedModel(turn(ToolCall("c1", "g", "{}"), ToolCall("c2", "g", '{"n":2}')), "done")
    return Agent(model, tools=[Tool("g", "g", OBJ, gate)]), ran


async def test_before_approved_is_awaited_right_before_each_approved_rerun_only() -> None:
    agent, ran = two_gates()
    agent.model = ScriptedModel(
        turn(ToolCall("c1", "g", "{}"), ToolCall("c2", "g", '{"n":2}')), "done", "done"
    )
    paused = await agent.run("go")
    order: list[str] = []

    async def fence(call: ToolCall) -> None:
        order.append(f"fence {call.id} {call.args} ran={ran}")

    results = {"approvals": {"c1": True, "c2": Approval(True, args={"n": 3})}}
    done = await agent.run_with_deferred_results(paused.messages, results, before_approved=fence)
    assert done.output == "done"
    assert order == ["fence c1 {} ran=[]", "fence c2 {\"n\":3} ran=['c1']"]
    order.clear()
    ran.clear()  # skipped for denials (and external results)
    await agent.run_with_deferred_results(
        paused.messages, {"approvals": {"c1": False, "c2": True}}, before_approved=fence
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
            paused.messages, {"approvals": {"c1": True, "c2": True}}, before_approved=fence
        )
    assert info.value is lost
    assert ran == ["c1"]
    assert len(agent.model.requests) == requests


# --------------------------------------------------------------------------- shorthands


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


async def test_a_tool_deferring_again_on_its_approved_rerun_is_told_about_the_gate() -> None:
    def careless(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        raise Deferred(DeferKind.APPROVAL, "always")

    agent = Agent(
        ScriptedModel(turn(ToolCall("c1", "careless", "{}"))),
        tools=[Tool("careless", "c", OBJ, careless)],
    )
    paused = await agent.run("go")
    with pytest.raises(RunError) as info:
        await agent.run_with_deferred_results(paused.messages, {"approvals": {"c1": True}})
    assert info.value.stage is Stage.TOOL
    cause = info.value.__cause__
    assert isinstance(cause, ToolError)
    assert "deferred again" in str(cause)
    assert "call_approved()" in str(cause)
