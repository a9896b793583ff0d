"""Deferred tools, the whole cycle, offline.

A gated shell-style tool defers every command for a human decision. The run pauses;
the paused history goes through JSON (as it would to a database); the application
denies one command and approves the other; a fresh agent resumes and the model
answers. Run it with `python examples/deferred_tools.py` (or `make demo`).
"""

from __future__ import annotations

import asyncio
import json

from golem import (
    Agent,
    Approval,
    DeferredResults,
    RunContext,
    dumps_history,
    loads_history,
)
from golem.messages import Message, ToolCall
from golem.testing import ScriptedModel
from golem.tool import DeferKind, Deferred, call_approved

EXECUTED: list[str] = []


def build_agent(model: ScriptedModel) -> Agent[None, str]:
    agent: Agent[None, str] = Agent(model, instructions="You keep the workspace tidy.")

    @agent.tool
    def shell(ctx: RunContext[None], command: str) -> str:
        """Run a shell command in the workspace.

        Args:
            command: The command line to run.
        """
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, f"runs `{command}` on the workspace")
        EXECUTED.append(command)  # the side effect happens only on the approved pass
        return f"$ {command}\n(exit 0)"

    @agent.tool
    def list_files(ctx: RunContext[None]) -> str:
        """List the files in the workspace."""
        return "build/  notes.txt  old.log"

    return agent


def script() -> ScriptedModel:
    return ScriptedModel(
        Message(
            role="assistant",
            content="Let me look, then clean up.",
            tool_calls=[
                ToolCall("call-1", "list_files", "{}"),
                ToolCall("call-2", "shell", '{"command": "rm -rf build"}'),
                ToolCall("call-3", "shell", '{"command": "rm old.log"}'),
            ],
        ),
        "I removed old.log. I left build/ alone because you declined: it is still needed.",
    )


def show(title: str, text: str) -> None:
    print(f"\n== {title}\n{text}")


async def main() -> None:
    model = script()
    agent = build_agent(model)

    # 1. The run pauses: list_files executed, both shell calls wait for a decision.
    paused = await agent.run("Clean up the workspace.")
    assert paused.pending is not None
    assert paused.is_paused
    show(
        "paused",
        "\n".join(
            f"{p.call_id}: {p.tool_name}({p.args}) - {p.reason}" for p in paused.pending.approvals
        ),
    )

    # 2. The paused state is ordinary history JSON: store it anywhere.
    stored = dumps_history(paused.messages)
    show("stored history", f"{len(stored)} bytes, {len(json.loads(stored))} messages")

    # 3. A human decides (deny the first shell call, approve the second).
    decisions = DeferredResults(
        approvals={
            "call-2": Approval(approved=False, reason="build/ is still needed"),
            "call-3": Approval(approved=True),
        }
    )
    show("decisions", "call-2: denied (build/ is still needed)\ncall-3: approved")

    # 4. Later, maybe in another process: a fresh agent resumes from the JSON alone.
    resumed = await build_agent(model).run_with_deferred_results(loads_history(stored), decisions)
    show("executed on the approved pass", "\n".join(EXECUTED))
    show(
        "the model saw",
        "\n".join(
            f"{m.role:9} {m.tool_call_id or '':7} {m.content.splitlines()[0] if m.content else ''}"
            for m in model.requests[-1].messages
        ),
    )
    show("answer", str(resumed.output))
    print(
        f"\nrun {resumed.run_id[:8]}… continued conversation {resumed.conversation_id[:8]}… "
        f"({resumed.tool_calls} approved re-run, {resumed.requests} model call)"
    )


if __name__ == "__main__":
    asyncio.run(main())
