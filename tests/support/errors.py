"""Error answers of each API: their documented bodies, the error an adapter raises for one,
and the forms of an HTTP date a `Retry-After` may take."""

from __future__ import annotations

import email.utils
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from golem.errors import ProviderError
from tests.support.adapters import MODELS, REQUEST, Chunks

ERROR_BODIES: dict[str, tuple[dict[str, Any], str, str]] = {
    "openai-chat": (
        {
            "error": {
                "message": "Rate limit reached for gpt-4o",
                "type": "requests",
                "param": None,
                "code": "rate_limit_exceeded",
            }
        },
        "requests",
        "rate_limit_exceeded",
    ),
    "openai-responses": (
        {
            "error": {
                "message": "The server had an error",
                "type": "server_error",
                "param": None,
                "code": None,
            }
        },
        "server_error",
        "",
    ),
    "anthropic": (
        {
            "type": "error",
            "error": {"type": "overloaded_error", "message": "Overloaded"},
            "request_id": "req_011CVbody",
        },
        "overloaded_error",
        "",
    ),
    "gemini": (
        {
            "error": {
                "code": 429,
                "message": "Resource has been exhausted (e.g. check quota).",
                "status": "RESOURCE_EXHAUSTED",
                "details": [
                    {
                        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                        "reason": "RATE_LIMIT_EXCEEDED",
                        "domain": "googleapis.com",
                    }
                ],
            }
        },
        "RESOURCE_EXHAUSTED",
        "RATE_LIMIT_EXCEEDED",
    ),
}
"""Each provider's documented error body, with the error type and code it carries."""


async def fail_with(
    api: str,
    status: int,
    body: bytes | list[bytes] | httpx.AsyncByteStream,
    *,
    stream: bool,
    headers: dict[str, str] | None = None,
) -> ProviderError:
    """The error the `api` adapter raises for an answer of `status` with `body`."""

    def answer(request: httpx.Request) -> httpx.Response:
        content = (
            body
            if isinstance(body, httpx.AsyncByteStream)
            else Chunks(body if isinstance(body, list) else [body])
        )
        return httpx.Response(status, headers=headers or {}, stream=content)

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        model = MODELS[api](client)
        with pytest.raises(ProviderError) as caught:
            if stream:
                async for _ in model.generate_stream(REQUEST):
                    pass
            else:
                await model.generate(REQUEST)
    return caught.value


def http_date_forms(when: float) -> Iterator[str]:
    """`when` in RFC 9110's three HTTP-date forms."""
    t = time.gmtime(when)
    yield email.utils.formatdate(when, usegmt=True)  # IMF-fixdate
    yield time.strftime("%A, %d-%b-%y %H:%M:%S GMT", t)  # obsolete RFC 850
    yield time.strftime("%a %b ", t) + f"{t.tm_mday:2d}" + time.strftime(" %H:%M:%S %Y", t)
