"""Resuming a paused run, top to bottom: check everything, re-run the approved calls, merge,
then hand the history to the run loop (docs/guides/deferred-tools.md).

A history with paused sub-agents (`Agent.as_tool`) is a tree of paused runs: every
sub-agent's share is checked first, at any depth; each sub-agent then resumes by this same
path (`resume_agent`), its answer or new record replaces its old record, and the parent's
own calls resolve last (ADR 0076).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, NamedTuple

from golem._checks import ResumePlan, check, load
from golem._ids import new_id
from golem._loop import Policy, RunState, run_loop
from golem._rerun import BeforeApproved, Resolving, merge, resolve
from golem._run import (
    History,
    Prompt,
    conversation_of,
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
from golem.messages import Message, ToolCall
from golem.nested import NestedPlan, check_records, check_sub_agents
from golem.records import Paused, paused_records, pending_of, progress_record
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
        """The request for `paused`: a `PausedRun` supplies the conversation, the expected
        calls and the trace context; `progress` its `before_approved` hook."""
        req = cls(
            paused if not isinstance(paused, PausedRun) else paused.messages,
            results,
            prompt,
            **options,
        )
        if isinstance(paused, PausedRun):
            req.conversation_id = paused.conversation_id or None
            req.expected = paused.pending
            req.trace_context = paused.trace_context
        if req.progress is not None:
            req.before_approved = req.progress.before_approved
        return req


def precheck(agent: SubAgent, req: ResumeRequest) -> ResumePlan | None:
    """A streamed resume's check, before its stream starts; None when it can only be checked
    once started (toolsets' tools are known once entered; paused sub-agents)."""
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
    spent: _Spent | None = None,
    opened: RunTracer | None = None,
) -> Result[Any]:
    """Re-run and merge `plan`, then run the loop on the merged history and the prompt."""
    user = prompt_message(req.prompt)
    state = new_state(policy, req.deps, run_id or req.run_id, plan.conversation_id, req.on_event)
    state.sink = req.sink
    if spent is not None:  # resumed sub-agents' spending counts in this run
        spent.seed(state)
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
    """A resume whose history records paused sub-agents: check the whole tree, resume the
    sub-agents, then this run's own calls, and run on (or stay paused)."""
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
            spent = _Spent.of(handing.spent)
            if plan.own_pending:
                handing.own, handing.base = ResumeProgress(), merged
                own = check(policy, merged, plan.own, conversation_id, None, bound)
                result = await _resume_flat(policy, own, req, handing.own, run_id, spent, tracer)
            else:
                handing.continued = merged
                state = await prepare(
                    policy, req.prompt, req.deps, merged, run_id, conversation_id, req.on_event
                )
                state.sink = req.sink
                spent.seed(state)
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
    """Resume each paused sub-agent of a checked plan by this same path (or `run` it, when
    it has nothing left to resolve), writing its answer, or its new record when it paused
    again, in place of its old record; a failure's partial is the parent's (ADR 0076)."""
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
    """This run's own calls resolved (not run on) under a sub-agent that paused again, and
    the still paused result, within this run's limits and priced."""
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
    """The parent's failure when a sub-agent it resumes fails: stage `canceled` with the
    sentinel when it was canceled, else stage `tool` naming the parent's call."""
    canceled = find_signal(failed, Canceled) if failed.stage is Stage.CANCELED else None
    if canceled is not None:
        return RunError(Stage.CANCELED, canceled)
    err = ToolError(tool_name, call_id, f"sub-agent resume failed: {failed}")
    err.__cause__ = failed
    return RunError(Stage.TOOL, err)


class _Spent(NamedTuple):
    """What resumed sub-agents spent: a resuming parent's run starts counting from it."""

    usage: Usage
    requests: int
    tool_calls: int

    @classmethod
    def of(cls, results: Sequence[Result[Any]]) -> _Spent:
        usage, requests, tool_calls = Usage(), 0, 0
        for r in results:
            usage = usage + r.usage
            requests += r.requests
            tool_calls += r.tool_calls
        return cls(usage, requests, tool_calls)

    def seed(self, state: RunState) -> None:
        """Start `state`'s counters from this (before the parent's re-runs and loop)."""
        state.usage = state.usage + self.usage
        state.requests += self.requests
        state.tool_calls += self.tool_calls


@dataclass(slots=True)
class _Handing:
    """What a nested resume has done so far, built into a history only when a failure or
    a cancellation hands it back (ADR 0076)."""

    history: list[Message]
    records: Mapping[str, Paused]
    results: DeferredResults
    run_id: str
    conversation_id: str
    price: Callable[[Usage], float]
    spent: list[Result[Any]] = field(default_factory=list)
    """The results of the sub-agents that answered or paused again."""
    answers: dict[str, Message] = field(default_factory=dict)
    """The answer written in place of each record whose sub-agent answered."""
    subs: dict[str, ResumeProgress] = field(default_factory=dict)
    """Each resumed sub-agent's own progress."""
    own: ResumeProgress | None = None
    """The progress of the parent's own pending calls, once they resolve."""
    base: list[Message] | None = None
    """The history the parent's own resume started from (every sub-agent answered)."""
    continued: list[Message] | None = None
    """The resolved history the parent went on from (no call of its own was pending)."""
    merged: list[Message] = field(default_factory=list)
    """The history with each sub-agent's answer, or new record, in place of its old one."""
    repaused: dict[str, tuple[AgentTool, Result[Any]]] = field(default_factory=dict)
    """The sub-agents that paused again, by parent call ID."""

    def paused(self, messages: list[Message], tool_calls: int) -> Result[Any]:
        """The parent, still paused on the sub-agents that paused again (with the resuming
        run's identity), counting what the sub-agents spent."""
        last = messages[-1]
        approvals: list[PendingToolCall] = []
        external: list[PendingToolCall] = []
        for call_id, (tool, sub) in self.repaused.items():
            assert sub.pending is not None
            approvals.extend(namespaced(call_id, tool.name, sub.pending.approvals))
            external.extend(namespaced(call_id, tool.name, sub.pending.external))
        conversation_id = self.conversation_id or last.conversation_id
        spent = _Spent.of(self.spent)
        return Result(
            output=None,
            messages=messages,
            usage=spent.usage,
            requests=spent.requests,
            tool_calls=tool_calls + spent.tool_calls,
            run_id=self.run_id or last.run_id,
            conversation_id=conversation_id,
            pending=DeferredRequests(approvals, external, conversation_id),
        )

    def read(self) -> tuple[list[Message] | None, bool, tuple[str, ...]]:
        """(the history to go on from or None when nothing ran, whether it is still
        paused, the namespaced IDs of the approved calls that ran)."""
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
        """The partial of a nested resume that failed while a sub-agent resumed (its own
        partial `failed`, for what it spent) or while the parent's own calls resolved."""

        messages = self.read()[0]
        if messages is None:
            messages = list(self.history)
        spent = _Spent.of(self.spent)
        usage, requests, tool_calls = spent
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
    """What a resume has done so far, readable after it failed or was cancelled.

    Pass one as `progress=` to `Agent.run_with_deferred_results` (or its sync and stream
    forms): after the caller's `CancelledError`, an exception from `before_approved` or a
    `RunError`, `messages` is the history to go on from, so that no approved call that ran
    runs again (ADR 0071; nested records rewritten, ADR 0076). Reused, it starts over.
    `before_approved` is awaited right before each approved call re-runs, with that call (a
    durable worker proves there that it still holds its lease); what it raises stops the resume.
    """

    __slots__ = ("_source", "_work", "before_approved")

    def __init__(self, *, before_approved: BeforeApproved | None = None) -> None:
        self._work: Resolving | None = None
        self._source: ProgressSource | None = None
        self.before_approved = before_approved

    def __repr__(self) -> str:
        started = self._work is not None or self._source is not None
        state = f"answered={self.answered!r}" if started else "not started"
        return f"ResumeProgress({state}, paused={self.paused})"

    @property
    def messages(self) -> list[Message] | None:
        """The history to go on from, or None when the resume ran nothing (go on from the
        history you passed). While `paused`, resume it with the same resolutions; else it is
        the resolved history without the prompt: go on with `Agent.run(prompt, history=...)`.
        """
        if self._source is not None:
            return self._source()[0]
        work = self._work
        if work is None:
            return None
        if work.merged is not None:
            return list(work.merged)
        return work.answered() if work.ran else None

    @property
    def answered(self) -> tuple[str, ...]:
        """The IDs of the approved calls that ran, in order (a sub-agent's namespaced)."""
        if self._source is not None:
            return self._source()[2]
        return tuple(self._work.ran) if self._work is not None else ()

    @property
    def paused(self) -> bool:
        """Whether `messages` still has pending calls (go on with a resume, not `run`)."""
        if self._source is not None:
            return self._source()[1]
        work = self._work
        return work is None or (work.merged is None and len(work.ran) < len(work.plan.steps))

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
