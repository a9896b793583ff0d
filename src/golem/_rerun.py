"""Carrying out a checked resume: re-run the approved calls (each once), then merge every
resolution into the history in the model's emission order."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from golem._cancel import raise_if_swallowed
from golem._checks import ResumePlan, Step, brief
from golem._loop import Policy, RunState
from golem.deferred import PendingToolCall, grouped
from golem.errors import Stage, ToolError, ToolTimeout
from golem.events import EventKind
from golem.messages import Message, ToolCall
from golem.result import PartialResult, RunError
from golem.seal import replace_calls, seal_call
from golem.tool import (
    ApprovedScope,
    Canceled,
    DeferKind,
    Deferred,
    RunContext,
    Tool,
    ToolResult,
    find_signal,
    finished_result,
)

__all__ = ["BeforeApproved", "Resolving", "merge", "resolve"]

BeforeApproved = Callable[[ToolCall], Awaitable[None]]
"""Awaited right before each approved re-execution with the call about to run."""


def _denial_text(reason: str) -> str:
    """The tool result the model receives for a denied call."""
    if reason:
        return f"Your tool call was denied: {reason}. Do not call it again; continue without its result."
    return "Your tool call was denied. Do not call it again; continue without its result."


def _edited_text(original: str, edited: str, result: str) -> str:
    """The tool result the model receives for a call approved with edited arguments."""
    note = (
        "The approver changed the arguments of this call before approving it: "
        f"you proposed {brief(original)}, it ran with {brief(edited)}."
    )
    return f"{note}\n{result}" if result else note


@dataclass(slots=True)
class Resolving:
    """What carrying out `plan` has done: resolutions, edited calls, the calls that ran."""

    plan: ResumePlan
    resolutions: dict[str, Message] = field(default_factory=dict)
    edited: dict[str, ToolCall] = field(default_factory=dict)
    ran: list[str] = field(default_factory=list)
    merged: list[Message] | None = None

    def answered(self, history: list[Message] | None = None) -> list[Message]:
        """`history` (the plan's) with the calls that ran answered, the others pending."""
        calls = {cid: self.edited[cid] for cid in self.ran if cid in self.edited}
        base = self.plan.history if history is None else history
        base = replace_calls(base, calls) if calls else base
        return merge(base, {cid: self.resolutions[cid] for cid in self.ran})


async def _rerun_approved(
    tool: Tool, call: ToolCall, ctx: RunContext[Any], timeout: float | None, cancels: int
) -> ToolResult:
    """Execute an approved call once; a failure or new deferral is a `RunError`."""
    try:
        with ApprovedScope():
            return await tool.run(ctx, call.args, timeout)
    except ToolTimeout as exc:
        raise RunError(Stage.TOOL, exc) from exc
    except Exception as exc:
        raise_if_swallowed(cancels)
        canceled = find_signal(exc, Canceled)
        if canceled is not None:
            raise RunError(Stage.CANCELED, canceled) from canceled
        if find_signal(exc, Deferred) is not None:
            text = (
                "approved re-run deferred again; a tool must act on its approved pass — "
                "gate the deferral: `if not call_approved(): raise Deferred(...)`"
            )
        else:
            text = f"approved re-run failed: {exc}"
        err = ToolError(tool.name, call.id, text)
        err.__cause__ = exc
        raise RunError(Stage.TOOL, err) from err


async def resolve(
    work: Resolving,
    policy: Policy,
    state: RunState,
    before_approved: BeforeApproved | None = None,
    *,
    hand_back: bool = True,
) -> list[Message]:
    """Re-run the plan's approved calls, then merge every resolution; with `hand_back`, a
    failing re-run's `RunError` carries the answered history as its partial."""
    plan = work.plan
    for step in plan.steps:
        call, approval = step.call, step.approval
        if approval is None:
            work.resolutions[call.id] = state.tool_message(call, step.external or "")
        elif not approval.approved:
            work.resolutions[call.id] = state.tool_message(call, _denial_text(approval.reason))
        else:
            if step.args is not None:
                call = replace(call, args=step.args, seal="")
                if policy.seal_keys is not None:
                    seal = seal_call(policy.seal_keys, state.conversation_id, call, "approval")
                    call = replace(call, seal=seal)
                work.edited[call.id] = call
            if before_approved is not None:
                await before_approved(call)
                raise_if_swallowed(state.cancels)
            try:
                done = await _rerun(call, policy, state)
            except asyncio.CancelledError as cancelled:
                # a sync tool's thread that finished while the caller was cancelled acted
                finished = finished_result(cancelled)
                if finished is not None:
                    _answer(work, state, step, call, finished)
                raise
            except RunError as failed:
                if hand_back:
                    failed.partial = _handed_back(work, policy, state)
                raise
            _answer(work, state, step, call, done)
            # a tool that swallowed the caller's cancellation and returned: answered too
            raise_if_swallowed(state.cancels)
    history = replace_calls(plan.history, work.edited) if work.edited else plan.history
    work.merged = merge(history, work.resolutions)
    return work.merged


def _handed_back(work: Resolving, policy: Policy, state: RunState) -> PartialResult:
    """The partial of a resume whose approved re-run failed."""
    done = set(work.ran)
    pending = []
    for step in work.plan.steps:
        c = step.call
        if c.id not in done:
            kind = DeferKind.EXTERNAL if step.approval is None else DeferKind.APPROVAL
            pending.append(PendingToolCall(c.id, c.name, c.args, "", kind, c.seal))
    return PartialResult(
        messages=work.answered(),
        usage=state.usage,
        finish_reason=state.finish_reason,
        requests=state.requests,
        tool_calls=state.tool_calls,
        cost=policy.cost(state.usage),
        run_id=state.run_id,
        conversation_id=state.conversation_id,
        pending=grouped(pending),
    )


def _answer(work: Resolving, state: RunState, step: Step, call: ToolCall, done: ToolResult) -> None:
    """Record the result of approved call `call` (step `step`), which ran."""
    text = done.text
    if step.args is not None:
        text = _edited_text(step.call.args, call.args, text)
    work.resolutions[call.id] = state.tool_message(call, text, parts=done.parts)
    work.ran.append(call.id)


async def _rerun(call: ToolCall, policy: Policy, state: RunState) -> ToolResult:
    """One approved re-run, bracketed by `tool_start` / `tool_end` events flagged `approved`."""
    tool = policy.tools[call.name]
    ctx = RunContext(state.deps, state.run_id, state.conversation_id, call.id, call.name)
    timeout = tool.timeout if tool.timeout is not None else policy.tool_timeout
    state.tool_calls += 1
    if not state.listening:
        return await _rerun_approved(tool, call, ctx, timeout, state.cancels)
    ids = {"call_id": call.id, "tool_name": call.name, "approved": True}
    state.emit(EventKind.TOOL_START, args=call.args, **ids)
    tracer = state.tracer  # when tracing, the call's span is current while it re-runs
    entered = tracer.enter_tool(call.id) if tracer is not None else None
    try:
        done = await _rerun_approved(tool, call, ctx, timeout, state.cancels)
    except RunError as failed:
        if tracer is not None:
            tracer.leave_tool(entered)
            tracer = None
        state.emit(EventKind.TOOL_END, error=failed.__cause__, **ids)
        raise
    finally:
        if tracer is not None:
            tracer.leave_tool(entered)
    state.emit(EventKind.TOOL_END, result=done.text, parts=tuple(done.parts), **ids)
    return done


def merge(history: Sequence[Message], resolutions: Mapping[str, Message]) -> list[Message]:
    """Resolutions in the model's emission order: the paused batch's calls, leftover results,
    then older turns' resolutions by ID; non-tool messages after the batch are dropped."""
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
    if len(used) < len(tail):
        out.extend(m for j, m in enumerate(tail) if j not in used)
    if not batch_ids.issuperset(resolutions):
        out.extend(resolutions[cid] for cid in sorted(resolutions) if cid not in batch_ids)
    return out
