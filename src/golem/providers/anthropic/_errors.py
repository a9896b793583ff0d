"""Anthropic failures mapped onto the `golem.errors.ProviderError` tree."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import httpx

from golem.errors import ProviderError
from golem.providers._errors import code_status, error_from_response
from golem.providers._jsonio import table

__all__ = ["STATUS_BY_ERROR_TYPE", "error_from_event"]

PROVIDER = "anthropic"

STATUS_BY_ERROR_TYPE = {
    kind: int(status)
    for kind, status in table(
        "invalid_request_error=400 authentication_error=401 billing_error=402 "
        "permission_error=403 not_found_error=404 request_too_large=413 rate_limit_error=429 "
        "api_error=500 timeout_error=504 overloaded_error=529"
    ).items()
}
"""HTTP status Anthropic documents for each `error.type`; an unknown type counts as the
status its error object's `code` names, else 500."""


def error_from_event(data: str) -> ProviderError:
    """Classify the payload of a streamed `error` event like the matching HTTP status."""
    try:
        payload: Any = json.loads(data)
    except (ValueError, RecursionError):
        payload = None
    err = payload.get("error") if isinstance(payload, Mapping) else None
    kind = err.get("type") if isinstance(err, Mapping) else None
    kind = kind if isinstance(kind, str) else "unknown_error"
    status = STATUS_BY_ERROR_TYPE.get(kind) or code_status(err) or 500
    error = error_from_response(PROVIDER, status, httpx.Headers(), data)
    message = err.get("message") if isinstance(err, Mapping) else None
    detail = message if isinstance(message, str) else data.strip()[:500]
    # `status_code` is the status Anthropic documents for the type (the HTTP status was 200).
    error.args = (f"anthropic stream failed with {kind}: {detail}",)
    return error
