"""Run events, offline: an agent-wide observer, a per-run observer, and a faulty one.

The agent's `event_handler` prints a timeline of every run; the run's own `on_event`
collects tool results; a third observer raises on purpose to show that an observer can
never fail the run. The scripted model asks for two tool calls, one of which fails
definitively, then answers. Run it with `python examples/run_events.py`.
"""

from __future__ import annotations

import logging

from golem import Agent, EventKind, RunEvent
from golem.messages import Message, ToolCall
from golem.model import ModelResponse
from golem.testing import ScriptedModel
from golem.tool import Failed
from golem.usage import Usage


def timeline(event: RunEvent) -> None:
    """The agent-wide observer: one line per event."""
    line = f"turn {event.turn}  {event.kind.value:<13}"
    if event.kind in (EventKind.MODEL_START, EventKind.MODEL_END):
        line += f" attempt {event.attempt}"
    if event.usage is not None:
        line += f" usage in={event.usage.input_tokens} out={event.usage.output_tokens}"
    if event.call_id:
        line += f" {event.call_id} {event.tool_name}"
    if event.args:
        line += f" args={event.args}"
    if event.result:
        line += f" -> {event.result!r}"
    if event.error is not None:
        line += f" error={event.error!r}"
    print(line)


def weather(city: str) -> str:
    """Current weather in a city.

    Args:
        city: The city's name.
    """
    if city == "Atlantis":
        raise Failed("no weather station in Atlantis")
    return "sunny, 21°C"


model = ScriptedModel(
    ModelResponse(
        Message(
            role="assistant",
            tool_calls=[
                ToolCall("call-1", "weather", '{"city": "Lisbon"}'),
                ToolCall("call-2", "weather", '{"city": "Atlantis"}'),
            ],
        ),
        usage=Usage(input_tokens=120, output_tokens=30),
        finish_reason="tool_call",
    ),
    ModelResponse(
        Message(role="assistant", content="Lisbon is sunny; Atlantis has no weather station."),
        usage=Usage(input_tokens=180, output_tokens=15),
        finish_reason="stop",
    ),
)
agent: Agent[None, str] = Agent(model, tools=[weather], event_handler=timeline)


def broken_observer(event: RunEvent) -> None:
    raise RuntimeError("this observer has a bug")


if __name__ == "__main__":
    # The faulty observer's exception is logged to the "golem" logger and ignored; keep
    # the demo's output short by silencing that logger.
    logging.getLogger("golem").setLevel(logging.CRITICAL)

    results: dict[str, str] = {}

    def collect(event: RunEvent) -> None:
        """The per-run observer: runs after the agent's observer, for this run only."""
        if event.kind is EventKind.TOOL_END:
            results[event.call_id] = event.result or f"failed: {event.error}"
        broken_observer(event)

    result = agent.run_sync("Weather in Lisbon and Atlantis?", on_event=collect)
    print("\ncollected by on_event:", results)
    print("answer:", result.output)
