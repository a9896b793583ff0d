"""Resuming a paused run, top to bottom: check, re-run the approved calls, merge, run on
(docs/guides/deferred-tools.md). Paused sub-agents are a tree of paused runs: each share is
checked first, each sub-agent resumes by this same path, the parent's calls last (ADR 0076)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from golem._checks import ResumePlan, check, load
from golem._ids import new_id
from golem._loop import Policy, RunState, run_loop
from golem._rerun import BeforeApproved, Resolving, merge, resolve
from golem._run import (
    Prompt,
    new_state,
    new_tracer,
    observers_of,
    open_run,
    plain,
    prepare,
    prompt_message,
    run_traced,
)
from golem.agent_tool import (
    AgentTool,
    SubAgent,
    absorb,
    copy_result,
    forwarder,
    namespaced,
    output_text,
    partial_of,
    paused_record,
)
from golem.deferred import DeferredRequests, DeferredResults, PausedRun, PendingToolCall, as_results
from golem.errors import Stage, ToolError, UsageLimitExceeded
from golem.events import EventHandler
from golem.history import History, conversation_of
from golem.messages import Message, ToolCall
from golem.records import (
    NestedPlan,
    Paused,
    check_records,
    check_sub_agents,
    paused_records,
    pending_of,
    progress_record,
)
from golem.result import PartialResult, Result, RunError
from golem.tool import Canceled, ClearedApproval, find_signal
from golem.usage import Usage

if TYPE_CHECKING:
    from golem.integrations.otel import RunTracer

__all__ = ["BeforeApproved", "ResumeProgress"]

Resolutions = DeferredResults | Mapping[str, Any]


@dataclass(slots=True)
class ResumeRequest:
    """One resume: the paused history, its resolutions, and the resumed run's options."""

    history: History
    results: Resolutions
    prompt: Prompt = ""
    deps: Any = None
    run_id: str | None = None
    conversation_id: str | None = None
    on_event: EventHandler | None = None
    expected: DeferredRequests | None = None
    before_approved: BeforeApproved | None = None
    trace_context: str = ""
    progress: ResumeProgress | None = None
    sink: Callable[[Any], None] | None = None

    @classmethod
    def of(
        cls, paused: History | PausedRun, results: Resolutions, prompt: Prompt, **options: Any
    ) -> ResumeRequest:
        """The request for `paused` (a `PausedRun` supplies conversation, expected, trace)."""
        history = paused.messages if isinstance(paused, PausedRun) else paused
        req = cls(history, results, prompt, **options)
        if isinstance(paused, PausedRun):
            req.conversation_id = paused.conversation_id or None
            req.expected = paused.pending
            req.trace_context = paused.trace_context
        if req.progress is not None:
            req.before_approved = req.progress.before_approved
        return req


def precheck(agent: SubAgent, req: ResumeRequest) -> ResumePlan | None:
    """A streamed resume's check before it starts; None with toolsets or paused sub-agents."""
    policy = agent._policy(agent.tools)
    if policy.nested and paused_records(load(req.history, validate=False)):
        return None
    if agent.toolsets:
        return None
    return check(policy, req.history, req.results, req.conversation_id, req.expected)


async def resume_agent(
    agent: SubAgent, req: ResumeRequest, plan: ResumePlan | None = None
) -> Result[Any]:
    """Resume `agent`'s paused run (`plan`: checked already): check, re-run, merge, run on."""
    with ClearedApproval():
        async with agent._toolsets_entered() as tools:
            policy = agent._policy(tools)
            if policy.nested:
                history = load(req.history, validate=False)
                if paused_records(history):
                    return await _resume_nested(policy, history, req)
            if plan is None:
                plan = check(policy, req.history, req.results, req.conversation_id, req.expected)
            return await _resume_flat(policy, plan, req, req.progress)


async def _resume_flat(
    policy: Policy,
    plan: ResumePlan,
    req: ResumeRequest,
    progress: ResumeProgress | None,
    run_id: str | None = None,
    spent: Sequence[Result[Any]] = (),
    opened: RunTracer | None = None,
) -> Result[Any]:
    """Re-run and merge `plan`, then run the loop on the merged history and the prompt."""
    user = prompt_message(req.prompt)
    state = new_state(policy, req.deps, run_id or req.run_id, plan.conversation_id, req.on_event)
    state.sink = req.sink
    _seed(state, spent)  # resumed sub-agents' spending counts in this run
    work = Resolving(plan)

    async def before() -> None:
        if progress is not None:
            progress._start(work)
        merged = await resolve(work, policy, state, req.before_approved)
        await open_run(policy, state, merged, user, False)

    if plain(policy):
        await before()
        return await run_loop(policy, state, stream=req.sink is not None)
    return await run_traced(
        policy,
        state,
        trace_context=req.trace_context,
        before=before,
        operation="resume",
        opened=opened,
    )


async def _resume_nested(policy: Policy, history: list[Message], req: ResumeRequest) -> Result[Any]:
    """Check the whole tree, resume the sub-agents, then this run's calls, and run on."""
    run_id = req.run_id or new_id()  # one identity for every part of this resume
    bound = bool(req.conversation_id) or req.expected is not None
    conversation_id = req.conversation_id or conversation_of(history) or new_id()
    if req.progress is not None:
        req.progress._reset()
    plan = check_records(history, as_results(req.results), policy.tools, req.expected)
    if plan.own_pending:
        check(policy, plan.checked, plan.own, conversation_id, None, bound)
    check_sub_agents(plan, conversation_id=conversation_id, conversation_bound=bound)
    tracer = new_tracer(policy, req.trace_context)  # opens first: the sub-agents run under it
    if tracer is not None:
        tracer.open(run_id, conversation_id, operation="resume")
    handing = _Handing(
        plan.history, plan.records, plan.results, run_id, conversation_id, policy.cost
    )
    if req.progress is not None:
        req.progress._follow(handing.read)
    try:
        await _resume_subs(plan, handing, policy, req)
        if handing.repaused:  # a sub-agent paused again: so does this run
            result = await _paused_again(plan, handing, policy, req, bound)
        else:
            merged = merge(handing.merged, {})
            if plan.own_pending:
                handing.own, handing.base = ResumeProgress(), merged
                own = check(policy, merged, plan.own, conversation_id, None, bound)
                result = await _resume_flat(
                    policy, own, req, handing.own, run_id, handing.spent, tracer
                )
            else:
                handing.continued = merged
                state = await prepare(
                    policy, req.prompt, req.deps, merged, run_id, conversation_id, req.on_event
                )
                state.sink = req.sink
                _seed(state, handing.spent)
                result = await run_traced(
                    policy,
                    state,
                    trace_context=req.trace_context,
                    operation="resume",
                    opened=tracer,
                )
    except BaseException as exc:
        if tracer is not None and tracer.is_open:
            tracer.fail(exc)
        raise
    if tracer is not None and tracer.is_open:  # paused again, its loop unrun
        result = copy_result(result, trace_context=tracer.finish(result))
    return result


async def _resume_subs(
    plan: NestedPlan, handing: _Handing, policy: Policy, req: ResumeRequest
) -> None:
    """Resume (or `run`, when nothing is left to resolve) each paused sub-agent by this same
    path; its answer or new record replaces its old one (ADR 0076)."""
    merged = handing.merged = list(plan.history)
    observers = observers_of(policy, req.on_event)
    for call_id, rec in plan.records.items():
        agent, name = rec.tool.agent, rec.tool.name
        forward = forwarder(observers, req.sink, call_id, name)
        try:
            if rec.continues:
                sub = await agent.run(
                    deps=rec.tool._deps(req.deps),
                    history=rec.history,
                    conversation_id=rec.conversation,
                    on_event=forward,
                )
            else:
                sub = await resume_agent(
                    agent,
                    ResumeRequest(
                        rec.history,
                        DeferredResults(approvals=rec.approvals, external=rec.external),
                        deps=rec.tool._deps(req.deps),
                        conversation_id=rec.conversation,
                        expected=rec.expected,
                        on_event=forward,
                        trace_context=req.trace_context,
                        before_approved=_namespaced_guard(req.before_approved, call_id, name),
                        progress=handing.subs.setdefault(call_id, ResumeProgress()),
                    ),
                )
        except RunError as failed:
            wrapped = _sub_failed(call_id, name, failed)
            wrapped.partial = handing.partial(failed.partial)
            raise wrapped from wrapped.__cause__
        handing.spent.append(sub)
        run_id = handing.run_id or rec.message.run_id
        conversation = handing.conversation_id or rec.message.conversation_id
        if sub.pending is not None:
            handing.repaused[call_id] = (rec.tool, sub)
            merged[rec.index] = paused_record(call_id, name, sub, run_id, conversation)
        else:
            merged[rec.index] = handing.answers[call_id] = replace(
                rec.message,
                content=output_text(sub.output),
                run_id=run_id,
                conversation_id=conversation,
            )


async def _paused_again(
    plan: NestedPlan, handing: _Handing, policy: Policy, req: ResumeRequest, bound: bool
) -> Result[Any]:
    """Resolve this run's own calls under a sub-agent that paused again; the paused result."""
    merged, tool_calls = handing.merged, 0
    if plan.own_pending:
        handing.own = ResumeProgress()
        own = check(policy, merged, plan.own, handing.conversation_id, None, bound)
        state = new_state(policy, req.deps, handing.run_id, own.conversation_id, req.on_event)
        work = Resolving(own)
        handing.own._start(work)
        try:  # hand_back=False: the partial holds the sub-agents' records too (ADR 0076)
            merged = await resolve(work, policy, state, req.before_approved, hand_back=False)
        except RunError as failed:
            failed.partial = handing.partial(None)
            raise
        tool_calls = state.tool_calls
    result = handing.paused(merged, tool_calls)
    result = copy_result(result, cost=policy.cost(result.usage))
    if policy.usage_limits is not None:
        try:
            policy.usage_limits.check(result.usage, result.requests, result.tool_calls, result.cost)
        except UsageLimitExceeded as exc:
            raise RunError(Stage.USAGE, exc, partial_of(result)) from exc
    return result


def _namespaced_guard(
    guard: BeforeApproved | None, call_id: str, tool_name: str
) -> BeforeApproved | None:
    """`guard` for a sub-agent's resume: it sees the sub-agent's calls namespaced."""
    if guard is None:
        return None

    async def namespaced_guard(call: ToolCall) -> None:
        await guard(replace(call, id=f"{call_id}/{call.id}", name=f"{tool_name}/{call.name}"))

    return namespaced_guard


def _sub_failed(call_id: str, tool_name: str, failed: RunError) -> RunError:
    """The parent's `RunError` when a sub-agent it resumes fails (`canceled` or `tool`)."""
    canceled = find_signal(failed, Canceled) if failed.stage is Stage.CANCELED else None
    if canceled is not None:
        return RunError(Stage.CANCELED, canceled)
    err = ToolError(tool_name, call_id, f"sub-agent resume failed: {failed}")
    err.__cause__ = failed
    return RunError(Stage.TOOL, err)


def _spent(results: Sequence[Result[Any]]) -> tuple[Usage, int, int]:
    """What resumed sub-agents spent: usage, requests, tool calls."""
    usage = sum((r.usage for r in results), Usage())
    return usage, sum(r.requests for r in results), sum(r.tool_calls for r in results)


def _seed(state: RunState, results: Sequence[Result[Any]]) -> None:
    """Start `state`'s counters from what `results` spent (before the parent's own work)."""
    for r in results:
        absorb(state, r)


@dataclass(slots=True)
class _Handing:
    """What a nested resume has done so far, built into a history when handed back."""

    history: list[Message]
    records: Mapping[str, Paused]
    results: DeferredResults
    run_id: str
    conversation_id: str
    price: Callable[[Usage], float]
    spent: list[Result[Any]] = field(default_factory=list)  # sub-agents answered/paused again
    answers: dict[str, Message] = field(default_factory=dict)  # by record: its sub-agent's answer
    subs: dict[str, ResumeProgress] = field(default_factory=dict)  # each sub-agent's progress
    own: ResumeProgress | None = None  # the parent's own pending calls' progress
    base: list[Message] | None = None  # where the parent's own resume started (all answered)
    continued: list[Message] | None = None  # what the parent went on from (nothing of its own)
    merged: list[Message] = field(default_factory=list)  # answers and new records in place
    repaused: dict[str, tuple[AgentTool, Result[Any]]] = field(default_factory=dict)

    def paused(self, messages: list[Message], tool_calls: int) -> Result[Any]:
        """The parent, still paused on the sub-agents that paused again."""
        last = messages[-1]
        approvals: list[PendingToolCall] = []
        external: list[PendingToolCall] = []
        for call_id, (tool, sub) in self.repaused.items():
            assert sub.pending is not None
            approvals.extend(namespaced(call_id, tool.name, sub.pending.approvals))
            external.extend(namespaced(call_id, tool.name, sub.pending.external))
        conversation_id = self.conversation_id or last.conversation_id
        usage, requests, spent_calls = _spent(self.spent)
        return Result(
            output=None,
            messages=messages,
            usage=usage,
            requests=requests,
            tool_calls=tool_calls + spent_calls,
            run_id=self.run_id or last.run_id,
            conversation_id=conversation_id,
            pending=DeferredRequests(approvals, external, conversation_id),
        )

    def read(self) -> tuple[list[Message] | None, bool, tuple[str, ...]]:
        """(the history to go on from or None, whether still paused, the answered IDs)."""
        answered = tuple(f"{cid}/{x}" for cid, p in self.subs.items() for x in p.answered)
        if self.own is not None:
            answered += self.own.answered
        if self.continued is not None:
            return list(self.continued), False, answered
        if self.base is not None and self.own is not None:
            got = self.own.messages
            if got is None:
                return list(self.base), True, answered
            return got, self.own.paused, answered
        out = list(self.history)
        touched = False
        for call_id, rec in self.records.items():
            answer = self.answers.get(call_id)
            if answer is not None:
                out[rec.index] = answer
                touched = True
                continue
            sub = self.subs.get(call_id)
            sub_history = sub.messages if sub is not None else None
            if sub_history is not None:
                out[rec.index] = progress_record(
                    rec, sub_history, self.run_id, self.conversation_id
                )
                touched = True
        if self.own is not None and self.own.answered:
            out = self.own._answer(out)
            touched = True
        return (out if touched else None), True, answered

    def partial(self, failed: PartialResult | None) -> PartialResult:
        """The partial of a failed nested resume (`failed`: the failing sub-agent's)."""

        messages = self.read()[0]
        if messages is None:
            messages = list(self.history)
        usage, requests, tool_calls = _spent(self.spent)
        if failed is not None:
            usage = usage + failed.usage
            requests += failed.requests
            tool_calls += failed.tool_calls
        return PartialResult(
            messages=messages,
            usage=usage,
            requests=requests,
            tool_calls=tool_calls,
            cost=self.price(usage),
            run_id=self.run_id,
            conversation_id=self.conversation_id,
            pending=pending_of(messages, self.results),
        )


ProgressSource = Callable[[], tuple[list[Message] | None, bool, tuple[str, ...]]]
"""A nested resume's progress, built when read: (messages, paused, answered)."""


class ResumeProgress:
    """What a resume has done so far, readable after it failed or was cancelled: `messages`
    is the history to go on from, so no approved call runs twice (ADR 0071, 0076).
    `before_approved` is awaited before each approved re-run; what it raises stops the resume."""

    __slots__ = ("_source", "_work", "before_approved")

    def __init__(self, *, before_approved: BeforeApproved | None = None) -> None:
        self._work: Resolving | None = None
        self._source: ProgressSource | None = None
        self.before_approved = before_approved

    def __repr__(self) -> str:
        started = self._work is not None or self._source is not None
        state = f"answered={self.answered!r}" if started else "not started"
        return f"ResumeProgress({state}, paused={self.paused})"

    def _read(self) -> tuple[list[Message] | None, bool, tuple[str, ...]]:
        if self._source is not None:
            return self._source()
        work = self._work
        if work is None:
            return None, True, ()
        if work.merged is not None:
            return list(work.merged), False, tuple(work.ran)
        messages = work.answered() if work.ran else None
        return messages, len(work.ran) < len(work.plan.steps), tuple(work.ran)

    @property
    def messages(self) -> list[Message] | None:
        """The history to go on from (None: nothing ran): resume it while `paused`, else `run`."""
        return self._read()[0]

    @property
    def answered(self) -> tuple[str, ...]:
        """The IDs of the approved calls that ran, in order (a sub-agent's namespaced)."""
        return self._read()[2]

    @property
    def paused(self) -> bool:
        """Whether `messages` still has pending calls (go on with a resume, not `run`)."""
        return self._read()[1]

    def _reset(self) -> None:
        self._work, self._source = None, None

    def _follow(self, source: ProgressSource) -> None:
        """Read `messages`, `paused` and `answered` from `source` (a nested resume's)."""
        self._work, self._source = None, source

    def _answer(self, history: list[Message]) -> list[Message]:
        """`history` with the approved calls this progress saw run answered."""
        work = self._work
        return work.answered(history) if work is not None and work.ran else history

    def _start(self, work: Resolving) -> None:
        self._work, self._source = work, None
