"""Store contract: the audit log, schema versions and migrations, and `open_store`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from golem.durable.store import (
    AuditAction,
    Decision,
    Outcome,
    RunNotFound,
    RunStatus,
    Store,
    open_store,
)
from golem.durable.store._schema import LATEST_VERSION, MIGRATIONS, Migration, migrate
from golem.durable.store.sqlite import SQLiteStore
from golem.errors import StoreError
from tests.support.durable.backends import Backend
from tests.support.durable.runs import T0, approval, external, later, make_run


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


# --------------------------------------------------------------------------- schema


async def test_every_backend_implements_the_store_protocol(store: Store) -> None:
    assert isinstance(store, Store)
    async with store as same:
        assert same is store


async def test_a_new_database_has_the_latest_schema_and_reopens_unchanged(
    backend: Backend,
) -> None:
    first = await backend.open()
    assert await first.schema_version() == LATEST_VERSION
    run = await first.save_pending(make_run(expires_at=T0))
    await first.close()
    again = await backend.open()
    try:
        assert await again.schema_version() == LATEST_VERSION
        assert (await again.get_run(run.id)).expires_at == T0
    finally:
        await again.close()


async def test_open_applies_only_missing_migrations(tmp_path: Path) -> None:
    """A database at version 1 gains version 2 on open; version 1 is not re-applied."""
    store = await SQLiteStore.open(tmp_path / "m.db")
    extra = Migration(
        LATEST_VERSION + 1, "test: extra table", ("CREATE TABLE golem_extra (x {ts})",)
    )
    try:

        def upgrade(tx: Any) -> int:
            return migrate(tx.conn, "sqlite", "now", (*MIGRATIONS, extra))

        assert await store._submit(True, upgrade) == LATEST_VERSION + 1
        assert await store._submit(True, upgrade) == LATEST_VERSION + 1
        rows = await store._submit(
            False, lambda tx: tx.fetch("SELECT version, description FROM golem_schema_version")
        )
        assert rows[-1] == (LATEST_VERSION + 1, "test: extra table")
        assert len(rows) == LATEST_VERSION + 1
        assert await store.schema_version() == LATEST_VERSION + 1
    finally:
        await store.close()


async def test_a_database_from_a_newer_golem_is_refused(backend: Backend) -> None:
    store = await backend.open()
    try:
        await store._submit(  # type: ignore[attr-defined]
            True,
            lambda tx: tx.run(
                "INSERT INTO golem_schema_version (version, description, applied_at) "
                "VALUES (?, ?, (SELECT MIN(applied_at) FROM golem_schema_version))",
                (99, "from the future"),
            ),
        )
    finally:
        await store.close()
    with pytest.raises(StoreError, match="schema is version 99, newer than this golem"):
        await backend.open()


# --------------------------------------------------------------------------- open_store


async def test_open_store_accepts_sqlite_urls_and_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for url, file in [
        ("sqlite:///rel.db", tmp_path / "rel.db"),
        (f"sqlite:///{tmp_path}/abs.db", tmp_path / "abs.db"),
        (str(tmp_path / "plain.db"), tmp_path / "plain.db"),
        (tmp_path / "pathlike.db", tmp_path / "pathlike.db"),
    ]:
        store = await open_store(url)
        try:
            assert isinstance(store, SQLiteStore)
            assert store.path.resolve() == file.resolve()
            assert file.exists()
        finally:
            await store.close()


async def test_open_store_rejects_unusable_urls(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unsupported URL"):
        await open_store("mysql://x/y")
    with pytest.raises(ValueError, match="names no database file"):
        await open_store("sqlite://:memory:")
    with pytest.raises(ValueError, match="database file path"):
        SQLiteStore(":memory:")
    with pytest.raises(StoreError, match="does not exist"):
        await open_store(tmp_path / "missing-dir" / "x.db")


async def test_a_closed_store_refuses_use(tmp_path: Path) -> None:
    store = await SQLiteStore.open(tmp_path / "c.db")
    await store.close()
    with pytest.raises(StoreError, match="closed"):
        await store.get_run("x")


async def test_sqlite_uses_wal_and_a_busy_timeout(tmp_path: Path) -> None:
    import sqlite3

    store = await SQLiteStore.open(tmp_path / "w.db", busy_timeout=7)
    try:
        pragma = lambda tx: tx.fetch("PRAGMA busy_timeout")  # noqa: E731
        assert await store._submit(True, pragma) == [(7000,)]
    finally:
        await store.close()
    conn = sqlite3.connect(tmp_path / "w.db")
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    finally:
        conn.close()


@pytest.mark.parametrize("version", range(2, LATEST_VERSION))  # v2: histories in a table
async def test_a_database_at_an_older_version_migrates_and_keeps_its_runs(
    tmp_path: Path, version: int
) -> None:
    """A database at any older version gains the rest on open; its runs stay readable."""
    import sqlite3

    from golem.durable.store import CallKind, NewCall
    from tests.support.durable.runs import make_run

    path = tmp_path / "old.db"
    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute("PRAGMA journal_mode = WAL")

    class _Raw:
        def fetch(self, sql: str, params: Any = ()) -> list[Any]:
            return raw.execute(sql, params).fetchall()

        def execute(self, sql: str, params: Any = ()) -> int:
            return raw.execute(sql, params).rowcount

    ts = "2030-01-01T00:00:00.000000Z"
    raw.execute("BEGIN IMMEDIATE")
    assert migrate(_Raw(), "sqlite", ts, MIGRATIONS[:version]) == version
    raw.execute(
        "INSERT INTO golem_runs (id, agent, conversation_id, status, deps_ref, started_by, "
        "created_at, updated_at) VALUES ('old', 'ops', 'conv', 'pending', 'null', 'alice', ?, ?)",
        (ts, ts),
    )
    raw.execute("INSERT INTO golem_histories (run_id, history) VALUES ('old', '[]')")
    raw.execute(
        "INSERT INTO golem_calls (run_id, call_id, position, kind, tool_name, args, reason) "
        "VALUES ('old', 'c1', 0, 'approval', 'pay', '{}', '')"
    )
    raw.execute("COMMIT")
    raw.close()
    store = await SQLiteStore.open(path)
    try:
        assert await store.schema_version() == LATEST_VERSION
        old = await store.get_run("old")
        assert (old.status, old.trace_context, [c.call_id for c in old.calls]) == (
            RunStatus.PENDING, "", ["c1"]
        )  # fmt: skip
        sealed = NewCall("c1", CallKind.APPROVAL, "pay", "{}", seal="v1.k.approval.x")
        run = await store.save_pending(
            make_run(sealed, trace_context="00-" + "1" * 32 + "-" + "2" * 16 + "-01")
        )
        got = await store.get_run(run.id)
        assert (got.calls[0].seal, got.trace_context) == ("v1.k.approval.x", run.trace_context)
    finally:
        await store.close()
