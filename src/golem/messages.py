"""The message model of a conversation and its durable JSON form.

A history is a plain `list[Message]`. `dumps_history` / `loads_history` convert it to
and from JSON that is wire-compatible with the Go golem: an array of objects with the
keys `role, content, parts, toolCalls, toolCallId, toolName, failed, thinking, runId,
conversationId` (empty fields omitted; tool-call `args` embedded as a JSON value).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "PART_KINDS",
    "ROLES",
    "Message",
    "Part",
    "Role",
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

    def problem(self) -> str | None:
        """Describe why the part is invalid, or return None when it is valid."""
        if self.kind not in PART_KINDS:
            return f'unknown part kind "{self.kind}" (want image, document, audio, video or text)'
        if self.kind == "text":
            if self.url or self.data is not None or self.media_type:
                return "a text part has only text (no url, data or media_type)"
            return None if self.text else "a text part needs text"
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
class Message:
    """One message of a conversation.

    Messages are immutable; the lists they hold are never mutated by golem.
    """

    role: Role
    """"system", "user", "assistant" or "tool"."""
    content: str = ""
    """Text of the message."""
    parts: list[Part] = field(default_factory=list)
    """Images, documents, audio, video (user and tool messages)."""
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


# --------------------------------------------------------------------------- JSON


def _args_value(args: str) -> Any:
    """The JSON value embedded for raw `args` text.

    Args that are a JSON object (or array, number...) are embedded as that value,
    compacted on load. Args that are not JSON — a truncated stream — are embedded as
    a JSON string and load back byte-exact, so history repair still reports them.
    """
    if not args:
        return None
    try:
        value = _ARGS_DECODER.decode(args)
    except ValueError:
        return args
    # A JSON string value would be ambiguous with raw text that is not JSON: keep it raw.
    return args if isinstance(value, str) else value


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"{text} does not fit a float")
    return value


# Built once: json.dumps/json.loads with options build a new encoder/decoder per call.
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
_ARGS_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float)
_HISTORY_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def _message_to_obj(m: Message) -> dict[str, Any]:
    obj: dict[str, Any] = {"role": m.role}
    if m.content:
        obj["content"] = m.content
    if m.parts:
        obj["parts"] = [_part_to_obj(p) for p in m.parts]
    if m.tool_calls:
        calls = []
        for c in m.tool_calls:
            call: dict[str, Any] = {"id": c.id, "name": c.name, "args": _args_value(c.args)}
            if c.signature:
                call["signature"] = c.signature
            if c.seal:
                call["seal"] = c.seal
            calls.append(call)
        obj["toolCalls"] = calls
    if m.tool_call_id:
        obj["toolCallId"] = m.tool_call_id
    if m.tool_name:
        obj["toolName"] = m.tool_name
    if m.failed:
        obj["failed"] = True
    if m.thinking:
        blocks = []
        for t in m.thinking:
            b: dict[str, str] = {}
            if t.text:
                b["text"] = t.text
            if t.signature:
                b["signature"] = t.signature
            if t.redacted:
                b["redacted"] = t.redacted
            blocks.append(b)
        obj["thinking"] = blocks
    if m.run_id:
        obj["runId"] = m.run_id
    if m.conversation_id:
        obj["conversationId"] = m.conversation_id
    return obj


def _part_to_obj(p: Part) -> dict[str, str]:
    obj = {"kind": p.kind}
    if p.url:
        obj["url"] = p.url
    if p.data:
        obj["data"] = base64.b64encode(p.data).decode("ascii")
    if p.media_type:
        obj["mediaType"] = p.media_type
    if p.text:
        obj["text"] = p.text
    return obj


def dumps_history(messages: Sequence[Message]) -> str:
    """Encode a history as Go-compatible JSON.

    Empty fields are omitted and tool-call args are embedded as JSON values
    (compacted; args that are not JSON are embedded as a string), so
    `dumps_history(loads_history(s)) == s` for any `s` this function produced.
    """
    return _ENCODER.encode([_message_to_obj(m) for m in messages])


class _Shape(ValueError):
    pass


def _str(obj: dict[str, Any], key: str) -> str:
    v = obj.get(key)
    if v is None:
        return ""
    if not isinstance(v, str):
        raise _Shape(f'"{key}" must be a string, got {type(v).__name__}')
    return v


def _list(obj: dict[str, Any], key: str) -> list[Any]:
    v = obj.get(key)
    if v is None:
        return []
    if not isinstance(v, list):
        raise _Shape(f'"{key}" must be an array, got {type(v).__name__}')
    return v


def _obj(v: Any, what: str) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise _Shape(f"{what} must be an object, got {type(v).__name__}")
    return v


def _load_part(v: Any, j: int) -> Part:
    o = _obj(v, f"part {j}")
    data_text = _str(o, "data")
    data: bytes | None = None
    if data_text:
        try:
            data = base64.b64decode(data_text, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise _Shape(f"part {j}: data is not valid base64") from exc
    return Part(
        kind=_str(o, "kind"),
        url=_str(o, "url") or None,
        data=data,
        media_type=_str(o, "mediaType") or None,
        text=_str(o, "text"),
    )


def _load_call(v: Any, j: int) -> ToolCall:
    o = _obj(v, f"tool call {j}")
    raw = o.get("args")
    if raw is None:
        args = ""
    elif isinstance(raw, str):  # args that were not JSON (a truncated stream) travel as a string
        args = raw
    else:
        args = _ENCODER.encode(raw)
    return ToolCall(
        id=_str(o, "id"),
        name=_str(o, "name"),
        args=args,
        signature=_str(o, "signature"),
        seal=_str(o, "seal") if "seal" in o else "",
    )


def _load_thinking(v: Any, j: int) -> ThinkingBlock:
    o = _obj(v, f"thinking block {j}")
    return ThinkingBlock(
        text=_str(o, "text"), signature=_str(o, "signature"), redacted=_str(o, "redacted")
    )


def _load_message(v: Any) -> Message:
    o = _obj(v, "a message")
    role = o.get("role")
    if role not in ROLES:
        raise _Shape(f"role must be one of system, user, assistant, tool; got {role!r}")
    failed = o.get("failed", False)
    if failed is None:
        failed = False
    if not isinstance(failed, bool):
        raise _Shape(f'"failed" must be a boolean, got {type(failed).__name__}')
    # Keys that are absent (the common case: empty fields are omitted) take a fast path.
    parts = o.get("parts")
    calls = o.get("toolCalls")
    thinking = o.get("thinking")
    return Message(
        role,
        _str(o, "content") if "content" in o else "",
        [_load_part(p, j) for j, p in enumerate(_list(o, "parts"))] if parts is not None else [],
        [_load_call(c, j) for j, c in enumerate(_list(o, "toolCalls"))]
        if calls is not None
        else [],
        _str(o, "toolCallId") if "toolCallId" in o else "",
        _str(o, "toolName") if "toolName" in o else "",
        failed,
        [_load_thinking(t, j) for j, t in enumerate(_list(o, "thinking"))]
        if thinking is not None
        else [],
        _str(o, "runId") if "runId" in o else "",
        _str(o, "conversationId") if "conversationId" in o else "",
    )


def loads_history(text: str | bytes) -> list[Message]:
    """Decode a history from JSON written by `dumps_history` or by the Go golem.

    Unknown keys are ignored and missing keys take their defaults.

    Raises:
        ValueError: the text is not JSON, not an array, or a message has the wrong
            shape; the message names the 0-based message index. Nothing is returned
            half-loaded.
    """
    try:
        data = _HISTORY_DECODER.decode(text.decode() if isinstance(text, bytes) else text)
    except ValueError as exc:
        raise ValueError(f"history is not valid JSON: {exc}") from exc
    if data is None:
        return []
    if not isinstance(data, list):
        raise ValueError(f"history must be a JSON array of messages, got {type(data).__name__}")
    out: list[Message] = []
    for i, v in enumerate(data):
        try:
            out.append(_load_message(v))
        except _Shape as exc:
            raise ValueError(f"history message {i}: {exc}") from None
    return out
