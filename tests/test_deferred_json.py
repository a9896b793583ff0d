"""A paused history is ordinary Go-compatible history JSON (issue 3, "History and trust";
reference §2.7 and §3.2).

`fixtures/go_paused_history.json` is a paused history byte-for-byte as the Go golem writes it
(`json.Marshal` of `Result.Messages`: compact, camelCase keys in struct order, empty fields
omitted, args embedded as JSON values, the run's unstamped system message first). It must load
and resume here; and a history paused here must dump to exactly that shape so Go can resume it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from golem import (
    Agent,
    Approval,
    DeferredResults,
    Message,
    RunContext,
    ThinkingBlock,
    Tool,
    ToolCall,
    dumps_history,
    loads_history,
    sanitize_history,
)
from golem.model import ModelResponse
from golem.testing import ScriptedModel
from golem.tool import DeferKind, Deferred, call_approved
from tests.support.histories import CALL_KEYS, MESSAGE_KEYS, PART_KEYS, THINKING_KEYS

FIXTURE = Path(__file__).parent / "fixtures" / "go_paused_history.json"
RUN = "01912f4e-8b2a-7c41-9d3e-2f6a5b8c7d10"
CONV = "01912f4e-8b29-7a10-8c2d-1e5f4a3b2c01"
INTERRUPTED = (
    "Tool call was interrupted before execution; no result was produced. "
    "Call the tool again if you need its result."
)
OBJ = {"type": "object"}


def go_text() -> str:
    return FIXTURE.read_text(encoding="utf-8")


def assert_go_shape(text: str, *, compact: bool = True) -> None:
    """Every object uses only Go's keys, in Go's struct order, with no empty values.

    `compact=False` for a history whose args hold whitespace: golem keeps args byte for byte
    (docs/adr/0015); only Go compacts them, when it writes.
    """

    def in_order(obj: dict[str, Any], allowed: list[str]) -> None:
        keys = list(obj)
        assert set(keys) <= set(allowed), f"unexpected keys {set(keys) - set(allowed)}"
        assert keys == [k for k in allowed if k in obj], f"key order {keys}"

    data = json.loads(text)
    assert isinstance(data, list)
    for m in data:
        in_order(m, MESSAGE_KEYS)
        for key in ("content", "toolCallId", "toolName", "runId", "conversationId"):
            if key in m:
                assert isinstance(m[key], str), key
                assert m[key] != "", key
        for key in ("parts", "toolCalls", "thinking"):
            if key in m:
                assert isinstance(m[key], list), key
                assert m[key], key
        if "failed" in m:
            assert m["failed"] is True
        for c in m.get("toolCalls", []):
            in_order(c, CALL_KEYS)
            assert not isinstance(c["args"], str), "args must be embedded as a JSON value"
        for p in m.get("parts", []):
            in_order(p, PART_KEYS)
        for t in m.get("thinking", []):
            in_order(t, THINKING_KEYS)
    if compact:
        assert text == json.dumps(data, ensure_ascii=False, separators=(",", ":")), "not compact"


class DeleteTool:
    """A fresh `delete_file` tool (as a new process would register it)."""

    def __init__(self) -> None:
        self.deleted: list[str] = []
        self.passes: list[bool] = []

    def exec(self, ctx: RunContext[Any], args: dict[str, Any]) -> str:
        self.passes.append(call_approved())
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, "deletes need sign-off")
        self.deleted.append(args["path"])
        return f"deleted {args['path']}"

    def tool(self) -> Tool:
        return Tool("delete_file", "Delete a file", OBJ, self.exec)


def stat_tool() -> Tool:
    return Tool("stat_file", "Stat a file", OBJ, lambda ctx, args: "size=12")


# --------------------------------------------------------------------------- the Go fixture


def test_go_fixture_is_in_go_shape() -> None:
    assert_go_shape(go_text())


def test_go_paused_history_loads() -> None:
    history = loads_history(go_text())
    assert [m.role for m in history] == ["system", "user", "assistant", "tool"]
    a = history[2]
    assert a.tool_calls == [
        ToolCall("call-1", "delete_file", '{"path":"a"}'),
        ToolCall("call-2", "stat_file", "{}"),
    ]
    assert a.thinking == [
        ThinkingBlock(text="a is stale; b needs a size check.", signature="EqQBCkYIBhgCIkDsig")
    ]
    assert (a.run_id, a.conversation_id) == (RUN, CONV)
    t = history[3]
    assert (t.tool_call_id, t.tool_name, t.content) == ("call-2", "stat_file", "size=12")
    assert (history[0].run_id, history[0].conversation_id) == ("", "")


def test_go_paused_history_reencodes_byte_identically() -> None:
    assert dumps_history(loads_history(go_text())) == go_text()


async def test_go_paused_history_resumes_here_with_an_approval() -> None:
    delete = DeleteTool()
    model = ScriptedModel("Deleted a; b is 12 bytes.")
    agent: Agent[Any, str] = Agent(model, tools=[delete.tool(), stat_tool()])
    result = await agent.run_with_deferred_results(
        loads_history(go_text()), DeferredResults(approvals={"call-1": Approval(True)})
    )
    assert result.output == "Deleted a; b is 12 bytes."
    assert delete.deleted == ["a"]
    assert delete.passes == [True]
    assert result.conversation_id == CONV
    assert result.run_id not in ("", RUN)
    request = model.requests[0].messages
    assert [(m.role, m.tool_call_id, m.content) for m in request] == [
        ("user", "", "clean up the workspace"),
        ("assistant", "", "I will delete the stale file and check the other one."),
        ("tool", "call-1", "deleted a"),
        ("tool", "call-2", "size=12"),
    ]
    assert request[1].thinking == loads_history(go_text())[2].thinking
    assert (request[2].run_id, request[2].conversation_id) == (result.run_id, CONV)
    assert (request[3].run_id, request[3].conversation_id) == (RUN, CONV)
    assert_go_shape(dumps_history(result.messages))


async def test_go_paused_history_resumes_from_the_raw_json_text_with_a_denial() -> None:
    model = ScriptedModel("Understood, nothing deleted.")
    agent: Agent[Any, str] = Agent(model)  # denials need no registered tool
    result = await agent.run_with_deferred_results(
        go_text(), DeferredResults(approvals={"call-1": Approval(False, "keep a")})
    )
    assert result.output == "Understood, nothing deleted."
    assert model.requests[0].messages[2].content == (
        "Your tool call was denied: keep a. Do not call it again; continue without its result."
    )


async def test_go_paused_history_resumes_with_an_external_result() -> None:
    model = ScriptedModel("ok")
    agent: Agent[Any, str] = Agent(model)
    await agent.run_with_deferred_results(
        loads_history(go_text()), DeferredResults(external={"call-1": "deleted by the operator"})
    )
    assert model.requests[0].messages[2].content == "deleted by the operator"


async def test_go_paused_history_names_its_single_pending_call() -> None:
    """call-2 is answered in the Go fixture: an approval for it is skipped, never run (ADR
    0071; this test pinned Go's "approval for unknown tool call" before); an approval for a
    call the history does not have is still refused."""
    model = ScriptedModel("ok")
    delete = DeleteTool()
    agent: Agent[Any, str] = Agent(model, tools=[delete.tool(), stat_tool()])
    with pytest.raises(ValueError, match="call-9"):
        await agent.run_with_deferred_results(
            loads_history(go_text()),
            DeferredResults(approvals={"call-1": Approval(True), "call-9": Approval(True)}),
        )
    assert model.requests == []
    done = await agent.run_with_deferred_results(
        loads_history(go_text()),
        DeferredResults(approvals={"call-1": Approval(True), "call-2": Approval(True)}),
    )
    assert done.output == "ok"
    assert delete.deleted == ["a"]
    sent = model.requests[0].messages
    assert [(m.tool_call_id, m.content) for m in sent if m.role == "tool"] == [
        ("call-1", "deleted a"),
        ("call-2", "size=12"),
    ]


async def test_go_paused_history_fed_to_a_plain_run_closes_the_pending_call() -> None:
    model = ScriptedModel("ok")
    agent: Agent[Any, str] = Agent(model)
    await agent.run("status?", history=loads_history(go_text()))
    request = model.requests[0].messages
    assert [(m.role, m.tool_call_id, m.content) for m in request][2:] == [
        ("tool", "call-1", INTERRUPTED),
        ("tool", "call-2", "size=12"),
        ("user", "", "status?"),
    ]


def test_sanitizing_the_go_paused_history_reports_the_pending_call() -> None:
    clean, report = sanitize_history(loads_history(go_text()))
    assert report.system_prompts == 1
    assert report.repair.synthesized == ["call-1"]
    assert clean[0].role == "user"


# --------------------------------------------------------------------------- paused here, read by Go


async def _pause_here(**agent_kw: Any) -> tuple[list[Message], Any]:
    model = ScriptedModel(
        ModelResponse(
            Message(
                role="assistant",
                tool_calls=[
                    ToolCall("call-1", "delete_file", '{ "path" : "a" }'),
                    ToolCall("call-2", "stat_file", "{}"),
                ],
            ),
            finish_reason="tool_call",
        )
    )
    agent: Agent[Any, str] = Agent(model, tools=[DeleteTool().tool(), stat_tool()], **agent_kw)
    result = await agent.run("clean up", run_id="R1", conversation_id="C1")
    assert result.pending is not None
    return result.messages, result


async def test_history_paused_here_dumps_to_exactly_the_go_shape() -> None:
    messages, _ = await _pause_here()
    text = dumps_history(messages)
    # The model's args bytes are embedded as they are (Go's json.Marshal would compact
    # them to {"path":"a"}; Go's json.Unmarshal reads either into its RawMessage).
    assert text == (
        '[{"role":"user","content":"clean up","runId":"R1","conversationId":"C1"},'
        '{"role":"assistant","toolCalls":['
        '{"id":"call-1","name":"delete_file","args":{ "path" : "a" }},'
        '{"id":"call-2","name":"stat_file","args":{}}],'
        '"runId":"R1","conversationId":"C1"},'
        '{"role":"tool","content":"size=12","toolCallId":"call-2","toolName":"stat_file",'
        '"runId":"R1","conversationId":"C1"}]'
    )
    assert_go_shape(text, compact=False)
    assert loads_history(text)[1].tool_calls[0].args == '{ "path" : "a" }'


async def test_history_paused_here_stores_nothing_extra() -> None:
    messages, result = await _pause_here(instructions="be careful")
    text = dumps_history(messages)
    assert_go_shape(text, compact=False)
    assert "deletes need sign-off" not in text  # the reason lives only on result.pending
    assert "approval" not in text
    first = json.loads(text)[0]
    assert (first["role"], first["content"]) == ("system", "be careful")
    assert result.pending.approvals[0].reason == "deletes need sign-off"


async def test_history_paused_here_round_trips_to_a_fixed_point() -> None:
    messages, _ = await _pause_here()
    text = dumps_history(messages)
    assert dumps_history(loads_history(text)) == text


async def test_paused_here_resumes_after_the_json_trip_like_the_go_fixture() -> None:
    messages, _ = await _pause_here()
    delete = DeleteTool()
    model = ScriptedModel("done")
    agent: Agent[Any, str] = Agent(model, tools=[delete.tool()])
    result = await agent.run_with_deferred_results(
        loads_history(dumps_history(messages)),
        DeferredResults(approvals={"call-1": Approval(True)}),
    )
    assert result.output == "done"
    assert delete.deleted == ["a"]
    assert [(m.role, m.tool_call_id) for m in model.requests[0].messages] == [
        ("user", ""),
        ("assistant", ""),
        ("tool", "call-1"),
        ("tool", "call-2"),
    ]
    assert_go_shape(dumps_history(result.messages), compact=False)


async def test_paused_history_with_failed_records_and_parts_keeps_the_go_shape() -> None:
    from golem import Part, ToolResult
    from golem.tool import Failed

    def failing(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        raise Failed("disk full")

    shot = Part(kind="image", url="https://example.com/a.png")
    inline = Part(kind="document", data=b"%PDF-1.7", media_type="application/pdf")
    model = ScriptedModel(
        ModelResponse(
            Message(
                role="assistant",
                tool_calls=[
                    ToolCall("c1", "write", "{}"),
                    ToolCall("c2", "delete_file", '{"path":"a"}'),
                    ToolCall("c3", "shot", "{}"),
                ],
            ),
            finish_reason="tool_call",
        )
    )
    agent: Agent[Any, str] = Agent(
        model,
        tools=[
            Tool("write", "w", OBJ, failing),
            DeleteTool().tool(),
            Tool("shot", "s", OBJ, lambda ctx, args: ToolResult("see", [shot, inline])),
        ],
    )
    paused = await agent.run("go", run_id="R1", conversation_id="C1")
    text = dumps_history(paused.messages)
    assert_go_shape(text)
    data = json.loads(text)
    assert data[2] == {
        "role": "tool",
        "content": "disk full",
        "toolCallId": "c1",
        "toolName": "write",
        "failed": True,
        "runId": "R1",
        "conversationId": "C1",
    }
    assert data[3]["parts"] == [
        {"kind": "image", "url": "https://example.com/a.png"},
        {"kind": "document", "data": "JVBERi0xLjc=", "mediaType": "application/pdf"},
    ]
    assert loads_history(text) == paused.messages
