"""Overhead per full pause/resume cycle.

    python bench/pause_resume.py

One cycle: a run whose model emits a mixed batch (one call defers for approval, one
executes) pauses → `dumps_history` → `loads_history` → resume with an approval (the
deferred call re-runs) → final answer. The model answers instantly, so the figure is
the framework's own cost. The cycle runs twice: without a seal key, and with one
(`Agent(seal_key=...)`: the pause seals the pending call, the resume verifies it); the
sealing share of a cycle is printed. With the `[bench]` extra installed, the same cycle
runs in Pydantic AI (`ApprovalRequired`, `DeferredToolResults`,
`ModelMessagesTypeAdapter`) in the same process, measured the same way (best round, wall
clock and CPU time), and both ratios are printed; on a shared machine the CPU figures are
the ones to compare.
"""

from __future__ import annotations

import asyncio
import gc
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import InstantModel, measure, report

from golem import Agent, Approval, DeferredResults, dumps_history, loads_history
from golem.messages import Message, ToolCall
from golem.model import ModelRequest, ModelResponse
from golem.seal import SealKeys, seal_call, verify_call
from golem.tool import DeferKind, Deferred, call_approved

try:  # the peer, from the [bench] extra; module level so its tool annotations resolve
    from pydantic_ai import RunContext as PRunContext
except ImportError:  # pragma: no cover
    PRunContext = None  # type: ignore[assignment,misc]

BATCH = [  # compact argument JSON, as most providers send it
    ToolCall("call-1", "delete_file", '{"path":"build/old.log"}'),
    ToolCall("call-2", "stat_file", '{"path":"build/new.log"}'),
]


def golem_cycle(seal_key: bytes | None = None) -> object:
    def respond(request: ModelRequest) -> ModelResponse:
        if request.messages[-1].role == "tool":
            return ModelResponse(
                Message(role="assistant", content="Deleted old.log."), finish_reason="stop"
            )
        return ModelResponse(
            Message(role="assistant", tool_calls=list(BATCH)), finish_reason="tool_call"
        )

    agent: Agent[None, str] = Agent(
        InstantModel(respond), instructions="You tidy the workspace.", seal_key=seal_key
    )

    @agent.tool
    async def delete_file(path: str) -> str:
        """Delete a file.

        Args:
            path: File to delete.
        """
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, "deletes need sign-off")
        return f"deleted {path}"

    @agent.tool
    async def stat_file(path: str) -> str:
        """Size of a file.

        Args:
            path: File to inspect.
        """
        return "size=12"

    approve = DeferredResults(approvals={"call-1": Approval(True)})

    async def cycle() -> object:
        paused = await agent.run("Clean up the workspace.")
        assert paused.pending is not None
        assert bool(paused.pending.approvals[0].seal) is (seal_key is not None)
        stored = dumps_history(paused.messages)
        resumed = await agent.run_with_deferred_results(
            loads_history(stored), approve, conversation_id=paused.conversation_id
        )
        assert resumed.output == "Deleted old.log."
        return resumed

    return cycle


def pydantic_ai_cycle() -> object | None:
    try:
        from pydantic_ai import Agent as PAgent
        from pydantic_ai import ApprovalRequired, DeferredToolRequests, DeferredToolResults
        from pydantic_ai.messages import (
            ModelMessage,
            ModelMessagesTypeAdapter,
            TextPart,
            ToolCallPart,
            ToolReturnPart,
        )
        from pydantic_ai.messages import (
            ModelResponse as PResponse,
        )
        from pydantic_ai.models.function import AgentInfo
        from pydantic_ai.models.function import FunctionModel as PFunctionModel
    except ImportError:
        return None

    def respond(messages: list[ModelMessage], info: AgentInfo) -> PResponse:
        if any(
            isinstance(p, ToolReturnPart) and p.tool_name == "delete_file"
            for p in messages[-1].parts
        ):
            return PResponse(parts=[TextPart("Deleted old.log.")])
        return PResponse(parts=[ToolCallPart(c.name, c.args, tool_call_id=c.id) for c in BATCH])

    agent = PAgent(
        PFunctionModel(respond),
        instructions="You tidy the workspace.",
        output_type=[str, DeferredToolRequests],
    )

    @agent.tool
    async def delete_file(ctx: PRunContext[None], path: str) -> str:
        """Delete a file.

        Args:
            path: File to delete.
        """
        if not ctx.tool_call_approved:
            raise ApprovalRequired()
        return f"deleted {path}"

    @agent.tool_plain
    async def stat_file(path: str) -> str:
        """Size of a file.

        Args:
            path: File to inspect.
        """
        return "size=12"

    async def cycle() -> object:
        paused = await agent.run("Clean up the workspace.")
        assert isinstance(paused.output, DeferredToolRequests)
        stored = ModelMessagesTypeAdapter.dump_json(paused.all_messages())
        history = ModelMessagesTypeAdapter.validate_json(stored)
        resumed = await agent.run(
            message_history=history,
            deferred_tool_results=DeferredToolResults(approvals={"call-1": True}),
        )
        assert resumed.output == "Deleted old.log.", resumed.output
        return resumed

    return cycle


def seal_and_verify() -> float:
    """µs to seal the cycle's pending call and verify it: the work a key adds to a cycle."""
    keys = SealKeys(b"k" * 32)
    call = BATCH[0]

    async def once() -> object:
        sealed = replace(call, seal=seal_call(keys, "conversation", call, "approval"))
        return verify_call(keys, "conversation", sealed)

    return measure(once, per_round=2000)


def interleaved(
    first: Callable[[], Awaitable[object]],
    second: Callable[[], Awaitable[object]],
    *,
    rounds: int = 40,
    per_round: int = 100,
) -> tuple[float, float]:
    """CPU µs per call of each (process time: other processes' load is not counted), best
    of `rounds`, the two measured in alternating rounds so cache effects hit both alike."""

    async def one(fn: Callable[[], Awaitable[object]], n: int) -> float:
        start = time.process_time()
        for _ in range(n):
            await fn()
        return (time.process_time() - start) / n * 1e6

    async def main() -> tuple[float, float]:
        await one(first, per_round // 4)
        await one(second, per_round // 4)
        a: list[float] = []
        b: list[float] = []
        gc.disable()
        try:
            for _ in range(rounds):
                a.append(await one(first, per_round))
                b.append(await one(second, per_round))
        finally:
            gc.enable()
        return min(a), min(b)

    return asyncio.run(main())


def main() -> None:
    cycle = golem_cycle()
    ours = measure(cycle, per_round=300)  # type: ignore[arg-type]
    report("golem: pause (mixed batch) → JSON → resume → answer", ours)
    ours_cpu = measure(cycle, per_round=300, cpu=True)  # type: ignore[arg-type]
    plain_cpu, sealed_cpu = interleaved(golem_cycle(), golem_cycle(seal_key=b"k" * 32))  # type: ignore[arg-type]
    report("golem: the same cycle, CPU time", ours_cpu)
    report("golem: the same cycle, CPU, interleaved with the next", plain_cpu)
    report("golem: the same cycle with seal_key (seal + verify), CPU", sealed_cpu)
    share = (sealed_cpu - plain_cpu) / sealed_cpu
    print(f"{'sealing share of a sealed cycle (CPU difference)':<58} {share:>10.1%}")
    work = seal_and_verify()
    report("golem: seal_call + verify_call of the pending call alone", work)
    peer = pydantic_ai_cycle()
    if peer is None:
        print("pydantic-ai: not installed (pip install 'golem-agents[bench]') - skipped")
        return
    theirs = measure(peer, per_round=60)  # type: ignore[arg-type]
    report("pydantic-ai: same cycle", theirs)
    theirs_cpu = measure(peer, per_round=60, cpu=True)  # type: ignore[arg-type]
    report("pydantic-ai: same cycle, CPU time", theirs_cpu)
    print(f"{'ratio (pydantic-ai / golem), wall clock':<58} {theirs / ours:>10.1f} x")
    print(f"{'ratio (pydantic-ai / golem), CPU time':<58} {theirs_cpu / ours_cpu:>10.1f} x")


if __name__ == "__main__":
    main()
