"""`Store.audit_page`: the audit view's query, alike on SQLite and PostgreSQL (ADR 0077)."""

from __future__ import annotations

from typing import Any

import pytest

from golem.store import AuditAction, CallKind, Decision, NewCall, NewRun, Store
from golem.store._sql import SQLStore, Tx
from tests.store.backends import Backend


async def _runs(store: Store, spec: list[tuple[str, str]]) -> list[str]:
    """One pending run per (agent, started_by), IDs `r<n>-<agent>`."""
    ids = []
    for n, (agent, who) in enumerate(spec, 1):
        run_id = f"r{n}-{agent}"
        await store.save_pending(
            NewRun(
                id=run_id,
                agent=agent,
                conversation_id=run_id,
                history="[]",
                calls=(NewCall("c1", CallKind.APPROVAL, "t", "{}"),),
                started_by=who,
            )
        )
        ids.append(run_id)
    return ids


async def test_pages_walk_back_through_the_matching_entries(store: Store) -> None:
    ids = await _runs(store, [("a", "x"), ("b", "x"), ("a", "y"), ("c", "x"), ("a", "x")])
    await store.decide(ids[0], "c1", Decision.approve(), decided_by="Straße")
    everything = await store.changes_since(0, 100)
    want = [e.id for e in reversed(everything) if e.agent in {"a", "c"}]
    got: list[int] = []
    before = None
    while page := await store.audit_page(agents=["a", "c"], before=before, limit=2):
        assert len(page) <= 2
        got += [e.id for e in page]
        assert all(e.agent in {"a", "c"} for e in page)
        before = page[-1].id
    assert got == want
    # the filters: action, run ID part, actor part ignoring case (str.casefold: ß is ss)
    decided = await store.audit_page(action=AuditAction.DECIDED)
    assert [(e.run_id, e.actor) for e in decided] == [(ids[0], "Straße")]
    assert [e.actor for e in await store.audit_page(actor_contains="STRASSE")] == ["Straße"] * 2
    assert {e.run_id for e in await store.audit_page(run_contains="-a")} == {
        ids[0],
        ids[2],
        ids[4],
    }
    assert await store.audit_page(agents=[]) == []


async def test_many_agents_are_one_walk_and_give_the_same_pages(store: Store) -> None:
    await _runs(store, [(f"g{n % 5}", "x") for n in range(12)])
    few = ["g1", "g3"]
    many = [*few, *(f"none{n}" for n in range(40))]  # past one statement's 32 walks
    apart = [*few, *(f"g2-{n:02d}" for n in range(40))]  # g1 and g3 in different statements
    for agents in (few, many, apart):
        pages = []
        before = None
        while page := await store.audit_page(agents=agents, before=before, limit=3):
            pages.append([e.id for e in page])
            before = page[-1].id
        assert sum(len(p) for p in pages) == 5  # g1: runs 2, 7, 12; g3: 4, 9
    want = [e.id for e in await store.audit_page(agents=few)]
    assert want == [e.id for e in await store.audit_page(agents=many)]
    assert want == [e.id for e in await store.audit_page(agents=apart)]
    assert want[1:3] == [
        e.id for e in await store.audit_page(agents=apart, before=want[0], limit=2)
    ]


@pytest.mark.parametrize(
    "kw",
    [
        {"run_contains": "a\x00"},
        {"run_contains": "\ud800"},
        {"agents": ["a\x00"]},
        {"agents": ["\udfff", "nobody"]},
        {"actor_contains": "\x00"},
    ],
)
async def test_text_no_column_can_hold_matches_nothing(store: Store, kw: dict[str, Any]) -> None:
    # a NUL or a lone surrogate reached PostgreSQL as a statement error (a 500 in the view)
    await _runs(store, [("a", "x")])
    assert await store.audit_page(**kw) == []


@pytest.mark.parametrize("kw", [{"limit": 0}, {"before": -1}, {"before": 2**63}])
async def test_out_of_range_limits_and_cursors_are_value_errors(
    store: Store, kw: dict[str, Any]
) -> None:
    with pytest.raises(ValueError):
        await store.audit_page(**kw)


async def test_a_version_5_database_gains_the_agent_column_filled_in(backend: Backend) -> None:
    store = await backend.open()
    try:
        ids = await _runs(store, [("a", "x"), ("b", "x")])
        assert isinstance(store, SQLStore)

        def back_to_5(tx: Tx) -> None:
            tx.execute("DROP INDEX golem_audit_agent")
            tx.execute("ALTER TABLE golem_audit DROP COLUMN agent")
            tx.execute("DELETE FROM golem_schema_version WHERE version = 6")

        await store._submit(True, back_to_5)
    finally:
        await store.close()
    store = await backend.open()
    try:
        assert await store.schema_version() == 6
        assert [e.run_id for e in await store.audit_page(agents=["b"])] == [ids[1]]
    finally:
        await store.close()
