"""What every request passes before a handler: bad URLs and repeated headers refused, body
size and time limits, and the security headers on every answer (ADR 0050)."""

from __future__ import annotations

import asyncio
from urllib.parse import unquote_plus, unquote_to_bytes

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from golem.service.credentials import SESSION_COOKIE, SESSION_COOKIE_RE
from golem.service.errors import ApiError
from golem.service.pages import render_error

# Internals of `golem.service.create_app`; nothing here is public API.
__all__: list[str] = []


CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)


def _too_large(limit: int) -> Response:
    return ApiError(413, "payload_too_large", f"the request body exceeds {limit} bytes").response()


class BodyLimit:
    """413 for a request body over `limit` bytes, 408 for one that takes longer than
    `timeout` seconds in all; the body is read here and replayed to the app."""

    def __init__(self, app: ASGIApp, limit: int, timeout: float) -> None:
        self.app = app
        self.limit = limit
        self.timeout = timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
                if declared > self.limit:
                    await _too_large(self.limit)(scope, receive, send)
                    return
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(self.timeout):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size > self.limit:
                        await _too_large(self.limit)(scope, receive, send)
                        return
                    chunks.append(chunk)
                    if not message.get("more_body", False):
                        break
        except TimeoutError:
            slow = ApiError(
                408, "request_timeout", f"the request body took longer than {self.timeout:g} s"
            )
            await slow.response()(scope, receive, send)
            return
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


class RefuseBadUrl:
    """400 for a URL with a NUL, a non-UTF-8 escape or a query parameter named twice
    (`invalid_url`), or a single-valued header or the session cookie sent twice
    (`conflicting_headers`); ADR 0069, ADR 0073."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            problem = _url_problem(scope)
            error = None if problem is None else ApiError(400, "invalid_url", problem)
            twice = _header_problem(scope) if error is None else None
            error = ApiError(400, "conflicting_headers", twice) if twice is not None else error
            if error is not None:
                if scope["path"].startswith("/api/"):
                    response: Response = error.response()
                else:
                    response = render_error(Request(scope), 400, HEADINGS[400], error.message)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _url_problem(scope: Scope) -> str | None:
    """What makes the request's URL unreadable (None: nothing)."""
    query: bytes = scope.get("query_string", b"")
    if "\x00" in scope["path"] or b"%00" in query:
        return "the URL contains a NUL character"
    raw = scope.get("raw_path")
    for part, where in ((raw, "path"), (query.replace(b"+", b" "), "query")):
        if part and b"%" in part:
            try:
                unquote_to_bytes(part).decode("utf-8")
            except UnicodeDecodeError:
                return f"the URL's {where} has escapes that are not UTF-8 (%XX of UTF-8 bytes)"
    if b"&" in query:  # no parameter of the service takes several values
        seen: set[str] = set()
        for pair in query.decode("latin-1").split("&"):
            name = pair.partition("=")[0]
            if "%" in name or "+" in name:  # as Starlette reads it (`parse_qsl`)
                name = unquote_plus(name)
            if not pair or name in seen:
                if pair:
                    return f"the query names the {ascii(name)[1:-1][:100]} parameter twice"
                continue
            seen.add(name)
    return None


_ONCE = frozenset(  # request headers read as one value
    b"authorization host origin referer sec-fetch-site content-type content-length "
    b"transfer-encoding last-event-id idempotency-key".split()
)


def _header_problem(scope: Scope) -> str | None:
    """A single-valued header or the session cookie sent twice (None: neither)."""
    seen: set[bytes] = set()
    sessions = 0
    for name, value in scope.get("headers", ()):
        if name in _ONCE:
            if name in seen:
                return f"the request has more than one {name.decode('latin-1')} header; send one"
            seen.add(name)
        elif name == b"cookie":
            sessions += len(SESSION_COOKIE_RE.findall(value.decode("latin-1")))
    if sessions > 1:  # set for a parent domain by a neighbour, or for another path
        return (
            f"the {SESSION_COOKIE} cookie is sent more than once (another site under "
            "this domain may have set one): clear this site's cookies and sign in again"
        )
    return None


class _SecurityHeaders:
    """A strict CSP and friends on every response, `Cache-Control: no-store` but on static
    files (unless set), HSTS over https (ADR 0050)."""

    HEADERS: tuple[tuple[bytes, bytes], ...] = (
        (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
        (b"x-content-type-options", b"nosniff"),
        (b"referrer-policy", b"no-referrer"),
        (b"x-frame-options", b"DENY"),
        (b"cross-origin-opener-policy", b"same-origin"),
        (b"cross-origin-resource-policy", b"same-origin"),
        (b"permissions-policy", b"camera=(), microphone=(), geolocation=(), payment=(), usb=()"),
    )
    HSTS = (b"strict-transport-security", b"max-age=31536000")

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        extra = list(self.HEADERS)
        if scope.get("scheme") == "https":
            extra.append(self.HSTS)
        cacheable = scope["path"].startswith("/static/")

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = dict(message)
                headers = list(message.get("headers", []))
                if not cacheable and not any(k.lower() == b"cache-control" for k, _ in headers):
                    headers.append((b"cache-control", b"no-store"))
                message["headers"] = [*headers, *extra]
            await send(message)

        await self.app(scope, receive, with_headers)


class Service(Starlette):
    """Starlette with `_SecurityHeaders` around everything, its own 500 answers included."""

    def build_middleware_stack(self) -> ASGIApp:
        return _SecurityHeaders(super().build_middleware_stack())


HEADINGS = {
    400: "Bad request",
    401: "Sign in again",
    403: "Not allowed",
    404: "Not found",
    405: "Method not allowed",
    409: "Already decided or no longer pending",
    408: "Too slow",
    429: "Too many attempts",
    413: "Too large",
    415: "Unsupported form",
    422: "Invalid input",
    503: "Starting",
}
