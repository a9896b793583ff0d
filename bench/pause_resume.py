"""Overhead per full pause/resume cycle, against the peers and a hand-written floor.

    python bench/pause_resume.py

One cycle: a run whose model emits a mixed batch (one call defers for approval, one
executes) pauses → JSON → resume with an approval (the deferred call runs) → final answer.
The model answers instantly, so the figure is the framework's own cost. golem runs it with
and without a seal key; with the `[bench]` extra the same cycle runs in Pydantic AI, the
OpenAI Agents SDK and LangGraph (bench/_peers.py), beside a loop of dicts and `json`. All jobs
run in interleaved rounds with the garbage collector on; each ratio is taken round by round
and printed as median (min–max). The table is printed for async tools, then for sync tools
(also golem's `run_in_thread=False`: a sync tool that never blocks runs on the loop).
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _peers import ANSWER, PEERS_CYCLE, Job, compare, delete_file, floor_cycle, stat_file
from _timing import InstantModel, measure, report

from golem import Agent, Approval, DeferredResults, PausedRun, dumps_history, loads_history
from golem.messages import Message, ToolCall
from golem.model import ModelRequest, ModelResponse
from golem.seal import SealKeys, seal_call, verify_call
from golem.tool import DeferKind, Deferred, call_approved

BATCH = [  # compact argument JSON, as most providers send it
    ToolCall("call-1", "delete_file", '{"path":"build/old.log"}'),
    ToolCall("call-2", "stat_file", '{"path":"build/new.log"}'),
]


def golem_cycle(seal_key: bytes | None = None, sync: bool = False, thread: bool = True) -> Job:
    def respond(request: ModelRequest) -> ModelResponse:
        if request.messages[-1].role == "tool":
            return ModelResponse(Message(role="assistant", content=ANSWER), finish_reason="stop")
        return ModelResponse(
            Message(role="assistant", tool_calls=list(BATCH)), finish_reason="tool_call"
        )

    agent: Agent[None, str] = Agent(
        InstantModel(respond), instructions="You tidy the workspace.", seal_key=seal_key
    )

    def gated(path: str) -> str:
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, "deletes need sign-off")
        return delete_file(path)

    if sync:
        agent.tool_plain(name="delete_file", run_in_thread=thread)(gated)
        agent.tool_plain(run_in_thread=thread)(stat_file)
    else:

        async def delete_async(path: str) -> str:
            """Delete a file.

            Args:
                path: File to delete.
            """
            return gated(path)

        async def stat_async(path: str) -> str:
            """Size of a file.

            Args:
                path: File to inspect.
            """
            return stat_file(path)

        agent.tool_plain(name="delete_file")(delete_async)
        agent.tool_plain(name="stat_file")(stat_async)

    approve = DeferredResults(approvals={"call-1": Approval(True)})

    async def cycle() -> object:
        paused = await agent.run("Clean up the workspace.")
        assert paused.pending is not None
        assert bool(paused.pending.approvals[0].seal) is (seal_key is not None)
        stored = loads_history(dumps_history(paused.messages))
        # keyless: the history alone, as the Go contract resumes; keyed: the paused run, whose
        # conversation and pending calls a sealed resume must be told (and checks)
        keyed = PausedRun(stored, paused.pending, paused.conversation_id)
        resumed = await agent.run_with_deferred_results(keyed if seal_key else stored, approve)
        assert resumed.output == ANSWER
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


def main() -> None:
    work = seal_and_verify()
    report("golem: seal_call + verify_call of the pending call alone", work)
    for sync in (False, True):
        jobs: dict[str, Job] = {
            "golem": golem_cycle(sync=sync),
            "golem, seal_key (seal + verify)": golem_cycle(seal_key=b"k" * 32, sync=sync),
            "hand-written floor (dicts + json)": floor_cycle(sync),
        }
        if sync:
            jobs["golem, run_in_thread=False"] = golem_cycle(sync=True, thread=False)
        kind = "sync tools (run in a worker thread)" if sync else "async tools"
        title = f"pause (mixed batch) → JSON → resume → answer, {kind}"
        compare(title, jobs, PEERS_CYCLE, sync, per_round=200)


if __name__ == "__main__":
    main()
