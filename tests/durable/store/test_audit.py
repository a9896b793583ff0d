"""The audit log and the global change log; `Store.audit_page`, the audit view's query, alike on
SQLite and PostgreSQL (ADR 0077)."""

from __future__ import annotations

from typing import Any

import pytest

from golem.durable.store import (
    AuditAction,
    CallKind,
    Decision,
    NewCall,
    NewRun,
    Outcome,
    RunNotFound,
    RunStatus,
    Store,
)
from tests.support.durable.backends import Backend
from tests.support.durable.runs import approval, external, later, make_run
from tests.support.store import behind_the_back


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
    while True:
        page = await store.audit_page(agents=["a", "c"], before=before, limit=2)
        assert len(page.entries) <= 2
        got += [e.id for e in page.entries]
        assert all(e.agent in {"a", "c"} for e in page.entries)
        if page.next_before is None:
            break
        before = page.next_before
    assert got == want
    # the filters: action, run ID part, actor part ignoring case (str.casefold: ß is ss)
    decided = (await store.audit_page(action=AuditAction.DECIDED)).entries
    assert [(e.run_id, e.actor) for e in decided] == [(ids[0], "Straße")]
    straße = (await store.audit_page(actor_contains="STRASSE")).entries
    assert [e.actor for e in straße] == ["Straße"] * 2
    assert {e.run_id for e in (await store.audit_page(run_contains="-a")).entries} == {
        ids[0],
        ids[2],
        ids[4],
    }
    assert (await store.audit_page(agents=[])).entries == []


async def test_many_agents_are_one_walk_and_give_the_same_pages(store: Store) -> None:
    await _runs(store, [(f"g{n % 5}", "x") for n in range(12)])
    few = ["g1", "g3"]
    many = [*few, *(f"none{n}" for n in range(40))]  # past one statement's 32 walks
    apart = [*few, *(f"g2-{n:02d}" for n in range(40))]  # g1 and g3 in different statements
    for agents in (few, many, apart):
        pages = []
        before = None
        while True:
            page = await store.audit_page(agents=agents, before=before, limit=3)
            pages.append([e.id for e in page.entries])
            if page.next_before is None:
                break
            before = page.next_before
        assert sum(len(p) for p in pages) == 5  # g1: runs 2, 7, 12; g3: 4, 9

    async def ids(agents: list[str], **kw: Any) -> list[int]:
        return [e.id for e in (await store.audit_page(agents=agents, **kw)).entries]

    want = await ids(few)
    assert want == await ids(many)
    assert want == await ids(apart)
    assert want[1:3] == await ids(apart, before=want[0], limit=2)


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
    assert (await store.audit_page(**kw)).entries == []


@pytest.mark.parametrize("kw", [{"limit": 0}, {"scan": 0}, {"before": -1}, {"before": 2**63}])
async def test_out_of_range_limits_and_cursors_are_value_errors(
    store: Store, kw: dict[str, Any]
) -> None:
    with pytest.raises(ValueError):
        await store.audit_page(**kw)


async def test_a_version_5_database_gains_the_agent_column_filled_in(backend: Backend) -> None:
    store = await backend.open()
    try:
        ids = await _runs(store, [("a", "x"), ("b", "x")])
    finally:
        await store.close()
    for sql in (
        "DROP INDEX golem_audit_agent",
        "ALTER TABLE golem_audit DROP COLUMN agent",
        "DELETE FROM golem_schema_version WHERE version = 6",
    ):
        behind_the_back(backend, sql)
    store = await backend.open()
    try:
        assert await store.schema_version() == 6
        assert [e.run_id for e in (await store.audit_page(agents=["b"])).entries] == [ids[1]]
    finally:
        await store.close()


async def test_a_rare_filter_looks_at_scan_entries_a_page_and_misses_none(store: Store) -> None:
    # A filter that matches rarely read back through every entry of the caller's agents in
    # one page (unbounded); a page now looks at `scan` entries beyond its own and says
    # where to go on, so paging reaches every match once with short (even empty) pages.
    ids = await _runs(store, [("a", "x")] * 9)
    for n in (1, 5):
        await store.decide(ids[n], "c1", Decision.approve(), decided_by="rare")
    entries = await store.changes_since(0, 100)
    want = [e.id for e in reversed(entries) if e.actor == "rare"]
    got, before, pages = [], None, []
    while True:
        page = await store.audit_page(actor_contains="RARE", before=before, limit=5, scan=3)
        pages.append(len(page.entries))
        got += [e.id for e in page.entries]
        if page.next_before is None:
            break
        assert before is None or page.next_before < before
        before = page.next_before
    assert got == want
    assert 0 in pages  # a stretch without a match: an empty page that is not the last
    assert len(pages) <= len(entries) // 3 + 1


async def test_audit_records_a_full_lifecycle_in_order(store: Store) -> None:
    run = await store.save_pending(make_run(approval("c1"), external("c2")))
    await store.decide(run.id, "c1", Decision.deny("risky"), decided_by="bob", now=later(1))
    await store.decide(run.id, "c2", Decision.external("v"), decided_by="svc", now=later(2))
    await store.claim_ready("w1", 10, now=later(3))
    await store.finish(run.id, "w1", Outcome.completed("fine"), now=later(4))
    entries = await store.audit(run.id)
    assert [(e.action, e.actor, e.detail) for e in entries] == [
        (
            AuditAction.CREATED,
            "alice",
            {
                "agent": "ops",
                "conversation_id": run.conversation_id,
                "status": "pending",
                "calls": ["c1", "c2"],
            },
        ),
        (AuditAction.DECIDED, "bob", {"call_id": "c1", "decision": "deny", "reason": "risky"}),
        (AuditAction.DECIDED, "svc", {"call_id": "c2", "decision": "external", "text": "v"}),
        (AuditAction.READY, "svc", {}),
        (
            AuditAction.CLAIMED,
            "worker:w1",
            {"worker_id": "w1", "lease_expires_at": later(13).isoformat()},
        ),
        (AuditAction.COMPLETED, "worker:w1", {}),
    ]
    assert [e.at for e in entries[1:]] == [later(1), later(2), later(2), later(3), later(4)]
    assert all(e.run_id == run.id for e in entries)
    ids = [e.id for e in entries]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    with pytest.raises(RunNotFound):
        await store.audit("nope")


async def test_changes_since_pages_through_the_global_log(backend: Backend) -> None:
    writer, reader = await backend.open(), await backend.open()
    try:
        assert await reader.last_change_id() == 0
        assert await reader.changes_since() == []
        a = await writer.save_pending(make_run())
        b = await writer.save_pending(make_run())
        await writer.decide(a.id, "c1", Decision.approve(), decided_by="bob")
        everything = await reader.changes_since(0, limit=1000)
        assert [(e.run_id, e.action) for e in everything] == [
            (a.id, AuditAction.CREATED),
            (b.id, AuditAction.CREATED),
            (a.id, AuditAction.DECIDED),
            (a.id, AuditAction.READY),
        ]
        assert await reader.last_change_id() == everything[-1].id
        page1 = await reader.changes_since(0, limit=2)
        page2 = await reader.changes_since(page1[-1].id, limit=2)
        assert page1 + page2 == everything
        assert await reader.changes_since(everything[-1].id) == []
        await writer.decide(b.id, "c1", Decision.deny(), decided_by="carol")
        new = await reader.changes_since(everything[-1].id)
        assert [(e.run_id, e.action, e.actor) for e in new] == [
            (b.id, AuditAction.DECIDED, "carol"),
            (b.id, AuditAction.READY, "carol"),
        ]
    finally:
        await writer.close()
        await reader.close()


async def test_changes_since_reads_each_runs_agent_status_and_parent_along(store: Store) -> None:
    # so that event streams and notifiers need not read every run to learn them
    run = await store.save_pending(make_run())
    await store.decide(run.id, "c1", Decision.approve(), decided_by="bob")
    await store.claim_ready("w1", 10)
    child = make_run()
    await store.finish(run.id, "w1", Outcome.paused(child))
    entries = await store.changes_since(0, limit=100)
    mine = [e for e in entries if e.run_id == run.id]
    assert {(e.agent, e.run_status, e.parent_run_id) for e in mine} == {
        ("ops", RunStatus.PAUSED, None)  # as the run is now, for every entry
    }
    theirs = [e for e in entries if e.run_id == child.id]
    assert theirs
    assert {(e.run_status, e.parent_run_id) for e in theirs} == {(RunStatus.PENDING, run.id)}
    assert all(e.run_status is None for e in await store.audit(run.id))  # not read along
