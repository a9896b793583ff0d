"""run_stream: deltas and events in arrival order, the same Result as run, failures.

That a streamed run or resume pauses, resumes, fails and emits events exactly as the plain
one (parallel or not) is `tests/test_contract_batches.py`'s property; that a consumer cancelled
or leaving early stops the run cleanly is `tests/test_cancelling.py`'s."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from golem import Agent, Result, RunError, RunEvent, Stage, Usage
from golem.errors import BadRequest, Overloaded
from golem.messages import Message, ThinkingBlock, ToolCall
from golem.model import Delta, ModelRequest, ModelResponse
from golem.testing import FunctionModel, ScriptedModel
from golem.tool import Tool

OBJ = {"type": "object"}


def calls(*items: tuple[str, str, str], content: str = "") -> Message:
    return Message(
        role="assistant", content=content, tool_calls=[ToolCall(i, n, a) for i, n, a in items]
    )


def script() -> list[Any]:
    return [
        ModelResponse(
            calls(("c1", "lookup", '{"q": "x"}'), content="Let me look."),
            usage=Usage(10, 2),
            finish_reason="tool_call",
        ),
        ModelResponse(
            Message(role="assistant", content="The answer."),
            usage=Usage(20, 4),
            finish_reason="stop",
        ),
    ]


def agent_for(model: Any, **kwargs: Any) -> Agent[Any, Any]:
    return Agent(model, tools=[Tool("lookup", "L.", OBJ, lambda ctx, args: "found")], **kwargs)


async def collect(
    agent: Agent[Any, Any], prompt: str, **kwargs: Any
) -> tuple[list[Any], Result[Any]]:
    items: list[Any] = []
    async with agent.run_stream(prompt, **kwargs) as stream:
        async for item in stream:
            items.append(item)
    return items, stream.result


def shape(items: list[Any]) -> list[str]:
    out = []
    for item in items:
        if isinstance(item, RunEvent):
            out.append(item.kind.value)
        else:
            assert isinstance(item, Delta)
            if item.content:
                out.append(f"text:{item.content}")
            for tc in item.tool_calls:
                out.append(f"call:{tc.id}:{tc.name}")
            for th in item.thinking:
                out.append(f"think:{th.text}")
    return out


async def test_items_arrive_in_order_across_turns_and_the_result_is_what_run_returns() -> None:
    agent_seen: list[RunEvent] = []
    run_seen: list[RunEvent] = []
    ids = {"run_id": "run-1", "conversation_id": "conv-1"}
    agent = agent_for(ScriptedModel(*script()), event_handler=agent_seen.append)
    items, streamed = await collect(agent, "q", on_event=run_seen.append, **ids)
    assert shape(items) == [
        *("model_start", "text:Let me look.", "call:c1:lookup", "model_end"),
        *("tool_start", "tool_end", "model_start", "text:The answer.", "model_end"),
    ]
    assert [i for i in items if isinstance(i, RunEvent)] == agent_seen == run_seen
    assert {(e.run_id, e.conversation_id) for e in run_seen} == {("run-1", "conv-1")}
    assert streamed == await agent_for(ScriptedModel(*script())).run("q", **ids)
    assert (streamed.output, streamed.usage) == ("The answer.", Usage(30, 6))
    assert (streamed.requests, streamed.tool_calls, streamed.finish_reason) == (2, 1, "stop")


async def test_thinking_is_streamed_before_the_text() -> None:
    model = ScriptedModel(
        Message(role="assistant", content="42", thinking=[ThinkingBlock(text="hmm", signature="s")])
    )
    items, result = await collect(Agent(model), "q")
    assert shape(items) == ["model_start", "think:hmm", "text:42", "model_end"]
    assert result.messages[-1].thinking == [ThinkingBlock(text="hmm", signature="s")]


async def test_streaming_accepts_history_and_deps() -> None:
    model = ScriptedModel("second")
    history = [Message(role="user", content="first"), Message(role="assistant", content="a")]
    _, result = await collect(Agent(model), "again", history=history, deps={"x": 1})
    assert [m.content for m in model.requests[0].messages] == ["first", "a", "again"]
    assert result.output == "second"


async def test_streaming_output_correction_round() -> None:
    model = ScriptedModel("nope", "7")
    items, result = await collect(Agent(model, output_type=int, output_retries=1), "q")
    assert result.output == 7
    assert shape(items) == [
        "model_start",
        "text:nope",
        "model_end",
        "output_rejected",
        "model_start",
        "text:7",
        "model_end",
    ]


async def test_non_streaming_model_fails_up_front() -> None:
    model = FunctionModel(lambda request: "hi")
    agent = Agent(model)
    with pytest.raises(TypeError, match="stream"):
        async with agent.run_stream("q") as stream:
            async for _ in stream:
                pass
    assert model.requests == []


async def test_stream_that_breaks_mid_way_is_a_model_stage_error() -> None:
    async def stream_fn(request: ModelRequest) -> AsyncIterator[Any]:
        yield "partial "
        raise BadRequest("connection dropped")

    model = FunctionModel(lambda r: "unused", stream=stream_fn)
    seen: list[Any] = []
    with pytest.raises(RunError) as info:
        async with Agent(model).run_stream("q") as stream:
            async for item in stream:
                seen.append(item)
    assert info.value.stage is Stage.MODEL
    assert "text:partial " in shape(seen)


async def test_a_model_failure_is_a_run_error_and_streamed_turns_are_single_attempt() -> None:
    model = ScriptedModel(Overloaded("busy"), "ok")
    agent = Agent(model, max_attempts=3, retry_backoff=lambda n: 0)
    with pytest.raises(RunError) as info:
        await collect(agent, "q")
    assert info.value.stage is Stage.MODEL
    assert isinstance(info.value.__cause__, Overloaded)
    assert len(model.requests) == 1


async def test_function_model_stream_drives_run_stream() -> None:
    async def stream_fn(request: ModelRequest) -> AsyncIterator[Any]:
        yield "Hel"
        yield Delta(content="lo")
        yield ModelResponse(
            Message(role="assistant", content="Hello"), usage=Usage(3, 1), finish_reason="stop"
        )

    model = FunctionModel(lambda r: "unused", stream=stream_fn)
    items, result = await collect(Agent(model), "q")
    assert shape(items) == ["model_start", "text:Hel", "text:lo", "model_end"]
    assert result.output == "Hello"
    assert result.usage == Usage(3, 1)


async def test_result_is_not_available_before_the_stream_is_consumed() -> None:
    agent = Agent(ScriptedModel("hi"))
    async with agent.run_stream("q") as stream:
        with pytest.raises(RuntimeError):
            _ = stream.result
        async for _ in stream:
            pass
        assert stream.result.output == "hi"


def hanging_model(started: asyncio.Event, closed: list[bool]) -> FunctionModel:
    async def stream_fn(request: ModelRequest) -> AsyncIterator[Any]:
        try:
            yield "first"
            started.set()
            await asyncio.Event().wait()
        finally:
            closed.append(True)
        yield "never"

    return FunctionModel(lambda r: "unused", stream=stream_fn)


async def test_cancelling_the_stream_consumer_propagates_and_stops_the_run() -> None:
    """A deterministic case of test_cancelling.py's property (the consumer cancelled while it
    waits for the model's stream)."""
    started, closed = asyncio.Event(), []
    agent = Agent(hanging_model(started, closed))

    async def consume() -> None:
        async with agent.run_stream("q") as stream:
            async for _ in stream:
                pass

    task = asyncio.create_task(consume())
    await asyncio.wait_for(started.wait(), timeout=10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert closed == [True]


async def test_function_model_stream_of_tool_call_fragments_runs_the_tool() -> None:
    from golem.model import ToolCallDelta

    async def stream_fn(request: ModelRequest) -> AsyncIterator[Any]:
        if request.messages[-1].role == "tool":
            yield f"Tool said {request.messages[-1].content}."
            return
        yield Delta(tool_calls=[ToolCallDelta(0, id="c1", name="lookup")])
        yield Delta(tool_calls=[ToolCallDelta(0, args_fragment='{"q": ')])
        yield Delta(tool_calls=[ToolCallDelta(0, args_fragment='"x"}')])

    seen: list[dict[str, Any]] = []

    def lookup(ctx: Any, args: dict[str, Any]) -> str:
        seen.append(args)
        return "found"

    model = FunctionModel(lambda r: "unused", stream=stream_fn)
    agent = Agent(model, tools=[Tool("lookup", "L.", OBJ, lookup)])
    _, result = await collect(agent, "q")
    assert seen == [{"q": "x"}]
    assert result.output == "Tool said found."
    assert result.messages[1].tool_calls == [ToolCall("c1", "lookup", '{"q": "x"}')]


# --------------------------------------------------------------------------- streamed resume


def gated_agent(model: Any, **kwargs: Any) -> tuple[Agent[Any, Any], list[str]]:
    from golem.tool import DeferKind, Deferred, call_approved

    ran: list[str] = []

    def gate(ctx: Any, args: dict[str, Any]) -> str:
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, "sign-off")
        ran.append(ctx.call_id)
        return "deleted"

    return Agent(model, tools=[Tool("delete", "D.", OBJ, gate)], **kwargs), ran


def resume_script() -> list[Any]:
    return [
        ModelResponse(calls(("c1", "delete", '{"p":"a"}')), finish_reason="tool_call"),
        ModelResponse(Message(role="assistant", content="Deleted a."), finish_reason="stop"),
    ]


async def test_a_streamed_resume_yields_reruns_then_the_models_deltas_in_order() -> None:
    agent, ran = gated_agent(ScriptedModel(*resume_script()))
    paused = await agent.run("clean")
    observed: list[RunEvent] = []
    items: list[Any] = []
    async with agent.run_stream_with_deferred_results(
        paused.messages, {"approvals": {"c1": True}}, on_event=observed.append
    ) as stream:
        async for item in stream:
            items.append(item)
    assert ran == ["c1"]
    assert shape(items) == ["tool_start", "tool_end", "model_start", "text:Deleted a.", "model_end"]
    assert [e.approved for e in items if isinstance(e, RunEvent)] == [True, True, False, False]
    assert [i.content for i in items if isinstance(i, Delta)] == ["Deleted a."]
    assert [e.kind for e in observed] == [e.kind for e in items if isinstance(e, RunEvent)]
    result = stream.result
    assert result.output == "Deleted a."
    assert result.tool_calls == 1
    assert [m.role for m in result.messages] == ["user", "assistant", "tool", "assistant"]


async def test_a_streamed_resume_is_validated_before_the_stream_starts() -> None:
    from golem import ResumeError, SealError

    agent, ran = gated_agent(ScriptedModel(*resume_script()), seal_key=b"k" * 32)
    paused = await agent.run("clean")
    assert isinstance(agent.model, ScriptedModel)
    requests = len(agent.model.requests)
    with pytest.raises(ResumeError, match="has no resolution"):
        agent.run_stream_with_deferred_results(paused.messages, {})
    forged = [m for m in paused.messages]
    forged[-1] = Message(
        role="assistant",
        tool_calls=[
            ToolCall("c1", "delete", '{"p":"/"}', seal=paused.messages[-1].tool_calls[0].seal)
        ],
        conversation_id=paused.conversation_id,
    )
    with pytest.raises(SealError, match="does not match"):
        agent.run_stream_with_deferred_results(forged, {"approvals": {"c1": True}})
    with pytest.raises(TypeError, match="DeferredResults"):
        agent.run_stream_with_deferred_results(paused.messages, ["c1"])  # type: ignore[arg-type]
    assert ran == []
    assert len(agent.model.requests) == requests

    class Plain:  # no streaming
        async def generate(self, request: ModelRequest) -> ModelResponse:
            raise AssertionError("never called")

    agent.model = Plain()  # type: ignore[assignment]
    with pytest.raises(TypeError, match="does not support streaming"):
        agent.run_stream_with_deferred_results(paused.messages, {"approvals": {"c1": True}})


async def test_a_failing_rerun_raises_from_the_streamed_iteration() -> None:
    def broken(ctx: Any, args: dict[str, Any]) -> str:
        from golem.tool import DeferKind, Deferred, call_approved

        if not call_approved():
            raise Deferred(DeferKind.APPROVAL)
        raise RuntimeError("disk full")

    agent = Agent(ScriptedModel(*resume_script()), tools=[Tool("delete", "D.", OBJ, broken)])
    paused = await agent.run("clean")
    items: list[Any] = []
    with pytest.raises(RunError) as info:
        async with agent.run_stream_with_deferred_results(
            paused.messages, {"approvals": {"c1": True}}
        ) as stream:
            async for item in stream:
                items.append(item)
    assert info.value.stage is Stage.TOOL
    assert shape(items) == ["tool_start", "tool_end"]


async def test_run_stream_with_a_paused_history_closes_the_pending_calls() -> None:
    agent, ran = gated_agent(ScriptedModel(*resume_script()))
    paused = await agent.run("clean")
    agent.model = ScriptedModel("ok")
    items, result = await collect(agent, "", history=paused.messages)
    assert ran == []
    tool = [m for m in result.messages if m.role == "tool"]
    assert tool[0].content.startswith("Tool call was interrupted before execution")
    assert "tool_start" not in shape(items)


class _GatedToolset:
    """A minimal toolset (as an MCP server would be) offering one gated tool."""

    def __init__(self) -> None:
        self.entered = 0
        self.ran: list[str] = []

    async def __aenter__(self) -> _GatedToolset:
        self.entered += 1
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.entered -= 1

    async def list_tools(self) -> list[Tool]:
        from golem.tool import DeferKind, Deferred, call_approved

        def remote(ctx: Any, args: dict[str, Any]) -> str:
            if not call_approved():
                raise Deferred(DeferKind.APPROVAL, "remote sign-off")
            assert self.entered == 1  # the toolset is entered while its tool re-runs
            self.ran.append(ctx.call_id)
            return "remote done"

        return [Tool("remote_delete", "D.", OBJ, remote)]


async def test_a_streamed_resume_reruns_a_toolsets_tool_and_checks_inside_the_run() -> None:
    from golem import ResumeError

    toolset = _GatedToolset()
    model = ScriptedModel(
        ModelResponse(calls(("c1", "remote_delete", "{}")), finish_reason="tool_call"), "ok"
    )
    agent: Agent[Any, Any] = Agent(model, toolsets=[toolset], seal_key=b"t" * 32)
    paused = await agent.run("go")
    assert paused.pending is not None
    assert paused.pending.approvals[0].seal
    # with toolsets, the check runs once they are entered: raised from the iteration
    stream = agent.run_stream_with_deferred_results(paused.messages, {})
    with pytest.raises(ResumeError, match="has no resolution"):
        async with stream:
            async for _ in stream:
                pass
    assert toolset.ran == []
    async with agent.run_stream_with_deferred_results(
        paused.paused_run, {"approvals": {"c1": True}}
    ) as stream:
        items = [item async for item in stream]
    assert toolset.ran == ["c1"]
    assert shape(items)[:2] == ["tool_start", "tool_end"]
    assert stream.result.output == "ok"
    assert toolset.entered == 0
