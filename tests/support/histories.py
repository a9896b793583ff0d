"""History strategies and damage the history codec tests share (Hypothesis)."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import strategies as st

from golem import HistoryError, dumps_history
from golem.messages import Message, Part, ThinkingBlock, ToolCall
from tests._json_paths import json_paths

MESSAGE_KEYS = (  # Go's struct order  # noqa: SIM905
    "role content parts toolCalls toolCallId toolName failed thinking runId conversationId"
).split()
CALL_KEYS = ["id", "name", "args", "signature"]
PART_KEYS = ["kind", "url", "data", "mediaType"]
THINKING_KEYS = ["text", "signature", "redacted"]
GO_FIXTURE = Path(__file__).parent.parent / "fixtures" / "go_paused_history.json"

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
# Spellings of numbers no float keeps; whitespace and escapes no re-encoder keeps.
odd_numbers = st.sampled_from(
    ["1e400", "-1E-400", "-0.0", "0.10", "1.0e+2", "123456789012345678901234567890", "1E2"]
)
spaces = st.sampled_from(["", " ", "\n", "\t", "  \r\n"])


@st.composite
def odd_json(draw: st.DrawFn) -> str:
    """JSON text a model could send that a decode/encode cycle would not keep."""
    items = draw(
        st.lists(
            st.tuples(st.text(max_size=4), odd_numbers | json_values.map(json.dumps)),
            max_size=4,
        )
    )
    dup = draw(st.booleans())
    if dup and items:
        items.append(items[0])  # a duplicate key
    sp = draw(spaces)
    ascii_only = draw(st.booleans())
    body = f",{sp}".join(f"{json.dumps(k, ensure_ascii=ascii_only)}{sp}:{sp}{v}" for k, v in items)
    return "{" + sp + body + sp + "}"


no_surrogates = st.characters(blacklist_categories=["Cs"])
any_args = (
    odd_json()
    | json_values.map(json.dumps)
    | json_values.map(lambda v: json.dumps(v, indent=1, ensure_ascii=False))
    | json_values.map(lambda v: json.dumps(json.dumps(v)))  # a string holding JSON
    | st.text(no_surrogates, max_size=16)  # truncated / not JSON at all
    | json_values.map(json.dumps).flatmap(  # a stream cut off anywhere: a prefix of JSON
        lambda t: st.integers(0, len(t)).map(lambda n: t[:n])
    )
    | st.just("")
)
short = st.text(no_surrogates, max_size=8)


def parts(*, empty: bool) -> st.SearchStrategy[Part]:
    """Parts; `empty=True` also draws "" and b"", which JSON cannot tell from None."""
    size = 0 if empty else 1
    return st.builds(
        Part,
        kind=st.sampled_from(["image", "document", "audio", "video", "text"]),
        url=st.none() | st.text(no_surrogates, min_size=size, max_size=8),
        data=st.none() | st.binary(min_size=size, max_size=6),
        media_type=st.none() | st.text(no_surrogates, min_size=size, max_size=8),
        text=st.just("") | st.text(no_surrogates, max_size=8),  # text parts, and odd mixes
        signature=st.just("") | st.text(no_surrogates, max_size=8),  # ADR 0060
    )


def histories(*, empty_parts: bool = False) -> st.SearchStrategy[list[Message]]:
    """Any history golem holds: odd args, parts, thinking, seals (the codec's own strategy)."""
    return st.lists(
        st.builds(
            Message,
            role=st.sampled_from(["system", "user", "assistant", "tool"]),
            content=short,
            parts=st.lists(parts(empty=empty_parts), max_size=2),
            tool_calls=st.lists(
                st.builds(
                    ToolCall, id=short, name=short, args=any_args, signature=short, seal=short
                ),
                max_size=3,
            ),
            tool_call_id=short,
            tool_name=short,
            failed=st.booleans(),
            thinking=st.lists(
                st.builds(ThinkingBlock, text=short, signature=short, redacted=short), max_size=2
            ),
            run_id=short,
            conversation_id=short,
        ),
        max_size=6,
    )


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
    | st.sampled_from(["user", "assistant", "tool", "system", "robot", "", "\x00", "\ufeff"]),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
SPLICES = [
    b"1e999999",
    b"-1e999999",
    b"9" * 5000,
    b"null",
    b"[]",
    b"{}",
    b'"\\ud800"',
    b'"\\udc00\\ud800"',
    b"\x00",
    b"\xef\xbb\xbf",
    b"\xff",
    b"\xc3",
    b"\xed\xa0\x80",  # a surrogate encoded as UTF-8: not UTF-8
    b'"role":"tool",',
    b'"args":',
    b"NaN",
]


@st.composite
def damaged(draw: st.DrawFn) -> bytes:
    """A valid history document with one to three kinds of damage."""
    if draw(st.integers(0, 4)) == 0:
        text = GO_FIXTURE.read_bytes()  # the recorded document (besides drawn histories)
    else:
        try:
            text = dumps_history(draw(histories())).encode()
        except HistoryError:  # a drawn lone surrogate: not a history golem can write
            text = b"[]"
    for _ in range(draw(st.integers(1, 3))):
        how = draw(
            st.sampled_from(["flip", "cut", "splice", "value", "swap", "duplicate", "prefix"])
        )
        if how == "flip" and text:
            i = draw(st.integers(0, len(text) - 1))
            bit = 1 << draw(st.integers(0, 7))
            text = text[:i] + bytes([text[i] ^ bit]) + text[i + 1 :]
        elif how == "cut":
            text = text[: draw(st.integers(0, len(text)))]
        elif how == "splice":
            i = draw(st.integers(0, len(text)))
            text = text[:i] + draw(st.sampled_from(SPLICES)) + text[i:]
        elif how == "prefix":
            text = draw(st.sampled_from([b"\xef\xbb\xbf", b"\x00", b" ", b"\xff"])) + text
        else:
            try:
                value = json.loads(text)
            except ValueError:
                continue
            paths = json_paths(value)[1:]
            if not paths:
                continue
            path = draw(st.sampled_from(paths))
            parent = value
            for key in path[:-1]:
                parent = parent[key]
            if how == "duplicate" and isinstance(parent, dict):
                # the same key twice, the first with another value (JSON allows it; the last wins)
                first = json.dumps({path[-1]: draw(JSON_VALUES)}, separators=(",", ":"))[1:-1]
                rest = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
                key = json.dumps(path[-1], ensure_ascii=False) + ":"
                assert key in rest
                text = rest.replace(key, first + "," + key, 1).encode("utf-8", "surrogatepass")
                continue
            if how == "swap":  # a value of another type in the same place
                parent[path[-1]] = draw(
                    JSON_VALUES.filter(lambda v, old=parent[path[-1]]: type(v) is not type(old))
                )
            elif isinstance(parent, dict) and draw(st.booleans()):
                parent[
                    draw(st.sampled_from(["role", "content", "toolCalls", "args", "parts", "x"]))
                ] = draw(JSON_VALUES)
            else:
                parent[path[-1]] = draw(JSON_VALUES)
            text = json.dumps(value, ensure_ascii=draw(st.booleans())).encode(
                "utf-8", "surrogatepass"
            )
    return text
