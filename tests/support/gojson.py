"""A Go writer, a Go reader and Go-written history strategies the history contract tests share."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

from hypothesis import strategies as st

from golem import Message, ToolCall
from golem.messages import Part, ThinkingBlock

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


def literals_decoded(args: list[list[str]]) -> list[list[str]]:
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


def same_tokens(a: str, b: str) -> bool:
    """Whether two JSON texts are the same tokens: whitespace and string escapes aside, key
    order, duplicate keys and number spellings counting (what a resume compares args by)."""

    def tokens(text: str) -> Any:
        return json.loads(
            text, object_pairs_hook=list, parse_float=str, parse_int=str, parse_constant=str
        )

    try:
        return bool(tokens(a) == tokens(b))
    except ValueError:
        return a == b

