"""Errors that Chat Completions and Responses servers report inside a 200 response."""

from __future__ import annotations

from typing import Any

import httpx

from golem.errors import ProviderError
from golem.providers._errors import code_status, error_from_response
from golem.providers._jsonio import json_text, table

__all__ = ["error_from_payload", "payload_status"]

_KIND_STATUS = {
    needle: int(status)
    for needle, status in table(
        "rate_limit=429 quota=429 auth=401 api_key=401 permission=403 timeout=408 "
        "overloaded=503 unavailable=503 server_error=500 internal=500 invalid_request=400 "
        "bad_request=400 badrequest=400 not_found=404 context_length=400 invalid=400 image=400 "
        "unsupported=400 too_large=413 too_small=400 too_long=400 tokens_exceeded=400 "
        "limit_exceeded=400 content_policy=400 payment=402 precondition=400 unprocessable=422"
    ).items()
}
"""The status of an error object whose `type` or `code` holds a needle, the first that
matches (the Responses API's `error.code`s and OpenRouter's error types among them)."""


def payload_status(error: dict[str, Any]) -> int:
    """The HTTP status equivalent to an error object (500 when nothing says otherwise)."""
    status = code_status(error)
    if status is not None:
        return status
    kind = " ".join(str(error.get(k) or "") for k in ("type", "code")).lower()
    for needle, status in _KIND_STATUS.items():
        if needle in kind:
            return status
    return 500


def error_from_payload(payload: dict[str, Any]) -> ProviderError:
    """Classify an error object received with status 200 (a stream event or a body)."""
    error = payload.get("error", payload)
    if not isinstance(error, dict):
        error = {"message": str(error)}
    status = payload_status(error)
    body = json_text(payload, ensure_ascii=False)
    exc = error_from_response("openai", status, httpx.Headers(), body)
    message = error.get("message")
    detail = message if isinstance(message, str) and message else body[:500]
    kind = error.get("type") or error.get("code") or "error"
    exc.args = (f"openai reported an error mid-response ({kind}): {detail}",)
    return exc
