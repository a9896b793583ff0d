"""The offline test models: ScriptedModel and FunctionModel (and the no-network guard)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from golem import Agent, RunError, Stage, Usage
from golem.errors import BadRequest, Overloaded
from golem.messages import Message, Part, ThinkingBlock, ToolCall
from golem.model import Delta, Model, ModelRequest, ModelResponse, StreamingModel, ToolSpec
from golem.testing import KEEP_REQUESTS, FunctionModel, ScriptedModel
from golem.tool import Tool


def request(text: str = "hi") -> ModelRequest:
    return ModelRequest(messages=[Message(role="user", content=text)])


async def drain(model: Any, req: ModelRequest) -> list[Any]:
    return [item async for item in model.generate_stream(req)]


# --------------------------------------------------------------------------- ScriptedModel


def test_scripted_model_is_a_streaming_model() -> None:
    model = ScriptedModel()
    assert isinstance(model, Model)
    assert isinstance(model, StreamingModel)


async def test_outcomes_are_answered_in_order() -> None:
    r1 = ModelResponse(
        Message(role="assistant", content="one"), usage=Usage(1, 2), finish_reason="stop"
    )
    m2 = Message(role="assistant", content="two")
    model = ScriptedModel(r1, m2)
    assert await model.generate(request()) == r1
    second = await model.generate(request())
    assert second.message == m2
    assert isinstance(second, ModelResponse)


async def test_exception_outcomes_are_raised() -> None:
    error = Overloaded("busy")
    model = ScriptedModel(error, Message(role="assistant", content="ok"))
    with pytest.raises(Overloaded) as info:
        await model.generate(request())
    assert info.value is error
    assert (await model.generate(request())).message.content == "ok"


async def test_respond_and_fail_chain_and_queue_fifo() -> None:
    model = ScriptedModel()
    returned = model.respond(Message(role="assistant", content="a")).fail(BadRequest("b"))
    assert returned is model
    model.respond(ModelResponse(Message(role="assistant", content="c")))
    assert (await model.generate(request())).message.content == "a"
    with pytest.raises(BadRequest):
        await model.generate(request())
    assert (await model.generate(request())).message.content == "c"


async def test_respond_and_fail_accept_several_outcomes() -> None:
    model = ScriptedModel().respond(
        Message(role="assistant", content="a"), Message(role="assistant", content="b")
    )
    model.fail(BadRequest("x"), Overloaded("y"))
    assert (await model.generate(request())).message.content == "a"
    assert (await model.generate(request())).message.content == "b"
    with pytest.raises(BadRequest):
        await model.generate(request())
    with pytest.raises(Overloaded):
        await model.generate(request())


async def test_exhausted_queue_raises_a_clear_error() -> None:
    model = ScriptedModel(Message(role="assistant", content="only"))
    await model.generate(request())
    with pytest.raises(Exception, match=r"(?i)respond") as info:
        await model.generate(request())
    assert not isinstance(info.value, AssertionError)
    assert len(model.requests) == model.request_count == 2  # the request is recorded first
    assert "request 2;" in str(info.value)


async def test_exhausted_queue_inside_a_run_is_a_model_stage_error() -> None:
    with pytest.raises(RunError) as info:
        await Agent(ScriptedModel()).run("hi")
    assert info.value.stage is Stage.MODEL
    assert "respond" in str(info.value.__cause__).lower()


async def test_requests_records_every_request_in_order() -> None:
    tool = Tool("t", "T.", {"type": "object"}, lambda ctx, args: "ok")
    model = ScriptedModel(
        Message(role="assistant", tool_calls=[ToolCall("c1", "t", "{}")]),
        Message(role="assistant", content="done"),
    )
    await Agent(model, tools=[tool]).run("hi")
    assert isinstance(model.requests, list)
    assert len(model.requests) == 2
    assert [m.role for m in model.requests[0].messages] == ["user"]
    assert [m.role for m in model.requests[1].messages] == ["user", "assistant", "tool"]
    assert model.requests[0].tools == [ToolSpec("t", "T.", {"type": "object"})]


async def test_requests_are_snapshots_of_the_lists_the_run_goes_on_changing() -> None:
    part = Part("image", url="https://example.com/a.png")
    req = ModelRequest(
        messages=[Message(role="user", content="hi", parts=[part])],
        tools=[ToolSpec("t", "T.", {"type": "object"})],
    )
    model = ScriptedModel("ok")
    await model.generate(req)
    req.messages.append(Message(role="user", content="later"))
    req.tools.clear()
    recorded = model.requests[0]
    assert recorded is not req
    assert [m.content for m in recorded.messages] == ["hi"]
    assert recorded.messages[0].parts == [part]
    assert recorded.tools == [ToolSpec("t", "T.", {"type": "object"})]


async def test_recorded_requests_share_the_immutable_messages_instead_of_copying_them() -> None:
    req = ModelRequest(messages=[Message(role="user", content="hi")], output_schema={"x": 1})
    model = FunctionModel(lambda r: "ok")
    await model.generate(req)
    assert model.requests[0].messages[0] is req.messages[0]
    assert model.requests[0].output_schema is req.output_schema


async def test_a_run_sees_its_own_state_in_every_recorded_request() -> None:
    tool = Tool("t", "T.", {"type": "object"}, lambda ctx, args: "ok")
    model = ScriptedModel(
        Message(role="assistant", tool_calls=[ToolCall("c1", "t", "{}")]), "done", "again"
    )
    agent = Agent(model, tools=[tool])
    first = await agent.run("one")
    await agent.run("two", history=first.messages)
    assert [len(r.messages) for r in model.requests] == [1, 3, 5]


async def test_requests_keep_the_most_recent_ones_and_count_them_all() -> None:
    scripted = ScriptedModel(*[f"answer {i}" for i in range(5)], keep_requests=2)
    function = FunctionModel(lambda r: "ok", keep_requests=2)
    for model in (scripted, function):
        for i in range(5):
            await model.generate(request(f"q{i}"))
        assert [r.messages[0].content for r in model.requests] == ["q3", "q4"]
        assert model.request_count == 5


async def test_requests_are_bounded_by_default() -> None:
    model = FunctionModel(lambda r: "ok")
    for i in range(KEEP_REQUESTS + 5):
        await model.generate(request(f"q{i}"))
    assert len(model.requests) == KEEP_REQUESTS
    assert model.requests[-1].messages[0].content == f"q{KEEP_REQUESTS + 4}"
    assert model.request_count == KEEP_REQUESTS + 5


async def test_keep_requests_none_keeps_all_and_zero_keeps_none() -> None:
    everything = ScriptedModel(*["ok"] * (KEEP_REQUESTS + 1), keep_requests=None)
    nothing = FunctionModel(lambda r: "ok", keep_requests=0)
    for _ in range(KEEP_REQUESTS + 1):
        await everything.generate(request())
        await nothing.generate(request())
    assert len(everything.requests) == KEEP_REQUESTS + 1
    assert nothing.requests == []
    assert nothing.request_count == KEEP_REQUESTS + 1


async def test_a_streaming_function_model_records_its_requests() -> None:
    async def stream(r: ModelRequest) -> AsyncIterator[str]:
        yield "hi"

    model = FunctionModel(lambda r: "ok", stream=stream, keep_requests=1)
    await drain(model, request("a"))
    await drain(model, request("b"))
    assert [r.messages[0].content for r in model.requests] == ["b"]
    assert model.request_count == 2


@pytest.mark.parametrize("keep", [-1, -100])
def test_a_negative_keep_requests_is_refused(keep: int) -> None:
    with pytest.raises(ValueError, match="keep_requests must be a count"):
        ScriptedModel(keep_requests=keep)
    with pytest.raises(ValueError, match=r"got -\d+"):
        FunctionModel(lambda r: "ok", keep_requests=keep)


async def test_scripted_stream_replays_the_response_as_deltas() -> None:
    response = ModelResponse(
        Message(
            role="assistant",
            content="Calling.",
            thinking=[ThinkingBlock(text="plan", signature="sig"), ThinkingBlock(redacted="zz")],
            tool_calls=[ToolCall("c1", "a", '{"x": 1}'), ToolCall("c2", "b", "{}")],
        ),
        usage=Usage(4, 5),
        finish_reason="tool_call",
    )
    model = ScriptedModel(response)
    items = await drain(model, request())
    assert items[-1] == response
    deltas = items[:-1]
    assert all(isinstance(d, Delta) for d in deltas)
    assert "".join(d.content for d in deltas) == "Calling."
    thinking = [t for d in deltas for t in d.thinking]
    assert [t.text for t in thinking] == ["plan"]
    tool_deltas = [t for d in deltas for t in d.tool_calls]
    assert [(t.index, t.id, t.name) for t in tool_deltas] == [(0, "c1", "a"), (1, "c2", "b")]
    assert len(model.requests) == 1


async def test_scripted_stream_raises_scripted_errors() -> None:
    model = ScriptedModel(BadRequest("no"))
    with pytest.raises(BadRequest):
        await drain(model, request())


async def test_scripted_stream_and_generate_share_one_queue() -> None:
    model = ScriptedModel("a", "b")
    assert (await model.generate(request())).message.content == "a"
    items = await drain(model, request())
    assert items[-1].message.content == "b"
    with pytest.raises(Exception, match=r"(?i)respond"):
        await model.generate(request())


# --------------------------------------------------------------------------- FunctionModel


async def test_function_model_from_a_sync_function() -> None:
    seen: list[ModelRequest] = []

    def answer(req: ModelRequest) -> ModelResponse:
        seen.append(req)
        return ModelResponse(
            Message(role="assistant", content=f"you said {req.messages[-1].content}")
        )

    model = FunctionModel(answer)
    assert isinstance(model, Model)
    res = await Agent(model).run("hello")
    assert res.output == "you said hello"
    assert len(seen) == 1


async def test_function_model_from_an_async_function() -> None:
    async def answer(req: ModelRequest) -> ModelResponse:
        await asyncio.sleep(0)
        return ModelResponse(Message(role="assistant", content="async hi"), usage=Usage(2, 3))

    res = await Agent(FunctionModel(answer)).run("hello")
    assert res.output == "async hi"
    assert res.usage == Usage(2, 3)


async def test_function_model_may_return_a_bare_message() -> None:
    model = FunctionModel(lambda req: Message(role="assistant", content="bare"))
    assert (await model.generate(request())).message.content == "bare"


async def test_function_model_drives_tool_calls() -> None:
    def fn(req: ModelRequest) -> Message:
        if req.messages[-1].role == "tool":
            return Message(role="assistant", content=f"tool said {req.messages[-1].content}")
        return Message(role="assistant", tool_calls=[ToolCall("c1", "t", "{}")])

    tool = Tool("t", "T.", {"type": "object"}, lambda ctx, args: "42")
    res = await Agent(FunctionModel(fn), tools=[tool]).run("go")
    assert res.output == "tool said 42"


async def test_function_model_errors_propagate_as_model_stage() -> None:
    def fn(req: ModelRequest) -> Message:
        raise BadRequest("no")

    with pytest.raises(RunError) as info:
        await Agent(FunctionModel(fn)).run("go")
    assert info.value.stage is Stage.MODEL


def test_function_model_without_stream_function_is_not_streaming() -> None:
    model = FunctionModel(lambda req: "x")
    assert not isinstance(model, StreamingModel)


async def test_function_model_with_a_stream_function_streams() -> None:
    async def stream(req: ModelRequest) -> AsyncIterator[Any]:
        yield Delta(content="a")
        yield Delta(content="b")

    model = FunctionModel(lambda req: "ab", stream=stream)
    assert isinstance(model, StreamingModel)
    items = await drain(model, request())
    assert [d.content for d in items[:-1]] == ["a", "b"]
    final = items[-1]
    assert isinstance(final, ModelResponse)
    assert final.message.content == "ab"
    assert (await model.generate(request())).message.content == "ab"

