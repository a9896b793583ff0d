"""The model port: `async generate(request) -> ModelResponse`, and for streaming
`generate_stream(request)` yielding `Delta`s then the final `ModelResponse`."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from golem.messages import Message
from golem.usage import Usage

__all__ = [
    "FINISH_REASONS",
    "TOOL_CHOICE_MODES",
    "Delta",
    "FinishReason",
    "Model",
    "ModelRequest",
    "ModelResponse",
    "StreamingModel",
    "ThinkingDelta",
    "ToolCallDelta",
    "ToolChoice",
    "ToolSpec",
    "check_tool_choice",
]

FinishReason = Literal["stop", "length", "tool_call", "content_filter", "pause_turn", "other", ""]
FINISH_REASONS: frozenset[str] = frozenset(
    ("stop", "length", "tool_call", "content_filter", "pause_turn", "other", "")
)


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool as advertised to the model."""

    name: str
    description: str
    schema: dict[str, Any]
    """JSON schema of the tool's arguments (an object schema)."""


ToolChoice = Literal["auto", "required", "none"] | str
"""Whether and which tool the model must call: `"auto"` (the model decides; the default),
`"required"` (it must call some tool), `"none"` (it must not call any), or the name of one
tool it must call."""

TOOL_CHOICE_MODES: frozenset[str] = frozenset(("auto", "required", "none"))
"""The tool choices that name no tool."""


def check_tool_choice(choice: object, tools: Iterable[str] | None = None) -> str:
    """Return `choice` when it is "auto", "required", "none" or a tool name (one of
    `tools`, when given); else raise `ValueError`."""
    if not isinstance(choice, str) or not choice:
        raise ValueError(
            f'tool_choice must be "auto", "required", "none" or the name of a tool, got {choice!r}'
        )
    if choice in TOOL_CHOICE_MODES or tools is None:
        return choice
    names = list(tools)
    if choice not in names:
        offered = ", ".join(f'"{n}"' for n in names) if names else "no tools"
        raise ValueError(
            f'tool_choice names the tool "{choice}", but the request offers {offered}; '
            'use "auto", "required", "none" or one of the offered tool names'
        )
    return choice


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """One request to a model: the conversation so far and the tools it may call."""

    messages: list[Message]
    """The conversation; a leading system message carries the run's instructions."""
    tools: list[ToolSpec] = field(default_factory=list)
    """Tools the model may call."""
    output_schema: dict[str, Any] | None = None
    """JSON schema the final answer must follow, when the agent has a structured output type."""
    tool_choice: ToolChoice = "auto"
    """Whether and which tool the model must call (see `ToolChoice`). A tool name must be
    one of `tools`; "required" and a tool name need tools on offer."""

    def __post_init__(self) -> None:
        choice = self.tool_choice
        if choice == "auto":
            return
        check_tool_choice(choice, [t.name for t in self.tools])
        if choice == "required" and not self.tools:
            raise ValueError('tool_choice "required" needs at least one tool on offer')


@dataclass(frozen=True, slots=True)
class ModelResponse:
    """A model's answer: an assistant message plus its usage and finish reason."""

    message: Message
    """The assistant message (text, tool calls, thinking)."""
    usage: Usage = field(default_factory=Usage)
    """Tokens used by this call."""
    finish_reason: FinishReason = ""
    """Normalized cause: "stop", "length", "tool_call", "content_filter", "pause_turn",
    "other" or "". "pause_turn": the provider paused a long turn of its own (server-side)
    tools; the run loop sends the answer back as it is, and the model continues the turn."""
    model_name: str = ""
    """The model that answered, as reported by the provider (may be empty)."""


@dataclass(frozen=True, slots=True)
class ThinkingDelta:
    """A fragment of a thinking block."""

    index: int
    """Which thinking block of the response the fragment belongs to."""
    text: str = ""
    signature: str = ""


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A fragment of a tool call: the ID and name arrive first, then argument fragments."""

    index: int
    """Which tool call of the response the fragment belongs to (0-based)."""
    id: str = ""
    name: str = ""
    args_fragment: str = ""
    signature: str = ""


@dataclass(frozen=True, slots=True)
class Delta:
    """An increment of a streamed model response."""

    content: str = ""
    """Text to append to the answer."""
    thinking: list[ThinkingDelta] = field(default_factory=list)
    tool_calls: list[ToolCallDelta] = field(default_factory=list)


@runtime_checkable
class Model(Protocol):
    """A language model golem can call."""

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """Answer `request`; raise a `golem.errors.ProviderError` on failure."""
        ...


@runtime_checkable
class StreamingModel(Model, Protocol):
    """A model that can also stream its answer."""

    def generate_stream(self, request: ModelRequest) -> AsyncIterator[Delta | ModelResponse]:
        """Yield `Delta`s in arrival order, then the final `ModelResponse` as the last item."""
        ...
