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

import base64
import json
import re
from collections.abc import Iterator
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

PROPERTY = settings(deadline=None)

# --------------------------------------------------------------------------- a Go writer

_GO_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\b": "\\b",
    "\f": "\\f",
    "<": "\\u003c",
    ">": "\\u003e",
    "&": "\\u0026",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}


def go_string(text: str) -> str:
    """A string as Go's encoder writes it (HTML-safe escaping on)."""
    out = []
    for ch in text:
        if ch in _GO_ESCAPES:
            out.append(_GO_ESCAPES[ch])
        elif ord(ch) < 0x20:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def go_compact(raw: str) -> str:
    """`json.Compact` with HTML escaping, as Go applies it to a `RawMessage` it writes:
    whitespace between tokens goes, `<`, `>`, `&`, U+2028/U+2029 in strings are escaped,
    every other byte (number spellings, escapes, duplicate keys) stays."""
    return "".join(
        (_GO_ESCAPES[ch] if ch in "<>&\u2028\u2029" else ch)
        if inside
        else ("" if ch in " \t\n\r" else ch)
        for ch, inside, _ in _scan(raw)
    )


def _scan(text: str) -> Iterator[tuple[str, bool, bool]]:
    """Each character of JSON `text`, whether it is part of a string literal (quotes
    included), and whether the text after it is inside one."""
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            yield ch, True, in_string
        else:
            in_string = ch == '"'
            yield ch, in_string, in_string


def go_message(m: dict[str, Any], unknown: list[tuple[int, str, str]] = ()) -> str:  # type: ignore[assignment]
    """One message object: `m` holds Go field values by JSON key, in struct order;
    `unknown` inserts `(position, key, raw value)` pairs Go's reader must skip."""
    fields: list[tuple[str, str]] = []
    for key, value in m.items():
        fields.append((key, value))
    for position, key, raw in unknown:
        fields.insert(min(position, len(fields)), (key, raw))
    return "{" + ",".join(f"{go_string(k)}:{v}" for k, v in fields) + "}"


# --------------------------------------------------------------------------- a Go reader


def go_read(text: str) -> list[dict[str, Any]]:
    """What Go's reader makes of a history document, as plain values: unknown keys dropped,
    `null` as zero, args as their raw bytes (compared byte for byte)."""
    messages = json.loads(text)
    out = []
    for m in messages or []:
        out.append(
            {
                "role": m.get("role") or "",
                "content": m.get("content") or "",
                "toolCallId": m.get("toolCallId") or "",
                "toolName": m.get("toolName") or "",
                "failed": bool(m.get("failed")),
                "runId": m.get("runId") or "",
                "conversationId": m.get("conversationId") or "",
                "calls": [
                    (c.get("id") or "", c.get("name") or "", c.get("signature") or "")
                    for c in m.get("toolCalls") or []
                ],
                "parts": [
                    (
                        p.get("kind") or "",
                        p.get("url") or "",
                        base64.b64decode(p["data"], validate=True) if p.get("data") else b"",
                        p.get("mediaType") or "",
                    )
                    for p in m.get("parts") or []
                ],
                "thinking": [
                    (t.get("text") or "", t.get("signature") or "", t.get("redacted") or "")
                    for t in m.get("thinking") or []
                ],
            }
        )
    return out


def raw_args(text: str) -> list[list[str]]:
    """Each call's `args` bytes as they stand in a document, per message: the value after
    each `"args":` key (found with the stdlib decoder's end offset)."""
    decoder = json.JSONDecoder()
    out: list[list[str]] = [[] for _ in json.loads(text) or []]
    at = 0
    while (found := text.find('"args":', at)) >= 0:
        in_string, index = _position(text, found)
        if in_string:
            at = found + 1
            continue
        start = found + len('"args":')
        _, end = decoder.raw_decode(text, start)
        out[index].append(text[start:end])
        at = end
    return out


def _literals_decoded(args: list[list[str]]) -> list[list[str]]:
    """`raw_args` with each string literal replaced by its value (other args as bytes)."""
    return [[json.loads(a) if a.startswith('"') else a for a in m] for m in args]


def _position(text: str, offset: int) -> tuple[bool, int]:
    """Whether `offset` falls inside a string literal of the document, and the 0-based index
    of the top-level message object containing it."""
    depth = 0
    index = -1
    state = ("", False, False)
    for state in _scan(text[:offset]):
        ch, inside, _ = state
        if inside:
            continue
        if ch in "[{":
            depth += 1
            if depth == 2 and ch == "{":
                index += 1
        elif ch in "]}":
            depth -= 1
    return state[2], index


# --------------------------------------------------------------------------- strategies

LONE = ["\\ud800", "\\udbff", "\\udc00", "\\uDFFF", "\\uD83D"]
text_chars = st.characters(blacklist_categories=["Cs"])
texts = st.text(text_chars, max_size=10) | st.sampled_from(
    ["<b>&amp;</b>", "\u2028\u2029", "😀 Zoë", "\x00\x1f\x7f", 'a\\b"c', ""]
)


@st.composite
def json_texts(draw: st.DrawFn, depth: int = 0) -> str:
    """A JSON value as a model may spell it, including what only raw bytes keep."""
    if depth < 2 and draw(st.booleans()):
        if draw(st.booleans()):
            items = draw(st.lists(json_texts(depth + 1), max_size=3))
            return "[" + draw(st.sampled_from([",", ", "])).join(items) + "]"
        keys = draw(st.lists(st_string(), max_size=3))
        if keys and draw(st.booleans()):
            keys.append(keys[0])  # a duplicate key: Go keeps both in the raw bytes
        items = [f"{k}:{draw(json_texts(depth + 1))}" for k in keys]
        return "{" + draw(st.sampled_from([",", " , "])).join(items) + "}"
    return draw(
        st.sampled_from(
            [
                "1e400",
                "-0.0",
                "123456789012345678901234567890",
                "9007199254740993",
                "-1E-400",
                "0.10",
                "true",
                "null",
            ]
        )
        | st_string()
        | st.integers(-(2**70), 2**70).map(str)
        | st.floats(allow_nan=False, allow_infinity=False).map(repr)
    )


@st.composite
def st_string(draw: st.DrawFn) -> str:
    """A JSON string literal: plain, escaped as Go or Python escape, with surrogate pairs
    and escaped lone surrogates (JSON's grammar allows them; Go's decoder keeps them)."""
    pieces = draw(
        st.lists(
            texts.map(lambda t: go_string(t)[1:-1])
            | texts.map(lambda t: json.dumps(t)[1:-1])
            | st.sampled_from(LONE)
            | st.just("\\ud83d\\ude00")
            | st.just("\\\\ud800"),  # an escaped backslash, then text
            max_size=3,
        )
    )
    return '"' + "".join(pieces) + '"'


@st.composite
def go_call(draw: st.DrawFn) -> tuple[str, ToolCall]:
    """A tool call as Go writes it, and the `ToolCall` golem must load from it."""
    call_id, name, sig = draw(texts), draw(texts), draw(st.sampled_from(["", "sig=="]))
    shape = draw(st.sampled_from(["object", "any", "empty", "null"]))
    if shape == "object":
        raw = go_compact(draw(json_texts().filter(lambda t: t.startswith("{")) | json_texts()))
    elif shape == "any":
        raw = go_compact(draw(json_texts()))
    elif shape == "empty":
        raw = "{}"
    else:
        raw = "null"
    fields = {"id": go_string(call_id), "name": go_string(name), "args": raw}
    if sig:
        fields["signature"] = go_string(sig)
    expected_args = "" if raw == "null" else raw
    if raw.startswith('"') and raw != '""':  # `""` stays `""` (ADR 0047)
        # a RawMessage holding a string literal: golem reads the content when the content
        # is not JSON (ADR 0015) — unless it is not text either (a lone surrogate, ADR 0047)
        content = json.loads(raw)
        try:
            content.encode()
            json.loads(content)
        except UnicodeEncodeError:
            pass
        except ValueError:
            expected_args = content
        else:
            expected_args = raw if _strict_json_no_ws(content) else content
    doc = "{" + ",".join(f"{go_string(k)}:{v}" for k, v in fields.items()) + "}"
    return doc, ToolCall(call_id, name, expected_args, sig)


def _strict_json_no_ws(text: str) -> bool:
    """The test golem applies to a string's content (ADR 0015): one JSON value (RFC 8259: no
    lone surrogate escape), no whitespace around it, not null, not itself a plain string."""
    if not text or text[0] in " \t\n\r" or text[-1] in " \t\n\r" or text == "null":
        return False
    try:
        value = json.loads(text, parse_constant=_reject)
    except ValueError:
        return False
    if any(
        e in text.lower()
        for e in ("\\ud8", "\\ud9", "\\uda", "\\udb", "\\udc", "\\udd", "\\ude", "\\udf")
    ):
        try:
            json.dumps(value).encode()
            _no_lone(value)
        except (UnicodeEncodeError, ValueError):
            return False
    if isinstance(value, str):
        return _strict_json_no_ws(value)
    return True


def _no_lone(value: Any) -> None:
    if isinstance(value, str):
        value.encode()
    elif isinstance(value, list):
        for v in value:
            _no_lone(v)
    elif isinstance(value, dict):
        for k, v in value.items():
            _no_lone(k)
            _no_lone(v)


def _reject(name: str) -> Any:
    raise ValueError(name)


unknown_values = st.sampled_from(
    [
        "1e400",
        "123456789012345678901234567890",
        "-0.0",
        "null",
        '"\\ud800"',
        '{"nested":[{"x":[1,2,{"y":"\\udfff"}]}]}',
        '"future"',
        "[]",
        "true",
    ]
)


@st.composite
def go_history(draw: st.DrawFn) -> tuple[str, list[Message]]:
    """A Go-written history document and the messages golem must load from it."""
    docs: list[str] = []
    messages: list[Message] = []
    for _ in range(draw(st.integers(0, 4))):
        role = draw(st.sampled_from(["system", "user", "assistant", "tool"]))
        fields: dict[str, str] = {"role": go_string(role)}
        kwargs: dict[str, Any] = {"role": role}
        content = draw(texts)
        if content:
            fields["content"] = go_string(content)
            kwargs["content"] = content
        elif draw(st.booleans()):
            fields["content"] = "null"  # not what Go writes, what Go reads as ""
        if role in ("user", "tool") and draw(st.booleans()):
            data = draw(st.binary(min_size=1, max_size=8))
            fields["parts"] = (
                '[{"kind":"image","data":'
                + go_string(base64.b64encode(data).decode())
                + ',"mediaType":"image/png"},{"kind":"document","url":'
                + go_string("https://x.test/a?b=1&c=<2>")
                + "}]"
            )
            kwargs["parts"] = [
                Part("image", data=data, media_type="image/png"),
                Part("document", url="https://x.test/a?b=1&c=<2>"),
            ]
        if role == "assistant":
            calls = draw(st.lists(go_call(), max_size=3))
            if calls:
                fields["toolCalls"] = "[" + ",".join(doc for doc, _ in calls) + "]"
                kwargs["tool_calls"] = [c for _, c in calls]
            if draw(st.booleans()):
                fields["thinking"] = '[{"text":' + go_string("why <not>") + ',"signature":"c2ln"}]'
                kwargs["thinking"] = [ThinkingBlock(text="why <not>", signature="c2ln")]
        if role == "tool":
            call_id = draw(texts)
            if call_id:
                fields["toolCallId"] = go_string(call_id)
                kwargs["tool_call_id"] = call_id
            fields["toolName"] = go_string("stat_file")
            kwargs["tool_name"] = "stat_file"
            if draw(st.booleans()):
                fields["failed"] = "true"
                kwargs["failed"] = True
        if draw(st.booleans()):
            fields["runId"] = go_string("01912f4e-8b2a-7c41-9d3e-2f6a5b8c7d10")
            fields["conversationId"] = go_string("01912f4e-8b29-7a10-8c2d-1e5f4a3b2c01")
            kwargs["run_id"] = "01912f4e-8b2a-7c41-9d3e-2f6a5b8c7d10"
            kwargs["conversation_id"] = "01912f4e-8b29-7a10-8c2d-1e5f4a3b2c01"
        unknown = draw(
            st.lists(
                st.tuples(
                    st.integers(0, 12),
                    st.sampled_from(["futureKey", "annotations", "x"]),
                    unknown_values,
                ),
                max_size=2,
                unique_by=lambda t: t[1],
            )
        )
        docs.append(go_message(fields, unknown))
        messages.append(Message(**kwargs))
    return "[" + ",".join(docs) + "]", messages


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
    assert _literals_decoded(raw_args(ours)) == _literals_decoded(raw_args(document))
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


@pytest.mark.parametrize(
    ("message", "where"),
    [
        ('{"role":"user","content":"\\ud800","x":"\\udfff"}', "content"),
        (
            '{"role":"assistant","toolCalls":[{"id":"\\ud800","name":"n","args":{"a":"\\ud800"}}]}',
            "toolCalls[0].id",
        ),
        ('{"role":"tool","toolName":"\\udc00","toolCallId":"c"}', "toolName"),
        (
            '{"role":"assistant","serverTools":[{"provider":"p","type":"\\ud800"}]}',
            "serverTools[0].type",
        ),
    ],
)
def test_a_lone_surrogate_in_a_text_field_is_still_refused(message: str, where: str) -> None:
    # text fields are text: a lone surrogate there could never be saved (issue 12)
    document = '[{"role":"user","content":"ok"},' + message + "]"
    expected = rf"^history message 1: {re.escape(where)} holds a lone surrogate"
    with pytest.raises(ValueError, match=expected):
        loads_history(document)
    with pytest.raises(ValueError, match=expected):
        loads_history(document.encode())


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
