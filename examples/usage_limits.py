"""Usage limits, cost, retries and timeouts, offline.

1. A run within its limits reports usage, requests, tool executions and cost.
2. The same run under a tighter token limit fails at stage `usage`; the error says which
   bound was crossed and `partial` keeps the evidence.
3. A rate-limited model call is retried under `max_attempts`.
4. A tool that overruns its timeout fails the run at stage `tool`.

Run it with `python examples/usage_limits.py`.
"""

from __future__ import annotations

import asyncio

from golem import Agent, RunError, Usage, UsageLimitExceeded, UsageLimits
from golem.errors import RateLimited
from golem.messages import Message, ToolCall
from golem.model import ModelResponse
from golem.testing import ScriptedModel


def price(usage: Usage) -> float:
    """Dollars for cumulative usage: $2 per million input tokens, $8 per million output."""
    return usage.input_tokens * 2e-6 + usage.output_tokens * 8e-6


def lookup(term: str) -> str:
    """Look a term up in the glossary.

    Args:
        term: The term to look up.
    """
    return f"{term}: a unit of text a model reads or writes"


def script() -> ScriptedModel:
    return ScriptedModel(
        ModelResponse(
            Message(
                role="assistant", tool_calls=[ToolCall("call-1", "lookup", '{"term": "token"}')]
            ),
            usage=Usage(input_tokens=900, output_tokens=40),
            finish_reason="tool_call",
        ),
        ModelResponse(
            Message(role="assistant", content="A token is a unit of text a model reads or writes."),
            usage=Usage(input_tokens=1000, output_tokens=60),
            finish_reason="stop",
        ),
    )


def within_limits() -> None:
    limits = UsageLimits(total_tokens=5_000, requests=5, cost=0.01)
    agent: Agent[None, str] = Agent(script(), tools=[lookup], usage_limits=limits, price=price)
    result = agent.run_sync("What is a token?")
    print("== within limits")
    print(f"usage:  {result.usage.input_tokens} in + {result.usage.output_tokens} out")
    print(f"counts: requests={result.requests} tool_calls={result.tool_calls}")
    print(f"cost:   ${result.cost:.4f}")


def over_the_limit() -> None:
    agent: Agent[None, str] = Agent(
        script(), tools=[lookup], usage_limits=UsageLimits(total_tokens=1_500)
    )
    print("\n== total_tokens=1500")
    try:
        agent.run_sync("What is a token?")
    except RunError as err:
        exceeded = err.__cause__
        assert isinstance(exceeded, UsageLimitExceeded)
        print(err)
        print(
            f"stage={err.stage.value} kind={exceeded.kind!r} limit={exceeded.limit:g} actual={exceeded.actual:g}"
        )
        if err.partial is not None:
            roles = [m.role for m in err.partial.messages]
            print(f"partial: {err.partial.requests} requests, messages {roles}")


def retried() -> None:
    model = ScriptedModel(RateLimited("slow down", retry_after=0.01), "Fine now.")
    agent: Agent[None, str] = Agent(model, max_attempts=3, retry_backoff=lambda attempt: 0.01)
    result = agent.run_sync("Hello?")
    print("\n== max_attempts=3 after a 429")
    print(f"{result.output} ({result.requests} requests)")


async def slow_report(topic: str) -> str:
    """Build a long report.

    Args:
        topic: What the report is about.
    """
    await asyncio.sleep(10)
    return "never"


def timed_out() -> None:
    model = ScriptedModel(
        Message(role="assistant", tool_calls=[ToolCall("call-7", "slow_report", '{"topic": "x"}')])
    )
    agent: Agent[None, str] = Agent(model, tools=[slow_report], tool_timeout=0.05)
    print("\n== tool_timeout=0.05")
    try:
        agent.run_sync("Report, please.")
    except RunError as err:
        print(err)
        print(
            f"stage={err.stage.value} cause is a TimeoutError: {isinstance(err.__cause__, TimeoutError)}"
        )


if __name__ == "__main__":
    within_limits()
    over_the_limit()
    retried()
    timed_out()
