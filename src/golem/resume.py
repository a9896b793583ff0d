"""Resuming a paused run: check everything, re-run approved calls, merge, hand to the loop.

`check_resume` validates a resume completely — pending calls, seals, kinds, resolutions,
edited arguments — and raises `ResumeError` before anything runs. `resume` then re-runs the
approved calls (each once), merges every resolution into the history in the model's
emission order and returns the history the run loop goes on from.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from golem._cancel import raise_if_swallowed
from golem._loop import Policy, RunState
from golem.deferred import (
    Approval,
    DeferredRequests,
    DeferredResults,
    PendingToolCall,
    pending_calls,
)
from golem.errors import (
    ConversationRequired,
    ResumeError,
    SealError,
    Stage,
    ToolError,
    ToolTimeout,
)
from golem.events import EventKind
from golem.history import paused_batch_ids
from golem.messages import Message, ToolCall
from golem.result import PartialResult, RunError
from golem.seal import SealKeys, replace_calls, seal_call, verify_call
from golem.tool import (
    ApprovedScope,
    Canceled,
    DeferKind,
    Deferred,
    InvalidArguments,
    RunContext,
    Tool,
    ToolResult,
    find_signal,
    finished_result,
)

__all__ = ["BeforeApproved", "ResumeProgress"]


def _denial_text(reason: str) -> str:
    """The tool result the model receives for a denied call."""
    if reason:
        return f"Your tool call was denied: {reason}. Do not call it again; continue without its result."
    return "Your tool call was denied. Do not call it again; continue without its result."


_SHOWN = 200


def brief(text: str) -> str:
    return text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…"


def _edited_text(original: str, edited: str, result: str) -> str:
    """The tool result the model receives for a call approved with edited arguments."""
    note = (
        "The approver changed the arguments of this call before approving it: "
        f"you proposed {brief(original)}, it ran with {brief(edited)}."
    )
    return f"{note}\n{result}" if result else note


def _check_results(
    history: Sequence[Message],
    pending: Sequence[ToolCall],
    results: DeferredResults,
    tools: Mapping[str, Tool],
) -> None:
    """Validate resolutions against the pending calls, before anything runs.

    A resolution for a call the history already answers (an approved call that ran before
    a resume failed or was cancelled, ADR 0071) is skipped: that call never runs again.

    Raises:
        ResumeError: an unknown call ID, a call resolved twice, an unresolved call,
            or an approved call whose tool the agent does not have.
    """
    ids = {c.id for c in pending}
    answered: set[str] | None = None
    for call_id in results.approvals:
        if call_id in results.external:
            raise ResumeError(
                f'golem: tool call "{call_id}" is resolved as both an approval and an external result'
            )
        if call_id not in ids:
            answered = answered_calls(history) if answered is None else answered
            if call_id not in answered:
                raise ResumeError(f'golem: approval for unknown tool call "{call_id}"')
    for call_id in results.external:
        if call_id not in ids:
            answered = answered_calls(history) if answered is None else answered
            if call_id not in answered:
                raise ResumeError(f'golem: external result for unknown tool call "{call_id}"')
    for c in pending:
        approval = results.approvals.get(c.id)
        if approval is None and c.id not in results.external:
            raise ResumeError(f'golem: pending tool call "{c.id}" ({c.name}) has no resolution')
        if approval is not None and approval.approved and c.name not in tools:
            raise ResumeError(
                f'golem: pending tool call "{c.id}": tool "{c.name}" is not registered'
            )


@dataclass(frozen=True, slots=True)
class _Step:
    call: ToolCall
    approval: Approval | None
    external: str | None
    args: str | None
    """Edited arguments (JSON text) of an approved call, or None."""


@dataclass(frozen=True, slots=True)
class ResumePlan:
    """A validated resume: what `resume` will do for each pending call, in history order."""

    history: list[Message]
    steps: list[_Step]
    conversation_id: str


def check_resume(
    history: list[Message],
    results: DeferredResults,
    tools: Mapping[str, Tool],
    *,
    conversation_id: str,
    keys: SealKeys | None = None,
    expected: DeferredRequests | None = None,
    conversation_bound: bool = True,
    conversation_named: bool = True,
) -> ResumePlan:
    """Validate a resume completely, before anything runs.

    Checks, in order: the history has pending calls, each with an ID, and no call ID
    twice; nothing but tool results follows the paused batch; with `keys`, every
    pending call's seal verifies (for `conversation_id`) and every pending call is in
    the paused batch (not an answered call of an older turn made pending again); with `expected` (the paused
    run's `Result.pending`), the pending calls are exactly the expected ones, with the
    same tool names and arguments; every pending call is resolved once, by a resolution
    of its kind (sealed or expected); approved calls have a registered tool; edited
    arguments pass the tool's schema.

    `conversation_bound` is false when `conversation_id` is only what the history names
    (its editor's choice): with `keys`, sealed calls then resume only with `expected`.
    `conversation_named` is false when nothing named the conversation (`conversation_id` was
    made up): a seal that then fails to verify is reported as that.

    Raises:
        ResumeError: the first problem found, naming the call (`SealError` for seals;
            `ConversationRequired` for sealed calls whose conversation nothing binds).
        TypeError: `expected` is not a `DeferredRequests`.
    """
    if expected is not None and not isinstance(expected, DeferredRequests):
        raise TypeError(
            f"expected is the paused run's Result.pending (DeferredRequests), "
            f"got {type(expected).__name__}"
        )
    pending = pending_calls(history)
    _check_tail(history)
    if expected is not None:
        history = with_expected_args(history, expected)
        pending = pending_calls(history)
    kinds: dict[str, DeferKind] = {}
    if keys is not None:
        for c in pending:
            try:
                kinds[c.id] = verify_call(keys, conversation_id, c)
            except SealError as exc:
                if exc.problem != "tampered" or conversation_named:
                    raise
                raise SealError(
                    c.id,
                    c.name,
                    "tampered",
                    f"{exc}; but nothing named the conversation its seal binds: the history "
                    "has no conversationId (the Go golem drops it when it re-writes a history) "
                    "and neither conversation_id= nor expected= (with its conversation) nor a "
                    "PausedRun was given",
                ) from None
        _check_batch(history, pending)
    if expected is not None:
        _check_expected(history, pending, expected, kinds)
    _check_results(history, pending, results, tools)
    steps = [_step(c, kinds.get(c.id), results, tools) for c in pending]
    if keys is not None and not conversation_bound and expected is None and pending:
        # last, so every other problem is reported as itself: this one is the caller's code
        raise conversation_required(pending[0].id, pending[0].name)
    return ResumePlan(history, steps, conversation_id)


def _step(
    c: ToolCall, kind: DeferKind | None, results: DeferredResults, tools: Mapping[str, Tool]
) -> _Step:
    """What the resume does for pending call `c`: its resolution, checked against the kind
    it was sealed with (when sealed) and, for edited arguments, against its tool."""
    approval = results.approvals.get(c.id)
    if approval is not None and kind is DeferKind.EXTERNAL:
        raise ResumeError(
            f'golem: pending tool call "{c.id}" ({c.name}) waits for an external result, '
            "not an approval; resolve it in external={...}"
        )
    if approval is None and kind is DeferKind.APPROVAL:
        raise ResumeError(
            f'golem: pending tool call "{c.id}" ({c.name}) waits for an approval; an '
            "external result cannot stand in for it: resolve it in approvals={...}"
        )
    args = None
    if approval is not None and approval.args is not None:
        args = _edited_args(c, approval.args, tools[c.name])
    return _Step(c, approval, results.external.get(c.id), args)


def conversation_required(call_id: str, tool_name: str) -> ConversationRequired:
    """The error for a keyed resume that was told neither its conversation nor its calls."""
    return ConversationRequired(
        call_id,
        tool_name,
        "conversation_required",
        f'golem: pending tool call "{call_id}" ({tool_name}) is sealed, and a seal binds '
        "its conversation, but this resume was given neither conversation_id= (non-empty) "
        "nor expected=: the conversation ID the history names is whatever its editor wrote, so "
        "another conversation's sealed call could be relabeled into it. Pass "
        "conversation_id= from your own record of the paused run (paused.conversation_id), "
        "or expected=paused.pending; nothing was executed",
    )


def _check_tail(history: Sequence[Message]) -> None:
    """A paused history ends with its batch: after the last assistant message with tool
    calls come only tool results (the batch's, recorded before the pause).

    Raises:
        ResumeError: another message follows the paused batch (a user message appended
            while paused, say): the merge would not carry it over, so it is refused rather
            than dropped; new text for the model is the resume's `prompt`.
    """
    for i in range(len(history) - 1, -1, -1):
        m = history[i]
        if m.role == "tool":
            continue
        if m.role == "assistant" and m.tool_calls:
            return
        raise ResumeError(
            f"golem: history message {i} ({m.role}) follows the paused batch; a paused "
            "history ends with the batch's tool results — pass new text as the resume's "
            "prompt instead of appending it"
        )


def _check_batch(history: Sequence[Message], pending: Sequence[ToolCall]) -> None:
    """With a seal key, every pending call belongs to the paused batch (the last assistant
    message with tool calls): a sealed pause never leaves calls open in older turns, and an
    answered call keeps its genuine seal as a record, so one pending in an older turn had
    its result removed to run it again.

    Raises:
        ResumeError: a pending call is outside the paused batch.
    """
    batch = paused_batch_ids(history)
    for c in pending:
        if c.id not in batch:
            raise ResumeError(
                f'golem: pending tool call "{c.id}" ({c.name}) is not in the paused batch: '
                "its seal is genuine, so it was answered in an earlier turn and its result "
                "removed; a sealed history resumes only the calls of its last pause"
            )


def _check_expected(
    history: Sequence[Message],
    pending: Sequence[ToolCall],
    expected: DeferredRequests,
    kinds: dict[str, DeferKind],
) -> None:
    """The pending calls are expected ones (name, arguments, seal and kind as expected);
    an expected call that is not pending is answered in the paused batch — an approved
    call a failed or cancelled resume already ran (ADR 0071).

    Raises:
        ResumeError: the first difference found.
    """
    wanted = {p.call_id: p for p in expected.calls}
    approval_ids = {p.call_id for p in expected.approvals}
    for c in pending:
        p = wanted.pop(c.id, None)
        if p is None:
            raise ResumeError(
                f'golem: pending tool call "{c.id}" ({c.name}) is not one of the expected '
                "pending calls (added to the history after the pause?)"
            )
        if p.tool_name != c.name or not same_args(p.args, c.args):
            what = "tool name differs" if p.tool_name != c.name else "arguments differ"
            raise ResumeError(
                f'golem: pending tool call "{c.id}": its {what} from the expected '
                f"pending call ({p.tool_name} {brief(p.args)}, got {c.name} {brief(c.args)})"
            )
        if p.seal and c.seal != p.seal:
            raise ResumeError(
                f'golem: pending tool call "{c.id}" ({c.name}) carries another seal than the '
                "expected pending call (a call sealed in another conversation?)"
            )
        kind = DeferKind.APPROVAL if c.id in approval_ids else DeferKind.EXTERNAL
        sealed = kinds.setdefault(c.id, kind)
        if sealed is not kind:
            raise ResumeError(
                f'golem: pending tool call "{c.id}" was sealed as {sealed.value} but expected '
                f"as {kind.value}"
            )
    if wanted:
        done = answered_calls(history) & paused_batch_ids(history)
        for call_id in wanted:
            if call_id not in done:
                raise ResumeError(
                    f'golem: expected pending call "{call_id}" is not pending in the history'
                )


def answered_calls(history: Sequence[Message]) -> set[str]:
    """The IDs of the history's tool calls that a tool message answers."""
    answered = {m.tool_call_id for m in history if m.role == "tool"}
    return {
        c.id for m in history if m.role == "assistant" for c in m.tool_calls if c.id in answered
    }


def _edited_args(call: ToolCall, args: dict[str, Any] | str, tool: Tool) -> str:
    if isinstance(args, dict):
        try:
            text = json.dumps(args, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError, RecursionError) as exc:
            raise ResumeError(
                f'golem: edited arguments for tool call "{call.id}" ({call.name}) are not '
                f"JSON-serializable: {exc}"
            ) from exc
    else:
        text = args
    problem = ""
    if not text.lstrip().startswith("{"):
        problem = "they must be a JSON object"
    elif not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            problem = "they hold a lone surrogate, which no JSON history can store"
    if problem:
        raise ResumeError(
            f'golem: edited arguments for tool call "{call.id}" ({call.name}) are rejected: '
            f"{problem}"
        )
    try:
        tool.validate_args(text)
    except InvalidArguments as exc:
        raise ResumeError(
            f'golem: edited arguments for tool call "{call.id}" ({call.name}) are rejected: '
            f"{exc.message}"
        ) from exc
    return text


BeforeApproved = Callable[[ToolCall], Awaitable[None]]
"""Awaited right before each approved re-execution with the call about to run."""

ProgressSource = Callable[[], tuple[list[Message] | None, bool, tuple[str, ...]]]
"""A nested resume's progress, built when read: (messages, paused, answered)."""


class ResumeProgress:
    """What a resume has done so far, readable after it failed or was cancelled.

    Pass one as `progress=` to `Agent.run_with_deferred_results` (or its sync and stream
    forms). When the resume ends with the caller's `CancelledError`, an exception raised
    by `before_approved`, or a `RunError`, `messages` is the history to go on from, so
    that no approved call that already ran runs again (ADR 0071). For a history with
    paused sub-agents, that history has each sub-agent's record rewritten from what it
    ran, at any depth (ADR 0076). A progress object reused for another resume starts over.
    """

    __slots__ = ("_calls", "_edited", "_history", "_merged", "_ran", "_resolutions", "_source")

    def __init__(self) -> None:
        self._calls = 0
        self._history: list[Message] | None = None
        self._resolutions: Mapping[str, Message] = {}
        self._edited: Mapping[str, ToolCall] = {}
        self._ran: list[str] = []
        self._merged: list[Message] | None = None
        self._source: ProgressSource | None = None

    def __repr__(self) -> str:
        started = self._history is not None or self._source is not None
        state = f"answered={self.answered!r}" if started else "not started"
        return f"ResumeProgress({state}, paused={self.paused})"

    @property
    def messages(self) -> list[Message] | None:
        """The history to go on from, or None when the resume ran nothing (it was refused,
        or stopped before its first approved call ran): go on from the history you passed.

        While calls are still pending (`paused`), it is the paused history with every
        approved call that ran answered as a resume writes it; resume it with the same
        resolutions. Once none is (every resolution merged, or every pending call approved
        and run), it is the resolved history without the resume's prompt: go on with
        `Agent.run(prompt, history=messages)`.
        """
        if self._source is not None:
            return self._source()[0]
        if self._merged is not None:
            return list(self._merged)
        if self._history is None or not self._ran:
            return None
        return _answered_history(self._history, self._resolutions, self._edited, self._ran)

    @property
    def answered(self) -> tuple[str, ...]:
        """The IDs of the approved calls that ran, in the order they ran (a paused
        sub-agent's namespaced, `<call id>/<sub call id>`)."""
        if self._source is not None:
            return self._source()[2]
        return tuple(self._ran)

    @property
    def paused(self) -> bool:
        """Whether `messages` still has pending calls (go on with a resume), rather than
        none (every resolution merged, or every pending call approved and run: go on with
        `Agent.run`)."""
        if self._source is not None:
            return self._source()[1]
        return self._merged is None and (self._history is None or len(self._ran) < self._calls)

    def _reset(self) -> None:
        self._history, self._resolutions, self._edited, self._ran = None, {}, {}, []
        self._calls, self._merged, self._source = 0, None, None

    def _follow(self, source: ProgressSource) -> None:
        """Read `messages`, `paused` and `answered` from `source` (a nested resume's)."""
        self._reset()
        self._source = source

    def _answer(self, history: list[Message]) -> list[Message]:
        """`history` with the approved calls this progress saw run answered."""
        if not self._ran:
            return history
        return _answered_history(history, self._resolutions, self._edited, self._ran)

    def _start(
        self,
        plan: ResumePlan,
        resolutions: Mapping[str, Message],
        edited: Mapping[str, ToolCall],
        ran: list[str],
    ) -> None:
        self._history, self._resolutions, self._edited, self._ran = (
            plan.history,
            resolutions,
            edited,
            ran,
        )
        self._calls = len(plan.steps)
        self._merged = None
        self._source = None


def _answered_history(
    history: list[Message],
    resolutions: Mapping[str, Message],
    edited: Mapping[str, ToolCall],
    ran: Sequence[str],
) -> list[Message]:
    """`history` with the approved calls in `ran` answered (their edited arguments shown),
    every other pending call still pending."""
    calls = {cid: edited[cid] for cid in ran if cid in edited}
    base = replace_calls(history, calls) if calls else history
    return merge(base, {cid: resolutions[cid] for cid in ran})


async def _rerun_approved(
    tool: Tool, call: ToolCall, ctx: RunContext[Any], timeout: float | None, cancels: int
) -> ToolResult:
    """Execute an approved call once, with `call_approved()` true and the call's timeout.

    Raises:
        RunError: stage `tool` when the re-run fails, times out or defers again;
            stage `canceled` when it raises `Canceled`. No correction budget applies.
        asyncio.CancelledError: the caller cancelled; never turned into a tool error.
    """
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
    plan: ResumePlan,
    policy: Policy,
    state: RunState,
    before_approved: BeforeApproved | None = None,
    progress: ResumeProgress | None = None,
    *,
    hand_back: bool = True,
) -> list[Message]:
    """Carry out a checked plan: re-run approved calls (with `tool_start`/`tool_end`
    events flagged `approved`), then merge every resolution into the history.

    Returns the merged history: edited calls show the arguments that ran (re-sealed
    when `policy.seal_keys` is set), resolutions sit in the model's emission order.
    `progress` follows what ran; with `hand_back`, a failing re-run's `RunError` carries
    the same history as its `partial`.

    Raises:
        RunError: an approved re-run failed (stage `tool`) or raised `Canceled`.
        Exception: whatever `before_approved` raised, unchanged; nothing more runs.
    """
    resolutions: dict[str, Message] = {}
    edited: dict[str, ToolCall] = {}
    ran: list[str] = []
    if progress is not None:
        progress._start(plan, resolutions, edited, ran)
    for step in plan.steps:
        call, approval = step.call, step.approval
        if approval is None:
            resolutions[call.id] = state.tool_message(call, step.external or "")
        elif not approval.approved:
            resolutions[call.id] = state.tool_message(call, _denial_text(approval.reason))
        else:
            if step.args is not None:
                call = replace(call, args=step.args, seal="")
                if policy.seal_keys is not None:
                    seal = seal_call(policy.seal_keys, state.conversation_id, call, "approval")
                    call = replace(call, seal=seal)
                edited[call.id] = call
            if before_approved is not None:
                await before_approved(call)
                raise_if_swallowed(state.cancels)
            try:
                done = await _rerun(call, policy, state)
            except asyncio.CancelledError as cancelled:
                # a sync tool's thread that finished while the caller was cancelled acted:
                # it is answered in the progress
                finished = finished_result(cancelled)
                if finished is not None:
                    _answer(state, step, call, finished, resolutions, ran)
                raise
            except RunError as failed:
                if hand_back:
                    failed.partial = _handed_back(plan, policy, state, resolutions, edited, ran)
                raise
            _answer(state, step, call, done, resolutions, ran)
            # a tool that swallowed the caller's cancellation and returned: answered too
            raise_if_swallowed(state.cancels)
    history = replace_calls(plan.history, edited) if edited else plan.history
    merged = merge(history, resolutions)
    if progress is not None:
        progress._merged = merged
    return merged


def _handed_back(
    plan: ResumePlan,
    policy: Policy,
    state: RunState,
    resolutions: Mapping[str, Message],
    edited: Mapping[str, ToolCall],
    ran: Sequence[str],
) -> PartialResult:
    """The partial of a resume whose approved re-run failed: the paused history with the
    calls in `ran` answered, the others pending."""
    return PartialResult(
        messages=_answered_history(plan.history, resolutions, edited, ran),
        usage=state.usage,
        finish_reason=state.finish_reason,
        requests=state.requests,
        tool_calls=state.tool_calls,
        cost=policy.cost(state.usage),
        run_id=state.run_id,
        conversation_id=state.conversation_id,
        pending=_still_pending(plan, ran),
    )


def _still_pending(plan: ResumePlan, ran: Sequence[str]) -> DeferredRequests:
    """The plan's calls that did not run, grouped by the kind their resolution gave."""
    done = set(ran)
    approvals: list[PendingToolCall] = []
    external: list[PendingToolCall] = []
    for step in plan.steps:
        c = step.call
        if c.id in done:
            continue
        kind = DeferKind.EXTERNAL if step.approval is None else DeferKind.APPROVAL
        pending = PendingToolCall(c.id, c.name, c.args, "", kind, c.seal)
        (external if step.approval is None else approvals).append(pending)
    return DeferredRequests(approvals=approvals, external=external)


def _answer(
    state: RunState,
    step: _Step,
    call: ToolCall,
    done: ToolResult,
    resolutions: dict[str, Message],
    ran: list[str],
) -> None:
    """Record the result of approved call `call` (step `step`), which ran."""
    text = done.text
    if step.args is not None:
        text = _edited_text(step.call.args, call.args, text)
    resolutions[call.id] = state.tool_message(call, text, parts=done.parts)
    ran.append(call.id)


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
    if len(used) < len(tail):
        out.extend(m for j, m in enumerate(tail) if j not in used)
    if not batch_ids.issuperset(resolutions):
        out.extend(resolutions[cid] for cid in sorted(resolutions) if cid not in batch_ids)
    return out


def with_expected_args(history: Sequence[Message], expected: DeferredRequests) -> list[Message]:
    """`history` with each unsealed pending call that the expected call of its ID names with
    `same_args` holding the expected call's bytes and seal (the ones the model wrote, the
    approvers saw and the agent sealed): the Go golem writes args compacted and drops seals.
    A seal restored so is verified as any other."""
    wanted = {p.call_id: p for p in expected.calls}
    restored: dict[str, ToolCall] = {}
    answered = {m.tool_call_id for m in history if m.role == "tool"}
    for m in history:
        for c in m.tool_calls:
            p = wanted.get(c.id)
            if (
                p is not None
                and not c.seal
                and c.id not in answered
                and p.tool_name == c.name
                and (p.seal or p.args != c.args)
                and same_args(p.args, c.args)
            ):
                restored[c.id] = replace(c, args=p.args, seal=p.seal)
    return replace_calls(history, restored) if restored else list(history)


def same_args(a: str, b: str) -> bool:
    """Whether two tool-call args are the same arguments: the same text, or the same JSON
    token for token once whitespace between tokens and string escapes are read — how the Go
    golem writes args again (compacted; `<`, `>`, `&`, U+2028, U+2029 escaped). Keys keep
    their order and duplicates, numbers their spelling, so every JSON parser reads both alike.
    """
    if a == b:
        return True
    ta = _tokens(a)
    return ta is not None and ta == _tokens(b)


def _tokens(text: str) -> Any:
    """`text` as nested tuples that keep what JSON parsers may read differently, or None
    when it is not JSON (NaN and Infinity are not)."""
    try:
        return json.loads(
            text,
            object_pairs_hook=lambda pairs: ("{", tuple(pairs)),
            parse_int=lambda s: ("#", s),
            parse_float=lambda s: ("#", s),
            parse_constant=_not_json,
        )
    except (ValueError, RecursionError):
        return None


def _not_json(name: str) -> Any:
    raise ValueError(name)
