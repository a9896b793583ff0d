"""Model provider adapters and `infer_model`."""

from __future__ import annotations

import os

from golem.model import Model
from golem.providers._errors import MAX_ERROR_BODY
from golem.providers._fallback import FallbackModel
from golem.providers._jsonio import MAX_TOKEN_COUNT
from golem.providers._retry import MAX_RETRY_AFTER

__all__ = [
    "MAX_ERROR_BODY",
    "MAX_RETRY_AFTER",
    "MAX_TOKEN_COUNT",
    "OLLAMA_BASE_URL",
    "FallbackModel",
    "infer_model",
]

OLLAMA_BASE_URL = "http://localhost:11434/v1"
"""Where `"ollama:..."` models are served unless `OLLAMA_BASE_URL` is set (OpenAI-compatible)."""

_PROVIDERS = "openai, openai-responses, anthropic, gemini or ollama"


def infer_model(spec: str) -> Model:
    """Build a model from `"provider:model-name"`.

    Raises:
        ValueError: the spec has no known provider prefix.
    """
    provider, sep, name = spec.partition(":")
    if not sep or not name:
        raise ValueError(
            f'model spec must look like "provider:model-name" ({_PROVIDERS}), got {spec!r}'
        )
    if provider == "openai":
        from golem.providers.openai import OpenAIChatModel

        return OpenAIChatModel(name)
    if provider == "openai-responses":
        from golem.providers.openai import OpenAIResponsesModel

        return OpenAIResponsesModel(name)
    if provider == "anthropic":
        from golem.providers.anthropic import AnthropicModel

        return AnthropicModel(name)
    if provider in ("gemini", "google", "google-gla"):
        from golem.providers.gemini import GeminiModel

        return GeminiModel(name)
    if provider == "ollama":
        from golem.providers.openai import OpenAIChatModel

        model = OpenAIChatModel(
            name,
            base_url=os.environ.get("OLLAMA_BASE_URL") or OLLAMA_BASE_URL,
            # Ollama ignores the key; a placeholder keeps OPENAI_API_KEY from leaving the host
            api_key=os.environ.get("OLLAMA_API_KEY") or "ollama",
        )
        model.provider = "ollama"
        return model
    raise ValueError(f'unknown model provider "{provider}" in {spec!r}; want {_PROVIDERS}')
