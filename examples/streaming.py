"""Streaming, offline: text deltas, tool-call deltas and run events in arrival order.

1. `ScriptedModel` replays its responses as deltas: a tool call, then the answer.
2. `FunctionModel(fn, stream=...)` streams word by word from an async generator.

Run it with `python examples/streaming.py`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from golem import Agent, RunEvent
from golem.messages import Message, ToolCall
from golem.model import Delta, ModelRequest
from golem.testing import FunctionModel, ScriptedModel


def forecast(city: str) -> str:
    """Tomorrow's forecast for a city.

    Args:
        city: The city's name.
    """
    return "light rain, 14°C"


async def scripted() -> None:
    model = ScriptedModel(
        Message(
            role="assistant",
            content="Let me check. ",
            tool_calls=[ToolCall("call-1", "forecast", '{"city": "Bergen"}')],
        ),
        "Tomorrow in Bergen: light rain, 14°C. Take an umbrella.",
    )
    agent: Agent[None, str] = Agent(model, tools=[forecast])
    print("== ScriptedModel: every item, in arrival order")
    async with agent.run_stream("Weather in Bergen tomorrow?") as stream:
        async for item in stream:
            if isinstance(item, RunEvent):
                extra = f" {item.tool_name}" if item.tool_name else ""
                print(f"event  {item.kind.value}{extra}")
            elif item.content:
                print(f"text   {item.content!r}")
            for call in item.tool_calls if isinstance(item, Delta) else ():
                print(f"call   #{call.index} {call.name} {call.args_fragment}")
    result = stream.result
    print(f"result {result.output!r} ({result.requests} model calls)")


async def words(request: ModelRequest) -> AsyncIterator[str]:
    """A stream function: yields text; the final response is built from it."""
    question = request.messages[-1].content
    for i, word in enumerate(f"You asked: {question}".split()):
        await asyncio.sleep(0)  # a real stream waits for the network here
        yield word if i == 0 else " " + word


async def function_model() -> None:
    model = FunctionModel(lambda request: "not streamed", stream=words)
    agent: Agent[None, str] = Agent(model)
    print("\n== FunctionModel(stream=...): print text as it arrives (| marks a delta)")
    async with agent.run_stream("is it streaming?") as stream:
        async for item in stream:
            if isinstance(item, Delta):
                print(item.content, end="|", flush=True)
    print(f"\nresult {stream.result.output!r}")


async def main() -> None:
    await scripted()
    await function_model()


if __name__ == "__main__":
    asyncio.run(main())
