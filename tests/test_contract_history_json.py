"""Histories written by the Go golem load and resume here, and what golem writes Go reads back
(issue 3; Go reference §2.7, §3.1, §3.2; ADR 0015, 0047).

Documents are built as Go's `encoding/json` writes a `[]model.Message` (`tests.support.gojson`):
keys in struct order, empty fields omitted, `<>&` U+2028/9 escaped, bytes as base64, each
call's `args` a `json.RawMessage` (any bytes, `null` when absent; Go ignores unknown keys).
`fixtures/go_paused_history.json` is a paused history byte for byte as Go writes it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from golem import (
    Agent,
    Approval,
    DeferredResults,
    Message,
    Part,
    RunContext,
    ThinkingBlock,
    Tool,
    ToolCall,
    ToolResult,
    dumps_history,
    loads_history,
    sanitize_history,
)
from golem.history import INTERRUPTED_TEXT
from golem.testing import ScriptedModel
from golem.tool import DeferKind, Deferred, Failed, call_approved
from tests.support.gojson import go_history, go_read, json_texts, literals_decoded, raw_args
from tests.support.histories import CALL_KEYS, MESSAGE_KEYS, PART_KEYS, THINKING_KEYS
from tests.support.ledger import turn

PROPERTY = settings(deadline=None)
GO_TEXT = (Path(__file__).parent / "fixtures" / "go_paused_history.json").read_text("utf-8")
RUN = "01912f4e-8b2a-7c41-9d3e-2f6a5b8c7d10"
CONV = "01912f4e-8b29-7a10-8c2d-1e5f4a3b2c01"
OBJ = {"type": "object"}


def doc(args_json: str) -> str:
    return '[{"role":"assistant","toolCalls":[{"id":"c","name":"n","args":' + args_json + "}]}]"


def assert_go_shape(text: str, *, compact: bool = True) -> None:
    """Only Go's keys, in Go's struct order, no empty values; compact unless args hold
    whitespace (golem keeps args byte for byte; only Go compacts them)."""

    def in_order(obj: dict[str, Any], allowed: list[str]) -> None:
        assert list(obj) == [k for k in allowed if k in obj], f"keys {list(obj)}"

    data = json.loads(text)
    for m in data:
        in_order(m, MESSAGE_KEYS)
        assert all(m[k] not in ("", [], False, None) for k in m), m
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

    def exec(self, ctx: RunContext[Any], args: dict[str, Any]) -> str:
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, "deletes need sign-off")
        self.deleted.append(args["path"])
        return f"deleted {args['path']}"

    def tools(self) -> list[Tool]:
        stat = Tool("stat_file", "Stat a file", OBJ, lambda ctx, args: "size=12")
        return [Tool("delete_file", "Delete a file", OBJ, self.exec), stat]


# --------------------------------------------------------------------------- properties


@PROPERTY
@given(go_history())
def test_a_go_written_history_loads_as_go_holds_it_and_go_reads_ours_back_the_same(
    case: tuple[str, list[Message]],
) -> None:
    document, expected = case
    assert loads_history(document) == loads_history(document.encode()) == expected
    ours = dumps_history(expected)
    assert go_read(ours) == go_read(document)
    # args keep Go's bytes; a string literal golem reads as its content (ADR 0015) comes
    # back as the same string, escaped golem's way
    assert literals_decoded(raw_args(ours)) == literals_decoded(raw_args(document))
    assert dumps_history(loads_history(ours)) == ours


@st.composite
def any_args_documents(draw: st.DrawFn) -> str:
    """Args of any JSON value in any spelling (another writer, a hand edit), or as a string."""
    value = draw(json_texts())
    if draw(st.booleans()):
        value = draw(st.sampled_from(["", " ", "\n\t "])) + value
    if draw(st.booleans()):
        value = json.dumps(value)
    space = draw(st.sampled_from(["", " ", "\n"]))
    return (
        f'[{{"role":"assistant",{space}"toolCalls":[{{"id":"c","name":"n",'
        f'"args":{space}{value}{space}}}]}}]'
    )


@PROPERTY
@given(any_args_documents())
def test_any_document_that_loads_reaches_a_fixed_point_in_one_dump(document: str) -> None:
    loaded = loads_history(document)
    first = dumps_history(loaded)
    assert loads_history(first) == loaded
    assert dumps_history(loads_history(first)) == first


# --------------------------------------------------------------------------- args, byte for byte

OLD = json.dumps  # before ADR 0047 golem wrote such args as a JSON string of their text


@pytest.mark.parametrize(
    ("in_file", "loaded", "written"),
    [
        ('{"path":"a"}', '{"path":"a"}', None),
        ('{ "path" : "a" }', '{ "path" : "a" }', None),  # Go keeps what it reads, whitespace too
        ('{"html":"\\u003cb\\u003e"}', '{"html":"\\u003cb\\u003e"}', None),  # Go's escapes
        ("1e400", "1e400", None),
        ('"{\\"a\\":1}"', '"{\\"a\\":1}"', None),  # a RawMessage holding a literal of JSON
        ('"[1,2]"', '"[1,2]"', None),
        ('{"name":"Zoë","emoji":"😀"}', '{"name":"Zoë","emoji":"😀"}', None),
        ('{"a":"\\ud800"}', '{"a":"\\ud800"}', None),
        ('{"a":"x\\udfffy","b":["\\uDBFF"]}', '{"a":"x\\udfffy","b":["\\uDBFF"]}', None),
        ('["\\udc00\\ud800"]', '["\\udc00\\ud800"]', None),  # low then high: not a pair
        ('{"a":"\\\\ud800"}', '{"a":"\\\\ud800"}', None),  # an escaped backslash, then text
        ('{"a":"\\\\\\ud800"}', '{"a":"\\\\\\ud800"}', None),
        ('{"\\ud800":1}', '{"\\ud800":1}', None),  # in a key
        (OLD('{"a":"\\ud800"}'), '{"a":"\\ud800"}', '{"a":"\\ud800"}'),
        ('"\\ud800"', '"\\ud800"', None),  # a literal whose content is not text stays one
        (OLD('"\\ud800"'), '"\\ud800"', '"\\ud800"'),
        ('""', '""', None),  # Go's `""` is not absent args (a string vs no value)
        ("null", "", None),
        (OLD('""'), '""', '""'),
    ],
)
def test_args_go_holds_load_byte_exact_and_are_written_embedded(
    in_file: str, loaded: str, written: str | None
) -> None:
    history = loads_history(doc(in_file))
    assert loads_history(doc(in_file).encode()) == history
    assert history[0].tool_calls[0].args == loaded
    assert dumps_history(history) == doc(written or in_file)
    assert dumps_history([Message(role="assistant", tool_calls=[ToolCall("c", "n", loaded)])]) == (
        doc(written or in_file)
    )


def test_every_lone_surrogate_spelling_in_one_document_loads() -> None:
    args = '["' + '","'.join(f"\\u{cp:04x}" for cp in range(0xD800, 0xE000)) + '"]'
    assert loads_history(doc(args))[0].tool_calls[0].args == args


def test_private_use_characters_beside_lone_surrogates_are_kept_apart() -> None:
    """The slow path stands private-use characters in for lone surrogates: ones the document
    already holds (raw or escaped, in text or args) are never confused with them."""
    args = '{"a":"\\ud800\\ue000","b":"\\uE001\ue002","c":"\\udfff"}'
    document = '[{"role":"user","content":"\ue000 \\ue001 \\uE002"},' + doc(args)[1:]
    loaded = loads_history(document)
    assert loaded[0].content == "\ue000 \ue001 \ue002"
    assert loaded[1].tool_calls[0].args == args
    assert '"args":' + args in dumps_history(loaded)


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        *(
            ('[{"role":"user","content":"hi","futureKey":' + u + "}]", [Message("user", "hi")])
            for u in ('"\\ud800"', '{"a":["\\udfff"]}', '"\\ud800\\ud800"')
        ),
        (
            '[{"role":"user","content":"x","parts":[{"kind":"image","url":"https://x",'
            '"future":{"a":"\\ud800"},"alt":1e400}]},'
            '{"role":"assistant","toolCalls":[{"id":"c","name":"n","args":{"a":1},'
            '"future":[1,"\\udfff"],"index":123456789012345678901234567890}],'
            '"thinking":[{"text":"t","future":null,"cache":{"x":-0.0}}]}]',
            [
                Message(role="user", content="x", parts=[Part("image", url="https://x")]),
                Message(
                    role="assistant",
                    tool_calls=[ToolCall("c", "n", '{"a":1}')],
                    thinking=[ThinkingBlock(text="t")],
                ),
            ],
        ),
    ],
)
def test_unknown_keys_at_every_level_are_ignored_as_go_ignores_them(
    document: str, expected: list[Message]
) -> None:
    assert loads_history(document) == expected


# --------------------------------------------------------------------------- Go's paused histories

GO_PAUSED = (
    '[{"role":"user","content":"pay \\u003cbob\\u003e","runId":"R1","conversationId":"C1"},'
    '{"role":"assistant","toolCalls":['
    '{"id":"call-1","name":"pay","args":{"to":"bob\\ud800","amount":123456789012345678901234567890,'
    '"fee":1e400,"rebate":-0.0,"memo":"\\ud83d\\ude00 \\u003c3"}},'
    '{"id":"call-2","name":"stat","args":{}}],"runId":"R1","conversationId":"C1",'
    '"futureKey":{"x":"\\udfff"}},'
    '{"role":"tool","content":"size=12","toolCallId":"call-2","toolName":"stat",'
    '"runId":"R1","conversationId":"C1"}]'
)


def test_a_go_paused_history_with_raw_edge_args_resumes_with_the_bytes_go_held() -> None:
    args = loads_history(GO_PAUSED)[1].tool_calls[0].args
    assert args == (
        '{"to":"bob\\ud800","amount":123456789012345678901234567890,'
        '"fee":1e400,"rebate":-0.0,"memo":"\\ud83d\\ude00 \\u003c3"}'
    )
    seen: list[str] = []

    async def pay(ctx: RunContext[Any], raw: dict[str, Any]) -> str:
        if not call_approved():
            raise Deferred("approval", "money")
        seen.append(raw["memo"])
        return "paid"

    model = ScriptedModel("done")
    agent = Agent(model, tools=[Tool("pay", "pay", OBJ, pay)])
    resumed = agent.run_with_deferred_results_sync(
        GO_PAUSED, DeferredResults(approvals={"call-1": True})
    )
    assert (resumed.output, seen, resumed.conversation_id) == ("done", ["😀 <3"], "C1")
    sent = model.requests[0].messages
    assert [m.role for m in sent] == ["user", "assistant", "tool", "tool"]
    assert sent[1].tool_calls[0].args == args  # the model sees the bytes Go held
    text = dumps_history(resumed.messages)
    assert raw_args(text)[1] == [args, "{}"]
    assert dumps_history(loads_history(text)) == text


def test_the_go_fixture_is_in_go_shape_and_loads_and_reencodes_byte_identically() -> None:
    assert_go_shape(GO_TEXT)
    history = loads_history(GO_TEXT)
    assert [m.role for m in history] == ["system", "user", "assistant", "tool"]
    a, t = history[2], history[3]
    assert a.tool_calls == [
        ToolCall("call-1", "delete_file", '{"path":"a"}'),
        ToolCall("call-2", "stat_file", "{}"),
    ]
    assert a.thinking == [
        ThinkingBlock(text="a is stale; b needs a size check.", signature="EqQBCkYIBhgCIkDsig")
    ]
    assert (a.run_id, a.conversation_id, history[0].run_id) == (RUN, CONV, "")
    assert (t.tool_call_id, t.tool_name, t.content) == ("call-2", "stat_file", "size=12")
    assert dumps_history(history) == GO_TEXT


@pytest.mark.parametrize(
    ("results", "answer"),
    [
        ({"approvals": {"call-1": Approval(True)}}, "deleted a"),
        (
            {"approvals": {"call-1": Approval(False, "keep a")}},  # needs no registered tool
            "Your tool call was denied: keep a. Do not call it again; continue without its result.",
        ),
        ({"external": {"call-1": "deleted by the operator"}}, "deleted by the operator"),
    ],
    ids=["approval", "denial", "external"],
)
async def test_the_go_paused_fixture_resumes_here(results: dict[str, Any], answer: str) -> None:
    delete = DeleteTool()
    model = ScriptedModel("done")
    approving = answer == "deleted a"
    agent: Agent[Any, str] = Agent(model, tools=delete.tools() if approving else [])
    result = await agent.run_with_deferred_results(
        GO_TEXT if approving else loads_history(GO_TEXT), DeferredResults(**results)
    )
    assert (result.output, delete.deleted) == ("done", ["a"] if approving else [])
    assert result.conversation_id == CONV
    assert result.run_id not in ("", RUN)
    request = model.requests[0].messages
    assert [(m.role, m.tool_call_id, m.content) for m in request] == [
        ("user", "", "clean up the workspace"),
        ("assistant", "", "I will delete the stale file and check the other one."),
        ("tool", "call-1", answer),
        ("tool", "call-2", "size=12"),
    ]
    assert request[1].thinking == loads_history(GO_TEXT)[2].thinking
    assert (request[2].run_id, request[2].conversation_id) == (result.run_id, CONV)
    assert (request[3].run_id, request[3].conversation_id) == (RUN, CONV)
    assert_go_shape(dumps_history(result.messages))


async def test_the_go_paused_fixture_names_its_single_pending_call() -> None:
    """call-2 is answered: an approval for it is skipped, never run (ADR 0071); one for a call
    the history does not have is refused before anything runs."""
    model = ScriptedModel("ok")
    delete = DeleteTool()
    agent: Agent[Any, str] = Agent(model, tools=delete.tools())
    with pytest.raises(ValueError, match="call-9"):
        await agent.run_with_deferred_results(
            GO_TEXT, DeferredResults(approvals={"call-1": True, "call-9": True})
        )
    assert model.requests == []
    done = await agent.run_with_deferred_results(
        GO_TEXT, DeferredResults(approvals={"call-1": True, "call-2": True})
    )
    assert (done.output, delete.deleted) == ("ok", ["a"])
    sent = model.requests[0].messages
    assert [(m.tool_call_id, m.content) for m in sent if m.role == "tool"] == [
        ("call-1", "deleted a"),
        ("call-2", "size=12"),
    ]


async def test_the_go_paused_fixture_fed_to_a_plain_run_or_sanitized_closes_the_pending_call() -> (
    None
):
    model = ScriptedModel("ok")
    await Agent(model).run("status?", history=loads_history(GO_TEXT))
    assert [(m.role, m.tool_call_id, m.content) for m in model.requests[0].messages][2:] == [
        ("tool", "call-1", INTERRUPTED_TEXT),
        ("tool", "call-2", "size=12"),
        ("user", "", "status?"),
    ]
    clean, report = sanitize_history(loads_history(GO_TEXT))
    assert (report.system_prompts, report.repair.synthesized) == (1, ["call-1"])
    assert clean[0].role == "user"


# --------------------------------------------------------------------------- paused here, read by Go


async def test_a_history_paused_here_is_go_shaped_stores_nothing_extra_and_resumes_after_json() -> (
    None
):
    model = ScriptedModel(
        turn(
            ToolCall("call-1", "delete_file", '{ "path" : "a" }'),
            ToolCall("call-2", "stat_file", "{}"),
        )
    )
    agent: Agent[Any, str] = Agent(model, tools=DeleteTool().tools(), instructions="be careful")
    paused = await agent.run("clean up", run_id="R1", conversation_id="C1")
    assert paused.pending is not None
    assert paused.pending.approvals[0].reason == "deletes need sign-off"
    text = dumps_history(paused.messages)
    # the model's args bytes are embedded as they are (Go would compact them when it writes);
    # the reason and the kind live only on result.pending
    assert text == (
        '[{"role":"system","content":"be careful"},'
        '{"role":"user","content":"clean up","runId":"R1","conversationId":"C1"},'
        '{"role":"assistant","toolCalls":['
        '{"id":"call-1","name":"delete_file","args":{ "path" : "a" }},'
        '{"id":"call-2","name":"stat_file","args":{}}],'
        '"runId":"R1","conversationId":"C1"},'
        '{"role":"tool","content":"size=12","toolCallId":"call-2","toolName":"stat_file",'
        '"runId":"R1","conversationId":"C1"}]'
    )
    assert_go_shape(text, compact=False)
    assert dumps_history(loads_history(text)) == text
    delete = DeleteTool()
    model = ScriptedModel("done")
    result = await Agent(model, tools=delete.tools()[:1]).run_with_deferred_results(
        loads_history(text), DeferredResults(approvals={"call-1": Approval(True)})
    )
    assert (result.output, delete.deleted) == ("done", ["a"])
    assert [(m.role, m.tool_call_id) for m in model.requests[0].messages] == [
        ("user", ""),
        ("assistant", ""),
        ("tool", "call-1"),
        ("tool", "call-2"),
    ]
    assert_go_shape(dumps_history(result.messages), compact=False)


async def test_a_paused_history_with_failed_records_and_parts_keeps_the_go_shape() -> None:
    def failing(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        raise Failed("disk full")

    shot = Part(kind="image", url="https://example.com/a.png")
    inline = Part(kind="document", data=b"%PDF-1.7", media_type="application/pdf")
    model = ScriptedModel(
        turn(
            ToolCall("c1", "write", "{}"),
            ToolCall("c2", "delete_file", '{"path":"a"}'),
            ToolCall("c3", "shot", "{}"),
        )
    )
    tools = [
        Tool("write", "w", OBJ, failing),
        DeleteTool().tools()[0],
        Tool("shot", "s", OBJ, lambda ctx, args: ToolResult("see", [shot, inline])),
    ]
    paused = await Agent(model, tools=tools).run("go", run_id="R1", conversation_id="C1")
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
