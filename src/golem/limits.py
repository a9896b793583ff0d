"""Usage limits for one run and their check."""

from __future__ import annotations

from dataclasses import dataclass

from golem.errors import UsageLimitExceeded
from golem.usage import Usage

__all__ = ["UsageLimits"]


@dataclass(frozen=True, slots=True)
class UsageLimits:
    """Upper bounds for one run (`None`: unbounded); crossing one fails the run with
    `RunError(stage=USAGE)` caused by `UsageLimitExceeded`."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    requests: int | None = None
    """Provider call attempts, retries and failed attempts included."""
    tool_calls: int | None = None
    """Tool executions (deferrals do not count; approved re-runs do)."""
    cost: float | None = None
    """Money as computed by the agent's `price` (requires one)."""

    def __post_init__(self) -> None:
        for name in (
            "input_tokens",
            "output_tokens",
            "total_tokens",
            "requests",
            "tool_calls",
            "cost",
        ):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"usage limit {name} must not be negative, got {value}")

    def check(self, usage: Usage, requests: int, tool_calls: int, cost: float) -> None:
        """Raise `UsageLimitExceeded` for the first bound crossed, in a fixed order."""
        for kind, limit, actual in (
            ("input token", self.input_tokens, usage.input_tokens),
            ("output token", self.output_tokens, usage.output_tokens),
            ("total token", self.total_tokens, usage.total_tokens),
            ("request", self.requests, requests),
            ("tool call", self.tool_calls, tool_calls),
            ("cost", self.cost, cost),
        ):
            if limit is not None and actual > limit:
                raise UsageLimitExceeded(kind, limit, actual)
