"""The HTTP side of the adapters: one client per event loop, POST of a JSON body or a
stream, transport failures translated, keys from the environment."""

from __future__ import annotations

import asyncio
import os
import weakref
from collections.abc import AsyncGenerator, Iterator
from contextlib import aclosing, contextmanager
from types import TracebackType
from typing import Any, Self, cast

import httpx

from golem.errors import (
    AuthenticationError,
    ProviderConnectionError,
    ProviderTimeout,
    ResponseFormatError,
)
from golem.providers._errors import RequestTag, raise_for_status, read_error_body
from golem.providers._jsonio import parse_json_body
from golem.providers._sse import MAX_BODY, WholeBody, iter_sse

__all__ = [
    "HTTPModel",
    "LoopBoundClient",
    "api_key_from_env",
    "body_text",
    "is_json",
    "post_json",
    "post_sse",
    "read_body",
    "refuse_html",
    "translate_transport_errors",
]


class HTTPModel:
    """Base of the adapters: owns their `LoopBoundClient` and closes it.

    `await model.aclose()` or `async with model:` closes the client the model created
    (an injected `http_client` is left open).
    """

    model: str
    """The model name sent with each request."""
    provider: str
    """Who serves the model, as OpenTelemetry's `gen_ai.provider.name` spells it."""
    _clients: LoopBoundClient

    @property
    def model_name(self) -> str:
        """`model`, under the name `FallbackModel` and `ModelResponse` use."""
        return self.model

    async def aclose(self) -> None:
        """Close the HTTP client this model created (an injected client is left open)."""
        await self._clients.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class LoopBoundClient:
    """The `httpx.AsyncClient` an adapter sends with.

    An injected client is used as is and never closed. Otherwise the adapter owns one
    client per event loop: pooled connections belong to the loop that opened them, so
    a new loop (each `asyncio.run`, each `run_sync`) gets a new client, and a client is
    closed when its loop shuts down its async generators, or by `aclose()`.
    """

    __slots__ = ("_closer", "_injected", "_loop", "_own", "_timeout")

    def __init__(self, injected: httpx.AsyncClient | None, timeout: float) -> None:
        self._injected = injected
        self._timeout = timeout
        self._own: httpx.AsyncClient | None = None
        self._loop: weakref.ref[asyncio.AbstractEventLoop] | None = None
        self._closer: AsyncGenerator[None, None] | None = None

    async def get(self) -> httpx.AsyncClient:
        """The client to use on the running event loop."""
        if self._injected is not None:
            return self._injected
        loop = asyncio.get_running_loop()
        own = self._own
        if own is None or own.is_closed or self._loop is None or self._loop() is not loop:
            own = httpx.AsyncClient(timeout=self._timeout)
            closer = _close_with_loop(own)
            await closer.asend(None)
            self._own, self._loop, self._closer = own, weakref.ref(loop), closer
        return own

    async def aclose(self) -> None:
        """Close the client this adapter created on the running loop (never an injected one)."""
        own, self._own = self._own, None
        closer, self._closer = self._closer, None
        if (
            own is not None
            and self._loop is not None
            and self._loop() is asyncio.get_running_loop()
        ):
            await own.aclose()
        if (
            closer is not None
            and self._loop is not None
            and self._loop() is asyncio.get_running_loop()
        ):
            await closer.aclose()


async def _close_with_loop(client: httpx.AsyncClient) -> AsyncGenerator[None, None]:
    """Parks until the event loop shuts down its async generators, then closes `client`."""
    try:
        yield
    finally:
        await client.aclose()


async def post_json(
    clients: LoopBoundClient,
    url: str,
    content: bytes,
    headers: dict[str, str],
    timeout: httpx.Timeout,
    provider: str,
    tag: RequestTag | None = None,
) -> dict[str, Any]:
    """POST `content` and return the JSON object of a successful response; `tag` is given
    the response's request ID (for errors the caller finds in the body).

    Raises:
        ProviderError: the failure classified (`error_from_response`, transport errors,
            `ResponseFormatError` for a body that is not a JSON object).
    """
    client = await clients.get()
    with translate_transport_errors(provider):
        request = client.build_request(
            "POST", url, content=content, headers=headers, timeout=timeout
        )
        resp = await client.send(request, stream=True)
        try:
            if not resp.is_success:
                await raise_for_status(resp, provider)
            text = await read_body(resp, provider)
        finally:
            await resp.aclose()
    if tag is None:
        tag = RequestTag()
    tag.headers = resp.headers
    with tag:
        return parse_json_body(provider, text)


async def post_sse(
    clients: LoopBoundClient,
    url: str,
    content: bytes,
    headers: dict[str, str],
    timeout: httpx.Timeout,
    provider: str,
    tag: RequestTag | None = None,
) -> AsyncGenerator[tuple[str, str], None]:
    """POST `content` and yield the `(event, data)` pairs of the streamed response; `tag`
    is given the response's request ID (for errors the caller finds in the events).

    Close it (`contextlib.aclosing`) to stop early: that closes the response.

    A JSON answer (`application/json`: an error object from a proxy, or a server that
    ignored `stream: true`) is yielded whole, as the data of one event.

    Raises:
        ProviderError: as `post_json`; a connection lost mid-stream is a retryable
            `ProviderConnectionError` ("stream ended before the response completed").
    """
    client = await clients.get()
    with translate_transport_errors(provider):
        async with client.stream(
            "POST", url, content=content, headers=headers, timeout=timeout
        ) as resp:
            await raise_for_status(resp, provider)
            if tag is not None:
                tag.headers = resp.headers
            await refuse_html(resp, provider)
            if is_json(resp):
                # not a stream (a proxy's error, or a server that ignored `stream: true`):
                # the whole body is one event for the adapter's parser
                yield "", await read_body(resp, provider)
                return
            events = cast(AsyncGenerator[tuple[str, str], None], iter_sse(resp, provider))
            try:
                async with aclosing(events):
                    async for item in events:
                        yield item
            except WholeBody as whole:
                yield "", whole.text
            except httpx.TimeoutException:
                raise
            except httpx.TransportError as exc:
                raise ProviderConnectionError(
                    f"{provider} stream ended before the response completed: {exc!r}",
                    provider=provider,
                    retryable=True,
                ) from exc


async def read_body(response: httpx.Response, provider: str) -> str:
    """The text of a successful streamed `response` (see `body_text`), read whole up to
    `MAX_BODY` bytes.

    Raises:
        ResponseFormatError: the body is longer than `MAX_BODY` (not read further).
    """
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_BODY:
            await response.aclose()
            raise ResponseFormatError(
                f"{provider} answered with a body longer than {MAX_BODY} bytes", provider=provider
            )
    return b"".join(chunks).decode("utf-8-sig", errors="replace")


def is_json(response: httpx.Response) -> bool:
    """Whether the content type says JSON (`application/json`, any case and parameters)."""
    return "application/json" in response.headers.get("content-type", "").lower()


def body_text(response: httpx.Response) -> str:
    """The text of a read JSON body: UTF-8 whatever charset the header declares (JSON is
    UTF-8, RFC 8259; a proxy's `charset=iso-8859-1` would garble every non-ASCII character),
    a leading byte order mark skipped."""
    return response.content.decode("utf-8-sig", errors="replace")


async def refuse_html(response: httpx.Response, provider: str) -> None:
    """Refuse a successful answer to a streamed request that is an HTML page (a proxy's or a
    captive portal's): read as an event stream it holds no event, and would pass for a
    connection dropped before the answer.

    Raises:
        ResponseFormatError: the content type is `text/html`.
    """
    if "text/html" in response.headers.get("content-type", ""):
        page = await read_error_body(response)
        raise ResponseFormatError(
            f"{provider} answered a stream with an HTML page: {page[:200]!r}",
            provider=provider,
            body=page,
        )


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
    except httpx.DecodingError as exc:
        # a body its Content-Encoding does not decode (corrupt gzip, brotli, ...): the transfer
        # was damaged, another attempt may get it whole
        raise ResponseFormatError(
            f"{provider} sent a body that could not be decoded: {exc}",
            provider=provider,
            retryable=True,
        ) from exc
    except httpx.RequestError as exc:  # too many redirects, and whatever httpx adds
        raise ProviderConnectionError(
            f"{provider} could not be reached: {exc!r}", provider=provider
        ) from exc


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
