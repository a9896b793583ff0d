"""Adversarial round against sealed approvals, store side (ADR 0063): a database writer who
re-files an answered sealed call as pending in a later run of the same conversation (its
result removed from the history, a decision added) must not make a worker with the key run
it again, even when the registered agent holds no key of its own."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from golem import dumps_history, loads_history
from golem.durable.store import CallKind, Decision, NewCall, NewRun, RunStatus, Store
from golem.durable.worker import AgentEntry, Worker, new_run_from_result, start_run
from tests.support.worker import DEL, App, calls

KEY = b"k" * 32


async def test_a_revived_answered_call_is_refused_by_a_worker_with_the_key(store: Store) -> None:
    app = App(calls(DEL), calls(("c3", "delete_file", '{"path": "/tmp/b"}')), "Done.", "Done.")
    run = await start_run(store, app.registry, "ops", "clean", started_by="alice", seal_key=KEY)
    await store.decide(run.id, "c1", Decision.approve(), decided_by="bob")
    worker = Worker(store, app.registry, worker_id="w1", lease_seconds=5, seal_key=KEY)
    assert await worker.run_once() is True
    parent = await store.get_run(run.id)
    assert parent.child_run_id is not None
    child = await store.get_run(parent.child_run_id)
    assert app.executed == [("c1", "/tmp/a", None)]
    app.executed.clear()
    # the writer drops c1's result and files it, with its genuine stored seal, next to c3
    history = [
        m for m in loads_history(child.history) if not (m.role == "tool" and m.tool_call_id == "c1")
    ]
    sealed_c1 = next(c for c in parent.calls if c.call_id == "c1")
    forged = NewRun(
        id="revived",
        agent="ops",
        conversation_id=child.conversation_id,
        history=dumps_history(history),
        calls=(
            NewCall(
                call_id="c1",
                kind=CallKind.APPROVAL,
                tool_name="delete_file",
                args=sealed_c1.args,
                seal=sealed_c1.seal,
            ),
            *(
                NewCall(
                    call_id=c.call_id, kind=c.kind, tool_name=c.tool_name, args=c.args, seal=c.seal
                )
                for c in child.calls
            ),
        ),
    )
    await store.save_pending(forged)
    await store.decide("revived", "c1", Decision.approve(), decided_by="mallory")
    await store.decide("revived", "c3", Decision.approve(), decided_by="bob")
    assert await worker.run_once() is True
    done = await store.get_run("revived")
    assert done.status is RunStatus.FAILED
    assert "paused batch" in (done.outcome.error or "")  # type: ignore[union-attr]
    assert app.executed == []


# --------------------------------------------------------------------------- ADR 0065


async def _paused_nested(conversation: str, log: list[str]) -> tuple[Any, Any]:
    from tests.support.seals import nested_parent

    parent = nested_parent("a.log", log, seal_key=KEY)
    return parent, await parent.run("tidy", conversation_id=conversation)


async def test_a_worker_resumes_an_agent_with_its_own_key_in_the_runs_conversation(
    store: Store,
) -> None:
    """An agent with a seal key resumes only when told its conversation (ADR 0065): the
    worker passes its record's, so runs of keyed agents (and their sub-agents) still go."""
    log: list[str] = []
    parent, paused = await _paused_nested("C", log)
    await store.save_pending(new_run_from_result(paused, "boss", started_by="alice"))
    await store.decide(paused.run_id, "p1/s1", Decision.approve(), decided_by="bob")
    worker = Worker(store, {"boss": AgentEntry(parent)}, worker_id="w1", lease_seconds=30)
    assert await worker.run_once() is True
    done = await store.get_run(paused.run_id)
    assert done.outcome is not None
    assert (done.status, done.outcome.error, log) == (RunStatus.COMPLETED, "", ["a.log"])


@pytest.mark.parametrize("recorded", [True, False], ids=["recorded-seal", "no-recorded-seal"])
async def test_a_sub_agent_pause_stored_before_adr_0065_is_bound_by_its_recorded_seal(
    store: Store, recorded: bool
) -> None:
    """A sub-agent record saved before sub-runs lived in `<parent conversation>/<call>`
    names a conversation of its own, its seal made for it. The worker's recorded seal (the
    calls table, written at the pause) binds it to the run, so it resumes; without one,
    nothing binds it and it is refused by name (`SubAgentConversationMismatch`)."""
    from golem.agent_tool import copy_result
    from tests.support.seals import legacy

    log: list[str] = []
    parent, paused = await _paused_nested("C", log)
    old_history, old_pending = legacy(paused, key=KEY)
    if not recorded:
        old_pending = type(old_pending)(
            approvals=[replace(p, seal="") for p in old_pending.approvals]
        )
    old = copy_result(paused, messages=old_history, pending=old_pending)
    await store.save_pending(new_run_from_result(old, "boss", started_by="alice"))
    await store.decide(paused.run_id, "p1/s1", Decision.approve(), decided_by="bob")
    worker = Worker(
        store, {"boss": AgentEntry(parent)}, worker_id="w1", lease_seconds=30, seal_key=KEY
    )
    assert await worker.run_once() is True
    done = await store.get_run(paused.run_id)
    assert done.outcome is not None
    if recorded:
        assert (done.status, done.outcome.error, log) == (RunStatus.COMPLETED, "", ["a.log"])
    else:
        assert done.status is RunStatus.FAILED
        assert 'sealed for conversation "old-sub-conv", not "C/p1"' in done.outcome.error
        assert log == []
