"""The smallest useful agent: one tool, a scripted model, offline."""

from __future__ import annotations

from golem import Agent
from golem.messages import Message, ToolCall
from golem.testing import ScriptedModel

model = ScriptedModel(
    Message(role="assistant", tool_calls=[ToolCall("call-1", "roll_die", '{"sides": 6}')]),
    "You rolled a 4.",
)
agent: Agent[None, str] = Agent(model, instructions="You roll dice for the user.")


@agent.tool_plain
def roll_die(sides: int) -> str:
    """Roll a die.

    Args:
        sides: How many sides the die has.
    """
    return "4"


if __name__ == "__main__":
    result = agent.run_sync("Roll a d6 for me.")
    print(result.output)
    print(f"{result.requests} model calls, {result.tool_calls} tool call, run {result.run_id}")
