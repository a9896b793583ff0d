"""Token usage and the price of it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Price", "Usage"]


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts of one model response, or summed over a run."""

    input_tokens: int = 0
    """Tokens sent to the model (cache reads and writes included)."""
    output_tokens: int = 0
    """Tokens the model produced (reasoning included)."""
    cache_read_tokens: int = 0
    """Input tokens served from the provider's prompt cache."""
    cache_write_tokens: int = 0
    """Input tokens written to the provider's prompt cache."""
    reasoning_tokens: int = 0
    """Output tokens spent on reasoning."""

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
        )


Price = Callable[[Usage], float]
"""Turns cumulative usage into money; `Result.cost` is `price(result.usage)`."""
