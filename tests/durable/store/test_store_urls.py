"""`open_store`: SQLite paths and URLs; the PostgreSQL store's own options ride in the URL beside
libpq's; what a store refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from golem.durable.store import open_store
from golem.durable.store.postgres import PostgresStore
from golem.durable.store.sqlite import SQLiteStore
from golem.errors import StoreError
from tests.support.durable.backends import backend_for


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("postgresql://h/db?pool_size=0", "pool_size must be at least 1"),
        ("postgresql://h/db?command_timeout=-1", "command_timeout must be positive"),
        ("postgresql://h/db?command_timeout=nan", "command_timeout must be positive"),
        ("postgresql://h/db?schema=Bad-Name", "schema must be a lowercase identifier"),
    ],
)
async def test_open_store_refuses_bad_store_options_before_connecting(
    url: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        await open_store(url)


def test_the_dsns_own_connect_timeout_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGCONNECT_TIMEOUT", raising=False)
    assert PostgresStore("postgresql://h/db")._connect_kwargs()["connect_timeout"] == 10
    assert (
        "connect_timeout"
        not in PostgresStore("postgresql://h/db?connect_timeout=3")._connect_kwargs()
    )
    assert "connect_timeout" not in PostgresStore("host=h connect_timeout=3")._connect_kwargs()
    given = PostgresStore("postgresql://h/db?connect_timeout=3", connect_timeout=1.5)
    assert given._connect_kwargs()["connect_timeout"] == 1.5
    monkeypatch.setenv("PGCONNECT_TIMEOUT", "4")
    assert "connect_timeout" not in PostgresStore("postgresql://h/db")._connect_kwargs()


@pytest.mark.postgres
async def test_open_store_applies_the_options_of_a_postgresql_url(tmp_path: Path) -> None:
    with backend_for("postgres", tmp_path) as pg:
        sep = "&" if "?" in (pg.dsn or "") else "?"
        url = f"{pg.dsn}{sep}pool_size=3&command_timeout=7.5&schema={pg.schema}"
        store = await open_store(url)
        try:
            assert isinstance(store, PostgresStore)
            assert (store.pool_size, store.command_timeout, store.schema) == (3, 7.5, pg.schema)
            assert store.dsn == pg.dsn
            assert await store.list_runs() == []
        finally:
            await store.close()


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
