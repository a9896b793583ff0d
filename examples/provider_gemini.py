"""A gated deferred tool on the real Gemini API.

The agent may "send" an email only after a human approves it. The run pauses on the
tool call; the paused history goes through JSON (as it would to a database); a fresh
agent resumes with the decision and Gemini writes the final answer. The tool call's
thought signature travels in the history and is sent back on the resumed turn.

    GEMINI_API_KEY=... python examples/provider_gemini.py

Without GEMINI_API_KEY / GOOGLE_API_KEY it explains what it needs and exits 0.
Set GOLEM_GEMINI_MODEL to try another model (default gemini-2.5-flash).
"""

from __future__ import annotations

import asyncio
import os
import sys

from golem import Agent, Approval, DeferredResults, RunContext, dumps_history, loads_history
from golem.providers.gemini import GeminiModel
from golem.tool import DeferKind, Deferred, call_approved

SENT: list[str] = []


def build_agent(model: GeminiModel) -> Agent[None, str]:
    agent: Agent[None, str] = Agent(
        model,
        instructions="You are an assistant that can send short emails. Be concise.",
        max_attempts=3,  # rate limits and overloads are retried with backoff
    )

    @agent.tool
    def send_email(ctx: RunContext[None], to: str, subject: str, body: str) -> str:
        """Send an email.

        Args:
            to: Recipient address.
            subject: Subject line.
            body: Plain-text body.
        """
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, f"emails {to}")
        SENT.append(to)  # the side effect happens only on the approved pass
        return f"email to {to} sent"

    return agent


def decide(prompt: str) -> bool:
    """Ask on a terminal; approve automatically when there is none (CI, pipes)."""
    if not sys.stdin.isatty():
        print(f"{prompt} [auto-approved: no terminal]")
        return True
    return input(f"{prompt} [y/N] ").strip().lower() == "y"


async def main() -> int:
    if not (os.environ.get("GEMINI_API_KEY") or os.environ.get("GOOGLE_API_KEY")):
        print(
            "This example calls the real Gemini API: set GEMINI_API_KEY (or GOOGLE_API_KEY)\n"
            "and run it again. To see the same cycle offline, run examples/deferred_tools.py."
        )
        return 0
    name = os.environ.get("GOLEM_GEMINI_MODEL", "gemini-2.5-flash")

    model = GeminiModel(name)
    paused = await build_agent(model).run(
        "Email ada@example.com that the build is green. Subject: Build status."
    )
    await model.aclose()
    if paused.pending is None:
        print(f"The model answered without calling the tool:\n{paused.output}")
        return 0

    saved = dumps_history(paused.messages)  # store it anywhere; the process may exit here
    approvals = {}
    for call in paused.pending.approvals:
        approvals[call.call_id] = Approval(decide(f"Allow {call.tool_name}({call.args})?"))

    model = GeminiModel(name)  # a fresh model and agent, as in another process
    done = await build_agent(model).run_with_deferred_results(
        loads_history(saved), DeferredResults(approvals=approvals)
    )
    await model.aclose()
    print(f"\nsent to: {SENT or 'nobody'}")
    print(f"answer: {done.output}")
    print(f"tokens: {done.usage.input_tokens} in, {done.usage.output_tokens} out")
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
