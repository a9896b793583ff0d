"""`OpenAIResponsesModel`: the OpenAI Responses API (`POST /v1/responses`) through httpx."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx

from golem.model import Delta, ModelRequest, ModelResponse
from golem.providers._client import HTTPModel, LoopBoundClient, encode_body
from golem.providers.openai._client import check_settings, endpoint
from golem.providers.openai._responses_stream import ResponsesStreamParser
from golem.providers.openai._responses_wire import (
    PROVIDER,
    ResponsesOptions,
    build_responses_body,
    parse_responses_response,
)

__all__ = ["OpenAIResponsesModel"]

_USER_AGENT = "golem-agents (httpx; openai-responses)"
_REASONING_MODEL = re.compile(r"^(o\d|gpt-5|codex)", re.IGNORECASE)


class OpenAIResponsesModel(HTTPModel):
    """A model served by the OpenAI Responses API (`POST /v1/responses`).

    Raises:
        AuthenticationError: no key for the default OpenAI endpoint.
        ValueError: an invalid setting (empty model, non-positive timeout or max_tokens).
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
        reasoning_effort: str | None = None,
        reasoning_summary: str | None = None,
        encrypted_reasoning: bool | None = None,
        store: bool = False,
        strict: bool = True,
        extra_headers: Mapping[str, str] | None = None,
        extra_body: Mapping[str, Any] | None = None,
        api_key_header: str = "Authorization",
    ) -> None:
        check_settings(model, timeout, max_tokens, example="gpt-5")
        root, self._headers = endpoint(
            api_key=api_key,
            base_url=base_url,
            api_key_header=api_key_header,
            extra_headers=extra_headers,
            user_agent=_USER_AGENT,
        )
        if encrypted_reasoning is None:
            encrypted_reasoning = reasoning_effort is not None or bool(
                _REASONING_MODEL.match(model)
            )
        self.model = model
        """The model name sent with each request."""
        self.base_url = root
        """The API root requests go to (`<base_url>/responses`)."""
        self._url = root + "/responses"
        self._timeout = httpx.Timeout(timeout)
        self._options = ResponsesOptions(
            model=model,
            max_tokens=max_tokens,
            temperature=temperature,
            top_p=top_p,
            reasoning_effort=reasoning_effort,
            reasoning_summary=reasoning_summary,
            encrypted_reasoning=encrypted_reasoning,
            store=store,
            strict=strict,
            extra_body=dict(extra_body or {}),
        )
        self._clients = LoopBoundClient(http_client, timeout)

    def __repr__(self) -> str:
        return f"OpenAIResponsesModel({self.model!r}, base_url={self.base_url!r})"

    @property
    def options(self) -> ResponsesOptions:
        """What this model adds to every request body (for `build_responses_body`)."""
        return self._options

    def request_body(self, request: ModelRequest, *, stream: bool = False) -> dict[str, Any]:
        """The JSON body this model sends for `request`."""
        return build_responses_body(request, self._options, stream=stream)

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """Send `request` and return the model's answer.

        Raises:
            ProviderError: classified failure (see `golem.errors`); never retried here.
        """
        content = encode_body(self.request_body(request))
        return await self._post(self._url, content, self._headers, parse_responses_response)

    def generate_stream(self, request: ModelRequest) -> AsyncIterator[Delta | ModelResponse]:
        """Stream the answer: `Delta`s in arrival order, then the final `ModelResponse`.

        Raises:
            ProviderError: classified failure, including an `error` event or a failed
                response mid-stream; a stream that ends before its terminal event raises a
                retryable `ProviderConnectionError`.
        """

        def content() -> bytes:
            return encode_body(self.request_body(request, stream=True))

        return self._stream(self._url, content, self._headers, ResponsesStreamParser())
