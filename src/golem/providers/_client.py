"""The HTTP side of the adapters: one client per event loop, a POST answered with one JSON
body or with an event stream, transport failures translated, keys from the environment."""

from __future__ import annotations

import abc
import asyncio
import json
import os
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from contextlib import aclosing, contextmanager
from types import TracebackType
from typing import Any, ClassVar, Self, cast

import httpx

from golem.errors import (
    AuthenticationError,
    ProviderConnectionError,
    ProviderError,
    ProviderTimeout,
    ResponseFormatError,
)
from golem.model import Delta, ModelRequest, ModelResponse
from golem.providers._answers import replay_deltas
from golem.providers._errors import (
    STREAM_ENDED,
    RequestTag,
    error_from_response,
    raise_for_status,
    read_error_body,
)
from golem.providers._jsonio import parse_json_body
from golem.providers._sse import MAX_BODY, EventParser, WholeBody, deltas_in, iter_sse

__all__ = [
    "HTTPModel",
    "LoopBoundClient",
    "api_key_from_env",
    "read_body",
    "translate_transport_errors",
]

_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


class HTTPModel(abc.ABC):
    """Base of the adapters: `generate` and `generate_stream` POST `request_body(request)`.

    Every adapter takes `model`; `api_key` (else read from the environment at construction:
    a missing one raises `AuthenticationError`); `base_url`; `http_client` (used, never
    closed; by default one client per event loop, created lazily and closed by `aclose()`,
    `async with model:` or the loop's shutdown); `timeout` (seconds per request: connect,
    each read, write); `max_tokens`, `temperature`, `top_p`, `stop`; `extra_headers`
    (override golem's) and `extra_body` (merged into every body). A value out of range
    raises `ValueError`.
    """

    model: str
    """The model name sent with each request."""
    provider: str
    """Who serves the model, as OpenTelemetry's `gen_ai.provider.name` spells it."""
    _clients: LoopBoundClient
    _timeout: httpx.Timeout
    _headers: dict[str, str]
    _wire_name: ClassVar[str]
    """The provider as error messages name it."""
    _json_type: ClassVar[str] = "application/json"
    """A content type holding this (any case) answers a stream with one JSON body."""
    _encoder: ClassVar[json.JSONEncoder] = _ENCODER
    _replay_whole: ClassVar[bool] = True
    """A stream answered with one JSON body is `_parse`d and replayed as deltas (else the
    stream parser is fed the body)."""

    def _setup(
        self,
        model: str,
        http_client: httpx.AsyncClient | None,
        timeout: float,
        max_tokens: int | None,
        unit: str = "",
    ) -> None:
        """Check the settings every adapter takes (`unit` names the timeout's), and keep them."""
        if timeout <= 0:
            raise ValueError(f"timeout must be positive{unit}, got {timeout}")
        if max_tokens is not None and max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {max_tokens}")
        self.model = model
        self._timeout = httpx.Timeout(timeout)
        self._clients = LoopBoundClient(http_client, timeout)

    def __repr__(self) -> str:
        label = "base_url" if hasattr(self, "base_url") else "url"
        return f"{type(self).__name__}({self.model!r}, {label}={getattr(self, label)!r})"

    @property
    def model_name(self) -> str:
        """`model`, under the name `FallbackModel` and `ModelResponse` use."""
        return self.model

    @abc.abstractmethod
    def request_body(self, request: ModelRequest, *, stream: bool = False) -> dict[str, Any]:
        """The JSON body this model sends for `request`."""
        raise NotImplementedError

    @abc.abstractmethod
    def _endpoint(self, stream: bool) -> str:
        raise NotImplementedError

    @abc.abstractmethod
    def _parse(self, body: dict[str, Any], request: ModelRequest) -> ModelResponse:
        raise NotImplementedError

    @abc.abstractmethod
    def _parser(self, request: ModelRequest) -> EventParser:
        raise NotImplementedError

    def _classify(self, status: int, headers: httpx.Headers, body: str) -> ProviderError:
        """The error an unsuccessful HTTP answer raises (`error_from_response`)."""
        return error_from_response(self._wire_name, status, headers, body)

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """Send `request` and return the model's answer.

        Raises:
            ProviderError: the classified failure (see `golem.errors`); never retried here.
        """
        content = self._encoder.encode(self.request_body(request)).encode()
        return await self._post(
            self._endpoint(False), content, self._headers, lambda b: self._parse(b, request)
        )

    def generate_stream(self, request: ModelRequest) -> AsyncIterator[Delta | ModelResponse]:
        """Stream `request`: `Delta`s in arrival order, then the final `ModelResponse`.

        Raises:
            ProviderError: as `generate`, an error event included; a stream that ends before
                the response completed raises a retryable `ProviderConnectionError`.
        """

        def content() -> bytes:
            return self._encoder.encode(self.request_body(request, stream=True)).encode()

        def whole(text: str) -> ModelResponse:
            return self._parse(parse_json_body(self._wire_name, text), request)

        parser = self._parser(request)
        return self._stream(
            self._endpoint(True),
            content,
            self._headers,
            parser,
            whole if self._replay_whole else None,
        )

    async def _post(
        self,
        url: str,
        content: bytes,
        headers: dict[str, str],
        parse: Callable[[dict[str, Any]], ModelResponse],
    ) -> ModelResponse:
        """POST `content` and return `parse` of the JSON object of the successful answer."""
        provider = self._wire_name
        client = await self._clients.get()
        with translate_transport_errors(provider):
            request = client.build_request(
                "POST", url, content=content, headers=headers, timeout=self._timeout
            )
            resp = await client.send(request, stream=True)
            try:
                await raise_for_status(resp, self._classify)
                text = await read_body(resp, provider)
            finally:
                await resp.aclose()
        with RequestTag(resp.headers):
            return parse(parse_json_body(provider, text))

    async def _stream(
        self,
        url: str,
        content: Callable[[], bytes],
        headers: dict[str, str],
        parser: EventParser,
        whole: Callable[[str], ModelResponse] | None = None,
    ) -> AsyncIterator[Delta | ModelResponse]:
        """POST `content()` (built on first iteration) and yield the `Delta`s `parser` makes
        of each event (`parser.done` stops early), then its final response; an answer that is
        one JSON document is `whole(text)` replayed as deltas, else `parser.feed(None, text)`."""
        provider = self._wire_name
        tag = RequestTag()
        client = await self._clients.get()
        with tag, translate_transport_errors(provider):
            async with client.stream(
                "POST", url, content=content(), headers=headers, timeout=self._timeout
            ) as resp:
                await raise_for_status(resp, self._classify)
                tag.headers = resp.headers
                ctype = resp.headers.get("content-type", "").lower()
                if "text/html" in ctype:  # a proxy's page: it would pass for a dropped stream
                    page = await read_error_body(resp)
                    raise ResponseFormatError(
                        f"{provider} answered a stream with an HTML page: {page[:200]!r}",
                        provider=provider,
                        body=page,
                    )
                text = await read_body(resp, provider) if self._json_type in ctype else None
                if text is None:
                    events = cast(AsyncGenerator[tuple[str, str], None], iter_sse(resp, provider))
                    try:
                        async with aclosing(events):
                            async for event, data in events:
                                for delta in deltas_in(parser.feed(event, data)):
                                    yield delta
                                if parser.done:
                                    break
                    except WholeBody as body:
                        text = body.text
                    except httpx.TimeoutException:
                        raise
                    except httpx.TransportError as exc:
                        raise ProviderConnectionError(
                            f"{provider} {STREAM_ENDED}: {exc!r}", provider=provider, retryable=True
                        ) from exc
                if text is not None and whole is not None:
                    final = whole(text)
                    for replayed in replay_deltas(final, signatures=False, apart=True):
                        yield replayed
                    yield final
                    return
                if text is not None:
                    for delta in deltas_in(parser.feed(None, text)):
                        yield delta
            final = parser.response()
        yield final

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
    """The `httpx.AsyncClient` an adapter sends with: an injected one as is (never closed),
    else one client per event loop (pooled connections belong to the loop that opened them),
    closed when its loop shuts down its async generators, or by `aclose()`."""

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
        if self._loop is None or self._loop() is not asyncio.get_running_loop():
            return
        if own is not None:
            await own.aclose()
        if closer is not None:
            await closer.aclose()


async def _close_with_loop(client: httpx.AsyncClient) -> AsyncGenerator[None, None]:
    """Parks until the event loop shuts down its async generators, then closes `client`."""
    try:
        yield
    finally:
        await client.aclose()


async def read_body(response: httpx.Response, provider: str) -> str:
    """The text of a successful streamed `response` (UTF-8, a BOM skipped), up to `MAX_BODY` bytes."""
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


@contextmanager
def translate_transport_errors(provider: str) -> Iterator[None]:
    """Map httpx failures to `ProviderTimeout`, `ProviderConnectionError`, or (a body its
    Content-Encoding does not decode) a retryable `ResponseFormatError`."""
    try:
        yield
    except httpx.TimeoutException as exc:
        raise ProviderTimeout(f"{provider} request timed out: {exc}", provider=provider) from exc
    except httpx.DecodingError as exc:
        raise ResponseFormatError(
            f"{provider} sent a body that could not be decoded: {exc}",
            provider=provider,
            retryable=True,
        ) from exc
    except httpx.RequestError as exc:  # transport errors, too many redirects, ...
        raise ProviderConnectionError(
            f"{provider} could not be reached: {exc!r}", provider=provider
        ) from exc


def api_key_from_env(explicit: str | None, env_names: tuple[str, ...], provider: str) -> str:
    """Return `explicit`, else the first set environment variable of `env_names`."""
    if explicit:
        return explicit
    for name in env_names:
        value = os.environ.get(name)
        if value:
            return value
    raise AuthenticationError(
        f"no {provider} API key: pass api_key=... or set {' or '.join(env_names)}. "
        "To run offline, use golem.testing.ScriptedModel instead.",
        provider=provider,
    )
