"""Adversarial round against sealed approvals, store side (ADR 0063): a database writer who
re-files an answered sealed call as pending in a later run of the same conversation (its
result removed from the history, a decision added) must not make a worker with the key run
it again, even when the registered agent holds no key of its own."""

from __future__ import annotations

from golem import dumps_history, loads_history
from golem.store import CallKind, Decision, NewCall, NewRun, RunStatus, Store
from golem.worker import Worker, start_run
from tests.test_worker import DEL, App, calls, store  # noqa: F401 - the store fixture

KEY = b"k" * 32


async def test_a_revived_answered_call_is_refused_by_a_worker_with_the_key(
    store: Store,  # noqa: F811
) -> None:
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
                    call_id=c.call_id,
                    kind=c.kind,
                    tool_name=c.tool_name,
                    args=c.args,
                    seal=c.seal,
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
