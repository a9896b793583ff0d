"""Framework overhead per run: a 2-turn run with one tool call on a scripted model.

    python bench/run_overhead.py

The model answers instantly, so the figure is the framework's own cost: building requests,
validating arguments, running the tool, recording messages. With the `[bench]` extra the same
run goes through Pydantic AI, the OpenAI Agents SDK and LangGraph (bench/_peers.py), beside a
loop of dicts and `json`, in interleaved rounds with the garbage collector on; ratios are taken
round by round (median, min–max). Once with an async tool, once with a sync one.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _peers import PEERS_RUN, WEATHER, Job, compare, floor_run, get_weather
from _timing import InstantModel

from golem import Agent
from golem.messages import Message, ToolCall
from golem.model import ModelRequest, ModelResponse


def golem_run(sync: bool = False, thread: bool = True) -> Job:
    def respond(request: ModelRequest) -> ModelResponse:
        if request.messages[-1].role == "tool":
            return ModelResponse(
                Message(role="assistant", content="It is 21 degrees."), finish_reason="stop"
            )
        return ModelResponse(
            Message(role="assistant", tool_calls=[ToolCall(*WEATHER)]), finish_reason="tool_call"
        )

    agent: Agent[None, str] = Agent(InstantModel(respond), instructions="You report the weather.")
    if sync:
        agent.tool_plain(run_in_thread=thread)(get_weather)
    else:

        async def weather_async(city: str) -> str:
            """Current weather.

            Args:
                city: City name.
            """
            return get_weather(city)

        agent.tool_plain(name="get_weather")(weather_async)

    async def run() -> object:
        return await agent.run("What is the weather in Paris?")

    return run


def main() -> None:
    for sync in (False, True):
        jobs: dict[str, Job] = {"golem": golem_run(sync), "hand-written floor": floor_run(sync)}
        if sync:
            jobs["golem, run_in_thread=False"] = golem_run(sync=True, thread=False)
        kind = "a sync tool (run in a worker thread)" if sync else "an async tool"
        compare(f"2-turn run with one call of {kind}", jobs, PEERS_RUN, sync, per_round=400)


if __name__ == "__main__":
    main()
