"""The approval service under `golem.integrations.otel.instrument()` (issue 11): each request is a server
span with the HTTP conventions' attributes and the authenticated operator as `enduser.id`;
the store operations it makes (a decision: who decided) are client spans under it."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from starlette.applications import Starlette
from starlette.routing import Route

from golem.integrations import otel
from tests.otel_support import memory_provider
from tests.support.service import bearer, call_raw, scope_of

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def server_spans(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.kind == SpanKind.SERVER]


def children(exporter: InMemorySpanExporter, parent: ReadableSpan) -> list[ReadableSpan]:
    assert parent.context is not None
    return [
        s
        for s in exporter.get_finished_spans()
        if s.parent is not None and s.parent.span_id == parent.context.span_id
    ]


async def test_a_decision_request_is_a_server_span_naming_the_operator(
    exporter: InMemorySpanExporter, client: httpx.AsyncClient
) -> None:
    res = await client.post(
        "/api/runs", json={"agent": "twin", "prompt": "go"}, headers=bearer("alice")
    )
    run_id = res.json()["run"]["id"]
    (start,) = server_spans(exporter)
    assert start.name == "POST /api/runs"
    assert attrs(start)["enduser.id"] == "alice"
    assert attrs(start)["http.response.status_code"] == res.status_code
    names = sorted(s.name for s in children(exporter, start))
    assert names == ["golem.durable.store.save_pending", "invoke_agent"], "the run and its save"
    exporter.clear()

    res = await client.post(
        f"/api/runs/{run_id}/calls/c1/decision",
        json={"decision": "approve"},
        headers={**bearer("olga"), "traceparent": TRACEPARENT, "user-agent": "inbox-test"},
    )
    assert res.status_code == 200
    (decide,) = server_spans(exporter)
    assert decide.name == "POST /api/runs/{run_id}/calls/{call_id}/decision"
    a = attrs(decide)
    assert a["http.route"] == "/api/runs/{run_id}/calls/{call_id}/decision"
    assert (a["http.request.method"], a["url.path"], a["url.scheme"]) == (
        "POST",
        f"/api/runs/{run_id}/calls/c1/decision",
        "http",
    )
    assert (a["server.address"], a["user_agent.original"]) == ("golem.test", "inbox-test")
    assert (a["http.response.status_code"], a["enduser.id"]) == (200, "olga")
    assert decide.parent is not None, "the caller's traceparent is the parent"
    assert f"{decide.parent.trace_id:032x}" == TRACEPARENT.split("-")[1]
    stored = [s for s in children(exporter, decide) if s.name == "golem.durable.store.decide"]
    assert len(stored) == 1
    assert attrs(stored[0])["golem.decided_by"] == "olga"
    assert attrs(stored[0])["gen_ai.tool.call.id"] == "c1"


async def test_refused_and_unknown_requests(
    exporter: InMemorySpanExporter, client: httpx.AsyncClient
) -> None:
    assert (await client.get("/api/runs")).status_code == 401
    assert (await client.get("/nowhere", headers=bearer("alice"))).status_code == 404
    refused, unknown = server_spans(exporter)
    assert refused.name == "GET /api/runs"
    assert "enduser.id" not in attrs(refused)
    assert attrs(refused)["http.response.status_code"] == 401
    assert refused.status.status_code == StatusCode.UNSET, "a 4xx is not a server error"
    assert unknown.name == "GET"
    assert "http.route" not in attrs(unknown)


async def test_without_server_spans_the_operator_goes_on_the_current_span(
    app: Starlette,
) -> None:
    provider, exporter = memory_provider()
    otel.instrument(provider, server_spans=False)  # the ASGI server is instrumented already
    tracer = provider.get_tracer("asgi-server")
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://golem.test") as client:
            with tracer.start_as_current_span("outer request", kind=SpanKind.SERVER):
                res = await client.get("/api/runs", headers=bearer("alice"))
    finally:
        otel.uninstrument()
    assert res.status_code == 200
    (outer,) = server_spans(exporter)
    assert outer.name == "outer request"
    assert attrs(outer)["enduser.id"] == "alice"
    assert [s.name for s in children(exporter, outer)] == ["golem.durable.store.list_runs"]


async def test_a_server_error_marks_the_span(
    exporter: InMemorySpanExporter, app: Starlette, store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the disk is gone")

    monkeypatch.setattr(store, "list_runs", broken)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://golem.test") as client:
        res = await client.get("/api/runs", headers=bearer("alice"))
    assert res.status_code == 500
    (span,) = server_spans(exporter)
    assert span.status.status_code == StatusCode.ERROR
    assert attrs(span)["enduser.id"] == "alice"
    assert attrs(span)["error.type"] == "RuntimeError"
    assert attrs(span)["http.response.status_code"] == 500


async def test_every_route_and_the_static_mount_are_named_by_their_template(
    exporter: InMemorySpanExporter, app: Starlette, client: httpx.AsyncClient
) -> None:
    expected = []
    for route in app.routes:
        if isinstance(route, Route):
            template = re.sub(r"\{(\w+):\w+\}", r"{\1}", route.path)
            method = sorted(route.methods or {"GET"})[0]
            await client.request(method, re.sub(r"\{\w+\}", "x", template))
            expected.append(f"{method} {template}")
    await client.get("/static/app.css")
    bare = scope_of("GET", "/api/runs/x")
    del bare["raw_path"]  # a server that sends none: routed by its decoded path
    assert (await call_raw(app, bare))[0] == 401
    names = [*expected, "GET /static/{path}", "GET /api/runs/{run_id}"]
    assert [s.name for s in server_spans(exporter)] == names
