"""Framework overhead per run: a 2-turn run with one tool call on a scripted model.

    python bench/run_overhead.py

Prints golem's µs per run (wall clock and CPU time) and, when the `[bench]` extra
(pydantic-ai-slim) is installed, the same run in Pydantic AI on its FunctionModel, in the
same process, and the ratios. The model answers instantly, so the figure is the framework's
own cost: building requests, validating arguments, running the tool, recording messages.
On a shared machine the CPU figures are the ones to compare.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import InstantModel, measure, report

from golem import Agent
from golem.messages import Message, ToolCall
from golem.model import ModelRequest, ModelResponse


def golem_agent() -> Agent[None, str]:
    def respond(request: ModelRequest) -> ModelResponse:
        if request.messages[-1].role == "tool":
            return ModelResponse(
                Message(role="assistant", content="It is 21 degrees."), finish_reason="stop"
            )
        return ModelResponse(
            Message(
                role="assistant",
                tool_calls=[ToolCall("call-1", "get_weather", '{"city": "Paris"}')],
            ),
            finish_reason="tool_call",
        )

    agent: Agent[None, str] = Agent(InstantModel(respond), instructions="You report the weather.")

    @agent.tool
    async def get_weather(city: str) -> str:
        """Current weather.

        Args:
            city: City name.
        """
        return f"{city}: 21C"

    return agent


def pydantic_ai_run() -> object | None:
    try:
        from pydantic_ai import Agent as PAgent
        from pydantic_ai.messages import ModelMessage, TextPart, ToolCallPart, ToolReturnPart
        from pydantic_ai.messages import ModelResponse as PResponse
        from pydantic_ai.models.function import AgentInfo
        from pydantic_ai.models.function import FunctionModel as PFunctionModel
    except ImportError:
        return None

    def respond(messages: list[ModelMessage], info: AgentInfo) -> PResponse:
        last = messages[-1]
        if any(isinstance(p, ToolReturnPart) for p in last.parts):
            return PResponse(parts=[TextPart("It is 21 degrees.")])
        return PResponse(
            parts=[ToolCallPart("get_weather", '{"city": "Paris"}', tool_call_id="call-1")]
        )

    agent = PAgent(PFunctionModel(respond), instructions="You report the weather.")

    @agent.tool_plain
    async def get_weather(city: str) -> str:
        """Current weather.

        Args:
            city: City name.
        """
        return f"{city}: 21C"

    async def run() -> object:
        return await agent.run("What is the weather in Paris?")

    return run


def main() -> None:
    agent = golem_agent()

    async def run() -> object:
        return await agent.run("What is the weather in Paris?")

    ours = measure(run, per_round=500)
    report("golem: 2-turn run, 1 tool call (instant model)", ours)
    ours_cpu = measure(run, per_round=500, cpu=True)
    report("golem: the same run, CPU time", ours_cpu)
    peer = pydantic_ai_run()
    if peer is None:
        print("pydantic-ai: not installed (pip install 'golem-agents[bench]') - skipped")
        return
    theirs = measure(peer, per_round=100)  # type: ignore[arg-type]
    report("pydantic-ai: same run (FunctionModel)", theirs)
    theirs_cpu = measure(peer, per_round=100, cpu=True)  # type: ignore[arg-type]
    report("pydantic-ai: same run, CPU time", theirs_cpu)
    print(f"{'ratio (pydantic-ai / golem), wall clock':<58} {theirs / ours:>10.1f} x")
    print(f"{'ratio (pydantic-ai / golem), CPU time':<58} {theirs_cpu / ours_cpu:>10.1f} x")


if __name__ == "__main__":
    main()
