"""Trace a durable approval: the run that pauses, the decision, and the worker's resume.

Run: python examples/otel_store.py
Needs: pip install 'golem-agents[otel]' opentelemetry-sdk

`start_run` saves the paused run with its span's trace context; an approver decides (a
`golem.durable.store.decide` span naming who); a worker — here another store instance, in production
another process on another day — claims the run and resumes it: its `invoke_agent` span links
to the paused run's span, under the worker's `golem.durable.worker.resume` span.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

from golem import Agent
from golem.durable.store import Decision
from golem.durable.store.sqlite import SQLiteStore
from golem.durable.worker import AgentEntry, Worker, start_run
from golem.integrations import otel
from golem.messages import Message, ToolCall
from golem.model import ModelRequest
from golem.testing import FunctionModel
from golem.tool import DeferKind, Deferred, call_approved

SHOWN = {  # attribute -> the short name printed
    "db.system.name": "db",
    "golem.decision": "decision",
    "golem.decided_by": "decided_by",
    "golem.durable.worker.id": "worker",
    "golem.tool.approved": "approved",
    "golem.run.status": "status",
}


def one_line(span: ReadableSpan) -> str:
    """A compact line per span: short ids, name, a few attributes, links."""
    parent = f"{span.parent.span_id:016x}"[:6] if span.parent else "root"
    attrs = {SHOWN[k]: v for k, v in (span.attributes or {}).items() if k in SHOWN}
    shown = " ".join(f"{k}={v}" for k, v in attrs.items())
    links = "".join(f" link->{link.context.span_id:016x}"[:13] for link in span.links)
    ids = f"span {span.context.span_id:016x}"[:11]
    return f"{ids} parent {parent:<6}  {span.name:<26} {shown}{links}\n"


provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(formatter=one_line)))
otel.instrument(provider)  # runs, store operations, worker resumes and service requests


def model(request: ModelRequest) -> Message | str:
    if request.messages[-1].role == "user":
        call = ToolCall("call-1", "delete_file", '{"path": "a.log"}')
        return Message("assistant", tool_calls=[call])
    return "Deleted a.log."


agent = Agent(FunctionModel(model), name="janitor")


@agent.tool
def delete_file(path: str) -> str:
    """Delete a file."""
    if not call_approved():
        raise Deferred(DeferKind.APPROVAL, "deletes need sign-off")
    return f"deleted {path}"


registry = {"janitor": AgentEntry(agent)}


async def main(db: Path) -> None:
    print("== the run that pauses, saved with its trace context")
    store = await SQLiteStore.open(db)
    run = await start_run(store, registry, "janitor", "clean up", started_by="cron")
    print("\n== an approver decides")
    await store.decide(run.id, "call-1", Decision.approve(), decided_by="alice@example.com")
    await store.close()

    print("\n== a worker resumes it (any process, any day)")
    store = await SQLiteStore.open(db)  # another store instance, as a worker process has
    await Worker(store, registry, worker_id="worker-1").run_once()
    done = await store.get_run(run.id)
    await store.close()
    print("\nstatus:", done.status.value, "| paused span:", run.trace_context.split("-")[2][:6])


with tempfile.TemporaryDirectory() as tmp:
    asyncio.run(main(Path(tmp) / "golem.db"))
