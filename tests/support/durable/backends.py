"""Store backends for tests: SQLite always, PostgreSQL when `GOLEM_TEST_POSTGRES_DSN` is set."""

from __future__ import annotations

import contextlib
import functools
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from golem.durable.store import Store
from golem.durable.store.postgres import PostgresStore
from golem.durable.store.sqlite import SQLiteStore

__all__ = ["BACKENDS", "Backend", "backend_for", "open_spec", "postgres_dsn"]

BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
]


@functools.cache
def _reachable(dsn: str) -> str | None:
    """None when PostgreSQL answers at `dsn`, else the connection error text."""
    import psycopg

    try:
        with psycopg.connect(dsn, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return str(exc)
    return None


def postgres_dsn() -> str:
    """The test cluster's DSN; skips (or fails under GOLEM_REQUIRE_POSTGRES=1) without one."""
    require = os.environ.get("GOLEM_REQUIRE_POSTGRES") == "1"
    dsn = os.environ.get("GOLEM_TEST_POSTGRES_DSN", "")
    if not dsn:
        if require:
            pytest.fail("GOLEM_REQUIRE_POSTGRES=1 but GOLEM_TEST_POSTGRES_DSN is not set")
        pytest.skip("PostgreSQL tests need GOLEM_TEST_POSTGRES_DSN (scripts/pg_test_cluster.sh)")
    problem = _reachable(dsn)
    if problem is not None:
        if require:
            pytest.fail(f"GOLEM_REQUIRE_POSTGRES=1 but PostgreSQL is unreachable: {problem}")
        pytest.skip(f"PostgreSQL at GOLEM_TEST_POSTGRES_DSN is unreachable: {problem}")
    return dsn


@dataclass(frozen=True)
class Backend:
    """One test database; `open()` gives another store instance on the same data."""

    kind: str
    path: str | None = None
    dsn: str | None = None
    schema: str | None = None

    def spec(self) -> dict[str, Any]:
        """A JSON-able description a subprocess can open with `open_spec`."""
        return {"kind": self.kind, "path": self.path, "dsn": self.dsn, "schema": self.schema}

    async def open(self, **kw: Any) -> Store:
        return await open_spec(self.spec(), **kw)


async def open_spec(spec: dict[str, Any], **kw: Any) -> Store:
    """Open a store from `Backend.spec()` (used in worker subprocesses too)."""
    if spec["kind"] == "sqlite":
        return await SQLiteStore.open(spec["path"], **kw)
    return await PostgresStore.open(spec["dsn"], schema=spec["schema"], **kw)


@contextlib.contextmanager
def backend_for(kind: str, tmp_path: Path) -> Iterator[Backend]:
    """A fresh database of `kind` ("sqlite" or "postgres"), removed afterwards."""
    if kind == "sqlite":
        yield Backend("sqlite", path=str(tmp_path / "golem.db"))
        return
    import psycopg

    dsn = postgres_dsn()
    schema = f"t_{uuid.uuid4().hex[:16]}"
    try:
        yield Backend("postgres", dsn=dsn, schema=schema)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
