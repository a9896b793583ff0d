"""The message model and its Go-compatible history JSON (dumps_history / loads_history)."""

from __future__ import annotations

import base64
import dataclasses
import json
from typing import Any

import pytest

from golem import dumps_history, loads_history
from golem.messages import Message, Part, ThinkingBlock, ToolCall


def _json(text: str) -> Any:
    return json.loads(text)


# --------------------------------------------------------------------------- data model


def test_message_takes_keyword_fields_with_defaults() -> None:
    m = Message(role="user")
    assert m.content == ""
    assert m.parts == []
    assert m.tool_calls == []
    assert m.tool_call_id == ""
    assert m.tool_name == ""
    assert m.failed is False
    assert m.thinking == []
    assert m.run_id == ""
    assert m.conversation_id == ""


def test_issue_example_message_constructs() -> None:
    m = Message(
        role="assistant",
        tool_calls=[ToolCall(id="call-1", name="delete_file", args='{"path": "a"}')],
    )
    assert m.tool_calls[0].args == '{"path": "a"}'


def test_part_and_thinking_defaults() -> None:
    p = Part("image")
    assert (p.kind, p.url, p.data, p.media_type) == ("image", None, None, None)
    t = ThinkingBlock()
    assert (t.text, t.signature, t.redacted) == ("", "", "")


def test_messages_are_immutable() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        Message(role="user").content = "x"  # type: ignore[misc]


# --------------------------------------------------------------------------- dumps


def test_dumps_uses_go_keys_and_embeds_args_as_json_value() -> None:
    history = [
        Message(role="user", content="clean up", run_id="R1", conversation_id="C1"),
        Message(
            role="assistant",
            tool_calls=[
                ToolCall(id="call-1", name="delete_file", args='{"path": "a"}'),
                ToolCall(id="call-2", name="stat_file", args="{}"),
            ],
            run_id="R1",
            conversation_id="C1",
        ),
        Message(
            role="tool",
            content="size=12",
            tool_call_id="call-2",
            tool_name="stat_file",
            run_id="R1",
            conversation_id="C1",
        ),
    ]
    # The Go reference's persisted paused history (§2.7), compared as JSON values.
    go = (
        '[{"role":"user","content":"clean up","runId":"R1","conversationId":"C1"},'
        '{"role":"assistant","toolCalls":['
        '{"id":"call-1","name":"delete_file","args":{"path":"a"}},'
        '{"id":"call-2","name":"stat_file","args":{}}],'
        '"runId":"R1","conversationId":"C1"},'
        '{"role":"tool","content":"size=12","toolCallId":"call-2","toolName":"stat_file",'
        '"runId":"R1","conversationId":"C1"}]'
    )
    assert _json(dumps_history(history)) == _json(go)


def test_dumps_omits_empty_fields() -> None:
    assert _json(dumps_history([Message(role="user")])) == [{"role": "user"}]


def test_dumps_writes_every_key_when_set() -> None:
    m = Message(
        role="tool",
        content="c",
        parts=[Part("image", url="https://x/y.png")],
        tool_call_id="call-1",
        tool_name="t",
        failed=True,
        run_id="r",
        conversation_id="c",
    )
    obj = _json(dumps_history([m]))[0]
    assert set(obj) == {
        "role",
        "content",
        "parts",
        "toolCallId",
        "toolName",
        "failed",
        "runId",
        "conversationId",
    }
    assert obj["failed"] is True
    assert obj["parts"] == [{"kind": "image", "url": "https://x/y.png"}]


def test_dumps_tool_calls_and_thinking_keys() -> None:
    m = Message(
        role="assistant",
        content="ok",
        tool_calls=[ToolCall(id="c1", name="n", args='{"a": [1, 2]}')],
        thinking=[ThinkingBlock(text="hmm", signature="sig"), ThinkingBlock(redacted="xx")],
    )
    obj = _json(dumps_history([m]))[0]
    assert obj["toolCalls"] == [{"id": "c1", "name": "n", "args": {"a": [1, 2]}}]
    assert obj["thinking"] == [{"text": "hmm", "signature": "sig"}, {"redacted": "xx"}]


def test_args_are_embedded_as_a_value_not_a_string() -> None:
    text = dumps_history(
        [Message(role="assistant", tool_calls=[ToolCall("c1", "n", '{"path": "a"}')])]
    )
    assert '"args":{' in text.replace(" ", "")
    assert _json(text)[0]["toolCalls"][0]["args"] == {"path": "a"}


def test_part_data_is_standard_padded_base64() -> None:
    raw = b"\x00\xff\xfe png bytes?"
    m = Message(role="user", parts=[Part("image", data=raw, media_type="image/png")])
    obj = _json(dumps_history([m]))[0]
    assert obj["parts"] == [
        {"kind": "image", "data": base64.b64encode(raw).decode(), "mediaType": "image/png"}
    ]


def test_dumps_is_compact_json_array() -> None:
    text = dumps_history([Message(role="user", content="hi")])
    assert text.startswith("[")
    assert "\n" not in text


def test_dumps_of_empty_history_is_an_empty_array() -> None:
    assert _json(dumps_history([])) == []


# --------------------------------------------------------------------------- loads


def test_round_trip_keeps_every_field() -> None:
    history = [
        Message(role="system", content="be brief"),
        Message(
            role="user",
            content="look ü 🚀 <b>&",
            parts=[
                Part("image", data=b"\x89PNG", media_type="image/png"),
                Part("document", url="https://example.com/a.pdf"),
            ],
            run_id="r1",
            conversation_id="c1",
        ),
        Message(
            role="assistant",
            content="calling",
            tool_calls=[ToolCall("call-1", "f", '{"x":1}', signature="gsig")],
            thinking=[ThinkingBlock(text="t", signature="s"), ThinkingBlock(redacted="r")],
            run_id="r1",
            conversation_id="c1",
        ),
        Message(
            role="tool",
            content="broke",
            tool_call_id="call-1",
            tool_name="f",
            failed=True,
            run_id="r1",
            conversation_id="c1",
        ),
    ]
    assert loads_history(dumps_history(history)) == history


def test_loads_accepts_bytes() -> None:
    assert loads_history(b'[{"role":"user","content":"hi"}]') == [
        Message(role="user", content="hi")
    ]


def test_loaded_args_are_the_json_text_as_written() -> None:
    loaded = loads_history(
        '[{"role":"assistant","toolCalls":[{"id":"c","name":"n","args":{"a": 1, "b": [true, null]}}]}]'
    )
    assert loaded[0].tool_calls[0].args == '{"a": 1, "b": [true, null]}'  # byte for byte


def test_loads_ignores_unknown_keys_everywhere() -> None:
    text = json.dumps(
        [
            {
                "role": "assistant",
                "content": "x",
                "futureField": {"nested": [1]},
                "toolCalls": [{"id": "c", "name": "n", "args": {}, "extra": 1}],
                "thinking": [{"text": "t", "mystery": True}],
            },
            {"role": "user", "parts": [{"kind": "image", "url": "https://a/b", "zzz": 2}]},
        ]
    )
    loaded = loads_history(text)
    assert loaded[0] == Message(
        role="assistant",
        content="x",
        tool_calls=[ToolCall("c", "n", "{}")],
        thinking=[ThinkingBlock(text="t")],
    )
    assert loaded[1] == Message(role="user", parts=[Part("image", url="https://a/b")])


def test_loads_missing_keys_take_defaults() -> None:
    assert loads_history('[{"role":"tool"}]') == [Message(role="tool")]


def test_loads_explicit_nulls_take_defaults() -> None:
    loaded = loads_history(
        '[{"role":"user","content":null,"parts":null,"toolCalls":null,"failed":null}]'
    )
    assert loaded == [Message(role="user")]


def test_loads_empty_array() -> None:
    assert loads_history("[]") == []


@pytest.mark.parametrize(
    "text",
    [
        "",
        "[",
        "[{]",
        '[{"role":"user"},]',
        "not json",
        '[{"role":"user","content":"unterminated}]',
    ],
)
def test_malformed_json_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        loads_history(text)


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_non_json_number_literals_are_malformed(literal: str) -> None:
    with pytest.raises(ValueError):
        loads_history(
            '[{"role":"assistant","toolCalls":[{"id":"c","name":"n","args":{"x":'
            + literal
            + "}}]}]"
        )


@pytest.mark.parametrize("text", ['{"role":"user"}', '"history"', "42", '{"messages":[]}', "true"])
def test_top_level_must_be_an_array(text: str) -> None:
    with pytest.raises(ValueError):
        loads_history(text)


GOOD = {"role": "user", "content": "fine"}


@pytest.mark.parametrize(
    "bad",
    [
        "just a string",
        42,
        None,
        [GOOD],
        {"content": "no role"},
        {"role": "robot"},
        {"role": 1},
        {"role": "user", "content": 5},
        {"role": "user", "content": ["a"]},
        {"role": "user", "parts": "image"},
        {"role": "user", "parts": ["image"]},
        {"role": "user", "parts": [{"kind": 3}]},
        {"role": "user", "parts": [{"kind": "image", "data": "***not base64***"}]},
        {"role": "assistant", "toolCalls": {"id": "c"}},
        {"role": "assistant", "toolCalls": ["c"]},
        {"role": "assistant", "toolCalls": [{"id": 7, "name": "n", "args": {}}]},
        {"role": "assistant", "toolCalls": [{"id": "c", "name": ["n"], "args": {}}]},
        {"role": "tool", "toolCallId": 1},
        {"role": "tool", "toolName": False},
        {"role": "tool", "failed": "yes"},
        {"role": "tool", "failed": 1},
        {"role": "assistant", "thinking": "deep"},
        {"role": "assistant", "thinking": [{"text": 1}]},
        {"role": "user", "runId": 12},
        {"role": "user", "conversationId": {}},
    ],
)
def test_wrong_shape_is_a_value_error_naming_the_message_index(bad: Any) -> None:
    text = json.dumps([GOOD, GOOD, bad, GOOD])
    with pytest.raises(ValueError, match=r"\b2\b"):
        loads_history(text)


def test_wrong_shape_error_names_index_zero() -> None:
    with pytest.raises(ValueError, match=r"\b0\b"):
        loads_history('[{"role":"user","content":1}]')


def test_wrong_shape_error_does_not_name_an_earlier_index() -> None:
    text = json.dumps([GOOD] * 11 + [{"role": "user", "content": 1}])
    with pytest.raises(ValueError, match=r"\b11\b") as info:
        loads_history(text)
    assert "message 10" not in str(info.value)


# --------------------------------------------------------------------------- Go-written sample

# Written the way Go's encoding/json writes a []model.Message: struct field order, compact,
# `<`, `>` and `&` escaped as \u003c \u003e \u0026, []byte as padded base64, RawMessage args
# compacted, null args for a call without arguments.
GO_SAMPLE = (
    '[{"role":"system","content":"You are terse \\u0026 careful."},'
    '{"role":"user","content":"What is in \\u003cthis\\u003e image?","parts":['
    '{"kind":"image","data":"iVBORw0KGgo=","mediaType":"image/png"},'
    '{"kind":"document","url":"https://example.com/spec.pdf"}],'
    '"runId":"0190a6f2-7c4e-7b1a-9f00-000000000001",'
    '"conversationId":"0190a6f2-7c4e-7b1a-9f00-0000000000c1"},'
    '{"role":"assistant","content":"Let me check.","toolCalls":['
    '{"id":"call-1","name":"describe","args":{"detail":"high","tags":["a","b"],"n":2.5}},'
    '{"id":"call-2","name":"ping","args":null,"signature":"c2ln"}],'
    '"thinking":[{"text":"look closer","signature":"EqQB"},{"redacted":"opaque=="}],'
    '"runId":"0190a6f2-7c4e-7b1a-9f00-000000000001",'
    '"conversationId":"0190a6f2-7c4e-7b1a-9f00-0000000000c1"},'
    '{"role":"tool","content":"a cat","toolCallId":"call-1","toolName":"describe",'
    '"runId":"0190a6f2-7c4e-7b1a-9f00-000000000001",'
    '"conversationId":"0190a6f2-7c4e-7b1a-9f00-0000000000c1"},'
    '{"role":"tool","content":"unreachable","toolCallId":"call-2","toolName":"ping",'
    '"failed":true,"runId":"0190a6f2-7c4e-7b1a-9f00-000000000001",'
    '"conversationId":"0190a6f2-7c4e-7b1a-9f00-0000000000c1"},'
    '{"role":"assistant","content":"A cat.",'
    '"runId":"0190a6f2-7c4e-7b1a-9f00-000000000001",'
    '"conversationId":"0190a6f2-7c4e-7b1a-9f00-0000000000c1"}]'
)


def test_go_written_history_loads() -> None:
    loaded = loads_history(GO_SAMPLE)
    run, conv = "0190a6f2-7c4e-7b1a-9f00-000000000001", "0190a6f2-7c4e-7b1a-9f00-0000000000c1"
    assert [m.role for m in loaded] == ["system", "user", "assistant", "tool", "tool", "assistant"]
    assert loaded[0].content == "You are terse & careful."
    assert loaded[1].content == "What is in <this> image?"
    assert loaded[1].parts == [
        Part("image", data=base64.b64decode("iVBORw0KGgo="), media_type="image/png"),
        Part("document", url="https://example.com/spec.pdf"),
    ]
    asst = loaded[2]
    assert [c.id for c in asst.tool_calls] == ["call-1", "call-2"]
    assert json.loads(asst.tool_calls[0].args) == {"detail": "high", "tags": ["a", "b"], "n": 2.5}
    assert asst.tool_calls[1].args == ""
    assert asst.tool_calls[1].signature == "c2ln"
    assert asst.thinking == [
        ThinkingBlock(text="look closer", signature="EqQB"),
        ThinkingBlock(redacted="opaque=="),
    ]
    assert loaded[4].failed is True
    assert loaded[4].tool_call_id == "call-2"
    assert all(m.run_id == run and m.conversation_id == conv for m in loaded[1:])
    assert loaded[0].run_id == ""


def test_go_written_history_redumps_to_the_same_json_value() -> None:
    again = dumps_history(loads_history(GO_SAMPLE))
    assert _json(again) == _json(GO_SAMPLE)
    assert dumps_history(loads_history(again)) == again


# --------------------------------------------------------------------------- fixed point
# The Hypothesis properties (round trip and fixed point for any history, any args) live in
# tests/test_history_json_args.py.


@pytest.mark.parametrize("args", ['""', '"1"', '"{}"', '"null"'])
def test_args_that_are_a_json_string_keep_the_fixed_point(args: str) -> None:
    first = dumps_history([Message(role="assistant", tool_calls=[ToolCall("c", "n", args)])])
    assert dumps_history(loads_history(first)) == first


def test_truncated_args_survive_a_round_trip_byte_exact() -> None:
    for args in ['{"sides":', '{"a": 1, "b": [', "oops", "{"]:
        history = [Message(role="assistant", tool_calls=[ToolCall("c", "n", args)])]
        assert loads_history(dumps_history(history))[0].tool_calls[0].args == args


# --------------------------------------------------------------------------- the loop's builders


def test_new_message_equals_the_dataclass_constructor() -> None:
    from golem.messages import new_message

    call = ToolCall("c1", "f", "{}")
    built = new_message("tool", "text", [Part("text", text="x")], [call], "c1", "f", True, "r", "v")
    assert built == Message(
        role="tool",
        content="text",
        parts=[Part("text", text="x")],
        tool_calls=[call],
        tool_call_id="c1",
        tool_name="f",
        failed=True,
        run_id="r",
        conversation_id="v",
    )
    assert type(built) is Message
    plain = new_message("user")
    assert plain == Message(role="user")
    # fresh default lists, never shared between messages
    assert plain.thinking is not new_message("user").thinking
    with pytest.raises(dataclasses.FrozenInstanceError):
        plain.content = "x"  # type: ignore[misc]


def test_stamped_equals_replace() -> None:
    from golem.messages import stamped

    m = Message(
        role="user",
        content="hi",
        parts=[Part("image", url="https://x/y.png")],
        thinking=[ThinkingBlock(text="t")],
        run_id="old",
        conversation_id="conv-old",
    )
    assert stamped(m, "r", "c") == dataclasses.replace(m, run_id="r", conversation_id="c")
    assert stamped(m, "r", "c", "assistant") == dataclasses.replace(
        m, role="assistant", run_id="r", conversation_id="c"
    )
    assert m.run_id == "old"  # the original is untouched

    @dataclasses.dataclass(frozen=True, slots=True)
    class Tagged(Message):
        tag: str = "t"

    sub = Tagged(role="assistant", tag="kept")
    copied = stamped(sub, "r", "c")
    assert type(copied) is Tagged
    assert copied.tag == "kept"
    assert copied.run_id == "r"


def test_with_calls_equals_replace() -> None:
    from golem.messages import with_calls

    calls = [ToolCall("c1", "t", '{"a": 1}', seal="s")]
    m = Message(
        role="assistant",
        content="x",
        tool_calls=[ToolCall("c1", "t", '{"a": 1}')],
        thinking=[ThinkingBlock(text="t")],
        run_id="r",
        conversation_id="c",
    )
    copied = with_calls(m, calls)
    assert copied == dataclasses.replace(m, tool_calls=calls)
    assert type(copied) is Message
    assert m.tool_calls[0].seal == ""  # the original is untouched
    with pytest.raises(dataclasses.FrozenInstanceError):
        copied.content = "y"  # type: ignore[misc]

    @dataclasses.dataclass(frozen=True, slots=True)
    class Tagged(Message):
        tag: str = "t"

    sub = with_calls(Tagged(role="assistant", tag="kept"), calls)
    assert type(sub) is Tagged
    assert (sub.tag, sub.tool_calls) == ("kept", calls)
