"""Agents as tools (issue 11): results, usage roll-up, limits, and sub-agent pauses that
surface in the parent and resume through it — in this process and in another one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pydantic
import pytest

from golem import (
    Agent,
    Approval,
    DeferredResults,
    ResumeError,
    RunError,
    Stage,
    Usage,
    UsageLimits,
    dumps_history,
    loads_history,
)
from golem.agent_tool import PAUSED_MARKER, AgentTool
from golem.messages import Message
from golem.testing import ScriptedModel
from golem.tool import DeferKind, Deferred, RunContext, call_approved
from tests.support.seals import bound
from tests.support.subagents import ask, calls, janitor, text

ROOT = Path(__file__).parent.parent


# --------------------------------------------------------------------------- plain calls


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
        ScriptedModel(ask("go", tool="sub"), "ok"),
        tools=[sub.as_tool(deps=lambda d: d["user"])],
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


# --------------------------------------------------------------------------- pauses


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


def test_the_parent_resumes_the_sub_agent_then_itself() -> None:
    log: list[str] = []
    parent, paused = paused_parent(
        log, text("Deleted a.log.", 4), parent_after=(text("All clean.", 1),)
    )
    done = parent.run_with_deferred_results_sync(
        paused.messages, DeferredResults(approvals={"p1/s1": Approval(True)})
    )
    assert done.output == "All clean."
    assert log == ["a.log"]
    results = {m.tool_call_id: m.content for m in done.messages if m.role == "tool"}
    assert results["p1"] == "Deleted a.log."
    assert not any(m.content.startswith(PAUSED_MARKER) for m in done.messages)
    assert done.usage.input_tokens == 4 + 1
    assert done.tool_calls == 1


def test_a_denial_reaches_the_sub_agent() -> None:
    log: list[str] = []
    parent, paused = paused_parent(
        log, text("Kept a.log.", 1), parent_after=(text("Nothing deleted.", 1),)
    )
    done = parent.run_with_deferred_results_sync(
        paused.messages, DeferredResults(approvals={"p1/s1": Approval(False, "keep it")})
    )
    assert done.output == "Nothing deleted."
    assert log == []
    assert next(m for m in done.messages if m.tool_call_id == "p1").content == "Kept a.log."


def test_a_sub_agent_that_pauses_again_keeps_the_parent_paused() -> None:
    log: list[str] = []
    parent, paused = paused_parent(
        log,
        calls(("s3", "delete_file", {"path": "b.log"})),
        text("Both gone.", 1),
        parent_after=(text("Done.", 1),),
    )
    again = parent.run_with_deferred_results_sync(
        paused.messages, DeferredResults(approvals={"p1/s1": Approval(True)})
    )
    assert again.pending is not None
    assert [p.call_id for p in again.pending.approvals] == ["p1/s3"]
    assert log == ["a.log"]
    done = parent.run_with_deferred_results_sync(
        again.messages, DeferredResults(approvals={"p1/s3": Approval(True)})
    )
    assert done.output == "Done."
    assert log == ["a.log", "b.log"]


def test_own_and_nested_pending_calls_resolve_together() -> None:
    log: list[str] = []
    sub = janitor(calls(("s1", "delete_file", {"path": "a.log"})), text("Deleted.", 1), log=log)
    parent = Agent(
        ScriptedModel(
            calls(("p1", "janitor", {"prompt": "clean"}), ("p2", "notify", {"who": "ops"})),
            text("Cleaned and notified.", 1),
        ),
        tools=[sub.as_tool()],
    )
    notified: list[str] = []

    @parent.tool
    def notify(who: str) -> str:
        """Notify someone."""
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, "notify?")
        notified.append(who)
        return "sent"

    paused = parent.run_sync("go")
    assert paused.pending is not None
    assert sorted(p.call_id for p in paused.pending.approvals) == ["p1/s1", "p2"]
    done = parent.run_with_deferred_results_sync(
        paused.messages,
        DeferredResults(approvals={"p1/s1": Approval(True), "p2": Approval(True)}),
    )
    assert done.output == "Cleaned and notified."
    assert (log, notified) == (["a.log"], ["ops"])
    tool_ids = [m.tool_call_id for m in done.messages if m.role == "tool"]
    assert tool_ids == ["p1", "p2"]


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


def test_two_levels_of_nesting() -> None:
    log: list[str] = []
    inner = janitor(calls(("s1", "delete_file", {"path": "a.log"})), text("inner done", 1), log=log)
    middle = Agent(
        ScriptedModel(ask("clean", "m1"), text("middle done", 1)),
        name="manager",
        tools=[inner.as_tool()],
    )
    top = Agent(
        ScriptedModel(ask("manage", "t1", "manager"), text("top done", 1)), tools=[middle.as_tool()]
    )
    paused = top.run_sync("go")
    assert paused.pending is not None
    assert [(p.call_id, p.tool_name) for p in paused.pending.approvals] == [
        ("t1/m1/s1", "manager/janitor/delete_file")
    ]
    done = top.run_with_deferred_results_sync(
        dumps_history(paused.messages), DeferredResults(approvals={"t1/m1/s1": Approval(True)})
    )
    assert done.output == "top done"
    assert log == ["a.log"]


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


async def test_a_nested_resume_streams() -> None:
    log: list[str] = []
    sub = janitor(calls(("s1", "delete_file", {"path": "a.log"})), text("Deleted.", 1), log=log)
    parent = Agent(ScriptedModel(ask("clean"), text("All clean.", 1)), tools=[sub.as_tool()])
    paused = await parent.run("tidy")
    async with parent.run_stream_with_deferred_results(
        paused.messages, {"approvals": {"p1/s1": True}}
    ) as stream:
        items = [item async for item in stream]
    assert stream.result.output == "All clean."
    assert log == ["a.log"]
    assert items


def test_sealed_sub_agent_calls_surface_with_their_seal() -> None:
    log: list[str] = []
    key = b"k" * 32
    sealed_turn = calls(("s1", "delete_file", {"path": "a.log"}))
    sub = Agent(
        ScriptedModel(sealed_turn, text("Deleted.", 1)),
        name="janitor",
        seal_key=key,
    )

    @sub.tool
    def delete_file(path: str) -> str:
        """Delete a file."""
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, "delete?")
        log.append(path)
        return "deleted"

    parent = Agent(ScriptedModel(ask("clean"), text("ok", 1)), tools=[sub.as_tool()], seal_key=key)
    paused = parent.run_sync("tidy")
    assert paused.pending is not None
    assert paused.pending.approvals[0].seal
    tampered = [
        *paused.messages[:-1],
        Message(
            role="tool",
            content=paused.messages[-1].content.replace("a.log", "etc/passwd"),
            tool_call_id="p1",
            tool_name="janitor",
        ),
    ]
    with pytest.raises(ResumeError):
        parent.run_with_deferred_results_sync(
            tampered, DeferredResults(approvals={"p1/s1": Approval(True)})
        )
    assert log == []
    done = parent.run_with_deferred_results_sync(
        bound(paused), DeferredResults(approvals={"p1/s1": Approval(True)})
    )
    assert (done.output, log) == ("ok", ["a.log"])


# --------------------------------------------------------------------------- sub_agent_calls


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
