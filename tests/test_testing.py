"""The offline test models golem ships: ScriptedModel and FunctionModel."""

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

SPEC = ToolSpec("t", "T.", {"type": "object"})


def request(text: str = "hi") -> ModelRequest:
    return ModelRequest(messages=[Message(role="user", content=text)])


def said(text: str) -> Message:
    return Message(role="assistant", content=text)


async def drain(model: Any, req: ModelRequest) -> list[Any]:
    return [item async for item in model.generate_stream(req)]


async def contents(model: Any, n: int) -> list[str | type[BaseException]]:
    out: list[str | type[BaseException]] = []
    for _ in range(n):
        try:
            out.append((await model.generate(request())).message.content)
        except Exception as exc:
            out.append(type(exc))
    return out


# --------------------------------------------------------------------------- ScriptedModel


async def test_scripted_outcomes_are_answered_and_raised_in_order_from_one_fifo_queue() -> None:
    r1 = ModelResponse(said("one"), usage=Usage(1, 2), finish_reason="stop")
    error = Overloaded("busy")
    model = ScriptedModel(r1, error, said("two"))
    assert isinstance(model, Model)
    assert isinstance(model, StreamingModel)
    assert await model.generate(request()) == r1
    with pytest.raises(Overloaded) as info:
        await model.generate(request())
    assert info.value is error
    assert isinstance(second := await model.generate(request()), ModelResponse)
    assert second.message == said("two")
    returned = model.respond(said("a")).fail(BadRequest("b"))
    assert returned is model
    model.respond(ModelResponse(said("c")), said("d")).fail(BadRequest("x"), Overloaded("y"))
    assert await contents(model, 6) == ["a", BadRequest, "c", "d", BadRequest, Overloaded]


async def test_an_exhausted_queue_says_respond_and_is_a_model_stage_error_in_a_run() -> None:
    model = ScriptedModel(said("only"))
    await model.generate(request())
    with pytest.raises(Exception, match=r"(?i)respond") as info:
        await model.generate(request())
    assert not isinstance(info.value, AssertionError)
    assert len(model.requests) == model.request_count == 2  # the request is recorded first
    assert "request 2;" in str(info.value)
    with pytest.raises(RunError) as run_info:
        await Agent(ScriptedModel()).run("hi")
    assert run_info.value.stage is Stage.MODEL
    assert "respond" in str(run_info.value.__cause__).lower()


async def test_requests_record_every_request_of_a_run_in_order() -> None:
    tool = Tool("t", "T.", {"type": "object"}, lambda ctx, args: "ok")
    model = ScriptedModel(
        Message(role="assistant", tool_calls=[ToolCall("c1", "t", "{}")]), "done", "again"
    )
    agent = Agent(model, tools=[tool])
    first = await agent.run("one")
    await agent.run("two", history=first.messages)
    assert isinstance(model.requests, list)
    assert [[m.role for m in r.messages] for r in model.requests[:2]] == [
        ["user"],
        ["user", "assistant", "tool"],
    ]
    assert [len(r.messages) for r in model.requests] == [1, 3, 5]  # each its own state
    assert model.requests[0].tools == [SPEC]


@pytest.mark.parametrize("make", [ScriptedModel, lambda: FunctionModel(lambda r: "ok")])
async def test_requests_are_snapshots_sharing_the_immutable_messages(make: Any) -> None:
    part = Part("image", url="https://example.com/a.png")
    req = ModelRequest(
        messages=[Message(role="user", content="hi", parts=[part])],
        tools=[SPEC],
        output_schema={"x": 1},
    )
    model = make()
    if isinstance(model, ScriptedModel):
        model.respond("ok")
    await model.generate(req)
    req.messages.append(Message(role="user", content="later"))
    req.tools.clear()
    recorded = model.requests[0]
    assert recorded is not req
    assert [m.content for m in recorded.messages] == ["hi"]
    assert recorded.messages[0] is req.messages[0]  # shared, not copied
    assert (recorded.tools, recorded.output_schema) == ([SPEC], req.output_schema)


async def test_requests_keep_the_most_recent_ones_and_count_them_all() -> None:
    async def stream(r: ModelRequest) -> AsyncIterator[str]:
        yield "hi"

    kept = [
        ScriptedModel(*[f"answer {i}" for i in range(5)], keep_requests=2),
        FunctionModel(lambda r: "ok", keep_requests=2),
        FunctionModel(lambda r: "ok", stream=stream, keep_requests=2),
    ]
    for i, model in enumerate(kept):
        for n in range(5):
            if i == 2:
                await drain(model, request(f"q{n}"))
            else:
                await model.generate(request(f"q{n}"))
        assert [r.messages[0].content for r in model.requests] == ["q3", "q4"]
        assert model.request_count == 5
    default = FunctionModel(lambda r: "ok")
    everything = ScriptedModel(*["ok"] * (KEEP_REQUESTS + 5), keep_requests=None)
    nothing = FunctionModel(lambda r: "ok", keep_requests=0)
    for i in range(KEEP_REQUESTS + 5):
        for model in (default, everything, nothing):
            await model.generate(request(f"q{i}"))
    assert len(default.requests) == KEEP_REQUESTS  # bounded by default
    assert default.requests[-1].messages[0].content == f"q{KEEP_REQUESTS + 4}"
    assert len(everything.requests) == KEEP_REQUESTS + 5
    assert nothing.requests == []
    assert nothing.request_count == default.request_count == KEEP_REQUESTS + 5
    for keep in (-1, -100):
        with pytest.raises(ValueError, match="keep_requests must be a count"):
            ScriptedModel(keep_requests=keep)
        with pytest.raises(ValueError, match=r"got -\d+"):
            FunctionModel(lambda r: "ok", keep_requests=keep)


async def test_a_scripted_stream_replays_the_response_as_deltas_from_the_same_queue() -> None:
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
    model = ScriptedModel("a", response, BadRequest("no"))
    assert (await model.generate(request())).message.content == "a"
    items = await drain(model, request())
    assert items[-1] == response
    deltas = items[:-1]
    assert all(isinstance(d, Delta) for d in deltas)
    assert "".join(d.content for d in deltas) == "Calling."
    assert [t.text for d in deltas for t in d.thinking] == ["plan"]
    tool_deltas = [t for d in deltas for t in d.tool_calls]
    assert [(t.index, t.id, t.name) for t in tool_deltas] == [(0, "c1", "a"), (1, "c2", "b")]
    with pytest.raises(BadRequest):
        await drain(model, request())
    with pytest.raises(Exception, match=r"(?i)respond"):
        await model.generate(request())


# --------------------------------------------------------------------------- FunctionModel


async def test_a_function_model_from_a_sync_or_async_function_drives_a_run() -> None:
    seen: list[ModelRequest] = []

    def fn(req: ModelRequest) -> Message:
        seen.append(req)
        if req.messages[-1].role == "tool":
            return said(f"tool said {req.messages[-1].content}")  # a bare message
        return Message(role="assistant", tool_calls=[ToolCall("c1", "t", "{}")])

    async def answer(req: ModelRequest) -> ModelResponse:
        await asyncio.sleep(0)
        return ModelResponse(said("async hi"), usage=Usage(2, 3))

    model = FunctionModel(fn)
    assert isinstance(model, Model)
    assert not isinstance(model, StreamingModel)  # no stream function
    tool = Tool("t", "T.", {"type": "object"}, lambda ctx, args: "42")
    assert (await Agent(model, tools=[tool]).run("go")).output == "tool said 42"
    assert len(seen) == 2
    res = await Agent(FunctionModel(answer)).run("hello")
    assert (res.output, res.usage) == ("async hi", Usage(2, 3))

    def fails(req: ModelRequest) -> Message:
        raise BadRequest("no")

    with pytest.raises(RunError) as info:
        await Agent(FunctionModel(fails)).run("go")
    assert info.value.stage is Stage.MODEL


async def test_a_function_model_with_a_stream_function_streams() -> None:
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
