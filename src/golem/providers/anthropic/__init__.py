"""Anthropic Messages API adapter: `AnthropicModel`."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from golem.model import ModelRequest, ModelResponse
from golem.providers._client import HTTPModel, api_key_from_env
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
    """A Claude model behind the Anthropic Messages API (`POST /v1/messages`); arguments
    as `HTTPModel`'s (`ANTHROPIC_API_KEY`; `base_url` defaults to `ANTHROPIC_BASE_URL`, else
    "https://api.anthropic.com", `/v1/messages` appended; `max_tokens` default 4096), plus:

    Args:
        thinking_budget: Enables extended thinking with this many tokens (at least 1024 and
            below `max_tokens`).
        output_mode: How `ModelRequest.output_schema` is sent: "native" (`output_config.format`,
            Claude 4.5 and later), "prompted" (in the system prompt), or "tool" (a forced
            `final_result` tool; not with `thinking_budget`).
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
        tokens = DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens
        self._setup(model, http_client, timeout, tokens)
        if thinking_budget is not None and not _MIN_THINKING_BUDGET <= thinking_budget < tokens:
            raise ValueError(
                f"thinking_budget must be at least {_MIN_THINKING_BUDGET} and below "
                f"max_tokens ({tokens}), got {thinking_budget}; raise max_tokens if needed"
            )
        if output_mode not in ("native", "prompted", "tool"):
            raise ValueError(
                f'output_mode must be "native", "prompted" or "tool", got {output_mode!r}'
            )
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

    def _endpoint(self, stream: bool) -> str:
        return self.url

    def _output_tool(self, request: ModelRequest) -> str:
        if self.output_mode == "tool" and request.output_schema is not None:
            return OUTPUT_TOOL_NAME
        return ""

    def _parse(self, body: dict[str, Any], request: ModelRequest) -> ModelResponse:
        return parse_response(body, self._output_tool(request))

    def _parser(self, request: ModelRequest) -> StreamParser:
        return StreamParser(self._output_tool(request))
