"""Every exception golem raises to a caller, drawn as a tree in docs/errors.md. The signals a
tool raises (`ModelRetry`, `Failed`, `Canceled`, `Deferred`) live in `golem.tool`."""

from __future__ import annotations

from enum import StrEnum

from golem.usage import Usage

__all__ = [
    "AuthenticationError",
    "BadRequest",
    "ConversationRequired",
    "GolemError",
    "HistoryError",
    "Overloaded",
    "ProviderConnectionError",
    "ProviderError",
    "ProviderTimeout",
    "RateLimited",
    "ResponseFormatError",
    "ResumeError",
    "RunPaused",
    "SealError",
    "Stage",
    "StoreError",
    "SubAgentConversationMismatch",
    "ToolError",
    "ToolTimeout",
    "UsageLimitExceeded",
]


class Stage(StrEnum):
    """The stage of a run at which it failed."""

    MODEL = "model"
    """A model call failed (provider error, exhausted script, stream failure)."""
    DECODE = "decode"
    """The final answer could not be decoded into the output type."""
    TOOL = "tool"
    """A tool failed terminally, timed out, or was not declared."""
    LOOP = "loop"
    """The run exceeded `max_iterations` model turns."""
    USAGE = "usage"
    """A usage limit was crossed."""
    CANCELED = "canceled"
    """A tool deliberately stopped the run by raising `Canceled`."""


class GolemError(Exception):
    """Base class of every error golem raises to a caller."""


class HistoryError(GolemError, ValueError):
    """Text that is not a history (`loads_history`), or a history that cannot be written
    (`dumps_history`); also a `ValueError`, naming the message index and field."""


class ResumeError(GolemError, ValueError):
    """A resume was rejected before any model call or re-execution (naming the call)."""


class SealError(ResumeError):
    """A pending call's seal did not verify; `problem` is "unsealed", "unknown_key",
    "tampered", "malformed", "conversation_required" or "sub_agent_conversation"."""

    def __init__(self, call_id: str, tool_name: str, problem: str, message: str) -> None:
        super().__init__(message)
        self.call_id = call_id
        self.tool_name = tool_name
        self.problem = problem


class ConversationRequired(SealError):
    """A keyed resume was given a plain history, not a `PausedRun`: a history's conversation
    is its editor's word. `call_id` / `tool_name` name the first sealed pending call."""


class SubAgentConversationMismatch(SealError):
    """A paused sub-agent's record sealed for another conversation than its parent call's (ADR
    0065); it resumes only from a `PausedRun`. `call_id` / `tool_name` are namespaced."""


class RunPaused(GolemError):
    """`Result.output` read on a paused run (check `result.is_paused` first)."""


class ToolError(GolemError):
    """A tool call failed terminally: `tool_name` and `call_id` name the call."""

    def __init__(self, tool_name: str, call_id: str, message: str) -> None:
        super().__init__(f'tool "{tool_name}" (call "{call_id}"): {message}')
        self.tool_name = tool_name
        self.call_id = call_id


class ToolTimeout(ToolError, TimeoutError):
    """A tool call overran its timeout (a `ToolError` that is also a `TimeoutError`)."""


class UsageLimitExceeded(GolemError):
    """A run crossed a usage limit: `kind` names the dimension, `actual` > `limit`."""

    def __init__(self, kind: str, limit: float, actual: float) -> None:
        super().__init__(f"run exceeded the {kind} limit of {limit:g} (used {actual:g})")
        self.kind = kind
        self.limit = limit
        self.actual = actual


class ProviderError(GolemError):
    """A model provider call failed; `retryable` tells the loop whether to try again, the
    other fields are what the provider said ("" when nothing), `usage` what it reported."""

    retryable: bool = False
    usage: Usage | None = None

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None = None,
        body: str = "",
        retryable: bool | None = None,
        provider: str = "",
        error_type: str = "",
        error_code: str = "",
        request_id: str = "",
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.body = body
        self.provider = provider
        self.error_type = error_type
        self.error_code = error_code
        self.request_id = request_id
        if retryable is not None:
            self.retryable = retryable


class AuthenticationError(ProviderError):
    """The provider rejected the credentials (401/403)."""


class RateLimited(ProviderError):
    """The provider asked to slow down (429); `retry_after` is in seconds when known."""

    retryable = True

    def __init__(self, message: str, *, retry_after: float | None = None, **kw: object) -> None:
        super().__init__(message, **kw)  # type: ignore[arg-type]
        self.retry_after = retry_after


class Overloaded(ProviderError):
    """The provider is overloaded or failed internally (5xx, Anthropic 529)."""

    retryable = True

    def __init__(self, message: str, *, retry_after: float | None = None, **kw: object) -> None:
        super().__init__(message, **kw)  # type: ignore[arg-type]
        self.retry_after = retry_after


class BadRequest(ProviderError):
    """The provider rejected the request (any 4xx not classified more precisely)."""


class ProviderTimeout(ProviderError):
    """The request to the provider timed out."""

    retryable = True


class ProviderConnectionError(ProviderError):
    """The provider could not be reached (DNS, refused connection, reset)."""

    retryable = True


class ResponseFormatError(ProviderError):
    """The provider's answer could not be parsed (malformed JSON, truncated stream)."""


class StoreError(GolemError):
    """Base class of the durable store's errors (see `golem.durable.store`)."""
