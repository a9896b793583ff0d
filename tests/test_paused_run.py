"""A paused run is one value: `Result.paused_run` dumps to one JSON document (the
Go-compatible history inside, unchanged) and loads back as a `PausedRun` that
`run_with_deferred_results` takes alone — sealed, `expected`-checked and trace-linked."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from golem import (
    Agent,
    DeferredResults,
    HistoryError,
    Message,
    PausedRun,
    ResumeError,
    RunContext,
    Tool,
    ToolCall,
    dumps_history,
)
from golem.model import ModelResponse
from golem.testing import ScriptedModel
from golem.tool import DeferKind, Deferred, call_approved

KEY = b"k" * 32
OBJ = {"type": "object"}
TRANSFER = ToolCall("c1", "transfer", '{"to": "bob",  "amount": 10}')
LOOKUP = ToolCall("c2", "lookup", '{"q":"rate"}')


def make_agent(ran: list[str], *, resumed: bool = True) -> Agent[None, str]:
    def transfer(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, "needs a decision")
        ran.append(ctx.call_id)
        return "sent"

    def lookup(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        raise Deferred(DeferKind.EXTERNAL, "job-7")

    turn = ModelResponse(
        Message(role="assistant", tool_calls=[TRANSFER, LOOKUP]), finish_reason="tool_call"
    )
    return Agent(
        ScriptedModel("done") if resumed else ScriptedModel(turn),
        tools=[Tool("transfer", "t", OBJ, transfer), Tool("lookup", "l", OBJ, lookup)],
        seal_key=KEY,
    )


RESOLVED = DeferredResults(approvals={"c1": True}, external={"c2": "1.1"})


async def paused() -> PausedRun:
    result = await make_agent([], resumed=False).run("pay bob", conversation_id="conv-9")
    assert result.paused_run is not None
    return result.paused_run


async def test_a_paused_run_round_trips_with_its_history_unchanged() -> None:
    run = await paused()
    text = run.dumps()
    assert PausedRun.loads(text) == run
    doc = json.loads(text)
    assert doc["conversationId"] == "conv-9"
    assert [c["id"] for c in doc["pending"]] == ["c1", "c2"]
    assert text.endswith(',"history":' + dumps_history(run.messages) + "}")
    assert '{"to": "bob",  "amount": 10}' in text  # argument bytes kept exactly


async def test_a_completed_result_has_no_paused_run() -> None:
    ran: list[str] = []
    run = await paused()
    result = await make_agent(ran).run_with_deferred_results(run, RESOLVED)
    assert result.output == "done"
    assert result.paused_run is None


async def test_a_paused_run_whose_pending_calls_were_changed_is_refused() -> None:
    ran: list[str] = []
    doc = json.loads((await paused()).dumps())
    doc["pending"][0]["args"] = '{"to": "mallory", "amount": 10000}'
    with pytest.raises(ResumeError):
        await make_agent(ran).run_with_deferred_results(PausedRun.loads(json.dumps(doc)), RESOLVED)
    assert ran == []


BAD = [
    "",
    "[]",
    "not json",
    '{"pausedRun": 1, "pending": []}',
    '{"pausedRun": 2, "pending": [], "history": []}',
    '{"pausedRun": 1, "pending": [{"id": "c1", "name": "t", "args": "{}", "kind": "maybe"}],'
    ' "history": []}',
    '{"pausedRun": 1, "pending": [{"id": 1}], "history": []}',
    '{"pausedRun": 1, "pending": [], "history": {"role": "user"}}',
    '{"pausedRun": 1, "pending": [], "history": ' + "[" * 20_000 + "]" * 20_000 + "}",
]


@pytest.mark.parametrize("text", BAD)
def test_text_that_is_not_a_paused_run_is_a_history_error(text: str) -> None:
    with pytest.raises(HistoryError):
        PausedRun.loads(text)


@given(st.text(max_size=200))
def test_any_text_loads_or_is_a_history_error(text: str) -> None:
    with contextlib.suppress(HistoryError):
        PausedRun.loads(text)


def test_a_paused_run_with_arguments_nested_as_deep_as_go_writes_them_loads() -> None:
    deep = "[" * 10_000 + "]" * 10_000
    call = ToolCall("c1", "transfer", deep)
    run = PausedRun(
        [Message(role="user", content="x"), Message(role="assistant", tool_calls=[call])],
        PausedRun.loads(
            '{"pausedRun":1,"pending":[{"id":"c1","name":"transfer","args":"[]","kind":"approval"}],'
            '"history":[]}'
        ).pending,
        "conv",
    )
    assert PausedRun.loads(run.dumps()).messages[1].tool_calls[0].args == deep


async def test_a_parent_paused_on_a_sub_agent_resumes_from_its_paused_run_alone() -> None:
    ran: list[str] = []
    sub: Agent[None, str] = Agent(
        ScriptedModel(
            ModelResponse(
                Message(role="assistant", tool_calls=[ToolCall("s1", "transfer", "{}")]),
                finish_reason="tool_call",
            ),
            "paid",
        ),
        name="payer",
        seal_key=KEY,
    )

    @sub.tool
    def transfer(ctx: RunContext[None]) -> str:
        """Move money."""
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, "sign-off")
        ran.append(ctx.call_id)
        return "sent"

    parent: Agent[None, str] = Agent(
        ScriptedModel(
            ModelResponse(
                Message(role="assistant", tool_calls=[ToolCall("p1", "payer", '{"prompt":"pay"}')]),
                finish_reason="tool_call",
            ),
            "all done",
        ),
        tools=[sub.as_tool()],
        seal_key=KEY,
    )
    first = await parent.run("go", conversation_id="conv-n")
    assert first.paused_run is not None
    assert first.paused_run.pending.conversation_id == "conv-n"
    loaded = PausedRun.loads(first.paused_run.dumps())
    done = await parent.run_with_deferred_results(loaded, {"approvals": {"p1/s1": True}})
    assert done.output == "all done"
    assert ran == ["s1"]
