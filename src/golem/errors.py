"""Every exception golem raises to a caller.

```text
GolemError
├── RunError(stage, partial)          a run failed (golem.result, beside the PartialResult it carries)
├── HistoryError (also ValueError)    history JSON that does not load, or a history that cannot be written
├── ResumeError (also ValueError)     a resume was rejected before any model call
│   └── SealError(call_id, problem)   a pending call's seal is missing, forged or broken
│       ├── ConversationRequired      a keyed resume was not told its conversation
│       └── SubAgentConversationMismatch  a sub-agent record sealed for another conversation
├── RunPaused                         read Result.output of a paused run (check is_paused)
├── ToolError(tool_name, call_id)     usually the cause of RunError(stage=TOOL)
│   └── ToolTimeout (also TimeoutError) the call overran its timeout
├── UsageLimitExceeded(kind, limit, actual)
├── ProviderError(retryable, status_code, error_type, error_code, request_id, body, usage)
│   ├── AuthenticationError           401/403: the key is missing, wrong or lacks rights
│   ├── RateLimited(retry_after)      429: slow down (retryable)
│   ├── Overloaded                    5xx / 529: the service is busy (retryable)
│   ├── BadRequest                    any other 4xx: the request itself is wrong (409: retryable)
│   ├── ProviderTimeout               the request timed out (retryable)
│   ├── ProviderConnectionError       the service could not be reached (retryable)
│   └── ResponseFormatError           the service answered something unreadable
└── StoreError                        see golem.durable.store
```

The signals a tool raises (`ModelRetry`, `Failed`, `Canceled`, `Deferred`) live in
`golem.tool`; they are caught by the run loop and never reach a caller as raised.
"""

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
    """`loads_history` was given text that is not a history, or `dumps_history` a history
    that cannot be written (a lone surrogate in a text field).

    Also a `ValueError`, as these errors always were. The message names the 0-based message
    index and the field when there is one; nothing is returned half-loaded.
    """


class ResumeError(GolemError, ValueError):
    """A resume was rejected before any model call or re-execution.

    The message names the offending call (by ID, or by tool name when it has none).
    """


class SealError(ResumeError):
    """A pending call's seal did not verify; the call was not executed.

    `problem` says what failed: "unsealed" (no seal), "unknown_key" (sealed with a key
    ID the agent does not hold), "tampered" (the tool name, arguments, kind, call ID or
    conversation differ from what was sealed, or another key sealed it), "malformed"
    (the seal text is not a golem seal), "conversation_required" (`ConversationRequired`)
    or "sub_agent_conversation" (`SubAgentConversationMismatch`).
    """

    def __init__(self, call_id: str, tool_name: str, problem: str, message: str) -> None:
        super().__init__(message)
        self.call_id = call_id
        self.tool_name = tool_name
        self.problem = problem


class ConversationRequired(SealError):
    """A resume with a seal key was given a plain history, not a `PausedRun`: the
    conversation a history names is its editor's word, so a seal cannot be checked
    against it. `call_id` / `tool_name` name the first sealed pending call."""


class SubAgentConversationMismatch(SealError):
    """A paused sub-agent's record was sealed for another conversation than its parent
    call's (`<parent conversation>/<parent call ID>`, ADR 0065); it resumes only from a
    `PausedRun` whose pending calls carry their seals. `call_id` / `tool_name` are namespaced."""


class RunPaused(GolemError):
    """`Result.output` was read on a run that paused: it has no output until resumed.

    Check `result.is_paused` (or `result.pending`) first; the message names the pending calls.
    """


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
    """A model provider call failed; `retryable` tells the run loop whether to try again.

    `status_code`, `error_type`, `error_code`, `request_id` and `body` (first 64 KiB) are what
    the provider said, "" when it said nothing; `usage` is what it reported for the failed
    answer (the run counts it), or None."""

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
