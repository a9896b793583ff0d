"""`loads_history` raises only `ValueError`, for any JSON text, and says where and what
(a value that is not text at all, such as None, is a `TypeError` that says so).

Issue 12: no `TypeError` for a non-string role, no `RecursionError` for deep nesting, no
`UnicodeError`; a lone surrogate is refused at load (never a history that cannot be saved),
and `dumps_history` names the message it cannot write.
"""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from golem import HistoryError, dumps_history, loads_history
from golem.messages import Message, Part, ThinkingBlock, ToolCall
from tests.support.histories import CALL_KEYS, MESSAGE_KEYS, PART_KEYS, THINKING_KEYS

FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
GOOD = {"role": "user", "content": "fine"}


def _loads_or_value_error(text: str | bytes) -> list[Message] | None:
    try:
        history = loads_history(text)
    except ValueError:
        return None
    # Whatever loads can be saved and loads again to the same messages.
    assert loads_history(dumps_history(history)) == history
    return history


# --------------------------------------------------------------------------- fuzz

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
shaped_values = st.recursive(
    json_leaf | roles,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=12,
)
messageish = st.dictionaries(keys, shaped_values, max_size=5).map(
    lambda d: d if "role" in d else {"role": "assistant", **d}
)


@FUZZ
@given(st.text())
def test_any_text_loads_or_raises_value_error(text: str) -> None:
    _loads_or_value_error(text)


@FUZZ
@given(st.binary())
def test_any_bytes_load_or_raise_value_error(data: bytes) -> None:
    _loads_or_value_error(data)


@FUZZ
@given(json_any)
def test_any_json_value_loads_or_raises_value_error(value: object) -> None:
    text = json.dumps(value)  # NaN/Infinity included: not JSON, a ValueError
    _loads_or_value_error(text)
    _loads_or_value_error(text.encode())


@FUZZ
@given(st.lists(messageish, max_size=4))
def test_almost_histories_load_or_raise_value_error(messages: list[object]) -> None:
    _loads_or_value_error(json.dumps(messages))


@FUZZ
@given(st.lists(messageish, min_size=1, max_size=4), st.data())
def test_corrupted_history_bytes_load_or_raise_value_error(
    messages: list[object], data: st.DataObject
) -> None:
    raw = bytearray(json.dumps(messages, ensure_ascii=False).encode())
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] = data.draw(st.integers(0, 255))
    _loads_or_value_error(bytes(raw))


@pytest.mark.parametrize("depth", [100, 1_000, 10_000, 200_000])
@pytest.mark.parametrize(
    "where",
    [
        "{}",  # the whole document
        '[{{"role":"assistant","toolCalls":[{{"id":"c","name":"n","args":{}}}]}}]',  # args
        '[{{"role":"user","x":{}}}]',  # an unknown key
        '[{{"role":{}}}]',  # the role
    ],
)
def test_deep_nesting_is_a_value_error_or_loads(depth: int, where: str) -> None:
    nested = "[" * depth + "]" * depth
    for text in (where.format(nested), where.format("[" * depth)):  # closed, and unclosed
        _loads_or_value_error(text)


@pytest.mark.parametrize("key", ["args", "x"])
def test_deep_nesting_error_says_so(key: str) -> None:
    nested = "[" * 200_000 + "]" * 200_000
    with pytest.raises(ValueError, match="nested too deeply"):
        loads_history('[{"role":"assistant","toolCalls":[{"' + key + '":' + nested + "}]}]")


# --------------------------------------------------------------------------- what the errors say


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ({"role": 1}, r"role: expected `str`, got `int`"),
        ({"role": None}, r"role: expected `str`, got `null`"),
        ({"role": ["user"]}, r"role: expected `str`, got `array`"),
        ({"role": "robot"}, r"role must be one of system, user, assistant, tool; got 'robot'"),
        ({"content": "no role"}, r"missing required field `role`"),
        ({"role": "user", "content": 5}, r"content: expected `str \| null`, got `int`"),
        ({"role": "user", "failed": "yes"}, r"failed: expected `bool \| null`, got `str`"),
        (
            {"role": "assistant", "toolCalls": [{"id": "c", "name": 7}]},
            r"toolCalls\[0\]\.name: expected `str \| null`, got `int`",
        ),
        (
            {"role": "user", "parts": [{"kind": "image", "data": "***"}]},
            r"parts\[0\]\.data: invalid base64",
        ),
        ({"role": "assistant", "thinking": "deep"}, r"thinking: expected `array \| null`"),
        ("just a string", r"expected `object`, got `str`"),
    ],
)
def test_shape_errors_name_the_message_and_the_field(bad: object, says: str) -> None:
    text = json.dumps([GOOD, GOOD, GOOD, bad, GOOD])
    with pytest.raises(ValueError, match=r"^history message 3: .*" + says) as info:
        loads_history(text)
    assert isinstance(info.value, ValueError)
    assert type(info.value) is HistoryError  # golem's named error, no library's (ADR 0070)


@pytest.mark.parametrize("text", ['{"messages":[]}', '"history"', "42", "true"])
def test_a_top_level_that_is_not_an_array_says_so(text: str) -> None:
    with pytest.raises(ValueError, match="history must be a JSON array of messages"):
        loads_history(text)


@pytest.mark.parametrize(
    "text",
    ["", "[", '[{"role":"user"},]', "not json", '[{"role":"user","content":"x}]', "[NaN]"],
)
def test_malformed_json_says_it_is_not_json(text: str) -> None:
    with pytest.raises(ValueError, match="history is not valid JSON"):
        loads_history(text)


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
@pytest.mark.parametrize("where", ["args", "x"])
def test_non_finite_numbers_are_rejected_everywhere(literal: str, where: str) -> None:
    text = (
        '[{"role":"assistant","toolCalls":[{"id":"c","name":"n","'
        + where
        + '":{"v":'
        + literal
        + "}}]}]"
    )
    with pytest.raises(ValueError, match="not valid JSON"):
        loads_history(text)


def test_invalid_utf8_reads_as_the_go_golem_reads_it() -> None:
    # ADR 0075 (was a ValueError): Go reads each byte that is not UTF-8 as U+FFFD
    assert loads_history(b'[{"role":"user","content":"\xff"}]')[0].content == "\ufffd"
    assert loads_history(b'[{"role":"user","content":"a\xe2\x82b"}]')[0].content == (
        "a\ufffd\ufffdb"
    )


def test_invalid_utf8_inside_args_reads_as_u_fffd() -> None:
    # ADR 0075 (was "tool call args are not UTF-8"): the Go golem writes args' bytes as they
    # are, so a history it wrote can hold them; its tools read each bad byte as U+FFFD
    text = b'[{"role":"user"},{"role":"assistant","toolCalls":[{"args":{"a":"\xed\xa0\x80"}}]}]'
    assert loads_history(text)[1].tool_calls[0].args == '{"a":"\ufffd\ufffd\ufffd"}'


def test_a_non_text_argument_is_a_type_error() -> None:
    # A programming error, as json.loads(None) is: not "any input" text.
    with pytest.raises(TypeError):
        loads_history(None)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- lone surrogates

SURROGATE_PLACES = [
    ('{"role":"user","content":%s}', "content"),
    ('{"role":"tool","toolCallId":%s}', "toolCallId"),
    (
        '{"role":"assistant","toolCalls":[{"id":"c","name":"n","args":{"a":%s}}]}',
        "toolCalls[0].args.a",
    ),
    (
        '{"role":"assistant","toolCalls":[{"id":"c","name":"n","args":[%s]}]}',
        "toolCalls[0].args[0]",
    ),
    ('{"role":"assistant","toolCalls":[{"id":"c","name":"n","args":%s}]}', "toolCalls[0].args"),
    ('{"role":"assistant","thinking":[{"text":%s}]}', "thinking[0].text"),
    ('{"role":"user","x":{"y":%s}}', "x.y"),
]


TEXT_PLACES = [
    ('{"role":"user","content":%s}', "content"),
    ('{"role":"tool","toolCallId":%s}', "toolCallId"),
    ('{"role":"assistant","thinking":[{"text":%s}]}', "thinking[0].text"),
    ('{"role":"user","parts":[{"kind":"image","url":%s}]}', "parts[0].url"),
    ('{"role":"assistant","toolCalls":[{"id":"c","name":%s,"args":{}}]}', "toolCalls[0].name"),
    ('{"role":"assistant","citations":[{"citedText":%s}]}', "citations[0].citedText"),
]
"""Text fields: an escaped lone surrogate there is refused. In tool-call args (raw bytes) and
in unknown keys it is not: see tests/test_contract_history_json.py (ADR 0047)."""


@pytest.mark.parametrize(("template", "field"), TEXT_PLACES)
@pytest.mark.parametrize("spelling", ['"\\ud800"', '"a\\udfff"', '"\\ude00\\ud83d"'])
def test_an_escaped_lone_surrogate_is_a_value_error_naming_message_and_field(
    template: str, field: str, spelling: str
) -> None:
    text = "[" + json.dumps(GOOD) + "," + template % spelling + "]"
    for form in (text, text.encode()):
        with pytest.raises(ValueError, match=r"^history message 1: ") as info:
            loads_history(form)
        assert f"{field} holds a lone surrogate" in str(info.value)


@pytest.mark.parametrize(("template", "field"), SURROGATE_PLACES)
def test_a_raw_lone_surrogate_in_text_is_a_value_error_naming_message_and_field(
    template: str, field: str
) -> None:
    text = "[" + json.dumps(GOOD) + "," + template % '"\ud800"' + "]"
    with pytest.raises(ValueError, match=r"^history message 1: ") as info:
        loads_history(text)
    assert f"{field} holds a lone surrogate" in str(info.value)


def test_raw_surrogate_bytes_read_as_u_fffd() -> None:
    # ADR 0075 (was "content holds a lone surrogate"): a surrogate encoded as UTF-8 is not
    # UTF-8; Go reads its three bytes as three U+FFFD. An *escaped* one is still refused.
    text = '[{"role":"user","content":"\ud800"}]'.encode("utf-8", "surrogatepass")
    assert loads_history(text)[0].content == "\ufffd" * 3


def test_a_surrogate_pair_is_fine() -> None:
    assert loads_history('[{"role":"user","content":"\\ud83d\\ude00"}]')[0].content == "😀"


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
    ],
)
def test_dumps_refuses_a_lone_surrogate_naming_message_and_field(
    message: Message, field: str
) -> None:
    with pytest.raises(ValueError, match=r"^history message 2: " + re.escape(field)):
        dumps_history([Message(role="user"), Message(role="user"), message])


def test_escaped_surrogate_text_in_args_is_plain_text_and_round_trips() -> None:
    # The six characters \ud800 are ASCII: such args are not JSON golem embeds (a lone
    # surrogate escape), so they travel as a string and come back byte for byte.
    args = '{"a":"\\ud800"}'
    history = [Message(role="assistant", tool_calls=[ToolCall("c", "n", args)])]
    assert loads_history(dumps_history(history)) == history


@pytest.mark.parametrize("value", [None, [], {}, 42])
def test_a_value_that_is_not_json_text_is_a_type_error_that_says_so(value: object) -> None:
    with pytest.raises(TypeError, match=r"JSON text of a history \(str or bytes\), got"):
        loads_history(value)  # type: ignore[arg-type]


def test_bytes_like_json_text_loads() -> None:
    text = dumps_history([Message(role="user", content="hi")])
    for data in (text.encode(), bytearray(text.encode()), memoryview(text.encode())):
        assert loads_history(data) == [Message(role="user", content="hi")]  # type: ignore[arg-type]
