"""Store contract: a run keeps the trace context of the span that paused it (issue 11)."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from golem.durable.store import Decision, NewRun, Outcome, RunStatus, Store
from golem.durable.store._schema import LATEST_VERSION, MIGRATIONS, migrate
from golem.durable.store.sqlite import SQLiteStore
from tests.support.durable.runs import T0, approval, make_run

PAUSED = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
AGAIN = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


async def test_the_trace_context_round_trips_on_every_read(store: Store) -> None:
    saved = await store.save_pending(make_run(trace_context=PAUSED))
    assert saved.trace_context == PAUSED
    assert (await store.get_run(saved.id)).trace_context == PAUSED
    assert [r.trace_context for r in await store.list_runs()] == [PAUSED]
    page = await store.list_runs_page(status=RunStatus.PENDING)
    assert [r.trace_context for r in page.items] == [PAUSED]
    await store.decide(saved.id, "c1", Decision.approve(), decided_by="bob")
    claimed = await store.claim_ready("w1", 30, now=T0)
    assert claimed is not None
    assert claimed.run.trace_context == PAUSED


async def test_an_untraced_run_has_an_empty_trace_context(store: Store) -> None:
    saved = await store.save_pending(make_run())
    assert saved.trace_context == ""
    assert (await store.get_run(saved.id)).trace_context == ""
    finished = replace(make_run(trace_context=PAUSED), calls=())
    done = await store.save_finished(finished, Outcome.completed("ok", "[]"))
    assert (await store.get_run(done.id)).trace_context == PAUSED


async def test_a_pause_saved_by_finish_keeps_its_own_trace_context(store: Store) -> None:
    first = await store.save_pending(make_run(trace_context=PAUSED))
    await store.decide(first.id, "c1", Decision.approve(), decided_by="bob")
    claimed = await store.claim_ready("w1", 30)
    assert claimed is not None
    nxt: NewRun = make_run(approval("c2"), trace_context=AGAIN)
    finished = await store.finish(first.id, "w1", Outcome.paused(nxt))
    assert finished.trace_context == PAUSED
    child = await store.get_run(nxt.id)
    assert (child.parent_run_id, child.trace_context) == (first.id, AGAIN)


async def test_a_version_4_database_gains_the_column_and_keeps_its_runs(tmp_path: Path) -> None:
    path = tmp_path / "v4.db"
    raw = sqlite3.connect(path, isolation_level=None)

    class _Raw:
        def fetch(self, sql: str, params: Any = ()) -> list[Any]:
            return raw.execute(sql, params).fetchall()

        def execute(self, sql: str, params: Any = ()) -> int:
            return raw.execute(sql, params).rowcount

    ts = "2030-01-01T00:00:00.000000Z"
    raw.execute("BEGIN IMMEDIATE")
    assert migrate(_Raw(), "sqlite", ts, MIGRATIONS[:4]) == 4
    raw.execute(
        "INSERT INTO golem_runs (id, agent, conversation_id, status, deps_ref, started_by, "
        "created_at, updated_at) VALUES ('old', 'ops', 'conv', 'pending', 'null', 'alice', ?, ?)",
        (ts, ts),
    )
    raw.execute("INSERT INTO golem_histories (run_id, history) VALUES ('old', '[]')")
    raw.execute(
        "INSERT INTO golem_calls (run_id, call_id, position, kind, tool_name, args, reason) "
        "VALUES ('old', 'c1', 0, 'approval', 'pay', '{}', '')"
    )
    raw.execute("COMMIT")
    raw.close()
    store = await SQLiteStore.open(path)
    try:
        assert await store.schema_version() == LATEST_VERSION >= 5
        old = await store.get_run("old")
        assert (old.status, old.trace_context, [c.call_id for c in old.calls]) == (
            RunStatus.PENDING,
            "",
            ["c1"],
        )
        new = await store.save_pending(make_run(trace_context=PAUSED))
        assert (await store.get_run(new.id)).trace_context == PAUSED
    finally:
        await store.close()


async def test_store_spans_name_the_database_system(store: Store) -> None:
    pytest.importorskip("opentelemetry.sdk")
    from tests.otel_support import instrumented

    with instrumented() as exporter:
        run = await store.save_pending(make_run())
        await store.decide(run.id, "c1", Decision.approve(), decided_by="bob")
        claimed = await store.claim_ready("w1", 30)
        assert claimed is not None
        await store.finish(run.id, "w1", Outcome.completed("ok"))
    system = "postgresql" if type(store).__name__ == "PostgresStore" else "sqlite"
    spans = exporter.get_finished_spans()
    assert [s.name for s in spans] == [
        "golem.durable.store.save_pending",
        "golem.durable.store.decide",
        "golem.durable.store.claim_ready",
        "golem.durable.store.finish",
    ]
    assert {(s.attributes or {})["db.system.name"] for s in spans} == {system}
    assert {(s.attributes or {})["golem.run.id"] for s in spans} == {run.id}
