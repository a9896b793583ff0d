"""Conformance of resuming with the contract, for histories the other tests do not build.

Go reference §2.6 (code only): "Non-tool messages that appear after L (a user or assistant
message appended after a pause) are not carried into the merged history (dropped). A genuine
paused history never contains them." Dropping them silently loses what the caller added (a
user typing while the run was paused, say); golem refuses such a history with a `ResumeError`
before anything runs and points at `prompt=`, the way to add text to a resume (ADR 0048).
"""

from __future__ import annotations

from typing import Any

import pytest

from golem import (
    Agent,
    DeferredResults,
    Message,
    ResumeError,
    RunContext,
    Tool,
    ToolCall,
    dumps_history,
)
from golem.model import ModelResponse
from golem.testing import ScriptedModel
from golem.tool import Deferred, call_approved

OBJ = {"type": "object"}


class Gate:
    def __init__(self) -> None:
        self.effects: list[str] = []

    def exec(self, ctx: RunContext[Any], args: dict[str, Any]) -> str:
        if not call_approved():
            raise Deferred("approval", "sign-off")
        self.effects.append(ctx.call_id)
        return "done"


async def paused(gate: Gate) -> list[Message]:
    model = ScriptedModel(
        ModelResponse(
            Message(
                role="assistant",
                tool_calls=[ToolCall("c1", "gate", "{}"), ToolCall("c2", "stat", "{}")],
            ),
            finish_reason="tool_call",
        )
    )
    agent = Agent(
        model, tools=[Tool("gate", "g", OBJ, gate.exec), Tool("stat", "s", OBJ, lambda c, a: "12")]
    )
    result = await agent.run("go")
    assert result.pending is not None
    return result.messages


@pytest.mark.parametrize(
    "appended",
    [
        Message(role="user", content="also, keep b.log"),
        Message(role="assistant", content="stale text"),
        Message(role="system", content="be terse"),
    ],
)
async def test_a_message_appended_after_the_paused_batch_is_refused_not_dropped(
    appended: Message,
) -> None:
    gate = Gate()
    history = [*await paused(gate), appended]
    model = ScriptedModel("never")
    agent = Agent(model, tools=[Tool("gate", "g", OBJ, gate.exec)])
    with pytest.raises(ResumeError) as info:
        await agent.run_with_deferred_results(history, DeferredResults(approvals={"c1": True}))
    text = str(info.value)
    assert f"history message {len(history) - 1} ({appended.role}) follows the paused batch" in text
    assert "prompt" in text
    assert gate.effects == []  # nothing re-ran
    assert model.requests == []  # no model call
    # the same resume from JSON is refused the same way
    with pytest.raises(ResumeError):
        await agent.run_with_deferred_results(
            dumps_history(history), DeferredResults(approvals={"c1": True})
        )


async def test_the_text_goes_to_the_model_as_the_resumes_prompt_instead() -> None:
    gate = Gate()
    history = await paused(gate)
    model = ScriptedModel("ok")
    agent = Agent(model, tools=[Tool("gate", "g", OBJ, gate.exec)])
    result = await agent.run_with_deferred_results(
        history, DeferredResults(approvals={"c1": True}), "also, keep b.log"
    )
    assert result.output == "ok"
    assert gate.effects == ["c1"]
    sent = model.requests[0].messages
    assert [m.role for m in sent] == ["user", "assistant", "tool", "tool", "user"]
    assert sent[-1].content == "also, keep b.log"


async def test_tool_results_after_the_batch_are_fine_in_any_number() -> None:
    # results the paused run recorded, a stray one, a duplicate: repair's business, not refused
    gate = Gate()
    history = await paused(gate)
    history += [
        Message(role="tool", content="stray", tool_call_id="zz", tool_name="stat"),
        Message(role="tool", content="12 again", tool_call_id="c2", tool_name="stat"),
    ]
    model = ScriptedModel("ok")
    agent = Agent(model, tools=[Tool("gate", "g", OBJ, gate.exec)])
    result = await agent.run_with_deferred_results(history, DeferredResults(approvals={"c1": True}))
    assert result.output == "ok"
    sent = model.requests[0].messages
    assert [(m.role, m.tool_call_id) for m in sent] == [
        ("user", ""),
        ("assistant", ""),
        ("tool", "c1"),
        ("tool", "c2"),
    ]


async def test_messages_between_older_turns_stay_where_they_are() -> None:
    # only what follows the LAST batch is checked: an older turn's pending call with the
    # conversation going on after it resumes as before (its resolution follows the batch)
    gate = Gate()
    history = [
        Message(role="user", content="first"),
        Message(role="assistant", tool_calls=[ToolCall("old", "gate", "{}")]),
        Message(role="user", content="second"),
        Message(role="assistant", tool_calls=[ToolCall("c1", "gate", "{}")]),
    ]
    model = ScriptedModel("ok")
    agent = Agent(model, tools=[Tool("gate", "g", OBJ, gate.exec)])
    result = await agent.run_with_deferred_results(
        history, DeferredResults(approvals={"c1": True}, external={"old": "late"})
    )
    assert result.output == "ok"
    assert [(m.role, m.tool_call_id, m.content) for m in model.requests[0].messages[-2:]] == [
        ("tool", "c1", "done"),
        ("tool", "old", "late"),
    ]
