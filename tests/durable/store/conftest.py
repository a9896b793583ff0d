"""Fixtures of the store contract suite: one `store` per backend and test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

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
def slow_round_trips() -> Iterator[Callable[[str], str]]:
    """`slow(dsn)`: the DSN through a proxy that holds back every PostgreSQL answer leaving a
    transaction open `GAP` seconds (as a loaded machine, or a large result, would), migrations
    included: 30 times a 1 ms `idle_in_transaction_session_timeout`."""
    from psycopg.conninfo import make_conninfo

    from tests.support.durable.chaos import FaultProxy

    proxies: list[FaultProxy] = []

    def slow(dsn: str) -> str:
        proxies.append(FaultProxy(dsn, gap=GAP))
        return make_conninfo(proxies[-1].dsn, sslmode="disable")

    yield slow
    for proxy in proxies:
        proxy.close()
