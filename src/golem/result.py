"""What a run returns: the output plus its evidence."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, TypeVar

from golem.messages import Message
from golem.usage import Usage

if TYPE_CHECKING:
    from golem.deferred import DeferredRequests

__all__ = ["PartialResult", "Result"]

OutputT = TypeVar("OutputT")


@dataclass(frozen=True, slots=True)
class Result(Generic[OutputT]):
    """The outcome of a run that succeeded — with a final output, or paused.

    Check `pending` before `output`: a paused run has `pending` set and
    `output is None`.
    """

    output: OutputT | None
    """The decoded final output; None when the run paused."""
    messages: list[Message]
    """The whole conversation: the run's system message (if any), the history, the
    prompt and everything the run added. Feed it back as `history`."""
    usage: Usage = field(default_factory=Usage)
    """Tokens summed over every model call of the run."""
    finish_reason: str = ""
    """The last completed model turn's finish reason."""
    requests: int = 0
    """Model call attempts (retried and failed ones included)."""
    tool_calls: int = 0
    """Tool executions attempted (deferrals excluded, approved re-runs included)."""
    cost: float = 0.0
    """`price(usage)` when the agent has a price, else 0.0."""
    run_id: str = ""
    conversation_id: str = ""
    pending: DeferredRequests | None = None
    """The calls a paused run waits on, or None when the run did not pause."""
    trace_context: str = ""
    """The W3C `traceparent` of the run's span when the run was traced (`golem.otel`), else
    "". Keep it with a paused run and pass it to the resume to link the two spans."""


@dataclass(frozen=True, slots=True)
class PartialResult:
    """The evidence a failed run gathered before it failed (see `RunError.partial`)."""

    messages: list[Message]
    usage: Usage = field(default_factory=Usage)
    finish_reason: str = ""
    requests: int = 0
    tool_calls: int = 0
    cost: float = 0.0
    run_id: str = ""
    conversation_id: str = ""
