"""Store URLs: the PostgreSQL store's own options ride in the URL beside libpq's."""

from __future__ import annotations

from pathlib import Path

import pytest

from golem.durable.store import open_store
from golem.durable.store.postgres import PostgresStore
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
