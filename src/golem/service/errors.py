"""`ApiError`: a refused request as an HTTP status, a code and a message; it changes nothing
and answers `{"error": {"code": ..., "message": ...}}` (or a page, `app.py`)."""

from __future__ import annotations

from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from golem.durable.store import (
    CallExpired,
    CallNotFound,
    DecisionConflict,
    InvalidDecision,
    RunNotFound,
    RunNotPending,
    StoreBusy,
    StoreReadOnly,
    StoreTimeout,
)
from golem.errors import StoreError
from golem.service import schemas

# Internals of `golem.service.create_app`; nothing here is public API.
__all__: list[str] = []


class ApiError(Exception):
    """A 4xx/5xx answer with a JSON error body; raised by handlers, rendered by `app.py`."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        details: list[dict[str, Any]] | None = None,
        *,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details
        self.headers = headers or {}

    def response(self) -> Response:
        """The JSON response for this error (`schemas.ErrorBody`)."""
        body = schemas.ErrorBody(
            error=schemas.ErrorInfo(
                code=self.code,
                message=self.message,
                details=None
                if self.details is None
                else [schemas.ErrorDetail(**d) for d in self.details],
            )
        )
        headers = dict(self.headers)
        if self.status == 401:
            headers["WWW-Authenticate"] = 'Bearer realm="golem"'
        return Response(
            body.model_dump_json(exclude_none=True),
            status_code=self.status,
            headers=headers,
            media_type="application/json",
        )


_STORE_ERRORS: dict[type[Exception], tuple[int, str]] = {
    RunNotFound: (404, "run_not_found"),
    CallNotFound: (404, "call_not_found"),
    CallExpired: (409, "call_expired"),
    DecisionConflict: (409, "decision_conflict"),
    RunNotPending: (409, "run_not_pending"),
    InvalidDecision: (422, "invalid_decision"),
}


def store_error(exc: Exception) -> ApiError:
    """Translate a store error raised by a decision or lookup into an `ApiError`."""
    for kind, (status, code) in _STORE_ERRORS.items():
        if isinstance(exc, kind):
            return ApiError(status, code, str(exc))
    raise exc


def unreachable(exc: BaseException) -> bool:
    """Whether `exc` says the store cannot be reached (down, busy, timed out, read-only)."""
    return type(exc) is StoreError or isinstance(exc, (StoreTimeout, StoreBusy, StoreReadOnly))


def not_found(request: Request, exc: HTTPException) -> ApiError:
    """The JSON error for an unknown `/api` route or a wrong method."""
    if exc.status_code == 405:
        return ApiError(405, "method_not_allowed", f"{request.method} is not allowed here")
    if exc.status_code == 404:
        return ApiError(404, "not_found", f"no API route {request.url.path}")
    return ApiError(exc.status_code, "http_error", str(exc.detail))
