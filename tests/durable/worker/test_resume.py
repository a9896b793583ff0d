"""Worker end to end on SQLite with `ScriptedModel`: start → decide → claim → resume → outcome."""

from __future__ import annotations

import asyncio
import logging
import math
import sys
import types
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from golem import Agent, Message, ToolCall, dumps_history, loads_history
from golem.durable.store import (
    EXPIRY_ACTOR,
    MAX_SECONDS,
    AuditAction,
    CallKind,
    Decision,
    NewCall,
    NewRun,
    RunStatus,
    Store,
    StoreBusy,
    StoreReadOnly,
    utc_now,
)
from golem.durable.store.sqlite import SQLiteStore
from golem.durable.worker import AgentEntry, SweepReport, Worker, load_registry, start_run
from golem.errors import StoreError
from golem.testing import ScriptedModel
from tests.support.durable.procs import eventually
from tests.support.worker import DEL, LOOK, App, calls


async def test_pause_is_saved_then_approved_call_runs_once_and_run_completes(
    store: Store,
) -> None:
    async def factory(ref: Any) -> dict[str, Any]:  # a deps factory may be async
        return {"built_from": ref}

    app = App(calls(DEL, LOOK), "All done.", deps_factory=factory)
    run = await start_run(
        store,
        app.registry,
        "ops",
        "clean up",
        deps_ref={"tenant": "acme"},
        started_by="alice",
        expires_in=60,
    )
    assert run.status is RunStatus.PENDING
    assert [(c.call_id, c.kind, c.tool_name, c.args, c.reason) for c in run.calls] == [
        ("c1", CallKind.APPROVAL, "delete_file", '{"path": "/tmp/a"}', "deletes /tmp/a"),
        ("c2", CallKind.EXTERNAL, "lookup", '{"q":  "weather"}', "job:weather"),
    ]
    assert run.deps_ref == {"tenant": "acme"}
    assert run.started_by == "alice"
    assert run.expires_at is not None
    assert timedelta(seconds=50) < run.expires_at - run.created_at <= timedelta(seconds=61)
    assert app.executed == [], "the pausing pass executes nothing"

    worker = Worker(store, app.registry, worker_id="w1", lease_seconds=5)
    assert await worker.run_once() is False, "nothing is ready yet"
    await store.decide(run.id, "c1", Decision.approve(), decided_by="bob")
    await store.decide(run.id, "c2", Decision.external("sunny"), decided_by="svc")
    assert await worker.run_once() is True
    assert await worker.run_once() is False

    done = await store.get_run(run.id)
    assert done.status is RunStatus.COMPLETED
    assert done.outcome is not None
    assert done.outcome.output == "All done."
    assert app.executed == [("c1", "/tmp/a", {"built_from": {"tenant": "acme"}})], "call ID, deps"
    tool_results = [
        (m.tool_call_id, m.content) for m in app.model.requests[-1].messages if m.role == "tool"
    ]
    assert tool_results == [("c1", "deleted /tmp/a"), ("c2", "sunny")]
    assert '"All done."' in done.conversation
    assert [e.action for e in await store.audit(run.id)] == [
        AuditAction.CREATED,
        AuditAction.DECIDED,
        AuditAction.DECIDED,
        AuditAction.READY,
        AuditAction.CLAIMED,
        AuditAction.COMPLETED,
    ]


async def test_a_denied_call_is_not_executed_and_the_model_is_told(store: Store) -> None:
    app = App(calls(DEL), "Understood, skipped.")
    run = await start_run(store, app.registry, "ops", "clean up", started_by="alice")
    await store.decide(run.id, "c1", Decision.deny("not today"), decided_by="bob")
    assert await Worker(store, app.registry).run_once()
    assert app.executed == []
    denial = [m.content for m in app.model.requests[-1].messages if m.role == "tool"]
    assert denial == [
        "Your tool call was denied: not today. Do not call it again; continue without its result."
    ]
    assert (await store.get_run(run.id)).status is RunStatus.COMPLETED


async def test_a_resume_that_pauses_again_saves_a_linked_pending_run(store: Store) -> None:
    app = App(calls(DEL), calls(("c3", "delete_file", '{"path": "/tmp/b"}')), "Both gone.")
    first = await start_run(
        store, app.registry, "ops", "clean", deps_ref={"n": 1}, started_by="alice", expires_in=600
    )
    await store.decide(first.id, "c1", Decision.approve(), decided_by="bob")
    worker = Worker(store, app.registry, worker_id="w1")
    assert await worker.run_once()
    paused = await store.get_run(first.id)
    assert paused.status is RunStatus.PAUSED
    assert paused.child_run_id is not None
    child = await store.get_run(paused.child_run_id)
    assert child.status is RunStatus.PENDING
    assert child.parent_run_id == first.id
    assert child.conversation_id == first.conversation_id
    assert child.deps_ref == {"n": 1}
    assert child.started_by == "worker:w1"
    assert [c.call_id for c in child.calls] == ["c3"]
    assert child.calls[0].deadline is not None, "the child gets as long as its parent had"
    await store.decide(child.id, "c3", Decision.approve(), decided_by="bob")
    assert await worker.run_once()
    assert (await store.get_run(child.id)).status is RunStatus.COMPLETED
    assert [c for c, _, _ in app.executed] == ["c1", "c3"]
    convo = await store.list_runs(conversation_id=first.conversation_id)
    assert [r.id for r in convo] == [child.id, first.id]


async def test_a_failed_resume_records_which_approved_calls_ran(store: Store) -> None:
    """ADR 0071: the failed run's conversation is the resume's partial — the approved call
    that ran is answered, the failing one still pending — and nothing resumes it again."""
    app = App(
        calls(
            ("c1", "delete_file", '{"path": "/tmp/a"}'), ("c2", "delete_file", '{"path": "/boom"}')
        )
    )
    run = await start_run(store, app.registry, "ops", "burn", started_by="alice")
    await store.decide(run.id, "c1", Decision.approve(), decided_by="bob")
    await store.decide(run.id, "c2", Decision.approve(), decided_by="bob")
    worker = Worker(store, app.registry)
    assert await worker.run_once()
    assert await worker.run_once() is False
    failed = await store.get_run(run.id)
    assert failed.status is RunStatus.FAILED
    assert failed.outcome is not None
    assert "RunError" in failed.outcome.error
    assert "disk on fire" in failed.outcome.error
    history = loads_history(failed.conversation)
    assert [(m.tool_call_id, m.content) for m in history if m.role == "tool"] == [
        ("c1", "deleted /tmp/a")
    ]
    assert [c for c, _, _ in app.executed] == ["c1", "c2"]


async def test_start_run_saves_a_final_answer_or_an_error(store: Store) -> None:
    app = App("Nothing to do.", RuntimeError("model exploded"))
    done = await start_run(store, app.registry, "ops", "hi", started_by="alice")
    assert done.status is RunStatus.COMPLETED
    assert done.outcome is not None
    assert done.outcome.output == "Nothing to do."
    assert '"Nothing to do."' in done.conversation
    failed = await start_run(store, app.registry, "ops", "hi again", started_by="alice")
    assert failed.status is RunStatus.FAILED
    assert failed.outcome is not None
    assert "model exploded" in failed.outcome.error
    with pytest.raises(KeyError, match='agent "nope" is not in the registry'):
        await start_run(store, app.registry, "nope", "hi", started_by="alice")


async def test_a_worker_leaves_runs_of_agents_it_does_not_know_for_other_workers(
    store: Store,
) -> None:
    """A rolling deploy: an old worker without the agent leaves its runs ready."""
    app = App(calls(DEL), "done")
    run = await start_run(store, app.registry, "ops", "x", started_by="a")
    await store.decide(run.id, "c1", Decision.approve(), decided_by="b")
    other = {"billing": AgentEntry(Agent(ScriptedModel("x")))}
    assert await Worker(store, other).run_once() is False
    assert (await store.get_run(run.id)).status is RunStatus.READY
    assert app.executed == []
    assert await Worker(store, app.registry).run_once() is True
    assert (await store.get_run(run.id)).status is RunStatus.COMPLETED


async def test_the_worker_logs_one_line_per_claim_resume_and_outcome(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    app = App(calls(DEL), "done", calls(("c9", "delete_file", '{"path": "/boom"}')))
    ok = await start_run(store, app.registry, "ops", "x", started_by="a")
    await store.decide(ok.id, "c1", Decision.approve(), decided_by="b")
    worker = Worker(store, app.registry, worker_id="w7")
    with caplog.at_level(logging.INFO, logger="golem.durable.worker"):
        assert await worker.run_once()
    lines = [r.getMessage() for r in caplog.records if r.name == "golem.durable.worker"]
    assert lines == [
        f"worker w7 claimed run {ok.id} (agent ops)",
        f"worker w7 resuming run {ok.id}",
        f"worker w7: run {ok.id} completed",
    ]
    caplog.clear()
    bad = await start_run(store, app.registry, "ops", "x", started_by="a")
    await store.decide(bad.id, "c9", Decision.approve(), decided_by="b")
    with caplog.at_level(logging.INFO, logger="golem.durable.worker"):
        assert await worker.run_once()
    failed = [
        r for r in caplog.records if r.name == "golem.durable.worker" and "failed" in r.getMessage()
    ]
    assert len(failed) == 1
    assert failed[0].levelno == logging.WARNING
    assert "disk on fire" in failed[0].getMessage()


async def test_the_worker_sweeps_expired_calls_and_resumes_with_the_denial(store: Store) -> None:
    app = App(calls(DEL), "Too late then.")
    run = await start_run(store, app.registry, "ops", "x", started_by="a", expires_in=0.01)
    worker = Worker(store, app.registry, sweep_interval=0)
    report = await worker.sweep(now=utc_now() + timedelta(seconds=1))
    assert report == SweepReport(expired=[run.id], interrupted=[])
    assert await worker.run_once()
    assert app.executed == []
    decided = (await store.get_run(run.id)).calls[0].decision
    assert decided is not None
    assert (decided.reason, decided.decided_by) == ("expired", EXPIRY_ACTOR)
    denial = [m.content for m in app.model.requests[-1].messages if m.role == "tool"]
    assert denial == [
        "Your tool call was denied: expired. Do not call it again; continue without its result."
    ]


async def test_losing_the_lease_mid_resume_abandons_the_run(store: Store) -> None:
    """The heartbeat finds the lease gone (swept as interrupted) and cancels the resume."""
    app = App(calls(DEL), "never reached")
    app.gate = asyncio.Event()  # the approved re-run blocks until the test releases it
    run = await start_run(store, app.registry, "ops", "x", started_by="a")
    await store.decide(run.id, "c1", Decision.approve(), decided_by="b")
    worker = Worker(store, app.registry, worker_id="w1", lease_seconds=0.3, sweep_interval=3600)
    task = asyncio.create_task(worker.run_once())
    await asyncio.wait_for(app.started.wait(), 10)
    assert await store.sweep_interrupted(utc_now() + timedelta(hours=1)) == [run.id]
    assert await asyncio.wait_for(task, 10) is True
    assert not app.gate.is_set(), "the resume ended by cancellation, not by the tool returning"
    got = await store.get_run(run.id)
    assert got.status is RunStatus.INTERRUPTED
    assert app.model.remaining == 1, "no model call followed the lost lease"
    assert len(app.executed) == 1


@pytest.mark.serial  # a 1 s lease renewed under a second worker's load ran out (make test, -n 2)
async def test_a_long_resume_keeps_its_lease_alive(store: Store) -> None:
    app = App(calls(DEL), "finally")
    app.gate = asyncio.Event()
    run = await start_run(store, app.registry, "ops", "x", started_by="a")
    await store.decide(run.id, "c1", Decision.approve(), decided_by="b")
    worker = Worker(store, app.registry, worker_id="w1", lease_seconds=1, sweep_interval=3600)
    task = asyncio.create_task(worker.run_once())
    await asyncio.wait_for(app.started.wait(), 10)
    first = (await store.get_run(run.id)).lease_expires_at
    assert first is not None

    async def renewed() -> bool:
        return (await store.get_run(run.id)).lease_expires_at != first

    await eventually(renewed, 10, "the lease to be renewed")
    assert await store.sweep_interrupted() == [], "a renewed lease is not swept"
    app.gate.set()
    assert await asyncio.wait_for(task, 10) is True
    assert (await store.get_run(run.id)).status is RunStatus.COMPLETED


async def test_run_forever_processes_ready_runs_until_stopped(store: Store) -> None:
    app = App(calls(DEL), calls(DEL), "one", "two")
    ids = []
    for _ in range(2):
        run = await start_run(store, app.registry, "ops", "x", started_by="a")
        ids.append(run.id)
    stop = asyncio.Event()
    worker = Worker(store, app.registry, sweep_interval=0)
    task = asyncio.create_task(worker.run_forever(poll_interval=0.02, stop_event=stop))
    try:
        for run_id in ids:
            await store.decide(run_id, "c1", Decision.approve(), decided_by="b")

        async def all_done() -> bool:
            return [(await store.get_run(i)).status for i in ids] == [RunStatus.COMPLETED] * 2

        await eventually(all_done, 10, "both runs to complete")
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
    assert [c for c, _, _ in app.executed] == ["c1", "c1"]


class _ClaimsFail:
    """A store with nothing to sweep whose claims raise `failures` in turn, then find
    nothing; it sets `stop` on the second claim after the failures."""

    def __init__(self, failures: list[StoreError], stop: asyncio.Event) -> None:
        self.failures, self.stop, self.calls = failures, stop, 0

    async def sweep_expired(self, now: Any = None) -> list[str]:
        return []

    async def sweep_interrupted(self, now: Any = None) -> list[str]:
        return []

    async def claim_ready(self, *a: Any, **kw: Any) -> None:
        self.calls += 1
        if self.calls <= len(self.failures):
            raise self.failures[self.calls - 1]
        if self.calls >= len(self.failures) + 2:
            self.stop.set()


BAD = (float("inf"), float("nan"), 1e12, MAX_SECONDS * 2, -1, 0)


@pytest.mark.parametrize("bad", BAD)
async def test_durations_out_of_range_are_value_errors_and_save_nothing(
    store: Store, bad: float
) -> None:
    for kw in ({"lease_seconds": bad}, {"sweep_interval": bad}):
        if kw != {"sweep_interval": 0}:  # a sweep on every poll is allowed
            with pytest.raises(ValueError, match=f"{next(iter(kw))} must be a number of seconds"):
                Worker(store, {}, **kw)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="poll_interval must be a number of seconds"):
        await Worker(store, {}).run_forever(poll_interval=bad, stop_event=asyncio.Event())
    app = App(calls(DEL))
    as_delta = [timedelta(seconds=bad)] if math.isfinite(bad) and bad < 1e11 else []
    for expiry in [bad, *as_delta]:
        with pytest.raises(ValueError, match="expires_in must be a number of seconds"):
            await start_run(store, app.registry, "ops", "go", started_by="a", expires_in=expiry)
    assert await store.list_runs() == []


def test_a_worker_takes_the_longest_lease_and_a_fresh_id(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "x.db")
    assert Worker(store, {}, lease_seconds=MAX_SECONDS).lease_seconds == MAX_SECONDS
    w = Worker(store, {})
    assert w.actor == f"worker:{w.worker_id}"
    assert w.worker_id != Worker(store, {}).worker_id


def test_load_registry_accepts_a_mapping_or_a_factory(monkeypatch: pytest.MonkeyPatch) -> None:
    app = App()
    mod = types.ModuleType("golem_test_registry_mod")
    mod.registry = app.registry  # type: ignore[attr-defined]
    mod.make = lambda: app.registry  # type: ignore[attr-defined]
    mod.bad = {"x": 1}  # type: ignore[attr-defined]
    mod.number = 3  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    assert load_registry(f"{mod.__name__}:registry") is app.registry
    assert load_registry(f"{mod.__name__}:make") is app.registry
    with pytest.raises(ValueError, match="entry 'x' is int, want AgentEntry"):
        load_registry(f"{mod.__name__}:bad")
    with pytest.raises(ValueError, match="got int, want a mapping"):
        load_registry(f"{mod.__name__}:number")
    with pytest.raises(ValueError, match="want module:attribute"):
        load_registry("no_colon")
    with pytest.raises(AttributeError):
        load_registry(f"{mod.__name__}:missing")


async def test_a_pause_whose_calls_share_an_id_is_saved_with_an_id_for_each(store: Store) -> None:
    twice = calls(("c1", "delete_file", '{"path": "/a"}'), ("c1", "delete_file", '{"path": "/b"}'))
    app = App(twice)
    run = await start_run(store, app.registry, "ops", "x", started_by="alice")
    assert run.status is RunStatus.PENDING
    assert [(c.call_id, c.args) for c in run.calls] == [
        ("c1", '{"path": "/a"}'),
        ("c1_2", '{"path": "/b"}'),
    ]
    assert app.executed == []


GENUINE = "v1.k.approval.genuine"
OTHER_ARGS = "other arguments in the history than the approvers saw"


@pytest.mark.parametrize(
    ("held", "seal", "refused"),
    [
        ('{"path": "/tmp/a"}', "", ""),
        ('{"path":"/tmp/a"}', "", ""),  # compacted, as golem < 0.2 wrote histories
        ('{"path":  "/tmp/a"}', "", OTHER_ARGS),  # the same value, other bytes
        ('{"path": "/tmp/a", "path": "/tmp/a"}', "", OTHER_ARGS),  # a duplicate key
        ('{"path": "/etc/passwd"}', "", OTHER_ARGS),  # rewritten behind the approvers' backs
        ('{"path": "/tmp/a"}', "v1.k.approval.forged", "another seal"),
    ],
    ids=["same", "compact", "other-bytes", "dup-key", "rewritten", "other-seal"],
)
async def test_a_history_whose_pending_call_differs_from_the_decided_one_is_not_resumed(
    store: Store, held: str, seal: str, refused: str
) -> None:
    """The approvers saw `DEL`'s argument bytes (and its seal, when sealed); the stored history
    holds `held` (sealed `seal`)."""
    app = App("done")
    decided = NewCall(
        "c1", CallKind.APPROVAL, "delete_file", DEL[2], seal=GENUINE if seal else None
    )
    asked = Message(role="assistant", tool_calls=[ToolCall("c1", DEL[1], held, seal=seal)])
    history = dumps_history([Message(role="user", content="x"), asked])
    await store.save_pending(
        NewRun(id="r1", agent="ops", conversation_id="conv", history=history, calls=(decided,))
    )
    assert (await store.get_run("r1")).calls[0].seal == decided.seal
    await store.decide("r1", "c1", Decision.approve(), decided_by="b")
    assert await Worker(store, app.registry).run_once()
    run = await store.get_run("r1")
    if not refused:
        assert run.status is RunStatus.COMPLETED
        assert [path for _, path, _ in app.executed] == ["/tmp/a"]
        return
    assert run.status is RunStatus.FAILED
    assert refused in run.outcome.error  # type: ignore[union-attr]
    assert app.executed == []


async def test_an_approval_with_edited_args_runs_them_or_refuses_to_run_the_original(
    store: Store,
) -> None:
    from golem.deferred import Approval

    app = App(calls(DEL), "done")
    run = await start_run(store, app.registry, "ops", "x", started_by="a")
    edited = Decision.approve(args={"path": "/tmp/b"})
    await store.decide(run.id, "c1", edited, decided_by="b")
    assert await Worker(store, app.registry).run_once()
    got = await store.get_run(run.id)
    if "args" in getattr(Approval, "__dataclass_fields__", {}):  # golem can re-run edited calls
        assert got.status is RunStatus.COMPLETED
        assert [p for _, p, _ in app.executed] == ["/tmp/b"]
    else:
        assert got.status is RunStatus.FAILED
        assert got.outcome is not None
        assert "edited arguments" in got.outcome.error
        assert app.executed == []


async def test_a_spell_of_store_failures_is_logged_once_not_every_poll(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A database that refuses claims poll after poll (read-only, busy, away) gets one
    traceback for the spell, one more when the failure changes, and one line when it ends."""
    failures: list[StoreError] = [StoreReadOnly("read-only")] * 5 + [StoreBusy("no slot")] * 3
    stop = asyncio.Event()
    flaky = _ClaimsFail(failures, stop)
    worker = Worker(flaky, {}, worker_id="w")  # type: ignore[arg-type]
    with caplog.at_level(logging.INFO, logger="golem.durable.worker"):
        await asyncio.wait_for(worker.run_forever(poll_interval=0.001, stop_event=stop), 10)
    failed = [r for r in caplog.records if "failed" in r.getMessage()]
    assert [type(r.exc_info[1]) if r.exc_info else None for r in failed] == [
        StoreReadOnly,
        StoreBusy,
    ]
    assert flaky.calls == 10, "it polled on through every failure"
    back = [r for r in caplog.records if "work again" in r.getMessage()]
    assert len(back) == 1
    assert "8 failure(s)" in back[0].getMessage()
