"""In-memory OpenTelemetry for the tracing tests (import after `importorskip("opentelemetry.sdk")`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from golem.integrations import otel

__all__ = ["instrumented", "memory_provider"]


def memory_provider(
    exporter: InMemorySpanExporter | None = None,
) -> tuple[TracerProvider, InMemorySpanExporter]:
    """An SDK tracer provider whose finished spans go to `exporter` (default: a new one)."""
    exp = exporter if exporter is not None else InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exp))
    return provider, exp


@contextmanager
def instrumented(**options: Any) -> Iterator[InMemorySpanExporter]:
    """`otel.instrument(**options)` on an in-memory provider for the block; yields its
    exporter."""
    provider, exporter = memory_provider()
    otel.instrument(provider, **options)
    try:
        yield exporter
    finally:
        otel.uninstrument()
