"""PostgreSQL's one-round-trip decision agrees with the full decision, whatever comes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from golem import new_id
from golem.durable.store import AuditAction, CallKind, Decision, NewCall, RunRecord, Store
from tests.support.durable.backends import Backend, backend_for
from tests.support.durable.runs import later, make_run

pytestmark = pytest.mark.postgres


@pytest.fixture
def pg(tmp_path: Path) -> Iterator[Backend]:
    with backend_for("postgres", tmp_path) as backend:
        yield backend


_DECISIONS = {
    "approve": Decision.approve(),
    "approve_edited": Decision.approve({"path": "/tmp/y"}),
    "deny": Decision.deny("no"),
    "deny_other": Decision.deny("not now"),
    "external": Decision.external("42"),
    "external_other": Decision.external("43"),
}

_call = st.tuples(
    st.sampled_from([CallKind.APPROVAL, CallKind.EXTERNAL]), st.none() | st.integers(1, 4)
)
_step = st.one_of(
    st.tuples(
        st.just("decide"),
        st.sampled_from(["c0", "c1", "c2", "c9"]),
        st.sampled_from(sorted(_DECISIONS)),
        st.sampled_from(["ann", "bob"]),
        st.integers(0, 5),
    ),
    st.tuples(st.just("claim"), st.just(""), st.just(""), st.just(""), st.integers(0, 5)),
)


async def _apply(
    store: Store, agent: str, run_id: str, step: tuple[str, str, str, str, int]
) -> Any:
    """What the step answered: a record's fields, or the exception's type and text."""
    op, call_id, decision, who, seconds = step
    try:
        if op == "claim":
            claimed = await store.claim_ready("w", 30, now=later(seconds), agents=[agent])
            return None if claimed is None else ("claimed", claimed.run.id)
        d = await store.decide(
            run_id, call_id, _DECISIONS[decision], decided_by=who, now=later(seconds)
        )
    except Exception as exc:  # the answer to compare
        return (type(exc).__name__, str(exc))
    return (d.call_id, d.kind, d.reason, d.text, d.decided_by, d.decided_at, d.args)


def _state(run: RunRecord) -> Any:
    calls = [
        (
            c.call_id,
            None
            if c.decision is None
            else (
                c.decision.kind,
                c.decision.reason,
                c.decision.text,
                c.decision.decided_by,
                c.decision.decided_at,
                c.decision.args,
            ),
        )
        for c in run.calls
    ]
    return run.status, run.lease_owner, calls


@settings(
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(calls=st.lists(_call, min_size=1, max_size=3), steps=st.lists(_step, min_size=1, max_size=8))
async def test_postgres_decides_exactly_as_the_full_transaction_does(
    pg: Backend,
    tmp_path: Path,
    calls: list[tuple[CallKind, int | None]],
    steps: list[tuple[str, str, str, str, int]],
) -> None:
    agent = f"a{new_id()}"  # claims of this example see only its own run
    run = make_run(
        *(
            NewCall(f"c{i}", kind, "tool", deadline=None if d is None else later(d))
            for i, (kind, d) in enumerate(calls)
        ),
        agent=agent,
    )
    sqlite_backend = Backend("sqlite", path=str(tmp_path / f"{new_id()}.db"))
    stores = [await sqlite_backend.open(), await pg.open()]
    try:
        answers = []
        for store in stores:
            await store.save_pending(run)
            answers.append([await _apply(store, agent, run.id, step) for step in steps])
        assert answers[1] == answers[0]
        sqlite_run, pg_run = [await s.get_run(run.id) for s in stores]
        assert _state(pg_run) == _state(sqlite_run)
        logs = [  # the time of CREATED is each save's own clock
            [
                (e.action, e.actor, None if e.action is AuditAction.CREATED else e.at, e.detail)
                for e in await s.audit(run.id)
            ]
            for s in stores
        ]
        assert logs[1] == logs[0]
    finally:
        for s in stores:
            await s.close()


async def test_two_deciders_held_at_the_run_row_still_ready_it(pg: Backend) -> None:
    """Another session holds the run's row while two approvers decide its two calls: once it
    lets go, the decisions take turns on the run and the second one readies it (each plain
    decision locks the run first, so the second sees the first's call decided)."""
    import asyncio

    import psycopg
    from psycopg.conninfo import make_conninfo

    from golem.durable.store import RunStatus
    from golem.durable.store.postgres import PostgresStore

    assert pg.dsn is not None
    app = f"golem-deciders-{new_id()[-8:]}"
    stores = [
        await PostgresStore.open(make_conninfo(pg.dsn, application_name=app), schema=pg.schema)
        for _ in range(2)
    ]
    try:
        run = await stores[0].save_pending(make_run(*(_approval(c) for c in ("a", "b"))))
        async with await psycopg.AsyncConnection.connect(pg.dsn, autocommit=True) as admin:
            await admin.execute("BEGIN")
            await admin.execute(
                f'SELECT 1 FROM "{pg.schema}".golem_runs WHERE id = %s FOR UPDATE', (run.id,)
            )
            deciding = [
                asyncio.ensure_future(s.decide(run.id, c, Decision.approve(), decided_by=c))
                for s, c in zip(stores, ("a", "b"), strict=True)
            ]
            async with asyncio.timeout(60):
                while True:  # both wait on the run's row
                    cur = await admin.execute(
                        "SELECT count(*) FROM pg_stat_activity "
                        "WHERE application_name = %s AND wait_event_type = 'Lock'",
                        (app,),
                    )
                    row = await cur.fetchone()
                    if row is not None and row[0] == 2:
                        break
                    await asyncio.sleep(0.02)
            await admin.execute("ROLLBACK")
        await asyncio.wait_for(asyncio.gather(*deciding), 60)
        got = await stores[1].get_run(run.id)
        assert got.status is RunStatus.READY
        actions = [e.action for e in await stores[0].audit(run.id)]
        assert actions.count(AuditAction.READY) == 1
    finally:
        for s in stores:
            await s.close()


def _approval(call_id: str) -> NewCall:
    return NewCall(call_id, CallKind.APPROVAL, "delete_file", '{"path": "/tmp/x"}')
