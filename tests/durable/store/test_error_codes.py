"""Store errors are classified by the database's error code, never its message text, which follows
the server's `lc_messages` (ADR 0072): German, Japanese or English text of another failure alike."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from golem.durable.store import StoreBusy, StoreReadOnly
from golem.durable.store.sqlite import SQLiteStore
from golem.errors import StoreError
from tests.support.durable.runs import make_run

psycopg = pytest.importorskip("psycopg")
from psycopg import errors as pg_errors  # noqa: E402

from golem.durable.store._pg_setup import no_slot, store_error  # noqa: E402

# --------------------------------------------------------------------------- codes, not text


def _pg(sqlstate: str, message: str) -> Any:
    return pg_errors.lookup(sqlstate)(message)


@pytest.mark.parametrize(
    ("sqlstate", "message", "kind"),
    [
        ("25006", "kann UPDATE nicht in einer Read-only-Transaktion ausführen", StoreReadOnly),
        ("25006", "読み取り専用トランザクションでは UPDATE を実行できません", StoreReadOnly),
        ("53300", "zu viele Verbindungen von Rolle »golem«", StoreBusy),
        # English words of another failure do not make it one
        ("22012", "cannot execute UPDATE in a read-only transaction", StoreError),
        ("57014", "sorry, too many clients already", StoreError),
        ("55P03", "konnte Sperre nicht setzen", StoreError),
        ("40001", "could not serialize access due to concurrent update", StoreError),
    ],
)
def test_postgresql_errors_are_classified_by_sqlstate(
    sqlstate: str, message: str, kind: type[StoreError]
) -> None:
    got = store_error(_pg(sqlstate, message))
    assert type(got) is kind
    assert message in str(got)


@pytest.mark.parametrize(
    "message",
    [
        'connection to server at "db", port 5432 failed: FATAL:  sorry, too many clients already',
        'connection to server at "db" failed: FATAL:  too many connections for role "golem"',
        "FATAL:  remaining connection slots are reserved for roles with the SUPERUSER attribute",
        "connection failed: FATAL:  zu viele Verbindungen von Rolle »golem«",
        "connection failed: FATAL:  tut mir leid, schon zu viele Verbindungen",
        "connection failed: FATAL:  trop de connexions pour la base de données « golem »",
        'connection failed: ВАЖНО:  слишком много подключений для роли "golem"',
        'connection failed: FATAL:  ロール"golem"からの接続が多すぎます',
        "connection failed: 致命错误:  对不起, 已经有太多的客户",
        "connection failed: FATAL:  les emplacements de connexions restants sont réservés pour "
        "les connexions\nsuperutilisateur non relatif à la réplication",
        'FATAL:  password authentication failed for user "x"',
    ],
)
def test_a_startup_refusal_for_want_of_a_slot_is_recognised_in_any_shipped_language(
    message: str,
) -> None:
    """A refusal before the session starts has no SQLSTATE: its text, in any language, decides."""
    assert no_slot(psycopg.OperationalError(message)) is ("password" not in message)


def _sqlite_error(code: int, message: str) -> sqlite3.OperationalError:
    exc = sqlite3.OperationalError(message)
    exc.sqlite_errorcode = code  # type: ignore[attr-defined]
    return exc


@pytest.mark.parametrize(
    ("code", "message", "kind"),
    [
        (sqlite3.SQLITE_READONLY, "attempt to write a readonly database", StoreReadOnly),
        (264, "Datenbank ist schreibgeschützt", StoreReadOnly),  # SQLITE_READONLY_RECOVERY
        (1032, "attempt to write a readonly database", StoreError),  # DBMOVED: for good
        (sqlite3.SQLITE_BUSY, "attempt to write a readonly database", StoreError),
        (sqlite3.SQLITE_LOCKED, "database is locked", StoreError),
    ],
)
def test_sqlite_errors_are_classified_by_result_code(
    tmp_path: Path, code: int, message: str, kind: type[StoreError]
) -> None:
    from golem.durable.store.sqlite import _store_error as sqlite_store_error

    got = sqlite_store_error(tmp_path / "x.db", _sqlite_error(code, message))
    assert type(got) is kind


async def test_a_sqlite_database_that_takes_no_writes_raises_store_read_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real SQLITE_READONLY (the writer connection set `query_only`): nothing is saved."""
    connect = SQLiteStore._connect

    def query_only(self: SQLiteStore, slot: Any) -> Any:
        conn = connect(self, slot)
        conn._conn.execute("PRAGMA query_only = ON")
        return conn

    store = await SQLiteStore.open(tmp_path / "ro.db")
    try:
        monkeypatch.setattr(SQLiteStore, "_connect", query_only)
        fresh = SQLiteStore(tmp_path / "ro.db")
        try:
            with pytest.raises(StoreReadOnly, match="read-only"):
                await fresh.save_pending(make_run())
            assert await fresh.list_runs() == []
        finally:
            await fresh.close()
    finally:
        await store.close()


_STATES = [
    "28P01",
    "25006",
    "53300",
    "57014",
    "55P03",
    "40001",
    "40P01",
    "57P01",
    "57P05",
    "25P03",
    "22012",
]


@settings(deadline=None)
@given(
    state=st.sampled_from(_STATES),
    message=st.text(max_size=80)
    | st.sampled_from(
        ["sorry, too many clients already", "cannot execute INSERT in a read-only transaction"]
    ),
)
def test_the_code_alone_decides_whatever_the_message(state: str, message: str) -> None:
    """For any message, an error with a SQLSTATE is classified by that code alone."""
    exc = _pg(state, message)
    assert no_slot(exc) is (state == "53300")
    got = store_error(exc)
    expected = {"25006": StoreReadOnly, "53300": StoreBusy}.get(state, StoreError)
    assert type(got) is expected
