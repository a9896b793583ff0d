"""`create_app(settings)`: the approval service as one Starlette ASGI app, and its routes."""

from __future__ import annotations

import asyncio
import functools
import logging
import re
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import unquote, unquote_to_bytes

from starlette.applications import Starlette
from starlette.convertors import Convertor, register_url_convertor
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Match, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from golem import __version__, _tracing
from golem.durable.store import Store, open_store
from golem.durable.worker import Worker
from golem.errors import StoreError
from golem.seal import as_seal_keys
from golem.service import api, audit, inbox, stream
from golem.service.auth import LoginLimiter, TokenFailures
from golem.service.credentials import token_credential
from golem.service.errors import ApiError, not_found, unreachable
from golem.service.middleware import HEADINGS, BodyLimit, RefuseBadUrl, Service
from golem.service.notify import Notifier
from golem.service.openapi import openapi_document, operation
from golem.service.pages import STATIC_DIR, render_error
from golem.service.schemas import OpenApiDocument
from golem.service.settings import ServiceSettings, ServiceState

__all__ = ["ROUTES", "create_app"]

log = logging.getLogger("golem.service")


@operation(op_id="openapi", responses={200: OpenApiDocument}, security=())
async def _openapi(request: Request) -> Response:
    """This document (with a bearer token, it names the agents the caller may see)."""
    state: ServiceState = request.app.state.golem
    try:  # a wrong token counts as a failure: the document would be a token oracle
        cred = token_credential(request)
    except ApiError:  # refused for a while: the public document
        cred = None
    agents = None if cred is None else [n for n in state.registry if cred.approver.may_see(n)]
    return JSONResponse(openapi_document(ROUTES, __version__, agents=agents or None))


class _AnyText(Convertor[str]):
    """A path parameter of any characters, `/` and line breaks included."""

    regex = "(?s:.*)"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("golem_any", _AnyText())


def _segment_path(scope: Scope) -> str | None:
    """The route path with `/` and `%` inside a segment kept escaped, others decoded; None
    without a `raw_path` that agrees with `path` (ADR 0061)."""
    raw = scope.get("raw_path")
    path: str = scope["path"]
    root = scope.get("root_path", "")
    if root and path.startswith(root + "/"):  # as Starlette routes: below the root path
        path = path[len(root) :]
    if not raw or not path.startswith("/"):
        return None
    segments = [
        unquote_to_bytes(s).decode("utf-8", "replace") for s in raw.split(b"?", 1)[0].split(b"/")
    ]
    # the tail of segments that is the route path (past a root): compare lengths until one
    # matches, so the work stays linear in the path
    decoded = "/".join(segments)
    at = -1  # the separator before segments[start]
    for start in range(1, len(segments)):
        at += len(segments[start - 1]) + 1
        if len(decoded) - at == len(path):
            if decoded[at:] != path:
                return None
            tail = segments[start:]
            return "/" + "/".join(t.replace("%", "%25").replace("/", "%2F") for t in tail)
    return None


_ROUTED = "golem.route_path"  # the scope key of `_segment_path`, worked out once


class _Route(Route):
    """A route matched against the request's segments (`_segment_path`): `{run_id}` spans
    one segment whatever it decodes to (`/runs/a%2Fb`); `golem_any` may span several."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope["type"] != "http":
            return super().matches(scope)
        if _ROUTED not in scope:
            scope[_ROUTED] = _segment_path(scope)
        routed: str | None = scope[_ROUTED]
        if routed is None:  # no raw path to tell separators apart: the server's path
            return super().matches(scope)
        match = self.path_regex.match(routed)
        if not match:
            return Match.NONE, {}
        params: dict[str, Any] = dict(scope.get("path_params", {}))
        for key, value in match.groupdict().items():
            params[key] = self.param_convertors[key].convert(unquote(value))
        child: Scope = {"endpoint": self.endpoint, "path_params": params}
        if self.methods and scope["method"] not in self.methods:
            return Match.PARTIAL, child
        return Match.FULL, child


ROUTES: list[BaseRoute] = [
    # JSON API (bearer tokens; /api/events also takes a stream token or the session)
    _Route("/api/health", api.health, methods=["GET"]),
    _Route("/api/openapi.json", _openapi, methods=["GET"]),
    _Route("/api/whoami", api.whoami, methods=["GET"]),
    _Route("/api/agents", api.agents, methods=["GET"]),
    _Route("/api/runs", api.list_runs, methods=["GET"]),
    _Route("/api/runs", api.start, methods=["POST"]),
    _Route("/api/calls", api.list_calls, methods=["GET"]),
    _Route("/api/runs/{run_id}", api.show_run, methods=["GET"]),
    _Route("/api/runs/{run_id}/calls/{call_id:golem_any}/decision", api.decide, methods=["POST"]),
    _Route("/api/audit", audit.api_audit, methods=["GET"]),
    _Route("/api/notifications", audit.api_deliveries, methods=["GET"]),
    _Route("/api/events", stream.GuardedEvents(), methods=["GET"]),
    _Route("/api/stream-token", api.stream_token, methods=["POST"]),
    # Web inbox (session cookie + CSRF token)
    _Route("/", inbox.inbox_page, methods=["GET"]),
    _Route("/login", inbox.login_page, methods=["GET"]),
    _Route("/login", inbox.login, methods=["POST"]),
    _Route("/logout", inbox.logout, methods=["POST"]),
    _Route("/runs", inbox.runs_page, methods=["GET"]),
    _Route("/runs", inbox.start_form, methods=["POST"]),
    _Route("/runs/{run_id}", inbox.run_page, methods=["GET"]),
    _Route("/audit", audit.audit_page, methods=["GET"]),
    _Route("/notifications", audit.deliveries_page, methods=["GET"]),
    _Route("/runs/{run_id}/decisions", inbox.decide_run_form, methods=["POST"]),
    _Route("/runs/{run_id}/resolve", inbox.resolve_form, methods=["POST"]),
    _Route(
        "/runs/{run_id}/calls/{call_id:golem_any}/decision", inbox.decide_form, methods=["POST"]
    ),
    Mount("/static", app=StaticFiles(directory=STATIC_DIR), name="static"),
]


class _TraceRequests:
    """Each HTTP request under an OpenTelemetry server span (`METHOD /route/{template}`)
    while `otel.instrument()` is in effect."""

    def __init__(self, app: ASGIApp, routes: Sequence[BaseRoute]) -> None:
        self.app = app
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        hooks = _tracing.hooks
        if hooks is None or scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await hooks.serve(self.app, scope, receive, send, self._route(scope))

    def _route(self, scope: Scope) -> str:
        """The template of the route that serves `scope` ("" when none does)."""
        for route in self.routes:
            match, _ = route.matches(scope)
            if match is Match.NONE:
                continue
            if isinstance(route, Mount):
                return route.path + "/{path}"
            return _CONVERTER.sub(r"{\1}", str(getattr(route, "path", "")))
        return ""


_CONVERTER = re.compile(r"\{(\w+):\w+\}")  # `{call_id:golem_any}`: the converter is left out


def _is_api(request: Request) -> bool:
    """JSON for the API and for clients that ask for JSON rather than HTML; else a page."""
    if request.url.path.startswith("/api/") or request.url.path == "/api":
        return True
    accept = request.headers.get("accept", "")
    return "application/json" in accept and "text/html" not in accept


def _answer(
    request: Request, error: ApiError, heading: str = "", headers: bool = False
) -> Response:
    """`error` as JSON (`_is_api`) or as a page (with the error's `headers` if asked)."""
    if _is_api(request):
        return error.response()
    heading = heading or HEADINGS.get(error.status, "Error")
    page = render_error(request, error.status, heading, error.message)
    page.headers.update(error.headers if headers else {})
    return page


async def _error(request: Request, exc: Exception) -> Response:
    """The answer to a refusal (`ApiError`), an unknown route or method, a store that cannot
    be reached (503 with `Retry-After`), or anything else (500, logged)."""
    if isinstance(exc, ApiError):
        return _answer(request, exc)
    if isinstance(exc, HTTPException):
        code = exc.status_code
        if _is_api(request):
            response: Response = not_found(request, exc).response()
        else:
            message = "There is no such page." if code == 404 else str(exc.detail)
            response = render_error(request, code, HEADINGS.get(code, "Error"), message)
        if code == 405:  # every method some route serves here (Starlette's: the first route's)
            routes = request.app.router.routes
            matched = [r for r in routes if r.matches(request.scope)[0] is not Match.NONE]
            methods = {m for r in matched if isinstance(r, Route) for m in r.methods or ()}
            response.headers["Allow"] = ", ".join(sorted(methods))
        return response
    where = (request.method, request.url.path)
    if isinstance(exc, StoreError) and unreachable(exc):
        log.warning("store unavailable on %s %s: %s", *where, exc)
        message = "the store cannot be reached just now; try again shortly"
        error = ApiError(503, "store_unavailable", message, headers={"Retry-After": "1"})
        return _answer(request, error, "Try again shortly", headers=True)
    log.exception("unhandled error on %s %s", *where, exc_info=exc)
    error = ApiError(500, "internal_error", "the service failed; see its log")
    try:
        return _answer(request, error, "Something went wrong")
    except Exception:  # the page itself cannot be drawn: fall back to JSON
        return error.response()


def create_app(settings: ServiceSettings) -> Starlette:
    """Build the approval service from `settings`: JSON API under `/api`, web inbox at `/`."""
    state = ServiceState(
        settings=settings,
        store=None if isinstance(settings.store, str) else settings.store,
        seal_key=None if settings.seal_key is None else as_seal_keys(settings.seal_key),
        login_limiter=LoginLimiter(settings.login_attempts_per_minute, 60.0),
        token_failures=TokenFailures(settings.token_failures_per_minute, 60.0),
    )
    app = Service(
        routes=list(ROUTES),
        middleware=[
            Middleware(_TraceRequests, routes=ROUTES),
            Middleware(BodyLimit, limit=settings.max_body_bytes, timeout=settings.body_timeout),
            Middleware(RefuseBadUrl),
        ],
        exception_handlers=dict.fromkeys((ApiError, HTTPException, StoreError, Exception), _error),
        lifespan=functools.partial(_lifespan, settings=settings, state=state),
    )
    app.state.golem = state
    return app


@asynccontextmanager
async def _lifespan(
    app: Starlette, *, settings: ServiceSettings, state: ServiceState
) -> AsyncIterator[None]:
    """Open the store (given a URL), run the notifier and the in-process worker, then stop
    them and close what was opened."""
    opened: Store | None = None  # the store this app opened, and must close
    if isinstance(settings.store, str):
        store = opened = state.store = await open_store(settings.store)
    else:
        store = settings.store
    stop = asyncio.Event()
    tasks: list[asyncio.Task[None]] = []
    if settings.webhooks:
        state.notifier = Notifier(
            store,
            settings.webhooks,
            public_url=settings.public_url,
            expiring_within=settings.expiring_within,
        )
        tasks.append(asyncio.create_task(state.notifier.run(stop)))
    if settings.run_worker:
        worker = Worker(
            store,
            settings.registry,
            worker_id=settings.worker_id,
            lease_seconds=settings.lease_seconds,
            concurrency=settings.worker_concurrency,
            seal_key=state.seal_key,
        )
        # the worker first: it finishes the resumes in progress, then stops
        run = worker.run_forever(settings.worker_poll_interval, stop)
        tasks.insert(0, asyncio.create_task(run))
        log.info("in-process worker %s started", worker.worker_id)
    try:
        yield
    finally:
        stop.set()
        for task in tasks:
            await task
        if opened is not None:
            state.store = None
            await opened.close()
