"""How the history codec and a resume scale with the length of a paused history.

    python bench/history_scaling.py [--sizes 10,1000,10000] [--rounds 7]

A paused history of N messages: a system and a user message, then N/2 - 1 turns of an
assistant call to `stat_file` answered by its tool result, and a last assistant message
whose `delete_file` call waits for approval. For each N it prints, in ms (best round, the
garbage collector left on as in a real process):

- load:   `loads_history(text)`
- dump:   `dumps_history(history)`
- resume: `agent.run_with_deferred_results(history, approval)` on the loaded history, with
          a model that answers at once (bench/_timing.py's InstantModel)
- end to end: load → resume → dump of the resumed messages, what a stored resume does
- worker:  the same through `Worker.run_once` on bench/_null_store.py's in-memory store:
          claim, load, the stored-call checks (name, argument bytes, seal), resume, dump,
          finish — golem's whole side of a stored resume (no peer equivalent)

and µs per message, so a cost that grows faster than the history shows up as a growing
column. With the `[bench]` extra installed, the same history goes through Pydantic AI
(`ModelMessagesTypeAdapter.validate_json` / `dump_json`, `agent.run(message_history=...,
deferred_tool_results=...)`) in the same process, and the ratios are printed.
The machine may be shared: compare ratios measured in one run, not absolute figures.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _null_store import NullStore, claimed_record
from _timing import InstantModel

from golem import Agent, Approval, DeferredResults, dumps_history, loads_history
from golem.durable.store import CallKind, NewCall, NewRun
from golem.durable.worker import AgentEntry, Worker
from golem.messages import Message, ToolCall
from golem.model import ModelRequest, ModelResponse
from golem.tool import DeferKind, Deferred, call_approved

try:  # the peer, from the [bench] extra; module level so its tool annotations resolve
    from pydantic_ai import RunContext as PRunContext
except ImportError:  # pragma: no cover
    PRunContext = None  # type: ignore[assignment,misc]

RUN = "01912f4e-8b2a-7c41-9d3e-2f6a5b8c7d10"
CONV = "01912f4e-8b29-7a10-8c2d-1e5f4a3b2c01"
PENDING = "call-delete"
ANSWER = "Deleted old.log."


def stat_args(i: int) -> str:
    return f'{{"path": "build/file-{i}.log", "follow": true}}'


def golem_history(n: int) -> list[Message]:
    stamp = {"run_id": RUN, "conversation_id": CONV}
    history = [
        Message("system", "You tidy the workspace. Deleting files needs sign-off."),
        Message("user", "Clean up the build directory.", **stamp),
    ]
    i = 0
    while len(history) < n - 1:
        call = ToolCall(f"call-{i}", "stat_file", stat_args(i))
        history.append(Message("assistant", "Checking the next file.", tool_calls=[call], **stamp))
        history.append(
            Message("tool", f"size={i * 17}", tool_call_id=call.id, tool_name="stat_file", **stamp)
        )
        i += 1
    pending = ToolCall(PENDING, "delete_file", '{"path": "build/old.log"}')
    history.append(Message("assistant", tool_calls=[pending], **stamp))
    return history[-n:] if n < 3 else history


def golem_agent() -> Agent[None, str]:
    def respond(request: ModelRequest) -> ModelResponse:
        return ModelResponse(Message(role="assistant", content=ANSWER), finish_reason="stop")

    agent: Agent[None, str] = Agent(InstantModel(respond), instructions="You tidy the workspace.")

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
    async def stat_file(path: str, follow: bool = False) -> str:
        """Size of a file.

        Args:
            path: File to inspect.
            follow: Follow symlinks.
        """
        return "size=12"

    return agent


class Side:
    """One framework's four operations on the same paused history."""

    def __init__(
        self,
        load: Callable[[], object],
        dump: Callable[[], object],
        resume: Callable[[], Awaitable[object]],
        end_to_end: Callable[[], Awaitable[object]],
        worker: Callable[[], Awaitable[object]] | None = None,
    ) -> None:
        self.load, self.dump, self.resume, self.end_to_end = load, dump, resume, end_to_end
        self.worker = worker


def golem_side(n: int) -> Side:
    agent = golem_agent()
    text = dumps_history(golem_history(n))
    history = loads_history(text)
    approve = DeferredResults(approvals={PENDING: Approval(True)})

    async def resume() -> object:
        result = await agent.run_with_deferred_results(history, approve)
        assert result.output == ANSWER
        return result

    async def end_to_end() -> object:
        result = await agent.run_with_deferred_results(loads_history(text), approve)
        return dumps_history(result.messages)

    pending = NewCall(PENDING, CallKind.APPROVAL, "delete_file", '{"path": "build/old.log"}')
    stored = claimed_record(NewRun(RUN, "tidy", CONV, text, calls=(pending,)))
    store = NullStore()
    worker = Worker(store, {"tidy": AgentEntry(agent)}, worker_id="w", sweep_interval=3600)  # type: ignore[arg-type]

    async def through_worker() -> object:
        store.ready = stored
        assert await worker.run_once()
        return store.outcome

    return Side(
        lambda: loads_history(text),
        lambda: dumps_history(history),
        resume,
        end_to_end,
        through_worker,
    )


def pydantic_ai_side(n: int) -> Side | None:
    try:
        from pydantic_ai import Agent as PAgent
        from pydantic_ai import ApprovalRequired, DeferredToolRequests, DeferredToolResults
        from pydantic_ai.messages import (
            ModelMessage,
            ModelMessagesTypeAdapter,
            SystemPromptPart,
            TextPart,
            ToolCallPart,
            ToolReturnPart,
            UserPromptPart,
        )
        from pydantic_ai.messages import ModelRequest as PRequest
        from pydantic_ai.messages import ModelResponse as PResponse
        from pydantic_ai.models.function import AgentInfo
        from pydantic_ai.models.function import FunctionModel as PFunctionModel
    except ImportError:
        return None

    # The same conversation, message for message (the first request holds system + user).
    messages: list[ModelMessage] = [
        PRequest(
            parts=[
                SystemPromptPart("You tidy the workspace. Deleting files needs sign-off."),
                UserPromptPart("Clean up the build directory."),
            ]
        )
    ]
    for m in golem_history(n)[2:]:
        if m.role == "assistant":
            parts: list[Any] = [TextPart(m.content)] if m.content else []
            parts += [ToolCallPart(c.name, c.args, tool_call_id=c.id) for c in m.tool_calls]
            messages.append(PResponse(parts=parts))
        else:
            messages.append(
                PRequest(
                    parts=[ToolReturnPart(m.tool_name, m.content, tool_call_id=m.tool_call_id)]
                )
            )

    def respond(history: list[ModelMessage], info: AgentInfo) -> PResponse:
        return PResponse(parts=[TextPart(ANSWER)])

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
    async def stat_file(path: str, follow: bool = False) -> str:
        """Size of a file.

        Args:
            path: File to inspect.
            follow: Follow symlinks.
        """
        return "size=12"

    text = ModelMessagesTypeAdapter.dump_json(messages)
    history = ModelMessagesTypeAdapter.validate_json(text)
    approve = DeferredToolResults(approvals={PENDING: True})

    async def resume() -> object:
        result = await agent.run(message_history=history, deferred_tool_results=approve)
        assert result.output == ANSWER, result.output
        return result

    async def end_to_end() -> object:
        loaded = ModelMessagesTypeAdapter.validate_json(text)
        result = await agent.run(message_history=loaded, deferred_tool_results=approve)
        return ModelMessagesTypeAdapter.dump_json(result.all_messages())

    return Side(
        lambda: ModelMessagesTypeAdapter.validate_json(text),
        lambda: ModelMessagesTypeAdapter.dump_json(history),
        resume,
        end_to_end,
    )


async def best_ms(fn: Callable[[], Any], *, rounds: int, budget_s: float = 0.3) -> float:
    """CPU ms per call: the best of `rounds` rounds, the collector on (it is part of the cost).

    CPU time of this process (`time.process_time`), not wall time: everything measured is
    CPU-bound in one thread, and on a shared machine the wall clock mostly measures the others.
    """

    async def once() -> None:
        result = fn()
        if asyncio.iscoroutine(result):
            await result

    start = time.process_time()
    await once()  # warm up caches, schemas, imports
    per_round = max(1, min(200, int(budget_s / max(time.process_time() - start, 1e-4))))
    best = float("inf")
    for _ in range(rounds):
        gc.collect()
        start = time.process_time()
        for _ in range(per_round):
            await once()
        best = min(best, (time.process_time() - start) / per_round)
    return best * 1e3


async def measure_side(side: Side, rounds: int) -> dict[str, float]:
    got = {
        "load": await best_ms(side.load, rounds=rounds),
        "dump": await best_ms(side.dump, rounds=rounds),
        "resume": await best_ms(side.resume, rounds=rounds),
        "end to end": await best_ms(side.end_to_end, rounds=rounds),
    }
    if side.worker is not None:
        got["worker"] = await best_ms(side.worker, rounds=rounds)
    return got


async def main(sizes: list[int], rounds: int) -> None:
    peer_missing = False
    print(
        f"{'messages':>8} {'':<11} {'golem ms':>10} {'µs/msg':>8} {'pydantic-ai ms':>15} {'ratio':>7}"
    )
    print(f"{'':>8} {'':<11} {'(CPU)':>10}")
    for n in sizes:
        ours = await measure_side(golem_side(n), rounds)
        peer = pydantic_ai_side(n)
        theirs = await measure_side(peer, rounds) if peer is not None else None
        peer_missing = theirs is None
        ours["round trip"] = ours["load"] + ours["dump"]
        if theirs is not None:
            theirs["round trip"] = theirs["load"] + theirs["dump"]
        for what, ms in ours.items():
            line = f"{n:>8} {what:<11} {ms:>10.3f} {ms * 1e3 / n:>8.2f}"
            if theirs is not None and what in theirs:
                line += f" {theirs[what]:>15.3f} {theirs[what] / ms:>6.1f}x"
            print(line)
    if peer_missing:
        print("pydantic-ai: not installed (pip install 'golem-agents[bench]') - skipped")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,1000,10000")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    asyncio.run(main([int(s) for s in args.sizes.split(",")], args.rounds))
