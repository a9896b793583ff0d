"""PostgreSQL: a page of pending calls reads only the runs it shows, statistics or not."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from golem.durable.store import Page, PendingCallRecord
from golem.durable.store.postgres import PostgresStore
from tests.support.durable.backends import Backend, backend_for
from tests.support.durable.runs import make_run

pytestmark = pytest.mark.postgres

RUNS = 2000
LIMIT = 20


@pytest.fixture
def pg(tmp_path: Path) -> Iterator[Backend]:
    with backend_for("postgres", tmp_path) as backend:
        yield backend


class _Capture:
    """A `Tx` that records the statements a store method would run, and runs none."""

    def __init__(self) -> None:
        self.statements: list[tuple[str, tuple[Any, ...]]] = []

    def run(self, sql: str, params: Any = (), conflict: Exception | None = None) -> None:
        self.statements.append((sql, tuple(params)))

    def fetch(self, sql: str, params: Any = ()) -> list[tuple[Any, ...]]:
        self.statements.append((sql, tuple(params)))
        return []


async def _statements(
    store: PostgresStore, method: str = "list_pending_calls", **kw: Any
) -> list[tuple[str, tuple[Any, ...]]]:
    capture = _Capture()

    async def submit(write: bool, fn: Any, *args: Any) -> Any:
        return fn(capture, *args)

    real = store._submit
    store._submit = submit  # type: ignore[method-assign]
    try:
        await getattr(store, method)(limit=LIMIT, **kw)
    finally:
        store._submit = real  # type: ignore[method-assign]
    return capture.statements


def _rows_read(plan: dict[str, Any], table: str) -> int:
    """Rows the plan's scans of `table` produced or filtered away, over all their loops."""
    total = 0
    if plan.get("Relation Name") == table:
        loops = int(plan.get("Actual Loops", 1))
        total += int(plan.get("Actual Rows", 0)) * loops
        total += int(plan.get("Rows Removed by Filter", 0)) * loops
    for child in plan.get("Plans", ()):
        total += _rows_read(child, table)
    return total


def _explain(pg: Backend, statements: list[tuple[str, tuple[Any, ...]]]) -> dict[str, Any]:
    import psycopg

    with psycopg.connect(pg.dsn) as conn:  # one transaction: the page's settings hold in it
        conn.execute(f'SET LOCAL search_path = "{pg.schema}"')
        *before, (sql, params) = statements
        for other, other_params in before:
            conn.execute(other.replace("?", "%s"), other_params)
        row = conn.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + sql.replace("?", "%s"), params
        ).fetchone()
        conn.rollback()
    assert row is not None
    doc = row[0] if not isinstance(row[0], str) else json.loads(row[0])
    plan: dict[str, Any] = doc[0]["Plan"]
    return plan


def _sql(pg: Backend, *statements: str) -> None:
    import psycopg

    with psycopg.connect(pg.dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


@pytest.mark.parametrize("analyzed", [False, True], ids=["no-statistics", "analyzed"])
async def test_a_page_of_calls_reads_only_the_runs_it_shows(pg: Backend, analyzed: bool) -> None:
    store = await pg.open()
    assert isinstance(store, PostgresStore)
    try:
        tables = [f'"{pg.schema}".{t}' for t in ("golem_runs", "golem_calls", "golem_audit")]
        _sql(pg, *(f"ALTER TABLE {t} SET (autovacuum_enabled = off)" for t in tables))
        for start in range(0, RUNS, 100):
            await asyncio.gather(
                *(
                    store.save_pending(make_run(agent="ops" if i % 2 else "web"))
                    for i in range(start, start + 100)
                )
            )
        if analyzed:
            _sql(pg, *(f"ANALYZE {t}" for t in tables))
        first: Page[PendingCallRecord] = await store.list_pending_calls(limit=LIMIT)
        assert len(first.items) == LIMIT
        assert first.next_cursor is not None
        for kw in ({}, {"agent": "ops"}, {"agent": ["ops", "web"]}, {"after": first.next_cursor}):
            plan = _explain(pg, await _statements(store, **kw))
            runs, calls = _rows_read(plan, "golem_runs"), _rows_read(plan, "golem_calls")
            assert runs <= 3 * LIMIT, f"{kw}: the page read {runs} runs of {RUNS}"
            assert calls <= 3 * LIMIT, f"{kw}: the page read {calls} calls of {RUNS}"
    finally:
        await store.close()


@pytest.mark.parametrize("analyzed", [False, True], ids=["no-statistics", "analyzed"])
async def test_an_audit_page_reads_only_the_entries_it_shows(pg: Backend, analyzed: bool) -> None:
    # Found: without statistics the planner fetched every entry of the caller's agent with
    # a bitmap scan and sorted them for the newest page (10,000 rows read for 500 shown at
    # 100,000 entries). The page now walks the agent index in order (ADR 0077).
    store = await pg.open()
    assert isinstance(store, PostgresStore)
    try:
        tables = [f'"{pg.schema}".{t}' for t in ("golem_runs", "golem_calls", "golem_audit")]
        _sql(pg, *(f"ALTER TABLE {t} SET (autovacuum_enabled = off)" for t in tables))
        for start in range(0, RUNS, 100):
            await asyncio.gather(
                *(
                    store.save_pending(make_run(agent=("ops", "web", "dev")[i % 3]))
                    for i in range(start, start + 100)
                )
            )
        if analyzed:
            _sql(pg, *(f"ANALYZE {t}" for t in tables))
        middle = (await store.last_change_id()) // 2
        pages: tuple[dict[str, Any], ...] = (
            {"agents": ["ops"]},
            {"agents": ["ops", "web"]},
            {"agents": None},
            {"agents": ["ops"], "before": middle},
        )
        for kw in pages:
            assert len((await store.audit_page(limit=LIMIT, **kw)).entries) == LIMIT
            plan = _explain(pg, await _statements(store, "audit_page", **kw))
            read = _rows_read(plan, "golem_audit")
            # a walk of each agent's index, or (analyzed, for an agent of a third of the
            # log) the log's key keeping that agent's: the page's rows or a few times that,
            # never the agent's or the log's whole (667 read for 20 shown before)
            walks = len(kw["agents"] or ["any"])
            assert read <= 4 * LIMIT * walks, f"{kw}: the page read {read} entries of {RUNS}"
    finally:
        await store.close()
