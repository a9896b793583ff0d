"""A sub-agent's pause through the store and a worker (issue 11: "in another process, through the
store and the inbox like any other pending call")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from golem import Agent, Message, ToolCall
from golem.durable.store import CallKind, Decision, RunStatus, Store
from golem.durable.worker import AgentEntry, Worker, start_run
from golem.messages import loads_history
from golem.records import sub_agent_calls
from golem.seal import verify_call
from golem.testing import ScriptedModel
from golem.tool import DeferKind, Deferred, call_approved
from tests.support.durable.backends import Backend
from tests.support.store import behind_the_back


class Nested:
    """A parent agent that delegates to a janitor sub-agent whose `delete` needs approval."""

    def __init__(self, *, sub_script: tuple[Any, ...], parent_script: tuple[Any, ...]) -> None:
        self.deleted: list[str] = []
        janitor = Agent(ScriptedModel(*sub_script), name="janitor")

        @janitor.tool_plain
        def delete(path: str) -> str:
            """Delete a file."""
            if not call_approved():
                raise Deferred(DeferKind.APPROVAL, f"delete {path}?")
            if path == "boom":
                raise RuntimeError("disk on fire")
            self.deleted.append(path)
            return f"deleted {path}"

        parent = Agent(
            ScriptedModel(*parent_script),
            name="boss",
            tools=[janitor.as_tool(description="Cleans up files.")],
        )
        self.registry = {"boss": AgentEntry(parent)}


DELEGATE = Message(
    role="assistant",
    tool_calls=[ToolCall("call-1", "janitor", '{"prompt": "clean up a.log"}')],
)
DELETE = Message(role="assistant", tool_calls=[ToolCall("j1", "delete", '{"path": "a.log"}')])


KEY = b"n" * 32


@pytest.mark.parametrize("key", [None, KEY], ids=["unsealed", "sealed"])
async def test_a_sub_agent_pause_is_decided_in_the_store_and_resumed_by_a_worker(
    store: Store, key: bytes | None
) -> None:
    """With `start_run(seal_key=)` the sub-agent's call is sealed where it lives — in the
    sub-agent's history inside the parent's record, bound to the sub-run's conversation — and a
    worker with the key verifies that seal before resuming."""
    pausing = Nested(sub_script=(DELETE,), parent_script=(DELEGATE,))
    run = await start_run(
        store, pausing.registry, "boss", "tidy up", started_by="alice", seal_key=key
    )
    assert [(c.call_id, c.kind, c.tool_name, c.args) for c in run.calls] == [
        ("call-1/j1", CallKind.APPROVAL, "janitor/delete", '{"path": "a.log"}')
    ]
    assert pausing.deleted == []
    if key is not None:
        (call,) = run.calls
        sub = sub_agent_calls(loads_history(run.history))["call-1/j1"]
        assert call.seal, "the calls table holds the seal"
        assert sub.call.seal == call.seal, "and the record holds the same seal"
        assert verify_call(key, sub.conversation_id, sub.call).value == "approval"
    await store.decide(run.id, "call-1/j1", Decision.approve(), decided_by="bob")
    # a worker in "another process": freshly built agents, only the store in common
    resuming = Nested(sub_script=("Deleted a.log.",), parent_script=("All tidy.",))
    worker = Worker(store, resuming.registry, worker_id="w1", lease_seconds=30, seal_key=key)
    assert await worker.run_once() is True
    done = await store.get_run(run.id)
    assert done.outcome is not None, done
    assert (done.status, done.outcome.error) == (RunStatus.COMPLETED, "")
    assert done.outcome.output == "All tidy."
    assert resuming.deleted == ["a.log"]


async def test_a_failed_nested_resume_records_which_sub_agent_calls_ran(
    store: Store,
) -> None:
    """ADR 0076: the failed run's stored conversation is the nested resume's partial — the
    sub-agent's record holds the approved call that ran answered and the failing one still
    pending — and nothing resumes it again (a failed run is terminal)."""
    both = Message(
        role="assistant",
        tool_calls=[
            ToolCall("j1", "delete", '{"path": "a.log"}'),
            ToolCall("j2", "delete", '{"path": "boom"}'),
        ],
    )
    pausing = Nested(sub_script=(both,), parent_script=(DELEGATE,))
    run = await start_run(store, pausing.registry, "boss", "tidy up", started_by="alice")
    for call in ("call-1/j1", "call-1/j2"):
        await store.decide(run.id, call, Decision.approve(), decided_by="bob")
    resuming = Nested(sub_script=("never",), parent_script=("never",))
    worker = Worker(store, resuming.registry, worker_id="w1", lease_seconds=30)
    assert await worker.run_once() is True
    assert await worker.run_once() is False
    failed = await store.get_run(run.id)
    assert failed.status is RunStatus.FAILED
    assert failed.outcome is not None
    assert "disk on fire" in failed.outcome.error
    history = loads_history(failed.conversation)
    assert list(sub_agent_calls(history)) == ["call-1/j2"]
    (record,) = [m for m in history if m.role == "tool"]
    inner = loads_history(json.loads(record.content.split("\n", 1)[1])["history"])
    assert [(m.tool_call_id, m.content) for m in inner if m.role == "tool"] == [
        ("j1", "deleted a.log")
    ]
    assert resuming.deleted == ["a.log"]


@pytest.mark.parametrize(
    ("paused_with", "tamper", "refusal"),
    [
        (KEY, True, "other arguments in the history than the approvers saw"),
        (None, False, "has no seal"),
        (b"x" * 32, False, "seal does not match"),
    ],
    ids=["tampered", "unsealed", "another-key"],
)
async def test_a_sub_agent_call_the_worker_cannot_trust_is_refused(
    store: Store, tmp_path: Path, paused_with: bytes | None, tamper: bool, refusal: str
) -> None:
    """The checks the worker makes for a parent's own call hold for a sub-agent's: the arguments
    in the stored history are the ones the approvers saw, and a worker with a key wants its seal."""
    pausing = Nested(sub_script=(DELETE,), parent_script=(DELEGATE,))
    run = await start_run(
        store, pausing.registry, "boss", "tidy up", started_by="alice", seal_key=paused_with
    )
    assert (run.calls[0].seal is None) is (paused_with is None)
    await store.decide(run.id, "call-1/j1", Decision.approve(), decided_by="bob")
    if tamper:  # the approvers saw a.log; the history now says etc/passwd
        tampered = run.history.replace("a.log", "etc/passwd")
        assert tampered != run.history
        sql = "UPDATE golem_histories SET history = %s WHERE run_id = %s"
        behind_the_back(Backend("sqlite", path=str(tmp_path / "golem.db")), sql, tampered, run.id)
    resuming = Nested(sub_script=("Deleted.",), parent_script=("All tidy.",))
    worker = Worker(store, resuming.registry, worker_id="w1", lease_seconds=30, seal_key=KEY)
    assert await worker.run_once() is True
    done = await store.get_run(run.id)
    assert done.status is RunStatus.FAILED
    assert done.outcome is not None
    assert refusal in done.outcome.error
    assert resuming.deleted == []
