"""A gated deferred tool on the real OpenAI Chat Completions API (or a compatible server).

The agent may delete a file only after a human approves it. The first run is streamed
(tool-call fragments are printed as they arrive) and pauses on the gated call; the paused
history goes through JSON (as it would to a database); a fresh agent resumes with the
decision and the model writes the final answer.

    OPENAI_API_KEY=sk-... python examples/provider_openai.py
    OPENAI_BASE_URL=http://localhost:11434/v1 GOLEM_OPENAI_MODEL=qwen3 python examples/provider_openai.py
    GOLEM_OPENAI_API=responses GOLEM_OPENAI_MODEL=gpt-5-mini python examples/provider_openai.py

Without OPENAI_API_KEY (or OPENAI_BASE_URL for a local server such as Ollama or vLLM) it
explains what it needs and exits 0. GOLEM_OPENAI_MODEL picks the model (default gpt-4.1-mini);
GOLEM_OPENAI_API=responses uses the Responses API (`OpenAIResponsesModel`) instead of Chat
Completions: a reasoning model's reasoning then travels with the paused history.
"""

from __future__ import annotations

import asyncio
import os
import sys

from golem import Agent, Approval, DeferredResults, RunContext, dumps_history, loads_history
from golem.model import Delta
from golem.providers.openai import OpenAIChatModel, OpenAIResponsesModel
from golem.tool import DeferKind, Deferred, call_approved

FILES = {"/tmp/golem-demo/report.txt": "Q3 numbers", "/tmp/golem-demo/old.log": "noise"}


def make_model(name: str) -> OpenAIChatModel | OpenAIResponsesModel:
    if os.environ.get("GOLEM_OPENAI_API") == "responses":
        return OpenAIResponsesModel(name)
    return OpenAIChatModel(name)


def build_agent(model: OpenAIChatModel | OpenAIResponsesModel) -> Agent[None, str]:
    agent: Agent[None, str] = Agent(
        model,
        instructions="You tidy up a directory with the tools you have. Be concise.",
        max_attempts=3,  # rate limits and overloads are retried with backoff
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
    if not (os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL")):
        print(
            "This example calls the real OpenAI API: set OPENAI_API_KEY (or OPENAI_BASE_URL\n"
            "for a local OpenAI-compatible server) and run it again. To see the same cycle\n"
            "offline, run examples/deferred_tools.py."
        )
        return 0
    name = os.environ.get("GOLEM_OPENAI_MODEL", "gpt-4.1-mini")

    async with make_model(name) as model:
        agent = build_agent(model)
        async with agent.run_stream("Delete the log files in /tmp/golem-demo.") as stream:
            async for item in stream:
                if isinstance(item, Delta):
                    for call in item.tool_calls:
                        print(call.name or "", call.args_fragment, sep="", end="", flush=True)
                    print(item.content, end="", flush=True)
        paused = stream.result
    print()
    if paused.pending is None:
        print(f"The model answered without deleting anything:\n{paused.output}")
        return 0

    saved = dumps_history(paused.messages)  # store it anywhere; the process may exit here
    approvals = {
        call.call_id: Approval(decide(f"Allow {call.tool_name}({call.args})?"))
        for call in paused.pending.approvals
    }

    async with make_model(name) as model:  # a fresh model and agent, as in another process
        done = await build_agent(model).run_with_deferred_results(
            loads_history(saved), DeferredResults(approvals=approvals)
        )
    print(f"\nfiles left: {sorted(FILES)}")
    print(f"answer: {done.output}")
    print(f"tokens: {done.usage.input_tokens} in, {done.usage.output_tokens} out")
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
