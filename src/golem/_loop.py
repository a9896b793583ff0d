"""The run loop: model → tools → model until an answer without calls, a pause or a
`RunError`, shared by every entry point (ADR 0004); it follows a `Policy`, fills a `RunState`."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from golem import deferred
from golem._cancel import raise_if_swallowed
from golem._tracing import ToolSpans
from golem.errors import ProviderError, Stage, ToolError, ToolTimeout, UsageLimitExceeded
from golem.events import EventKind, RunEvent, dispatch
from golem.history import INTERRUPTED_TEXT
from golem.limits import UsageLimits
from golem.messages import Message, ToolCall, new_message, stamped, with_calls
from golem.model import Delta, Model, ModelRequest, ModelResponse, ToolChoice, ToolSpec
from golem.result import PartialResult, Result, RunError
from golem.seal import SealKeys
from golem.tool import (
    Canceled,
    DeferKind,
    Deferred,
    Failed,
    InvalidArguments,
    ModelRetry,
    RunContext,
    Tool,
    ToolResult,
    find_signal,
)
from golem.toolset import Toolset, resolve_tools
from golem.usage import Usage

__all__ = ["Policy", "RunState", "run_loop"]


@dataclass(slots=True)
class Policy:
    """What a run follows, fixed at its start (read-only by convention; `frozen` costs here)."""

    model: Model
    tools: Mapping[str, Tool]
    """The tools the run starts with: the agent's, plus its toolsets' as listed at the start."""
    specs: list[ToolSpec]
    """The specs of the agent's own tools (advertised as they are when there are no toolsets)."""
    output_schema: dict[str, Any] | None
    decode: Callable[[str], Any]
    """Final text → output; raises `ModelRetry` for a correctable rejection."""
    cost: Callable[[Usage], float]
    backoff: Callable[[int, BaseException], float | None]
    """Seconds to wait after failed attempt n (1-based) that raised the exception; None: the
    provider asked for a longer wait than the agent allows, so the call is not retried."""
    max_iterations: int = 10
    max_attempts: int = 1
    output_retries: int = 0
    tool_retries: int = 0
    tool_timeout: float | None = None
    parallel_tool_calls: bool = False
    usage_limits: UsageLimits | None = None
    seal_keys: SealKeys | None = None
    tool_choice: ToolChoice = "auto"
    own_tools: Mapping[str, Tool] | None = None
    """The agent's own tools, when `toolsets` add more (None: `tools` are the agent's)."""
    toolsets: Sequence[Toolset] = ()
    instructions: Any = None
    observers: tuple[Callable[[RunEvent], None], ...] = ()
    """The agent's own event handler, ahead of each run's."""
    nested: bool = False
    """Whether `tools` hold an agent tool (runs then collect sub-agent pauses)."""
    tracer_provider: Any = None
    agent: Any = None


@dataclass(slots=True)
class RunState:
    """Everything one run accumulates; the loop mutates it in place."""

    messages: list[Message]
    deps: Any
    run_id: str
    conversation_id: str
    observers: Sequence[Callable[[RunEvent], None]] = ()
    sink: Callable[[Delta | RunEvent], None] | None = None
    usage: Usage = field(default_factory=Usage)
    requests: int = 0
    tool_calls: int = 0
    finish_reason: str = ""
    model_name: str = ""
    """The model that answered the last model request, as its response said (may be empty)."""
    feedback: dict[str, int] = field(default_factory=dict)
    """Correction feedbacks given per tool name (the tool retry budget)."""
    tools: dict[str, Tool] | None = None
    """The agent's tools plus its toolsets' as of the last model turn (None: no toolsets)."""
    tracer: ToolSpans | None = None
    call_ids: set[str] | None = None
    """The tool-call IDs of the conversation so far (built on the first turn with calls)."""
    cancels: int = 0
    """Its task's `Task.cancelling()` when the run started (`golem._cancel`)."""

    @property
    def listening(self) -> bool:
        """Whether anything receives events: the hot paths build none when nothing does."""
        return bool(self.observers) or self.sink is not None

    def emit(self, kind: EventKind, **fields: Any) -> None:
        if not self.observers and self.sink is None:
            return
        event = RunEvent(kind, run_id=self.run_id, conversation_id=self.conversation_id, **fields)
        dispatch(self.observers, event)
        if self.sink is not None:
            self.sink(event)

    def partial(self, cost: float) -> PartialResult | None:
        """The evidence so far, or None when the run has produced none."""
        if (
            self.tool_calls == 0
            and self.usage.input_tokens == 0
            and self.usage.output_tokens == 0
            and not any(m.role == "assistant" for m in self.messages)
        ):
            return None
        return PartialResult(
            messages=list(self.messages),
            usage=self.usage,
            finish_reason=self.finish_reason,
            requests=self.requests,
            tool_calls=self.tool_calls,
            cost=cost,
            run_id=self.run_id,
            conversation_id=self.conversation_id,
        )

    def tool_message(
        self, call: ToolCall, text: str, *, parts: Sequence[Any] = (), failed: bool = False
    ) -> Message:
        return new_message(
            "tool",
            text,
            list(parts),
            None,
            call.id,
            call.name,
            failed,
            self.run_id,
            self.conversation_id,
        )


class _Fail(Exception):
    """Internal: carries a stage and cause out of a nested step."""

    def __init__(self, stage: Stage, cause: BaseException) -> None:
        self.stage = stage
        self.cause = cause


async def run_loop(policy: Policy, state: RunState, *, stream: bool = False) -> Result[Any]:
    """Run the loop on `state` until the model answers, a call defers, or the run fails."""
    try:
        return await _loop(policy, state, stream)
    except _Fail as f:
        stage, cause = f.stage, f.cause
    # raised outside the handler: the internal _Fail is neither chained as __context__ nor
    # kept alive by this frame
    raise RunError(stage, cause, state.partial(policy.cost(state.usage))) from cause


async def _loop(policy: Policy, state: RunState, stream: bool) -> Result[Any]:
    rounds = 0
    if state.tool_calls or state.requests:  # a resume's approved re-runs (or resumed
        # sub-agents) may already have crossed a bound
        _check_usage(policy, state)
    while True:
        for turn in range(policy.max_iterations):
            message = await _model_turn(policy, state, turn, stream)
            calls = message.tool_calls
            if not calls:
                if state.finish_reason != "pause_turn":
                    break
                continue  # the provider paused its own tools' turn: send it back to go on
            pending = await _tool_batch(policy, state, turn, calls)
            _check_usage(policy, state)
            if pending is not None:
                return _result(policy, state, None, pending)
        else:
            raise _Fail(
                Stage.LOOP,
                RuntimeError(f"model turn limit exceeded after {policy.max_iterations} turns"),
            )
        try:
            output = policy.decode(message.content)
        except ModelRetry as retry:
            if rounds < policy.output_retries:
                rounds += 1
                state.emit(EventKind.OUTPUT_REJECTED, attempt=rounds, error=retry)
                state.messages.append(
                    Message(
                        role="user",
                        content=(
                            f"Your previous response was rejected: {retry.message}. "
                            "Correct it and respond again."
                        ),
                        run_id=state.run_id,
                        conversation_id=state.conversation_id,
                    )
                )
                continue
            cause: BaseException = retry.__cause__ or ValueError(retry.message)
            if rounds:
                wrapped = ValueError(
                    f"output failed validation after {rounds + 1} attempts: {retry.message}"
                )
                wrapped.__cause__ = cause
                cause = wrapped
            raise _Fail(Stage.DECODE, cause) from None
        return _result(policy, state, output, None)


def _result(
    policy: Policy, state: RunState, output: Any, pending: deferred.DeferredRequests | None
) -> Result[Any]:
    return Result(
        output=output,
        messages=state.messages,
        usage=state.usage,
        finish_reason=state.finish_reason,
        requests=state.requests,
        tool_calls=state.tool_calls,
        cost=policy.cost(state.usage),
        run_id=state.run_id,
        conversation_id=state.conversation_id,
        pending=pending,
    )


def _check_usage(policy: Policy, state: RunState) -> None:
    limits = policy.usage_limits
    if limits is None:
        return
    try:
        limits.check(state.usage, state.requests, state.tool_calls, policy.cost(state.usage))
    except UsageLimitExceeded as exc:
        raise _Fail(Stage.USAGE, exc) from None


# --------------------------------------------------------------------------- model turn


async def _model_turn(policy: Policy, state: RunState, turn: int, stream: bool) -> Message:
    """One model call (with its retries); returns the answer as recorded in the history."""
    request = ModelRequest(
        messages=list(state.messages),
        tools=await _turn_specs(policy, state) if policy.toolsets else policy.specs,
        output_schema=policy.output_schema,
        tool_choice=policy.tool_choice,
    )
    raise_if_swallowed(state.cancels)  # no request once the caller has cancelled
    attempts = 1 if stream else policy.max_attempts
    attempt = 0
    response: ModelResponse | None = None
    while response is None:
        attempt += 1
        if state.listening:
            state.emit(EventKind.MODEL_START, turn=turn, attempt=attempt)
        state.requests += 1
        try:
            if stream:
                response = await _stream_once(policy, state, request)
            else:
                response = await policy.model.generate(request)
        except Exception as exc:
            raise_if_swallowed(state.cancels)
            # what a failed answer reported it used (a stream that broke off) is spent
            spent = exc.usage if isinstance(exc, ProviderError) else None
            if spent is not None:
                state.usage = state.usage + spent
            state.emit(
                EventKind.MODEL_END, turn=turn, attempt=attempt, usage=spent or Usage(), error=exc
            )
            retryable = isinstance(exc, ProviderError) and exc.retryable
            if retryable and attempt < attempts:
                if spent is not None:
                    _check_usage(policy, state)  # no retry past a usage limit
                wait = policy.backoff(attempt, exc)
                if wait is not None:
                    await asyncio.sleep(wait)
                    continue
                exc.add_note(
                    f"golem: not retried: the provider asked to wait "
                    f"{getattr(exc, 'retry_after', None)} s, longer than the agent's max_retry_wait"
                )
                raise _Fail(Stage.MODEL, exc) from None
            if attempt > 1:
                exc.add_note(f"golem: the model failed after {attempt} attempts")
            raise _Fail(Stage.MODEL, exc) from None
    raise_if_swallowed(state.cancels)
    state.usage = state.usage + response.usage
    state.finish_reason = response.finish_reason
    state.model_name = response.model_name
    message = response.message
    if (
        message.run_id != state.run_id
        or message.conversation_id != state.conversation_id
        or message.role != "assistant"
    ):
        message = stamped(message, state.run_id, state.conversation_id, "assistant")
    if message.tool_calls:
        message = _unique_call_ids(state, message)
    state.messages.append(message)
    if state.listening:
        state.emit(EventKind.MODEL_END, turn=turn, attempt=attempt, usage=response.usage)
    _check_usage(policy, state)
    return message


def _unique_call_ids(state: RunState, message: Message) -> Message:
    """`message` with each call whose ID the conversation has already renamed `<id>_<n>`."""
    seen = state.call_ids
    if seen is None:
        seen = state.call_ids = {
            c.id for m in state.messages if m.role == "assistant" for c in m.tool_calls
        }
    calls: list[ToolCall] | None = None
    for i, c in enumerate(message.tool_calls):
        new_id = c.id
        if new_id in seen:
            n = 2
            while f"{c.id}_{n}" in seen:
                n += 1
            new_id = f"{c.id}_{n}"
            calls = calls or list(message.tool_calls)
            calls[i] = ToolCall(new_id, c.name, c.args, c.signature, c.seal)
        if new_id:
            seen.add(new_id)
    return with_calls(message, calls) if calls is not None else message


async def _turn_specs(policy: Policy, state: RunState) -> list[ToolSpec]:
    """The tools offered on this turn: the agent's, plus its toolsets' as listed now."""
    try:
        state.tools = await resolve_tools(policy.own_tools or {}, policy.toolsets)
    except Exception as exc:
        raise _Fail(Stage.TOOL, exc) from None
    return [ToolSpec(t.name, t.description, t.schema) for t in state.tools.values()]


async def _stream_once(policy: Policy, state: RunState, request: ModelRequest) -> ModelResponse:
    final: ModelResponse | None = None
    sink = state.sink
    async for item in policy.model.generate_stream(request):  # type: ignore[attr-defined]
        if isinstance(item, ModelResponse):
            final = item
        elif sink is not None:
            sink(item)
    if final is None:
        raise RuntimeError(
            f"model {type(policy.model).__name__} ended its stream without a final response"
        )
    return final


# --------------------------------------------------------------------------- tools


@dataclass(slots=True)
class _Outcome:
    kind: str  # "ok" | "deferred" | "canceled" | "failed" | "retry" | "error"
    result: ToolResult | None = None
    error: BaseException | None = None


async def _execute(policy: Policy, state: RunState, tool: Tool, call: ToolCall) -> _Outcome:
    ctx = RunContext(state.deps, state.run_id, state.conversation_id, call.id, call.name)
    timeout = tool.timeout if tool.timeout is not None else policy.tool_timeout
    tracer = state.tracer  # when tracing, the call's span is current while the tool runs
    entered = tracer.enter_tool(call.id) if tracer is not None else None
    try:
        if timeout is None and tool.__class__.run is _TOOL_RUN:
            result = await tool.invoke(ctx, call.args)  # what `run` does: one coroutine less
        else:
            result = await tool.run(ctx, call.args, timeout)
    except ToolTimeout as exc:
        return _Outcome("error", error=exc)
    except Exception as exc:
        # classified in a helper so no local of this frame (which the traceback holds)
        # references the exception: no reference cycle keeps the run's state alive
        return _classify(exc)
    finally:
        if tracer is not None:
            tracer.leave_tool(entered)
    return _Outcome("ok", result)


_TOOL_RUN = Tool.run

_CUT_OFF = {
    "length": (
        "the answer reached the output token limit (finish reason length) while this call "
        "was being written, so its arguments may be incomplete; the tool did not run"
    ),
    "content_filter": (
        "the answer was stopped by the provider's content filter (finish reason "
        "content_filter) while this call was being written, so its arguments may be "
        "incomplete; the tool did not run"
    ),
}
"""Why the last tool call of an answer cut off before the model finished it is refused, by
the answer's finish reason."""


async def _cut_off(finish_reason: str) -> _Outcome:
    """The outcome of a call the answer's stop may have cut: arguments to correct."""
    return _Outcome("retry", error=InvalidArguments(_CUT_OFF[finish_reason]))


_SIGNALS: tuple[tuple[str, type[Exception]], ...] = (
    ("deferred", Deferred),
    ("canceled", Canceled),
    ("failed", Failed),
    ("retry", ModelRetry),
)


def _classify(exc: Exception) -> _Outcome:
    """The outcome a tool's exception stands for: a signal (no traceback) or an error."""
    if exc.__class__ is Deferred:  # the common signal, raised as itself
        return _Outcome("deferred", None, exc.with_traceback(None))
    for kind, signal in _SIGNALS:
        found = find_signal(exc, signal)
        if found is not None:
            return _Outcome(kind, error=found.with_traceback(None))
    return _Outcome("error", error=exc)


def _end_event(state: RunState, turn: int, call: ToolCall, out: _Outcome) -> None:
    if not state.listening:
        return
    detail: dict[str, Any]
    kind, detail = EventKind.TOOL_END, {"error": out.error}
    if out.kind == "deferred":
        kind = EventKind.DEFERRED
        detail = {"args": call.args, "reason": getattr(out.error, "reason", "")}
    elif out.result is not None:
        detail = {"result": out.result.text, "parts": tuple(out.result.parts)}
    state.emit(kind, turn=turn, call_id=call.id, tool_name=call.name, **detail)


def _groups(tools: Sequence[Tool]) -> list[list[int]]:
    """Parallel calls: runs of non-sequential tools run together, a sequential one alone."""
    groups: list[list[int]] = []
    current: list[int] = []
    for i, tool in enumerate(tools):
        if tool.sequential:
            if current:
                groups.append(current)
                current = []
            groups.append([i])
        else:
            current.append(i)
    if current:
        groups.append(current)
    return groups


def _start_event(state: RunState, turn: int, call: ToolCall) -> None:
    if state.listening:
        state.emit(
            EventKind.TOOL_START, turn=turn, call_id=call.id, tool_name=call.name, args=call.args
        )


async def _tool_batch(
    policy: Policy, state: RunState, turn: int, calls: Sequence[ToolCall]
) -> deferred.DeferredRequests | None:
    """Execute one response's tool calls; return the pending requests if any deferred."""
    tools: list[Tool] = []
    known = policy.tools if state.tools is None else state.tools
    for call in calls:
        tool = known.get(call.name)
        if tool is None:
            raise _Fail(
                Stage.TOOL, ToolError(call.name, call.id, "tool was not declared for this run")
            )
        tools.append(tool)
    recorded: dict[int, Message] = {}
    deferrals: list[tuple[ToolCall, Deferred]] = []
    # an answer stopped by its output token limit or a content filter was cut while writing
    # its last call: its arguments may be half written even when they parse (Anthropic's
    # `{}`, or a partial object parsed server-side), so that call never runs nor asks for
    # approval
    stop = state.finish_reason
    cut = len(calls) - 1 if stop in _CUT_OFF else -1
    # one call at a time, in emission order, unless parallel
    groups = _groups(tools) if policy.parallel_tool_calls else [[i] for i in range(len(calls))]
    for group in groups:
        if len(group) == 1:  # the common case, without a task: the call runs on this one
            i = group[0]
            _start_event(state, turn, calls[i])
            out = await (_cut_off(stop) if i == cut else _execute(policy, state, tools[i], calls[i]))
            raise_if_swallowed(state.cancels)
            _end_event(state, turn, calls[i], out)
            if out.kind != "deferred":
                state.tool_calls += 1
            _settle(policy, state, turn, calls, i, tools[i], out, recorded, deferrals)
            continue
        for i in group:
            _start_event(state, turn, calls[i])
        outcomes = await _together(
            [_cut_off(stop) if i == cut else _execute(policy, state, tools[i], calls[i]) for i in group]
        )
        for i, out in zip(group, outcomes, strict=True):
            _end_event(state, turn, calls[i], out)
            if out.kind != "deferred":
                state.tool_calls += 1
        for i, out in zip(group, outcomes, strict=True):
            _settle(policy, state, turn, calls, i, tools[i], out, recorded, deferrals)
    if deferrals:
        _check_nameable(state, deferrals)
    state.messages.extend(recorded[i] for i in sorted(recorded))
    return (
        deferred.pause(state.messages, state.conversation_id, policy.seal_keys, deferrals)
        if deferrals
        else None
    )


async def _together(runs: list[Coroutine[Any, Any, _Outcome]]) -> list[_Outcome]:
    """Run one parallel group's calls as tasks; their outcomes in emission order. A task
    failing with a `BaseException` cancels and awaits the others before it propagates."""
    tasks = [asyncio.ensure_future(run) for run in runs]
    try:
        return await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await settle(tasks)
        raise


async def settle(tasks: Sequence[asyncio.Future[Any]]) -> None:
    """Wait until every task has ended, through the caller's cancellations, and retrieve them."""
    while not all(task.done() for task in tasks):
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait(tasks)
    for task in tasks:
        if not task.cancelled():
            task.exception()


def _check_nameable(state: RunState, deferrals: Sequence[tuple[ToolCall, Deferred]]) -> None:
    """A deferring call needs an ID no other call of the history has (else `_Fail`)."""
    counts = {call.id: 0 for call, _ in deferrals}
    for m in state.messages:
        if m.role == "assistant":
            for c in m.tool_calls:
                if c.id in counts:
                    counts[c.id] += 1
    for call, _ in deferrals:
        if not call.id:
            problem = "has no call ID"
        elif counts[call.id] > 1:
            problem = f'has an ID that is not unique in the history ("{call.id}")'
        else:
            continue
        raise _Fail(
            Stage.TOOL,
            ToolError(
                call.name,
                call.id,
                f"the deferred call {problem}: a resume could not name it, so the run cannot "
                "pause on it",
            ),
        )


def _settle(
    policy: Policy,
    state: RunState,
    turn: int,
    calls: Sequence[ToolCall],
    i: int,
    tool: Tool,
    out: _Outcome,
    recorded: dict[int, Message],
    deferrals: list[tuple[ToolCall, Deferred]],
) -> None:
    """Record call `i`'s outcome: its result message, its deferral, or the run's failure."""
    call = calls[i]
    if out.kind == "ok":
        assert out.result is not None
        recorded[i] = state.tool_message(call, out.result.text, parts=out.result.parts)
    elif out.kind == "deferred":
        assert isinstance(out.error, Deferred)
        if getattr(out.error, "kind", None).__class__ is not DeferKind and not _valid_kind(
            out.error
        ):
            raise _Fail(Stage.TOOL, _tool_error(call, _UNKINDED, out.error))
        deferrals.append((call, out.error))
    elif out.kind == "failed":
        assert isinstance(out.error, Failed)
        recorded[i] = state.tool_message(call, out.error.reason, failed=True)
    elif out.kind == "retry":
        assert isinstance(out.error, ModelRetry)
        budget = tool.max_retries if tool.max_retries is not None else policy.tool_retries
        used = state.feedback.get(call.name, 0)
        # arguments that fail validation never ran the tool: always correctable (bounded by
        # max_iterations), without spending the tool's budget
        invalid = isinstance(out.error, InvalidArguments)
        if invalid or used < budget:
            if not invalid:
                state.feedback[call.name] = used + 1
            recorded[i] = state.tool_message(
                call,
                f"Your tool call was rejected: {out.error.message}. Correct the arguments and call the tool again.",
            )
        else:
            text = (
                f"tool failed after {used + 1} attempts: {out.error.message}"
                if used
                else out.error.message
            )
            raise _Fail(Stage.TOOL, _tool_error(call, text, out.error))
    elif out.kind == "canceled":
        _close_canceled(state, calls, recorded)
        state.emit(
            EventKind.CANCELED, turn=turn, call_id=call.id, tool_name=call.name, error=out.error
        )
        assert out.error is not None
        raise _Fail(Stage.CANCELED, out.error)
    else:
        assert out.error is not None
        if isinstance(out.error, ToolError):
            raise _Fail(Stage.TOOL, out.error)
        raise _Fail(
            Stage.TOOL, _tool_error(call, str(out.error) or type(out.error).__name__, out.error)
        )


_UNKINDED = (
    "tool deferred without a kind: a Deferred signal needs DeferKind.APPROVAL or "
    "DeferKind.EXTERNAL as its kind"
)


def _valid_kind(signal: Deferred) -> bool:
    """Whether a signal whose `kind` is not a `DeferKind` names one as a string."""
    kind = getattr(signal, "kind", None)
    return isinstance(kind, str) and kind in _KINDS


_KINDS = frozenset(k.value for k in DeferKind)


def _tool_error(call: ToolCall, text: str, cause: BaseException) -> ToolError:
    err = ToolError(call.name, call.id, text)
    err.__cause__ = cause
    return err


def _close_canceled(
    state: RunState, calls: Sequence[ToolCall], recorded: dict[int, Message]
) -> None:
    """Keep the results recorded before the cancel; close every other call as interrupted."""
    for i, call in enumerate(calls):
        state.messages.append(recorded.get(i) or state.tool_message(call, INTERRUPTED_TEXT))
