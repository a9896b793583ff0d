"""What the provider adapters share: HTTP error classification, Retry-After, SSE, keys.

Adapters classify failures (setting `retryable`); they never retry. The run loop
retries under `Agent(max_attempts=...)`, honouring `retry_after`.
"""

from __future__ import annotations

import email.utils
import json
import os
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from golem.errors import (
    AuthenticationError,
    BadRequest,
    Overloaded,
    ProviderConnectionError,
    ProviderError,
    ProviderTimeout,
    RateLimited,
    ResponseFormatError,
)

__all__ = [
    "api_key_from_env",
    "error_from_response",
    "iter_sse",
    "parse_json_body",
    "retry_after_seconds",
    "translate_transport_errors",
]


def api_key_from_env(explicit: str | None, env_names: tuple[str, ...], provider: str) -> str:
    """Return `explicit`, else the first set environment variable of `env_names`.

    Raises:
        AuthenticationError: no key was given or found; the message names the variables.
    """
    if explicit:
        return explicit
    for name in env_names:
        value = os.environ.get(name)
        if value:
            return value
    names = " or ".join(env_names)
    raise AuthenticationError(
        f"no {provider} API key: pass api_key=... or set {names}. "
        "To run offline, use golem.testing.ScriptedModel instead.",
        provider=provider,
    )


def retry_after_seconds(headers: httpx.Headers) -> float | None:
    """Seconds to wait as the response asks (`retry-after-ms`, `Retry-After` seconds or date)."""
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _error_text(body: str) -> str:
    """The provider's own error message when the body is the usual JSON error shape."""
    try:
        data = json.loads(body)
    except ValueError:
        return body.strip()[:500]
    if isinstance(data, list) and data:
        data = data[0]
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict):
            msg = err.get("message")
            if isinstance(msg, str):
                return msg
        elif isinstance(err, str):
            return err
    return body.strip()[:500]


def error_from_response(
    provider: str, status: int, headers: httpx.Headers, body: str
) -> ProviderError:
    """Classify a non-2xx HTTP response into the `ProviderError` tree."""
    detail = _error_text(body)
    message = f"{provider} returned HTTP {status}: {detail}"
    kw: dict[str, Any] = {"status_code": status, "body": body, "provider": provider}
    if status in (401, 403):
        return AuthenticationError(message, **kw)
    if status == 429:
        return RateLimited(message, retry_after=retry_after_seconds(headers), **kw)
    if status == 408:
        return ProviderTimeout(message, **kw)
    if status >= 500:  # includes Anthropic's 529 "overloaded"
        return Overloaded(message, retry_after=retry_after_seconds(headers), **kw)
    return BadRequest(message, **kw)


@contextmanager
def translate_transport_errors(provider: str) -> Iterator[None]:
    """Map httpx transport failures to `ProviderTimeout` / `ProviderConnectionError`."""
    try:
        yield
    except httpx.TimeoutException as exc:
        raise ProviderTimeout(f"{provider} request timed out: {exc}", provider=provider) from exc
    except httpx.TransportError as exc:
        raise ProviderConnectionError(
            f"{provider} could not be reached: {exc!r}", provider=provider
        ) from exc


def parse_json_body(provider: str, text: str) -> dict[str, Any]:
    """Parse a JSON object body, raising `ResponseFormatError` when it is not one."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ResponseFormatError(
            f"{provider} returned a body that is not JSON: {text[:200]!r}", provider=provider
        ) from exc
    if not isinstance(data, dict):
        raise ResponseFormatError(
            f"{provider} returned JSON that is not an object: {text[:200]!r}", provider=provider
        )
    return data


async def iter_sse(response: httpx.Response) -> AsyncIterator[tuple[str, str]]:
    """Yield `(event, data)` for each server-sent event of a streaming response."""
    event = ""
    data: list[str] = []
    async for line in response.aiter_lines():
        if not line:
            if data:
                yield event, "\n".join(data)
            event, data = "", []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "event":
            event = value
        elif name == "data":
            data.append(value)
    if data:
        yield event, "\n".join(data)
