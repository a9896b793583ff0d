"""golem's own CPU per durable approval cycle, outside the store.

    python bench/cycle_overhead.py [--cycles 500] [--rounds 9]

The cycle of bench/store_throughput.py — `start_run` (run to the pause, dump the history,
build the `NewRun`) then `Worker.run_once` (claim, load the history, check the stored calls,
resume with the approved call re-run, dump, finish) — on bench/_null_store.py's in-memory
store, so what remains is golem's side of a cycle. Printed in ms of CPU per cycle (best
round, all threads), for the gated tool written as a plain function (golem runs it in a
worker thread, as every sync tool by default), as a plain function registered with
`run_in_thread=False` (on the event loop, no thread hand-off) and as an `async def` (on the
event loop), with the share of `start_run` and `run_once`. The model answers at once (bench/_timing.py).
The machine may be shared: compare figures measured in one run, not across runs.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _null_store import NullStore
from _timing import InstantModel

from golem import Agent, Message, RunContext, ToolCall
from golem.durable.worker import AgentEntry, Worker, start_run
from golem.model import ModelRequest, ModelResponse
from golem.tool import DeferKind, Deferred, call_approved


def _model(request: ModelRequest) -> ModelResponse:
    if request.messages[-1].role == "user":
        call = ToolCall("call-1", "transfer", '{"amount": 10}')
        return ModelResponse(Message(role="assistant", tool_calls=[call]))
    return ModelResponse(Message(role="assistant", content="Transferred."))


def sync_transfer(ctx: RunContext[Any], amount: int) -> str:
    """Move money (needs approval)."""
    if not call_approved():
        raise Deferred(DeferKind.APPROVAL, "money moves need sign-off")
    return f"moved {amount} (key {ctx.call_id})"


async def async_transfer(ctx: RunContext[Any], amount: int) -> str:
    """Move money (needs approval)."""
    if not call_approved():
        raise Deferred(DeferKind.APPROVAL, "money moves need sign-off")
    return f"moved {amount} (key {ctx.call_id})"


async def measure(
    tool: Callable[..., Any], cycles: int, rounds: int, run_in_thread: bool = True
) -> tuple[float, float]:
    """(ms CPU per cycle, ms CPU of it in start_run): best rounds."""
    store = NullStore()
    agent: Agent[Any, str] = Agent(InstantModel(_model))
    agent.tool(name="transfer", run_in_thread=run_in_thread)(tool)
    registry = {"bank": AgentEntry(agent)}
    worker = Worker(store, registry, worker_id="w", lease_seconds=30, sweep_interval=3600)  # type: ignore[arg-type]

    async def cycle() -> float:
        start = time.process_time()
        await start_run(store, registry, "bank", "pay", started_by="w")  # type: ignore[arg-type]
        started = time.process_time() - start
        assert await worker.run_once()
        return started

    for _ in range(max(20, cycles // 10)):  # warm up
        await cycle()
    best = best_start = float("inf")
    for _ in range(rounds):
        gc.collect()
        start = time.process_time()
        in_start = 0.0
        for _ in range(cycles):
            in_start += await cycle()
        best = min(best, (time.process_time() - start) / cycles)
        best_start = min(best_start, in_start / cycles)
    return best * 1e3, best_start * 1e3


async def main(cycles: int, rounds: int) -> None:
    print("golem's CPU per durable cycle outside the store (start_run → run_once, null store)")
    threaded = 0.0
    for label, tool, in_thread in (
        ("sync tool (thread)", sync_transfer, True),
        ("sync tool (inline)", sync_transfer, False),
        ("async tool", async_transfer, True),
    ):
        total, started = await measure(tool, cycles, rounds, in_thread)
        threaded = threaded or total
        saved = "" if total is threaded else f"   (saves {threaded - total:.3f} ms vs thread)"
        print(
            f"  {label:<19} {total:7.3f} ms CPU/cycle   start_run ~{started:.3f} ms, "
            f"run_once ~{total - started:.3f} ms{saved}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    asyncio.run(main(args.cycles, args.rounds))
