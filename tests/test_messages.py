"""The message model and its Go-compatible history JSON (`dumps_history` / `loads_history`).

Arguments are bytes, not values (ADR 0015): a seal binds the exact argument bytes, so every
call's `args` text survives any number of round trips. `loads_history` raises only
`HistoryError` (a `ValueError`) for any text or bytes and names the message and the field;
citations and server-tool blocks are additive keys whose `raw` travels like args (ADR 0028).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import re

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from golem import Citation, HistoryError, ServerToolBlock, dumps_history, loads_history
from golem.messages import (
    MAX_ARGS_DEPTH,
    Message,
    Part,
    ThinkingBlock,
    ToolCall,
    new_message,
    stamped,
    with_calls,
)
from tests.support.histories import (
    CALL_KEYS,
    MESSAGE_KEYS,
    PART_KEYS,
    THINKING_KEYS,
    histories,
    odd_json,
)

PROPERTY = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
GOOD = {"role": "user", "content": "fine"}


def _call(args: str, **kw: str) -> list[Message]:
    return [Message(role="assistant", tool_calls=[ToolCall("c", "n", args, **kw)])]


def _trip(args: str) -> str:
    return loads_history(dumps_history(_call(args)))[0].tool_calls[0].args


def _file_args(text: str) -> object:
    return json.loads(text)[0]["toolCalls"][0]["args"]


def _go(args_json: str) -> str:
    return '[{"role":"assistant","toolCalls":[{"id":"c","name":"n","args":' + args_json + "}]}]"


def _loads_or_history_error(text: str | bytes) -> list[Message] | None:
    """`text` loads to a history that saves and loads again, or is a `HistoryError`."""
    try:
        history = loads_history(text)
    except HistoryError as exc:
        message = str(exc)
        assert message, "a HistoryError says what is wrong"
        return None
    assert loads_history(dumps_history(history)) == history
    return history


# --------------------------------------------------------------------------- the data model


def test_messages_have_defaults_are_immutable_and_the_codec_knows_every_field() -> None:
    m = Message(role="user")
    assert (m.content, m.parts, m.tool_calls, m.tool_call_id, m.tool_name, m.failed) == (
        *("", [], [], "", "", False),
    )
    assert (m.thinking, m.run_id, m.conversation_id, m.citations, m.server_tools) == (
        *([], "", "", [], []),
    )
    assert (Part("image").url, Part("image").data, Part("image").media_type) == (None,) * 3
    assert ThinkingBlock() == ThinkingBlock("", "", "")
    assert ToolCall("c", "n").args == "{}"
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.content = "x"  # type: ignore[misc]
    # a new field needs a key in the JSON contract (ADR 0003) and a line in the codec
    assert [f.name for f in dataclasses.fields(Message)] == [
        *("role", "content", "parts", "tool_calls", "tool_call_id", "tool_name", "failed"),
        *("thinking", "run_id", "conversation_id", "citations", "server_tools"),
    ]
    assert [f.name for f in dataclasses.fields(ToolCall)] == [
        *("id", "name", "args", "signature", "seal")
    ]


def test_the_loops_builders_equal_the_constructor_and_replace() -> None:
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
    assert new_message("user") == Message(role="user")
    assert new_message("user").thinking is not new_message("user").thinking
    m = Message(role="user", content="hi", thinking=[ThinkingBlock(text="t")], run_id="old")
    assert stamped(m, "r", "c") == dataclasses.replace(m, run_id="r", conversation_id="c")
    assert stamped(m, "r", "c", "assistant") == dataclasses.replace(
        m, role="assistant", run_id="r", conversation_id="c"
    )
    calls = [ToolCall("c1", "t", '{"a": 1}', seal="s")]
    assert with_calls(m, calls) == dataclasses.replace(m, tool_calls=calls)
    assert (m.run_id, m.tool_calls) == ("old", [])  # the original is untouched

    @dataclasses.dataclass(frozen=True, slots=True)
    class Tagged(Message):
        tag: str = "t"

    sub = with_calls(stamped(Tagged(role="assistant", tag="kept"), "r", "c"), calls)
    assert (type(sub), sub.tag, sub.run_id, sub.tool_calls) == (Tagged, "kept", "r", calls)


def test_a_server_tool_blocks_data_parses_raw() -> None:
    assert ServerToolBlock("x", "y", raw='{"input":{"q":"x"}}').data() == {"input": {"q": "x"}}
    with pytest.raises(ValueError):
        ServerToolBlock(provider="x", type="y", raw="{").data()


# --------------------------------------------------------------------------- what dumps writes

SEARCH_USE = ServerToolBlock(
    provider="anthropic",
    type="server_tool_use",
    id="srvtoolu_01",
    name="web_search",
    raw='{"type":"server_tool_use","input":{"query":"x"}}',
    at=12,
    thinking_before=1,
)
CITATION = Citation(
    start=0,
    end=5,
    url="https://example.com/a",
    title="A page",
    cited_text="quoted",
    provider="anthropic",
    raw='{"type":"web_search_result_location","encrypted_index":"Eo8B"}',
)


@pytest.mark.parametrize(
    ("message", "written"),
    [
        (Message(role="user"), '{"role":"user"}'),  # empty fields omitted
        (
            Message(role="user", content="clean up", run_id="R1", conversation_id="C1"),
            '{"role":"user","content":"clean up","runId":"R1","conversationId":"C1"}',
        ),
        (
            Message(
                role="assistant",
                content="ok",
                tool_calls=[ToolCall("c1", "n", '{"a": [1, 2]}'), ToolCall("c2", "m", "")],
                thinking=[ThinkingBlock(text="hmm", signature="sig"), ThinkingBlock(redacted="x")],
            ),
            '{"role":"assistant","content":"ok","toolCalls":[{"id":"c1","name":"n","args":'
            '{"a": [1, 2]}},{"id":"c2","name":"m","args":null}],"thinking":[{"text":"hmm",'
            '"signature":"sig"},{"redacted":"x"}]}',
        ),
        (
            Message(
                role="tool",
                content="c",
                parts=[Part("image", url="https://x/y.png")],
                tool_call_id="call-1",
                tool_name="t",
                failed=True,
            ),
            '{"role":"tool","content":"c","parts":[{"kind":"image","url":"https://x/y.png"}],'
            '"toolCallId":"call-1","toolName":"t","failed":true}',
        ),
        (
            Message(role="user", parts=[Part("image", data=b"\x00\xff", media_type="image/png")]),
            '{"role":"user","parts":[{"kind":"image","data":"'
            + base64.b64encode(b"\x00\xff").decode()
            + '","mediaType":"image/png"}]}',
        ),
        (
            Message(
                role="assistant", content="Hello", citations=[CITATION], server_tools=[SEARCH_USE]
            ),
            '{"role":"assistant","content":"Hello","citations":[{"end":5,"url":'
            '"https://example.com/a","title":"A page","citedText":"quoted","provider":"anthropic",'
            f'"raw":{CITATION.raw}}}],"serverTools":[{{"provider":"anthropic","type":'
            '"server_tool_use","id":"srvtoolu_01","name":"web_search",'
            f'"raw":{SEARCH_USE.raw},"at":12,"thinkingBefore":1}}]}}',
        ),
        (
            Message(role="assistant", tool_calls=[ToolCall("c", "n", "{}", "sig", "v1.k1.abc")]),
            '{"role":"assistant","toolCalls":[{"id":"c","name":"n","args":{},"signature":"sig",'
            '"seal":"v1.k1.abc"}]}',
        ),
    ],
    ids=["empty", "identity", "calls and thinking", "tool result", "data", "provider", "seal"],
)
def test_dumps_writes_go_keys_compact_with_args_and_raw_embedded(
    message: Message, written: str
) -> None:
    assert dumps_history([message]) == f"[{written}]"
    assert loads_history(dumps_history([message])) == [message]


# --------------------------------------------------------------------------- args are bytes

EMBEDDED = [
    '{"amount":123456789012345678901234567890.12345678901234567890}',  # beyond a double
    '{"amount":1e400}',
    '{"amount":-0.0,"b":0E-7,"c":1.0e+2}',
    '{"to":"alice","to":"mallory"}',  # duplicate keys: both kept, in order
    '{"s":"\\u00e9\\ud83d\\ude00\\n\\/\\"","raw":"é😀"}',  # escapes stay escapes
    '{"note":"<b>&amp;</b>"}',  # Go would write \\u003c; we keep what the model sent
    '{"q":"{\\"nested\\":\\"json\\"}"}',  # a string holding JSON stays a string
    '{ "path" : "a" ,\n  "tags" : [ 1 , 2 ] }',  # whitespace inside
    "[1,2,3]",
    '"{\\"a\\":1}"',  # a JSON string holding an object stays that string
    '"\\"{}\\""',  # ... also a string holding such a string
    "42",
    "true",
    "{}",
    '""',  # the empty string literal (its content could not be told from absent args)
    '{"a":"\\ud800","b":["x\\udfff"]}',  # escaped lone surrogates (Go keeps them; ADR 0047)
    '"\\ud800"',  # ... also in a string literal
    "[" * MAX_ARGS_DEPTH + "]" * MAX_ARGS_DEPTH,  # at the depth limit
    json.dumps({"s": "[" * (MAX_ARGS_DEPTH * 2)}),  # brackets in strings are not depth
]
AS_STRING = [
    '"x"',  # a JSON string value
    '"\\"x\\""',  # a string holding a string that is not JSON
    "null",
    ' {"a":1}',  # whitespace around the value
    '{"a":1}\n',
    "\t[1]",
    '{"a":1}}',  # one bracket too many
    "[1]]",
    '"x"}',  # a string, then a bracket
    '"0',  # two characters, an unterminated string (not `""`)
    '"\\',
    '0"',
    "1]",
    '{"sides":',  # truncated streams
    "{",
    "oops",
    "NaN",
    '{"x":Infinity}',
    "[" * (MAX_ARGS_DEPTH + 1) + "]" * (MAX_ARGS_DEPTH + 1),  # past the depth limit
]


@pytest.mark.parametrize(
    ("args", "embedded"), [(a, True) for a in EMBEDDED] + [(a, False) for a in AS_STRING]
)
def test_args_are_embedded_verbatim_or_travel_as_a_string_and_load_back_byte_exact(
    args: str, embedded: bool
) -> None:
    text = dumps_history(_call(args))
    if embedded:
        assert f'"args":{args}' in text  # the very bytes, as a JSON value (not a string)
    else:
        assert _file_args(text) == args
    assert _trip(args) == args
    assert dumps_history(loads_history(text)) == text


def test_empty_args_are_null_missing_args_load_empty_and_no_history_is_an_empty_array() -> None:
    assert _file_args(dumps_history(_call(""))) is None
    assert _trip("") == ""
    loaded = loads_history('[{"role":"assistant","toolCalls":[{"id":"c"}]}]')
    assert loaded[0].tool_calls == [ToolCall("c", "", "")]
    assert (dumps_history([]), loads_history("[]")) == ("[]", [])


def test_whitespace_around_a_go_written_value_is_not_part_of_the_args() -> None:
    text = '[{"role":"assistant","toolCalls":[{"id":"c","name":"n","args" :  {"a":1}  }]}]'
    assert loads_history(text)[0].tool_calls[0].args == '{"a":1}'


def test_raw_of_provider_blocks_follows_the_args_rule() -> None:
    block = ServerToolBlock(provider="gemini", type="x", raw="not json {")
    text = dumps_history([Message(role="assistant", server_tools=[block])])
    assert '"raw":"not json {"' in text
    assert loads_history(text)[0].server_tools == [block]


# --------------------------------------------------------------------------- what loads reads


def test_unknown_keys_are_ignored_and_missing_or_null_keys_take_defaults() -> None:
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
            {"role": "tool"},
            {"role": "user", "content": None, "parts": None, "toolCalls": None, "failed": None},
            {
                "role": "assistant",
                "citations": [{"start": None, "raw": None}],
                "serverTools": [{"provider": "openai-responses", "type": "web_search_call"}],
            },
            {"role": "user", "parts": [{"kind": "image", "url": "", "data": "", "mediaType": ""}]},
        ]
    )
    assert loads_history(text) == [
        Message(
            role="assistant",
            content="x",
            tool_calls=[ToolCall("c", "n", "{}")],
            thinking=[ThinkingBlock(text="t")],
        ),
        Message(role="user", parts=[Part("image", url="https://a/b")]),
        Message(role="tool"),
        Message(role="user"),
        Message(
            role="assistant",
            citations=[Citation()],
            server_tools=[ServerToolBlock("openai-responses", "web_search_call")],
        ),
        Message(role="user", parts=[Part("image")]),  # "" and None are one value in JSON
    ]


def test_bytes_like_json_text_loads_and_other_values_are_a_type_error() -> None:
    text = dumps_history([Message(role="user", content="hi")])
    for data in (text, text.encode(), bytearray(text.encode()), memoryview(text.encode())):
        assert loads_history(data) == [Message(role="user", content="hi")]  # type: ignore[arg-type]
    for value in (None, [], {}, 42):
        with pytest.raises(TypeError, match=r"JSON text of a history \(str or bytes\), got"):
            loads_history(value)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- what errors say


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ({"role": 1}, r"role: expected `str`, got `int`"),
        ({"role": None}, r"role: expected `str`, got `null`"),
        ({"role": ["user"]}, r"role: expected `str`, got `array`"),
        ({"role": "robot"}, r"role must be one of system, user, assistant, tool; got 'robot'"),
        ({"content": "no role"}, r"missing required field `role`"),
        ({"role": "user", "content": 5}, r"content: expected `str \| null`, got `int`"),
        ({"role": "user", "content": ["a"]}, r"content: expected `str \| null`, got `array`"),
        ({"role": "user", "failed": "yes"}, r"failed: expected `bool \| null`, got `str`"),
        ({"role": "tool", "failed": 1}, r"failed: expected `bool \| null`, got `int`"),
        ({"role": "tool", "toolCallId": 1}, r"toolCallId: expected `str \| null`"),
        ({"role": "user", "conversationId": {}}, r"conversationId: expected `str \| null`"),
        ({"role": "user", "parts": "image"}, r"parts: expected `array \| null`"),
        ({"role": "user", "parts": ["image"]}, r"parts\[0\]: expected `object`"),
        ({"role": "user", "parts": [{"kind": 3}]}, r"parts\[0\]\.kind: expected `str \| null`"),
        (
            {"role": "user", "parts": [{"kind": "image", "data": "***"}]},
            r"parts\[0\]\.data: invalid",
        ),
        ({"role": "assistant", "toolCalls": {"id": "c"}}, r"toolCalls: expected `array \| null`"),
        (
            {"role": "assistant", "toolCalls": [{"id": "c", "name": 7}]},
            r"toolCalls\[0\]\.name: expected `str \| null`, got `int`",
        ),
        ({"role": "assistant", "thinking": "deep"}, r"thinking: expected `array \| null`"),
        ({"role": "assistant", "thinking": [{"text": 1}]}, r"thinking\[0\]\.text: expected"),
        ({"role": "assistant", "citations": [{"start": "3"}]}, r"citations\[0\]\.start: expected"),
        ({"role": "assistant", "serverTools": [{"at": 1.5}]}, r"serverTools\[0\]\.at: expected"),
        ({"role": "assistant", "serverTools": {}}, r"serverTools: expected `array \| null`"),
        ({"role": "assistant", "toolCalls": ["c"]}, r"toolCalls\[0\]: expected `object`"),
        ({"role": "assistant", "toolCalls": [{"name": ["n"]}]}, r"toolCalls\[0\]\.name: expected"),
        ({"role": "tool", "toolName": False}, r"toolName: expected `str \| null`, got `bool`"),
        ({"role": "user", "runId": 12}, r"runId: expected `str \| null`, got `int`"),
        ("just a string", r"expected `object`, got `str`"),
        ([GOOD], r"expected `object`, got `array`"),
    ],
)
def test_shape_errors_name_the_message_and_the_field(bad: object, says: str) -> None:
    text = json.dumps([GOOD] * 11 + [bad, GOOD])
    with pytest.raises(HistoryError, match=r"^history message 11: .*" + says) as info:
        loads_history(text)
    assert type(info.value) is HistoryError  # golem's named error, no library's (ADR 0070)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('{"messages":[]}', "history must be a JSON array of messages"),
        ('"history"', "history must be a JSON array of messages"),
        ("42", "history must be a JSON array of messages"),
        ("true", "history must be a JSON array of messages"),
        ("", "history is not valid JSON"),
        ("[", "history is not valid JSON"),
        ("[{]", "history is not valid JSON"),
        ('[{"role":"user"},]', "history is not valid JSON"),
        ("not json", "history is not valid JSON"),
        ('[{"role":"user","content":"x}]', "history is not valid JSON"),
        ("[NaN]", "history is not valid JSON"),
        (_go('{"v":NaN}'), "not valid JSON"),
        (_go('{"v":Infinity}'), "not valid JSON"),
        (_go('{"v":-Infinity}'), "not valid JSON"),
        ('[{"role":"user","x":{"v":NaN}}]', "not valid JSON"),
        (_go("[" * 200_000 + "]" * 200_000), "nested too deeply"),
        ('[{"role":"user","x":' + "[" * 200_000 + "]" * 200_000 + "}]", "nested too deeply"),
        # other faults beside a lone surrogate are still named
        (_go('{"a":"\\ud800"}').replace('"c"', "1"), r"^history message 0: toolCalls\[0\]\.id"),
        (_go('{"a":"\\ud800"}')[:-1] + ",]", "not valid JSON"),
    ],
    ids=lambda v: v[:30] if isinstance(v, str) else None,
)
def test_what_is_not_a_history_says_why(text: str, says: str) -> None:
    with pytest.raises(HistoryError, match=says):
        loads_history(text)


# --------------------------------------------------------------------------- Unicode

TEXT_PLACES = [
    ('{"role":"user","content":%s}', "content"),
    ('{"role":"tool","toolCallId":%s}', "toolCallId"),
    ('{"role":"assistant","thinking":[{"text":%s}]}', "thinking[0].text"),
    ('{"role":"user","parts":[{"kind":"image","url":%s}]}', "parts[0].url"),
    ('{"role":"assistant","toolCalls":[{"id":"c","name":%s,"args":{}}]}', "toolCalls[0].name"),
    ('{"role":"assistant","citations":[{"citedText":%s}]}', "citations[0].citedText"),
    ('{"role":"user","content":%s,"x":"\\udfff"}', "content"),  # beside an ignored one
    ('{"role":"assistant","toolCalls":[{"id":%s,"args":{"a":"\\ud800"}}]}', "toolCalls[0].id"),
    ('{"role":"tool","toolName":%s,"toolCallId":"c"}', "toolName"),
    ('{"role":"assistant","serverTools":[{"provider":"p","type":%s}]}', "serverTools[0].type"),
]
RAW_PLACES = [
    *TEXT_PLACES[:3],
    ('{"role":"assistant","toolCalls":[{"id":"c","name":"n","args":{"a":%s}}]}', "args.a"),
    ('{"role":"assistant","toolCalls":[{"id":"c","name":"n","args":[%s]}]}', "args[0]"),
    ('{"role":"assistant","toolCalls":[{"id":"c","name":"n","args":%s}]}', "toolCalls[0].args"),
    ('{"role":"user","x":{"y":%s}}', "x.y"),
]


@pytest.mark.parametrize(
    ("template", "field", "spelling"),
    [
        *(
            (t, f, s)
            for t, f in TEXT_PLACES
            for s in ('"\\ud800"', '"a\\udfff"', '"\\ude00\\ud83d"')
        ),
        *((t, f, '"\ud800"') for t, f in RAW_PLACES),  # raw, in text input (not bytes)
    ],
)
def test_a_lone_surrogate_in_a_text_field_is_refused_naming_message_and_field(
    template: str, field: str, spelling: str
) -> None:
    text = "[" + json.dumps(GOOD) + "," + template % spelling + "]"
    forms = [text] if "\ud800" in spelling else [text, text.encode()]
    for form in forms:
        with pytest.raises(HistoryError, match=r"^history message 1: ") as info:
            loads_history(form)
        assert f"{field} holds a lone surrogate" in str(info.value)


def test_invalid_utf8_reads_as_the_go_golem_reads_it() -> None:
    # ADR 0075: Go reads each byte that is not UTF-8 as U+FFFD, in args too
    assert loads_history(b'[{"role":"user","content":"\xff"}]')[0].content == "\ufffd"
    assert loads_history(b'[{"role":"user","content":"a\xe2\x82b"}]')[0].content == (
        "a\ufffd\ufffdb"
    )
    surrogate = '[{"role":"user","content":"\ud800"}]'.encode("utf-8", "surrogatepass")
    assert loads_history(surrogate)[0].content == "\ufffd" * 3
    text = b'[{"role":"user"},{"role":"assistant","toolCalls":[{"args":{"a":"\xed\xa0\x80"}}]}]'
    assert loads_history(text)[1].tool_calls[0].args == '{"a":"\ufffd\ufffd\ufffd"}'
    pair = loads_history('[{"role":"user","content":"\\ud83d\\ude00"}]')
    assert pair[0].content == "😀"


@pytest.mark.parametrize(
    ("message", "field"),
    [
        (Message(role="user", content="a\ud800"), "content"),
        (Message(role="tool", tool_name="\udfff"), "tool_name"),
        (
            Message(role="assistant", tool_calls=[ToolCall("c", "n", '{"a":"\ud800"}')]),
            "tool_calls[0].args",
        ),
        (
            Message(role="assistant", tool_calls=[ToolCall("c", "n", seal="\ud800")]),
            "tool_calls[0].seal",
        ),
        (Message(role="user", parts=[Part("image", url="https://\ud800")]), "parts[0].url"),
        (Message(role="assistant", thinking=[ThinkingBlock(text="\ud800")]), "thinking[0].text"),
        (Message(role="assistant", citations=[Citation(title="\ud800")]), "citations[0].title"),
        (
            Message(role="assistant", server_tools=[ServerToolBlock("x", "y", raw='"\ud800"')]),
            "server_tools[0].raw",
        ),
    ],
)
def test_dumps_refuses_a_lone_surrogate_naming_message_and_field(
    message: Message, field: str
) -> None:
    with pytest.raises(HistoryError, match=r"^history message 2: " + re.escape(field)):
        dumps_history([Message(role="user"), Message(role="user"), message])


# --------------------------------------------------------------------------- properties

json_leaf = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6)
json_any = st.recursive(
    json_leaf,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=10,
)
keys = st.sampled_from([*MESSAGE_KEYS, *CALL_KEYS, *PART_KEYS, *THINKING_KEYS, "seal", "x"])
roles = st.sampled_from(["system", "user", "assistant", "tool", "robot", ""]) | json_leaf
messageish = st.dictionaries(
    keys,
    st.recursive(
        json_leaf | roles,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=4),
        max_leaves=12,
    ),
    max_size=5,
).map(lambda d: d if "role" in d else {"role": "assistant", **d})


@PROPERTY
@given(
    st.text()
    | st.binary()
    | json_any.map(json.dumps)
    | st.lists(messageish, max_size=4).map(json.dumps)
)
def test_any_input_loads_to_a_savable_history_or_is_a_history_error(text: str | bytes) -> None:
    _loads_or_history_error(text)
    if isinstance(text, str) and text.isascii():
        _loads_or_history_error(text.encode())


_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)
_json_value = st.recursive(
    st.none() | st.booleans() | st.integers() | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=8,
)
_raw = st.one_of(
    _json_value.map(lambda v: json.dumps(v, separators=(",", ":"))),
    _json_value.map(lambda v: json.dumps(v, indent=1)),  # whitespace inside is kept
    _text,  # not JSON at all: written as a string
)
_ints = st.integers(min_value=-(2**63), max_value=2**63 - 1)
_provider_messages = st.builds(
    Message,
    role=st.just("assistant"),
    content=_text,
    citations=st.lists(
        st.builds(Citation, _ints, _ints, _text, _text, _text, _text, _raw), max_size=3
    ),
    server_tools=st.lists(
        st.builds(ServerToolBlock, _text, _text, _text, _text, _raw, _ints, _ints), max_size=3
    ),
)


@PROPERTY
@example([Message(role="assistant", tool_calls=[ToolCall("c", "n", '{"a":1e400,"a":-0.0}')])])
@example([Message(role="assistant", tool_calls=[ToolCall("c", "n", '"{\\"a\\":1}"')])])
@given(histories() | st.lists(_provider_messages, max_size=3))
def test_any_history_round_trips_unchanged_and_its_text_is_a_fixed_point(
    history: list[Message],
) -> None:
    text = dumps_history(history)
    assert loads_history(text) == history
    assert dumps_history(loads_history(text)) == text
    assert dumps_history(loads_history(text.encode())) == text


@PROPERTY
@example([Message(role="user", parts=[Part("image", data=b"", media_type="image/png")])])
@given(histories(empty_parts=True))
def test_any_text_this_codec_wrote_is_a_fixed_point(history: list[Message]) -> None:
    text = dumps_history(history)
    assert dumps_history(loads_history(text)) == text


@PROPERTY
@given(odd_json())
def test_odd_json_args_are_embedded_as_values(args: str) -> None:
    assert f'"args":{args}' in dumps_history(_call(args))
    assert _trip(args) == args
