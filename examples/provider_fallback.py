"""A fallback model, offline: the primary is rate limited, the backup answers.

`FallbackModel` asks the next model when one fails with a retryable error (rate limit,
overload, timeout, lost connection); the response records the model that answered and
its usage. Real providers slot in the same way:

    FallbackModel(OpenAIChatModel("gpt-4.1"), AnthropicModel("claude-sonnet-4-5"))

Here both models are `ScriptedModel`s, so it runs without keys or network. It also shows
`tool_choice`, which every request of the run carries ("auto" unless set).

    python examples/provider_fallback.py
"""

from __future__ import annotations

import asyncio

from golem import Agent
from golem.errors import RateLimited
from golem.messages import Message, ToolCall
from golem.model import ModelResponse
from golem.providers import FallbackModel
from golem.testing import ScriptedModel
from golem.usage import Usage


def get_weather(city: str) -> str:
    """Today's weather in a city."""
    return {"Lisbon": "sunny, 24 °C"}.get(city, "unknown")


async def main() -> None:
    primary = ScriptedModel(RateLimited("429: rate limit reached", retry_after=20.0))
    primary.fail(RateLimited("429: still limited", retry_after=20.0))
    backup = ScriptedModel(
        ModelResponse(
            message=Message(
                role="assistant",
                tool_calls=[ToolCall("call_1", "get_weather", '{"city": "Lisbon"}')],
            ),
            usage=Usage(input_tokens=40, output_tokens=12),
            finish_reason="tool_call",
            model_name="backup-model",
        ),
        ModelResponse(
            message=Message(role="assistant", content="Lisbon is sunny, 24 °C."),
            usage=Usage(input_tokens=60, output_tokens=8),
            finish_reason="stop",
            model_name="backup-model",
        ),
    )
    model = FallbackModel(primary, backup)
    print(model)
    agent = Agent(model, tools=[get_weather])
    result = await agent.run("What's the weather in Lisbon?")
    print("answer:", result.output)
    print("usage:", result.usage.input_tokens, "in,", result.usage.output_tokens, "out")
    print("tool_choice sent:", [r.tool_choice for r in backup.requests])

    try:
        await Agent(model, tools=[get_weather], tool_choice="get_wether").run("Weather?")
    except Exception as exc:  # the run fails before any model call
        print("error:", exc.__cause__ or exc)


if __name__ == "__main__":
    asyncio.run(main())
