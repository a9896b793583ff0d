"""HTTP error answers: read (a bounded body), classified into the `ProviderError` tree, and
tagged with the provider's error type, code and request ID."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from types import TracebackType
from typing import Any, Self

import httpx

from golem.errors import (
    AuthenticationError,
    BadRequest,
    Overloaded,
    ProviderError,
    ProviderTimeout,
    RateLimited,
)
from golem.providers._retry import rate_limit_reset, retry_after_seconds

__all__ = [
    "MAX_ERROR_BODY",
    "STREAM_ENDED",
    "RequestTag",
    "code_status",
    "error_details",
    "error_from_response",
    "error_object",
    "raise_for_status",
    "read_error_body",
    "request_id_of",
]


def error_from_response(
    provider: str, status: int, headers: httpx.Headers, body: str
) -> ProviderError:
    """Classify a non-2xx HTTP response into the `ProviderError` tree, carrying the
    provider's error type, code and request ID (`error_details`)."""
    body = body[:MAX_ERROR_BODY]
    details = error_details(body, headers)
    _, err = error_object(body)
    detail = _error_text(body, err)
    request = details["request_id"] and f"request {details['request_id']}"
    tags = ", ".join(filter(None, (details["error_type"], details["error_code"], request)))
    message = f"{provider} returned HTTP {status}" + (f" ({tags})" if tags else "")
    message += f": {detail}" if detail else ": (no body)"
    kw: dict[str, Any] = {"status_code": status, "body": body, "provider": provider, **details}
    should = headers.get("x-should-retry", "").strip().lower()
    if should in ("true", "false"):
        kw["retryable"] = should == "true"
    if status in (401, 403):
        return AuthenticationError(message, **kw)
    if status == 429:
        wait = retry_after_seconds(headers)
        wait = wait if wait is not None else rate_limit_reset(headers)
        return RateLimited(message, retry_after=wait, **kw)
    if status == 408:
        return ProviderTimeout(message, **kw)
    if status >= 500:  # includes Anthropic's 529 "overloaded"
        return Overloaded(message, retry_after=retry_after_seconds(headers), **kw)
    kw.setdefault("retryable", status == 409)
    return BadRequest(message, **kw)


def error_details(body: str, headers: httpx.Headers) -> dict[str, str]:
    """`error_type`, `error_code` and `request_id` of an error answer, as far as it gives them:
    the error object's `type` (Gemini: `status`) and `code` (Gemini: the `reason` of an
    `ErrorInfo` detail; never a bare HTTP status), the `x-request-id` / `request-id` header
    or the body's `request_id`."""
    data, err = error_object(body)
    kind = code = ""
    if err is not None:
        kind = _text(err.get("type")) or _text(err.get("status"))
        raw_code = err.get("code")
        code = "" if isinstance(raw_code, int) else _text(raw_code)
        if not code:
            details = err.get("details")
            for d in details if isinstance(details, list) else ():
                if isinstance(d, dict) and isinstance(d.get("reason"), str):
                    code = d["reason"][:200]
                    break
    request_id = request_id_of(headers)
    if not request_id and data is not None:
        request_id = _text(data.get("request_id"))
    return {"error_type": kind, "error_code": code, "request_id": request_id}


def error_object(body: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The parsed body and its error object (the body itself when it has no `error` object),
    when the body is JSON (a list's first item for Gemini's `[{"error": ...}]`)."""
    if not body.lstrip().startswith(("{", "[")):
        return None, None
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None, None
    if isinstance(data, list) and data:
        data = data[0]
    if not isinstance(data, dict):
        return None, None
    err = data.get("error", data)
    return data, err if isinstance(err, dict) else None


def _text(value: Any) -> str:
    """A short identifier from an error object: text or an integer, else ""."""
    if isinstance(value, str):
        return value[:200]
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return ""


_REQUEST_ID_HEADERS = ("x-request-id", "request-id", "x-goog-request-id", "cf-ray")
"""Where the providers name a request for their support: OpenAI, Anthropic, Google, and a
Cloudflare proxy's ray ID when nothing else does."""


def _error_text(body: str, err: dict[str, Any] | None) -> str:
    """The provider's own error message when the body is the usual JSON error shape, else
    the body's first characters (an HTML page's text, a proxy's plain text)."""
    if err is not None:
        msg = err.get("message")
        if isinstance(msg, str):
            return msg[:2000]
    data, _ = error_object(body)
    if data is not None and isinstance(data.get("error"), str):
        return str(data["error"])[:2000]
    text = body.strip()
    if text.startswith("<"):
        text = " ".join(_TAGS.sub(" ", _CODE.sub(" ", text)).split())
    return text[:500].rstrip()


_TAGS = re.compile(r"<[^<>]*>")
"""A markup tag (no `<` inside: each character is looked at a bounded number of times)."""


_CODE = re.compile(r"<(script|style).*?(?:</\1[^>]*(?:>|\Z)|\Z)", re.IGNORECASE | re.DOTALL)
"""A `<script>` or `<style>` element (an unclosed one runs to the end), matched in linear time."""


MAX_ERROR_BODY = 65536
"""Bytes of an error answer's body that are read and kept (`ProviderError.body`): a proxy's
page or a runaway body is cut there, never read whole."""


async def read_error_body(response: httpx.Response) -> str:
    """The first `MAX_ERROR_BODY` bytes of an unsuccessful streamed `response`, as text
    (UTF-8, invalid bytes replaced); the rest is not read (the response is closed)."""
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in response.aiter_bytes():
            chunks.append(chunk)
            size += len(chunk)
            if size >= MAX_ERROR_BODY:
                break
    except httpx.TransportError:
        pass  # a failure's body cut short: what came is still the best account of it
    finally:
        await response.aclose()
    return b"".join(chunks)[:MAX_ERROR_BODY].decode("utf-8-sig", errors="replace")


async def raise_for_status(
    response: httpx.Response, classify: Callable[[int, httpx.Headers, str], ProviderError]
) -> None:
    """Raise `classify(status, headers, body)` for an unsuccessful streamed `response`, its
    body read up to `MAX_ERROR_BODY` bytes."""
    if not response.is_success:
        body = await read_error_body(response)
        raise classify(response.status_code, response.headers, body)


def request_id_of(headers: httpx.Headers) -> str:
    """The ID the provider gave the request (`x-request-id`, `request-id`, ...), or ""."""
    for name in _REQUEST_ID_HEADERS:
        value = headers.get(name)
        if value:
            return str(value)[:200]
    return ""


class RequestTag:
    """Names the request in a `ProviderError` raised while its answer is read (an error
    event mid-stream, an error object in a 200 body): `with tag:` sets the error's
    `request_id` when it has none, and adds it to the message. The ID is looked up only
    then (a header lookup costs microseconds a successful answer need not spend)."""

    __slots__ = ("headers",)

    def __init__(self, headers: httpx.Headers | None = None) -> None:
        self.headers = headers

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if isinstance(exc, ProviderError) and self.headers is not None and not exc.request_id:
            request_id = request_id_of(self.headers)
            if not request_id:
                return
            exc.request_id = request_id
            if len(exc.args) == 1 and isinstance(exc.args[0], str):
                exc.args = (f"{exc.args[0]} (request {request_id})",)


STREAM_ENDED = "stream ended before the response completed"
"""What a retryable `ProviderConnectionError` says of a stream cut before its end."""


def code_status(err: Any) -> int | None:
    """The HTTP status (400-599) an error object's `code` names (a number, or digits)."""
    code = err.get("code") if isinstance(err, dict) else None
    if isinstance(code, str) and code.isdigit():
        code = int(code)
    if isinstance(code, int) and not isinstance(code, bool) and 400 <= code <= 599:
        return code
    return None
