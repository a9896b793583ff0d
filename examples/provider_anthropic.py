"""A gated deferred tool on the real Anthropic Messages API, with extended thinking.

The agent may delete a file only after a human approves it. The first run is streamed
(thinking and text are printed as they arrive) and pauses on the gated call; the paused
history, thinking signatures included, goes through JSON (as it would to a database); a
fresh agent resumes with the decision, Claude sees its own signed thinking again, and
writes the final answer.

    ANTHROPIC_API_KEY=sk-ant-... python examples/provider_anthropic.py

Without ANTHROPIC_API_KEY it explains what it needs and exits 0. GOLEM_ANTHROPIC_MODEL
picks the model (default claude-sonnet-4-5).
"""

from __future__ import annotations

import asyncio
import os
import sys

from golem import Agent, Approval, DeferredResults, RunContext, dumps_history, loads_history
from golem.model import Delta
from golem.providers.anthropic import AnthropicModel
from golem.tool import DeferKind, Deferred, call_approved

FILES = {"/tmp/golem-demo/report.txt": "Q3 numbers", "/tmp/golem-demo/old.log": "noise"}


def build_model(name: str) -> AnthropicModel:
    return AnthropicModel(name, max_tokens=4096, thinking_budget=1024)


def build_agent(model: AnthropicModel) -> Agent[None, str]:
    agent: Agent[None, str] = Agent(
        model,
        instructions="You tidy up a directory with the tools you have. Be concise.",
        max_attempts=3,  # 429 and 529 (overloaded) are retried with backoff
    )

    @agent.tool
    def list_files(ctx: RunContext[None]) -> str:
        """List the files in /tmp/golem-demo."""
        return "\n".join(sorted(FILES))

    @agent.tool
    def delete_file(ctx: RunContext[None], path: str) -> str:
        """Delete a file.

        Args:
            path: Absolute path of the file to delete.
        """
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, f"deletes {path}")
        FILES.pop(path, None)  # the side effect happens only on the approved pass
        return f"deleted {path}"

    return agent


def decide(prompt: str) -> bool:
    """Ask on a terminal; approve automatically when there is none (CI, pipes)."""
    if not sys.stdin.isatty():
        print(f"{prompt} [auto-approved: no terminal]")
        return True
    return input(f"{prompt} [y/N] ").strip().lower() == "y"


async def main() -> int:
    if not os.environ.get("ANTHROPIC_API_KEY"):
        print(
            "This example calls the real Anthropic API: set ANTHROPIC_API_KEY and run it\n"
            "again. To see the same cycle offline, run examples/deferred_tools.py."
        )
        return 0
    name = os.environ.get("GOLEM_ANTHROPIC_MODEL", "claude-sonnet-4-5")

    async with build_model(name) as model:
        agent = build_agent(model)
        thinking = False
        async with agent.run_stream("Delete the log files in /tmp/golem-demo.") as stream:
            async for item in stream:
                if not isinstance(item, Delta):
                    continue
                for thought in item.thinking:
                    if thought.text and not thinking:
                        print("\n[thinking] ", end="")
                        thinking = True
                    print(thought.text, end="", flush=True)
                if item.content:
                    if thinking:
                        print("\n[answer] ", end="")
                        thinking = False
                    print(item.content, end="", flush=True)
        paused = stream.result
    print()
    if paused.pending is None:
        print(f"Claude answered without deleting anything:\n{paused.output}")
        return 0

    saved = dumps_history(paused.messages)  # store it anywhere; the process may exit here
    approvals = {
        call.call_id: Approval(decide(f"Allow {call.tool_name}({call.args})?"))
        for call in paused.pending.approvals
    }

    async with build_model(name) as model:  # a fresh model and agent, as in another process
        done = await build_agent(model).run_with_deferred_results(
            loads_history(saved), DeferredResults(approvals=approvals)
        )
    print(f"\nfiles left: {sorted(FILES)}")
    print(f"answer: {done.output}")
    print(
        f"tokens: {done.usage.input_tokens} in ({done.usage.cache_read_tokens} from cache), "
        f"{done.usage.output_tokens} out"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
