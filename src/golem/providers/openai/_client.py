"""Where an OpenAI model sends its requests, and with which headers (shared by both APIs)."""

from __future__ import annotations

import os
from collections.abc import Mapping

from golem.providers._client import api_key_from_env

__all__ = ["DEFAULT_BASE_URL", "check_settings", "endpoint"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"


def endpoint(
    *,
    api_key: str | None,
    base_url: str | None,
    api_key_header: str,
    extra_headers: Mapping[str, str] | None,
    user_agent: str,
) -> tuple[str, dict[str, str]]:
    """The API root (no trailing slash) and the headers of every request.

    Raises:
        AuthenticationError: no key for the default OpenAI endpoint.
    """
    azure = api_key_header.lower() == "api-key"
    env_names = ("AZURE_OPENAI_API_KEY", "OPENAI_API_KEY") if azure else ("OPENAI_API_KEY",)
    root = base_url or os.environ.get("OPENAI_BASE_URL") or ""
    key: str | None
    if root:
        key = api_key or next((os.environ[n] for n in env_names if os.environ.get(n)), None)
    else:
        key = api_key_from_env(api_key, env_names, "openai")
    headers = {
        "content-type": "application/json",
        "accept": "application/json",
        "user-agent": user_agent,
    }
    if key:
        if api_key_header.lower() == "authorization":
            headers["authorization"] = f"Bearer {key}"
        else:
            headers[api_key_header] = key
    headers.update(extra_headers or {})
    return (root or DEFAULT_BASE_URL).rstrip("/"), headers


def check_settings(model: str, timeout: float, max_tokens: int | None, example: str = "") -> None:
    """The settings both OpenAI adapters refuse at construction.

    Raises:
        ValueError: an empty model name, a non-positive timeout, or `max_tokens` below 1.
    """
    if not model:
        hint = f" (for example {example!r})" if example else ""
        raise ValueError(f"model name must not be empty{hint}")
    if timeout <= 0:
        raise ValueError(f"timeout must be positive seconds, got {timeout}")
    if max_tokens is not None and max_tokens < 1:
        raise ValueError(f"max_tokens must be at least 1, got {max_tokens}")
