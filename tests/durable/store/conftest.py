"""Fixtures of the store contract suite: one `store` per backend and test."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from golem.durable.store import Store
from tests.support.durable.backends import Backend


@pytest.fixture
async def store(backend: Backend) -> AsyncIterator[Store]:
    """An open store on `backend`, closed after the test."""
    s = await backend.open()
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
def exec_dir(tmp_path: Path) -> Path:
    """Where approved calls of the chaos agent record each execution (`chaos.executions`)."""
    d = tmp_path / "exec"
    d.mkdir()
    return d


GAP = 0.03
"""Seconds `slow_round_trips` keeps a transaction idle between its round trips."""


@pytest.fixture
def slow_round_trips(monkeypatch: pytest.MonkeyPatch) -> None:
    """On PostgreSQL, every answer that leaves a transaction open is followed by `GAP`
    seconds of this process doing nothing (as a loaded machine, or a large result, would),
    migrations included: 30 times a 1 ms `idle_in_transaction_session_timeout`."""
    import psycopg

    from golem.durable.store._pg_wire import PgConn, PgSchemaConn

    sync = PgConn._sync
    in_transaction = psycopg.pq.TransactionStatus.INTRANS

    def slow_sync(self: PgConn) -> list[Any]:
        results = sync(self)
        if self.pg.transaction_status == in_transaction:
            time.sleep(GAP)
        return results

    execute = PgSchemaConn.execute

    def slow_execute(self: PgSchemaConn, sql: str, params: Any = ()) -> int:
        n = execute(self, sql, params)
        time.sleep(GAP)
        return n

    monkeypatch.setattr(PgConn, "_sync", slow_sync)
    monkeypatch.setattr(PgSchemaConn, "execute", slow_execute)
