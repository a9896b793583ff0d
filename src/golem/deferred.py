"""What a pause produces (`pause`: the pending calls, sealed with a key, as
`DeferredRequests`), the resolutions that answer them (`DeferredResults`) and `PausedRun`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from golem.errors import HistoryError, ResumeError
from golem.messages import Message, ToolCall, dumps_history, loads_history, with_calls
from golem.seal import SealKeys, seal_call
from golem.tool import DeferKind, Deferred

__all__ = [
    "PAUSED_RUN_VERSION",
    "Approval",
    "DeferredRequests",
    "DeferredResults",
    "PausedRun",
    "PendingToolCall",
]


@dataclass(frozen=True, slots=True)
class PendingToolCall:
    """One call a paused run waits on."""

    call_id: str
    tool_name: str
    args: str
    """The raw argument JSON, byte-exact as the model produced it."""
    reason: str = ""
    """The reason the tool gave when it deferred (an approval prompt, a job key...)."""
    kind: DeferKind = DeferKind.APPROVAL
    """How the call is resolved: an approval decision or an external result."""
    seal: str = ""
    """The call's seal when the agent has a `seal_key` (the same text as on the history's
    `ToolCall.seal`), else empty."""


@dataclass(frozen=True, slots=True)
class DeferredRequests:
    """The pending calls of a paused run by kind, each list in emission order."""

    approvals: list[PendingToolCall] = field(default_factory=list)
    """Calls waiting for a human decision (`DeferKind.APPROVAL`)."""
    external: list[PendingToolCall] = field(default_factory=list)
    """Calls waiting for a result supplied by the application (`DeferKind.EXTERNAL`)."""
    conversation_id: str = field(default="", compare=False)
    """The conversation the calls paused in (their seals bind it); "" when not known."""

    @property
    def calls(self) -> list[PendingToolCall]:
        """Every pending call: approvals first, then external ones."""
        return [*self.approvals, *self.external]


@dataclass(frozen=True, slots=True)
class Approval:
    """The decision on one approval: `approved`, a denial's `reason`, or edited `args` (dict
    or JSON object text). `ValueError` for `args` on a denial, `TypeError` for bad types."""

    approved: bool
    reason: str = ""
    args: dict[str, Any] | str | None = None

    def __post_init__(self) -> None:
        if self.approved.__class__ is not bool:
            raise TypeError(
                f"Approval approved must be a bool (True runs the call, False denies it), "
                f"got {type(self.approved).__name__} {self.approved!r}"
            )
        if not isinstance(self.reason, str):
            raise TypeError(f"Approval reason must be a str, got {type(self.reason).__name__}")
        if self.args is None:
            return
        if not isinstance(self.args, dict | str):
            raise TypeError(
                f"Approval args must be a dict or JSON object text, got {type(self.args).__name__}"
            )
        if not self.approved:
            raise ValueError("Approval args edit an approved call; a denial takes no args")


@dataclass(frozen=True, slots=True, init=False)
class DeferredResults:
    """Resolutions for a paused run's calls by call ID: `approvals` (an `Approval`, or a
    bare bool) and `external` result texts (used verbatim). `TypeError` for any other type."""

    approvals: Mapping[str, Approval]
    external: Mapping[str, str]
    """Result text per call, used verbatim as the tool result (may be empty)."""

    def __init__(
        self,
        approvals: Mapping[str, Approval | bool] | None = None,
        external: Mapping[str, str] | None = None,
    ) -> None:
        decided: dict[str, Approval] = {}
        for call_id, value in (approvals or {}).items():
            if not isinstance(call_id, str):
                raise TypeError(f"approval keys are call IDs (str), got {call_id!r}")
            if isinstance(value, Approval):
                decided[call_id] = value
            elif isinstance(value, bool):
                decided[call_id] = Approval(value)
            else:
                raise TypeError(
                    f'approval for "{call_id}" must be an Approval or a bool, '
                    f"got {type(value).__name__}"
                )
        texts: dict[str, str] = {}
        for call_id, text in (external or {}).items():
            if not isinstance(call_id, str):
                raise TypeError(f"external result keys are call IDs (str), got {call_id!r}")
            if not isinstance(text, str):
                raise TypeError(
                    f'external result for "{call_id}" must be text (str), got '
                    f"{type(text).__name__}; serialize it first, e.g. json.dumps(value)"
                )
            texts[call_id] = text
        object.__setattr__(self, "approvals", decided)
        object.__setattr__(self, "external", texts)


def as_results(results: DeferredResults | Mapping[str, Any]) -> DeferredResults:
    """`results` as `DeferredResults` (or a dict of approvals/external); else `TypeError`."""
    if isinstance(results, DeferredResults):
        return results
    if isinstance(results, Mapping):
        unknown = sorted(str(k) for k in results if k not in ("approvals", "external"))
        if unknown:
            raise TypeError(
                f"a results dict has the keys 'approvals' and 'external', got {unknown}; "
                'write {"approvals": {"call-1": True}, "external": {"call-2": "text"}} '
                "or DeferredResults(approvals=..., external=...)"
            )
        return DeferredResults(results.get("approvals"), results.get("external"))
    raise TypeError(
        f"resolutions must be DeferredResults (or a dict with 'approvals' / 'external'), "
        f"got {type(results).__name__}"
    )


def grouped(calls: Iterable[PendingToolCall], conversation_id: str = "") -> DeferredRequests:
    """`calls` as `DeferredRequests`: grouped by kind, each group in the given order."""
    calls = list(calls)
    approvals = [p for p in calls if p.kind is DeferKind.APPROVAL]
    return DeferredRequests(
        approvals, [p for p in calls if p.kind is not DeferKind.APPROVAL], conversation_id
    )


def _requests_from(
    deferrals: Sequence[tuple[ToolCall, Deferred]],
    conversation_id: str,
    seals: Mapping[str, str] | None = None,
) -> DeferredRequests:
    """Group the calls that deferred in a batch (in emission order) by kind."""
    pending = []
    for call, signal in deferrals:
        kind = signal.kind if signal.kind.__class__ is DeferKind else DeferKind(signal.kind)
        seal = seals.get(call.id, "") if seals else ""
        reason = getattr(signal, "reason", "")
        pending.append(PendingToolCall(call.id, call.name, call.args, reason, kind, seal))
    return grouped(pending, conversation_id)


def pause(
    messages: list[Message],
    conversation_id: str,
    keys: SealKeys | None,
    deferrals: Sequence[tuple[ToolCall, Deferred]],
) -> DeferredRequests:
    """The pending requests of a pausing batch; with `keys`, the batch's assistant message in
    `messages` is replaced by a copy whose pending calls carry seals."""
    if keys is None:
        return _requests_from(deferrals, conversation_id)
    seals = {call.id: seal_call(keys, conversation_id, call, s.kind) for call, s in deferrals}
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if m.role == "assistant" and m.tool_calls:
            calls = [
                ToolCall(c.id, c.name, c.args, c.signature, seals[c.id]) if c.id in seals else c
                for c in m.tool_calls
            ]  # not `replace`: this runs on every sealed pause (ToolCall's fields are pinned)
            messages[i] = with_calls(m, calls)
            break
    return _requests_from(deferrals, conversation_id, seals)


def pending_calls(history: Sequence[Message]) -> list[ToolCall]:
    """The unanswered calls of the paused batch (the last assistant message with calls), in
    emission order; `ResumeError` for a call without an ID, a repeated ID, or none pending."""
    answered = {m.tool_call_id for m in history if m.role == "tool"}
    seen: set[str] = set()
    batch: Sequence[ToolCall] = ()
    for m in history:
        if m.role != "assistant" or not m.tool_calls:
            continue
        batch = m.tool_calls
        for c in batch:
            if not c.id:
                raise ResumeError(
                    f'golem: deferred tool call "{c.name}" has no call ID and cannot be resolved'
                )
            if c.id in seen:
                raise ResumeError(
                    f'golem: tool call ID "{c.id}" ({c.name}) appears more than once in the '
                    "history; one resolution cannot stand for two calls (a tampered history?)"
                )
            seen.add(c.id)
    pending = [c for c in batch if c.id not in answered]
    if not pending:
        raise ResumeError("golem: history has no pending deferred tool calls to resolve")
    return pending


class _PendingWire(msgspec.Struct, forbid_unknown_fields=False):
    id: str
    name: str
    args: str
    kind: str
    reason: str = ""
    seal: str = ""


class _PausedHead(msgspec.Struct, forbid_unknown_fields=False):
    pausedRun: int
    pending: list[_PendingWire]
    conversationId: str = ""
    runId: str = ""
    traceContext: str = ""


def _split_history(text: str) -> tuple[str, str]:
    """`text` (a JSON object) as (it without its top-level "history", that value), scanned flat."""
    s = text.strip()
    if not s.startswith("{"):
        raise HistoryError("golem: not a paused run: expected a JSON object")
    depth, i, n, in_str, start = 0, 0, len(s), False, -1
    key_start = key_end = -1
    found: tuple[int, int, int] | None = None  # (key start, value start, value end)
    while i < n:
        ch = s[i]
        if in_str:
            if ch == "\\":
                i += 1
            elif ch == '"':
                in_str = False
                if depth == 1 and start == -1:
                    key_end = i + 1
        elif ch == '"':
            in_str = True
            if depth == 1 and start == -1:
                key_start = i
        elif ch in "[{":
            depth += 1
        elif ch in "]}" or (ch == "," and depth == 1):
            if depth == 1 and start != -1:
                if s[key_start:key_end] == '"history"':
                    if found is not None:
                        raise HistoryError("golem: not a paused run: two history members")
                    found = (key_start, start, i)
                start = -1
            if ch != ",":
                depth -= 1
        elif ch == ":" and depth == 1 and start == -1:
            start = i + 1
        i += 1
    if found is None:
        raise HistoryError("golem: not a paused run: it has no history")
    key, value_start, value_end = found
    head = s[:key] + '"history":null' + s[value_end:]
    return head, s[value_start:value_end]


PAUSED_RUN_VERSION = 1
"""The `pausedRun` number `PausedRun.dumps` writes; `PausedRun.loads` refuses others."""


@dataclass(frozen=True, slots=True)
class PausedRun:
    """Everything a resume needs of a paused run as one value (`Result.paused_run`): the
    history, conversation ID, trace context and pending calls; `dumps` gives one JSON document."""

    messages: list[Message]
    """The paused history (`Result.messages`)."""
    pending: DeferredRequests
    """The calls the run waits on (`Result.pending`)."""
    conversation_id: str
    run_id: str = ""
    trace_context: str = ""
    """The paused run's W3C `traceparent` when it was traced, else ""."""

    def dumps(self) -> str:
        """The paused run as one JSON document; `PausedRun.loads` reads it back equal."""
        head = msgspec.json.encode(
            {
                "pausedRun": PAUSED_RUN_VERSION,
                "runId": self.run_id,
                "conversationId": self.conversation_id,
                "traceContext": self.trace_context,
                "pending": [
                    {
                        "id": c.call_id,
                        "name": c.tool_name,
                        "args": c.args,
                        "kind": c.kind.value,
                        "reason": c.reason,
                        "seal": c.seal,
                    }
                    for c in self.pending.calls
                ],
            }
        ).decode()
        return f'{head[:-1]},"history":{dumps_history(self.messages)}}}'

    @classmethod
    def loads(cls, text: str | bytes) -> PausedRun:
        """Read a document `dumps` wrote (`HistoryError` when it is not one)."""
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        head, history = _split_history(text)
        try:
            wire = msgspec.json.decode(head, type=_PausedHead)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
            raise HistoryError(f"golem: not a paused run: {exc}") from None
        if wire.pausedRun != PAUSED_RUN_VERSION:
            raise HistoryError(
                f"golem: paused run version {wire.pausedRun} is not supported "
                f"(this golem reads version {PAUSED_RUN_VERSION})"
            )
        pending = []
        for i, c in enumerate(wire.pending):
            try:
                kind = DeferKind(c.kind)
            except ValueError:
                raise HistoryError(
                    f"golem: paused run pending call {i} has unknown kind {c.kind!r}"
                ) from None
            pending.append(PendingToolCall(c.id, c.name, c.args, c.reason, kind, c.seal))
        return cls(
            messages=loads_history(history),
            pending=grouped(pending, wire.conversationId),
            conversation_id=wire.conversationId,
            run_id=wire.runId,
            trace_context=wire.traceContext,
        )
