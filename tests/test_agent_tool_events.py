"""Agents as tools (issue 11): a sub-agent's run events reach the parent's observers — its
`event_handler`, the run's `on_event` and its stream — marked with the agent tool they come
from and the parent call they run under, for runs, streams and resumes, at any depth."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from golem import Agent, Approval, DeferredResults, EventKind, RunEvent, dumps_history
from golem.agent_tool import forwarder
from golem.testing import ScriptedModel
from tests.support.seals import bound
from tests.support.subagents import ask, calls, janitor, text

Row = tuple[str, str, str, str, str]


def row(e: RunEvent) -> Row:
    """(kind, agent, namespace, call_id, tool_name)."""
    return (e.kind.value, e.agent, e.namespace, e.call_id, e.tool_name)


def looking_parent(**kw: Any) -> tuple[Agent, list[RunEvent]]:
    """A parent whose janitor lists files (no pause); returns it and the janitor's own log."""
    own: list[RunEvent] = []
    sub = janitor(calls(("s1", "list_files", {})), text("a.log and b.log"), log=[])
    sub.event_handler = own.append
    parent = Agent(
        ScriptedModel(ask("what is there?"), text("Two logs.")), tools=[sub.as_tool()], **kw
    )
    return parent, own


def test_the_parents_observers_see_the_sub_agents_events_marked() -> None:
    handler: list[RunEvent] = []
    parent, own = looking_parent(event_handler=handler.append)
    on_event: list[RunEvent] = []
    assert parent.run_sync("look", on_event=on_event.append).output == "Two logs."
    assert [row(e) for e in on_event] == [
        ("model_start", "", "", "", ""),
        ("model_end", "", "", "", ""),
        ("tool_start", "", "", "p1", "janitor"),
        ("model_start", "janitor", "p1", "", ""),
        ("model_end", "janitor", "p1", "", ""),
        ("tool_start", "janitor", "p1", "p1/s1", "janitor/list_files"),
        ("tool_end", "janitor", "p1", "p1/s1", "janitor/list_files"),
        ("model_start", "janitor", "p1", "", ""),
        ("model_end", "janitor", "p1", "", ""),
        ("tool_end", "", "", "p1", "janitor"),
        ("model_start", "", "", "", ""),
        ("model_end", "", "", "", ""),
    ]
    assert [row(e) for e in handler] == [row(e) for e in on_event], "the agent's handler too"
    forwarded = [e for e in on_event if e.agent]
    assert [e.result for e in forwarded if e.kind is EventKind.TOOL_END] == ["a.log, b.log"]
    sub_run = {e.run_id for e in forwarded}
    assert len(sub_run) == 1
    assert sub_run != {on_event[0].run_id}, "run_id is the sub-run's"
    assert [(e.kind.value, e.call_id, e.agent) for e in own][2:4] == [
        ("tool_start", "s1", ""),
        ("tool_end", "s1", ""),
    ], "the sub-agent's own handler sees its events unmarked"


def test_a_sub_agent_pause_is_a_deferred_event_matching_the_parents_pending() -> None:
    sub = janitor(calls(("s1", "delete_file", {"path": "a.log"})), log=[])
    parent = Agent(ScriptedModel(ask("clean")), tools=[sub.as_tool()])
    seen: list[RunEvent] = []
    paused = parent.run_sync("tidy", on_event=seen.append)
    assert paused.pending is not None
    (pending,) = paused.pending.calls
    deferred = [e for e in seen if e.kind is EventKind.DEFERRED]
    assert [row(e) for e in deferred] == [
        ("deferred", "janitor", "p1", "p1/s1", "janitor/delete_file"),
        ("deferred", "", "", "p1", "janitor"),
    ]
    assert (deferred[0].call_id, deferred[0].tool_name) == (pending.call_id, pending.tool_name)
    assert deferred[0].reason == pending.reason == "delete a.log?"


def test_a_resume_forwards_the_sub_agents_events_before_the_parents() -> None:
    log: list[str] = []
    sub = janitor(calls(("s1", "delete_file", {"path": "a.log"})), text("Deleted.", 1), log=log)
    handler: list[RunEvent] = []
    parent = Agent(
        ScriptedModel(ask("clean"), text("All clean.", 1)),
        tools=[sub.as_tool()],
        event_handler=handler.append,
    )
    paused = parent.run_sync("tidy")
    handler.clear()
    seen: list[RunEvent] = []
    done = parent.run_with_deferred_results_sync(
        dumps_history(paused.messages),
        DeferredResults(approvals={"p1/s1": Approval(True)}),
        on_event=seen.append,
    )
    assert done.output == "All clean."
    assert [row(e) for e in seen] == [
        ("tool_start", "janitor", "p1", "p1/s1", "janitor/delete_file"),
        ("tool_end", "janitor", "p1", "p1/s1", "janitor/delete_file"),
        ("model_start", "janitor", "p1", "", ""),
        ("model_end", "janitor", "p1", "", ""),
        ("model_start", "", "", "", ""),
        ("model_end", "", "", "", ""),
    ]
    assert [e.approved for e in seen[:2]] == [True, True]
    assert [row(e) for e in handler] == [row(e) for e in seen]
    assert log == ["a.log"]


async def test_a_streamed_parent_yields_the_sub_agents_events_in_order() -> None:
    parent, _ = looking_parent()
    async with parent.run_stream("look") as stream:
        items = [item async for item in stream]
    events = [row(i) for i in items if isinstance(i, RunEvent)]
    start = events.index(("tool_start", "", "", "p1", "janitor"))
    end = events.index(("tool_end", "", "", "p1", "janitor"))
    inside = events[start + 1 : end]
    assert inside
    assert all(r[1:3] == ("janitor", "p1") for r in inside)
    assert ("tool_end", "janitor", "p1", "p1/s1", "janitor/list_files") in inside
    assert stream.result.output == "Two logs."


async def test_a_streamed_resume_yields_the_sub_agents_events_first() -> None:
    sub = janitor(calls(("s1", "delete_file", {"path": "a.log"})), text("Deleted.", 1), log=[])
    parent = Agent(ScriptedModel(ask("clean"), text("All clean.", 1)), tools=[sub.as_tool()])
    paused = await parent.run("tidy")
    async with parent.run_stream_with_deferred_results(
        paused.messages, {"approvals": {"p1/s1": True}}
    ) as stream:
        items = [item async for item in stream]
    events = [i for i in items if isinstance(i, RunEvent)]
    assert row(events[0]) == ("tool_start", "janitor", "p1", "p1/s1", "janitor/delete_file")
    assert events[0].approved
    assert [e.agent for e in events][-2:] == ["", ""], "then the parent's own model turn"
    assert stream.result.output == "All clean."


def test_two_levels_of_nesting_compose_the_marks() -> None:
    inner = janitor(calls(("s1", "delete_file", {"path": "a.log"})), text("inner done"), log=[])
    middle_seen: list[RunEvent] = []
    middle = Agent(
        ScriptedModel(ask("clean", "m1"), text("middle done")),
        name="manager",
        tools=[inner.as_tool()],
        event_handler=middle_seen.append,
    )
    top = Agent(
        ScriptedModel(ask("manage", "t1", "manager"), text("top done")), tools=[middle.as_tool()]
    )
    seen: list[RunEvent] = []
    paused = top.run_sync("go", on_event=seen.append)
    assert paused.pending is not None
    deferred = [row(e) for e in seen if e.kind is EventKind.DEFERRED]
    assert deferred == [
        ("deferred", "manager/janitor", "t1/m1", "t1/m1/s1", "manager/janitor/delete_file"),
        ("deferred", "manager", "t1", "t1/m1", "manager/janitor"),
        ("deferred", "", "", "t1", "manager"),
    ]
    assert paused.pending.calls[0].call_id == "t1/m1/s1"
    assert ("deferred", "janitor", "m1", "m1/s1", "janitor/delete_file") in [
        row(e) for e in middle_seen
    ], "the middle agent's handler sees its own sub-agent's events, one level deep"

    seen.clear()
    done = top.run_with_deferred_results_sync(
        paused.messages,
        DeferredResults(approvals={"t1/m1/s1": Approval(True)}),
        on_event=seen.append,
    )
    assert done.output == "top done"
    assert row(seen[0]) == (
        "tool_start",
        "manager/janitor",
        "t1/m1",
        "t1/m1/s1",
        "manager/janitor/delete_file",
    )


def test_a_failing_parent_observer_does_not_fail_the_sub_run() -> None:
    def boom(event: RunEvent) -> None:
        if event.agent:
            raise RuntimeError("observer bug")

    parent, _ = looking_parent(event_handler=boom)
    assert parent.run_sync("look").output == "Two logs."


def test_forwarded_events_make_no_spans_in_the_parents_run() -> None:
    pytest.importorskip("opentelemetry.sdk")
    from tests.otel_support import instrumented

    with instrumented() as exporter:
        parent, _ = looking_parent(name="boss")
        parent.run_sync("look")
    spans = exporter.get_finished_spans()
    runs = {s.name: s for s in spans if s.name.startswith("invoke_agent")}
    chats = [s for s in spans if s.name.startswith("chat")]
    assert len(chats) == 4, "two model requests each, no duplicates from forwarded events"
    sub_run = runs["invoke_agent janitor"]
    assert sub_run.context is not None
    under_sub = [c for c in chats if c.parent and c.parent.span_id == sub_run.context.span_id]
    assert len(under_sub) == 2
    tools = [s.name for s in spans if s.name.startswith("execute_tool")]
    assert sorted(tools) == ["execute_tool janitor", "execute_tool list_files"]


def test_a_nested_resume_links_the_sub_agents_span_too() -> None:
    pytest.importorskip("opentelemetry.sdk")
    from tests.otel_support import instrumented

    with instrumented() as exporter:
        sub = janitor(calls(("s1", "delete_file", {"path": "a.log"})), text("Deleted."), log=[])
        parent = Agent(
            ScriptedModel(ask("clean"), text("All clean.")), name="boss", tools=[sub.as_tool()]
        )
        paused = parent.run_sync("tidy")
        exporter.clear()
        parent.run_with_deferred_results_sync(
            bound(paused), DeferredResults(approvals={"p1/s1": Approval(True)})
        )
    paused_span = paused.trace_context.split("-")[2]
    runs = {s.name: s for s in exporter.get_finished_spans() if s.name.startswith("invoke_agent")}
    assert set(runs) == {"invoke_agent boss", "invoke_agent janitor"}
    for span in runs.values():
        assert [f"{link.context.span_id:016x}" for link in span.links] == [paused_span]


@given(
    chain=st.lists(
        st.tuples(
            st.text(alphabet="abc-123", min_size=1, max_size=4),
            st.text(alphabet="xyz_", min_size=1, max_size=4),
        ),
        min_size=1,
        max_size=4,
    ),
    inner_call=st.text(alphabet="s0123", max_size=3),
)
def test_forwarding_through_any_depth_composes_the_namespaces(
    chain: list[tuple[str, str]], inner_call: str
) -> None:
    """Forwarders stacked outermost-first mark an event with the joined call and tool paths."""
    got: list[RunEvent] = []
    handler = got.append
    for call_id, tool in chain:  # chain[0]: the top parent's call; each level forwards up
        forward = forwarder([handler], None, call_id, tool)
        assert forward is not None
        handler = forward
    handler(
        RunEvent(EventKind.TOOL_START, call_id=inner_call, tool_name="act" if inner_call else "")
    )
    (event,) = got
    calls = [c for c, _ in chain]
    tools = [t for _, t in chain]
    assert event.namespace == "/".join(calls)
    assert event.agent == "/".join(tools)
    assert event.call_id == ("/".join([*calls, inner_call]) if inner_call else "")
    assert event.tool_name == ("/".join([*tools, "act"]) if inner_call else "")
