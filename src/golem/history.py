"""History repair (`normalize_history`, applied by every run), run-start validation and
`sanitize_history`, the boundary pass for history you did not author; see the history guide
(docs/guides/conversations-and-history.md) and ADR 0012, 0063 for sealed pending calls."""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from urllib.parse import urlsplit

import msgspec

from golem.errors import HistoryError, SealError
from golem.messages import Message, loads_history, new_message
from golem.seal import SealKey, as_seal_keys, verify_call

__all__ = [
    "INTERRUPTED_TEXT",
    "HistoryRepair",
    "RejectedCall",
    "SanitizeReport",
    "UnsafePart",
    "normalize_history",
    "sanitize_history",
]

INTERRUPTED_TEXT = (
    "Tool call was interrupted before execution; no result was produced. "
    "Call the tool again if you need its result."
)
"""The synthesized result of a tool call that never got one."""


@dataclass(frozen=True, slots=True)
class HistoryRepair:
    """What `normalize_history` changed or noticed, by call ID, in history order."""

    synthesized: list[str] = field(default_factory=list)
    """Calls that had no result and got the interrupted result."""
    dropped: list[str] = field(default_factory=list)
    """Tool results dropped as orphans or duplicates (their tool_call_id)."""
    truncated: list[str] = field(default_factory=list)
    """Calls whose arguments are not a JSON object (reported, never rewritten)."""


@dataclass(frozen=True, slots=True)
class UnsafePart:
    """A part `sanitize_history` removed: its URL scheme, or a text part without text."""

    message_index: int
    """Index of the message in the input history (0-based)."""
    kind: str
    """The part's kind (image, document, audio, video, or text)."""
    scheme: str
    """The lowercased URL scheme, or "" when the URL has none."""


@dataclass(frozen=True, slots=True)
class RejectedCall:
    """A pending call `sanitize_history` closed because its seal did not verify."""

    call_id: str
    tool_name: str
    problem: str
    """"unsealed", "unknown_key", "tampered", "malformed", "duplicate" or "outside_batch"
    (a genuine seal on a call of an older turn, which a resume refuses)."""
    message: str
    """The full explanation (the `SealError` message)."""


@dataclass(frozen=True, slots=True)
class SanitizeReport:
    """Everything `sanitize_history` changed."""

    system_prompts: int = 0
    """System messages removed."""
    unsafe_parts: list[UnsafePart] = field(default_factory=list)
    """Parts removed for a URL scheme other than http/https."""
    repair: HistoryRepair = field(default_factory=HistoryRepair)
    """The pairing repair; `repair.synthesized` names every unanswered call it closed."""
    rejected: list[RejectedCall] = field(default_factory=list)
    """With a seal key: the pending calls closed because they are forged, tampered with,
    unsealed or duplicated, in history order (each also in `repair.synthesized`)."""
    kept_open: list[str] = field(default_factory=list)
    """With a seal key: the genuine sealed pending calls left open (resumable), by call ID."""


History = Sequence[Message] | str
"""A history: messages, or their JSON (`dumps_history`)."""


def as_history(hist: History | None) -> list[Message]:
    """`hist` as messages (JSON text is loaded)."""
    if hist is None:
        return []
    if isinstance(hist, str):
        return loads_history(hist)
    return list(hist)


def conversation_of(messages: Sequence[Message]) -> str:
    """The conversation the latest message that names one names, or ""."""
    for m in reversed(messages):
        if m.conversation_id:
            return m.conversation_id
    return ""


_JSON = msgspec.json.Decoder(msgspec.Raw)  # validates without building values


def _args_truncated(args: str) -> bool:
    """Args are not a JSON object (as Go's `json.Valid`: lone escapes yes, `NaN` no)."""
    text = args.strip()
    if not text.startswith("{"):
        return True
    try:
        _JSON.decode(text)  # the fast common case: valid JSON as RFC 8259 has it
        return False
    except (msgspec.DecodeError, RecursionError):
        pass
    try:
        json.loads(text, parse_constant=_not_json)
    except (ValueError, RecursionError):
        return True
    return False


def _not_json(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def paused_batch_ids(history: Sequence[Message]) -> set[str]:
    """The call IDs of the paused batch: the last assistant message with tool calls."""
    for m in reversed(history):
        if m.role == "assistant" and m.tool_calls:
            return {c.id for c in m.tool_calls}
    return set()


def normalize_history(
    history: Sequence[Message], *, keep_open: Collection[str] = ()
) -> tuple[list[Message], HistoryRepair]:
    """Pair every tool call with exactly one result: a call without one (not in `keep_open`)
    gets `INTERRUPTED_TEXT`, orphan/duplicate/ID-less results are dropped. Never mutates."""
    return _normalize(history, keep_open, scan_args=True)


def pair_results(history: Sequence[Message]) -> list[Message]:
    """`normalize_history`'s messages alone, without the truncated-args scan."""
    return _normalize(history, (), scan_args=False)[0]


def _normalize(
    history: Sequence[Message], keep_open: Collection[str], *, scan_args: bool
) -> tuple[list[Message], HistoryRepair]:
    truncated: list[str] = []
    dropped: list[str] = []
    open_calls: dict[str, int] = {}  # call id -> index in `keep` of its last assistant message
    keep: list[Message] = []
    append = keep.append
    for m in history:  # the hot loop of every run: one pass, little work per message
        role = m.role
        if role == "tool":
            call_id = m.tool_call_id
            if call_id and call_id in open_calls:
                del open_calls[call_id]
                append(m)
            else:
                dropped.append(call_id)
            continue
        if role == "assistant" and m.tool_calls:
            position = len(keep)
            for c in m.tool_calls:
                if c.id:
                    if scan_args and _args_truncated(c.args):
                        truncated.append(c.id)
                    open_calls[c.id] = position
        append(m)
    for call_id in keep_open:
        open_calls.pop(call_id, None)
    if not open_calls and not dropped:
        return list(history), HistoryRepair(truncated=truncated)
    synthesized: list[str] = []
    out: list[Message] = []
    # open_calls preserves insertion order: assistant-message order, then call order.
    by_position: dict[int, list[str]] = {}
    for call_id, pos in open_calls.items():
        by_position.setdefault(pos, []).append(call_id)
    for i, m in enumerate(keep):
        out.append(m)
        closing = by_position.get(i)
        if not closing:
            continue
        # the name of the last call with each ID: one pass, not one per closed call
        names = {c.id: c.name for c in m.tool_calls}
        for call_id in closing:
            out.append(
                new_message(
                    "tool", INTERRUPTED_TEXT, tool_call_id=call_id, tool_name=names[call_id]
                )
            )
            synthesized.append(call_id)
    return out, HistoryRepair(synthesized=synthesized, dropped=dropped, truncated=truncated)


def validate_history(history: Sequence[Message]) -> None:
    """Check the structural rules a run relies on (`HistoryError` naming the index)."""
    for i, m in enumerate(history):
        if m.parts:
            if m.role == "system":
                raise HistoryError(
                    f"history message {i}: parts are only supported on user, tool and "
                    "assistant messages"
                )
            for j, p in enumerate(m.parts):
                problem = p.problem()
                if problem:
                    raise HistoryError(f"history message {i} part {j}: {problem}")
        if m.thinking:
            if m.role != "assistant":
                raise HistoryError(
                    f"history message {i}: thinking is only supported on assistant messages"
                )
            for j, t in enumerate(m.thinking):
                if bool(t.text) == bool(t.redacted) and (t.text or not t.signature):
                    raise HistoryError(
                        f"history message {i} thinking block {j}: needs exactly one of text and redacted"
                    )
                if t.redacted and t.signature:
                    raise HistoryError(
                        f"history message {i} thinking block {j}: a redacted block has no signature"
                    )


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_BAD_ESCAPE = re.compile(r"%(?![0-9a-fA-F]{2})")
_BAD_HOST = re.compile(r"[ {}|\\^`]")
_PORT = re.compile(r"(?::[0-9]*)?")


def _scheme(url: str) -> str:
    """The lowercased scheme of `url`, or "" when it has none or Go's `net/url.Parse` would
    refuse it (control characters, bad host, port or `%` escape)."""
    if not url[:1].isascii() or not url[:1].isalpha() or _CONTROL.search(url):
        return ""
    try:
        parts = urlsplit(url)
    except ValueError:
        return ""
    hostport = parts.netloc.rpartition("@")[2]
    if hostport.startswith("["):
        hostport = hostport.rpartition("]")[2]
    else:
        if _BAD_HOST.search(hostport):
            return ""
        hostport = hostport[hostport.rfind(":") :] if ":" in hostport else ""
    if not _PORT.fullmatch(hostport):
        return ""
    if _BAD_ESCAPE.search(parts.netloc + parts.path + parts.fragment):
        return ""
    return parts.scheme.lower()


def sanitize_history(
    history: Sequence[Message],
    *,
    seal_key: SealKey | None = None,
    conversation_id: str | None = None,
) -> tuple[list[Message], SanitizeReport]:
    """Make history you did not author safe to run on: drop system messages, non-http(s) parts
    and empty text, then normalize; with `seal_key`, genuinely sealed pending calls stay open."""
    systems = 0
    unsafe: list[UnsafePart] = []
    kept: list[Message] = []
    for i, m in enumerate(history):
        if m.role == "system":
            systems += 1
            continue
        if m.parts:
            parts = []
            for p in m.parts:
                if p.kind == "text" and not p.text:  # a history the Go golem re-wrote
                    unsafe.append(UnsafePart(message_index=i, kind="text", scheme=""))
                    continue
                if p.url:
                    scheme = _scheme(p.url)
                    if scheme not in ("http", "https"):
                        unsafe.append(UnsafePart(message_index=i, kind=p.kind, scheme=scheme))
                        continue
                parts.append(p)
            if len(parts) != len(m.parts):
                m = replace(m, parts=parts)
        if m.role == "user" and not m.content and not m.parts:
            continue
        kept.append(m)
    rejected: list[RejectedCall] = []
    genuine: list[str] = []
    if seal_key is not None:
        genuine, rejected = _check_seals(kept, seal_key, conversation_id)
    repaired, report = normalize_history(kept, keep_open=genuine)
    return repaired, SanitizeReport(
        system_prompts=systems,
        unsafe_parts=unsafe,
        repair=report,
        rejected=rejected,
        kept_open=genuine,
    )


def _check_seals(
    history: Sequence[Message], seal_key: SealKey, conversation_id: str | None
) -> tuple[list[str], list[RejectedCall]]:
    """The pending calls of `history` whose seals verify, and the rejected ones."""
    keys = as_seal_keys(seal_key)
    if conversation_id is None:
        conversation_id = next(
            (m.conversation_id for m in reversed(history) if m.conversation_id), ""
        )
    answered = {m.tool_call_id for m in history if m.role == "tool"}
    counts: dict[str, int] = {}
    for m in history:
        if m.role == "assistant":
            for c in m.tool_calls:
                counts[c.id] = counts.get(c.id, 0) + 1
    batch = paused_batch_ids(history)
    genuine: list[str] = []
    rejected: list[RejectedCall] = []
    for m in history:
        if m.role != "assistant":
            continue
        for c in m.tool_calls:
            if not c.id or c.id in answered:
                continue
            if counts[c.id] > 1:
                text = f'golem: tool call ID "{c.id}" ({c.name}) appears more than once'
                rejected.append(RejectedCall(c.id, c.name, "duplicate", text))
                continue
            try:
                verify_call(keys, conversation_id, c)
            except SealError as exc:
                rejected.append(RejectedCall(c.id, c.name, exc.problem, str(exc)))
                continue
            if c.id not in batch:  # as a resume refuses it (deferred._check_batch)
                text = (
                    f'golem: pending tool call "{c.id}" ({c.name}) is not in the paused batch: '
                    "its seal is genuine, so it was answered in an earlier turn"
                )
                rejected.append(RejectedCall(c.id, c.name, "outside_batch", text))
            else:
                genuine.append(c.id)
    return genuine, rejected
