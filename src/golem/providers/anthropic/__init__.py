"""Anthropic Messages API adapter: `AnthropicModel`."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import httpx

from golem.model import Delta, ModelRequest, ModelResponse
from golem.providers._client import HTTPModel, LoopBoundClient, api_key_from_env, encode_body
from golem.providers._jsonio import parse_json_body
from golem.providers.anthropic._response import parse_response
from golem.providers.anthropic._stream import (  # noqa: F401  (importable here, not public)
    StreamParser,
    parse_stream,
    sse_events,
)
from golem.providers.anthropic._wire import (
    API_VERSION,
    DEFAULT_BASE_URL,
    DEFAULT_MAX_TOKENS,
    OUTPUT_TOOL_NAME,
    PROVIDER,
    OutputMode,
    build_request_body,
)

__all__ = ["AnthropicModel", "OutputMode"]

_MIN_THINKING_BUDGET = 1024


class AnthropicModel(HTTPModel):
    """A Claude model behind the Anthropic Messages API (`POST /v1/messages`).

    Args:
        model: Model name, for example "claude-sonnet-4-5".
        api_key: API key; defaults to the `ANTHROPIC_API_KEY` environment variable.
        base_url: Server root; defaults to `ANTHROPIC_BASE_URL`, else
            "https://api.anthropic.com". `/v1/messages` is appended (a trailing `/v1`
            is accepted too).
        http_client: A client to use instead of the one the model creates lazily
            (one per model and event loop, reused across requests, closed when the
            loop shuts down). golem never closes an injected client.
        timeout: Seconds allowed for each request (also with an injected client).
        max_tokens: Output token cap, required by the API; default 4096.
        temperature: Sampling temperature (the API rejects it together with thinking).
        top_p: Nucleus sampling.
        stop: Stop sequences (`stop_sequences`).
        extra_headers: Headers added to every request (for example `anthropic-beta`).
        extra_body: Fields merged into every request body, one level deep for objects.
        thinking_budget: Enables extended thinking with this many tokens (at least
            1024 and below `max_tokens`).
        output_mode: How `ModelRequest.output_schema` is sent: "native" uses the
            API's structured outputs (`output_config.format`, Claude 4.5 and later),
            "prompted" puts the schema in the system prompt (any model), "tool" offers a
            `final_result` tool with the schema and makes the model call it (any model
            with tool use; not with `thinking_budget`, which allows no forced tool).

    Raises:
        AuthenticationError: no key was passed and `ANTHROPIC_API_KEY` is not set.
        ValueError: an argument is out of range.
    """

    provider = "anthropic"
    _wire_name = PROVIDER

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        http_client: httpx.AsyncClient | None = None,
        timeout: float = 120.0,
        max_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        stop: Sequence[str] | None = None,
        extra_headers: Mapping[str, str] | None = None,
        extra_body: Mapping[str, Any] | None = None,
        thinking_budget: int | None = None,
        output_mode: OutputMode = "native",
    ) -> None:
        if not model:
            raise ValueError("model name must not be empty (for example 'claude-sonnet-4-5')")
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        tokens = DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens
        if tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {tokens}")
        if thinking_budget is not None and not _MIN_THINKING_BUDGET <= thinking_budget < tokens:
            raise ValueError(
                f"thinking_budget must be at least {_MIN_THINKING_BUDGET} and below "
                f"max_tokens ({tokens}), got {thinking_budget}; raise max_tokens if needed"
            )
        if output_mode not in ("native", "prompted", "tool"):
            raise ValueError(
                f'output_mode must be "native", "prompted" or "tool", got {output_mode!r}'
            )
        self.model = model
        self.max_tokens = tokens
        self.temperature = temperature
        self.top_p = top_p
        self.stop = list(stop) if stop else None
        self.thinking_budget = thinking_budget
        self.output_mode: OutputMode = output_mode
        self.extra_body = dict(extra_body) if extra_body else None
        key = api_key_from_env(api_key, ("ANTHROPIC_API_KEY",), PROVIDER)
        root = (base_url or os.environ.get("ANTHROPIC_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
        self.url = f"{root}/messages" if root.endswith("/v1") else f"{root}/v1/messages"
        self._headers = {
            "x-api-key": key,
            "anthropic-version": API_VERSION,
            "content-type": "application/json",
            **(extra_headers or {}),
        }
        self._timeout = httpx.Timeout(timeout)
        self._clients = LoopBoundClient(http_client, timeout)

    def __repr__(self) -> str:
        return f"AnthropicModel({self.model!r}, url={self.url!r})"

    def request_body(self, request: ModelRequest, *, stream: bool = False) -> dict[str, Any]:
        """The JSON body this model sends for `request`."""
        return build_request_body(
            request,
            model=self.model,
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            stop=self.stop,
            thinking_budget=self.thinking_budget,
            output_mode=self.output_mode,
            stream=stream,
            extra_body=self.extra_body,
        )

    def _output_tool(self, request: ModelRequest) -> str:
        if self.output_mode == "tool" and request.output_schema is not None:
            return OUTPUT_TOOL_NAME
        return ""

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """Send `request` and return the model's answer.

        Raises:
            ProviderError: the classified failure (see `golem.errors`).
        """
        content = encode_body(self.request_body(request))
        output_tool = self._output_tool(request)
        return await self._post(
            self.url, content, self._headers, lambda body: parse_response(body, output_tool)
        )

    def generate_stream(self, request: ModelRequest) -> AsyncIterator[Delta | ModelResponse]:
        """Stream `request`: `Delta`s in arrival order, then the final `ModelResponse`.

        Raises:
            ProviderError: as `generate`; an `error` event is classified by its type, and
                a stream that ends before `message_stop` raises a retryable
                `ProviderConnectionError`.
        """
        output_tool = self._output_tool(request)

        def content() -> bytes:
            return encode_body(self.request_body(request, stream=True))

        def whole(text: str) -> ModelResponse:
            return parse_response(parse_json_body(PROVIDER, text), output_tool)

        return self._stream(self.url, content, self._headers, StreamParser(output_tool), whole)
