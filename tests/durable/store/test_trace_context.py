"""Store contract: a run keeps the trace context of the span that paused it (issue 11)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from golem.durable.store import Decision, NewRun, Outcome, RunStatus, Store
from tests.support.durable.runs import approval, make_run

PAUSED = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
AGAIN = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


async def test_a_run_keeps_its_trace_context_on_every_read_and_a_pause_its_own(
    store: Store,
) -> None:
    first = await store.save_pending(make_run(trace_context=PAUSED))
    assert (await store.save_pending(make_run())).trace_context == "", "untraced: empty"
    assert [r.trace_context for r in await store.list_runs()] == ["", PAUSED]
    page = await store.list_runs_page(status=RunStatus.PENDING, newest_first=False)
    assert [r.trace_context for r in page.items] == [PAUSED, ""]
    assert (await store.get_run(first.id)).trace_context == PAUSED
    await store.decide(first.id, "c1", Decision.approve(), decided_by="bob")
    claimed = await store.claim_ready("w1", 30)
    assert claimed is not None
    assert claimed.run.trace_context == PAUSED
    nxt: NewRun = make_run(approval("c2"), trace_context=AGAIN)
    assert (await store.finish(first.id, "w1", Outcome.paused(nxt))).trace_context == PAUSED
    child = await store.get_run(nxt.id)
    assert (child.parent_run_id, child.trace_context) == (first.id, AGAIN)
    finished = replace(make_run(trace_context=PAUSED), calls=())
    done = await store.save_finished(finished, Outcome.completed("ok", "[]"))
    assert (await store.get_run(done.id)).trace_context == PAUSED


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
