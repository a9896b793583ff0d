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
from hypothesis import given, settings
from hypothesis import strategies as st

from golem import (
    Agent,
    Approval,
    DeferredResults,
    Message,
    ResumeError,
    RunContext,
    Tool,
    ToolCall,
    dumps_history,
)
from golem.messages import Part
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
    # only what follows the LAST batch is checked; an older turn's open call with the
    # conversation going on after it is closed as interrupted where it stands
    gate = Gate()
    history = [
        Message(role="user", content="first"),
        Message(role="assistant", tool_calls=[ToolCall("old", "gate", "{}")]),
        Message(role="user", content="second"),
        Message(role="assistant", tool_calls=[ToolCall("c1", "gate", "{}")]),
    ]
    model = ScriptedModel("ok")
    agent = Agent(model, tools=[Tool("gate", "g", OBJ, gate.exec)])
    result = await agent.run_with_deferred_results(history, DeferredResults(approvals={"c1": True}))
    assert result.output == "ok"
    assert [(m.role, m.tool_call_id) for m in model.requests[0].messages] == [
        ("user", ""),
        ("assistant", ""),
        ("tool", "old"),
        ("user", ""),
        ("assistant", ""),
        ("tool", "c1"),
    ]


# --------------------------------------------------------------------------- any resolutions

POOL = ["c1", "c2", "c3", "old"]


@st.composite
def resumes(
    draw: st.DrawFn,
) -> tuple[list[Message], dict[str, Approval | bool], dict[str, str], list[str]]:
    """A paused history (a batch, maybe an older pending call, some results recorded) and
    any resolutions at all, well-formed or not; also the pending call IDs in history order."""
    batch = draw(st.lists(st.sampled_from(["c1", "c2", "c3"]), min_size=1, unique=True))
    recorded = draw(st.lists(st.sampled_from(batch), unique=True, max_size=len(batch) - 1))
    history = [Message(role="user", content="go")]
    pending: list[str] = []
    if draw(st.booleans()):
        history.append(Message(role="assistant", tool_calls=[ToolCall("old", "gate", "{}")]))
        history.append(Message(role="user", content="and then"))  # closed, never pending
    history.append(Message(role="assistant", tool_calls=[ToolCall(c, "gate", "{}") for c in batch]))
    history += [
        Message(role="tool", content=f"recorded {c}", tool_call_id=c, tool_name="gate")
        for c in recorded
    ]
    pending += [c for c in batch if c not in recorded]
    approvals: dict[str, Approval | bool] = {}
    external: dict[str, str] = {}
    for call_id in [*POOL, "ghost"]:
        how = draw(st.sampled_from(["none", "approve", "deny", "external", "both"]))
        if how in ("approve", "both"):
            approvals[call_id] = True
        if how == "deny":
            approvals[call_id] = Approval(False, "no")
        if how in ("external", "both"):
            external[call_id] = f"ext {call_id}"
    return history, approvals, external, pending


@settings(deadline=None)
@given(resumes())
def test_any_resolutions_either_resume_every_pending_call_once_or_are_refused_untouched(
    case: tuple[list[Message], dict[str, Approval | bool], dict[str, str], list[str]],
) -> None:
    history, approvals, external, pending = case
    before = list(history)
    ran: list[str] = []

    def gate(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        ran.append(ctx.call_id)
        return f"ran {ctx.call_id}"

    model = ScriptedModel("ok")
    agent = Agent(model, tools=[Tool("gate", "g", OBJ, gate)])
    # a resolution for a call the history already answers (a recorded result) is skipped,
    # never run (ADR 0071; refused before); one for a call the history lacks is refused
    answered = {m.tool_call_id for m in history if m.role == "tool"}
    valid = (
        set(approvals) <= set(pending) | answered
        and set(external) <= set(pending) | answered
        and not set(approvals) & set(external)
        and set(pending) <= set(approvals) | set(external)
    )
    results = DeferredResults(approvals=approvals, external=external)
    if not valid:
        with pytest.raises(ResumeError):
            agent.run_with_deferred_results_sync(history, results)
        assert ran == []
        assert model.requests == []
        assert history == before  # the caller's history is untouched, nothing is lost
        return
    result = agent.run_with_deferred_results_sync(history, results)
    assert result.output == "ok"
    approved = [c for c in pending if approvals.get(c) is True]
    assert ran == approved  # in history order, each once
    sent = model.requests[0].messages
    answers = [m.tool_call_id for m in sent if m.role == "tool"]
    calls = [c.id for m in sent if m.role == "assistant" for c in m.tool_calls]
    assert sorted(answers) == sorted(calls)  # every call answered exactly once
    last = max(i for i, m in enumerate(sent) if m.role == "assistant")
    batch = [c.id for c in sent[last].tool_calls]
    # right after the batch: its answers in emission order, then the older call's resolution
    after = [m.tool_call_id for m in sent[last + 1 :]]
    assert after == batch + (["old"] if "old" in pending else [])
    for call_id in pending:
        (msg,) = [m for m in sent if m.role == "tool" and m.tool_call_id == call_id]
        if call_id in external:
            assert msg.content == external[call_id]
        elif approvals[call_id] is True:
            assert msg.content == f"ran {call_id}"
        else:
            assert msg.content.startswith("Your tool call was denied: no.")
        assert msg.run_id == result.run_id
    for call_id in answered:  # a skipped resolution leaves the recorded answer as it was
        (msg,) = [m for m in sent if m.role == "tool" and m.tool_call_id == call_id]
        assert msg.content == f"recorded {call_id}"
    assert history == before


# --------------------------------------------------------------------------- malformed histories


@pytest.mark.parametrize(
    ("history", "says"),
    [
        ("[{", "history is not valid JSON"),
        ('[{"role":"robot"}]', "history message 0: role must be one of"),
        ('{"role":"user"}', "history must be a JSON array"),
        (
            [
                Message(role="assistant", tool_calls=[ToolCall("c1", "gate", "{}")]),
                Message(role="system", parts=[Part("image", url="https://x/a.png")]),
            ],
            "history message 1: parts are only supported on user, tool and assistant messages",
        ),
    ],
)
async def test_a_history_that_does_not_load_or_validate_is_a_resume_error(
    history: Any, says: str
) -> None:
    # "Resume validation failures raise golem.ResumeError (a ValueError)" — the loader's and
    # the validator's refusals included, with their messages
    gate = Gate()
    model = ScriptedModel("never")
    agent = Agent(model, tools=[Tool("gate", "g", OBJ, gate.exec)])
    results = DeferredResults(approvals={"c1": True})
    with pytest.raises(ResumeError, match=says) as info:
        await agent.run_with_deferred_results(history, results)
    assert isinstance(info.value, ValueError)
    with pytest.raises(ResumeError, match=says):
        async with agent.run_stream_with_deferred_results(history, results) as stream:
            async for _ in stream:
                pass
    assert gate.effects == []
    assert model.requests == []
