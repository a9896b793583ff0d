"""Checking a resume before anything runs: pending calls, seals, kinds, expected calls,
resolutions and edited arguments; each problem is a `ResumeError` naming the call."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from golem._ids import new_id
from golem._loop import Policy
from golem.agent_tool import PAUSED_MARKER, AgentTool
from golem.deferred import Approval, DeferredRequests, DeferredResults, as_results, pending_calls
from golem.errors import ConversationRequired, ResumeError, SealError
from golem.history import History, as_history, conversation_of, paused_batch_ids, validate_history
from golem.messages import Message, ToolCall
from golem.seal import SealKeys, replace_calls, verify_call
from golem.tool import DeferKind, InvalidArguments, Tool

__all__ = ["ResumePlan", "Step", "check", "compare_expected", "drop_finished", "load", "same_args"]

_SHOWN = 200


def brief(text: str) -> str:
    return text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…"


def load(hist: History, *, validate: bool = True) -> list[Message]:
    """The history a resume starts from (`ResumeError` for JSON or structure that is wrong)."""
    try:
        supplied = as_history(hist)
        if validate:
            validate_history(supplied)
    except ResumeError:
        raise
    except ValueError as exc:
        raise ResumeError(f"golem: {exc}") from exc
    return supplied


def check(
    policy: Policy,
    history: History,
    results: DeferredResults | Mapping[str, Any],
    conversation_id: str | None,
    expected: DeferredRequests | None,
    bound: bool | None = None,
) -> ResumePlan:
    """Check a resume under `policy`; `bound` says whether the caller vouched for the
    conversation (default: `conversation_id` given); unbound and keyed, it needs `expected`."""
    supplied = load(history)
    resolutions = as_results(results)
    if policy.nested:  # answered sub-agents' calls are no-ops (ADR 0076)
        resolutions, expected = drop_finished(supplied, resolutions, expected, policy.tools)
    # the caller's word, then the expected calls' (the caller kept them), then the history's
    named = conversation_id or getattr(expected, "conversation_id", "") or conversation_of(supplied)
    return check_resume(
        supplied,
        resolutions,
        policy.tools,
        conversation_id=named or new_id(),
        keys=policy.seal_keys,
        expected=expected,
        conversation_bound=bool(conversation_id) if bound is None else bound,
        conversation_named=bool(named),
    )


def drop_finished(
    history: Sequence[Message],
    results: DeferredResults,
    expected: DeferredRequests | None,
    tools: Mapping[str, Tool],
) -> tuple[DeferredResults, DeferredRequests | None]:
    """`results` and `expected` without the calls of sub-agents that already answered."""
    keys = [*results.approvals, *results.external]
    if expected is not None:
        keys.extend(p.call_id for p in expected.calls)
    if not any("/" in k for k in keys):
        return results, expected
    names = {c.id: c.name for m in history for c in m.tool_calls}
    finished = [
        m.tool_call_id + "/"
        for m in history
        if m.role == "tool"
        and m.tool_call_id
        and not m.content.startswith(PAUSED_MARKER)
        and isinstance(tools.get(names.get(m.tool_call_id, "")), AgentTool)
    ]
    if not finished:
        return results, expected

    def gone(key: str) -> bool:
        return key not in names and any(key.startswith(f) for f in finished)

    if not any(gone(k) for k in keys):
        return results, expected
    kept = DeferredResults(
        approvals={k: v for k, v in results.approvals.items() if not gone(k)},
        external={k: v for k, v in results.external.items() if not gone(k)},
    )
    if expected is not None:
        expected = DeferredRequests(
            approvals=[p for p in expected.approvals if not gone(p.call_id)],
            external=[p for p in expected.external if not gone(p.call_id)],
        )
    return kept, expected


def _check_results(
    done: set[str], pending: Sequence[ToolCall], results: DeferredResults, tools: Mapping[str, Tool]
) -> None:
    """Each pending call resolved once, approved ones registered; answered ones skipped."""
    ids = {c.id for c in pending}
    for what, given in (("approval", results.approvals), ("external result", results.external)):
        for call_id in given:
            if given is results.approvals and call_id in results.external:
                raise ResumeError(
                    f'golem: tool call "{call_id}" is resolved as both an approval and an external result'
                )
            if call_id not in ids and call_id not in done:
                raise ResumeError(f'golem: {what} for unknown tool call "{call_id}"')
    for c in pending:
        approval = results.approvals.get(c.id)
        if approval is None and c.id not in results.external:
            raise ResumeError(f'golem: pending tool call "{c.id}" ({c.name}) has no resolution')
        if approval is not None and approval.approved and c.name not in tools:
            raise ResumeError(
                f'golem: pending tool call "{c.id}": tool "{c.name}" is not registered'
            )


@dataclass(frozen=True, slots=True)
class Step:
    """What the resume does for one pending call."""

    call: ToolCall
    approval: Approval | None
    external: str | None
    args: str | None
    """Edited arguments (JSON text) of an approved call, or None."""


@dataclass(frozen=True, slots=True)
class ResumePlan:
    """A validated resume: what `resume` will do for each pending call, in history order."""

    history: list[Message]
    steps: list[Step]
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
    """Check pending calls, tail, seals and batch, `expected`, resolutions, kinds and edited
    args, in that order; raise the first problem (`ResumeError`, `SealError`, `TypeError`)."""
    expected_type(expected)
    pending = pending_calls(history)
    _check_tail(history)
    if expected is not None:
        history = with_expected_args(history, expected)
        pending = pending_calls(history)
    kinds: dict[str, DeferKind] = {}
    batch = paused_batch_ids(history)
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
                    "and the resume was given a plain history, not a PausedRun",
                ) from None
        outside = next((c for c in pending if c.id not in batch), None)
        if outside is not None:  # a sealed call of an older turn had its result removed
            raise ResumeError(
                f'golem: pending tool call "{outside.id}" ({outside.name}) is not in the paused '
                "batch: its seal is genuine, so it was answered in an earlier turn and its "
                "result removed; a sealed history resumes only the calls of its last pause"
            )
    done = answered_calls(history)
    if expected is not None:
        _check_expected(done & batch, pending, expected, kinds)
    _check_results(done, pending, results, tools)
    steps = [_step(c, kinds.get(c.id), results, tools) for c in pending]
    if keys is not None and not conversation_bound and expected is None and pending:
        # last, so every other problem is reported as itself: this one is the caller's code
        raise conversation_required(pending[0].id, pending[0].name)
    return ResumePlan(history, steps, conversation_id)


def _step(
    c: ToolCall, kind: DeferKind | None, results: DeferredResults, tools: Mapping[str, Tool]
) -> Step:
    """What the resume does for pending call `c`, checked against its sealed kind and tool."""
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
    return Step(c, approval, results.external.get(c.id), args)


def conversation_required(call_id: str, tool_name: str) -> ConversationRequired:
    """The error for a keyed resume that was told neither its conversation nor its calls."""
    return ConversationRequired(
        call_id,
        tool_name,
        "conversation_required",
        f'golem: pending tool call "{call_id}" ({tool_name}) is sealed, and a seal binds '
        "its conversation, but this resume was given a plain history: the conversation ID "
        "it names is whatever its editor wrote, so another conversation's sealed call could "
        "be relabeled into it. Resume the paused run's PausedRun (Result.paused_run, or "
        "PausedRun(history, paused.pending, paused.conversation_id) from your own record); "
        "nothing was executed",
    )


def _check_tail(history: Sequence[Message]) -> None:
    """Nothing but tool results follows the paused batch (new text is the `prompt`)."""
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


def _check_expected(
    done: set[str],
    pending: Sequence[ToolCall],
    expected: DeferredRequests,
    kinds: dict[str, DeferKind],
) -> None:
    """The pending calls are the expected ones, kinds included (`ResumeError`)."""
    left = compare_expected({c.id: (c.name, c.args, c.seal) for c in pending}, expected)
    approval_ids = {p.call_id for p in expected.approvals}
    for c in pending:
        kind = DeferKind.APPROVAL if c.id in approval_ids else DeferKind.EXTERNAL
        sealed = kinds.setdefault(c.id, kind)
        if sealed is not kind:
            raise ResumeError(
                f'golem: pending tool call "{c.id}" was sealed as {sealed.value} but expected '
                f"as {kind.value}"
            )
    for call_id in left:
        if call_id not in done:
            raise ResumeError(
                f'golem: expected pending call "{call_id}" is not pending in the history'
            )


def compare_expected(
    waiting: Mapping[str, tuple[str, str, str]], expected: DeferredRequests
) -> list[str]:
    """Each waiting call (ID → name, args, seal) is an expected one with that name, the
    same arguments and (when expected has one) seal; the expected IDs not waiting."""
    expected_type(expected)
    wanted = {p.call_id: p for p in expected.calls}
    for call_id, (name, args, seal) in waiting.items():
        p = wanted.pop(call_id, None)
        if p is None:
            raise ResumeError(
                f'golem: pending tool call "{call_id}" ({name}) is not one of the expected '
                "pending calls (added to the history after the pause?)"
            )
        if p.tool_name != name or not same_args(p.args, args):
            what = "tool name differs" if p.tool_name != name else "arguments differ"
            raise ResumeError(
                f'golem: pending tool call "{call_id}": its {what} from the expected '
                f"pending call ({p.tool_name} {brief(p.args)}, got {name} {brief(args)})"
            )
        if p.seal and seal != p.seal:
            raise ResumeError(
                f'golem: pending tool call "{call_id}" ({name}) carries another seal than the '
                "expected pending call (a call or sub-agent record sealed in another "
                "conversation?)"
            )
    return list(wanted)


def expected_type(expected: object) -> None:
    """`TypeError` unless `expected` is a `DeferredRequests` (or None)."""
    if expected is not None and not isinstance(expected, DeferredRequests):
        raise TypeError(
            f"expected is the paused run's Result.pending (DeferredRequests), "
            f"got {type(expected).__name__}"
        )


def answered_calls(history: Sequence[Message]) -> set[str]:
    """The IDs of the history's tool calls that a tool message answers."""
    answered = {m.tool_call_id for m in history if m.role == "tool"}
    return {
        c.id for m in history if m.role == "assistant" for c in m.tool_calls if c.id in answered
    }


def _edited_args(call: ToolCall, args: dict[str, Any] | str, tool: Tool) -> str:
    what = f'golem: edited arguments for tool call "{call.id}" ({call.name}) are'
    if isinstance(args, dict):
        try:
            text = json.dumps(args, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError, RecursionError) as exc:
            raise ResumeError(f"{what} not JSON-serializable: {exc}") from exc
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
        raise ResumeError(f"{what} rejected: {problem}")
    try:
        tool.validate_args(text)
    except InvalidArguments as exc:
        raise ResumeError(f"{what} rejected: {exc.message}") from exc
    return text


def with_expected_args(history: Sequence[Message], expected: DeferredRequests) -> list[Message]:
    """`history` with each unsealed pending call that `same_args` as its expected call holding
    the expected bytes and seal (the Go golem compacts args and drops seals)."""
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
    """Whether two tool-call args are the same text, or the same JSON token for token (as the
    Go golem rewrites them: whitespace and escapes read; key order and numbers kept)."""
    if a == b:
        return True
    ta = _tokens(a)
    return ta is not None and ta == _tokens(b)


def _tokens(text: str) -> Any:
    """`text` as nested tuples keeping what JSON parsers may read differently, or None."""
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
