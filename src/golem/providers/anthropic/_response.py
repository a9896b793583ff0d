"""Anthropic Messages answers: a response body (or the message a stream builds) as a golem
`ModelResponse` — text, citations, thinking, tool calls, server-side blocks, usage, the
container it ran in."""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

from golem.errors import ResponseFormatError
from golem.messages import Citation, Message, ServerToolBlock, ThinkingBlock, ToolCall
from golem.model import FinishReason, ModelResponse
from golem.providers._answers import (
    TextRuns,
    named_calls,
    refuse_no_answer,
    unique_call_id,
    with_block,
)
from golem.providers._jsonio import (
    args_json,
    json_text,
    object_text,
    raw_json,
    table,
    text_of,
    usage_of,
)
from golem.providers.anthropic._errors import error_from_event
from golem.providers.anthropic._wire import CONTAINER_BLOCK, PROVIDER
from golem.usage import Usage

__all__ = [
    "RawArgs",
    "finish_reason_from",
    "fresh_call_id",
    "input_text",
    "message_from_blocks",
    "parse_response",
    "response_of",
    "usage_from",
    "with_container",
]


_FINISH = cast(
    dict[str, FinishReason],
    table(
        "end_turn=stop stop_sequence=stop max_tokens=length model_context_window_exceeded=length "
        "tool_use=tool_call refusal=content_filter pause_turn=pause_turn"
    ),
)


_USAGE = {
    "input_tokens": ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"),
    "output_tokens": ("output_tokens",),
    "cache_read_tokens": ("cache_read_input_tokens",),
    "cache_write_tokens": ("cache_creation_input_tokens",),
    "reasoning_tokens": ("output_tokens_details.thinking_tokens",),
}


def usage_from(raw: Mapping[str, Any] | None) -> Usage:
    """Usage of a response: input counts cache reads and writes; reasoning when reported."""
    return usage_of(raw, _USAGE)


def fresh_call_id() -> str:
    """An ID for a `tool_use` block a server sent without one (a compatible server's): its
    result is paired with it, and a pause hands the call out by it."""
    return "toolu_golem_" + secrets.token_hex(12)


def finish_reason_from(stop_reason: Any) -> FinishReason:
    """Normalize `stop_reason` (null → "", unknown values → "other")."""
    if stop_reason is None:
        return ""
    return _FINISH.get(str(stop_reason), "other")


_ARGS_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False)
"""Tool-call input as JSON text, spaced like the API streams it (`{"city": "Paris"}`)."""


def input_text(value: Any) -> str:
    """A `tool_use` block's `input` object as the arguments' JSON text, spaced like the API
    streams it (null is `{}`; text holding an object, a proxy's, is that text)."""
    return object_text(value) or args_json({} if value is None else value, _ARGS_ENCODER)


@dataclass(frozen=True, slots=True)
class RawArgs:
    """Marks a streamed `tool_use` block whose arguments arrived as raw JSON text."""

    text: str


def message_from_blocks(blocks: Sequence[Mapping[str, Any]], output_tool: str = "") -> Message:
    """The assistant message of a list of content blocks."""
    runs = TextRuns()
    thinking: list[ThinkingBlock] = []
    calls: list[ToolCall] = []
    citations: list[Citation] = []
    server: list[ServerToolBlock] = []
    names: dict[str, str] = {}
    ids: set[str] = set()
    answer: str | None = None
    for b in blocks:
        kind = b.get("type")
        if kind == "text":
            piece = text_of(b.get("text"))
            runs.add(piece, empty_joins=True)
            cited = b.get("citations")
            if isinstance(cited, list):
                start = runs.length - len(piece)
                citations.extend(
                    _citation(c, start, runs.length) for c in cited if isinstance(c, Mapping)
                )
        elif kind == "thinking":
            thinking.append(
                ThinkingBlock(
                    text=text_of(b.get("thinking")), signature=text_of(b.get("signature"))
                )
            )
        elif kind == "redacted_thinking":
            thinking.append(ThinkingBlock(redacted=text_of(b.get("data"))))
        elif kind == "tool_use":
            raw = b.get("input")
            args = raw.text if isinstance(raw, RawArgs) else input_text(raw)
            name = text_of(b.get("name"))
            if output_tool and name == output_tool:
                answer = args
                continue
            call_id = unique_call_id(text_of(b.get("id")) or fresh_call_id(), ids)
            calls.append(ToolCall(id=call_id, name=name, args=args))
        else:
            runs.separated = True
            server.append(_server_block(b, names, runs.length, len(thinking)))
    if answer is not None:
        citations = []
        server = [replace(s, at=0) for s in server]
    content = "".join(runs.parts) if answer is None else answer
    return Message(
        role="assistant",
        content=content,
        tool_calls=named_calls(PROVIDER, calls),
        thinking=thinking,
        citations=citations,
        server_tools=server,
    )


def _citation(c: Mapping[str, Any], start: int, end: int) -> Citation:
    return Citation(
        start=start,
        end=end,
        url=text_of(c.get("url")),
        title=text_of(c.get("title")) or text_of(c.get("document_title")),
        cited_text=text_of(c.get("cited_text")),
        provider=PROVIDER,
        raw=raw_json(c),
    )


def _server_block(
    b: Mapping[str, Any], names: dict[str, str], at: int, thinking_before: int
) -> ServerToolBlock:
    """A server-side block; a result is named after the call it answers (same message)."""
    kind = text_of(b.get("type"))
    block_id = text_of(b.get("id"))
    name = text_of(b.get("name"))
    if block_id and name:
        names[block_id] = name
    else:
        block_id = block_id or text_of(b.get("tool_use_id"))
        name = name or names.get(block_id, "") or kind.removesuffix("_tool_result")
    return ServerToolBlock(
        provider=PROVIDER,
        type=kind,
        id=block_id,
        name=name if name != kind else "",
        raw=raw_json(dict(b)),
        at=at,
        thinking_before=thinking_before,
    )


def parse_response(body: Mapping[str, Any], output_tool: str = "") -> ModelResponse:
    """Map a non-streamed `/v1/messages` response body to a `ModelResponse`."""
    if body.get("type") == "error" or (
        isinstance(body.get("error"), Mapping) and "content" not in body
    ):  # an error object (a proxy's may lack the "type": "error" Anthropic puts on it)
        raise error_from_event(json_text(dict(body)))
    content = body.get("content")
    if not isinstance(content, list) or not all(isinstance(b, Mapping) for b in content):
        raise ResponseFormatError(
            f"anthropic response has no content list of blocks: {json_text(body)[:200]}",
            provider=PROVIDER,
        )
    usage = body.get("usage")
    return response_of(
        with_container(message_from_blocks(content, output_tool), body.get("container")),
        usage_from(usage if isinstance(usage, Mapping) else None),
        body.get("stop_reason"),
        text_of(body.get("model")),
    )


def with_container(message: Message, container: Any) -> Message:
    """`message` keeping the code-execution container a response named (`CONTAINER_BLOCK`,
    after its blocks); `message` itself when `container` names none."""
    if not isinstance(container, Mapping):
        return message
    container_id = container.get("id")
    if not isinstance(container_id, str) or not container_id:
        return message
    return with_block(message, PROVIDER, CONTAINER_BLOCK, dict(container), id=container_id)


def response_of(message: Message, usage: Usage, stop_reason: Any, model: str) -> ModelResponse:
    """The `ModelResponse` of a parsed message; an answer given through the output tool
    (a `tool_use` stop with no call left) finishes with "stop"."""
    finish = finish_reason_from(stop_reason)
    if finish == "tool_call" and not message.tool_calls:
        finish = "stop"
    response = ModelResponse(message=message, usage=usage, finish_reason=finish, model_name=model)
    return refuse_no_answer(PROVIDER, response, str(stop_reason)) if finish == "other" else response
