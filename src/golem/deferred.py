"""Pausing and resuming: pending calls, resolutions, resume validation and merge order.

The run loop calls into this module at exactly two points: `requests_from` after a
tool batch in which calls deferred (the run pauses), and `prepare_resume` before a
resumed run's first model call (validate the resolutions, re-run approved calls,
merge the resolutions into the history).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from golem.errors import ResumeError, RunError, Stage, ToolError, ToolTimeout
from golem.messages import Message, ToolCall
from golem.tool import Canceled, Deferred, RunContext, Tool, ToolResult, approved_call, find_signal

__all__ = [
    "Approval",
    "DeferredRequests",
    "DeferredResults",
    "PendingToolCall",
    "check_results",
    "denial_text",
    "merge",
    "pending_calls",
    "requests_from",
    "rerun_approved",
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


@dataclass(frozen=True, slots=True)
class DeferredRequests:
    """The pending calls of a paused run, grouped by how they are resolved.

    Each list keeps the model's emission order.
    """

    approvals: list[PendingToolCall] = field(default_factory=list)
    """Calls waiting for a human decision (`DeferKind.APPROVAL`)."""
    external: list[PendingToolCall] = field(default_factory=list)
    """Calls waiting for a result supplied by the application (`DeferKind.EXTERNAL`)."""

    @property
    def calls(self) -> list[PendingToolCall]:
        """Every pending call: approvals first, then external ones."""
        return [*self.approvals, *self.external]


@dataclass(frozen=True, slots=True)
class Approval:
    """The decision on one approval request."""

    approved: bool
    reason: str = ""
    """Why it was denied; shown to the model (unused on approval)."""


@dataclass(frozen=True, slots=True)
class DeferredResults:
    """Resolutions for the pending calls of a paused run, keyed by call ID."""

    approvals: Mapping[str, Approval] = field(default_factory=dict)
    external: Mapping[str, str] = field(default_factory=dict)
    """Result text per call, used verbatim as the tool result (may be empty)."""


def denial_text(reason: str) -> str:
    """The tool result the model receives for a denied call."""
    if reason:
        return f"Your tool call was denied: {reason}. Do not call it again; continue without its result."
    return "Your tool call was denied. Do not call it again; continue without its result."


def requests_from(deferrals: Sequence[tuple[ToolCall, Deferred]]) -> DeferredRequests:
    """Group the calls that deferred in a batch (in emission order) by kind."""
    approvals: list[PendingToolCall] = []
    external: list[PendingToolCall] = []
    for call, signal in deferrals:
        pending = PendingToolCall(call.id, call.name, call.args, signal.reason)
        (approvals if signal.kind == "approval" else external).append(pending)
    return DeferredRequests(approvals=approvals, external=external)


def pending_calls(history: Sequence[Message]) -> list[ToolCall]:
    """Every tool call of the history that no tool message answers, in history order.

    Raises:
        ResumeError: a tool call has no ID, or nothing is pending.
    """
    answered = {m.tool_call_id for m in history if m.role == "tool"}
    pending: list[ToolCall] = []
    for m in history:
        if m.role != "assistant":
            continue
        for c in m.tool_calls:
            if not c.id:
                raise ResumeError(
                    f'golem: deferred tool call "{c.name}" has no call ID and cannot be resolved'
                )
            if c.id not in answered:
                pending.append(c)
    if not pending:
        raise ResumeError("golem: history has no pending deferred tool calls to resolve")
    return pending


def check_results(
    pending: Sequence[ToolCall], results: DeferredResults, tools: Mapping[str, Tool]
) -> None:
    """Validate resolutions against the pending calls, before anything runs.

    Raises:
        ResumeError: an unknown call ID, a call resolved twice, an unresolved call,
            or an approved call whose tool the agent does not have.
    """
    ids = {c.id for c in pending}
    for call_id in results.approvals:
        if call_id not in ids:
            raise ResumeError(f'golem: approval for unknown tool call "{call_id}"')
        if call_id in results.external:
            raise ResumeError(
                f'golem: tool call "{call_id}" is resolved as both an approval and an external result'
            )
    for call_id in results.external:
        if call_id not in ids:
            raise ResumeError(f'golem: external result for unknown tool call "{call_id}"')
    for c in pending:
        approval = results.approvals.get(c.id)
        if approval is None and c.id not in results.external:
            raise ResumeError(f'golem: pending tool call "{c.id}" ({c.name}) has no resolution')
        if approval is not None and approval.approved and c.name not in tools:
            raise ResumeError(
                f'golem: pending tool call "{c.id}": tool "{c.name}" is not registered'
            )


async def rerun_approved(
    tool: Tool, call: ToolCall, ctx: RunContext[Any], timeout: float | None
) -> ToolResult:
    """Execute an approved call once, with `call_approved()` true and the call's timeout.

    Raises:
        RunError: stage `tool` when the re-run fails, times out or defers again;
            stage `canceled` when it raises `Canceled`. No correction budget applies.
        asyncio.CancelledError: the caller cancelled; never turned into a tool error.
    """
    try:
        with approved_call():
            return await tool.run(ctx, call.args, timeout)
    except ToolTimeout as exc:
        raise RunError(Stage.TOOL, exc) from exc
    except Exception as exc:
        canceled = find_signal(exc, Canceled)
        if canceled is not None:
            raise RunError(Stage.CANCELED, canceled) from canceled
        err = ToolError(tool.name, call.id, f"approved re-run failed: {exc}")
        err.__cause__ = exc
        raise RunError(Stage.TOOL, err) from err


def merge(history: Sequence[Message], resolutions: Mapping[str, Message]) -> list[Message]:
    """Place resolution messages into a paused history in the model's emission order.

    The calls of the last assistant message with tool calls get, in emission order,
    their resolution or the result the paused run already recorded; leftover results
    follow; resolutions for calls of older turns come last, by call ID. Messages
    after the paused batch that are not tool results are not carried over.
    """
    last = -1
    for i in range(len(history) - 1, -1, -1):
        if history[i].role == "assistant" and history[i].tool_calls:
            last = i
            break
    out = list(history[: last + 1])
    tail = [m for m in history[last + 1 :] if m.role == "tool"]
    used: set[int] = set()
    batch_ids: set[str] = set()
    for call in history[last].tool_calls if last >= 0 else ():
        batch_ids.add(call.id)
        resolution = resolutions.get(call.id)
        if resolution is not None:
            out.append(resolution)
            continue
        for j, m in enumerate(tail):
            if j not in used and m.tool_call_id == call.id:
                out.append(m)
                used.add(j)
                break
    out.extend(m for j, m in enumerate(tail) if j not in used)
    out.extend(resolutions[cid] for cid in sorted(resolutions) if cid not in batch_ids)
    return out
