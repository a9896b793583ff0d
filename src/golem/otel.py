"""OpenTelemetry spans for runs, model requests and tool calls (extra `[otel]`).

```python
from golem import otel

otel.instrument()  # every agent's runs, on the global tracer provider
```

Each run is an `invoke_agent` span; each model request attempt a `chat` span and each tool
execution an `execute_tool` span under it, with the OpenTelemetry GenAI semantic
conventions' `gen_ai.*` attributes (operation, provider, model, token usage, tool name and
call ID). Message content (prompts, answers, tool arguments and results) is recorded only
with `instrument(include_content=True)`.

A run that pauses ends its span with `golem.run.status = "paused"` and the pending call IDs;
`Result.trace_context` holds the span's W3C `traceparent`. Pass it to the resume
(`run_with_deferred_results(..., trace_context=...)`) and the resumed run's span carries a
span link to the paused one — in any process, days later (docs/adr/0021).

Only `opentelemetry-api` is needed at run time; without `instrument()` or an agent's
`tracer_provider`, golem creates no span and calls nothing of OpenTelemetry.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "golem.otel needs OpenTelemetry: pip install 'golem-agents[otel]'"
    ) from exc

from golem.events import EventKind, RunEvent
from golem.messages import Message

if TYPE_CHECKING:
    from golem._loop import RunState
    from golem.result import Result

__all__ = [
    "format_traceparent",
    "instrument",
    "is_instrumented",
    "parse_traceparent",
    "uninstrument",
]

_SCOPE = "golem"
_PROPAGATOR = TraceContextTextMapPropagator()

_global: tuple[trace.TracerProvider | None, bool] | None = None
"""(provider or None for the global one, include_content) once `instrument()` ran."""


def instrument(
    tracer_provider: trace.TracerProvider | None = None, *, include_content: bool = False
) -> None:
    """Trace the runs of every agent (agents with their own `tracer_provider` included).

    Args:
        tracer_provider: Where spans go; None uses OpenTelemetry's global provider at each
            run (so `trace.set_tracer_provider` may come later).
        include_content: Also record message content: the prompt and history sent to the
            model (`gen_ai.input.messages`), its answers (`gen_ai.output.messages`), tool
            arguments and results (`gen_ai.tool.call.arguments` / `.result`).
    """
    global _global
    _global = (tracer_provider, include_content)


def uninstrument() -> None:
    """Stop tracing agents that have no `tracer_provider` of their own."""
    global _global
    _global = None


def is_instrumented() -> bool:
    """Whether `instrument()` is in effect."""
    return _global is not None


def run_tracer(
    agent: Any, tracer_provider: trace.TracerProvider | None, trace_context: str = ""
) -> RunTracer | None:
    """The tracer of one run of `agent`, or None when nothing asks for spans.

    An agent's own `tracer_provider` wins over `instrument()`'s; content is recorded only
    when `instrument(include_content=True)` is in effect.
    """
    settings = _global
    if tracer_provider is None:
        if settings is None:
            return None
        tracer_provider = settings[0] or trace.get_tracer_provider()
    include_content = settings[1] if settings is not None else False
    tracer = tracer_provider.get_tracer(_SCOPE)
    return RunTracer(tracer, agent, include_content=include_content, resumes=trace_context)


def _provider_name(model: Any) -> str:
    module = type(model).__module__
    if module.startswith("golem.providers."):
        name = module.split(".")[2]
        return "gcp.gemini" if name == "gemini" else name
    return str(getattr(model, "provider", "") or type(model).__name__)


def _model_name(model: Any) -> str:
    name = getattr(model, "model", None)
    return name if isinstance(name, str) else type(model).__name__


def _messages_json(messages: Sequence[Message]) -> str:
    out = []
    for m in messages:
        item: dict[str, Any] = {"role": m.role}
        if m.content:
            item["content"] = m.content
        if m.tool_calls:
            item["tool_calls"] = [
                {"id": c.id, "name": c.name, "arguments": c.args} for c in m.tool_calls
            ]
        if m.tool_call_id:
            item["tool_call_id"] = m.tool_call_id
        out.append(item)
    return json.dumps(out, ensure_ascii=False)


def parse_traceparent(value: str) -> trace.SpanContext | None:
    """The span context a W3C `traceparent` names, or None when it is empty or malformed."""
    if not value:
        return None
    ctx = _PROPAGATOR.extract({"traceparent": value})
    span_context = trace.get_current_span(ctx).get_span_context()
    return span_context if span_context.is_valid else None


def format_traceparent(span_context: trace.SpanContext) -> str:
    """The W3C `traceparent` of a span context."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, trace.set_span_in_context(trace.NonRecordingSpan(span_context)))
    return carrier.get("traceparent", "")


class RunTracer:
    """The spans of one run: started by the agent, fed by the run's events.

    Not for direct use: the agent creates one per run when tracing is on.
    """

    def __init__(
        self, tracer: trace.Tracer, agent: Any, *, include_content: bool, resumes: str = ""
    ) -> None:
        self._tracer = tracer
        self._agent = agent
        self._content = include_content
        self._resumes = resumes
        self._provider = _provider_name(agent.model)
        self._model = _model_name(agent.model)
        self._state: RunState | None = None
        self._run: Span | None = None
        self._run_ctx: otel_context.Context | None = None
        self._token: object | None = None
        self._chat: Span | None = None
        self._tools: dict[str, Span] = {}

    # ----------------------------------------------------------------- run

    def start(self, state: RunState, *, operation: str = "run") -> None:
        """Open the run's `invoke_agent` span and make it current."""
        self._state = state
        name = getattr(self._agent, "name", "")
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.provider.name": self._provider,
            "gen_ai.system": self._provider,
            "gen_ai.request.model": self._model,
            "gen_ai.conversation.id": state.conversation_id,
            "golem.run.id": state.run_id,
            "golem.run.operation": operation,
        }
        if name:
            attributes["gen_ai.agent.name"] = name
        links = []
        paused = parse_traceparent(self._resumes)
        if paused is not None:
            links.append(Link(paused, {"golem.link": "resumes_paused_run"}))
            attributes["golem.run.resumes"] = self._resumes
        span = self._tracer.start_span(
            f"invoke_agent {name}" if name else "invoke_agent",
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            links=links,
        )
        self._run = span
        self._run_ctx = trace.set_span_in_context(span)
        self._token = otel_context.attach(self._run_ctx)

    def finish(self, result: Result[Any]) -> str:
        """Close the run span for a run that returned (answered or paused); returns the
        span's W3C `traceparent` (for `Result.trace_context`)."""
        span = self._run
        if span is None:
            return ""
        self._close_open_spans()
        span.set_attribute("gen_ai.usage.input_tokens", result.usage.input_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", result.usage.output_tokens)
        if result.finish_reason:
            span.set_attribute("gen_ai.response.finish_reasons", [result.finish_reason])
        if result.pending is not None:
            span.set_attribute("golem.run.status", "paused")
            span.set_attribute(
                "golem.run.pending_call_ids", [c.call_id for c in result.pending.calls]
            )
        else:
            span.set_attribute("golem.run.status", "completed")
            if self._content and result.output is not None:
                output = result.output
                span.set_attribute(
                    "gen_ai.output.messages",
                    json.dumps([{"role": "assistant", "content": str(output)}], ensure_ascii=False),
                )
        traceparent = format_traceparent(span.get_span_context())
        self._end(span)
        return traceparent

    def fail(self, exc: BaseException) -> None:
        """Close the run span for a run that raised."""
        span = self._run
        if span is None:
            return
        self._close_open_spans(exc)
        span.set_attribute("golem.run.status", "failed")
        stage = getattr(exc, "stage", None)
        if stage is not None:
            span.set_attribute("golem.run.stage", str(stage))
        cause = exc.__cause__ or exc
        span.set_attribute("error.type", type(cause).__name__)
        span.record_exception(exc)
        span.set_status(Status(StatusCode.ERROR, str(exc)))
        self._end(span)

    def _end(self, span: Span) -> None:
        span.end()
        self._run = None
        if self._token is not None:
            otel_context.detach(self._token)  # type: ignore[arg-type]
            self._token = None

    def _close_open_spans(self, exc: BaseException | None = None) -> None:
        for span in [self._chat, *self._tools.values()]:
            if span is None:
                continue
            if exc is not None:
                span.set_status(Status(StatusCode.ERROR, "the run ended"))
            span.end()
        self._chat = None
        self._tools.clear()

    # ----------------------------------------------------------------- tool context

    def enter_tool(self, call_id: str) -> object | None:
        """Make the call's `execute_tool` span current (in the tool's own task); returns the
        token `leave_tool` takes."""
        span = self._tools.get(call_id)
        if span is None:
            return None
        return otel_context.attach(trace.set_span_in_context(span))

    def leave_tool(self, token: object | None) -> None:
        """Undo `enter_tool`."""
        if token is not None:
            otel_context.detach(token)  # type: ignore[arg-type]

    def tool_span_context(self, call_id: str) -> otel_context.Context | None:
        """The context of a running call's span (for spans started inside the tool)."""
        span = self._tools.get(call_id)
        return trace.set_span_in_context(span) if span is not None else None

    # ----------------------------------------------------------------- events

    def on_event(self, event: RunEvent) -> None:
        """Open and close the `chat` and `execute_tool` spans from the run's events."""
        kind = event.kind
        if kind is EventKind.MODEL_START:
            self._chat_start(event)
        elif kind is EventKind.MODEL_END:
            self._chat_end(event)
        elif kind is EventKind.TOOL_START:
            self._tool_start(event)
        elif kind in (EventKind.TOOL_END, EventKind.DEFERRED):
            self._tool_end(event)

    def _chat_start(self, event: RunEvent) -> None:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": self._provider,
            "gen_ai.system": self._provider,
            "gen_ai.request.model": self._model,
            "golem.turn": event.turn,
            "golem.attempt": event.attempt,
        }
        state = self._state
        if self._content and state is not None:
            attributes["gen_ai.input.messages"] = _messages_json(state.messages)
        self._chat = self._tracer.start_span(
            f"chat {self._model}",
            context=self._run_ctx,
            kind=SpanKind.CLIENT,
            attributes=attributes,
        )

    def _chat_end(self, event: RunEvent) -> None:
        span, self._chat = self._chat, None
        if span is None:
            return
        if event.usage is not None:
            span.set_attribute("gen_ai.usage.input_tokens", event.usage.input_tokens)
            span.set_attribute("gen_ai.usage.output_tokens", event.usage.output_tokens)
        state = self._state
        if event.error is not None:
            span.set_attribute("error.type", type(event.error).__name__)
            span.record_exception(event.error)
            span.set_status(Status(StatusCode.ERROR, str(event.error)))
        elif state is not None and state.messages:
            last = state.messages[-1]
            if state.finish_reason:
                span.set_attribute("gen_ai.response.finish_reasons", [state.finish_reason])
            if self._content and last.role == "assistant":
                span.set_attribute("gen_ai.output.messages", _messages_json([last]))
        span.end()

    def _tool_start(self, event: RunEvent) -> None:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": event.tool_name,
            "gen_ai.tool.call.id": event.call_id,
            "gen_ai.tool.type": "function",
        }
        if event.approved:
            attributes["golem.tool.approved"] = True
        if self._content:
            attributes["gen_ai.tool.call.arguments"] = event.args
        self._tools[event.call_id] = self._tracer.start_span(
            f"execute_tool {event.tool_name}",
            context=self._run_ctx,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
        )

    def _tool_end(self, event: RunEvent) -> None:
        span = self._tools.pop(event.call_id, None)
        if span is None:
            return
        if event.kind is EventKind.DEFERRED:
            span.set_attribute("golem.tool.deferred", True)
        elif event.error is not None:
            span.set_attribute("error.type", type(event.error).__name__)
            span.record_exception(event.error)
            span.set_status(Status(StatusCode.ERROR, str(event.error)))
        elif self._content:
            span.set_attribute("gen_ai.tool.call.result", event.result)
        span.end()
