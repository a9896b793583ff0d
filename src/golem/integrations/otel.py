"""OpenTelemetry spans for runs, model requests and tool calls (extra `[otel]`).

```python
from golem.integrations import otel

otel.instrument()  # every agent's runs, on the global tracer provider
```

Runs are `invoke_agent` spans with `chat` and `execute_tool` spans under them (GenAI
semantic conventions; content only with `include_content=True`); a paused run's
`Result.trace_context` links its resume (docs/adr/0021). Store operations, worker resumes
and service requests are traced too (ADR 0026). Needs only `opentelemetry-api` at run time.
"""

from __future__ import annotations

import functools
import inspect
import json
import time
from collections.abc import Callable, Coroutine, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, ClassVar

try:
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace
    from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "golem.integrations.otel needs OpenTelemetry: pip install 'golem-agents[otel]'"
    ) from exc

from golem import _tracing
from golem.events import EventKind, RunEvent
from golem.messages import Message
from golem.providers import FallbackModel

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

_PROPAGATOR = TraceContextTextMapPropagator()

_global: tuple[trace.TracerProvider | None, bool] | None = None
"""(provider or None for the global one, include_content) once `instrument()` ran."""


def instrument(
    tracer_provider: trace.TracerProvider | None = None,
    *,
    include_content: bool = False,
    server_spans: bool = True,
) -> None:
    """Trace every agent's runs, the store's operations, the workers' resumes and the
    approval service's requests.

    Args:
        tracer_provider: Where spans go (None: the global provider at each run).
        include_content: Also record prompts, answers, tool arguments and results.
        server_spans: A server span per service request; False when the ASGI server is
            instrumented already (golem then only adds `enduser.id` to its span).
    """
    global _global
    _global = (tracer_provider, include_content)
    _tracing.hooks = _Operations(tracer_provider, server_spans=server_spans)


def uninstrument() -> None:
    """Stop tracing agents that have no `tracer_provider` of their own, and the store,
    worker and service operations."""
    global _global
    _global = None
    _tracing.hooks = None


def is_instrumented() -> bool:
    """Whether `instrument()` is in effect."""
    return _global is not None


def run_tracer(
    agent: Any, tracer_provider: trace.TracerProvider | None, trace_context: str = ""
) -> RunTracer | None:
    """The tracer of one run of `agent` (its own `tracer_provider` first), or None."""
    settings = _global
    if tracer_provider is None:
        if settings is None:
            return None
        tracer_provider = settings[0] or trace.get_tracer_provider()
    include_content = settings[1] if settings is not None else False
    tracer = _tracer_of(tracer_provider)
    return RunTracer(tracer, agent, include_content=include_content, resumes=trace_context)


_last_tracer: tuple[trace.TracerProvider, trace.Tracer] | None = None


def _tracer_of(provider: trace.TracerProvider) -> trace.Tracer:
    """golem's tracer of `provider`, kept for the last provider asked (cheaper than a span)."""
    global _last_tracer
    last = _last_tracer
    if last is not None and last[0] is provider:
        return last[1]
    tracer = provider.get_tracer("golem")
    _last_tracer = (provider, tracer)
    return tracer


def _provider_name(model: Any) -> str:
    """`gen_ai.provider.name`: the primary model's `provider` (the first of a
    `FallbackModel`), else its package under `golem.providers`, else its class name."""
    while isinstance(model, FallbackModel):
        model = model.models[0]
    provider = getattr(model, "provider", None)
    if isinstance(provider, str) and provider:
        return provider
    module = type(model).__module__
    if module.startswith("golem.providers."):
        name = module.split(".")[2]
        return "gcp.gemini" if name == "gemini" else name
    return type(model).__name__


def _model_name(model: Any) -> str:
    """`gen_ai.request.model`: the model's `model_name`, else its `model`, else ""."""
    names = (getattr(model, attr, None) for attr in ("model_name", "model"))
    return next((n for n in names if isinstance(n, str) and n), "")


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


def _fail(span: Span, exc: BaseException, kind: str = "", message: str | None = None) -> None:
    """Mark `span` failed by `exc` (`error.type`: `kind`, else its class name)."""
    span.set_attribute("error.type", kind or type(exc).__name__)
    span.record_exception(exc)
    span.set_status(Status(StatusCode.ERROR, str(exc) if message is None else message))


class RunTracer:
    """The spans of one run, started by the agent and fed by the run's events."""

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

    def start(self, state: RunState, *, operation: str = "run") -> None:
        """Open the run's span (`operation`: "run" or "resume") and follow `state`."""
        self.open(state.run_id, state.conversation_id, operation=operation)
        self.bind(state)

    @property
    def is_open(self) -> bool:
        """Whether the run's span is open (started and not yet finished or failed)."""
        return self._run is not None

    def _gen_ai(self, operation: str) -> dict[str, Any]:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": operation,
            "gen_ai.provider.name": self._provider,
            "gen_ai.system": self._provider,
        }
        if self._model:
            attributes["gen_ai.request.model"] = self._model
        return attributes

    def open(self, run_id: str, conversation_id: str, *, operation: str = "run") -> None:
        """Open the run's `invoke_agent` span and make it current, before the run has its
        state (`bind`)."""
        name = getattr(self._agent, "name", "")
        attributes = self._gen_ai("invoke_agent") | {
            "gen_ai.conversation.id": conversation_id,
            "golem.run.id": run_id,
            "golem.run.operation": operation,
        }
        if name:
            attributes["gen_ai.agent.name"] = name
        links = []
        paused = parse_traceparent(self._resumes)
        if paused is not None:
            links.append(Link(paused, {"golem.link": "resumes_paused_run"}))
            attributes["golem.run.resumes"] = self._resumes
        self._run = self._tracer.start_span(
            f"invoke_agent {name}" if name else "invoke_agent",
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            links=links,
        )
        self._run_ctx = trace.set_span_in_context(self._run)
        self._token = otel_context.attach(self._run_ctx)

    def bind(self, state: RunState) -> None:
        """Follow `state`: the run whose model and tool spans go under the open span."""
        self._state = state

    def finish(self, result: Result[Any]) -> str:
        """Close the span of a run that returned; its W3C `traceparent`."""
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
            pending = [c.call_id for c in result.pending.calls]
            span.set_attribute("golem.run.pending_call_ids", pending)
        else:
            span.set_attribute("golem.run.status", "completed")
            if self._content and result.output is not None:
                output = [{"role": "assistant", "content": str(result.output)}]
                span.set_attribute("gen_ai.output.messages", json.dumps(output, ensure_ascii=False))
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
        _fail(span, exc, type(exc.__cause__ or exc).__name__)
        self._end(span)

    def _end(self, span: Span) -> None:
        span.end()
        self._run = None
        if self._token is not None:
            otel_context.detach(self._token)  # type: ignore[arg-type]
            self._token = None

    def _close_open_spans(self, exc: BaseException | None = None) -> None:
        for span in [self._chat, *self._tools.values()]:
            if span is not None:
                if exc is not None:
                    span.set_status(Status(StatusCode.ERROR, "the run ended"))
                span.end()
        self._chat = None
        self._tools.clear()

    def enter_tool(self, call_id: str) -> object | None:
        """Make the call's `execute_tool` span current; the token `leave_tool` takes."""
        span = self._tools.get(call_id)
        return None if span is None else otel_context.attach(trace.set_span_in_context(span))

    def leave_tool(self, token: object | None) -> None:
        """Undo `enter_tool`."""
        if token is not None:
            otel_context.detach(token)  # type: ignore[arg-type]

    def on_event(self, event: RunEvent) -> None:
        """Open and close the `chat` and `execute_tool` spans (not a sub-agent's)."""
        if not event.namespace:
            handler = self._HANDLERS.get(event.kind)
            if handler is not None:
                handler(self, event)

    def _chat_start(self, event: RunEvent) -> None:
        attributes = self._gen_ai("chat") | {
            "golem.turn": event.turn,
            "golem.attempt": event.attempt,
        }
        if self._content and self._state is not None:
            attributes["gen_ai.input.messages"] = _messages_json(self._state.messages)
        self._chat = self._tracer.start_span(
            f"chat {self._model}" if self._model else "chat",
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
            _fail(span, event.error)
        elif state is not None and state.messages:
            if state.finish_reason:
                span.set_attribute("gen_ai.response.finish_reasons", [state.finish_reason])
            if state.model_name:
                span.set_attribute("gen_ai.response.model", state.model_name)
            if self._content and state.messages[-1].role == "assistant":
                span.set_attribute("gen_ai.output.messages", _messages_json(state.messages[-1:]))
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
            _fail(span, event.error)
        elif self._content:
            span.set_attribute("gen_ai.tool.call.result", event.result)
        span.end()

    _HANDLERS: ClassVar[dict[EventKind, Callable[[RunTracer, RunEvent], None]]] = {
        EventKind.MODEL_START: _chat_start,
        EventKind.MODEL_END: _chat_end,
        EventKind.TOOL_START: _tool_start,
        EventKind.TOOL_END: _tool_end,
        EventKind.DEFERRED: _tool_end,
    }


@functools.cache
def _signature(fn: Callable[..., Any]) -> inspect.Signature:
    return inspect.signature(fn)


_STRINGS = (  # a store or worker method's string argument → its span attribute
    ("run_id", "golem.run.id"),
    ("call_id", "gen_ai.tool.call.id"),
    ("decided_by", "golem.decided_by"),
    ("resolved_by", "golem.resolved_by"),
)


def _call_attributes(fn: Callable[..., Any], args: Any, kwargs: Any) -> dict[str, Any]:
    """Span attributes from a store or worker method's arguments, by parameter name; {}
    when they do not bind."""
    try:
        arguments = _signature(fn).bind_partial(*args, **kwargs).arguments
    except Exception:
        return {}
    attrs: dict[str, Any] = {}
    worker_id = arguments.get("worker_id", getattr(arguments.get("self"), "worker_id", None))
    if isinstance(worker_id, str):
        attrs["golem.durable.worker.id"] = worker_id
    run = arguments.get("run")  # a NewRun
    if run is not None:
        attrs["golem.run.id"] = run.id
        attrs["gen_ai.agent.name"] = run.agent
        if run.started_by:
            attrs["golem.run.started_by"] = run.started_by
    if arguments.get("claimed") is not None:
        attrs.update(_claimed_attributes(arguments["claimed"]))
    if arguments.get("lease") is not None:  # the worker's lease
        attrs["golem.run.id"] = arguments["lease"].run_id
    for name, attr in _STRINGS:
        if isinstance(arguments.get(name), str):
            attrs[attr] = arguments[name]
    if arguments.get("decision") is not None:
        attrs["golem.decision"] = str(arguments["decision"].kind.value)
    outcome = arguments.get("outcome")
    if outcome is not None:
        attrs["golem.run.status"] = str(outcome.status.value)
        if outcome.next_run is not None:
            attrs["golem.run.child_id"] = outcome.next_run.id
    return attrs


def _claimed_attributes(claimed: Any) -> dict[str, Any]:
    return {
        "golem.run.id": claimed.run.id,
        "gen_ai.agent.name": claimed.run.agent,
        "golem.run.attempt": claimed.run.attempt,
        "golem.durable.worker.id": claimed.worker_id,
    }


def _result_attributes(result: Any) -> dict[str, Any] | None:
    """Attributes from a store operation's result; None for an idle claim."""
    if result is None:
        return None  # claim_ready found nothing ready (the only store method returning None)
    if isinstance(result, list):
        if result and isinstance(result[0], str):  # a sweep's changed runs
            return {"golem.run.ids": result}
        if result and hasattr(result[0], "worker_id") and hasattr(result[0], "run"):
            return {  # a batch claim
                "golem.run.ids": [c.run.id for c in result],
                "golem.durable.worker.id": result[0].worker_id,
                "db.response.returned_rows": len(result),
            }
        return {"db.response.returned_rows": len(result)}
    items = getattr(result, "items", None)
    if isinstance(items, list):  # a Page
        return {"db.response.returned_rows": len(items)}
    if hasattr(result, "worker_id") and hasattr(result, "run"):  # a ClaimedRun
        return _claimed_attributes(result)
    status = getattr(result, "status", None)
    if status is not None and hasattr(result, "calls"):  # a RunRecord
        return {"golem.run.status": str(status.value)}
    return {}


_SWEEPS = frozenset({"sweep_expired", "sweep_interrupted", "claim_ready_many"})  # no span if idle


def _op_fail(span: Span, exc: BaseException) -> None:
    _fail(span, exc, type(exc).__qualname__, str(exc) or type(exc).__name__)


class _Operations:
    """The spans of store operations, worker resumes and service requests (`_tracing.Hooks`)."""

    def __init__(self, provider: trace.TracerProvider | None, *, server_spans: bool) -> None:
        self._provider = provider
        self.server_spans = server_spans

    def _tracer(self) -> trace.Tracer:
        return _tracer_of(self._provider or trace.get_tracer_provider())

    def _current(
        self,
        name: str,
        kind: SpanKind,
        attributes: dict[str, Any],
        context: otel_context.Context | None = None,
    ) -> AbstractContextManager[Span]:
        """A span made current for the block; the block records its own errors (`_op_fail`)."""
        return self._tracer().start_as_current_span(
            name,
            context=context,
            kind=kind,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        )

    async def store_op(
        self, op: str, fn: Callable[..., Coroutine[Any, Any, Any]], args: Any, kwargs: Any
    ) -> Any:
        """Run the store method, then record it as a client span from its start time
        (none for an idle claim or sweep)."""
        start = time.time_ns()
        try:
            result = await fn(*args, **kwargs)
        except BaseException as exc:
            span = self._store_span(op, fn, args, kwargs, start)
            _op_fail(span, exc)
            span.end()
            raise
        extra = _result_attributes(result)
        if extra is None or (op in _SWEEPS and not result):
            return result
        span = self._store_span(op, fn, args, kwargs, start)
        span.set_attributes(extra)
        span.end()
        return result

    def _store_span(
        self, op: str, fn: Callable[..., Any], args: Any, kwargs: Any, start: int
    ) -> Span:
        module = type(args[0]).__module__
        postgres, sqlite = module.endswith(".postgres"), module.endswith(".sqlite")
        system = "postgresql" if postgres else "sqlite" if sqlite else "other_sql"
        attributes = {
            "db.system.name": system,
            "db.system": system,
            "golem.durable.store.operation": op,
            **_call_attributes(fn, args, kwargs),
        }
        return self._tracer().start_span(
            f"golem.durable.store.{op}",
            kind=SpanKind.CLIENT,
            attributes=attributes,
            start_time=start,
        )

    async def worker_op(
        self, op: str, fn: Callable[..., Coroutine[Any, Any, Any]], args: Any, kwargs: Any
    ) -> Any:
        """Run the worker step under a current span (the resumed run's spans nest in it)."""
        attributes = {"golem.durable.worker.operation": op, **_call_attributes(fn, args, kwargs)}
        with self._current(f"golem.durable.worker.{op}", SpanKind.INTERNAL, attributes) as span:
            try:
                return await fn(*args, **kwargs)
            except BaseException as exc:
                _op_fail(span, exc)
                raise

    def identify(self, identity: str) -> None:
        """Set `enduser.id` on the current span (the request's server span)."""
        span = trace.get_current_span()
        if span.is_recording():
            span.set_attribute("enduser.id", identity)

    async def serve(self, app: Any, scope: Any, receive: Any, send: Any, route: str) -> None:
        """Handle one HTTP request under a server span (HTTP semantic conventions)."""
        if not self.server_spans:
            await app(scope, receive, send)
            return
        headers: dict[str, str] = {}
        for key, value in scope.get("headers") or ():
            name, text = key.decode("latin-1").lower(), value.decode("latin-1")
            headers[name] = f"{headers[name]},{text}" if name in headers else text
        method = str(scope.get("method", "GET"))
        attributes: dict[str, Any] = {
            "http.request.method": method,
            "url.path": str(scope.get("path", "")),
            "url.scheme": str(scope.get("scheme", "http")),
            "network.protocol.version": str(scope.get("http_version", "1.1")),
        }
        if route:
            attributes["http.route"] = route
        host = headers.get("host", "")
        if host:
            name, _, port = host.rpartition(":")
            if name and port.isdigit():
                attributes["server.address"] = name
                attributes["server.port"] = int(port)
            else:
                attributes["server.address"] = host
        if scope.get("client"):
            attributes["client.address"] = str(scope["client"][0])
        if headers.get("user-agent"):
            attributes["user_agent.original"] = headers["user-agent"]
        status: list[int] = []

        async def send_status(message: Any) -> None:
            if message.get("type") == "http.response.start":
                status.append(int(message["status"]))
            await send(message)

        parent = propagate.extract(headers)
        name = f"{method} {route}" if route else method
        with self._current(name, SpanKind.SERVER, attributes, parent) as span:
            try:
                await app(scope, receive, send_status)
            except BaseException as exc:
                if status:
                    span.set_attribute("http.response.status_code", status[0])
                elif isinstance(exc, Exception):  # the server's error middleware answers 500
                    span.set_attribute("http.response.status_code", 500)
                _op_fail(span, exc)
                raise
            if status:
                span.set_attribute("http.response.status_code", status[0])
                if status[0] >= 500:
                    span.set_attribute("error.type", str(status[0]))
                    span.set_status(Status(StatusCode.ERROR))
