"""Model provider adapters and `infer_model`.

`infer_model("openai:gpt-4.1")`, `"anthropic:claude-sonnet-4-5"`, `"gemini:gemini-2.5-flash"`
build the matching adapter; keys come from the usual environment variables.
"""

from __future__ import annotations

from golem.model import Model

__all__ = ["infer_model"]


def infer_model(spec: str) -> Model:
    """Build a model from `"provider:model-name"` ("openai", "anthropic", "gemini").

    Raises:
        ValueError: the spec has no known provider prefix.
    """
    provider, sep, name = spec.partition(":")
    if not sep or not name:
        raise ValueError(
            f'model spec must look like "provider:model-name" (openai, anthropic, gemini), got {spec!r}'
        )
    if provider == "openai":
        from golem.providers.openai import OpenAIChatModel

        return OpenAIChatModel(name)
    if provider == "anthropic":
        from golem.providers.anthropic import AnthropicModel

        return AnthropicModel(name)
    if provider in ("gemini", "google", "google-gla"):
        from golem.providers.gemini import GeminiModel

        return GeminiModel(name)
    raise ValueError(
        f'unknown model provider "{provider}" in {spec!r}; want openai, anthropic or gemini'
    )
