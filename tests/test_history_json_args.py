"""Tool-call arguments are bytes, not values: the history JSON keeps them byte for byte.

A seal (issue 8) binds an approval to the exact argument bytes, and the Go golem keeps them
raw in a json.RawMessage; so `loads_history(dumps_history(h))` must give back every call's
`args` text unchanged — numbers beyond a double, `1e400`, `-0.0`, duplicate keys, escapes,
whitespace, strings holding JSON — and a Go-written file must load its args as Go holds them.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import HealthCheck, example, given, settings

from golem import dumps_history, loads_history
from golem.messages import MAX_ARGS_DEPTH, Message, Part, ToolCall
from tests.support.histories import histories, odd_json

PROPERTY = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _call(args: str, **kw: str) -> list[Message]:
    return [Message(role="assistant", tool_calls=[ToolCall("c", "n", args, **kw)])]


def _trip(args: str) -> str:
    return loads_history(dumps_history(_call(args)))[0].tool_calls[0].args


def _file_args(text: str) -> object:
    """The `args` value as it stands in a history document."""
    return json.loads(text)[0]["toolCalls"][0]["args"]


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
]


@pytest.mark.parametrize("args", EMBEDDED)
def test_json_args_are_embedded_verbatim_and_load_back_byte_exact(args: str) -> None:
    text = dumps_history(_call(args))
    assert f'"args":{args}' in text  # the very bytes, as a JSON value (not a string)
    assert _trip(args) == args
    assert dumps_history(loads_history(text)) == text


@pytest.mark.parametrize(
    "args",
    [
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
        "[" * (MAX_ARGS_DEPTH + 1) + "]" * (MAX_ARGS_DEPTH + 1),
    ],
)
def test_other_args_travel_as_a_string_and_load_back_byte_exact(args: str) -> None:
    text = dumps_history(_call(args))
    assert _file_args(text) == args
    assert _trip(args) == args
    assert dumps_history(loads_history(text)) == text


def test_args_at_the_depth_limit_are_embedded() -> None:
    args = "[" * MAX_ARGS_DEPTH + "]" * MAX_ARGS_DEPTH
    assert _file_args(dumps_history(_call(args))) == json.loads(args)
    assert _trip(args) == args


def test_brackets_inside_strings_do_not_count_as_depth() -> None:
    args = json.dumps({"s": "[" * (MAX_ARGS_DEPTH * 2)})
    assert isinstance(_file_args(dumps_history(_call(args))), dict)
    assert _trip(args) == args


def test_empty_args_are_null_and_load_back_empty() -> None:
    assert _file_args(dumps_history(_call(""))) is None
    assert _trip("") == ""


# --------------------------------------------------------------------------- written by Go


def _go(args_json: str) -> str:
    return '[{"role":"assistant","toolCalls":[{"id":"c","name":"n","args":' + args_json + "}]}]"


@pytest.mark.parametrize(
    ("in_file", "loaded"),
    [
        ('{"path":"a"}', '{"path":"a"}'),
        ('{ "path" : "a" }', '{ "path" : "a" }'),  # Go keeps what it reads, whitespace too
        ('{"html":"\\u003cb\\u003e"}', '{"html":"\\u003cb\\u003e"}'),  # Go's HTML escapes
        ("1e400", "1e400"),
        # A RawMessage holding a JSON string literal whose content is JSON: kept as that
        # literal (golem never writes such a string for its own args).
        ('"{\\"a\\":1}"', '"{\\"a\\":1}"'),
        ('"[1,2]"', '"[1,2]"'),
        ("null", ""),
    ],
)
def test_go_written_args_load_as_go_holds_them(in_file: str, loaded: str) -> None:
    text = _go(in_file)
    assert loads_history(text)[0].tool_calls[0].args == loaded
    assert dumps_history(loads_history(text)) == text


def test_go_written_args_with_space_around_the_value() -> None:
    text = '[{"role":"assistant","toolCalls":[{"id":"c","name":"n","args" :  {"a":1}  }]}]'
    assert loads_history(text)[0].tool_calls[0].args == '{"a":1}'


def test_missing_args_load_empty() -> None:
    assert loads_history('[{"role":"assistant","toolCalls":[{"id":"c"}]}]')[0].tool_calls == [
        ToolCall("c", "", "")
    ]


def test_args_from_bytes_input_are_the_same_text() -> None:
    text = _go('{"name":"Zoë","emoji":"😀"}')
    assert loads_history(text.encode())[0].tool_calls[0].args == '{"name":"Zoë","emoji":"😀"}'


def test_empty_optional_part_fields_load_as_none() -> None:
    # JSON omits an empty field, so "" / b"" and None are one value there: they load as None.
    history = [Message(role="user", parts=[Part("image", url="", data=b"", media_type="")])]
    assert loads_history(dumps_history(history)) == [Message(role="user", parts=[Part("image")])]


def test_seal_and_signature_round_trip_beside_the_args() -> None:
    history = _call('{"to": "alice", "amount": 1e400}', signature="sig", seal="v1.k1.abc")
    text = dumps_history(history)
    assert '"signature":"sig","seal":"v1.k1.abc"' in text
    assert loads_history(text) == history


# --------------------------------------------------------------------------- properties


@PROPERTY
@example([Message(role="assistant", tool_calls=[ToolCall("c", "n", '{"a":1e400,"a":-0.0}')])])
@example([Message(role="assistant", tool_calls=[ToolCall("c", "n", '"{\\"a\\":1}"')])])
@given(histories())
def test_any_history_survives_a_round_trip_unchanged(history: list[Message]) -> None:
    assert loads_history(dumps_history(history)) == history


@PROPERTY
@example([Message(role="user", parts=[Part("image", data=b"", media_type="image/png")])])
@example([Message(role="user", parts=[Part("image", url="", media_type="")])])
@given(histories(empty_parts=True))
def test_any_text_this_codec_wrote_is_a_fixed_point(history: list[Message]) -> None:
    text = dumps_history(history)
    assert dumps_history(loads_history(text)) == text
    assert dumps_history(loads_history(text.encode())) == text


@PROPERTY
@given(odd_json())
def test_odd_json_args_are_embedded_as_values(args: str) -> None:
    text = dumps_history(_call(args))
    assert f'"args":{args}' in text
    assert _trip(args) == args


def test_the_codec_knows_every_field_of_the_dataclasses() -> None:
    # loads_history builds messages field by field (see messages.py): a new field needs a
    # key in the JSON contract (ADR 0003) and a line in the codec.
    assert [f.name for f in dataclasses.fields(Message)] == [
        "role",
        "content",
        "parts",
        "tool_calls",
        "tool_call_id",
        "tool_name",
        "failed",
        "thinking",
        "run_id",
        "conversation_id",
        "citations",
        "server_tools",
    ]
    assert [f.name for f in dataclasses.fields(ToolCall)] == [
        "id",
        "name",
        "args",
        "signature",
        "seal",
    ]
