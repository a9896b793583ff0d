"""Streaming a resumed run, offline.

A run pauses on a gated tool. The resume streams: first the approved re-run's
`tool_start` / `tool_end` events (flagged `approved`), then the model's answer as it
arrives, then the same `Result` the non-streaming resume returns.
Run it with `python examples/streamed_resume.py`.
"""

from __future__ import annotations

import asyncio

from golem import Agent, RunEvent
from golem.messages import Message, ToolCall
from golem.model import Delta
from golem.testing import ScriptedModel
from golem.tool import DeferKind, Deferred, call_approved


async def main() -> None:
    model = ScriptedModel(
        Message(
            role="assistant", tool_calls=[ToolCall("call-1", "deploy", '{"env":"production"}')]
        ),
        "Deployed to production. The health checks are green.",
    )
    agent: Agent[None, str] = Agent(model)

    @agent.tool_plain
    def deploy(env: str) -> str:
        """Deploy the current build.

        Args:
            env: The environment to deploy to.
        """
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, f"deploy to {env}?")
        return f"deployed build 42 to {env}"

    paused = await agent.run("Ship it.")
    assert paused.pending is not None
    print(f"paused on {paused.pending.approvals[0].call_id}: {paused.pending.approvals[0].reason}")

    async with agent.run_stream_with_deferred_results(
        paused.messages, {"approvals": {"call-1": True}}
    ) as stream:
        async for item in stream:
            if isinstance(item, RunEvent):
                flag = " (approved re-run)" if item.approved else ""
                print(f"event  {item.kind.value} {item.tool_name}{flag}".rstrip())
            elif isinstance(item, Delta) and item.content:
                print(f"text   {item.content!r}")
    print(f"result {stream.result.output!r} ({stream.result.tool_calls} tool call)")


if __name__ == "__main__":
    asyncio.run(main())
