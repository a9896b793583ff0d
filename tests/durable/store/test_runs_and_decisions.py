"""Store contract: saving runs, reading and filtering them, and deciding their calls."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import datetime
from typing import Any

import pytest

from golem.durable.store import (
    EXPIRY_ACTOR,
    AuditAction,
    CallExpired,
    CallKind,
    CallNotFound,
    Decision,
    DecisionConflict,
    DecisionKind,
    InvalidDecision,
    Outcome,
    RunNotFound,
    RunNotPending,
    RunStatus,
    Store,
)
from golem.errors import StoreError
from tests.support.durable.backends import Backend
from tests.support.durable.runs import approval, external, later, make_run

# --------------------------------------------------------------------------- saving


async def test_save_pending_round_trips_every_field(store: Store) -> None:
    args = '{"path":  "/etc/x", "n": 1.50}'  # odd spacing and number form must survive
    run = make_run(
        approval("c1", args=args, reason="deletes need sign-off"),
        external("c2", reason="job-17", deadline=later(30)),
        deps_ref={"tenant": "acme", "ids": [1, 2]},
        expires_at=later(60),
    )
    saved = await store.save_pending(run)
    assert saved == await store.get_run(run.id)
    assert saved.status is RunStatus.PENDING
    assert (saved.agent, saved.conversation_id, saved.history) == (
        "ops",
        run.conversation_id,
        run.history,
    )
    assert saved.deps_ref == {"tenant": "acme", "ids": [1, 2]}
    assert saved.started_by == "alice"
    assert saved.expires_at == later(60)
    assert saved.parent_run_id is None
    assert saved.child_run_id is None
    assert saved.outcome is None
    assert saved.lease_owner is None
    c1, c2 = saved.calls
    assert (c1.call_id, c1.position, c1.kind, c1.tool_name, c1.args, c1.reason) == (
        "c1",
        0,
        CallKind.APPROVAL,
        "delete_file",
        args,
        "deletes need sign-off",
    )
    assert c1.deadline == later(60), "a call without its own deadline takes the run's"
    assert (c2.call_id, c2.position, c2.kind, c2.reason, c2.deadline) == (
        "c2",
        1,
        CallKind.EXTERNAL,
        "job-17",
        later(30),
    )
    assert saved.undecided == saved.calls
    assert saved.created_at.tzinfo is not None
    assert saved.conversation == run.history


async def test_save_pending_rejects_bad_runs(store: Store) -> None:
    with pytest.raises(ValueError, match="no pending calls"):
        await store.save_pending(replace(make_run(), calls=()))
    with pytest.raises(ValueError, match='call ID "c1" appears more than once'):
        await store.save_pending(make_run(approval("c1"), external("c1")))
    with pytest.raises(ValueError, match="timezone-aware"):
        await store.save_pending(make_run(expires_at=datetime(2030, 1, 1)))
    with pytest.raises(ValueError, match="JSON"):
        await store.save_pending(make_run(deps_ref={"x": object()}))
    for bad in (float("nan"), float("inf"), float("-inf")):
        with pytest.raises(ValueError, match="JSON"):
            await store.save_pending(make_run(deps_ref={"x": [bad]}))
    run = await store.save_pending(make_run())
    with pytest.raises(ValueError, match="already exists"):
        await store.save_pending(make_run(id=run.id))
    assert len(await store.list_runs()) == 1, "rejected runs leave nothing behind"


async def test_save_finished_records_completed_and_failed_runs(store: Store) -> None:
    done = await store.save_finished(
        replace(make_run(), calls=()), Outcome.completed({"answer": 42}, '[{"role":"user"}]')
    )
    assert done.status is RunStatus.COMPLETED
    assert done.outcome is not None
    assert done.outcome.output == {"answer": 42}
    assert done.conversation == '[{"role":"user"}]'
    failed = await store.save_finished(replace(make_run(), calls=()), Outcome.failed("boom"))
    assert failed.status is RunStatus.FAILED
    assert failed.outcome is not None
    assert failed.outcome.error == "boom"
    assert [e.action for e in await store.audit(done.id)] == [
        AuditAction.CREATED,
        AuditAction.COMPLETED,
    ]
    with pytest.raises(ValueError, match="has pending calls"):
        await store.save_finished(make_run(), Outcome.failed("x"))
    with pytest.raises(ValueError, match="completed or failed"):
        await store.save_finished(replace(make_run(), calls=()), Outcome.paused(make_run()))
    null = await store.save_finished(replace(make_run(), calls=()), Outcome.completed(None))
    assert (null.status, null.outcome.output if null.outcome else "-") == (
        RunStatus.COMPLETED,
        None,
    )


async def test_get_run_of_unknown_id_raises_run_not_found(store: Store) -> None:
    with pytest.raises(RunNotFound, match='run "nope" not found') as info:
        await store.get_run("nope")
    assert isinstance(info.value, StoreError)
    assert info.value.run_id == "nope"


# --------------------------------------------------------------------------- listing


async def test_list_runs_filters_and_orders_newest_first(store: Store) -> None:
    conv = "conv-shared"
    a = await store.save_pending(make_run(approval("c1", tool="rm"), conversation_id=conv))
    b = await store.save_pending(make_run(external("c1", tool="fetch"), agent="research"))
    c = await store.save_pending(make_run(approval("c1", tool="rm"), conversation_id=conv))
    await store.decide(c.id, "c1", Decision.approve(), decided_by="bob")

    ids = lambda runs: [r.id for r in runs]  # noqa: E731
    assert ids(await store.list_runs()) == [c.id, b.id, a.id]
    assert ids(await store.list_runs(status=RunStatus.PENDING)) == [b.id, a.id]
    assert ids(await store.list_runs(status=[RunStatus.READY, RunStatus.COMPLETED])) == [c.id]
    assert ids(await store.list_runs(status=[])) == []
    assert ids(await store.list_runs(agent="research")) == [b.id]
    assert ids(await store.list_runs(conversation_id=conv)) == [c.id, a.id]
    assert ids(await store.list_runs(tool_name="rm", status=RunStatus.PENDING)) == [a.id]
    assert ids(await store.list_runs(tool_name="nothing")) == []
    assert ids(await store.list_runs(limit=2)) == [c.id, b.id]
    assert ids(await store.list_runs(limit=2, offset=2)) == [a.id]
    listed = await store.list_runs(status=RunStatus.READY)
    assert listed[0].calls[0].decision is not None, "listed runs carry their decisions"
    with pytest.raises(ValueError, match="limit"):
        await store.list_runs(limit=-1)


# --------------------------------------------------------------------------- deciding


async def test_each_decision_kind_is_recorded_with_identity_and_time(store: Store) -> None:
    run = await store.save_pending(
        make_run(approval("a1"), approval("a2"), external("e1"), external("e2"))
    )
    d1 = await store.decide(run.id, "a1", Decision.approve(), decided_by="bob", now=later(1))
    d2 = await store.decide(run.id, "a2", Decision.deny("too risky"), decided_by="carol")
    d3 = await store.decide(run.id, "e1", Decision.external("result text"), decided_by="svc")
    d4 = await store.decide(run.id, "e2", Decision.deny(), decided_by="bob")
    assert (d1.kind, d1.decided_by, d1.decided_at, d1.reason, d1.text) == (
        DecisionKind.APPROVE,
        "bob",
        later(1),
        "",
        "",
    )
    assert (d2.kind, d2.reason, d2.decided_by) == (DecisionKind.DENY, "too risky", "carol")
    assert (d3.kind, d3.text) == (DecisionKind.EXTERNAL, "result text")
    assert (d4.kind, d4.reason) == (DecisionKind.DENY, "")
    got = await store.get_run(run.id)
    assert [c.decision for c in got.calls] == [d1, d2, d3, d4]
    empty = await store.save_pending(make_run(external("e1")))
    d = await store.decide(empty.id, "e1", Decision.external(""), decided_by="svc")
    assert (d.kind, d.text) == (DecisionKind.EXTERNAL, "")  # an empty result is a result
    assert (await store.get_run(empty.id)).status is RunStatus.READY


async def test_run_becomes_ready_only_when_every_call_is_decided(store: Store) -> None:
    run = await store.save_pending(make_run(approval("c1"), external("c2")))
    await store.decide(run.id, "c1", Decision.approve(), decided_by="bob")
    assert (await store.get_run(run.id)).status is RunStatus.PENDING
    await store.decide(run.id, "c2", Decision.external("ok"), decided_by="bob")
    ready = await store.get_run(run.id)
    assert ready.status is RunStatus.READY
    assert ready.undecided == ()
    assert [e.action for e in await store.audit(run.id)][-2:] == [
        AuditAction.DECIDED,
        AuditAction.READY,
    ]


async def test_repeating_the_same_decision_is_an_idempotent_no_op(store: Store) -> None:
    run = await store.save_pending(make_run(approval("c1"), approval("c2")))
    first = await store.decide(run.id, "c1", Decision.deny("no"), decided_by="bob")
    again = await store.decide(run.id, "c1", Decision.deny("no"), decided_by="carol")
    assert again == first, "the existing decision (bob's) is returned unchanged"
    await store.decide(run.id, "c2", Decision.approve(), decided_by="bob")
    # the run is READY now: a repeated click still answers with the recorded decision
    assert await store.decide(run.id, "c2", Decision.approve(), decided_by="bob") is not None
    decided = [e for e in await store.audit(run.id) if e.action is AuditAction.DECIDED]
    assert len(decided) == 2, "repeats append no audit entry"


REFUSED = {  # run (else the one saved), call, decision, decided_by or now, error, its message
    "unknown-run": ("missing", "a", Decision.approve(), {}, RunNotFound, 'run "missing" not found'),
    "unknown-call": ("", "zz", Decision.approve(), {}, CallNotFound, 'has no pending call "zz"'),
    "no-decider": ("", "a", Decision.approve(), {"decided_by": ""}, ValueError, "decided_by"),
    "naive-time": ("", "a", Decision.approve(), {"now": datetime(2030, 1, 1)}, ValueError,
                   "timezone-aware"),
    "approve-external": ("", "e", Decision.approve(), {}, InvalidDecision,
                         r'call "e" .* waits for an external result'),
    "answer-approval": ("", "a", Decision.external("x"), {}, InvalidDecision,
                        r'call "a" .* waits for approval'),
    "conflict": ("", "d", Decision.deny("wait"), {}, DecisionConflict,
                 r'call "d" .* already decided'),
    "other-reason": ("", "n", Decision.deny("two"), {}, DecisionConflict, "already decided"),
}  # fmt: skip


@pytest.mark.parametrize(
    ("run_id", "call", "decision", "kw", "error", "match"), REFUSED.values(), ids=REFUSED
)
async def test_a_refused_decision_changes_nothing(
    store: Store, run_id: str, call: str, decision: Decision, kw: dict[str, Any],
    error: type[Exception], match: str,
) -> None:  # fmt: skip
    calls = (approval("a"), external("e"), approval("d"), approval("n"))
    run = await store.save_pending(make_run(*calls))
    first = await store.decide(run.id, "d", Decision.approve(), decided_by="bob")
    await store.decide(run.id, "n", Decision.deny("one"), decided_by="bob")
    before = (await store.get_run(run.id), await store.audit(run.id))
    with pytest.raises(error, match=match) as info:
        await store.decide(run_id or run.id, call, decision, **{"decided_by": "carol", **kw})
    if isinstance(info.value, DecisionConflict) and call == "d":
        assert info.value.existing == first
    if isinstance(info.value, CallNotFound):
        assert (info.value.run_id, info.value.call_id) == (run.id, call)
    assert (await store.get_run(run.id), await store.audit(run.id)) == before
    # a denial fits both kinds; repeating a decision is no conflict
    await store.decide(run.id, "e", Decision.deny("not needed"), decided_by="bob")
    assert await store.decide(run.id, "d", Decision.approve(), decided_by="carol") == first


async def test_decisions_on_a_run_that_is_no_longer_pending_raise_run_not_pending(
    store: Store,
) -> None:
    run = await store.save_pending(make_run(approval("c1")))
    await store.decide(run.id, "c1", Decision.approve(), decided_by="bob")
    for status in (RunStatus.READY, RunStatus.RUNNING, RunStatus.COMPLETED):
        if status is RunStatus.RUNNING:
            assert await store.claim_ready("w1", 30) is not None
        if status is RunStatus.COMPLETED:
            await store.finish(run.id, "w1", Outcome.completed("done"))
        with pytest.raises(RunNotPending, match=f"is {status.value}, not pending") as info:
            await store.decide(run.id, "c1", Decision.deny("late"), decided_by="carol")
        assert info.value.status is status
    finished = await store.save_finished(replace(make_run(), calls=()), Outcome.failed("x"))
    with pytest.raises(CallNotFound):
        await store.decide(finished.id, "c1", Decision.approve(), decided_by="bob")


async def test_concurrent_deciders_record_exactly_one_decision_per_call(
    backend: Backend,
) -> None:
    """Many store instances race to decide the same calls; one decision per call wins."""
    stores = [await backend.open() for _ in range(4)]
    try:
        run = await stores[0].save_pending(make_run(*(approval(f"c{i}") for i in range(6))))

        async def decide(k: int, call: str) -> str:
            decision = Decision.approve() if k % 2 else Decision.deny(f"by {k}")
            try:
                await stores[k % 4].decide(run.id, call, decision, decided_by=f"user{k}")
            except (DecisionConflict, RunNotPending):
                return "rejected"
            return "ok"

        results = await asyncio.gather(*(decide(k, f"c{i}") for i in range(6) for k in range(8)))
        got = await stores[1].get_run(run.id)
        assert got.status is RunStatus.READY
        assert all(c.decision is not None for c in got.calls)
        audit = await stores[2].audit(run.id)
        assert sum(e.action is AuditAction.DECIDED for e in audit) == 6
        assert sum(e.action is AuditAction.READY for e in audit) == 1
        # every "ok" that is not the winner was an idempotent repeat of the winner
        assert results.count("ok") >= 6
    finally:
        for s in stores:
            await s.close()


async def test_the_last_of_two_concurrent_decisions_always_readies_the_run(
    backend: Backend,
) -> None:
    """Two approvers decide a run's two calls at the same moment through two stores (two
    connections), run after run: each run becomes READY exactly once, after both decisions,
    and the audit log has no gaps."""
    stores = [await backend.open() for _ in range(2)]
    try:
        start = await stores[0].last_change_id()
        runs = [
            await stores[0].save_pending(make_run(approval("a"), approval("b"))) for _ in range(20)
        ]
        for run in runs:
            await asyncio.gather(
                stores[0].decide(run.id, "a", Decision.approve(), decided_by="ann"),
                stores[1].decide(run.id, "b", Decision.deny("no"), decided_by="bob"),
            )
        for run in runs:
            got = await stores[1].get_run(run.id)
            assert got.status is RunStatus.READY
            audit = [e.action for e in await stores[0].audit(run.id)]
            assert audit == [
                AuditAction.CREATED,
                AuditAction.DECIDED,
                AuditAction.DECIDED,
                AuditAction.READY,
            ]
        entries = await stores[0].changes_since(start, limit=1000)
        assert [e.id for e in entries] == list(range(start + 1, start + 1 + len(entries)))
    finally:
        for s in stores:
            await s.close()


# --------------------------------------------------------------------------- expiry


async def test_sweep_expired_denies_overdue_calls_and_readies_the_run(store: Store) -> None:
    run = await store.save_pending(
        make_run(approval("c1", deadline=later(10)), external("c2", deadline=later(20)))
    )
    assert await store.sweep_expired(later(9)) == []
    assert await store.sweep_expired(later(10)) == [run.id]
    half = await store.get_run(run.id)
    assert half.status is RunStatus.PENDING
    d = half.call("c1").decision
    assert d is not None
    assert (d.kind, d.reason, d.decided_by, d.decided_at) == (
        DecisionKind.DENY,
        "expired",
        EXPIRY_ACTOR,
        later(10),
    )
    assert half.call("c2").decision is None
    assert await store.sweep_expired(later(15)) == [], "nothing new is overdue"
    assert await store.sweep_expired(later(25)) == [run.id]
    done = await store.get_run(run.id)
    assert done.status is RunStatus.READY
    entries = await store.audit(run.id)
    assert [(e.action, e.actor, e.detail.get("call_id")) for e in entries[1:]] == [
        (AuditAction.EXPIRED, EXPIRY_ACTOR, "c1"),
        (AuditAction.EXPIRED, EXPIRY_ACTOR, "c2"),
        (AuditAction.READY, EXPIRY_ACTOR, None),
    ]


async def test_sweep_expired_spares_decided_calls_and_calls_without_deadline(
    store: Store,
) -> None:
    decided = await store.save_pending(make_run(approval("c1", deadline=later(1))))
    await store.decide(decided.id, "c1", Decision.approve(), decided_by="bob")
    forever = await store.save_pending(make_run(approval("c1")))
    mixed = await store.save_pending(make_run(approval("c1", deadline=later(1)), approval("c2")))
    assert await store.sweep_expired(later(1000)) == [mixed.id]
    assert (await store.get_run(decided.id)).call("c1").decision is not None
    assert (await store.get_run(decided.id)).call("c1").decision.kind is DecisionKind.APPROVE  # type: ignore[union-attr]
    assert (await store.get_run(forever.id)).status is RunStatus.PENDING
    m = await store.get_run(mixed.id)
    assert m.status is RunStatus.PENDING
    assert m.call("c2").decision is None


async def test_a_decision_after_the_deadline_raises_call_expired(store: Store) -> None:
    run = await store.save_pending(make_run(approval("c1", deadline=later(5)), approval("c2")))
    with pytest.raises(CallExpired, match=r'call "c1" .* expired') as info:
        await store.decide(run.id, "c1", Decision.approve(), decided_by="bob", now=later(6))
    assert isinstance(info.value, DecisionConflict)
    assert info.value.existing.decided_by == EXPIRY_ACTOR
    got = await store.get_run(run.id)
    assert got.call("c1").decision == info.value.existing, "the expiry denial was committed"
    # once denied as expired, any other decision keeps saying so, even after the run moved on
    await store.decide(run.id, "c2", Decision.approve(), decided_by="bob")
    with pytest.raises(CallExpired):
        await store.decide(run.id, "c1", Decision.approve(), decided_by="bob")
    assert await store.sweep_expired(later(100)) == []


async def test_only_the_field_of_the_decision_kind_is_kept(store: Store) -> None:
    from datetime import timedelta, timezone

    run = await store.save_pending(make_run(approval("c1"), approval("c2")))
    plus2 = timezone(timedelta(hours=2))
    d = await store.decide(
        run.id,
        "c1",
        Decision(DecisionKind.APPROVE, reason="ignored", text="ignored"),
        decided_by="bob",
        now=later(0).astimezone(plus2),
    )
    assert (d.reason, d.text) == ("", "")
    assert d.decided_at.utcoffset() == timedelta(0), "times come back in UTC"
    assert d.decided_at == later(0)
    assert await store.decide(run.id, "c1", Decision.approve(), decided_by="x") == d
    assert (await store.get_run(run.id)).call("c1").decision == d


async def test_paging_pending_calls_returns_each_once_oldest_first_while_runs_arrive(
    store: Store,
) -> None:
    first = [
        await store.save_pending(make_run(approval("a"), approval("b"), agent="ops"))
        for _ in range(7)
    ]
    await store.decide(first[2].id, "a", Decision.approve(), decided_by="z")  # one decided
    seen: list[tuple[str, str]] = []
    arrived: list[str] = []
    after = None
    while True:
        page = await store.list_pending_calls(after=after, limit=3)
        seen += [(c.run_id, c.call_id) for c in page.items]
        if len(arrived) < 3:  # a new run arrives between pages
            arrived.append((await store.save_pending(make_run(approval("n")))).id)
        if page.next_cursor is None:
            break
        after = page.next_cursor
    expected = [(r.id, c) for r in first for c in ("a", "b") if (r.id, c) != (first[2].id, "a")]
    assert seen[: len(expected)] == expected  # oldest run first, calls in position order
    assert seen[len(expected) :] == [(i, "n") for i in arrived]
    assert len(set(seen)) == len(seen)


async def test_list_runs_page_walks_every_run_once_in_both_directions(store: Store) -> None:
    ids = [
        (await store.save_pending(make_run(agent="ops" if i % 2 else "web"))).id for i in range(9)
    ]
    for newest_first, order in ((False, ids), (True, ids[::-1])):
        walked: list[str] = []
        after = None
        while True:
            page = await store.list_runs_page(after=after, limit=4, newest_first=newest_first)
            walked += [r.id for r in page.items]
            if page.next_cursor is None:
                break
            after = page.next_cursor
        assert walked == order
    ops = await store.list_runs_page(agent=["ops"], limit=100)
    assert [r.id for r in ops.items] == ids[1::2]
    assert ops.next_cursor is None
    assert all(r.history for r in ops.items)
    with pytest.raises(ValueError, match="cursor"):
        await store.list_runs_page(after="not-a-cursor")
    with pytest.raises(ValueError, match="cursor"):
        await store.list_pending_calls(after=page.next_cursor or "eyJ4IjoxfQ")


async def test_an_approval_with_edited_args_keeps_both_and_audits_the_change(
    store: Store,
) -> None:
    run = await store.save_pending(make_run(approval("c1", args='{"to": "alice", "cents": 500}')))
    record = await store.decide(
        run.id, "c1", Decision.approve(args={"to": "alice", "cents": 50}), decided_by="bob"
    )
    assert record.args == '{"to":"alice","cents":50}'
    got = (await store.get_run(run.id)).call("c1")
    assert got.args == '{"to": "alice", "cents": 500}'  # what the model asked stays
    assert got.decision is not None
    assert got.decision.args == record.args
    decided = [e for e in await store.audit(run.id) if e.action is AuditAction.DECIDED]
    assert decided[0].detail["original_args"] == '{"to": "alice", "cents": 500}'
    assert decided[0].detail["args"] == '{"to":"alice","cents":50}'
    again = await store.decide(
        run.id, "c1", Decision.approve(args='{"to":"alice","cents":50}'), decided_by="carol"
    )
    assert again == record  # the same edited approval is a repeat
    with pytest.raises(RunNotPending):
        await store.decide(run.id, "c1", Decision.approve(), decided_by="bob")


def test_edited_args_must_be_a_json_object_on_an_approval() -> None:
    with pytest.raises(InvalidDecision, match="JSON object"):
        Decision.approve(args="[1, 2]")
    with pytest.raises(InvalidDecision, match="valid JSON"):
        Decision.approve(args="{nope")
    with pytest.raises(InvalidDecision, match="approval only"):
        Decision(DecisionKind.DENY, args="{}")


async def test_get_run_limited_to_agents_reads_another_agents_run_as_missing(
    store: Store,
) -> None:
    # The service reads a run for an approver limited to some agents with `agents=`, so a
    # run of another agent is not found by the same statement as an ID no run has (ADR 0073).
    run = make_run(agent="ops")
    await store.save_pending(run)
    assert (await store.get_run(run.id, agents={"ops", "billing"})).id == run.id
    assert (await store.get_run(run.id, agents=None)).id == run.id
    for agents in ({"billing"}, set(), {"OPS"}, {"ops "}):
        with pytest.raises(RunNotFound, match=f'run "{run.id}" not found'):
            await store.get_run(run.id, agents=agents)
    with pytest.raises(RunNotFound):
        await store.get_run("nope", agents={"ops"})
