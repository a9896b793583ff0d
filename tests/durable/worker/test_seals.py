"""The store seals what it saves: `start_run(seal_key=)` / `Worker(seal_key=)` seal every pending
call the agent did not seal itself, and a worker with a key resumes only calls whose stored seal
verifies for their decided kind — an unsealed or tampered stored run fails without running."""

from __future__ import annotations

from golem import dumps_history, loads_history
from golem.durable.store import CallKind, Decision, NewCall, NewRun, RunStatus, Store
from golem.durable.worker import Worker, start_run
from golem.seal import verify_call
from tests.support.worker import DEL, LOOK, App, calls

KEY = b"k" * 32


async def _paused(store: Store, app: App) -> str:
    run = await start_run(store, app.registry, "ops", "clean up", started_by="alice", seal_key=KEY)
    assert run.status is RunStatus.PENDING
    return run.id


async def test_sealed_pauses_are_resumed_by_a_worker_with_the_key_which_seals_the_next(
    store: Store,
) -> None:
    app = App(calls(DEL, LOOK), calls(("c3", "delete_file", '{"path": "/tmp/b"}')), "Done.")
    run = await store.get_run(await _paused(store, app))
    sealed = {c.id: c for m in loads_history(run.history) for c in m.tool_calls}
    for call in run.calls:
        assert call.seal, f"{call.call_id} is sealed in the calls table"
        assert sealed[call.call_id].seal == call.seal, "and the same seal in the history"
        kind = verify_call(KEY, run.conversation_id, sealed[call.call_id])
        assert kind.value == call.kind.value
    assert sealed["c1"].args == '{"path": "/tmp/a"}', "the argument bytes are kept"
    await store.decide(run.id, "c1", Decision.approve(), decided_by="bob")
    await store.decide(run.id, "c2", Decision.external("sunny"), decided_by="svc")
    worker = Worker(store, app.registry, worker_id="w1", lease_seconds=5, seal_key=KEY)
    assert await worker.run_once() is True
    parent = await store.get_run(run.id)
    assert parent.child_run_id is not None
    child = await store.get_run(parent.child_run_id)
    assert child.status is RunStatus.PENDING
    assert [c.seal for c in child.calls] != [None], "the worker's pause is sealed too"
    await store.decide(child.id, "c3", Decision.approve(), decided_by="bob")
    assert await worker.run_once() is True
    assert (await store.get_run(child.id)).status is RunStatus.COMPLETED
    assert [path for _, path, _ in app.executed] == ["/tmp/a", "/tmp/b"]


async def test_an_unsealed_stored_run_fails_without_running_anything(
    store: Store,
) -> None:
    app = App("never")
    history = dumps_history([calls(DEL)])
    call = NewCall(call_id="c1", kind=CallKind.APPROVAL, tool_name="delete_file", args=DEL[2])
    run = await store.save_pending(
        NewRun(id="r1", agent="ops", conversation_id="conv", history=history, calls=(call,))
    )
    await store.decide(run.id, "c1", Decision.approve(), decided_by="bob")
    worker = Worker(store, app.registry, worker_id="w1", lease_seconds=5, seal_key=KEY)
    assert await worker.run_once() is True
    done = await store.get_run(run.id)
    assert done.status is RunStatus.FAILED
    assert done.outcome is not None
    assert "SealError" in (done.outcome.error or "")
    assert "has no seal" in (done.outcome.error or "")
    assert app.executed == []
    assert app.model.request_count == 0


async def test_a_stored_call_sealed_as_another_kind_is_refused(
    store: Store,
) -> None:
    app = App(calls(LOOK), "never")
    run_id = await _paused(store, app)
    saved = await store.get_run(run_id)
    # a database writer re-files the external lookup as an approval call, keeping the seal
    forged = NewRun(
        id="forged",
        agent="ops",
        conversation_id=saved.conversation_id,
        history=saved.history,
        calls=tuple(
            NewCall(
                call_id=c.call_id,
                kind=CallKind.APPROVAL,
                tool_name=c.tool_name,
                args=c.args,
                seal=c.seal,
            )
            for c in saved.calls
        ),
    )
    await store.save_pending(forged)
    await store.decide("forged", "c2", Decision.approve(), decided_by="mallory")
    worker = Worker(store, app.registry, worker_id="w1", lease_seconds=5, seal_key=KEY)
    assert await worker.run_once() is True
    done = await store.get_run("forged")
    assert done.status is RunStatus.FAILED
    assert "sealed as external" in (done.outcome.error or "")  # type: ignore[union-attr]
    assert app.executed == []
