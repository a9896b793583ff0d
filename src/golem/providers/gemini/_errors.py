"""Gemini failures classified into golem's `ProviderError` tree."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from golem.errors import AuthenticationError, ProviderError, RateLimited
from golem.providers._errors import error_from_response, error_object
from golem.providers._jsonio import json_text, table
from golem.providers._retry import MAX_RETRY_AFTER, finite_seconds

__all__ = ["PROVIDER", "error_from_http", "error_from_payload"]

PROVIDER = "gemini"

_STATUS_CODES = {
    status: int(code)
    for status, code in table(
        "INVALID_ARGUMENT=400 FAILED_PRECONDITION=400 OUT_OF_RANGE=400 UNAUTHENTICATED=401 "
        "PERMISSION_DENIED=403 NOT_FOUND=404 ABORTED=409 ALREADY_EXISTS=409 "
        "RESOURCE_EXHAUSTED=429 CANCELLED=499 UNKNOWN=500 INTERNAL=500 DATA_LOSS=500 "
        "NOT_IMPLEMENTED=501 UNAVAILABLE=503 DEADLINE_EXCEEDED=504"
    ).items()
}


def error_from_http(status: int, headers: httpx.Headers, body: str) -> ProviderError:
    """Classify a non-2xx Gemini HTTP response."""
    error = error_from_response(PROVIDER, status, headers, body)
    data, _ = error_object(body)
    details = data.get("error") if data is not None else None
    details = details if isinstance(details, dict) else {}
    if status == 400 and _key_rejected(details):
        return AuthenticationError(
            str(error),
            status_code=status,
            body=error.body,
            provider=PROVIDER,
            error_type=error.error_type,
            error_code=error.error_code,
            request_id=error.request_id,
        )
    if isinstance(error, RateLimited) and error.retry_after is None:
        error.retry_after = _retry_delay(details)
    return error


def error_from_payload(payload: Mapping[str, Any]) -> ProviderError:
    """Classify an `{"error": {"code", "status", "message"}}` object received in a stream."""
    err = payload.get("error")
    obj: Mapping[str, Any] = err if isinstance(err, Mapping) else {}
    code = obj.get("code")
    if not isinstance(code, int) or isinstance(code, bool) or code < 400:
        code = _STATUS_CODES.get(str(obj.get("status", "")), 500)
    return error_from_http(code, httpx.Headers(), json_text(dict(payload)))


def _details(err: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    details = err.get("details")
    if not isinstance(details, list):
        return []
    return [d for d in details if isinstance(d, Mapping)]


def _key_rejected(err: Mapping[str, Any]) -> bool:
    if any(d.get("reason") == "API_KEY_INVALID" for d in _details(err)):
        return True
    message = err.get("message")
    return isinstance(message, str) and "API key not valid" in message


def _retry_delay(err: Mapping[str, Any]) -> float | None:
    for d in _details(err):
        if str(d.get("@type", "")).endswith("google.rpc.RetryInfo"):
            delay = d.get("retryDelay")
            if isinstance(delay, str) and delay.endswith("s"):
                seconds = finite_seconds(delay[:-1])
                return None if seconds is None else min(seconds, MAX_RETRY_AFTER)
    return None
