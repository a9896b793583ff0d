"""Agents as tools and nested runs (issue 11; ADR 0064, 0067): a sub-agent's answer, usage,
limits and events in its parent; its pause surfaces namespaced in the parent and resumes
through it (in this process and another); failures and cancellations while it resumes;
every resolution checked up front; emission order; call IDs; identity; what its sub-run
spends counts in the parent whatever the outcome."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pydantic
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from golem import (
    Agent,
    Approval,
    DeferredResults,
    EventKind,
    ResumeError,
    ResumeProgress,
    RunError,
    RunEvent,
    Stage,
    Tool,
    ToolCall,
    ToolError,
    ToolTimeout,
    Usage,
    UsageLimitExceeded,
    UsageLimits,
    dumps_history,
    loads_history,
)
from golem.agent_tool import PAUSED_MARKER, AgentTool, forwarder
from golem.messages import Message
from golem.model import ModelRequest, ModelResponse
from golem.testing import FunctionModel, ScriptedModel
from golem.tool import Canceled, DeferKind, Deferred, RunContext, call_approved
from tests.support.gates import OBJ
from tests.support.seals import bound
from tests.support.subagents import ask, calls, janitor, text

ROOT = Path(__file__).parent.parent


def test_the_sub_agents_answer_is_the_result_and_usage_rolls_up() -> None:
    log: list[str] = []
    sub = janitor(calls(("s1", "list_files", {}), tokens=5), text("a.log and b.log", 7), log=log)
    parent = Agent(
        ScriptedModel(ask("what is there?"), text("Two logs.", 2)),
        tools=[sub.as_tool(description="Cleans files.")],
    )
    result = parent.run_sync("look")
    assert result.output == "Two logs."
    tool_msg = next(m for m in result.messages if m.role == "tool")
    assert (tool_msg.tool_call_id, tool_msg.content) == ("p1", "a.log and b.log")
    assert result.usage == Usage(input_tokens=3 + 5 + 7 + 2, output_tokens=3 + 5 + 7 + 2)
    assert result.requests == 2 + 2
    assert result.tool_calls == 1 + 1


def test_as_tool_schema_and_naming() -> None:
    sub = Agent(ScriptedModel(), name="janitor")
    tool = sub.as_tool()
    assert isinstance(tool, AgentTool)
    assert tool.name == "janitor"
    assert tool.schema["required"] == ["prompt"]
    assert sub.as_tool("cleaner", "Cleans.").description == "Cleans."
    with pytest.raises(ValueError, match="needs a name"):
        Agent(ScriptedModel()).as_tool()
    with pytest.raises(ValueError, match="'/'"):
        sub.as_tool("a/b")


def test_structured_output_is_sent_as_json() -> None:
    class Count(pydantic.BaseModel):
        files: int

    sub = Agent(ScriptedModel('{"files": 2}'), output_type=Count, name="counter")
    parent = Agent(ScriptedModel(ask("count", tool="counter"), "ok"), tools=[sub.as_tool()])
    result = parent.run_sync("go")
    assert next(m for m in result.messages if m.role == "tool").content == '{"files":2}'


def test_deps_are_passed_or_mapped() -> None:
    seen: list[Any] = []
    sub = Agent(ScriptedModel(calls(("s1", "who", {})), "done"), name="sub")

    @sub.tool
    def who(ctx: RunContext[Any]) -> str:
        """Who asks."""
        seen.append(ctx.deps)
        return "x"

    parent = Agent(
        ScriptedModel(ask("go", tool="sub"), "ok"), tools=[sub.as_tool(deps=lambda d: d["user"])]
    )
    parent.run_sync("go", deps={"user": "alice"})
    assert seen == ["alice"]


def test_limits_apply_across_both() -> None:
    log: list[str] = []
    sub = janitor(calls(("s1", "list_files", {}), tokens=50), text("done", 50), log=log)
    parent = Agent(
        ScriptedModel(ask("go"), text("never", 1)),
        tools=[sub.as_tool()],
        usage_limits=UsageLimits(total_tokens=100),
    )
    with pytest.raises(RunError) as info:
        parent.run_sync("go")
    assert info.value.stage == Stage.USAGE
    assert "total token limit of 100" in str(info.value.__cause__)


def paused_parent(log: list[str], *sub_after: Any, parent_after: Any = ()) -> tuple[Agent, Any]:
    sub = janitor(
        calls(("s1", "delete_file", {"path": "a.log"}), ("s2", "list_files", {}), tokens=5),
        *sub_after,
        log=log,
    )
    parent = Agent(ScriptedModel(ask("clean up"), *parent_after), tools=[sub.as_tool()])
    return parent, parent.run_sync("tidy")


def test_a_sub_agent_pause_surfaces_namespaced_in_the_parent() -> None:
    log: list[str] = []
    _, paused = paused_parent(log)
    assert paused.pending is not None
    assert [(p.call_id, p.tool_name, p.args, p.reason) for p in paused.pending.approvals] == [
        ("p1/s1", "janitor/delete_file", '{"path": "a.log"}', "delete a.log?")
    ]
    assert paused.pending.external == []
    record = paused.messages[-1]
    assert (record.role, record.tool_call_id, record.tool_name) == ("tool", "p1", "janitor")
    assert record.content.startswith(
        f'{PAUSED_MARKER} sub-agent "janitor" is paused, waiting for delete_file (s1)\n'
    )
    assert log == []
    assert paused.usage.input_tokens == 3 + 5


@pytest.mark.parametrize(
    ("results", "message"),
    [
        ({}, 'pending tool call "p1/s1" (janitor/delete_file) has no resolution'),
        (
            {"p1/s1": Approval(True), "p1/zz": Approval(True)},
            'resolution for unknown tool call "p1/zz"',
        ),
        ({"p1/s1": Approval(True), "p9": Approval(True)}, 'unknown tool call "p9"'),
    ],
)
def test_bad_resolutions_are_rejected_before_anything_runs(
    results: dict[str, Approval], message: str
) -> None:
    log: list[str] = []
    parent, paused = paused_parent(log, text("x", 1), parent_after=(text("y", 1),))
    with pytest.raises(ResumeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parent.run_with_deferred_results_sync(paused.messages, DeferredResults(approvals=results))
    assert log == []


def test_an_unreadable_record_is_rejected() -> None:
    log: list[str] = []
    parent, paused = paused_parent(log)
    broken = [
        *paused.messages[:-1],
        Message(
            role="tool", content=f"{PAUSED_MARKER} nope\n{{", tool_call_id="p1", tool_name="janitor"
        ),
    ]
    with pytest.raises(ResumeError, match="unreadable"):
        parent.run_with_deferred_results_sync(
            broken, DeferredResults(approvals={"p1/s1": Approval(True)})
        )


RESUME_SCRIPT = """
import json, sys
from golem import Agent, Approval, DeferredResults, ToolCall, loads_history
from golem.messages import Message
from golem.testing import ScriptedModel
from tests.support.gates import OBJ
from golem.tool import DeferKind, Deferred, RunContext, call_approved

log = []
sub = Agent(ScriptedModel("Deleted a.log."), name="janitor")

@sub.tool
def delete_file(path: str) -> str:
    if not call_approved():
        raise Deferred(DeferKind.APPROVAL, f"delete {path}?")
    log.append(path)
    return f"deleted {path}"

@sub.tool
def list_files() -> str:
    return "a.log, b.log"

parent = Agent(ScriptedModel("All clean."), tools=[sub.as_tool()])
history = loads_history(open(sys.argv[1], encoding="utf-8").read())
done = parent.run_with_deferred_results_sync(
    history, DeferredResults(approvals={"p1/s1": Approval(True)}))
print(json.dumps({"output": done.output, "log": log,
                  "p1": [m.content for m in done.messages if m.tool_call_id == "p1"]}))
"""


def test_the_nested_resume_works_in_another_process(tmp_path: Path) -> None:
    log: list[str] = []
    _, paused = paused_parent(log)
    saved = tmp_path / "paused.json"
    saved.write_text(dumps_history(paused.messages), encoding="utf-8")
    assert loads_history(saved.read_text(encoding="utf-8"))[-1].content.startswith(PAUSED_MARKER)
    out = subprocess.run(
        [sys.executable, "-c", RESUME_SCRIPT, str(saved)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {
        "output": "All clean.",
        "log": ["a.log"],
        "p1": ["Deleted a.log."],
    }


def test_the_sub_agents_span_nests_under_the_parents_tool_span() -> None:
    pytest.importorskip("opentelemetry.sdk")
    from tests.otel_support import instrumented

    with instrumented() as exporter:
        sub = Agent(ScriptedModel("sub answer"), name="helper")
        parent = Agent(
            ScriptedModel(ask("x", tool="helper"), "ok"), name="boss", tools=[sub.as_tool()]
        )
        parent.run_sync("go")
    spans = {s.name: s for s in exporter.get_finished_spans()}
    tool_span = spans["execute_tool helper"]
    sub_span = spans["invoke_agent helper"]
    assert sub_span.parent is not None
    assert sub_span.parent.span_id == tool_span.context.span_id


def test_approval_does_not_leak_into_the_sub_agents_other_calls() -> None:
    log: list[str] = []
    parent, paused = paused_parent(
        log,
        calls(("s3", "list_files", {})),  # list_files asserts it is not approved
        text("Deleted a.log; b.log is left.", 1),
        parent_after=(text("Done.", 1),),
    )
    done = parent.run_with_deferred_results_sync(
        paused.messages, DeferredResults(approvals={"p1/s1": Approval(True)})
    )
    assert done.output == "Done."
    assert log == ["a.log"]


def test_sub_agent_calls_find_every_nested_pending_call_with_its_seal_binding() -> None:
    """What a worker checks a stored `t1/m1/s1` against: the call in the innermost history,
    its namespaced tool name, and the conversation its seal is bound to."""
    from golem.records import sub_agent_calls
    from golem.seal import SealKeys, verify_call

    key = b"k" * 32
    log: list[str] = []
    inner = janitor(calls(("s1", "delete_file", {"path": "a.log"})), log=log)
    inner.seal_keys = SealKeys(key)
    middle = Agent(ScriptedModel(ask("clean", "m1")), name="manager", tools=[inner.as_tool()])
    top = Agent(ScriptedModel(ask("manage", "t1", "manager")), tools=[middle.as_tool()])
    paused = top.run_sync("go")
    assert paused.pending is not None

    found = sub_agent_calls(paused.messages)
    assert list(found) == [p.call_id for p in paused.pending.approvals] == ["t1/m1/s1"]
    sub = found["t1/m1/s1"]
    assert (sub.call.id, sub.call.name, sub.call.args) == ("s1", "delete_file", '{"path": "a.log"}')
    assert sub.tool_name == paused.pending.approvals[0].tool_name == "manager/janitor/delete_file"
    assert sub.conversation_id
    assert sub.conversation_id != paused.conversation_id
    assert inner.seal_keys is not None
    assert verify_call(inner.seal_keys, sub.conversation_id, sub.call) is DeferKind.APPROVAL
    # a history without records, and one whose record is unreadable, have none
    assert sub_agent_calls(paused.messages[:1]) == {}
    broken = [*paused.messages[:-1], Message(role="tool", content=PAUSED_MARKER + " x\n{")]
    assert sub_agent_calls(broken) == {}


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


class Log:
    def __init__(self) -> None:
        self.effects: list[tuple[str, str]] = []


def named_janitor(name: str, *outcomes: Any, log: Log, on_approved: str = "ok") -> Agent[None, str]:
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
    sub = named_janitor(
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
    sub = named_janitor("janitor", RuntimeError("provider down"), log=log)
    parent: Agent[None, str] = Agent(
        ScriptedModel(calls(("p1", "janitor", {"prompt": "clean"})), "never"), tools=[sub.as_tool()]
    )
    with pytest.raises(RunError) as info:
        await parent.run("go", run_id="parent")
    assert info.value.stage is Stage.TOOL
    assert isinstance(info.value.__cause__, ToolError)
    assert info.value.partial is not None
    assert info.value.partial.run_id == "parent"


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
    first = named_janitor("j1", calls(("s1", "delete_file", {"path": "a"})), "one", log=log)
    second = named_janitor("j2", calls(("s1", "delete_file", {"path": "b"})), "two", log=log)
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
            sub = named_janitor(f"j{i}", calls(("s1", "delete_file", {"path": cid})), "ok", log=log)
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


async def test_a_parent_call_under_a_sub_agents_prefix_is_still_the_parents() -> None:
    log = Log()
    sub = named_janitor("janitor", calls(("s1", "delete_file", {"path": "a"})), "cleaned", log=log)
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
    sub = named_janitor("janitor", calls(("s1", "delete_file", {"path": "a"})), "cleaned", log=log)
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
    sub = named_janitor("janitor", calls(("s1", "delete_file", {"path": "a"})), "cleaned", log=log)
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


async def test_a_streamed_nested_pause_and_resume_equal_the_plain_ones() -> None:
    def build() -> tuple[Agent[None, str], Log]:
        log = Log()
        first = named_janitor("j1", calls(("s1", "delete_file", {"path": "a"})), "one", log=log)
        second = named_janitor("j2", calls(("s1", "delete_file", {"path": "b"})), "two", log=log)
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
                paused.messages, results, on_event=later.append
            ) as s2:
                async for _ in s2:
                    pass
            done = s2.result
        else:
            paused = await parent.run("go", on_event=events.append, run_id="R")
            done = await parent.run_with_deferred_results(
                paused.messages, results, on_event=later.append
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
    sub = named_janitor(
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
        paused.messages, DeferredResults(approvals=approvals), run_id="R2" if given_id else None
    )
    assert again.pending is not None
    assert [p.call_id for p in again.pending.calls] == ["p1/s2"]
    assert again.run_id not in ("", "R1")
    assert (again.run_id == "R2") is given_id
    assert again.conversation_id == "C1"
    # what this resume wrote carries its identity: the new record, the parent's resolution
    written = [m for m in again.messages if m.role == "tool"]
    assert [(m.tool_call_id, m.run_id) for m in written] == [
        (m.tool_call_id, again.run_id) for m in written
    ]


async def test_before_approved_guards_a_sub_agents_approved_re_runs_too() -> None:
    # `before_approved` is how a worker proves it still holds its lease before each approved
    # re-execution (at-most-once, ADR 0011); a sub-agent's approved calls re-ran without it
    log = Log()
    sub = named_janitor("janitor", calls(("s1", "delete_file", {"path": "a"})), "cleaned", log=log)
    parent: Agent[None, str] = Agent(
        ScriptedModel(calls(("p1", "janitor", {"prompt": "x"}), ("p2", "gate", {})), "done"),
        tools=[sub.as_tool(), Tool("gate", "g", OBJ, gate)],
    )
    paused = await parent.run("go")
    results = DeferredResults(approvals={"p1/s1": True, "p2": True})
    seen: list[tuple[str, str, str]] = []

    async def record(call: ToolCall) -> None:
        seen.append((call.id, call.name, call.args))

    done = await parent.run_with_deferred_results(paused.messages, results, progress=ResumeProgress(before_approved=record)
    )
    assert done.output == "done"
    assert seen == [("p1/s1", "janitor/delete_file", '{"path": "a"}'), ("p2", "gate", "{}")]

    class LeaseLost(Exception):
        pass

    async def lost(call: ToolCall) -> None:
        raise LeaseLost

    log.effects.clear()
    sub2 = named_janitor("janitor", calls(("s1", "delete_file", {"path": "a"})), "x", log=log)
    parent2: Agent[None, str] = Agent(
        ScriptedModel(calls(("p1", "janitor", {"prompt": "x"})), "done"), tools=[sub2.as_tool()]
    )
    paused2 = await parent2.run("go")
    with pytest.raises(LeaseLost):
        await parent2.run_with_deferred_results(
            paused2.messages, DeferredResults(approvals={"p1/s1": True}),
            progress=ResumeProgress(before_approved=lost),
        )
    assert log.effects == []  # the sub-agent's delete did not run


def ask_sub(call_id: str = "p1", tokens: int = 3) -> ModelResponse:
    return calls((call_id, "sub", {"prompt": "go"}), tokens=tokens)


async def _time_out_a_sub_run(timeout: float) -> tuple[bool, RunError]:
    """A parent whose agent tool (with `timeout`) runs a sub-run that makes one tool call, then
    waits forever on its second model request; whether that request began, and the error."""
    answered = asyncio.Event()

    async def sub_model(request: ModelRequest) -> ModelResponse:
        if request.messages[-1].role == "user":
            return calls(("s1", "work", {}), tokens=5)
        answered.set()
        await asyncio.Event().wait()  # the sub-run's second request never answers
        raise AssertionError("unreachable")

    sub: Agent[None, str] = Agent(
        FunctionModel(sub_model), name="sub", tools=[Tool("work", "w", OBJ, lambda c, a: "ok")]
    )
    parent = Agent(ScriptedModel(ask_sub()), tools=[sub.as_tool(timeout=timeout)])
    with pytest.raises(RunError) as info:
        await parent.run("go")
    return answered.is_set(), info.value


async def test_a_timed_out_sub_run_still_counts_what_it_spent() -> None:
    # The timeout is wall-clock time, and the sub-run's tool runs in a thread: on a loaded
    # machine 0.05 s can pass before the sub-run reaches its second request. The case under
    # test is a timeout that fires during that request, so a timeout that fired earlier is
    # tried again with a longer one (each attempt is a fresh parent and sub-run).
    for timeout in (0.05, 0.2, 0.8, 3.2, 12.8):
        answered, error = await _time_out_a_sub_run(timeout)
        if answered:
            break
    assert answered, "the sub-run never reached its second request before the timeout"
    assert isinstance(error.__cause__, ToolTimeout)
    partial = error.partial
    assert partial is not None
    assert (partial.requests, partial.tool_calls) == (1 + 2, 1 + 1)
    assert partial.usage == Usage(input_tokens=3 + 5, output_tokens=3 + 5)


def _paused_pair(
    requests_bound: int | None, *sub_outcomes: Any, price: bool = False
) -> tuple[Agent[None, str], Agent[None, str], list[str]]:
    log: list[str] = []
    sub: Agent[None, str] = Agent(ScriptedModel(*sub_outcomes), name="sub")

    def delete(ctx: RunContext[None], args: dict[str, Any]) -> str:
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, "delete?")
        log.append(ctx.call_id)
        return "deleted"

    sub.tools["delete"] = Tool("delete", "d", OBJ, delete)
    sub.tools["look"] = Tool("look", "l", OBJ, lambda c, a: "seen")
    parent: Agent[None, str] = Agent(
        ScriptedModel(ask_sub(), text("fin", tokens=1)),
        tools=[sub.as_tool()],
        usage_limits=UsageLimits(requests=requests_bound) if requests_bound else None,
        price=(lambda u: float(u.input_tokens)) if price else None,
    )
    return parent, sub, log


async def test_a_resuming_parents_limits_cover_its_resumed_sub_agents() -> None:
    parent, _, log = _paused_pair(
        3,
        calls(("s1", "delete", {}), tokens=5),
        calls(("s2", "look", {}), tokens=5),
        calls(("s3", "look", {}), tokens=5),
        text("done"),
    )
    paused = await parent.run("go")
    with pytest.raises(RunError) as info:
        await parent.run_with_deferred_results(paused.messages, {"approvals": {"p1/s1": True}})
    assert info.value.stage is Stage.USAGE
    cause = info.value.__cause__
    assert isinstance(cause, UsageLimitExceeded)
    assert (cause.kind, cause.actual) == ("request", 3 + 1)  # checked before the parent's call
    assert log == ["s1"]
    partial = info.value.partial
    assert partial is not None
    # the evidence answers the parent's call with the sub-agent's answer: nothing is pending,
    # so continuing from it never runs the approved call again
    assert [m.content for m in partial.messages if m.role == "tool"] == ["done"]


async def test_a_resumed_parents_result_counts_its_sub_agents_once_and_prices_the_total() -> None:
    parent, _, _ = _paused_pair(
        None, calls(("s1", "delete", {}), tokens=5), text("done", tokens=2), price=True
    )
    paused = await parent.run("go")
    done = await parent.run_with_deferred_results(paused.messages, {"approvals": {"p1/s1": True}})
    assert done.output == "fin"
    assert (done.requests, done.tool_calls) == (1 + 1, 1)
    assert done.usage == Usage(input_tokens=2 + 1, output_tokens=2 + 1)
    assert done.cost == 3.0  # the parent's price of the total, as on the run path


async def test_a_parent_still_paused_after_its_resume_checks_its_limits() -> None:
    parent, _, _ = _paused_pair(
        1,
        calls(("s1", "delete", {}), tokens=5),
        calls(("s2", "look", {}), tokens=5),
        calls(("s3", "delete", {}), tokens=5),
    )
    parent.usage_limits = UsageLimits(requests=10)
    paused = await parent.run("go")
    parent.usage_limits = UsageLimits(requests=1)
    with pytest.raises(RunError) as info:
        await parent.run_with_deferred_results(paused.messages, {"approvals": {"p1/s1": True}})
    assert info.value.stage is Stage.USAGE
    assert info.value.partial is not None
    assert info.value.partial.requests == 2


BEHAVIOURS = ["answer", "tool-then-answer", "fail-model", "fail-tool", "pause"]


class Counter:
    def __init__(self) -> None:
        self.executions = 0  # tool executions that did not defer


def sub_agent(name: str, behaviour: str, counter: Counter) -> Agent[None, str]:
    outcomes: list[Any] = {
        "answer": [text("ok", tokens=1)],
        "tool-then-answer": [calls(("t1", "work", {}), tokens=1), text("ok", tokens=1)],
        "fail-model": [RuntimeError("provider down")],
        "fail-tool": [calls(("t1", "boom", {}), tokens=1)],
        "pause": [calls(("t1", "gate", {}), tokens=1), text("ok", tokens=1)],
    }[behaviour]
    agent: Agent[None, str] = Agent(ScriptedModel(*outcomes), name=name)

    def work(ctx: RunContext[None], args: dict[str, Any]) -> str:
        counter.executions += 1
        return "done"

    def boom(ctx: RunContext[None], args: dict[str, Any]) -> str:
        counter.executions += 1
        raise ValueError("broken")

    def gate(ctx: RunContext[None], args: dict[str, Any]) -> str:
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, "?")
        counter.executions += 1
        return "approved work"

    for tool in (work, boom, gate):
        agent.tools[tool.__name__] = Tool(tool.__name__, "t", OBJ, tool)
    return agent


def models_of(*agents: Agent[None, str]) -> list[ScriptedModel]:
    found: list[ScriptedModel] = []
    for agent in agents:
        assert isinstance(agent.model, ScriptedModel)
        found.append(agent.model)
    return found


@settings(max_examples=int(os.environ.get("GOLEM_SUBRUN_EXAMPLES", "120")), deadline=None)
@given(
    behaviours=st.lists(st.sampled_from(BEHAVIOURS), min_size=1, max_size=3), parallel=st.booleans()
)
@example(["answer"], False)  # counted once
@example(["fail-tool"], False)  # a failing sub-run still counts in the parent's partial
@example(["fail-model"], False)  # so does a sub-run whose first request failed
def test_a_parents_counts_are_every_model_request_and_tool_execution_of_its_tree(
    behaviours: list[str], parallel: bool
) -> None:
    """Whatever its sub-agents do — answer, use a tool, fail in their model or a tool, pause
    — the parent's `Result` (or `partial`) counts exactly the requests every model of the
    tree received, the tool executions every tool made (agent-tool calls that did not pause
    included, deferrals not), and one token per answered request; its resume likewise."""
    counter = Counter()
    subs = [sub_agent(f"sub{i}", b, counter) for i, b in enumerate(behaviours)]
    parent: Agent[None, str] = Agent(
        ScriptedModel(
            calls(*((f"p{i}", f"sub{i}", {"prompt": "go"}) for i in range(len(subs))), tokens=1),
            text("fin", tokens=1),
        ),
        tools=[s.as_tool() for s in subs],
        parallel_tool_calls=parallel,
    )
    models = models_of(parent, *subs)

    def requests() -> int:
        return sum(m.request_count for m in models)

    def answered() -> int:  # requests that got a response (each carries one token)
        failed = sum(
            1
            for b, sub in zip(behaviours, subs, strict=True)
            if b == "fail-model" and models_of(sub)[0].request_count
        )
        return requests() - failed

    def agent_tool_executions() -> int:
        return sum(
            1
            for b, s in zip(behaviours, subs, strict=True)
            if models_of(s)[0].request_count and b != "pause"
        )

    async def go() -> None:
        failure: RunError | None = None
        try:
            result = await parent.run("go")
        except RunError as failed:
            failure = failed
        if failure is not None:
            assert failure.stage is Stage.TOOL
            assert failure.partial is not None
            assert failure.partial.requests == requests()
            assert failure.partial.tool_calls == counter.executions + agent_tool_executions()
            assert failure.partial.usage.input_tokens == answered()
            return
        assert result.requests == requests()
        assert result.tool_calls == counter.executions + agent_tool_executions()
        assert result.usage.input_tokens == answered()
        if not result.is_paused:
            return
        before_requests, before_executions = requests(), counter.executions
        assert result.pending is not None
        done = await parent.run_with_deferred_results(
            result.messages, {"approvals": {p.call_id: True for p in result.pending.calls}}
        )
        assert done.output == "fin"
        assert done.requests == requests() - before_requests
        assert done.tool_calls == counter.executions - before_executions
        assert done.usage.input_tokens == done.requests

    asyncio.run(go())
