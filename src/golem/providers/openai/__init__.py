"""OpenAI Chat Completions (and every server that speaks it) and the Responses API, through httpx."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import httpx

from golem.model import Delta, ModelRequest, ModelResponse
from golem.providers._client import HTTPModel, LoopBoundClient, encode_body
from golem.providers._jsonio import parse_json_body
from golem.providers.openai._client import DEFAULT_BASE_URL, check_settings, endpoint
from golem.providers.openai._responses import OpenAIResponsesModel
from golem.providers.openai._stream import ChatStreamParser
from golem.providers.openai._wire import (
    PROVIDER,
    RequestOptions,
    SystemRole,
    build_request_body,
    parse_response,
)

__all__ = ["DEFAULT_BASE_URL", "OpenAIChatModel", "OpenAIResponsesModel"]

_SYSTEM_ROLES = ("system", "developer", "user")
_USER_AGENT = "golem-agents (httpx; openai-chat)"


class OpenAIChatModel(HTTPModel):
    """A model served by the OpenAI Chat Completions API or a compatible server.

    Args:
        model: Model name sent as `model` (e.g. "gpt-4.1", "llama3.2").
        api_key: Key; defaults to `OPENAI_API_KEY` (with `api_key_header="api-key"`,
            `AZURE_OPENAI_API_KEY` first). Required for the default base URL; with a custom
            base URL and no key, no credentials are sent (Ollama, vLLM, llama.cpp).
        base_url: API root up to `/v1` (the adapter appends `/chat/completions`); defaults
            to `OPENAI_BASE_URL`, else https://api.openai.com/v1.
        http_client: An `httpx.AsyncClient` to use (and not close); by default the model
            lazily creates one per event loop and reuses its connections.
        timeout: Seconds per request (connect, each read, write), also with an injected client.
        max_tokens: Output token cap, sent as `max_completion_tokens`.
        temperature, top_p, stop: Sampling settings, sent when given.
        extra_headers: Headers added to every request (override golem's).
        extra_body: Fields merged last into every body (e.g. `{"seed": 1}`, or
            `{"max_tokens": 512}` for servers that predate `max_completion_tokens`).
        reasoning_effort: `reasoning_effort` for OpenAI reasoning models.
        system_role: Role for system messages: "system", "developer" or "user".
        strict: Mark tool and output schemas `strict` when they already qualify; pass False
            for servers that reject the field.
        reasoning_field: Send thinking text back on assistant messages in this field (e.g.
            "reasoning_content" for DeepSeek thinking mode with tools); by default thinking
            blocks are not sent.
        api_key_header: "Authorization" (Bearer) or another header that carries the raw key,
            e.g. "api-key" for Azure OpenAI.

    Raises:
        AuthenticationError: no key for the default OpenAI endpoint.
        ValueError: an invalid setting (empty model, non-positive timeout, unknown role).
    """

    provider = "openai"
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
        reasoning_effort: str | None = None,
        system_role: SystemRole = "system",
        strict: bool = True,
        reasoning_field: str | None = None,
        api_key_header: str = "Authorization",
    ) -> None:
        check_settings(model, timeout, max_tokens)
        if system_role not in _SYSTEM_ROLES:
            raise ValueError(
                f'system_role must be "system", "developer" or "user", got {system_role!r}'
            )
        root, headers = endpoint(
            api_key=api_key,
            base_url=base_url,
            api_key_header=api_key_header,
            extra_headers=extra_headers,
            user_agent=_USER_AGENT,
        )
        self.model = model
        """The model name sent with each request."""
        self.base_url = root
        """The API root requests go to (`<base_url>/chat/completions`)."""
        self._url = root + "/chat/completions"
        self._timeout = httpx.Timeout(timeout)
        self._options = RequestOptions(
            model=model,
            max_tokens=max_tokens,
            temperature=temperature,
            top_p=top_p,
            stop=[stop] if isinstance(stop, str) else list(stop) if stop else None,
            reasoning_effort=reasoning_effort,
            system_role=system_role,
            strict=strict,
            reasoning_field=reasoning_field,
            tool_call_signatures="generativelanguage.googleapis.com" in root,
            extra_body=dict(extra_body or {}),
        )
        self._headers = headers
        self._clients = LoopBoundClient(http_client, timeout)

    def __repr__(self) -> str:
        return f"OpenAIChatModel({self.model!r}, base_url={self.base_url!r})"

    @property
    def options(self) -> RequestOptions:
        """What this model adds to every request body (for `build_request_body`)."""
        return self._options

    def request_body(self, request: ModelRequest, *, stream: bool = False) -> dict[str, Any]:
        """The JSON body this model sends for `request`."""
        return build_request_body(request, self._options, stream=stream)

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """Send `request` and return the model's answer.

        Raises:
            ProviderError: classified failure (see `golem.errors`); never retried here.
        """
        content = encode_body(self.request_body(request))
        return await self._post(self._url, content, self._headers, self._parse)

    def generate_stream(self, request: ModelRequest) -> AsyncIterator[Delta | ModelResponse]:
        """Stream the answer: `Delta`s in arrival order, then the final `ModelResponse`.

        Raises:
            ProviderError: classified failure, including an error event mid-stream; a stream
                that ends before the response completed raises a retryable
                `ProviderConnectionError`.
        """
        parser = ChatStreamParser(reasoning_field=self._options.reasoning_field)

        def content() -> bytes:
            return encode_body(self.request_body(request, stream=True))

        return self._stream(self._url, content, self._headers, parser, self._parse_text)

    def _parse(self, body: dict[str, Any]) -> ModelResponse:
        return parse_response(body, reasoning_field=self._options.reasoning_field)

    def _parse_text(self, text: str) -> ModelResponse:
        return self._parse(parse_json_body(PROVIDER, text))
