"""The same two jobs in each peer and in hand-written code, for the ratio benches.

Job "cycle": the model asks for two tools at once (``delete_file`` needs approval,
``stat_file`` runs); the run pauses, its state goes to JSON (or the peer's own checkpoint
store) and back, the approval is given, the approved call runs and the model answers.
Job "run": a 2-turn run with one tool call. Each builder returns an async callable doing the
job once, or None when the peer is not installed (``pip install 'golem-agents[bench]'``).
``sync=True`` makes the tools plain functions: each framework runs them as it runs sync
tools (golem and the peers in a worker thread). The floors are what a hand-written loop of
dicts and ``json`` costs: no framework at all.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

try:  # the tool annotations of the Pydantic AI jobs resolve against the module's names
    from pydantic_ai import RunContext
except ImportError:  # pragma: no cover
    RunContext = None  # type: ignore[assignment,misc]

Job = Callable[[], Awaitable[object]]

CALLS = [
    ("call-1", "delete_file", '{"path":"build/old.log"}'),
    ("call-2", "stat_file", '{"path":"build/new.log"}'),
]
ANSWER = "Deleted old.log."
WEATHER = ("call-1", "get_weather", '{"city": "Paris"}')


def delete_file(path: str) -> str:
    """Delete a file.

    Args:
        path: File to delete.
    """
    return f"deleted {path}"


def stat_file(path: str) -> str:
    """Size of a file.

    Args:
        path: File to inspect.
    """
    return "size=12"


def get_weather(city: str) -> str:
    """Current weather.

    Args:
        city: City name.
    """
    return f"{city}: 21C"


# -- hand-written floors ------------------------------------------------------------------


def floor_cycle(sync: bool = False) -> Job:
    """A loop over dicts: pause by returning the history as JSON, resume by loading it."""
    tools: dict[str, Callable[..., Any]] = {"delete_file": delete_file, "stat_file": stat_file}

    async def call(name: str, args: str) -> str:
        fn = tools[name]
        if sync:
            return await asyncio.to_thread(fn, **json.loads(args))
        return fn(**json.loads(args))

    def model(history: list[dict[str, Any]]) -> dict[str, Any]:
        if history[-1]["role"] == "tool":
            return {"role": "assistant", "content": ANSWER}
        return {
            "role": "assistant",
            "tool_calls": [{"id": i, "name": n, "arguments": a} for i, n, a in CALLS],
        }

    async def run(history: list[dict[str, Any]], approved: set[str]) -> tuple[list[Any], str]:
        while True:
            reply = model(history)
            history.append(reply)
            if "tool_calls" not in reply:
                return history, reply["content"]
            pending = [
                c
                for c in reply["tool_calls"]
                if c["name"] == "delete_file" and c["id"] not in approved
            ]
            for c in reply["tool_calls"]:
                if c not in pending:
                    history.append(
                        {
                            "role": "tool",
                            "id": c["id"],
                            "content": await call(c["name"], c["arguments"]),
                        }
                    )
            if pending:
                return history, ""

    async def job() -> object:
        history, _ = await run([{"role": "user", "content": "Clean up the workspace."}], set())
        stored = json.dumps(history)
        history = json.loads(stored)
        call_ = history[-2]["tool_calls"][0]
        history.append(
            {
                "role": "tool",
                "id": call_["id"],
                "content": await call(call_["name"], call_["arguments"]),
            }
        )
        history, answer = await run(history, {call_["id"]})
        assert answer == ANSWER
        return history

    return job


def floor_run(sync: bool = False) -> Job:
    async def job() -> object:
        history: list[dict[str, Any]] = [{"role": "user", "content": "Weather in Paris?"}]
        for _ in range(2):
            if history[-1]["role"] == "tool":
                history.append({"role": "assistant", "content": "It is 21 degrees."})
                return history
            history.append(
                {
                    "role": "assistant",
                    "tool_calls": [{"id": WEATHER[0], "name": WEATHER[1], "arguments": WEATHER[2]}],
                }
            )
            args = json.loads(WEATHER[2])
            out = await asyncio.to_thread(get_weather, **args) if sync else get_weather(**args)
            history.append({"role": "tool", "id": WEATHER[0], "content": out})
        return history

    return job


# -- Pydantic AI --------------------------------------------------------------------------


def pydantic_ai_cycle(sync: bool = False) -> Job | None:
    try:
        from pydantic_ai import Agent, ApprovalRequired, DeferredToolRequests, DeferredToolResults
        from pydantic_ai.messages import (
            ModelMessage,
            ModelMessagesTypeAdapter,
            ModelResponse,
            TextPart,
            ToolCallPart,
            ToolReturnPart,
        )
        from pydantic_ai.models.function import AgentInfo, FunctionModel
    except ImportError:
        return None

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if any(
            isinstance(p, ToolReturnPart) and p.tool_name == "delete_file"
            for p in messages[-1].parts
        ):
            return ModelResponse(parts=[TextPart(ANSWER)])
        return ModelResponse(parts=[ToolCallPart(n, a, tool_call_id=i) for i, n, a in CALLS])

    agent = Agent(
        FunctionModel(respond),
        instructions="You tidy the workspace.",
        output_type=[str, DeferredToolRequests],
    )

    def gated(ctx: RunContext[None], path: str) -> str:
        if not ctx.tool_call_approved:
            raise ApprovalRequired()
        return delete_file(path)

    if sync:
        agent.tool(gated, name="delete_file", docstring_format="google")
        agent.tool_plain(stat_file)
    else:

        async def delete_async(ctx: RunContext[None], path: str) -> str:
            return gated(ctx, path)

        async def stat_async(path: str) -> str:
            return stat_file(path)

        agent.tool(delete_async, name="delete_file")
        agent.tool_plain(stat_async, name="stat_file")

    async def job() -> object:
        paused = await agent.run("Clean up the workspace.")
        assert isinstance(paused.output, DeferredToolRequests)
        stored = ModelMessagesTypeAdapter.dump_json(paused.all_messages())
        resumed = await agent.run(
            message_history=ModelMessagesTypeAdapter.validate_json(stored),
            deferred_tool_results=DeferredToolResults(approvals={"call-1": True}),
        )
        assert resumed.output == ANSWER, resumed.output
        return resumed

    return job


def pydantic_ai_run(sync: bool = False) -> Job | None:
    try:
        from pydantic_ai import Agent
        from pydantic_ai.messages import (
            ModelMessage,
            ModelResponse,
            TextPart,
            ToolCallPart,
            ToolReturnPart,
        )
        from pydantic_ai.models.function import AgentInfo, FunctionModel
    except ImportError:
        return None

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if any(isinstance(p, ToolReturnPart) for p in messages[-1].parts):
            return ModelResponse(parts=[TextPart("It is 21 degrees.")])
        return ModelResponse(parts=[ToolCallPart(WEATHER[1], WEATHER[2], tool_call_id=WEATHER[0])])

    agent = Agent(FunctionModel(respond), instructions="You report the weather.")
    if sync:
        agent.tool_plain(get_weather)
    else:

        async def weather_async(city: str) -> str:
            return get_weather(city)

        agent.tool_plain(weather_async, name="get_weather")

    async def job() -> object:
        return await agent.run("What is the weather in Paris?")

    return job


# -- OpenAI Agents SDK --------------------------------------------------------------------


def _openai_agents_model(first: list[tuple[str, str, str]], answer: str, done: str) -> Any:
    from agents import ModelResponse, Usage
    from agents.models.interface import Model
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    class Scripted(Model):  # type: ignore[misc]
        async def get_response(
            self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
        ) -> Any:
            items = input if isinstance(input, list) else []
            answered = any(
                isinstance(i, dict)
                and i.get("type") == "function_call_output"
                and i.get("call_id") == done
                for i in items
            )
            if answered:
                text = ResponseOutputText(text=answer, type="output_text", annotations=[])
                out: list[Any] = [
                    ResponseOutputMessage(
                        id="msg-1",
                        content=[text],
                        role="assistant",
                        status="completed",
                        type="message",
                    )
                ]
            else:
                out = [
                    ResponseFunctionToolCall(call_id=i, name=n, arguments=a, type="function_call")
                    for i, n, a in first
                ]
            return ModelResponse(output=out, usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError("the bench does not stream")

    return Scripted()


def openai_agents_cycle(sync: bool = False) -> Job | None:
    try:
        from agents import Agent, RunConfig, Runner, RunState, function_tool, set_tracing_disabled
    except ImportError:
        return None
    set_tracing_disabled(True)

    if sync:
        tools = [function_tool(delete_file, needs_approval=True), function_tool(stat_file)]
    else:

        async def delete_async(path: str) -> str:
            """Delete a file.

            Args:
                path: File to delete.
            """
            return delete_file(path)

        async def stat_async(path: str) -> str:
            """Size of a file.

            Args:
                path: File to inspect.
            """
            return stat_file(path)

        tools = [
            function_tool(delete_async, name_override="delete_file", needs_approval=True),
            function_tool(stat_async, name_override="stat_file"),
        ]
    agent = Agent(
        name="tidy",
        instructions="You tidy the workspace.",
        tools=tools,
        model=_openai_agents_model(CALLS, ANSWER, "call-1"),
    )
    config = RunConfig(tracing_disabled=True)

    async def job() -> object:
        paused = await Runner.run(agent, "Clean up the workspace.", run_config=config)
        assert paused.interruptions
        stored = paused.to_state().to_string()
        state = await RunState.from_string(agent, stored)
        for item in state.get_interruptions():
            state.approve(item)
        resumed = await Runner.run(agent, state, run_config=config)
        assert resumed.final_output == ANSWER, resumed.final_output
        return resumed

    return job


def openai_agents_run(sync: bool = False) -> Job | None:
    try:
        from agents import Agent, RunConfig, Runner, function_tool, set_tracing_disabled
    except ImportError:
        return None
    set_tracing_disabled(True)
    if sync:
        tool = function_tool(get_weather)
    else:

        async def weather_async(city: str) -> str:
            """Current weather.

            Args:
                city: City name.
            """
            return get_weather(city)

        tool = function_tool(weather_async, name_override="get_weather")
    agent = Agent(
        name="weather",
        instructions="You report the weather.",
        tools=[tool],
        model=_openai_agents_model([WEATHER], "It is 21 degrees.", WEATHER[0]),
    )
    config = RunConfig(tracing_disabled=True)

    async def job() -> object:
        return await Runner.run(agent, "What is the weather in Paris?", run_config=config)

    return job


# -- LangGraph ----------------------------------------------------------------------------


def _langgraph(
    calls: list[tuple[str, str, str]],
    answer: str,
    gate: str | None,
    tools: dict[str, Callable[..., str]],
    sync: bool,
) -> Any:
    """A model node and a tool node; a gated tool asks `interrupt()` for approval."""
    from typing import Annotated, TypedDict

    from langchain_core.messages import AIMessage, AnyMessage, ToolMessage
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, StateGraph
    from langgraph.graph.message import add_messages
    from langgraph.types import interrupt

    State = TypedDict("State", {"messages": Annotated[list[AnyMessage], add_messages]})  # noqa: UP013 (class syntax: annotations stay strings here)

    async def model(state: Any) -> dict[str, Any]:
        if isinstance(state["messages"][-1], ToolMessage):
            return {"messages": [AIMessage(answer)]}
        return {
            "messages": [
                AIMessage(
                    "",
                    tool_calls=[{"id": i, "name": n, "args": json.loads(a)} for i, n, a in calls],
                )
            ]
        }

    def run_tools(state: Any) -> dict[str, Any]:
        out = []
        for call in state["messages"][-1].tool_calls:
            if call["name"] == gate and not interrupt({"approve": call["id"]}):
                continue
            out.append(ToolMessage(tools[call["name"]](**call["args"]), tool_call_id=call["id"]))
        return {"messages": out}

    async def run_tools_async(state: Any) -> dict[str, Any]:
        return run_tools(state)

    def route(state: Any) -> str:
        return "tools" if getattr(state["messages"][-1], "tool_calls", None) else END

    graph = StateGraph(State)
    graph.add_node("model", model)
    graph.add_node("tools", run_tools if sync else run_tools_async)  # sync: LangGraph's thread
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", route, ["tools", END])
    graph.add_edge("tools", "model")
    return graph.compile(checkpointer=InMemorySaver())


def langgraph_cycle(sync: bool = False) -> Job | None:
    try:
        from langgraph.types import Command
    except ImportError:
        return None
    app = _langgraph(
        CALLS, ANSWER, "delete_file", {"delete_file": delete_file, "stat_file": stat_file}, sync
    )
    counter = iter(range(10**12))

    async def job() -> object:
        config = {"configurable": {"thread_id": str(next(counter))}}
        paused = await app.ainvoke({"messages": [("user", "Clean up the workspace.")]}, config)
        assert "__interrupt__" in paused
        resumed = await app.ainvoke(Command(resume=True), config)
        assert resumed["messages"][-1].content == ANSWER
        return resumed

    return job


def langgraph_run(sync: bool = False) -> Job | None:
    try:
        import langgraph  # noqa: F401
    except ImportError:
        return None
    app = _langgraph([WEATHER], "It is 21 degrees.", None, {"get_weather": get_weather}, sync)
    counter = iter(range(10**12))

    async def job() -> object:
        config = {"configurable": {"thread_id": str(next(counter))}}
        return await app.ainvoke({"messages": [("user", "Weather in Paris?")]}, config)

    return job


PEERS_CYCLE: dict[str, Callable[[bool], Job | None]] = {
    "pydantic-ai": pydantic_ai_cycle,
    "openai-agents": openai_agents_cycle,
    "langgraph": langgraph_cycle,
}
PEERS_RUN: dict[str, Callable[[bool], Job | None]] = {
    "pydantic-ai": pydantic_ai_run,
    "openai-agents": openai_agents_run,
    "langgraph": langgraph_run,
}


def compare(
    title: str,
    ours: dict[str, Job],
    peers: dict[str, Callable[[bool], Job | None]],
    sync: bool,
    per_round: int,
) -> None:
    """Run `ours` and every installed peer in interleaved rounds and print the ratio table
    (a peer's job costs far more: it runs a tenth as many times a round)."""
    from _timing import ratio_table, rounds

    jobs = dict(ours)
    counts = {name: per_round for name in jobs}
    for name, build in peers.items():
        job = build(sync)
        if job is None:
            print(f"{name}: not installed (pip install 'golem-agents[bench]') - left out")
            continue
        jobs[name] = job
        counts[name] = max(1, per_round // 10)
    ratio_table(title, rounds(jobs, per_round=counts), next(iter(ours)))
