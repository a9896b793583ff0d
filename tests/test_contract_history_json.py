"""Histories exchanged with the Go golem (issue 3: "A paused history written by the Go golem
loads and resumes here, and vice versa"; Go reference §2.7, §3.1, §3.2).

The documents here are built the way Go's `encoding/json` writes a `[]model.Message`: keys in
struct order, empty fields omitted, strings escaped as Go escapes them (`<`, `>`, `&`, U+2028,
U+2029 as `\\u....`, other non-ASCII as UTF-8), `[]byte` as padded standard base64, and each
tool call's `args` a `json.RawMessage` — whatever bytes the model produced, compacted, `null`
when absent. Go's reader ignores unknown keys, reads `null` as the zero value and keeps
`RawMessage` bytes as they are, so a future Go key, an explicit `null` or any JSON value in
`args` (numbers beyond a double, `1e400`, `-0.0`, escaped lone surrogates, which Go's decoder
accepts) is what Go may hand us.

Checked: ours loads each such document into the messages Go holds (args byte for byte), a
paused one resumes, and what we write back is JSON Go reads into the same messages (args byte
for byte again) and is a fixed point of our own codec.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from golem import (
    Agent,
    DeferredResults,
    Message,
    RunContext,
    Tool,
    ToolCall,
    dumps_history,
    loads_history,
)
from golem.messages import Part, ThinkingBlock
from golem.testing import ScriptedModel
from golem.tool import Deferred, call_approved
from tests.support.gojson import go_history, go_read, json_texts, literals_decoded, raw_args

PROPERTY = settings(deadline=None)

# --------------------------------------------------------------------------- properties


@PROPERTY
@given(go_history())
def test_a_go_written_history_loads_as_go_holds_it(case: tuple[str, list[Message]]) -> None:
    document, expected = case
    loaded = loads_history(document)
    assert loaded == expected
    assert loads_history(document.encode()) == expected


@PROPERTY
@given(go_history())
def test_what_we_write_back_go_reads_as_the_same_history(
    case: tuple[str, list[Message]],
) -> None:
    document, _ = case
    ours = dumps_history(loads_history(document))
    assert go_read(ours) == go_read(document)
    # the args bytes Go would hold: ours keep Go's (compacted) bytes exactly; a string
    # literal golem reads as its content (ADR 0015) is written back as the same string,
    # escaped golem's way (Go escapes `<`, `>`, `&`; golem writes them as they are)
    assert literals_decoded(raw_args(ours)) == literals_decoded(raw_args(document))
    # and our own codec is at a fixed point on it
    assert dumps_history(loads_history(ours)) == ours


# --------------------------------------------------------------------------- examples

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
    history = loads_history(GO_PAUSED)
    args = history[1].tool_calls[0].args
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
    agent = Agent(model, tools=[Tool("pay", "pay", {"type": "object"}, pay)])
    resumed = agent.run_with_deferred_results_sync(
        GO_PAUSED, DeferredResults(approvals={"call-1": True})
    )
    assert resumed.output == "done"
    assert seen == ["😀 <3"]
    assert resumed.conversation_id == "C1"
    sent = model.requests[0].messages
    assert [m.role for m in sent] == ["user", "assistant", "tool", "tool"]
    assert sent[1].tool_calls[0].args == args  # the model sees the bytes Go held
    # the resumed history saves, and Go would read the same args bytes back
    text = dumps_history(resumed.messages)
    assert raw_args(text)[1] == [args, "{}"]
    assert dumps_history(loads_history(text)) == text


@pytest.mark.parametrize(
    "args",
    [
        '{"a":"\\ud800"}',
        '{"a":"x\\udfffy","b":["\\uDBFF"]}',
        '["\\udc00\\ud800"]',  # low then high: two lone surrogates, not a pair
        '{"a":"\\\\ud800"}',  # an escaped backslash, then plain text
        '{"a":"\\\\\\ud800"}',  # an escaped backslash, then a lone surrogate
        '{"\\ud800":1}',  # in a key
    ],
)
def test_args_with_escaped_lone_surrogates_are_embedded_and_load_byte_exact(args: str) -> None:
    document = '[{"role":"assistant","toolCalls":[{"id":"c","name":"n","args":' + args + "}]}]"
    loaded = loads_history(document)
    assert loaded[0].tool_calls[0].args == args
    assert dumps_history(loaded) == document  # embedded verbatim, as Go wrote it
    ours = dumps_history([Message(role="assistant", tool_calls=[ToolCall("c", "n", args)])])
    assert ours == document


def test_args_an_earlier_golem_wrote_as_a_string_load_as_the_same_text() -> None:
    # Before ADR 0047 golem wrote such args as a JSON string of their text; they load back
    # as that text, and are written embedded from then on.
    args = '{"a":"\\ud800"}'
    old = (
        '[{"role":"assistant","toolCalls":[{"id":"c","name":"n","args":' + json.dumps(args) + "}]}]"
    )
    loaded = loads_history(old)
    assert loaded[0].tool_calls[0].args == args
    new = dumps_history(loaded)
    assert '"args":' + args in new
    assert dumps_history(loads_history(new)) == new


def test_a_string_literal_holding_a_lone_surrogate_is_kept_as_the_literal() -> None:
    # Go holds the literal; its content is not text, so golem cannot read it as raw text
    document = '[{"role":"assistant","toolCalls":[{"id":"c","name":"n","args":"\\ud800"}]}]'
    loaded = loads_history(document)
    assert loaded[0].tool_calls[0].args == '"\\ud800"'
    assert dumps_history(loaded) == document
    # what an earlier golem wrote for such args (a string of their text) loads the same
    old = json.dumps(
        [{"role": "assistant", "toolCalls": [{"id": "c", "name": "n", "args": '"\\ud800"'}]}]
    )
    assert loads_history(old) == loaded


def test_empty_string_args_from_go_are_not_confused_with_absent_args() -> None:
    # Go's RawMessage `""` and a missing/`null` args differ for a Go tool (a string vs no
    # value); both must come back as Go wrote them
    for args_json, args in (('""', '""'), ("null", "")):
        document = (
            '[{"role":"assistant","toolCalls":[{"id":"c","name":"n","args":' + args_json + "}]}]"
        )
        loaded = loads_history(document)
        assert loaded[0].tool_calls[0].args == args
        assert dumps_history(loaded) == document
    # an earlier golem wrote args `""` as a string of their text: the same args load
    old = '[{"role":"assistant","toolCalls":[{"id":"c","name":"n","args":"\\"\\""}]}]'
    assert loads_history(old)[0].tool_calls[0].args == '""'


@pytest.mark.parametrize(
    "unknown",
    ['"\\ud800"', '{"a":["\\udfff"]}', '"\\ud800\\ud800"'],
)
def test_unknown_keys_holding_lone_surrogates_are_ignored_as_go_ignores_them(
    unknown: str,
) -> None:
    document = '[{"role":"user","content":"hi","futureKey":' + unknown + "}]"
    assert loads_history(document) == [Message(role="user", content="hi")]


def test_other_faults_beside_a_lone_surrogate_are_still_named() -> None:
    bad_shape = '[{"role":"assistant","toolCalls":[{"id":1,"name":"n","args":{"a":"\\ud800"}}]}]'
    with pytest.raises(ValueError, match=r"^history message 0: toolCalls\[0\]\.id"):
        loads_history(bad_shape)
    bad_json = '[{"role":"assistant","toolCalls":[{"id":"c","args":{"a":"\\ud800"}}]},]'
    with pytest.raises(ValueError, match="not valid JSON"):
        loads_history(bad_json)


def test_private_use_characters_beside_lone_surrogates_are_kept_apart() -> None:
    # the slow path stands private-use characters in for the lone surrogates: ones the
    # document already holds (raw or escaped, in text or in args) are never confused with them
    args = '{"a":"\\ud800\\ue000","b":"\\uE001\ue002","c":"\\udfff"}'
    document = (
        '[{"role":"user","content":"\ue000 \\ue001 \\uE002"},'
        '{"role":"assistant","toolCalls":[{"id":"c","name":"n","args":' + args + "}]}]"
    )
    loaded = loads_history(document)
    assert loaded[0].content == "\ue000 \ue001 \ue002"
    assert loaded[1].tool_calls[0].args == args
    assert '"args":' + args in dumps_history(loaded)


def test_every_lone_surrogate_spelling_in_one_document_loads() -> None:
    spellings = [f"\\u{cp:04x}" for cp in range(0xD800, 0xE000)]  # 2048 distinct ones
    args = '["' + '","'.join(spellings) + '"]'
    document = '[{"role":"assistant","toolCalls":[{"id":"c","name":"n","args":' + args + "}]}]"
    assert loads_history(document)[0].tool_calls[0].args == args


def test_unknown_keys_inside_calls_parts_and_thinking_are_ignored() -> None:
    # Go ignores unknown keys at every level (a future field on a tool call, a part, a block)
    document = (
        '[{"role":"user","content":"x","parts":[{"kind":"image","url":"https://x",'
        '"future":{"a":"\\ud800"},"alt":1e400}]},'
        '{"role":"assistant","toolCalls":[{"id":"c","name":"n","args":{"a":1},'
        '"future":[1,"\\udfff"],"index":123456789012345678901234567890}],'
        '"thinking":[{"text":"t","future":null,"cache":{"x":-0.0}}]}]'
    )
    assert loads_history(document) == [
        Message(role="user", content="x", parts=[Part("image", url="https://x")]),
        Message(
            role="assistant",
            tool_calls=[ToolCall("c", "n", '{"a":1}')],
            thinking=[ThinkingBlock(text="t")],
        ),
    ]


@st.composite
def any_args_documents(draw: st.DrawFn) -> str:
    """A document whose args are any JSON value, spelled with any whitespace (a writer other
    than Go or golem, or a hand edit), as a value or as a string."""
    value = draw(json_texts())
    if draw(st.booleans()):
        value = draw(st.sampled_from(["", " ", "\n\t "])) + value
    if draw(st.booleans()):
        value = json.dumps(value)  # the same text inside a JSON string
    space = draw(st.sampled_from(["", " ", "\n"]))
    return (
        f'[{{"role":"assistant",{space}"toolCalls":[{{"id":"c","name":"n",'
        f'"args":{space}{value}{space}}}]}}]'
    )


@PROPERTY
@given(any_args_documents())
def test_any_document_that_loads_reaches_a_fixed_point_in_one_dump(document: str) -> None:
    # Go reference §3.2: any input that decodes re-encodes to bytes that decode again, and
    # encoding(decode(encoding(x))) is byte-identical to encoding(x)
    loaded = loads_history(document)
    first = dumps_history(loaded)
    assert loads_history(first) == loaded
    assert dumps_history(loads_history(first)) == first
