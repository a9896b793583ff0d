"""Conformance of agents as tools (sub-agents that pause inside a parent's call) with the
contract, for what a third review found (ADR 0064):

- a sub-agent that fails or cancels while the parent resumes it failed the parent's resume
  with the sub-run's own `RunError` — its stage, and its `partial` holding the SUB-agent's
  conversation under the sub-run's ID, which a caller (the worker) stores as the parent's;
- every sub-agent's resolutions are checked before anything runs (the seed: validation
  "fails the resume before any model call"); a later sub-agent's bad resolution used to be
  found after an earlier sub-agent had re-run its approved tool and called its model;
- the parent's `Result.pending` keeps the model's emission order within each kind, sub-agent
  calls included (they were listed after the parent's own calls);
- a parent call whose ID starts with a paused sibling's ID and "/" is still the parent's
  (it was routed to the sibling's sub-agent), and IDs that collide with a sub-agent's
  namespaced one fail the run instead of returning a pause no resolution can resume.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from golem import (
    Agent,
    Approval,
    DeferredResults,
    ResumeError,
    RunError,
    Stage,
    Tool,
    ToolCall,
    ToolError,
)
from golem.agent_tool import PAUSED_MARKER
from golem.messages import Message, loads_history
from golem.model import ModelResponse
from golem.testing import ScriptedModel
from golem.tool import Canceled, DeferKind, Deferred, RunContext, call_approved
from tests.support.seals import bound

OBJ: dict[str, Any] = {"type": "object"}


def calls(*items: tuple[str, str, dict[str, Any]]) -> ModelResponse:
    return ModelResponse(
        message=Message(
            role="assistant",
            tool_calls=[ToolCall(cid, name, json.dumps(args)) for cid, name, args in items],
        ),
        finish_reason="tool_call",
    )


class Log:
    def __init__(self) -> None:
        self.effects: list[tuple[str, str]] = []


def janitor(name: str, *outcomes: Any, log: Log, on_approved: str = "ok") -> Agent[None, str]:
    """A sub-agent whose `delete_file` defers for approval, then does `on_approved`."""
    agent: Agent[None, str] = Agent(ScriptedModel(*outcomes), name=name)

    def delete_file(ctx: RunContext[None], args: dict[str, Any]) -> str:
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, f"delete {args.get('path')}?")
        if on_approved == "cancel":
            raise Canceled("the operator pulled the plug")
        log.effects.append((name, str(args.get("path"))))
        return f"deleted {args.get('path')}"

    agent.tools["delete_file"] = Tool(
        "delete_file",
        "Delete a file.",
        {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
            "additionalProperties": False,
        },
        delete_file,
    )
    return agent


def gate(ctx: RunContext[Any], args: dict[str, Any]) -> str:
    if not call_approved():
        raise Deferred(DeferKind.APPROVAL, "gate?")
    return "gated"


def external(ctx: RunContext[Any], args: dict[str, Any]) -> str:
    raise Deferred(DeferKind.EXTERNAL, "job-1")


# --------------------------------------------------------------------------- failures on resume


def sub_agent_histories(history: list[Message]) -> list[list[Message]]:
    """The sub-agent histories the paused records of `history` hold."""
    return [
        loads_history(json.loads(m.content.split("\n", 1)[1])["history"])
        for m in history
        if m.role == "tool" and m.content.startswith(PAUSED_MARKER)
    ]


@pytest.mark.parametrize("how", ["model-error", "cancel-in-rerun", "cancel-later"])
async def test_a_sub_agent_failing_in_the_parents_resume_fails_the_parent_not_as_itself(
    how: str,
) -> None:
    log = Log()
    later: list[Any] = []
    if how == "model-error":
        later = [RuntimeError("provider down")]
    elif how == "cancel-later":
        later = [calls(("s2", "stop", {}))]
    sub = janitor(
        "janitor",
        calls(("s1", "delete_file", {"path": "a"})),
        *later,
        log=log,
        on_approved="cancel" if how == "cancel-in-rerun" else "ok",
    )

    def stop(ctx: RunContext[None], args: dict[str, Any]) -> str:
        raise Canceled("stop now")

    sub.tools["stop"] = Tool("stop", "s", OBJ, stop)
    parent_model = ScriptedModel(calls(("p1", "janitor", {"prompt": "clean"})), "never")
    parent: Agent[None, str] = Agent(parent_model, tools=[sub.as_tool()])
    paused = await parent.run("go")
    assert paused.pending is not None
    with pytest.raises(RunError) as info:
        await parent.run_with_deferred_results(
            paused.messages, DeferredResults(approvals={"p1/s1": True})
        )
    err = info.value
    # never the sub-run's partial (its conversation is not the parent's). ADR 0076 (this
    # pinned `partial is None` before): the parent's paused history with the sub-agent's
    # record rewritten from its progress — s1 answered once it ran, still pending when not
    partial = err.partial
    assert partial is not None
    assert partial.is_paused
    assert partial.messages[: len(paused.messages) - 1] == paused.messages[:-1]
    (record,) = [m for m in partial.messages if m.role == "tool"]
    assert (record.tool_call_id, record.content.split(" ")[0]) == ("p1", "[golem:")
    (inner,) = sub_agent_histories(partial.messages)
    ran = [m.tool_call_id for m in inner if m.role == "tool"]
    assert ran == ([] if how == "cancel-in-rerun" else ["s1"])
    assert [p.call_id for p in partial.pending.calls] == (  # type: ignore[union-attr]
        ["p1/s1"] if how == "cancel-in-rerun" else []
    )
    assert log.effects == ([] if how == "cancel-in-rerun" else [("janitor", "a")])
    if how == "model-error":
        assert err.stage is Stage.TOOL
        cause = err.__cause__
        assert isinstance(cause, ToolError)
        assert (cause.tool_name, cause.call_id) == ("janitor", "p1")
        assert "provider down" in str(cause)
    else:
        # Go reference §4.3: sub-agent cancellation propagates (parent stage canceled)
        assert err.stage is Stage.CANCELED
        assert isinstance(err.__cause__, Canceled)
    assert len(parent_model.requests) == 1  # the parent's model is not called again


async def test_a_sub_agents_failure_in_a_plain_run_already_names_the_parents_call() -> None:
    # the reference point: the same failure during the parent's run
    log = Log()
    sub = janitor("janitor", RuntimeError("provider down"), log=log)
    parent: Agent[None, str] = Agent(
        ScriptedModel(calls(("p1", "janitor", {"prompt": "clean"})), "never"),
        tools=[sub.as_tool()],
    )
    with pytest.raises(RunError) as info:
        await parent.run("go", run_id="parent")
    assert info.value.stage is Stage.TOOL
    assert isinstance(info.value.__cause__, ToolError)
    assert info.value.partial is not None
    assert info.value.partial.run_id == "parent"


# --------------------------------------------------------------------------- checked up front


BAD_SECOND = [
    pytest.param(
        {"approvals": {"p1/s1": True, "p2/s1": Approval(True, args={"nope": 1})}},
        "edited arguments",
        id="edited-args-fail-the-schema",
    ),
    pytest.param(
        {"approvals": {"p1/s1": True, "p2/s1": True}, "external": {"p2/s1": "x"}},
        "both an approval and an external result",
        id="resolved-twice",
    ),
]


@pytest.mark.parametrize(("results", "says"), BAD_SECOND)
@pytest.mark.parametrize("stream", [False, True])
async def test_every_sub_agents_resolutions_are_checked_before_anything_runs(
    results: dict[str, Any], says: str, stream: bool
) -> None:
    log = Log()
    first = janitor("j1", calls(("s1", "delete_file", {"path": "a"})), "one", log=log)
    second = janitor("j2", calls(("s1", "delete_file", {"path": "b"})), "two", log=log)
    parent_model = ScriptedModel(
        calls(("p1", "j1", {"prompt": "x"}), ("p2", "j2", {"prompt": "y"})), "done"
    )
    parent: Agent[None, str] = Agent(parent_model, tools=[first.as_tool(), second.as_tool()])
    paused = await parent.run("go")
    assert paused.pending is not None
    assert [p.call_id for p in paused.pending.calls] == ["p1/s1", "p2/s1"]
    sub_requests = [len(first.model.requests), len(second.model.requests)]  # type: ignore[attr-defined]
    with pytest.raises(ResumeError, match=says):
        if stream:
            async with parent.run_stream_with_deferred_results(paused.messages, results) as s:
                async for _ in s:
                    pass
        else:
            await parent.run_with_deferred_results(paused.messages, results)
    assert log.effects == []  # j1's approved delete did not run
    assert [len(first.model.requests), len(second.model.requests)] == sub_requests  # type: ignore[attr-defined]
    assert len(parent_model.requests) == 1


# --------------------------------------------------------------------------- emission order


@st.composite
def parent_batches(draw: st.DrawFn) -> list[str]:
    """A parent batch: each call is a sub-agent that pauses, or an own approval/external."""
    return draw(st.lists(st.sampled_from(["sub", "gate", "external"]), min_size=1, max_size=5))


@settings(deadline=None)
@given(parent_batches(), st.booleans())
def test_the_parents_pending_calls_keep_the_emission_order_within_each_kind(
    batch: list[str], parallel: bool
) -> None:
    log = Log()
    items: list[tuple[str, str, dict[str, Any]]] = []
    tools: list[Tool] = [Tool("gate", "g", OBJ, gate), Tool("external", "e", OBJ, external)]
    expected_approvals: list[str] = []
    expected_external: list[str] = []
    for i, what in enumerate(batch):
        cid = f"p{i}"
        if what == "sub":
            sub = janitor(f"j{i}", calls(("s1", "delete_file", {"path": cid})), "ok", log=log)
            tools.append(sub.as_tool())
            items.append((cid, f"j{i}", {"prompt": "x"}))
            expected_approvals.append(f"{cid}/s1")
        else:
            items.append((cid, what, {}))
            (expected_approvals if what == "gate" else expected_external).append(cid)
    parent: Agent[None, str] = Agent(
        ScriptedModel(calls(*items), "done"), tools=tools, parallel_tool_calls=parallel
    )
    paused = parent.run_sync("go")
    assert paused.pending is not None
    assert [p.call_id for p in paused.pending.approvals] == expected_approvals
    assert [p.call_id for p in paused.pending.external] == expected_external
    # the paused history answers the batch's calls in emission order (records included)
    answered = [m.tool_call_id for m in paused.messages if m.role == "tool"]
    assert answered == [
        cid for cid, what in zip([c[0] for c in items], batch, strict=True) if what == "sub"
    ]
    done = parent.run_with_deferred_results_sync(
        paused.messages,
        DeferredResults(
            approvals=dict.fromkeys(expected_approvals, True),
            external={cid: f"ext {cid}" for cid in expected_external},
        ),
    )
    assert done.output == "done"
    assert sorted(log.effects) == sorted(
        (f"j{i}", f"p{i}") for i, w in enumerate(batch) if w == "sub"
    )
    answered = [m.tool_call_id for m in done.messages if m.role == "tool"]
    assert answered == [c[0] for c in items]


# --------------------------------------------------------------------------- call IDs


async def test_a_parent_call_under_a_sub_agents_prefix_is_still_the_parents() -> None:
    log = Log()
    sub = janitor("janitor", calls(("s1", "delete_file", {"path": "a"})), "cleaned", log=log)
    parent: Agent[None, str] = Agent(
        ScriptedModel(calls(("p1", "janitor", {"prompt": "x"}), ("p1/own", "gate", {})), "done"),
        tools=[sub.as_tool(), Tool("gate", "g", OBJ, gate)],
    )
    paused = await parent.run("go")
    assert paused.pending is not None
    assert [p.call_id for p in paused.pending.approvals] == ["p1/s1", "p1/own"]
    done = await parent.run_with_deferred_results(
        paused.messages, DeferredResults(approvals={"p1/s1": True, "p1/own": True})
    )
    assert done.output == "done"
    assert log.effects == [("janitor", "a")]
    results = {m.tool_call_id: m.content for m in done.messages if m.role == "tool"}
    assert results == {"p1": "cleaned", "p1/own": "gated"}


async def test_a_parent_call_id_colliding_with_a_nested_one_fails_the_run() -> None:
    log = Log()
    sub = janitor("janitor", calls(("s1", "delete_file", {"path": "a"})), "cleaned", log=log)
    parent: Agent[None, str] = Agent(
        ScriptedModel(calls(("p1", "janitor", {"prompt": "x"}), ("p1/s1", "gate", {})), "x"),
        tools=[sub.as_tool(), Tool("gate", "g", OBJ, gate)],
    )
    with pytest.raises(RunError) as info:
        await parent.run("go")
    err = info.value
    assert err.stage is Stage.TOOL
    assert isinstance(err.__cause__, ToolError)
    assert "p1/s1" in str(err.__cause__)
    assert "collides" in str(err.__cause__)
    assert err.partial is not None
    assert log.effects == []


# --------------------------------------------------------------------------- expected


def _tampered(messages: list[Message]) -> list[Message]:
    """`messages` with the paused sub-agent's call arguments changed inside its record."""
    from dataclasses import replace

    from golem import dumps_history, loads_history

    out = []
    for m in messages:
        if m.role == "tool" and m.content.startswith("[golem: sub-agent paused]"):
            head, _, body = m.content.partition("\n")
            state = json.loads(body)
            inner = loads_history(state["history"])
            last = inner[-1]
            inner[-1] = replace(
                last, tool_calls=[replace(c, args='{"path":"/etc"}') for c in last.tool_calls]
            )
            state["history"] = dumps_history(inner)
            m = replace(m, content=f"{head}\n{json.dumps(state)}")
        out.append(m)
    assert out != messages
    return out


async def test_expected_is_checked_against_a_nested_pause_too() -> None:
    # `expected=` (the paused run's Result.pending) refuses a history whose pending calls
    # differ from it; with a sub-agent's record in the history it was silently ignored
    log = Log()
    sub = janitor("janitor", calls(("s1", "delete_file", {"path": "a"})), "cleaned", log=log)
    parent: Agent[None, str] = Agent(
        ScriptedModel(calls(("p1", "janitor", {"prompt": "x"})), "done"), tools=[sub.as_tool()]
    )
    paused = await parent.run("go")
    assert paused.pending is not None
    tampered = _tampered(paused.messages)
    with pytest.raises(ResumeError, match="arguments differ"):
        await parent.run_with_deferred_results(
            bound(paused, tampered), DeferredResults(approvals={"p1/s1": True})
        )
    with pytest.raises(ResumeError, match="waits for an approval"):
        await parent.run_with_deferred_results(
            bound(paused), DeferredResults(external={"p1/s1": "x"})
        )
    assert log.effects == []
    done = await parent.run_with_deferred_results(
        bound(paused), DeferredResults(approvals={"p1/s1": True})
    )
    assert done.output == "done"
    assert log.effects == [("janitor", "a")]


# --------------------------------------------------------------------------- streamed == run


async def test_a_streamed_nested_pause_and_resume_equal_the_plain_ones() -> None:
    def build() -> tuple[Agent[None, str], Log]:
        log = Log()
        first = janitor("j1", calls(("s1", "delete_file", {"path": "a"})), "one", log=log)
        second = janitor("j2", calls(("s1", "delete_file", {"path": "b"})), "two", log=log)
        batch = calls(
            ("p0", "gate", {}),
            ("p1", "j1", {"prompt": "x"}),
            ("p2", "external", {}),
            ("p3", "j2", {"prompt": "y"}),
        )
        parent: Agent[None, str] = Agent(
            ScriptedModel(batch, "done"),
            tools=[
                first.as_tool(),
                second.as_tool(),
                Tool("gate", "g", OBJ, gate),
                Tool("external", "e", OBJ, external),
            ],
            parallel_tool_calls=True,
        )
        return parent, log

    def key(e: Any) -> tuple[Any, ...]:
        return (str(e.kind), e.turn, e.call_id, e.tool_name, e.agent, e.namespace, e.approved)

    def by_source(evs: list[Any]) -> dict[str, list[tuple[Any, ...]]]:
        # The parent's own events come in a fixed order; j1 and j2 run side by side in the
        # parallel group (each waiting on its sync tool's thread), so their forwarded events
        # interleave as the threads finish. Each source's own sequence is what is fixed.
        out: dict[str, list[tuple[Any, ...]]] = {}
        for e in evs:
            out.setdefault(e.namespace, []).append(key(e))
        return out

    def bracketed(evs: list[Any]) -> bool:
        # In the pausing run each forwarded event falls between its parent call's start and end.
        for i, e in enumerate(evs):
            if e.namespace:
                own = [j for j, f in enumerate(evs) if not f.namespace and f.call_id == e.namespace]
                if not own[0] < i < own[-1]:
                    return False
        return True

    results = DeferredResults(
        approvals={"p0": True, "p1/s1": True, "p3/s1": False}, external={"p2": "x"}
    )
    seen: list[Any] = []
    for stream in (False, True):
        parent, log = build()
        events: list[Any] = []
        later: list[Any] = []
        if stream:
            async with parent.run_stream("go", on_event=events.append, run_id="R") as s:
                async for _ in s:
                    pass
            paused = s.result
            async with parent.run_stream_with_deferred_results(
                paused.messages, results, on_event=later.append, run_id="R2"
            ) as s2:
                async for _ in s2:
                    pass
            done = s2.result
        else:
            paused = await parent.run("go", on_event=events.append, run_id="R")
            done = await parent.run_with_deferred_results(
                paused.messages, results, on_event=later.append, run_id="R2"
            )
        assert paused.pending is not None
        seen.append(
            (
                paused.pending.approvals and [p.call_id for p in paused.pending.approvals],
                [p.call_id for p in paused.pending.external],
                [(m.role, m.tool_call_id) for m in paused.messages],
                by_source(events),
                bracketed(events),
                done.output,
                [(m.role, m.tool_call_id, m.content) for m in done.messages if m.role != "system"],
                by_source(later),
                sorted(log.effects),
                (done.tool_calls, done.requests),
            )
        )
    assert seen[0][0] == ["p0", "p1/s1", "p3/s1"]
    assert seen[0][4] is True
    assert seen[1] == seen[0]


# --------------------------------------------------------------------------- identity


@pytest.mark.parametrize("own", [False, True])
@pytest.mark.parametrize("given_id", [False, True])
async def test_a_parent_still_paused_after_its_resume_has_the_resumes_identity(
    own: bool, given_id: bool
) -> None:
    # Go reference §2.9: the resumed run's RunID is fresh (or the run_id option). A parent
    # whose sub-agent paused again took the ID of its history's last message — the PAUSED
    # run's when the parent had no call of its own — so a store would file the new pause
    # under the old run.
    log = Log()
    sub = janitor(
        "janitor",
        calls(("s1", "delete_file", {"path": "a"})),
        calls(("s2", "delete_file", {"path": "b"})),
        "cleaned",
        log=log,
    )
    items: list[tuple[str, str, dict[str, Any]]] = [("p1", "janitor", {"prompt": "x"})]
    if own:
        items.append(("p2", "gate", {}))
    parent: Agent[None, str] = Agent(
        ScriptedModel(calls(*items), "done"), tools=[sub.as_tool(), Tool("gate", "g", OBJ, gate)]
    )
    paused = await parent.run("go", run_id="R1", conversation_id="C1")
    approvals: dict[str, Approval | bool] = {"p1/s1": True}
    if own:
        approvals["p2"] = True
    again = await parent.run_with_deferred_results(
        paused.messages,
        DeferredResults(approvals=approvals),
        run_id="R2" if given_id else None,
    )
    assert again.pending is not None
    assert [p.call_id for p in again.pending.calls] == ["p1/s2"]
    assert again.run_id != "R1"
    if given_id:
        assert again.run_id == "R2"
    assert again.conversation_id == "C1"
    # what this resume wrote carries its identity: the new record, the parent's resolution
    written = [m for m in again.messages if m.role == "tool"]
    assert [(m.tool_call_id, m.run_id) for m in written] == [
        (m.tool_call_id, again.run_id) for m in written
    ]


# --------------------------------------------------------------------------- before_approved


async def test_before_approved_guards_a_sub_agents_approved_re_runs_too() -> None:
    # `before_approved` is how a worker proves it still holds its lease before each approved
    # re-execution (at-most-once, ADR 0011); a sub-agent's approved calls re-ran without it
    log = Log()
    sub = janitor("janitor", calls(("s1", "delete_file", {"path": "a"})), "cleaned", log=log)
    parent: Agent[None, str] = Agent(
        ScriptedModel(calls(("p1", "janitor", {"prompt": "x"}), ("p2", "gate", {})), "done"),
        tools=[sub.as_tool(), Tool("gate", "g", OBJ, gate)],
    )
    paused = await parent.run("go")
    results = DeferredResults(approvals={"p1/s1": True, "p2": True})
    seen: list[tuple[str, str, str]] = []

    async def record(call: ToolCall) -> None:
        seen.append((call.id, call.name, call.args))

    done = await parent.run_with_deferred_results(paused.messages, results, before_approved=record)
    assert done.output == "done"
    assert seen == [("p1/s1", "janitor/delete_file", '{"path": "a"}'), ("p2", "gate", "{}")]

    class LeaseLost(Exception):
        pass

    async def lost(call: ToolCall) -> None:
        raise LeaseLost

    log.effects.clear()
    sub2 = janitor("janitor", calls(("s1", "delete_file", {"path": "a"})), "x", log=log)
    parent2: Agent[None, str] = Agent(
        ScriptedModel(calls(("p1", "janitor", {"prompt": "x"})), "done"), tools=[sub2.as_tool()]
    )
    paused2 = await parent2.run("go")
    with pytest.raises(LeaseLost):
        await parent2.run_with_deferred_results(
            paused2.messages, DeferredResults(approvals={"p1/s1": True}), before_approved=lost
        )
    assert log.effects == []  # the sub-agent's delete did not run
