"""What the inbox pages show: view dictionaries built from store records, and formatting
(the templates escape every string; `reveal_html` also marks hidden characters)."""

from __future__ import annotations

import difflib
import hashlib
import json
import re
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from markupsafe import Markup, escape

from golem._display import has_hidden, reveal_parts
from golem.durable.store import AuditEntry, PendingCallRecord, RunRecord, RunStatus
from golem.messages import loads_history
from golem.service.auth import Credential
from golem.service.positions import entry_id

__all__ = ["Presentation", "Presenter"]


def reveal_html(value: object) -> Markup:
    """Escaped text with hidden characters as markers, long words breakable (`_breakable`)."""
    text = "" if value is None else str(value)
    if not has_hidden(text):
        return _breakable(text)
    out = [
        Markup('<span class="hidden-char" title="hidden character">{}</span>').format(part)
        if is_marker
        else _breakable(part)
        for part, is_marker in reveal_parts(text)
    ]
    return Markup("").join(out)


WORD_CHUNK = 48

_LONG_WORD = re.compile(rf"\S{{{WORD_CHUNK + 1},}}")


def _breakable(text: str) -> Markup:
    """`text` escaped, with `<wbr>` every `WORD_CHUNK` characters of a longer word (a
    browser lays out a 20,000-letter word in seconds; with break points in milliseconds)."""
    if len(text) <= WORD_CHUNK or not _LONG_WORD.search(text):
        return escape(text)
    out: list[Markup] = []
    at = 0
    for match in _LONG_WORD.finditer(text):
        out.append(escape(text[at : match.start()]))
        word = match.group()
        chunks, start = [], 0
        while start < len(word):
            end = min(start + WORD_CHUNK, len(word))
            # a combining mark, joiner or selector stays with the letter before it
            while end < len(word) and (
                unicodedata.category(word[end]) in ("Mn", "Mc", "Me")
                or word[end] in "\u200d\ufe0e\ufe0f"
            ):
                end += 1
            chunks.append(word[start:end])
            start = end
        out.append(Markup("<wbr>").join(escape(c) for c in chunks))
        at = match.end()
    out.append(escape(text[at:]))
    return Markup("").join(out)


LONG_LINES = 12  # argument values longer than this many lines (or LONG_CHARS) start folded
LONG_CHARS = 800
PREVIEW_LINES = 6
LIST_FIELD_CHARS = 16_384  # longer values: the inbox list shows their preview only
LIST_EDIT_CHARS = 65_536  # longer arguments are edited on the run's page, not in the list


def _span(seconds: float) -> str:
    s = abs(seconds)
    if s < 45:
        return "a few seconds"
    for unit, size, below in (("min", 60, 60), ("h", 3600, 24)):
        if round(s / size) < below:
            return f"{round(s / size)} {unit}"
    return f"{round(s / 86400)} d"


def ago(at: datetime, now: datetime) -> str:
    seconds = (now - at).total_seconds()
    return "just now" if seconds < 45 else f"{_span(seconds)} ago"


def _until(at: datetime, now: datetime) -> str:
    seconds = (at - now).total_seconds()
    return "now (expired)" if seconds <= 0 else f"in {_span(seconds)}"


def iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat()


def _stamp(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _pretty_json(raw: str) -> str:
    """Indented JSON for display; text that is not JSON is shown as it is."""
    try:
        value = json.loads(raw)
        return json.dumps(value, indent=2, ensure_ascii=False)
    except (ValueError, TypeError, RecursionError):  # deeper than json's stack: as it is
        return raw


def _field(label: str, value: Any) -> dict[str, Any]:
    text = value if isinstance(value, str) else json.dumps(value, indent=2, ensure_ascii=False)
    lines = text.count("\n") + 1
    long = lines > LONG_LINES or len(text) > LONG_CHARS
    preview = "\n".join(text.split("\n")[:PREVIEW_LINES])
    if len(preview) > LONG_CHARS // 2:
        preview = preview[: LONG_CHARS // 2]
    return {
        "label": label,
        "text": text,
        "kind": "text" if isinstance(value, str) else "json",
        "lines": lines,
        "chars": len(text),
        "long": long,
        "preview": preview + "…" if long else text,
        "clipped": False,
    }


def _arg_fields(args: str) -> list[dict[str, Any]]:
    """A call's arguments field by field (strings as text, other values as indented JSON);
    arguments that are not a JSON object are one field."""
    try:
        value = json.loads(args)
    except (ValueError, TypeError, RecursionError):
        return [_field("arguments", args)]
    if isinstance(value, dict) and value:
        return [_field(str(k), v) for k, v in value.items()]
    return [_field("arguments", value)]


def short(run_id: str) -> str:
    return run_id[-12:]


def digest(*parts: object) -> str:
    text = json.dumps(parts, default=str, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def path(*segments: str) -> str:
    return "/" + "/".join(quote(s, safe="") for s in segments)


def _editable_json(raw: str) -> str:
    """Indented JSON for an edit box, hidden characters as `\\uXXXX` escapes (astral ones
    as surrogate pairs, as JSON spells them)."""
    text = _pretty_json(raw)
    if not has_hidden(text):
        return text
    return "".join(
        (f"\\u{ord(ch):04x}" if ch in "\b\f\r" else json.dumps(ch)[1:-1]) if has_hidden(ch) else ch
        for ch in text
    )


@dataclass(frozen=True)
class Presentation:
    """How the inbox presents a call of one tool (`ServiceSettings(presenters={"deploy":
    fn})`, `fn(args) -> Presentation`): a title, a summary line, a before/after diff."""

    _: KW_ONLY
    title: str = ""
    """Replaces the tool name as the card's heading (the tool name stays beside it)."""
    summary: str = ""
    """One line saying what the call will do."""
    before: str | None = None
    """The current state (e.g. a config file); with `after`, shown as a line diff."""
    after: str | None = None
    """The state the call would leave."""


Presenter = Callable[[dict[str, Any]], Presentation]
"""Turns a call's arguments into its `Presentation`."""


def _presentation_view(
    presenters: Mapping[str, Presenter], tool_name: str, args: str
) -> dict[str, Any] | None:
    """The card's presentation of a call, or None (no presenter, or it failed)."""
    presenter = presenters.get(tool_name)
    if presenter is None:
        return None
    try:
        value = json.loads(args)
        shown = presenter(value if isinstance(value, dict) else {})
    except Exception:  # a presenter must never hide the call: fall back to the fields
        return None
    diff: list[tuple[str, str]] = []
    if shown.before is not None and shown.after is not None:
        diff = _line_diff(shown.before, shown.after)
    return {"title": shown.title, "summary": shown.summary, "diff": diff}


def _line_diff(old: str, new: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for line in difflib.ndiff(old.splitlines(), new.splitlines()):
        tag, text = line[:1], line[2:]
        if tag != "?":
            out.append(("add" if tag == "+" else "del" if tag == "-" else "same", f"{tag} {text}"))
    return out


def _args_diff(before: str, after: str | None) -> list[tuple[str, str]]:
    """Line diff of two argument JSON texts (empty when `after` is None or the same)."""
    if after is None:
        return []
    old, new = _pretty_json(before), _pretty_json(after)
    return [] if old == new else _line_diff(old, new)


def call_view(
    run: RunRecord,
    c: PendingCallRecord,
    cred: Credential,
    now: datetime,
    presenters: Mapping[str, Presenter] | None = None,
    *,
    listed: bool = False,
) -> dict[str, Any]:
    """What a call card shows; `listed` cards leave out huge values and edit boxes."""
    decision = None
    if c.decision is not None:
        d = c.decision
        decision = {
            "kind": d.kind.value,
            "label": {"approve": "Approved", "deny": "Denied", "external": "Answered"}[
                d.kind.value
            ],
            "by": d.decided_by,
            "at_iso": iso(d.decided_at),
            "at_text": ago(d.decided_at, now),
            "reason": d.reason,
            "text": d.text,
            "diff": _args_diff(c.args, getattr(d, "args", None)),
        }
    deadline = c.deadline
    return {
        "dom_id": "call-" + digest(run.id, c.call_id),
        "version": digest(run.status.value, decision),
        "run_id": run.id,
        "run_href": path("runs", run.id),
        "run_short": short(run.id),
        "call_id": c.call_id,
        "agent": run.agent,
        "kind": c.kind.value,
        "tool_name": c.tool_name,
        "reason": c.reason,
        "args_edit": "" if listed and len(c.args) > LIST_EDIT_CHARS else _editable_json(c.args),
        "shown": _presentation_view(presenters or {}, c.tool_name, c.args),
        # listed past LIST_FIELD_CHARS: a field's preview without its text
        "fields": [
            {**f, "text": "", "clipped": True} if listed and f["chars"] > LIST_FIELD_CHARS else f
            for f in _arg_fields(c.args)
        ],
        "created_iso": iso(run.created_at),
        "age": ago(run.created_at, now),
        "deadline_iso": iso(deadline) if deadline else "",
        "expires": _until(deadline, now) if deadline else "",
        "soon": bool(deadline and (deadline - now).total_seconds() < 300),
        "decision": decision,
        "can_decide": run.status is RunStatus.PENDING
        and cred.approver.may_decide(run.agent, c.tool_name),
        "action": path("runs", run.id, "calls", c.call_id, "decision"),
        "after": "",
    }


SOON_SECONDS = 3600.0  # runs with a call expiring sooner are listed under "Expiring soon"


def context_of(history: str) -> tuple[str, str]:
    """The run's prompt (first user message) and the assistant's last words before the calls."""
    try:
        messages = loads_history(history)
    except ValueError:
        return "", ""
    prompt = next((m.content for m in messages if m.role == "user" and m.content), "")
    said = next((m.content for m in reversed(messages) if m.role == "assistant" and m.content), "")
    return prompt, said


def group_views(
    found: list[tuple[RunRecord, PendingCallRecord]],
    cred: Credential,
    now: datetime,
    presenters: Mapping[str, Presenter] | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Pending calls grouped by run: (expiring soon, by deadline; the rest, oldest first)."""
    runs: dict[str, tuple[RunRecord, list[PendingCallRecord]]] = {}
    for run, c in found:
        runs.setdefault(run.id, (run, []))[1].append(c)
    soon: list[tuple[datetime, dict[str, Any]]] = []
    rest: list[tuple[datetime, dict[str, Any]]] = []
    for run, calls in runs.values():
        prompt, said = context_of(run.conversation)
        cards = [call_view(run, c, cred, now, presenters, listed=True) for c in calls]
        decided = [
            call_view(run, c, cred, now, listed=True) for c in run.calls if c.decision is not None
        ]
        deadlines = [c.deadline for c in calls if c.deadline is not None]
        first = min(deadlines) if deadlines else None
        group = {
            "dom_id": "run-" + digest(run.id),
            "version": digest([c["version"] for c in cards], [c["version"] for c in decided]),
            "run_id": run.id,
            "run_href": path("runs", run.id),
            "run_short": short(run.id),
            "agent": run.agent,
            "title": first_line(prompt) or f"Run {short(run.id)}",
            "prompt": prompt,
            "said": said,
            "started_by": run.started_by,
            "age": ago(run.created_at, now),
            "created_iso": iso(run.created_at),
            "calls": cards,
            "decided": decided,
            "bulk": len(cards) > 1 and all(c["can_decide"] for c in cards),
            "approvable": all(c["kind"] == "approval" for c in cards),
            "bulk_action": path("runs", run.id, "decisions"),
        }
        if first is not None and (first - now).total_seconds() < SOON_SECONDS:
            soon.append((first, group))
        else:
            rest.append((run.created_at, group))
    soon.sort(key=lambda t: (t[0], t[1]["run_id"]))
    rest.sort(key=lambda t: (t[0], t[1]["run_id"]))
    groups = [g for _, g in soon], [g for _, g in rest]
    link_next([c for part in groups for g in part for c in g["calls"]])
    return groups


def link_next(cards: list[dict[str, Any]]) -> None:
    """Give each card the DOM ID of the card after it (where focus goes once it is decided)."""
    for card, following in zip(cards, [*cards[1:], None], strict=False):
        card["after"] = following["dom_id"] if following else ""


def first_line(text: str, limit: int = 120) -> str:
    line = text.strip().split("\n", 1)[0]
    return line if len(line) <= limit else line[: limit - 1] + "…"


def message_views(history: str) -> list[dict[str, Any]]:
    try:
        messages = loads_history(history)
    except ValueError:
        return [{"role": "system", "title": "unreadable history", "content": history}]
    views: list[dict[str, Any]] = []
    for m in messages:
        title = {"system": "System", "user": "User", "assistant": "Assistant"}.get(m.role, "")
        if m.role == "tool":
            title = f"Tool result · {m.tool_name}" + (" · failed" if m.failed else "")
        view = {
            "role": m.role,
            "title": title,
            "content": m.content,
            "failed": m.failed,
            "parts": [f"{p.kind}: {p.url or p.media_type or 'inline data'}" for p in m.parts],
            "thinking": "\n\n".join(t.text or "(redacted)" for t in m.thinking),
            "tool_calls": [
                {"id": t.id, "name": t.name, "args": _pretty_json(t.args)} for t in m.tool_calls
            ],
        }
        view["version"] = digest(view)
        views.append(view)
    return views


def outcome_line(run: RunRecord) -> str:
    """One line saying how a finished run ended (empty while it is not finished)."""
    if run.outcome is None:
        return ""
    if run.outcome.error:
        return first_line(run.outcome.error, 90)
    return first_line(_output_text(run), 90)


def _output_text(run: RunRecord) -> str:
    output = run.outcome.output if run.outcome is not None else None
    if isinstance(output, str):
        return output
    return json.dumps(output, indent=2, ensure_ascii=False)


def run_view(run: RunRecord, now: datetime) -> dict[str, Any]:
    """What the run page's header, facts and outcome show."""
    return {
        "id": run.id,
        "short": short(run.id),
        "status": run.status.value,
        "version": digest(run.status.value, run.child_run_id, len(run.undecided)),
        "agent": run.agent,
        "conversation_id": run.conversation_id,
        "started_by": run.started_by,
        "created_iso": iso(run.created_at),
        "created_text": f"{_stamp(run.created_at)} ({ago(run.created_at, now)})",
        "expires_iso": iso(run.expires_at) if run.expires_at else "",
        "expires_text": f"{_stamp(run.expires_at)} ({_until(run.expires_at, now)})"
        if run.expires_at
        else "",
        "deps_ref": None if run.deps_ref is None else json.dumps(run.deps_ref),
        "parent_run_id": run.parent_run_id,
        "parent_href": path("runs", run.parent_run_id) if run.parent_run_id else "",
        "child_run_id": run.child_run_id,
        "child_href": path("runs", run.child_run_id) if run.child_run_id else "",
        "child_short": short(run.child_run_id or ""),
        "lease_owner": run.lease_owner or "",
        "undecided": len(run.undecided),
        "output_text": _output_text(run),
        "error": run.outcome.error if run.outcome is not None else "",
    }


def audit_view(e: AuditEntry, secret: bytes | None = None) -> dict[str, Any]:
    """An audit entry as the pages show it (`secret`: see `golem.service.positions.entry_id`)."""
    detail = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in e.detail.items())
    return {
        "id": entry_id(e, secret),
        "at_iso": iso(e.at),
        "at_text": _stamp(e.at),
        "actor": e.actor,
        "action": e.action.value,
        "detail": detail,
    }
