"""`_schema`: a new database has the latest schema; an older one gains only the migrations it
lacks, keeping its runs; a newer one is refused."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from golem.durable.store import CallKind, NewCall, RunStatus, Store
from golem.durable.store._schema import LATEST_VERSION, MIGRATIONS, Migration, migrate
from golem.durable.store.sqlite import SQLiteStore
from golem.errors import StoreError
from tests.support.durable.backends import Backend
from tests.support.durable.runs import T0, make_run
from tests.support.store import behind_the_back

TS = "2030-01-01T00:00:00.000000Z"


class _Raw:
    """A SQLite connection as `migrate` takes it."""

    def __init__(self, path: Path) -> None:
        self.raw = sqlite3.connect(path, isolation_level=None)
        self.raw.execute("PRAGMA journal_mode = WAL")

    def fetch(self, sql: str, params: Any = ()) -> list[Any]:
        return self.raw.execute(sql, params).fetchall()

    def execute(self, sql: str, params: Any = ()) -> int:
        return self.raw.execute(sql, params).rowcount

    def migrate(self, migrations: tuple[Migration, ...], *statements: str) -> int:
        """`migrate` to `migrations`, then `statements`, in one transaction."""
        self.raw.execute("BEGIN IMMEDIATE")
        version = migrate(self, "sqlite", TS, migrations)
        for sql in statements:
            self.raw.execute(sql, (TS, TS) if "?" in sql else ())
        self.raw.execute("COMMIT")
        return version


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


async def test_migrate_applies_only_missing_migrations(tmp_path: Path) -> None:
    await (await SQLiteStore.open(tmp_path / "m.db")).close()
    extra = Migration(
        LATEST_VERSION + 1, "test: extra table", ("CREATE TABLE golem_extra (x {ts})",)
    )
    raw = _Raw(tmp_path / "m.db")
    assert raw.migrate((*MIGRATIONS, extra)) == LATEST_VERSION + 1
    assert raw.migrate((*MIGRATIONS, extra)) == LATEST_VERSION + 1
    rows = raw.fetch("SELECT version, description FROM golem_schema_version")
    assert rows[-1] == (LATEST_VERSION + 1, "test: extra table")
    assert len(rows) == LATEST_VERSION + 1
    raw.raw.close()


async def test_a_database_from_a_newer_golem_is_refused(backend: Backend) -> None:
    await (await backend.open()).close()
    behind_the_back(
        backend,
        "INSERT INTO golem_schema_version (version, description, applied_at) "
        "VALUES (%s, %s, (SELECT MIN(applied_at) FROM golem_schema_version))",
        99,  # type: ignore[arg-type]
        "from the future",
    )
    with pytest.raises(StoreError, match="schema is version 99, newer than this golem"):
        await backend.open()


@pytest.mark.parametrize("version", range(2, LATEST_VERSION))  # v2: histories in a table
async def test_a_database_at_an_older_version_migrates_and_keeps_its_runs(
    tmp_path: Path, version: int
) -> None:
    """A database at any older version gains the rest on open; its runs stay readable."""
    raw = _Raw(tmp_path / "old.db")
    assert version == raw.migrate(
        MIGRATIONS[:version],
        "INSERT INTO golem_runs (id, agent, conversation_id, status, deps_ref, started_by, "
        "created_at, updated_at) VALUES ('old', 'ops', 'conv', 'pending', 'null', 'alice', ?, ?)",
        "INSERT INTO golem_histories (run_id, history) VALUES ('old', '[]')",
        "INSERT INTO golem_calls (run_id, call_id, position, kind, tool_name, args, reason) "
        "VALUES ('old', 'c1', 0, 'approval', 'pay', '{}', '')",
    )
    raw.raw.close()
    store = await SQLiteStore.open(tmp_path / "old.db")
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
