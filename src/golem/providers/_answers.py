"""What the adapters share about answers and the messages they become: the signature
prefixes that say which API a block belongs to, the text runs around server-side blocks,
tool-call IDs and names, and answers that hold nothing."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any

from golem.errors import ResponseFormatError
from golem.messages import Message, ServerToolBlock, ThinkingBlock, ToolCall
from golem.model import Delta, FinishReason, ModelResponse, ThinkingDelta, ToolCallDelta
from golem.providers._jsonio import json_object, raw_json

__all__ = [
    "ASSISTANT_MEDIA_TEXT",
    "CHAT_AUDIO_PREFIX",
    "FOREIGN_PART_PREFIXES",
    "RESPONSES_IMAGE_PREFIX",
    "RESPONSES_REASONING_PREFIX",
    "RUN_SEPARATOR",
    "TextRuns",
    "finish_of",
    "in_order",
    "named_calls",
    "own_blocks",
    "refuse_no_answer",
    "replay_deltas",
    "run_start",
    "unique_call_id",
    "unique_calls",
    "with_block",
]


RESPONSES_REASONING_PREFIX = "openai-responses/"
"""Starts the `ThinkingBlock.signature` of an OpenAI Responses reasoning item. Only that
adapter replays such a block; the others recognise it as foreign and leave it out."""


CHAT_AUDIO_PREFIX = "openai-chat-audio/"
"""Starts the `Part.signature` of an OpenAI Chat Completions audio answer: the prefix, the
audio's `expires_at` (Unix seconds, empty when not given), "/", its `id`. Only that adapter
sends it back (as the assistant message's `audio.id`); the others leave it out."""


RESPONSES_IMAGE_PREFIX = "openai-responses-image/"
"""Starts the `Part.signature` of an image an OpenAI Responses `image_generation_call` made:
the prefix and the call's ID. Only that adapter reads it; the others leave it out."""


FOREIGN_PART_PREFIXES = (CHAT_AUDIO_PREFIX, RESPONSES_IMAGE_PREFIX)
"""The `Part.signature`s of OpenAI answers: no thought signature for Gemini."""


ASSISTANT_MEDIA_TEXT = "Media of your previous answer (this API takes media only from the user):"
"""Opens the user message that carries an assistant message's media (a Gemini image
model's pictures) to an API that refuses media in assistant turns (ADR 0060)."""


RUN_SEPARATOR = "\n\n"
"""Joins text runs that a provider's server-side tool blocks separate (ADR 0018, 0028)."""


class TextRuns:
    """An answer's text as it arrives, in runs that server-side blocks split: `add` puts
    `RUN_SEPARATOR` before a piece that follows a block (`separated`) after earlier text."""

    __slots__ = ("length", "parts", "separated", "texted")

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.length = 0
        self.separated = False  # a server-side block came since the last text
        self.texted = False  # some text came

    def add(self, piece: str, *, empty_joins: bool = False) -> str:
        """Add `piece` (`empty_joins`: an empty one still ends the block's separation, and
        gets the separator); return it as added."""
        if self.separated and self.texted and (piece or empty_joins):
            piece = RUN_SEPARATOR + piece
        self.separated = self.separated and not (piece or empty_joins)
        self.texted = self.texted or bool(piece)
        self.parts.append(piece)
        self.length += len(piece)
        return piece


def run_start(content: str, pos: int) -> int:
    """Where the text run that follows a server-side block at `pos` starts: past the
    `RUN_SEPARATOR` golem put there when it joined the runs (text before the block exists)."""
    if pos > 0 and content.startswith(RUN_SEPARATOR, pos):
        return pos + len(RUN_SEPARATOR)
    return pos


def own_blocks(
    m: Message, provider: str, keep: Callable[[str], bool]
) -> list[tuple[ServerToolBlock, dict[str, Any]]]:
    """The server-side blocks of `m` that `provider` made and sends back (`keep` of their
    type), each with the object it keeps (`raw`), for `in_order`."""
    return [
        (b, raw)
        for b in m.server_tools
        if b.provider == provider and keep(b.type) and (raw := json_object(b.raw)) is not None
    ]


def in_order(
    m: Message, blocks: Sequence[tuple[ServerToolBlock, dict[str, Any]]]
) -> Iterator[ThinkingBlock | slice | dict[str, Any]]:
    """The thinking blocks, text spans (`slice`s of `m.content`) and server-side `blocks`
    of an assistant message in the order they arrived, for an adapter to send back."""
    thinking = pos = 0
    for b, block in blocks:
        yield from m.thinking[thinking : max(thinking, b.thinking_before)]
        thinking = max(thinking, b.thinking_before)
        if b.at > pos:
            end = min(b.at, len(m.content))
            if run_start(m.content, pos) < end:
                yield slice(run_start(m.content, pos), end)
            pos = max(pos, end)
        yield block
    yield from m.thinking[thinking:]
    if run_start(m.content, pos) < len(m.content):
        yield slice(run_start(m.content, pos), len(m.content))


def unique_call_id(call_id: str, seen: set[str]) -> str:
    """`call_id`, renamed `<id>_2`, `<id>_3`, ... when a call of the same response already
    has it, and recorded in `seen`. An empty ID is returned as is (the adapters fill it)."""
    if not call_id:
        return call_id
    unique, n = call_id, 1
    while unique in seen:
        n += 1
        unique = f"{call_id}_{n}"
    seen.add(unique)
    return unique


def unique_calls(calls: list[ToolCall]) -> list[ToolCall]:
    """`calls` with repeated IDs renamed by `unique_call_id` (the list itself when none is)."""
    ids = [c.id for c in calls if c.id]
    if len(set(ids)) == len(ids):
        return calls
    seen: set[str] = set()
    out = []
    for c in calls:
        call_id = unique_call_id(c.id, seen)
        out.append(c if call_id == c.id else replace(c, id=call_id))
    return out


def named_calls(provider: str, calls: list[ToolCall]) -> list[ToolCall]:
    """`calls`, when each has a name."""
    for call in calls:
        if not call.name:
            raise ResponseFormatError(
                f"{provider} answered with a tool call without a name "
                f"(id {call.id!r}, arguments {call.args[:100]!r})",
                provider=provider,
                retryable=True,
            )
    return calls


def refuse_no_answer(provider: str, response: ModelResponse, reason: str) -> ModelResponse:
    """`response`, unless it stopped for a reason golem does not know (`finish_reason`
    "other": vLLM's `abort`, a router's `error`, a newer API's stop) and holds nothing: no
    text, call, media or server-side block."""
    m = response.message
    if (
        response.finish_reason != "other"
        or m.content
        or m.tool_calls
        or m.parts
        or any(b.type != "container" for b in m.server_tools)
    ):
        return response
    error = ResponseFormatError(
        f"{provider} stopped ({reason[:100]!r}) without an answer",
        provider=provider,
        retryable=True,
    )
    error.usage = response.usage
    raise error


def with_block(message: Message, provider: str, kind: str, raw: Any, **names: str) -> Message:
    """`message` with a `ServerToolBlock` of `raw` kept at its end (`names`: `id`, `name`)."""
    block = ServerToolBlock(
        provider=provider,
        type=kind,
        raw=raw_json(raw),
        at=len(message.content),
        thinking_before=len(message.thinking),
        **names,
    )
    return replace(message, server_tools=[*message.server_tools, block])


def replay_deltas(
    response: ModelResponse, *, signatures: bool = True, apart: bool = False
) -> list[Delta]:
    """Deltas replaying a whole response: its thinking (signed when `signatures`), text and
    tool calls in one delta, or `apart` in one each; none when it has none of them."""
    m = response.message
    thinking = [
        ThinkingDelta(i, text=t.text, signature=t.signature if signatures else "")
        for i, t in enumerate(m.thinking)
    ]
    calls = [
        ToolCallDelta(i, id=c.id, name=c.name, args_fragment=c.args, signature=c.signature)
        for i, c in enumerate(m.tool_calls)
    ]
    if apart:
        deltas = (Delta(thinking=thinking), Delta(content=m.content), Delta(tool_calls=calls))
        return [d for d in deltas if d != Delta()]
    return [Delta(m.content, thinking, calls)] if m.content or thinking or calls else []


def finish_of(table: dict[str, FinishReason], value: Any) -> FinishReason:
    """A provider's stop reason as golem's: "" for none, "other" for one `table` lacks."""
    if not value:
        return ""
    return table.get(value, "other") if isinstance(value, str) else "other"
