"""An agent used as another agent's tool, whose pause surfaces in the parent and resumes
through it.

Run: python examples/nested_agents.py  (offline)
"""

from __future__ import annotations

from golem import Agent, Approval, DeferredResults, dumps_history, loads_history
from golem.messages import Message, ToolCall
from golem.testing import ScriptedModel
from golem.tool import DeferKind, Deferred, call_approved

deleted: list[str] = []


def janitor(model: ScriptedModel) -> Agent:
    """The sub-agent: it may delete files, with a human's approval."""
    agent = Agent(model, name="janitor", instructions="You clean up disk space.")

    @agent.tool_plain
    def delete_file(path: str) -> str:
        """Delete a file."""
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, f"delete {path}?")
        deleted.append(path)
        return f"deleted {path}"

    return agent


def assistant(sub_model: ScriptedModel, model: ScriptedModel) -> Agent:
    """The parent: it delegates cleaning to the janitor."""
    sub = janitor(sub_model)
    return Agent(model, tools=[sub.as_tool(description="Free disk space; say what to clean.")])


# the first process: the parent asks the janitor, who pauses on a deletion
parent = assistant(
    ScriptedModel(
        Message("assistant", tool_calls=[ToolCall("j-1", "delete_file", '{"path": "old.log"}')])
    ),
    ScriptedModel(
        Message("assistant", tool_calls=[ToolCall("call-1", "janitor", '{"prompt": "free space"}')])
    ),
)
paused = parent.run_sync("my disk is full")
assert paused.pending is not None
for call in paused.pending.approvals:
    print("pending:", call.call_id, call.tool_name, call.args, "-", call.reason)
print("deleted so far:", deleted)
stored = dumps_history(paused.messages)  # the parent's history carries the janitor's state

# another process, later: the same agents, the stored history and the decision
resumer = assistant(ScriptedModel("Deleted old.log (2 GB)."), ScriptedModel("Freed 2 GB."))
done = resumer.run_with_deferred_results_sync(
    loads_history(stored), DeferredResults(approvals={"call-1/j-1": Approval(True)})
)
print("janitor said:", [m.content for m in done.messages if m.tool_call_id == "call-1"])
print("deleted:", deleted)
print("answer:", done.output)
