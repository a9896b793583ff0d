"""The message model of a conversation and its Go-compatible JSON form (`dumps_history`,
`loads_history`: args embedded byte for byte, golem's additive keys ignored by Go); the
rules: docs/adr/0015-history-codec.md."""

from __future__ import annotations

import codecs
import gc
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, is_dataclass, replace
from typing import Any, Literal

import msgspec

from golem.errors import HistoryError

__all__ = [
    "MAX_ARGS_DEPTH",
    "MAX_NESTING",
    "PART_KINDS",
    "ROLES",
    "Citation",
    "Message",
    "Part",
    "Role",
    "ServerToolBlock",
    "ThinkingBlock",
    "ToolCall",
    "dumps_history",
    "loads_history",
]

Role = Literal["system", "user", "assistant", "tool"]
ROLES: frozenset[str] = frozenset(("system", "user", "assistant", "tool"))
PART_KINDS: frozenset[str] = frozenset(("image", "document", "audio", "video", "text"))
MAX_ARGS_DEPTH = 128
"""Args nested deeper than this are written as a JSON string of their text, not embedded."""
MAX_NESTING = 10_000
"""The deepest nesting a history document may have: the Go golem's (`encoding/json`)."""


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call requested by the model."""

    id: str
    """Call ID assigned by the model (provider); resolutions and results refer to it."""
    name: str
    """Name of the tool to call."""
    args: str = "{}"
    """Arguments as raw JSON text, exactly as the model produced it (may be truncated)."""
    signature: str = ""
    """Opaque provider signature bound to the call (Gemini thought signatures)."""
    seal: str = ""
    """golem's seal on a pending call (`golem.seal`); the Go golem ignores the key."""


@dataclass(frozen=True, slots=True)
class Part:
    """An image, document, audio or video beside a message's `content`, or a text part
    between them. A media part has exactly one of `url` and `data` (which needs a
    `media_type`); a "text" part has `text` and nothing else."""

    kind: str
    """One of "image", "document", "audio", "video", "text"."""
    url: str | None = None
    """Where the content lives (http/https for content from untrusted sources)."""
    data: bytes | None = None
    """Inline content (base64 in JSON)."""
    media_type: str | None = None
    """MIME type, required with `data` (for example "image/png")."""
    text: str = ""
    """The text of a "text" part (JSON key "text"; absent for media parts)."""
    signature: str = ""
    """Opaque provider signature on a media part a model produced (ADR 0060)."""

    def problem(self) -> str | None:
        """Describe why the part is invalid, or return None when it is valid."""
        if self.kind not in PART_KINDS:
            return f'unknown part kind "{self.kind}" (want image, document, audio, video or text)'
        if self.kind == "text":
            if self.url or self.data is not None or self.media_type or self.signature:
                return "a text part has only text (no url, data, media_type or signature)"
            if self.text:
                return None
            return (
                "a text part needs text (a history the Go golem re-wrote has lost it: Go keeps "
                "no text of a part; sanitize_history drops such parts and reports them)"
            )
        if self.text:
            return f"a {self.kind} part has no text (put text in a text part)"
        has_url, has_data = bool(self.url), self.data is not None
        if has_url == has_data:
            return "a part needs exactly one of url and data"
        if has_data and not self.media_type:
            return "a data part needs a media_type"
        return None


@dataclass(frozen=True, slots=True)
class ThinkingBlock:
    """A reasoning block the model produced; replayed to the provider on later turns."""

    text: str = ""
    """Visible reasoning text."""
    signature: str = ""
    """Provider signature that authenticates `text` on replay."""
    redacted: str = ""
    """Opaque redacted reasoning (set instead of `text`)."""


@dataclass(frozen=True, slots=True)
class Citation:
    """A source the provider cites for a span of an assistant message's `content` (ADR 0028);
    `raw` keeps the provider's own object so the same provider can receive it again."""

    start: int = 0
    """Where the cited span starts in `Message.content` (a `str` index)."""
    end: int = 0
    """Where the cited span ends (exclusive); equal to `start` for a citation at a point."""
    url: str = ""
    """The cited page or file URL, when the source has one."""
    title: str = ""
    """The title of the page or document (or the file name), when the provider gives one."""
    cited_text: str = ""
    """The text quoted from the source, when the provider gives it (JSON key "citedText")."""
    provider: str = ""
    """The provider that made the citation: "anthropic", "openai", "openai-responses", "gemini"."""
    raw: str = ""
    """The provider's citation object as JSON text, exactly as received."""


@dataclass(frozen=True, slots=True)
class ServerToolBlock:
    """The call or result of a tool the provider ran itself (web search, code execution, ...),
    kept as sent and sent back verbatim to the same provider only (ADR 0028)."""

    provider: str
    """The provider that ran the tool: "anthropic", "openai-responses" or "gemini"."""
    type: str
    """The provider's block type, e.g. "server_tool_use", "web_search_call"."""
    id: str = ""
    """The ID of the call (a result carries the ID of the call it answers)."""
    name: str = ""
    """The tool's name where the provider gives one ("web_search", "code_execution", ...)."""
    raw: str = ""
    """The provider's block as JSON text, exactly as received; what is sent back."""
    at: int = 0
    """Where the block sat in the message: the length of `content` before it."""
    thinking_before: int = 0
    """How many of the message's thinking blocks came before it (JSON key "thinkingBefore")."""

    def data(self) -> Any:
        """The block as a JSON value (`raw` parsed); `ValueError` when `raw` is not JSON."""
        return json.loads(self.raw)


@dataclass(frozen=True, slots=True)
class Message:
    """One message of a conversation; immutable, and golem never mutates its lists."""

    role: Role
    """"system", "user", "assistant" or "tool"."""
    content: str = ""
    """Text of the message."""
    parts: list[Part] = field(default_factory=list)
    """Images, documents, audio, video (and text parts between them)."""
    tool_calls: list[ToolCall] = field(default_factory=list)
    """Tool calls requested by an assistant message, in emission order."""
    tool_call_id: str = ""
    """On a tool message: the ID of the call it answers."""
    tool_name: str = ""
    """On a tool message: the name of the tool that was called."""
    failed: bool = False
    """On a tool message: the tool reported a definitive failure (`Failed`)."""
    thinking: list[ThinkingBlock] = field(default_factory=list)
    """Reasoning blocks of an assistant message."""
    run_id: str = ""
    """ID of the run that added this message."""
    conversation_id: str = ""
    """ID of the conversation this message belongs to."""
    citations: list[Citation] = field(default_factory=list)
    """Sources the provider cited for spans of `content` (assistant messages)."""
    server_tools: list[ServerToolBlock] = field(default_factory=list)
    """Blocks of tools the provider ran itself, in arrival order (JSON key "serverTools")."""


# The run loop builds a message per turn and per tool result: it sets the slots directly
# (half the cost of the frozen dataclass's `__init__`), which builds an equal `Message`.
_SET = tuple(getattr(Message, name).__set__ for name in Message.__slots__)
(_ROLE, _CONTENT, _PARTS, _CALLS, _CALL_ID, _TOOL, _FAILED, _THINKING, _RUN, _CONV, _CITES,
 _SERVER) = _SET


def _message(
    role: Role,
    content: str,
    parts: list[Part],
    tool_calls: list[ToolCall],
    tool_call_id: str,
    tool_name: str,
    failed: bool,
    thinking: list[ThinkingBlock],
    run_id: str,
    conversation_id: str,
    citations: list[Citation],
    server_tools: list[ServerToolBlock],
) -> Message:
    """A `Message` of its twelve fields, in order."""
    m = object.__new__(Message)
    _ROLE(m, role)
    _CONTENT(m, content)
    _PARTS(m, parts)
    _CALLS(m, tool_calls)
    _CALL_ID(m, tool_call_id)
    _TOOL(m, tool_name)
    _FAILED(m, failed)
    _THINKING(m, thinking)
    _RUN(m, run_id)
    _CONV(m, conversation_id)
    _CITES(m, citations)
    _SERVER(m, server_tools)
    return m


def new_message(
    role: Role,
    content: str = "",
    parts: list[Part] | None = None,
    tool_calls: list[ToolCall] | None = None,
    tool_call_id: str = "",
    tool_name: str = "",
    failed: bool = False,
    run_id: str = "",
    conversation_id: str = "",
) -> Message:
    """`Message(...)` with positional fields; a list not given is a new empty list."""
    return _message(
        role,
        content,
        [] if parts is None else parts,
        [] if tool_calls is None else tool_calls,
        tool_call_id,
        tool_name,
        failed,
        [],
        run_id,
        conversation_id,
        [],
        [],
    )


def stamped(m: Message, run_id: str, conversation_id: str, role: Role | None = None) -> Message:
    """`m` with `run_id`, `conversation_id` (and `role`, when given); the lists are shared."""
    if type(m) is not Message:  # a subclass: `replace` knows its fields
        if role is None:
            return replace(m, run_id=run_id, conversation_id=conversation_id)
        return replace(m, role=role, run_id=run_id, conversation_id=conversation_id)
    return _message(
        m.role if role is None else role,
        m.content,
        m.parts,
        m.tool_calls,
        m.tool_call_id,
        m.tool_name,
        m.failed,
        m.thinking,
        run_id,
        conversation_id,
        m.citations,
        m.server_tools,
    )


def with_calls(m: Message, tool_calls: list[ToolCall]) -> Message:
    """`m` with `tool_calls` replaced; the other lists are shared."""
    if type(m) is not Message:
        return replace(m, tool_calls=tool_calls)
    tail = (m.tool_call_id, m.tool_name, m.failed, m.thinking, m.run_id, m.conversation_id)
    return _message(m.role, m.content, m.parts, tool_calls, *tail, m.citations, m.server_tools)


# --------------------------------------------------------------------------- the wire form
# One private struct per concept gives msgspec the JSON keys and types, both ways. Fields
# accept `null` (read as the default); `args` and `raw` are `msgspec.Raw`: the value's bytes.
_EMPTY = msgspec.Raw()


class _Wire(msgspec.Struct, rename="camel", omit_defaults=True, gc=False): ...


class _Part(_Wire):
    kind: str | None = ""
    url: str | None = None
    data: bytes | None = None
    media_type: str | None = None
    text: str | None = ""
    signature: str | None = ""


class _Call(_Wire):
    id: str | None = ""
    name: str | None = ""
    args: msgspec.Raw = _EMPTY
    signature: str | None = ""
    seal: str | None = ""


class _Thinking(_Wire):
    text: str | None = ""
    signature: str | None = ""
    redacted: str | None = ""


class _Citation(_Wire):
    start: int | None = 0
    end: int | None = 0
    url: str | None = ""
    title: str | None = ""
    cited_text: str | None = ""
    provider: str | None = ""
    raw: msgspec.Raw = _EMPTY


class _ServerTool(_Wire):
    provider: str | None = ""
    type: str | None = ""
    id: str | None = ""
    name: str | None = ""
    raw: msgspec.Raw = _EMPTY
    at: int | None = 0
    thinking_before: int | None = 0


class _Message(_Wire):
    role: str
    content: str | None = ""
    parts: Sequence[_Part] | None = ()
    tool_calls: Sequence[_Call] | None = ()
    tool_call_id: str | None = ""
    tool_name: str | None = ""
    failed: bool | None = False
    thinking: Sequence[_Thinking] | None = ()
    run_id: str | None = ""
    conversation_id: str | None = ""
    citations: Sequence[_Citation] | None = ()
    server_tools: Sequence[_ServerTool] | None = ()


_DECODER = msgspec.json.Decoder(list[_Message] | None)
_ENCODER = msgspec.json.Encoder()
_RAW = msgspec.json.Decoder(msgspec.Raw)
_STR = msgspec.json.Decoder(str)
_NULL = msgspec.Raw(b"null")
_MESSAGES = list[Message]


# --------------------------------------------------------------------------- raw values


def _depth(text: str) -> int:
    """How deep the brackets of the JSON `text` nest (strings skipped)."""
    deepest = depth = 0
    for ch in re.findall(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', text):
        if ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def _embeddable(args: str, top: bool = True) -> msgspec.Raw | None:
    """`args` as the raw JSON value to embed verbatim, or None when written as a JSON string
    (not one bare JSON value within `MAX_ARGS_DEPTH`, `null`, or a string failing this test)."""
    if not args or args[0] in " \t\n\r" or args[-1] in " \t\n\r" or args == "null":
        return None
    if args[0] == '"' and top and args == '""':
        return msgspec.Raw(args.encode())
    if (
        len(args) > MAX_ARGS_DEPTH  # else it cannot nest deeper
        and args.count("[") + args.count("{") > MAX_ARGS_DEPTH
        and _depth(args) > MAX_ARGS_DEPTH
    ):
        return None
    try:
        if args[0] != '"':
            return _RAW.decode(args)  # validates: one value, RFC 8259
        raw = msgspec.Raw(args.encode())
        return raw if _embeddable(_STR.decode(raw), False) is not None else None
    except msgspec.DecodeError:
        return _with_lone_escapes(args) if top and "\\u" in args else None
    except RecursionError:
        return None


_SURROGATE_ESCAPE = re.compile(
    r"\\\\"  # an escaped backslash (what follows it is text, not an escape)
    r"|\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}"  # a surrogate pair
    r"|(\\u[dD][89a-fA-F][0-9a-fA-F]{2})"  # a lone surrogate escape (group 1)
)


def _lone_escapes(text: str) -> set[str]:
    """The distinct escaped lone surrogates (`\\ud800` spellings) in the JSON `text`."""
    return {m[1] for m in _SURROGATE_ESCAPE.finditer(text) if m[1]} if "\\u" in text else set()


def _replace_lone(text: str, replacement: Mapping[str, str]) -> str:
    """`text` with each escaped lone surrogate replaced by `replacement[its spelling]`."""
    return _SURROGATE_ESCAPE.sub(lambda m: replacement[m[1]] if m[1] else m[0], text)


def _with_lone_escapes(args: str) -> msgspec.Raw | None:
    """`args` as a raw value when they are JSON but for escaped lone surrogates, else None."""
    lone = _lone_escapes(args)
    ok = lone and _valid(_replace_lone(args, dict.fromkeys(lone, "\\u0000")))
    return msgspec.Raw(args.encode()) if ok else None


def _string(text: str, empty: msgspec.Raw = _NULL) -> msgspec.Raw:
    """`text` as a JSON string (`empty` when there is none): what is not embedded."""
    return msgspec.Raw(_ENCODER.encode(text)) if text else empty


def _raw_in(raw: msgspec.Raw) -> str:
    """The text of a raw value as `dumps_history` wrote it (invalid UTF-8 as Go reads it)."""
    text = str(raw, "utf-8", _GO_REPLACE) if raw else "null"
    if text == "null":
        return ""
    return text if text[0] != '"' or _embeddable(text) is not None else _STR.decode(text)


# --------------------------------------------------------------------------- dumps


def dumps_history(messages: Sequence[Message]) -> str:
    """Encode a history as Go-compatible JSON (empty fields omitted, args embedded byte for
    byte when they are one JSON value); `HistoryError` for a lone surrogate in a field."""
    try:
        return _ENCODER.encode(_wire(messages)).decode()
    except UnicodeEncodeError:
        for i, m in enumerate(messages):
            for where, value in _strings(m):
                try:
                    value.encode()
                except UnicodeEncodeError:
                    raise HistoryError(
                        f"history message {i}: {where} holds a lone surrogate "
                        f"({value!a}), which is not valid Unicode text"
                    ) from None
        raise  # pragma: no cover - the loop above finds it


def _wire(messages: Sequence[Message]) -> list[_Message]:
    """The wire structs `dumps_history` encodes (its hot loop)."""
    out: list[_Message] = []
    for m in messages:
        calls: Sequence[_Call] = ()
        if m.tool_calls:
            calls = [
                _Call(c.id, c.name, _embeddable(c.args) or _string(c.args), c.signature, c.seal)
                for c in m.tool_calls
            ]
        thinking: Sequence[_Thinking] = ()
        if m.thinking:
            thinking = [_Thinking(t.text, t.signature, t.redacted) for t in m.thinking]
        out.append(
            _Message(
                m.role,
                m.content,
                [_part(p) for p in m.parts] if m.parts else (),
                calls,
                m.tool_call_id,
                m.tool_name,
                m.failed,
                thinking,
                m.run_id,
                m.conversation_id,
                [_citation(c) for c in m.citations] if m.citations else (),
                [_server_tool(b) for b in m.server_tools] if m.server_tools else (),
            )
        )
    return out


def _part(p: Part) -> _Part:
    return _Part(p.kind, p.url or None, p.data or None, p.media_type or None, p.text, p.signature)


def _citation(c: Citation) -> _Citation:
    raw = _embeddable(c.raw) or _string(c.raw, _EMPTY)
    return _Citation(c.start, c.end, c.url, c.title, c.cited_text, c.provider, raw)


def _server_tool(b: ServerToolBlock) -> _ServerTool:
    raw = _embeddable(b.raw) or _string(b.raw, _EMPTY)
    return _ServerTool(b.provider, b.type, b.id, b.name, raw, b.at, b.thinking_before)


def _strings(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """Every string field under a message (dataclass) or wire struct, with its path."""
    names = (
        [(f.name, f.name) for f in fields(value)]
        if is_dataclass(value)
        else [(f.name, f.encode_name) for f in msgspec.structs.fields(value)]
    )
    for attr, key in names:
        v = getattr(value, attr)
        if isinstance(v, str):
            yield path + key, v
        elif isinstance(v, list):
            for j, item in enumerate(v):
                yield from _strings(item, f"{path}{key}[{j}].")


# --------------------------------------------------------------------------- loads


def loads_history(text: str | bytes) -> list[Message]:
    """Decode a history written by `dumps_history` or the Go golem (unknown keys ignored,
    non-UTF-8 bytes as U+FFFD); `HistoryError` when it is not one, `TypeError` for `text`."""
    if not isinstance(text, str | bytes | bytearray | memoryview):
        raise TypeError(
            "loads_history takes the JSON text of a history (str or bytes), got "
            f"{type(text).__name__}; a list of Message objects needs no loading"
        )
    # what a load builds is acyclic and outlives the call: collecting would free nothing
    collecting = gc.isenabled()
    gc.disable()
    try:
        try:
            wire = _DECODER.decode(text)
        except msgspec.ValidationError as exc:
            raise HistoryError(_shape_error(str(exc))) from None
        except (msgspec.DecodeError, UnicodeError, RecursionError) as exc:
            if not isinstance(text, str):
                data = bytes(text)
                if not _utf8(data):  # as the Go golem reads it: each bad byte is U+FFFD
                    return loads_history(data.decode("utf-8", _GO_REPLACE))
                text = data.decode()
            elif not _utf8(text.encode("utf-8", "surrogatepass")):
                raise HistoryError(_diagnose(text, exc)) from None
            wire = _decode_slow(text, exc)
        return [] if wire is None else _messages(wire)
    finally:
        if collecting:
            gc.enable()


def _messages(wire: list[_Message]) -> list[Message]:
    """The messages of the decoded wire structs, consumed in chunks to reuse their memory."""
    if len(wire) <= 256:
        return _convert(wire, 0)
    out: list[Message] = []
    wire.reverse()
    while wire:
        chunk = wire[-256:]
        del wire[-256:]
        chunk.reverse()
        out += _convert(chunk, len(out))
    return out


def _convert(wire: list[_Message], offset: int) -> list[Message]:
    for w in wire:
        try:
            if w.tool_calls:
                for c in w.tool_calls:  # _raw_in, inlined for the common case
                    args = str(c.args, "utf-8", _GO_REPLACE)
                    c.args = _raw_in(c.args) if args[:1] == '"' or args == "null" else args  # type: ignore[assignment]
            if w.parts:
                for p in w.parts:
                    p.url, p.data = p.url or None, p.data or None
                    p.media_type = p.media_type or None
            if w.citations:
                for ci in w.citations:
                    ci.raw = _raw_in(ci.raw)  # type: ignore[assignment]
            if w.server_tools:
                for b in w.server_tools:
                    b.raw = _raw_in(b.raw)  # type: ignore[assignment]
        except (UnicodeError, msgspec.DecodeError) as exc:
            i = offset + wire.index(w)
            raise HistoryError(
                f"history message {i}: tool call args cannot be read: {exc}"
            ) from None
    try:
        return msgspec.convert(wire, _MESSAGES, from_attributes=True)
    except msgspec.ValidationError as exc:
        bad_role = re.fullmatch(r"Invalid enum value .* - at `\$\[(\d+)\]\.role`", str(exc))
        if bad_role:
            i = int(bad_role[1])
            raise HistoryError(
                f"history message {offset + i}: role must be one of system, user, assistant, "
                f"tool; got {wire[i].role!r}"
            ) from None
    for w in wire:  # `null` values take the defaults
        _defaults_for_nulls(w)
    return msgspec.convert(wire, _MESSAGES, from_attributes=True)


def _defaults_for_nulls(struct: msgspec.Struct) -> None:
    for f in msgspec.structs.fields(struct):
        value = getattr(struct, f.name)
        if value is None and f.default is not None:
            setattr(struct, f.name, f.default if f.default_factory is msgspec.NODEFAULT else [])
        elif isinstance(value, list):
            for item in value:
                _defaults_for_nulls(item)


def _utf8(data: bytes) -> bool:
    return data.decode("utf-8", "replace").encode() == data


def _go_replace(exc: UnicodeError) -> tuple[str, int]:
    """Go's decoder reads each byte of an invalid UTF-8 sequence as one U+FFFD."""
    if not isinstance(exc, UnicodeDecodeError):  # pragma: no cover - registered for decoding
        raise exc
    return "\ufffd" * (exc.end - exc.start), exc.end


_GO_REPLACE = "golem-go-replace"
codecs.register_error(_GO_REPLACE, _go_replace)

_FLAT_DEPTH = 5  # golem's own structure: the array, a message, toolCalls, a call, its args


def _decode_slow(text: str, exc: BaseException) -> list[_Message] | None:
    """Decode what msgspec refused but Go accepts (escaped lone surrogates, deep nesting; ADR
    0015); a lone surrogate in a text field, or anything else, is a `HistoryError`."""
    lone = _lone_escapes(text)
    used = {ord(c) for c in re.findall("[\ue000-\uf8ff]", text)}
    used.update(int(m[2:], 16) for m in re.findall(r"\\u[eEfF][0-9a-fA-F]{3}", text))
    free = (chr(cp) for cp in range(0xE000, 0xF900) if cp not in used)
    spelling = dict(zip((f"\\u{ord(c):04x}" for c in free), sorted(lone), strict=False))
    mark = next(free, None)
    if len(spelling) < len(lone) or mark is None:  # pragma: no cover - thousands of spellings
        raise HistoryError(_diagnose(text, exc))

    def decode(doc: str) -> list[_Message] | None:
        try:
            return _DECODER.decode(doc)
        except msgspec.ValidationError as bad:
            raise HistoryError(_shape_error(str(bad))) from None
        except (msgspec.DecodeError, UnicodeError):
            raise HistoryError(_diagnose(text, exc)) from None

    flat = _replace_lone(text, {s: p for p, s in spelling.items()}) if lone else text
    deep, spans = flat, []
    try:
        wire = decode(flat)
    except RecursionError:  # a value nested deeper than msgspec goes: Go goes to MAX_NESTING
        spans = deep_spans(flat) or []
        if not spans:
            raise HistoryError(_diagnose(text, RecursionError())) from None
        wire = decode(_cut(flat, 0, len(flat), spans, f'"{mark}'))
    if wire is None:
        return None
    marks = {chr(int(p[2:], 16)) for p in spelling}
    for i, w in enumerate(wire):
        for where, value in _strings(w) if marks else ():
            if not marks.isdisjoint(value):
                raise HistoryError(
                    f"history message {i}: {where} holds a lone surrogate, "
                    "which is not valid Unicode text"
                )
    deep_mark = re.compile(f'"{mark}([0-9]+)"')
    lone_mark = re.compile("|".join(re.escape(p) for p in spelling) or "(?!)")

    def back(raw: msgspec.Raw) -> msgspec.Raw:
        span = str(raw, "utf-8", _GO_REPLACE)
        fixed = deep_mark.sub(lambda m: deep[slice(*spans[int(m[1])])], span) if spans else span
        fixed = lone_mark.sub(lambda m: spelling[m[0]], fixed) if lone else fixed
        return raw if fixed == span else msgspec.Raw(fixed.encode())

    for w in wire:
        for c in w.tool_calls or ():
            c.args = back(c.args)
        for ci in w.citations or ():
            ci.raw = back(ci.raw)
        for b in w.server_tools or ():
            b.raw = back(b.raw)
    return wire


_SLICE = 64
"""How deep each slice of a deep document is that msgspec checks at once."""
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def deep_spans(text: str) -> list[tuple[int, int]] | None:
    """The spans of the values opening deeper than `_FLAT_DEPTH` in `text`, found without deep
    recursion; None when it is not one JSON value or nests deeper than `MAX_NESTING`."""
    top: list[tuple[int, int]] = []
    open_cuts: list[tuple[int, list[tuple[int, int]]]] = []  # start, nested cuts
    depth = 0
    for m in _TOKEN.finditer(text):
        bracket = m[0]
        if bracket in "[{":
            depth += 1
            if depth > MAX_NESTING:
                return None
            if depth > _FLAT_DEPTH and (depth - _FLAT_DEPTH - 1) % _SLICE == 0:
                open_cuts.append((m.start(), []))
        elif bracket in "]}":
            if depth > _FLAT_DEPTH and (depth - _FLAT_DEPTH - 1) % _SLICE == 0:
                start, nested = open_cuts.pop()
                if not _valid(_cut(text, start, m.end(), nested)):
                    return None
                (open_cuts[-1][1] if open_cuts else top).append((start, m.end()))
            depth -= 1
            if depth < 0:
                return None
    if depth or not _valid(_cut(text, 0, len(text), top)):
        return None
    return top


def _cut(text: str, start: int, end: int, nested: list[tuple[int, int]], mark: str = "") -> str:
    """`text[start:end]` with each `nested` span replaced by the string `"<mark><n>"`."""
    pieces: list[str] = []
    last = start
    for n, (a, b) in enumerate(nested):
        pieces += (text[last:a], f'{mark}{n}"' if mark else '""')
        last = b
    return "".join([*pieces, text[last:end]])


def _valid(piece: str) -> bool:
    """`piece` is one JSON value (escaped lone surrogates allowed, as Go's decoder has them)."""
    try:
        _RAW.decode(piece)
    except msgspec.DecodeError:
        return _with_lone_escapes(piece) is not None
    except RecursionError:
        return False
    return True


_AT = re.compile(r"(?s)(.*) - at `\$(?:\[(\d+)\])?(.*)`")


def _shape_error(detail: str) -> str:
    """Turn msgspec's "Expected `str`, got `int` - at `$[2].content`" into golem's wording."""
    match = _AT.fullmatch(detail)
    what, index, where = match.groups() if match else (detail, None, "")
    what = what[0].lower() + what[1:]
    if index is None:
        return f"history must be a JSON array of messages: {what}"
    return f"history message {index}: " + (f"{where.lstrip('.')}: {what}" if where else what)


def _surrogate_at(value: Any, path: str) -> str | None:
    """The path of the first string under a decoded JSON `value` holding a lone surrogate."""
    if isinstance(value, str):
        return None if _utf8(value.encode("utf-8", "surrogatepass")) else (path or "a string")
    if isinstance(value, dict) and any(_surrogate_at(key, "x") for key in value):
        return f"a key in {path or 'the message'}"
    if isinstance(value, dict):
        items = [(f"{path}.{k}" if path else k, v) for k, v in value.items()]
    else:
        items = [
            (f"{path}[{j}]", v) for j, v in enumerate(value if isinstance(value, list) else [])
        ]
    return next((found for where, v in items if (found := _surrogate_at(v, where))), None)


def _reject_constant(name: str) -> Any:  # `NaN`, `Infinity`: not JSON (RFC 8259)
    raise ValueError(f"{name} is not JSON")


def _diagnose(text: str | bytes, exc: BaseException) -> str:
    """Explain why `text` did not decode (slow path: only runs on failure)."""
    if isinstance(exc, RecursionError):
        return "history is not valid JSON: nested too deeply"
    try:
        data = json.loads(text, parse_constant=_reject_constant)
        if isinstance(data, list):
            for i, v in enumerate(data):
                where = _surrogate_at(v, "")
                if where is not None:
                    return (
                        f"history message {i}: {where} holds a lone surrogate, "
                        "which is not valid Unicode text"
                    )
    except UnicodeDecodeError as bad:
        return f"history is not valid UTF-8: {bad}"
    except RecursionError:
        return "history is not valid JSON: nested too deeply"
    except ValueError as bad:
        return f"history is not valid JSON: {bad}"
    return f"history is not valid JSON: {exc}"
