"""`ApiError`: a refused request as an HTTP status, a code and a message; it changes nothing
and answers `{"error": {"code": ..., "message": ...}}` (or a page, `app.py`). Requests are
read strictly (JSON, query parameters, storable text): what does not fit is an `ApiError`."""

from __future__ import annotations

import json
import math
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
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


MAX_JSON_DEPTH = 64  # deepest nesting accepted in a request body


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number (numbers must be finite)")


def _quoted(text: str, limit: int = 40) -> str:
    """`text` for an error message: at most `limit` characters of it, and its length."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{_quoted(text)} is out of range (numbers must be finite)")
    return value


_MAX_INT_DIGITS = 4300  # `sys.get_int_max_str_digits` by default


def _int(text: str) -> int:
    if len(text.lstrip("-")) > _MAX_INT_DIGITS:
        raise ValueError(
            f"an integer of {len(text.lstrip('-'))} digits is longer than {_MAX_INT_DIGITS}"
        )
    return int(text)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object from its key-value pairs; `ValueError` when a key appears twice."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"the key {_quoted(key)!r} appears twice in one object")
            seen.add(key)
    return obj


def parse_json(raw: bytes | str) -> Any:
    """A request body as strict JSON (RFC 8259); `ApiError(400)` for anything else (NaN,
    overflow, huge integers, deep nesting, repeated keys, not UTF-8; ADR 0070)."""
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8-sig")  # a leading BOM is ignored, as RFC 8259 allows
        except UnicodeDecodeError as exc:
            raise ApiError(
                400,
                "malformed_json",
                f"request body is not UTF-8 ({exc.reason} at byte {exc.start})",
            ) from None
    try:
        return json.loads(
            raw,
            parse_constant=_refuse_constant,
            parse_float=_finite_float,
            parse_int=_int,
            object_pairs_hook=_unique_keys,
        )
    except RecursionError:
        raise ApiError(400, "malformed_json", "request body is nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
        raise ApiError(400, "malformed_json", f"request body is not valid JSON: {exc}") from None


def check_text(value: str, where: str) -> None:
    """`ApiError(422)` when `value` holds a NUL or a lone surrogate (no store can keep it)."""
    if "\x00" in value:
        raise ApiError(422, "invalid_request", f"{where} contains a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        problem = "contains a lone surrogate (not valid Unicode)"
        raise ApiError(422, "invalid_request", f"{where} {problem}") from None


def check_json_value(value: Any, where: str = "body") -> None:
    """`ApiError(422)` for nesting deeper than `MAX_JSON_DEPTH` or unstorable strings."""
    stack: list[tuple[Any, str, int]] = [(value, where, 0)]
    while stack:
        node, path, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise ApiError(
                422, "invalid_request", f"{where} is nested deeper than {MAX_JSON_DEPTH} levels"
            )
        if isinstance(node, str):
            check_text(node, path)
        elif isinstance(node, dict):
            for k, v in node.items():
                check_text(k, f"a key of {path}")
                stack.append((v, f"{path}.{k}", depth + 1))
        elif isinstance(node, list):
            stack.extend((v, f"{path}[{i}]", depth + 1) for i, v in enumerate(node))


M = TypeVar("M", bound=BaseModel)


def _invalid(exc: ValidationError) -> ApiError:
    details = [
        {"loc": [str(p) for p in e["loc"]], "message": e["msg"]}
        for e in exc.errors(include_url=False)
    ]
    fields = ", ".join(".".join(d["loc"]) or "body" for d in details)
    return ApiError(422, "invalid_request", f"_invalid fields: {fields}", details)


async def read_json(request: Request, model: type[M]) -> M:
    """Parse the request body as JSON into `model`; 400 for bad JSON, 422 for bad fields."""
    data = parse_json(await request.body())
    if not isinstance(data, dict):
        raise ApiError(422, "invalid_request", "request body must be a JSON object")
    check_json_value(data)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise _invalid(exc) from None


def read_query(request: Request, model: type[M]) -> M:
    """The query parameters as `model` (empty values count as absent); 422 when _invalid."""
    params = {k: v for k, v in request.query_params.items() if v != ""}
    try:
        return model.model_validate(params)
    except ValidationError as exc:
        raise _invalid(exc) from None


def respond(
    model: BaseModel,
    status: int = 200,
    headers: dict[str, str] | None = None,
    *,
    exclude_none: bool = False,
) -> Response:
    """A JSON response of `model` (non-finite numbers as null)."""
    return Response(
        model.model_dump_json(exclude_none=exclude_none),
        status_code=status,
        headers=headers,
        media_type="application/json",
    )
