"""Trace a run that pauses for approval and its resume, printing the spans to the console.

Run: python examples/otel_console.py
Needs: pip install 'golem-agents[otel]' opentelemetry-sdk
"""

from __future__ import annotations

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

from golem import Agent, Approval, DeferredResults, PausedRun
from golem.integrations import otel
from golem.messages import Message, ToolCall
from golem.testing import ScriptedModel
from golem.tool import DeferKind, Deferred, call_approved

SHOWN = (
    "gen_ai.tool.name",
    "gen_ai.tool.call.id",
    "gen_ai.usage.input_tokens",
    "golem.run.status",
    "golem.run.pending_call_ids",
    "golem.tool.deferred",
    "golem.tool.approved",
)


def one_line(span: ReadableSpan) -> str:
    """A compact line per span: short ids, name, a few attributes, links."""
    parent = f"{span.parent.span_id:016x}"[:6] if span.parent else "root"
    attrs = {k.split(".")[-1]: v for k, v in (span.attributes or {}).items() if k in SHOWN}
    shown = " ".join(f"{k}={list(v) if isinstance(v, tuple) else v}" for k, v in attrs.items())
    links = "".join(f" link->{link.context.span_id:016x}"[:13] for link in span.links)
    ids = f"trace {span.context.trace_id:032x}"[:14] + f" span {span.context.span_id:016x}"[:12]
    return f"{ids} parent {parent:<6}  {span.name:<26} {shown}{links}\n"


provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(formatter=one_line)))
otel.instrument(provider)  # message content stays out unless include_content=True


def make_agent(model: ScriptedModel) -> Agent:
    agent = Agent(model, name="janitor")

    @agent.tool_plain
    def delete_file(path: str) -> str:
        """Delete a file."""
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, "deletes need sign-off")
        return f"deleted {path}"

    return agent


print("== the run that pauses")
paused = make_agent(
    ScriptedModel(Message("assistant", tool_calls=[ToolCall("call-1", "delete_file", '{"path": "a.log"}')]))
).run_sync("clean up")

# keep the paused run as one document: the history, and the span context to link to
stored = paused.paused_run.dumps()

print("\n== the resume (any process, any day): its span links to the paused run's span")
done = make_agent(ScriptedModel("Deleted a.log.")).run_with_deferred_results_sync(
    PausedRun.loads(stored),
    DeferredResults(approvals={"call-1": Approval(True)}),
)
print("\nanswer:", done.output)
print("paused span:", paused.trace_context.split("-")[2][:6])
