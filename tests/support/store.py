"""Store helpers the store and worker tests share: damaged rows and lost answers."""

from __future__ import annotations

import contextlib
import sqlite3
from collections import Counter
from typing import Any

from golem.durable.store import Store
from golem.errors import StoreError
from tests.support.durable.backends import Backend


def corrupt(backend: Backend, table: str, column: str, value: str, run_id: str) -> None:
    """Write `value` (SQL) into `table.column` of run `run_id`, behind the store's back."""
    key = "id" if table == "golem_runs" else "run_id"
    behind_the_back(backend, f"UPDATE {table} SET {column} = {value} WHERE {key} = %s", run_id)


def behind_the_back(backend: Backend, sql: str, *params: str) -> None:
    """Run `sql` (`%s` placeholders) on `backend`'s database, not through a store."""
    if backend.kind == "sqlite":
        assert backend.path is not None
        with contextlib.closing(sqlite3.connect(backend.path)) as db:
            db.execute(sql.replace("%s", "?"), params)
            db.commit()
        return
    import psycopg

    assert backend.dsn is not None
    with psycopg.connect(backend.dsn, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{backend.schema}"')
        conn.execute(sql.encode(), params)  # type: ignore[call-overload]


class LostAnswers:
    """`store`, except that the calls `plan` names fail with the plain `StoreError` of a dead
    connection: `(method, n) -> "before"` fails the n-th call of `method` without running
    it, `"after"` runs it (it commits) and then fails, its answer lost."""

    def __init__(self, store: Store, plan: dict[tuple[str, int], str]) -> None:
        self._store = store
        self._plan = plan
        self._calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if not any(method == name for method, _ in self._plan):
            return attr

        async def faulty(*args: Any, **kwargs: Any) -> Any:
            self._calls[name] += 1
            fault = self._plan.get((name, self._calls[name]))
            if fault == "before":
                raise StoreError("postgresql: server closed the connection unexpectedly")
            result = await attr(*args, **kwargs)
            if fault == "after":
                raise StoreError("postgresql: server closed the connection unexpectedly")
            return result

        return faulty
