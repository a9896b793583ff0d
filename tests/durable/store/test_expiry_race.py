"""Store contract: a decision racing the expiry sweep through another connection."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from golem.durable.store import (
    EXPIRY_ACTOR,
    AuditAction,
    CallExpired,
    Decision,
    DecisionKind,
    NewCall,
    RunStatus,
    Store,
)
from tests.support.durable.backends import Backend
from tests.support.durable.runs import approval, later, make_run

DEADLINE = 10.0

DECISIONS = {
    "approve": Decision.approve(),
    "edited": Decision.approve({"path": "/tmp/y"}),  # takes the full transaction
    "deny": Decision.deny("no"),
}

CASES = list(
    itertools.product(
        (DEADLINE - 1, DEADLINE),  # decided in time / at the deadline (overdue itself)
        tuple(DECISIONS),
        ("alone", "sibling-overdue", "sibling-open"),
    )
)


def _sibling(how: str) -> tuple[NewCall, ...]:
    if how == "alone":
        return ()
    return (approval("c2", deadline=later(DEADLINE) if how == "sibling-overdue" else None),)


async def _decide(store: Store, run_id: str, decision: Decision, at: float) -> Any:
    try:
        return await store.decide(run_id, "c1", decision, decided_by="ann", now=later(at))
    except CallExpired as exc:
        return exc


async def test_a_decision_racing_the_expiry_sweep_has_exactly_one_outcome(
    backend: Backend,
) -> None:
    deciders = [await backend.open() for _ in range(2)]
    sweeper = await backend.open()
    try:
        start = await sweeper.last_change_id()
        # in turn each way round, then started together (either may commit first)
        plans = [(case, order) for order in ("decide", "sweep", "together") for case in CASES]
        runs = [
            await sweeper.save_pending(
                make_run(approval("c1", deadline=later(DEADLINE)), *_sibling(case[2]))
            )
            for case, _ in plans
        ]
        outcomes: set[tuple[str, bool]] = set()
        for i, (((at, kind, sibling), order), run) in enumerate(zip(plans, runs, strict=True)):
            decide = _decide(deciders[i % 2], run.id, DECISIONS[kind], at)
            sweep = sweeper.sweep_expired(now=later(DEADLINE))
            if order == "decide":
                answer = await decide
                swept = await sweep
            elif order == "sweep":
                swept = await sweep
                answer = await decide
            else:
                answer, swept = await asyncio.gather(decide, sweep)
            outcomes.add((order, isinstance(answer, CallExpired)))
            got = await sweeper.get_run(run.id)
            c1 = got.call("c1").decision
            assert c1 is not None, (at, kind, sibling)
            audit = await sweeper.audit(run.id)
            on_c1 = [
                e.action
                for e in audit
                if e.detail.get("call_id") == "c1"
                and e.action in (AuditAction.DECIDED, AuditAction.EXPIRED)
            ]
            if isinstance(answer, CallExpired):
                # the sweep (or the decision's own check at the deadline) expired it
                assert (c1.kind, c1.decided_by, c1.reason) == (
                    DecisionKind.DENY,
                    EXPIRY_ACTOR,
                    "expired",
                )
                assert on_c1 == [AuditAction.EXPIRED]
            else:
                assert at < DEADLINE, "a decision at its deadline never wins"
                assert answer.decided_by == "ann"
                assert (c1.kind, c1.decided_by, c1.args) == (
                    answer.kind,
                    "ann",
                    answer.args,
                )
                assert on_c1 == [AuditAction.DECIDED]
            expired_here = any(e.action is AuditAction.EXPIRED for e in audit)
            assert (run.id in swept) <= expired_here
            c2 = got.call("c2").decision if sibling != "alone" else None
            if sibling == "sibling-overdue":
                assert c2 is not None
                assert c2.decided_by == EXPIRY_ACTOR
            undecided = sibling == "sibling-open"
            assert got.status is (RunStatus.PENDING if undecided else RunStatus.READY)
            readies = sum(e.action is AuditAction.READY for e in audit)
            assert readies == (0 if undecided else 1)
            # every sweep in the race is finished: nothing is left overdue for a later one
            assert await sweeper.sweep_expired(now=later(DEADLINE)) == []
        assert {("decide", False), ("decide", True), ("sweep", True)} <= outcomes
        entries = await sweeper.changes_since(start, limit=10_000)
        assert [e.id for e in entries] == list(range(start + 1, start + 1 + len(entries)))
    finally:
        for s in (*deciders, sweeper):
            await s.close()
