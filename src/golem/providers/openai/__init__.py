"""OpenAI Chat Completions (and every server that speaks it) and the Responses API, through httpx."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from golem.model import ModelRequest, ModelResponse
from golem.providers._client import HTTPModel, api_key_from_env
from golem.providers.openai._responses_stream import ResponsesStreamParser
from golem.providers.openai._responses_wire import (
    ResponsesOptions,
    build_responses_body,
    parse_responses_response,
)
from golem.providers.openai._stream import ChatStreamParser
from golem.providers.openai._wire import (
    PROVIDER,
    RequestOptions,
    SystemRole,
    build_request_body,
    parse_response,
)

__all__ = ["DEFAULT_BASE_URL", "OpenAIChatModel", "OpenAIResponsesModel"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"
_SYSTEM_ROLES = ("system", "developer", "user")
_REASONING_MODEL = re.compile(r"^(o\d|gpt-5|codex)", re.IGNORECASE)


class _OpenAIModel(HTTPModel):
    """What both OpenAI APIs share: settings checked, the API root and the headers."""

    provider = "openai"
    _wire_name = PROVIDER

    def _connect(
        self,
        model: str,
        path: str,
        *,
        api_key: str | None,
        base_url: str | None,
        http_client: httpx.AsyncClient | None,
        timeout: float,
        max_tokens: int | None,
        extra_headers: Mapping[str, str] | None,
        api_key_header: str,
        system_role: str = "system",
    ) -> str:
        """Check the settings (`ValueError`; `AuthenticationError`: no key for the default
        endpoint), set the URL and headers; return the API root."""
        if not model:
            hint = " (for example 'gpt-5')" if path == "/responses" else ""
            raise ValueError(f"model name must not be empty{hint}")
        self._setup(model, http_client, timeout, max_tokens, " seconds")
        if system_role not in _SYSTEM_ROLES:
            raise ValueError(
                f'system_role must be "system", "developer" or "user", got {system_role!r}'
            )
        azure = api_key_header.lower() == "api-key"
        env_names = ("AZURE_OPENAI_API_KEY", "OPENAI_API_KEY") if azure else ("OPENAI_API_KEY",)
        root = base_url or os.environ.get("OPENAI_BASE_URL") or ""
        key: str | None
        if root:
            key = api_key or next((os.environ[n] for n in env_names if os.environ.get(n)), None)
        else:
            key = api_key_from_env(api_key, env_names, "openai")
        self._headers = {
            "content-type": "application/json",
            "accept": "application/json",
            "user-agent": f"golem-agents (httpx; openai-{path.split('/')[1]})",
        }
        if key:
            if api_key_header.lower() == "authorization":
                self._headers["authorization"] = f"Bearer {key}"
            else:
                self._headers[api_key_header] = key
        self._headers.update(extra_headers or {})
        self.base_url = (root or DEFAULT_BASE_URL).rstrip("/")
        """The API root requests go to (`<base_url>/chat/completions`, `<base_url>/responses`)."""
        self._url = self.base_url + path
        return self.base_url

    def _endpoint(self, stream: bool) -> str:
        return self._url


class OpenAIChatModel(_OpenAIModel):
    """A model served by the OpenAI Chat Completions API or a compatible server; arguments
    as `HTTPModel`'s (`OPENAI_API_KEY`, required only for the default `base_url`:
    `OPENAI_BASE_URL`, else https://api.openai.com/v1), plus:

    Args:
        reasoning_effort: `reasoning_effort` for OpenAI reasoning models.
        system_role: Role for system messages: "system", "developer" or "user".
        strict: Mark tool and output schemas `strict` when they already qualify.
        reasoning_field: Send thinking text back on assistant messages in this field (e.g.
            "reasoning_content" for DeepSeek); by default thinking is not sent.
        api_key_header: "Authorization" (Bearer) or a header carrying the raw key ("api-key"
            for Azure OpenAI, whose `AZURE_OPENAI_API_KEY` is then read first).
    """

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
        root = self._connect(
            model,
            "/chat/completions",
            api_key=api_key,
            base_url=base_url,
            http_client=http_client,
            timeout=timeout,
            max_tokens=max_tokens,
            extra_headers=extra_headers,
            api_key_header=api_key_header,
            system_role=system_role,
        )
        self.options = RequestOptions(
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
        """What this model adds to every request body (for `build_request_body`)."""

    def request_body(self, request: ModelRequest, *, stream: bool = False) -> dict[str, Any]:
        """The JSON body this model sends for `request`."""
        return build_request_body(request, self.options, stream=stream)

    def _parse(self, body: dict[str, Any], request: ModelRequest) -> ModelResponse:
        return parse_response(body, reasoning_field=self.options.reasoning_field)

    def _parser(self, request: ModelRequest) -> ChatStreamParser:
        return ChatStreamParser(reasoning_field=self.options.reasoning_field)


class OpenAIResponsesModel(_OpenAIModel):
    """A model served by the OpenAI Responses API (`POST /v1/responses`); arguments as
    `OpenAIChatModel`'s, plus `reasoning_summary`, `encrypted_reasoning` (default: for a
    reasoning model or effort) and `store` (see `ResponsesOptions`).

    Raises:
        AuthenticationError: no key for the default OpenAI endpoint.
        ValueError: an invalid setting (empty model, non-positive timeout or max_tokens).
    """

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
        reasoning_effort: str | None = None,
        reasoning_summary: str | None = None,
        encrypted_reasoning: bool | None = None,
        store: bool = False,
        strict: bool = True,
        extra_headers: Mapping[str, str] | None = None,
        extra_body: Mapping[str, Any] | None = None,
        api_key_header: str = "Authorization",
    ) -> None:
        self._connect(
            model,
            "/responses",
            api_key=api_key,
            base_url=base_url,
            http_client=http_client,
            timeout=timeout,
            max_tokens=max_tokens,
            extra_headers=extra_headers,
            api_key_header=api_key_header,
        )
        if encrypted_reasoning is None:
            encrypted_reasoning = reasoning_effort is not None or bool(
                _REASONING_MODEL.match(model)
            )
        self.options = ResponsesOptions(
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
        """What this model adds to every request body (for `build_responses_body`)."""

    def request_body(self, request: ModelRequest, *, stream: bool = False) -> dict[str, Any]:
        """The JSON body this model sends for `request`."""
        return build_responses_body(request, self.options, stream=stream)

    def _parse(self, body: dict[str, Any], request: ModelRequest) -> ModelResponse:
        return parse_responses_response(body)

    def _parser(self, request: ModelRequest) -> ResponsesStreamParser:
        return ResponsesStreamParser()
