"""The message model of a conversation and its durable JSON form.

A history is a plain `list[Message]`. `dumps_history` / `loads_history` convert it to
and from JSON that is wire-compatible with the Go golem: an array of objects with the
keys `role, content, parts, toolCalls, toolCallId, toolName, failed, thinking, runId,
conversationId` (empty fields omitted; tool-call `args` embedded as a JSON value, byte for
byte as the model produced them), plus golem's additive keys `citations` and `serverTools`
on assistant messages, which the Go golem ignores on read (ADR 0028), and `signature` on
the media parts a model produced (ADR 0060).
"""

from __future__ import annotations

import codecs
import gc
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import msgspec

from golem.errors import HistoryError

__all__ = [
    "MAX_ARGS_DEPTH",
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
    """golem's seal on a pending call (see `golem.seal`): binds the approval to this exact
    call. Travels in the history JSON as `"seal"`, a key the Go golem ignores on read."""


@dataclass(frozen=True, slots=True)
class Part:
    """A part of a message beside its `content`: an image, document, audio or video, or a
    text part between them (so text and media can interleave in one message).

    A media part has exactly one of `url` and `data`; `data` needs a `media_type`. A
    "text" part has `text` and nothing else. Parts follow the message's `content` in order.
    """

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
    """Opaque provider signature bound to a media part a model produced (Gemini thought
    signatures on generated images); sent back with the part to the same provider."""

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
    """A source the provider cites for a span of an assistant message's `content`.

    Web search results, fetched pages, documents and file-search hits all arrive as
    citations; `raw` keeps the provider's own object (document indexes, file IDs, the
    encrypted index Anthropic wants back), so the same provider can receive it again.
    """

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
    """One block of a tool the provider ran on its side (web search, web fetch, code
    execution, file search, remote MCP, ...): the call or its result, as the provider sent it.

    golem never executes these; it keeps them so that a history holds what the model saw,
    and sends them back verbatim to the same provider on later turns (where the API needs
    them, such as Anthropic's encrypted search results). Other providers never receive them.
    """

    provider: str
    """The provider that ran the tool: "anthropic", "openai-responses" or "gemini"."""
    type: str
    """The provider's block type, e.g. "server_tool_use", "web_search_tool_result",
    "web_search_call", "code_interpreter_call", "executableCode", "groundingMetadata"."""
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
        """The block as a JSON value (`raw` parsed).

        Raises:
            ValueError: `raw` is not JSON.
        """
        return json.loads(self.raw)


@dataclass(frozen=True, slots=True)
class Message:
    """One message of a conversation.

    Messages are immutable; the lists they hold are never mutated by golem.
    """

    role: Role
    """"system", "user", "assistant" or "tool"."""
    content: str = ""
    """Text of the message."""
    parts: list[Part] = field(default_factory=list)
    """Images, documents, audio, video: given by the user or a tool, or produced by the
    model (assistant messages: generated images, audio; ADR 0060)."""
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
    """Blocks of tools the provider ran itself, in the order they arrived (assistant
    messages; JSON key "serverTools")."""


# --------------------------------------------------------------------------- JSON
#
# The codec decodes with msgspec into private wire structs, keeping each tool call's `args` as
# a `msgspec.Raw` span (the bytes exactly as they are in the document), then builds the public
# dataclasses. See docs/adr/0015-history-codec.md for the choices and the measurements.

_JSON_WS = " \t\n\r"
MAX_ARGS_DEPTH = 128
"""Args nested deeper than this are stored as a JSON string rather than embedded, so that a
history golem wrote always loads again whatever the stack depth of the caller."""


class _InPart(msgspec.Struct, rename="camel", gc=False):
    kind: str | None = ""
    url: str | None = ""
    data: bytes | None = None
    media_type: str | None = ""
    text: str | None = ""
    signature: str | None = ""


class _InCall(msgspec.Struct, gc=False):
    id: str | None = ""
    name: str | None = ""
    args: msgspec.Raw = msgspec.Raw()
    signature: str | None = ""
    seal: str | None = ""


class _InThinking(msgspec.Struct, gc=False):
    text: str | None = ""
    signature: str | None = ""
    redacted: str | None = ""


class _InCitation(msgspec.Struct, rename="camel", gc=False):
    start: int | None = 0
    end: int | None = 0
    url: str | None = ""
    title: str | None = ""
    cited_text: str | None = ""
    provider: str | None = ""
    raw: msgspec.Raw = msgspec.Raw()


class _InServerTool(msgspec.Struct, rename="camel", gc=False):
    provider: str | None = ""
    type: str | None = ""
    id: str | None = ""
    name: str | None = ""
    raw: msgspec.Raw = msgspec.Raw()
    at: int | None = 0
    thinking_before: int | None = 0


class _InMessage(msgspec.Struct, rename="camel", gc=False):
    role: str
    content: str | None = ""
    parts: list[_InPart] | None = None
    tool_calls: list[_InCall] | None = None
    tool_call_id: str | None = ""
    tool_name: str | None = ""
    failed: bool | None = False
    thinking: list[_InThinking] | None = None
    run_id: str | None = ""
    conversation_id: str | None = ""
    citations: list[_InCitation] | None = None
    server_tools: list[_InServerTool] | None = None


class _OutPart(msgspec.Struct, rename="camel", omit_defaults=True, gc=False):
    kind: str
    url: str | None = None
    data: bytes | None = None
    media_type: str | None = None
    text: str = ""
    signature: str = ""


class _OutCall(msgspec.Struct, omit_defaults=True, gc=False):
    id: str
    name: str
    args: msgspec.Raw | str | None  # required: always written, `null` when empty (as Go does)
    signature: str = ""
    seal: str = ""


class _OutThinking(msgspec.Struct, omit_defaults=True, gc=False):
    text: str = ""
    signature: str = ""
    redacted: str = ""


class _OutCitation(msgspec.Struct, rename="camel", omit_defaults=True, gc=False):
    start: int = 0
    end: int = 0
    url: str = ""
    title: str = ""
    cited_text: str = ""
    provider: str = ""
    raw: msgspec.Raw | str = ""


class _OutServerTool(msgspec.Struct, rename="camel", omit_defaults=True, gc=False):
    provider: str
    type: str
    id: str = ""
    name: str = ""
    raw: msgspec.Raw | str = ""
    at: int = 0
    thinking_before: int = 0


class _OutMessage(msgspec.Struct, rename="camel", omit_defaults=True, gc=False):
    role: str
    content: str = ""
    parts: list[_OutPart] | None = None
    tool_calls: list[_OutCall] | None = None
    tool_call_id: str = ""
    tool_name: str = ""
    failed: bool = False
    thinking: list[_OutThinking] | None = None
    run_id: str = ""
    conversation_id: str = ""
    citations: list[_OutCitation] | None = None
    server_tools: list[_OutServerTool] | None = None


_DECODER = msgspec.json.Decoder(list[_InMessage] | None)
_ENCODER = msgspec.json.Encoder()
_RAW = msgspec.json.Decoder(msgspec.Raw)
_STR = msgspec.json.Decoder(str)
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKET = re.compile(r"[\[\]{}]")


def _depth(text: str) -> int:
    deepest = depth = 0
    for ch in _BRACKET.findall(_JSON_STRING.sub("", text)):
        if ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def _embeddable(args: str, top: bool = True) -> msgspec.Raw | None:
    """`args` as the raw JSON value to embed verbatim, or None when they are not embedded.

    Embedded: args that are one JSON value without whitespace around it, nested at most
    `MAX_ARGS_DEPTH` deep, other than `null` and other than a JSON string — unless that
    string's content is itself embeddable (what a Go json.RawMessage holding a string
    literal looks like). Everything else (truncated streams, other strings, `null`) is
    written as a JSON string holding the raw text; the loader applies this same test to
    tell the two apart, so they can never be confused.

    Two more values are embedded when they are the args themselves (`top`), never when
    they are a string's content (`top=False`, the test the loader applies to every string,
    so what earlier versions wrote as a string keeps loading as the same text; ADR 0047):
    JSON whose strings hold escaped lone surrogates (`"\\ud800"`: JSON's grammar allows
    them, Go's decoder accepts them and the Go golem writes such args verbatim), and the
    empty string literal `""` (read as its empty content, it could not
    be told from absent args, which are written as `null`).

    Raises:
        UnicodeEncodeError: the text holds a lone surrogate (it cannot be UTF-8).
    """
    if not args:
        return None
    last = args[-1]
    if last == "}" or last == "]":  # an object or an array (the common case), or not JSON
        if args[0] in _JSON_WS or (
            len(args) > MAX_ARGS_DEPTH  # else it cannot nest deeper
            and args.count("[") + args.count("{") > MAX_ARGS_DEPTH
            and _depth(args) > MAX_ARGS_DEPTH
        ):
            return None
        try:
            return _RAW.decode(args)  # validates; the whole text: no whitespace around it
        except msgspec.DecodeError:
            return _with_lone_escapes(args) if top and "\\u" in args else None
        except RecursionError:
            return None
    if args[0] in _JSON_WS or last in _JSON_WS or args == "null":
        return None
    data = args.encode()
    if args[0] == '"':
        if top and args == '""':
            return msgspec.Raw(data)
        try:
            content = _STR.decode(data)
        except msgspec.DecodeError:
            return _with_lone_escapes(args) if top and "\\u" in args else None
        return msgspec.Raw(data) if _embeddable(content, False) is not None else None
    if (
        len(data) > MAX_ARGS_DEPTH  # else it cannot nest deeper
        and data.count(b"[") + data.count(b"{") > MAX_ARGS_DEPTH
        and _depth(args) > MAX_ARGS_DEPTH
    ):
        return None
    try:
        return _RAW.decode(data)  # the whole text: there is no whitespace around it
    except (msgspec.DecodeError, RecursionError):
        return None


_SURROGATE_ESCAPE = re.compile(
    r"\\\\"  # an escaped backslash (what follows it is text, not an escape)
    r"|\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}"  # a surrogate pair
    r"|(\\u[dD][89a-fA-F][0-9a-fA-F]{2})"  # a lone surrogate escape (group 1)
)


def _lone_escapes(text: str) -> set[str]:
    """The distinct escaped lone surrogates (`\\ud800` spellings) in the JSON `text`."""
    return {m[1] for m in _SURROGATE_ESCAPE.finditer(text) if m[1]}


def _replace_lone(text: str, replacement: Mapping[str, str]) -> str:
    """`text` with each escaped lone surrogate replaced by `replacement[its spelling]`."""
    return _SURROGATE_ESCAPE.sub(lambda m: replacement[m[1]] if m[1] else m[0], text)


def _with_lone_escapes(args: str) -> msgspec.Raw | None:
    """`args` as a raw value when they are JSON but for escaped lone surrogates, else None."""
    lone = _lone_escapes(args)
    if not lone:
        return None
    try:
        _RAW.decode(_replace_lone(args, dict.fromkeys(lone, "\\u0000")))
    except (msgspec.DecodeError, RecursionError):
        return None
    return msgspec.Raw(args.encode())


def _wire(messages: Sequence[Message]) -> list[_OutMessage]:
    """The wire structs `dumps_history` encodes (its hot loop)."""
    out: list[_OutMessage] = []
    append = out.append
    for m in messages:
        parts, calls, thinking = m.parts, m.tool_calls, m.thinking
        append(
            _OutMessage(
                m.role,
                m.content,
                [
                    _OutPart(
                        p.kind,
                        p.url or None,
                        p.data or None,
                        p.media_type or None,
                        p.text,
                        p.signature,
                    )
                    for p in parts
                ]
                if parts
                else None,
                [
                    _OutCall(
                        c.id, c.name, _embeddable(c.args) or c.args or None, c.signature, c.seal
                    )
                    for c in calls
                ]
                if calls
                else None,
                m.tool_call_id,
                m.tool_name,
                m.failed,
                [_OutThinking(t.text, t.signature, t.redacted) for t in thinking]
                if thinking
                else None,
                m.run_id,
                m.conversation_id,
                [_out_citation(c) for c in m.citations] if m.citations else None,
                [_out_server_tool(b) for b in m.server_tools] if m.server_tools else None,
            )
        )
    return out


def _out_raw(raw: str) -> msgspec.Raw | str:
    """A `raw` JSON text as written: embedded verbatim when it is one JSON value (as args are),
    else as a JSON string of the text."""
    return _embeddable(raw) or raw


def _out_citation(c: Citation) -> _OutCitation:
    return _OutCitation(c.start, c.end, c.url, c.title, c.cited_text, c.provider, _out_raw(c.raw))


def _out_server_tool(b: ServerToolBlock) -> _OutServerTool:
    return _OutServerTool(
        b.provider, b.type, b.id, b.name, _out_raw(b.raw), b.at, b.thinking_before
    )


def dumps_history(messages: Sequence[Message]) -> str:
    """Encode a history as Go-compatible JSON.

    Empty fields are omitted. Tool-call args that are a JSON value are embedded byte for
    byte (whitespace, number spelling, escapes and duplicate keys kept); other args (a
    truncated stream, a JSON string, `null`) are embedded as a JSON string of the raw
    text. `loads_history(dumps_history(h)) == h` for every history `h`, and
    `dumps_history(loads_history(s)) == s` for any `s` this function produced.

    Raises:
        HistoryError: a text field holds a lone surrogate, which cannot be written as
            UTF-8; the message names the 0-based message index (also a `ValueError`).
    """
    try:
        return _ENCODER.encode(_wire(messages)).decode()
    except UnicodeEncodeError:
        for i, m in enumerate(messages):
            try:
                _ENCODER.encode(_wire([m]))
            except UnicodeEncodeError as exc:
                raise HistoryError(
                    f"history message {i}: {_surrogate_field(m)} holds a lone surrogate "
                    f"({exc.object[exc.start : exc.end]!a}), which is not valid Unicode text"
                ) from None
        raise  # pragma: no cover - the loop above finds it


def _surrogate_field(m: Message) -> str:
    """Name the first field of `m` that cannot be encoded as UTF-8."""

    def bad(text: str | None) -> bool:
        try:
            (text or "").encode()
        except UnicodeEncodeError:
            return True
        return False

    for name in ("content", "tool_call_id", "tool_name", "run_id", "conversation_id"):
        if bad(getattr(m, name)):
            return f'"{name}"'
    for j, p in enumerate(m.parts):
        if bad(p.kind) or bad(p.url) or bad(p.media_type) or bad(p.text) or bad(p.signature):
            return f"part {j}"
    for j, c in enumerate(m.tool_calls):
        for name in ("id", "name", "args", "signature", "seal"):
            if bad(getattr(c, name)):
                return f'tool call {j} "{name}"'
    for j, t in enumerate(m.thinking):
        if bad(t.text) or bad(t.signature) or bad(t.redacted):
            return f"thinking block {j}"
    for j, ci in enumerate(m.citations):
        if any(
            bad(getattr(ci, name)) for name in ("url", "title", "cited_text", "provider", "raw")
        ):
            return f"citation {j}"
    for j, b in enumerate(m.server_tools):
        if any(bad(getattr(b, name)) for name in ("provider", "type", "id", "name", "raw")):
            return f"server tool block {j}"
    return "a field"  # pragma: no cover


# Loaded messages are not built through the frozen dataclasses' __init__: it sets each field
# through object.__setattr__ and costs more than the JSON decode of the message. Each is built
# as an instance of a mutable twin with the same slot layout (plain attribute stores), then
# given its real class; the frozen class refuses any later assignment as usual. The run loop
# builds its messages the same way (`new_message`, `stamped`).
# tests/test_history_json_args.py pins the field lists the loader and these builders set.
_MutableMessage: Any = type("_MutableMessage", (), {"__slots__": Message.__slots__})
_MutableToolCall: Any = type("_MutableToolCall", (), {"__slots__": ToolCall.__slots__})


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
    """`Message(...)` for the run loop's hot paths: an equal message, built as the loader
    builds them (a sixth of the frozen `__init__`'s cost); a list not given is a new empty
    list, as the field's default."""
    m = _MutableMessage()
    m.role = role
    m.content = content
    m.parts = [] if parts is None else parts
    m.tool_calls = [] if tool_calls is None else tool_calls
    m.tool_call_id = tool_call_id
    m.tool_name = tool_name
    m.failed = failed
    m.thinking = []
    m.run_id = run_id
    m.conversation_id = conversation_id
    m.citations = []
    m.server_tools = []
    m.__class__ = Message
    return m  # type: ignore[no-any-return]


def stamped(m: Message, run_id: str, conversation_id: str, role: Role | None = None) -> Message:
    """`dataclasses.replace(m, run_id=..., conversation_id=...)` (and `role`, when given)
    for the run loop's hot paths: a copy sharing `m`'s lists, built as the loader builds
    messages. A subclass of `Message` is copied by `replace` itself."""
    if m.__class__ is not Message:
        if role is not None:
            return replace(m, role=role, run_id=run_id, conversation_id=conversation_id)
        return replace(m, run_id=run_id, conversation_id=conversation_id)
    c = _MutableMessage()
    c.role = m.role if role is None else role
    c.content = m.content
    c.parts = m.parts
    c.tool_calls = m.tool_calls
    c.tool_call_id = m.tool_call_id
    c.tool_name = m.tool_name
    c.failed = m.failed
    c.thinking = m.thinking
    c.run_id = run_id
    c.conversation_id = conversation_id
    c.citations = m.citations
    c.server_tools = m.server_tools
    c.__class__ = Message
    return c  # type: ignore[no-any-return]


def with_calls(m: Message, tool_calls: list[ToolCall]) -> Message:
    """`dataclasses.replace(m, tool_calls=tool_calls)` for the hot paths (a sealed pause):
    a copy sharing `m`'s other lists, built as the loader builds messages. A subclass of
    `Message` is copied by `replace` itself."""
    if m.__class__ is not Message:
        return replace(m, tool_calls=tool_calls)
    c = stamped(m, m.run_id, m.conversation_id)
    object.__setattr__(c, "tool_calls", tool_calls)
    return c


def _load_args(raw: msgspec.Raw) -> str:
    """The raw text of an embedded value (tool-call args, provider blocks) as `dumps_history`
    wrote it: a value verbatim, a string holding text that is not embeddable as its content."""
    if not raw:
        return ""
    text = str(raw, "utf-8", _GO_REPLACE)  # Go keeps args' bytes; its tools read U+FFFD
    if text[0] == '"' or text == "null":
        return _load_string_args(text)
    return text


def _load_string_args(text: str) -> str:
    """The args of a call whose `args` in the document are `null` or a JSON string."""
    if text == "null":
        return ""
    # golem writes a string for args it does not embed, and then the content is the raw
    # text; a string that passes the embedding test was embedded verbatim (by golem, or by
    # Go from a RawMessage holding a string literal) and is kept as it stands.
    return text if _embeddable(text) is not None else _STR.decode(text)


def _load_citation(w: _InCitation) -> Citation:
    return Citation(
        w.start or 0,
        w.end or 0,
        w.url or "",
        w.title or "",
        w.cited_text or "",
        w.provider or "",
        _load_args(w.raw),
    )


def _load_server_tool(w: _InServerTool) -> ServerToolBlock:
    return ServerToolBlock(
        w.provider or "",
        w.type or "",
        w.id or "",
        w.name or "",
        _load_args(w.raw),
        w.at or 0,
        w.thinking_before or 0,
    )


def _load_part(w: _InPart) -> Part:
    return Part(
        w.kind or "",
        w.url or None,
        w.data or None,
        w.media_type or None,
        w.text or "",
        w.signature or "",
    )


class _Shape(ValueError):
    pass


def _load_messages(wire: list[_InMessage]) -> list[Message]:
    """The public messages for the decoded wire structs (the hot loop of `loads_history`).

    Consumes `wire`: each struct is released as soon as its message is built, so the memory
    it held is reused for the next messages instead of fresh pages (for 10,000 messages:
    about 60 page faults instead of 1,800, and 15-25% less time).

    Raises:
        ValueError: naming the 0-based index of the first message that cannot be built.
    """
    out: list[Message] = []
    append = out.append
    new_message, new_call, message_class, call_class = (
        _MutableMessage,
        _MutableToolCall,
        Message,
        ToolCall,
    )
    wire.reverse()
    pop = wire.pop
    go_replace = _GO_REPLACE  # Go keeps args' bytes; its tools read U+FFFD
    try:
        while wire:
            w = pop()
            role = w.role
            if role not in ROLES:
                raise _Shape(f"role must be one of system, user, assistant, tool; got {role!r}")
            m = new_message()
            m.role = role
            m.content = w.content or ""
            m.parts = [_load_part(p) for p in w.parts] if w.parts else []
            calls = []
            if w.tool_calls:
                for x in w.tool_calls:
                    c = new_call()
                    c.id = x.id or ""
                    c.name = x.name or ""
                    raw = x.args
                    if raw:
                        args = str(raw, "utf-8", go_replace)
                        if args[0] == '"' or args == "null":
                            args = _load_string_args(args)
                    else:
                        args = ""
                    c.args = args
                    c.signature = x.signature or ""
                    c.seal = x.seal or ""
                    c.__class__ = call_class
                    calls.append(c)
            m.tool_calls = calls
            m.tool_call_id = w.tool_call_id or ""
            m.tool_name = w.tool_name or ""
            m.failed = w.failed or False
            m.thinking = (
                [
                    ThinkingBlock(t.text or "", t.signature or "", t.redacted or "")
                    for t in w.thinking
                ]
                if w.thinking
                else []
            )
            m.run_id = w.run_id or ""
            m.conversation_id = w.conversation_id or ""
            m.citations = [_load_citation(c) for c in w.citations] if w.citations else []
            m.server_tools = (
                [_load_server_tool(b) for b in w.server_tools] if w.server_tools else []
            )
            m.__class__ = message_class
            append(m)
    except _Shape as exc:
        raise HistoryError(f"history message {len(out)}: {exc}") from None
    except (UnicodeError, msgspec.DecodeError) as exc:
        raise HistoryError(
            f"history message {len(out)}: tool call args cannot be read: {exc}"
        ) from None
    return out


def loads_history(text: str | bytes) -> list[Message]:
    """Decode a history from JSON written by `dumps_history` or by the Go golem.

    Unknown keys are ignored, missing keys and `null` take their defaults. Each tool
    call's `args` are the raw JSON text exactly as in the document (a string written
    for args that are not embeddable JSON loads back as its content). Bytes that are not
    UTF-8 read as U+FFFD, one per byte, as the Go golem reads them (ADR 0075).

    Raises:
        HistoryError: (also a `ValueError`) for any input that is not such a history — not JSON (including
            `NaN`/`Infinity`, a lone surrogate, nesting too deep), not an
            array, or a message of the wrong shape; the message names the 0-based message
            index when there is one. Nothing is returned half-loaded.
        TypeError: `text` is not JSON text at all (neither `str` nor bytes), such as None
            or an already decoded list.
    """
    if not isinstance(text, str | bytes | bytearray | memoryview):
        raise TypeError(
            "loads_history takes the JSON text of a history (str or bytes), got "
            f"{type(text).__name__}; a list of Message objects needs no loading"
        )
    # Every object built here is acyclic and survives the call: collections triggered by the
    # allocation count could free nothing and would walk the growing result again and again
    # (about a third of a large load). Collection is paused while the history is built.
    collecting = gc.isenabled()
    gc.disable()
    try:
        try:
            wire = _DECODER.decode(text)
        except msgspec.ValidationError as exc:
            raise HistoryError(_shape_error(str(exc))) from None
        except (msgspec.DecodeError, UnicodeError, RecursionError) as exc:
            if not isinstance(text, str) and not _utf8(text):
                # as the Go golem reads it: each byte that is not UTF-8 is U+FFFD
                return loads_history(bytes(text).decode("utf-8", _GO_REPLACE))
            wire = _decode_deep(text) if isinstance(exc, RecursionError) else _UNFIT
            if wire is _UNFIT:
                wire = _decode_lone_escapes(text)
            if wire is _TOO_DEEP:  # lone surrogate escapes and depth in one document
                wire = _decode_deep(text)
            if wire is _UNFIT or wire is _TOO_DEEP:
                raise HistoryError(_diagnose(text, exc)) from None
        return [] if wire is None else _load_messages(wire)
    finally:
        if collecting:
            gc.enable()


def _utf8(data: bytes | bytearray | memoryview) -> bool:
    try:
        bytes(data).decode()
    except UnicodeDecodeError:
        return False
    return True


def _go_replace(exc: UnicodeError) -> tuple[str, int]:
    """Go's decoder reads each byte of an invalid UTF-8 sequence as one U+FFFD."""
    if not isinstance(exc, UnicodeDecodeError):  # pragma: no cover - registered for decoding
        raise exc
    return "\ufffd" * (exc.end - exc.start), exc.end


_GO_REPLACE = "golem-go-replace"
codecs.register_error(_GO_REPLACE, _go_replace)

_UNFIT: list[_InMessage] = []  # a sentinel, compared by identity
_TOO_DEEP: list[_InMessage] = []  # another: no lone escape left, but too deep to decode
_PRIVATE_USE = range(0xE000, 0xF900)
_PRIVATE_CHAR = re.compile("[\ue000-\uf8ff]")
_PRIVATE_ESCAPE = re.compile(r"\\u[eEfF][0-9a-fA-F]{3}")


def _decode_lone_escapes(text: str | bytes) -> list[_InMessage] | None:
    """Decode a document msgspec refused because strings in it hold escaped lone surrogates
    (slow path: only runs on failure). Tool-call args and provider blocks keep them verbatim
    (they are raw bytes, as the Go golem keeps them); unknown keys are ignored, as any
    unknown key is; a text field holding one is a `ValueError` naming message and field.

    Each distinct spelling (`\\ud800`) is replaced by the escape of a private-use character
    the document does not contain, the document is decoded, and the raw spans get their
    spellings back.

    Returns:
        The wire messages, or `_UNFIT` when the document has no escaped lone surrogate (or
        more distinct spellings than placeholders): the caller diagnoses the original.

    Raises:
        ValueError: the document is not a history for another reason too, or a text field
            holds a lone surrogate.
    """
    if not isinstance(text, str):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError:
            return _UNFIT
    lone = _lone_escapes(text) if "\\u" in text else set()
    if not lone:
        return _UNFIT
    used = {ord(c) for c in _PRIVATE_CHAR.findall(text)}  # one pass each, whatever the count
    used.update(int(m[2:], 16) for m in _PRIVATE_ESCAPE.findall(text))
    free = (cp for cp in _PRIVATE_USE if cp not in used)
    placeholder = dict(zip(sorted(lone), (f"\\u{cp:04x}" for cp in free), strict=False))
    if len(placeholder) < len(lone):
        return _UNFIT  # pragma: no cover - thousands of distinct spellings
    replaced = _replace_lone(text, placeholder)
    try:
        wire = _DECODER.decode(replaced)
    except msgspec.ValidationError as exc:
        raise HistoryError(_shape_error(str(exc))) from None
    except RecursionError:
        return _TOO_DEEP
    except (msgspec.DecodeError, UnicodeError) as exc:
        raise HistoryError(_diagnose(replaced, exc)) from None
    if wire is None:
        return None  # pragma: no cover - `null` holds no string
    marks = {chr(int(p[2:], 16)) for p in placeholder.values()}
    spelling = {p: s for s, p in placeholder.items()}
    restore = re.compile("|".join(re.escape(p) for p in spelling))

    def back(raw: msgspec.Raw) -> msgspec.Raw:
        span = bytes(raw).decode("utf-8", _GO_REPLACE)
        fixed = restore.sub(lambda m: spelling[m[0]], span)
        return raw if fixed == span else msgspec.Raw(fixed.encode())

    for i, w in enumerate(wire):
        for where, value in _text_fields(w):
            if value and not marks.isdisjoint(value):
                raise HistoryError(
                    f"history message {i}: {where} holds a lone surrogate, "
                    "which is not valid Unicode text"
                )
        for c in w.tool_calls or ():
            c.args = back(c.args)
        for ci in w.citations or ():
            ci.raw = back(ci.raw)
        for b in w.server_tools or ():
            b.raw = back(b.raw)
    return wire


_MAX_NESTING = 10_000
"""The deepest nesting a history document may have: the Go golem's limit (`encoding/json`)."""
_FLAT_DEPTH = 5
"""golem's own structure ends at depth 5 (the array, a message, its toolCalls, a call, the
call's args value): a value opening deeper is inside args, a provider block or unknown data."""
_JSON_TOKEN = re.compile(
    r"[ \t\n\r]*(?:(\")|([\[\]{}:,])|(-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)"
    r"|(true|false|null))"
)
_JSON_STRING_AT = re.compile(r'"(?:[^"\\\x00-\x1f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*"')


def deep_spans(text: str) -> list[tuple[int, int]] | None:
    """The spans of the values opening deeper than `_FLAT_DEPTH` in the JSON `text`, found
    without recursion; None when `text` is not one JSON value (RFC 8259) or nests deeper than
    `_MAX_NESTING`. (Slow path: only runs on a document too deep for the decoder.)"""
    stack: list[str] = []
    spans: list[tuple[int, int]] = []
    opened = pos = 0
    expect = "value"  # value, value_or_end, key, key_or_end, colon, comma_or_end
    while True:
        m = _JSON_TOKEN.match(text, pos)
        if m is None:
            done = expect == "comma_or_end" and not stack
            return spans if done and not text[pos:].strip(" \t\n\r") else None
        pos = m.end()
        if m[1]:  # a string: a key or a value
            string = _JSON_STRING_AT.match(text, pos - 1)
            if string is None:
                return None
            pos = string.end()
            if expect in ("key", "key_or_end"):
                expect = "colon"
                continue
            if expect not in ("value", "value_or_end"):
                return None
            expect = "comma_or_end"
        elif m[2] in ("[", "{"):
            if expect not in ("value", "value_or_end"):
                return None
            stack.append(m[2])
            if len(stack) > _MAX_NESTING:
                return None
            if len(stack) == _FLAT_DEPTH + 1:
                opened = pos - 1
            expect = "key_or_end" if m[2] == "{" else "value_or_end"
        elif m[2] in ("]", "}"):
            pair, may_end = ("[", "value_or_end") if m[2] == "]" else ("{", "key_or_end")
            if not stack or stack[-1] != pair or expect not in ("comma_or_end", may_end):
                return None
            if len(stack) == _FLAT_DEPTH + 1:
                spans.append((opened, pos))
            stack.pop()
            expect = "comma_or_end"
        elif m[2] == ":":
            if expect != "colon":
                return None
            expect = "value"
        elif m[2] == ",":
            if expect != "comma_or_end" or not stack:
                return None
            expect = "key" if stack[-1] == "{" else "value"
        else:  # a number or a literal
            if expect not in ("value", "value_or_end"):
                return None
            expect = "comma_or_end"
        if not stack and expect == "comma_or_end" and pos < len(text):
            if text[pos:].strip(" \t\n\r"):
                return None  # more after the one value
            return spans


def _decode_deep(text: str | bytes) -> list[_InMessage] | None:
    """Decode a valid document nested too deeply for msgspec (slow path: only on failure).

    Tool-call args, provider blocks and unknown keys may nest as deep as the Go golem allows
    (`_MAX_NESTING`); golem's own structure is shallow. Each value opening deeper than
    `_FLAT_DEPTH` is replaced by a placeholder string, the shallow document is decoded, and the
    raw spans get their text back, byte for byte.

    Returns:
        The wire messages, or `_UNFIT` when the document is not JSON, nests deeper than
        `_MAX_NESTING`, or fails for another reason (the caller diagnoses the original).
    """
    if not isinstance(text, str):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError:
            return _UNFIT
    spans = deep_spans(text)
    if not spans:
        return _UNFIT
    mark = next((chr(cp) for cp in _PRIVATE_USE if chr(cp) not in text), None)
    if mark is None:
        return _UNFIT  # pragma: no cover - a document holding every private-use character
    pieces: list[str] = []
    last = 0
    for i, (start, end) in enumerate(spans):
        pieces += (text[last:start], f'"{mark}{i}"')
        last = end
    pieces.append(text[last:])
    flat = "".join(pieces)
    try:
        wire: list[_InMessage] | None = _DECODER.decode(flat)
    except msgspec.ValidationError as exc:
        raise HistoryError(_shape_error(str(exc))) from None
    except (msgspec.DecodeError, UnicodeError, RecursionError):
        wire = _decode_lone_escapes(flat)  # escaped lone surrogates beside the depth
        if wire is _UNFIT:
            return _UNFIT
    if wire is None:
        return None  # pragma: no cover - `null` has no depth
    placeholder = re.compile(f'"{re.escape(mark)}([0-9]+)"')

    def back(raw: msgspec.Raw) -> msgspec.Raw:
        span = bytes(raw).decode("utf-8", _GO_REPLACE)
        if mark not in span:
            return raw
        return msgspec.Raw(placeholder.sub(lambda m: text[slice(*spans[int(m[1])])], span).encode())

    for w in wire:
        for c in w.tool_calls or ():
            c.args = back(c.args)
        for ci in w.citations or ():
            ci.raw = back(ci.raw)
        for b in w.server_tools or ():
            b.raw = back(b.raw)
    return wire


def _text_fields(w: _InMessage) -> list[tuple[str, str | None]]:
    """The text fields of a decoded message with their paths (not args or provider blocks)."""
    fields: list[tuple[str, str | None]] = [
        ("role", w.role),
        ("content", w.content),
        ("toolCallId", w.tool_call_id),
        ("toolName", w.tool_name),
        ("runId", w.run_id),
        ("conversationId", w.conversation_id),
    ]
    for j, p in enumerate(w.parts or ()):
        fields += [
            (f"parts[{j}].{k}", v)
            for k, v in _items(p, "kind", "url", "mediaType", "text", "signature")
        ]
    for j, c in enumerate(w.tool_calls or ()):
        fields += [
            (f"toolCalls[{j}].{k}", v) for k, v in _items(c, "id", "name", "signature", "seal")
        ]
    for j, t in enumerate(w.thinking or ()):
        fields += [(f"thinking[{j}].{k}", v) for k, v in _items(t, "text", "signature", "redacted")]
    for j, ci in enumerate(w.citations or ()):
        fields += [
            (f"citations[{j}].{k}", v)
            for k, v in _items(ci, "url", "title", "citedText", "provider")
        ]
    for j, b in enumerate(w.server_tools or ()):
        fields += [
            (f"serverTools[{j}].{k}", v) for k, v in _items(b, "provider", "type", "id", "name")
        ]
    return fields


def _items(struct: Any, *keys: str) -> list[tuple[str, str | None]]:
    """`(key, value)` of a wire struct's fields, by their JSON keys (camelCase)."""
    return [(k, getattr(struct, re.sub("([A-Z])", r"_\1", k).lower())) for k in keys]


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
    """The path of the first string under `value` that holds a lone surrogate."""
    if isinstance(value, str):
        try:
            value.encode()
        except UnicodeEncodeError:
            return path or "a string"
        return None
    if isinstance(value, list):
        items: Any = ((f"{path}[{j}]", v) for j, v in enumerate(value))
    elif isinstance(value, dict):
        items = ((f"{path}.{k}" if path else k, v) for k, v in value.items())
        for key in value:
            if _surrogate_at(key, "") is not None:
                return f"a key in {path or 'the message'}"
    else:
        return None
    for where, v in items:
        found = _surrogate_at(v, where)
        if found is not None:
            return found
    return None


def _reject_constant(name: str) -> Any:
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
