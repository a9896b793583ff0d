"""OpenTelemetry through the store (issue 11): a run started with `start_run` keeps its
span's trace context in the store, and the worker that resumes it — another store
instance, another agent instance, another process — links the resume span to it."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from golem.durable.store import Decision, DecisionConflict, RunStatus
from golem.durable.store.sqlite import SQLiteStore
from golem.durable.worker import Worker, start_run
from golem.integrations import otel
from tests.otel_support import memory_provider
from tests.support.durable.backends import BACKENDS, Backend, backend_for
from tests.support.durable.runs import approval, make_run
from tests.support.durable.worker_app import prompt_for, registry

ROOT = Path(__file__).resolve().parents[3]


def ids(span: ReadableSpan) -> tuple[str, str]:
    assert span.context is not None
    return f"{span.context.trace_id:032x}", f"{span.context.span_id:016x}"


def runs(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name.startswith("invoke_agent")]


async def _start_paused(db: Path | Backend, tmp_path: Path) -> str:
    """Start a run that pauses on one approval call, approve it; return the run ID."""
    store = await (SQLiteStore.open(db) if isinstance(db, Path) else db.open())
    try:
        record = await start_run(
            store,
            registry(),
            "acts",
            prompt_for("job", 1),
            deps_ref={"exec_dir": str(tmp_path)},
            started_by="alice",
        )
        assert record.status is RunStatus.PENDING
        await store.decide(record.id, "job-0", Decision.approve(), decided_by="bob")
        return record.id
    finally:
        await store.close()


def test_a_worker_links_the_resume_to_the_paused_runs_span(
    exporter: InMemorySpanExporter, tmp_path: Path
) -> None:
    db = tmp_path / "golem.db"

    async def main() -> tuple[str, str]:
        run_id = await _start_paused(db, tmp_path)
        paused_span = runs(exporter)[-1]
        store = await SQLiteStore.open(db)  # another store instance, another agent instance
        try:
            saved = await store.get_run(run_id)
            assert saved.trace_context.split("-")[1:3] == list(ids(paused_span))
            exporter.clear()
            assert await Worker(store, registry(), worker_id="w1").run_once()
            done = await store.get_run(run_id)
            assert done.status is RunStatus.COMPLETED, done.outcome
            return saved.trace_context, run_id
        finally:
            await store.close()

    traceparent, run_id = asyncio.run(main())
    (resume,) = runs(exporter)
    assert (resume.attributes or {})["golem.run.id"] == run_id
    assert (resume.attributes or {})["golem.run.resumes"] == traceparent
    assert [ids_of(link) for link in resume.links] == [tuple(traceparent.split("-")[1:3])]
    assert (resume.links[0].attributes or {})["golem.link"] == "resumes_paused_run"
    assert resume.context is not None
    assert f"{resume.context.trace_id:032x}" != traceparent.split("-")[1], "a trace of its own"


def ids_of(link: Any) -> tuple[str, str]:
    return f"{link.context.trace_id:032x}", f"{link.context.span_id:016x}"


def test_an_untraced_start_resumes_untraced_and_unlinked(
    exporter: InMemorySpanExporter, tmp_path: Path
) -> None:
    db = tmp_path / "golem.db"
    otel.uninstrument()  # the start is not traced: no trace context is stored
    run_id = asyncio.run(_start_paused(db, tmp_path))
    otel.instrument(memory_provider(exporter)[0])

    async def main() -> None:
        store = await SQLiteStore.open(db)
        try:
            assert (await store.get_run(run_id)).trace_context == ""
            assert await Worker(store, registry(), worker_id="w1").run_once()
        finally:
            await store.close()

    asyncio.run(main())
    (resume,) = runs(exporter)
    assert resume.links == ()
    assert "golem.run.resumes" not in (resume.attributes or {})


WORKER_SCRIPT = """
import asyncio, json, sys
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from golem.integrations import otel
from golem.durable.worker import Worker
from tests.support.durable.backends import open_spec
from tests.support.durable.worker_app import registry

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
otel.instrument(provider)

async def main():
    store = await open_spec(json.loads(sys.argv[1]))
    try:
        assert await Worker(store, registry(), worker_id="other-process").run_once()
    finally:
        await store.close()

asyncio.run(main())
print(json.dumps([
    {"name": s.name, "attributes": {k: v for k, v in (s.attributes or {}).items()
                                   if isinstance(v, str)},
     "links": [[f"{l.context.trace_id:032x}", f"{l.context.span_id:016x}"] for l in s.links]}
    for s in exporter.get_finished_spans()
]))
"""


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_worker_in_another_process_links_to_the_paused_run(
    kind: str, exporter: InMemorySpanExporter, tmp_path: Path
) -> None:
    with backend_for(kind, tmp_path) as backend:
        run_id = asyncio.run(_start_paused(backend, tmp_path))
        paused = runs(exporter)[-1]
        out = subprocess.run(
            [sys.executable, "-c", WORKER_SCRIPT, json.dumps(backend.spec())],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
            check=False,
        )
    assert out.returncode == 0, out.stderr
    spans = {s["name"]: s for s in json.loads(out.stdout)}
    resume = next(s for name, s in spans.items() if name.startswith("invoke_agent"))
    assert resume["attributes"]["golem.run.id"] == run_id
    assert resume["links"] == [list(ids(paused))]
    assert (tmp_path / "job-0").read_text().count("\n") == 1, "the approved call ran once"
    system = "sqlite" if kind == "sqlite" else "postgresql"
    assert spans["golem.durable.store.finish"]["attributes"]["db.system.name"] == system
    assert spans["golem.durable.worker.resume"]["attributes"]["golem.durable.worker.id"] == "other-process"


# --------------------------------------------------------------------------- store and worker spans


def spans_named(exporter: InMemorySpanExporter, prefix: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name.startswith(prefix)]


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def test_store_operations_are_client_spans_with_who_decided(
    exporter: InMemorySpanExporter, tmp_path: Path
) -> None:
    async def main() -> str:
        store = await SQLiteStore.open(tmp_path / "golem.db")
        try:
            assert await store.claim_ready("idle", 30) is None
            assert await store.sweep_expired() == []
            run = await store.save_pending(make_run(approval("c1"), approval("c2")))
            await store.decide(run.id, "c1", Decision.approve(), decided_by="alice@example.com")
            with pytest.raises(DecisionConflict):
                await store.decide(run.id, "c1", Decision.deny("no"), decided_by="mallory")
            await store.get_run(run.id)
            return run.id
        finally:
            await store.close()

    run_id = asyncio.run(main())
    names = [s.name for s in spans_named(exporter, "golem.")]
    assert names == [
        "golem.durable.store.save_pending",
        "golem.durable.store.decide",
        "golem.durable.store.decide",
        "golem.durable.store.get_run",
    ], "an idle claim and a sweep that changed nothing leave no span"
    save, ok, refused, get = spans_named(exporter, "golem.")
    assert save.kind == SpanKind.CLIENT
    assert attrs(save) | {"golem.run.id": run_id} == attrs(save)
    assert attrs(save)["db.system.name"] == attrs(save)["db.system"] == "sqlite"
    assert attrs(save)["golem.run.started_by"] == "alice"
    assert attrs(ok) == {
        "db.system.name": "sqlite",
        "db.system": "sqlite",
        "golem.durable.store.operation": "decide",
        "golem.run.id": run_id,
        "gen_ai.tool.call.id": "c1",
        "golem.decision": "approve",
        "golem.decided_by": "alice@example.com",
    }
    assert ok.status.status_code == StatusCode.UNSET
    assert attrs(refused)["golem.decided_by"] == "mallory"
    assert attrs(refused)["error.type"] == "DecisionConflict"
    assert refused.status.status_code == StatusCode.ERROR
    assert attrs(get)["golem.run.status"] == "pending"
    assert ok.start_time is not None
    assert ok.end_time is not None
    assert ok.start_time <= ok.end_time


def test_a_worker_resume_is_one_trace_with_the_run_and_the_finish_under_it(
    exporter: InMemorySpanExporter, tmp_path: Path
) -> None:
    db = tmp_path / "golem.db"
    run_id = asyncio.run(_start_paused(db, tmp_path))
    exporter.clear()

    async def main() -> None:
        store = await SQLiteStore.open(db)
        try:
            assert await Worker(store, registry(), worker_id="w7").run_once()
        finally:
            await store.close()

    asyncio.run(main())
    spans = exporter.get_finished_spans()
    by = {s.name: s for s in spans}
    claim = by["golem.durable.store.claim_ready"]
    assert (attrs(claim)["golem.durable.worker.id"], attrs(claim)["golem.run.id"]) == ("w7", run_id)
    assert attrs(claim)["golem.run.attempt"] == 1
    resume = by["golem.durable.worker.resume"]
    assert resume.parent is None
    assert attrs(resume) | {"golem.durable.worker.id": "w7", "golem.run.id": run_id} == attrs(resume)
    assert attrs(resume)["gen_ai.agent.name"] == "acts"
    run = next(s for s in spans if s.name.startswith("invoke_agent"))
    finish = by["golem.durable.worker.finish"]
    stored = by["golem.durable.store.finish"]
    assert resume.context is not None
    assert finish.context is not None
    for child in (run, finish):
        assert child.parent is not None
        assert child.parent.span_id == resume.context.span_id
    assert stored.parent is not None
    assert stored.parent.span_id == finish.context.span_id
    assert attrs(finish)["golem.run.status"] == attrs(stored)["golem.run.status"] == "completed"
    assert attrs(stored)["golem.durable.worker.id"] == "w7"
    assert len(run.links) == 1, "the resumed run still links to the paused one"


def test_off_means_no_operation_spans(tmp_path: Path) -> None:
    provider, exp = memory_provider()
    otel.instrument(provider)
    otel.uninstrument()

    async def main() -> None:
        store = await SQLiteStore.open(tmp_path / "golem.db")
        try:
            run = await store.save_pending(make_run())
            await store.decide(run.id, "c1", Decision.approve(), decided_by="alice")
        finally:
            await store.close()

    asyncio.run(main())
    assert exp.get_finished_spans() == ()


def test_tracing_never_changes_what_a_store_call_raises(
    exporter: InMemorySpanExporter, tmp_path: Path
) -> None:
    async def main() -> None:
        store = await SQLiteStore.open(tmp_path / "golem.db")
        try:
            with pytest.raises(TypeError, match="decided_by"):
                await store.decide("r1", "c1", Decision.approve())  # type: ignore[call-arg]
            with pytest.raises(ValueError, match="no pending calls"):
                await store.save_pending(replace(make_run(), calls=()))
        finally:
            await store.close()

    asyncio.run(main())
    decide, save = spans_named(exporter, "golem.durable.store.")
    assert (decide.name, attrs(decide)["error.type"]) == ("golem.durable.store.decide", "TypeError")
    assert attrs(decide)["golem.run.id"] == "r1", "what binds is still recorded"
    assert (save.name, attrs(save)["error.type"]) == ("golem.durable.store.save_pending", "ValueError")
