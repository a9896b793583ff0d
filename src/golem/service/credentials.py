"""Who is asking: the bearer token of an API request, or the session cookie of a page."""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response

from golem.service.auth import Credential
from golem.service.errors import ApiError
from golem.service.settings import state_of

# Internals of `golem.service.create_app`; nothing here is public API.
__all__: list[str] = []

SESSION_COOKIE = "golem_session"
SESSION_COOKIE_RE = re.compile(r"(?:^|;)\s*" + re.escape(SESSION_COOKIE) + r"\s*=")


def session(request: Request) -> tuple[Credential, str] | None:
    """The signed-in approver and the raw session value, or None (also when the session
    cookie is sent twice: which one would count?)."""
    if sum(len(SESSION_COOKIE_RE.findall(v)) for v in request.headers.getlist("cookie")) > 1:
        return None
    value = request.cookies.get(SESSION_COOKIE)
    cred = state_of(request).auth.verify_session(value)
    return None if cred is None or value is None else (cred, value)


def token_credential(request: Request) -> Credential | None:
    """The credential of the request's bearer token (None without a right one), counting
    wrong ones per client address; 429 with `Retry-After` after too many (`TokenFailures`)."""
    header = request.headers.get("authorization") or ""
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    state = state_of(request)
    address = request.client.host if request.client else "unknown"
    wait = state.token_failures.wait(address)
    if wait > 0:
        seconds = max(1, math.ceil(wait))
        raise ApiError(
            429,
            "too_many_failures",
            f"too many wrong tokens from this address: wait {seconds} s",
            headers={"Retry-After": str(seconds)},
        )
    cred = state.auth.authenticate(token)
    if cred is None:
        state.token_failures.count(address)
    return cred


BearerHandler = Callable[[Request, Credential], Awaitable[Response]]


def with_bearer(handler: BearerHandler) -> Callable[[Request], Awaitable[Response]]:
    """Make `handler(request, cred)` an API endpoint that first checks the bearer token
    (401 without a known one, 429 after too many wrong ones)."""

    @functools.wraps(handler)
    async def endpoint(request: Request) -> Response:
        cred = token_credential(request)
        if cred is None:
            raise ApiError(401, "unauthenticated", "send 'Authorization: Bearer <token>'")
        return await handler(request, cred)

    return endpoint
