"""Google Gemini API (`generateContent` / `streamGenerateContent`) spoken with httpx."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import httpx

from golem.errors import ProviderError
from golem.model import ModelRequest, ModelResponse
from golem.providers._client import HTTPModel, api_key_from_env
from golem.providers.gemini._errors import PROVIDER, error_from_http
from golem.providers.gemini._response import parse_response
from golem.providers.gemini._stream import (  # noqa: F401  (importable here, not public)
    StreamParser,
    parse_stream,
    sse_events,
)
from golem.providers.gemini._wire import build_request_body, supports_json_output_with_tools

__all__ = ["DEFAULT_BASE_URL", "GeminiModel"]

DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com/v1beta"
"""The Gemini API root; `models/{model}:generateContent` is appended to it."""


class GeminiModel(HTTPModel):
    """A Gemini model behind the Gemini API, usable wherever golem takes a `Model`."""

    provider = "gcp.gemini"
    _wire_name = PROVIDER
    _json_type = "json"
    _encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    _replay_whole = False

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
        stop: list[str] | None = None,
        extra_headers: Mapping[str, str] | None = None,
        extra_body: Mapping[str, Any] | None = None,
        thinking_budget: int | None = None,
        include_thoughts: bool = False,
    ) -> None:
        """Arguments as `HTTPModel`'s (`GEMINI_API_KEY`, then `GOOGLE_API_KEY`; a "models/..."
        or "tunedModels/..." `model` is used as given; `extra_body` merges recursively), plus
        `thinking_budget` (`thinkingConfig.thinkingBudget`: 0 off, -1 the model decides) and
        `include_thoughts` (thought summaries become `ThinkingBlock`s)."""
        if not model or not model.strip():
            raise ValueError("model must be a non-empty model name, e.g. 'gemini-2.5-flash'")
        self._setup(model, http_client, timeout, max_tokens)
        if thinking_budget is not None and thinking_budget < -1:
            raise ValueError(f"thinking_budget must be -1 or more, got {thinking_budget}")
        self._api_key = api_key_from_env(api_key, ("GEMINI_API_KEY", "GOOGLE_API_KEY"), PROVIDER)
        self.base_url = (base_url or DEFAULT_BASE_URL).rstrip("/")
        self._headers = {
            "x-goog-api-key": self._api_key,
            "content-type": "application/json",
            **dict(extra_headers or {}),
        }
        self._settings: dict[str, Any] = {
            "max_tokens": max_tokens,
            "temperature": temperature,
            "top_p": top_p,
            "stop": list(stop) if stop else None,
            "thinking_budget": thinking_budget,
            "include_thoughts": include_thoughts,
            "json_output_with_tools": supports_json_output_with_tools(model),
            "multimodal_results": supports_json_output_with_tools(model),
            "extra_body": dict(extra_body) if extra_body else None,
        }

    def request_body(self, request: ModelRequest, *, stream: bool = False) -> dict[str, Any]:
        """The JSON body this model sends for `request` (the same streamed or not: Gemini
        streams at another URL, `url(stream=True)`)."""
        return build_request_body(request, **self._settings)

    def url(self, *, stream: bool = False) -> str:
        """The endpoint for a plain or a streamed call."""
        path = (
            self.model
            if self.model.startswith(("models/", "tunedModels/"))
            else f"models/{self.model}"
        )
        path = quote(path, safe="/-_.")
        if stream:
            return f"{self.base_url}/{path}:streamGenerateContent?alt=sse"
        return f"{self.base_url}/{path}:generateContent"

    def _endpoint(self, stream: bool) -> str:
        return self.url(stream=stream)

    def _classify(self, status: int, headers: httpx.Headers, body: str) -> ProviderError:
        return error_from_http(status, headers, body)

    def _parse(self, body: dict[str, Any], request: ModelRequest) -> ModelResponse:
        return parse_response(body)

    def _parser(self, request: ModelRequest) -> StreamParser:
        return StreamParser()
