"""SQLite store errors are classified by the database's result code, never its message text
(ADR 0072): the text of another failure, in any language, does not make it one."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from golem.durable.store import StoreReadOnly
from golem.durable.store.sqlite import SQLiteStore
from golem.errors import StoreError
from tests.support.durable.runs import make_run


def _connecting(monkeypatch: pytest.MonkeyPatch, factory: type[sqlite3.Connection]) -> None:
    """Every SQLite connection opened from now on is a `factory`."""
    connect = sqlite3.connect
    monkeypatch.setattr(sqlite3, "connect", lambda *a, **k: connect(*a, factory=factory, **k))


@pytest.mark.parametrize(
    ("code", "message", "kind"),
    [
        (sqlite3.SQLITE_READONLY, "attempt to write a readonly database", StoreReadOnly),
        (264, "Datenbank ist schreibgeschützt", StoreReadOnly),  # SQLITE_READONLY_RECOVERY
        (1032, "attempt to write a readonly database", StoreError),  # DBMOVED: for good
        (sqlite3.SQLITE_BUSY, "attempt to write a readonly database", StoreError),
        (sqlite3.SQLITE_LOCKED, "database is locked", StoreError),
    ],
    ids=["readonly", "readonly-recovery", "dbmoved", "busy", "locked"],
)
async def test_sqlite_errors_are_classified_by_result_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, message: str, kind: type
) -> None:
    class Refusing(sqlite3.Connection):
        def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
            if sql.startswith("INSERT INTO golem_runs"):
                exc = sqlite3.OperationalError(message)
                exc.sqlite_errorcode = code  # type: ignore[attr-defined]
                raise exc
            return super().execute(sql, *args)

    await (await SQLiteStore.open(tmp_path / "x.db")).close()  # migrated before the refusals
    _connecting(monkeypatch, Refusing)
    store = SQLiteStore(tmp_path / "x.db")
    try:
        with pytest.raises(StoreError, match=message) as raised:
            await store.save_pending(make_run())
        assert type(raised.value) is kind
    finally:
        await store.close()


async def test_a_sqlite_database_that_takes_no_writes_raises_store_read_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real SQLITE_READONLY (the connections set `query_only` once open): nothing is saved."""

    class QueryOnly(sqlite3.Connection):
        def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
            if sql.startswith("INSERT INTO golem_runs"):
                super().execute("PRAGMA query_only = ON")
            return super().execute(sql, *args)

    await (await SQLiteStore.open(tmp_path / "ro.db")).close()
    _connecting(monkeypatch, QueryOnly)
    fresh = SQLiteStore(tmp_path / "ro.db")
    try:
        with pytest.raises(StoreReadOnly, match="read-only"):
            await fresh.save_pending(make_run())
        assert await fresh.list_runs() == []
    finally:
        await fresh.close()
