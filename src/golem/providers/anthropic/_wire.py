"""The Anthropic Messages API request format: golem requests to JSON bodies."""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from golem.errors import BadRequest
from golem.messages import Message, Part, ThinkingBlock, ToolCall
from golem.model import ModelRequest, ToolSpec
from golem.providers._answers import (
    ASSISTANT_MEDIA_TEXT,
    RESPONSES_REASONING_PREFIX,
    in_order,
    own_blocks,
)
from golem.providers._jsonio import args_object, given, json_object

__all__ = [
    "API_VERSION",
    "CONTAINER_BLOCK",
    "DEFAULT_BASE_URL",
    "DEFAULT_MAX_TOKENS",
    "EMPTY_PROMPT_TEXT",
    "OUTPUT_TOOL_NAME",
    "PROMPTED_OUTPUT_TEMPLATE",
    "OutputMode",
    "build_request_body",
    "container_of",
    "strict_output_schema",
    "tool_choice_of",
]

API_VERSION = "2023-06-01"
"""Value of the `anthropic-version` header."""
DEFAULT_BASE_URL = "https://api.anthropic.com"
"""Where requests go unless `base_url` is given (`/v1/messages` is appended)."""
DEFAULT_MAX_TOKENS = 4096
"""`max_tokens` when none is configured (the API requires one)."""
PROVIDER = "anthropic"

OutputMode = Literal["native", "prompted", "tool"]
"""How `ModelRequest.output_schema` reaches the model: `output_config.format` ("native"), the
system prompt ("prompted"), or a forced `final_result` tool whose input is the answer ("tool")."""

OUTPUT_TOOL_NAME = "final_result"
"""The tool that carries the answer in "tool" output mode; its input becomes the message text."""
OUTPUT_TOOL_DESCRIPTION = "The final response which ends this conversation"

EMPTY_PROMPT_TEXT = "."
"""The text of a user turn sent for an empty prompt: the API refuses a conversation without
messages and empty text blocks."""

PROMPTED_OUTPUT_TEMPLATE = (
    "Always respond with a JSON object that's compatible with this schema:\n\n"
    "{schema}\n\n"
    "Don't include any text or Markdown fencing before or after."
)
"""System-prompt text used for `output_schema` in "prompted" output mode."""


# --------------------------------------------------------------------------- requests


def build_request_body(
    request: ModelRequest,
    *,
    model: str,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    temperature: float | None = None,
    top_p: float | None = None,
    stop: Sequence[str] | None = None,
    thinking_budget: int | None = None,
    output_mode: OutputMode = "native",
    stream: bool = False,
    extra_body: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Build the JSON body of `POST /v1/messages` for `request`."""
    system_parts = [m.content for m in request.messages if m.role == "system" and m.content]
    if request.output_schema is not None and output_mode == "prompted":
        schema_text = json.dumps(request.output_schema, ensure_ascii=False)
        system_parts.append(PROMPTED_OUTPUT_TEMPLATE.format(schema=schema_text))
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens}
    if system_parts:
        body["system"] = "\n\n".join(system_parts)
    body["messages"] = _messages(request.messages)
    tools = [_tool(t) for t in request.tools]
    output_tool = request.output_schema is not None and output_mode == "tool"
    if output_tool:
        assert request.output_schema is not None
        tools.append(
            {
                "name": OUTPUT_TOOL_NAME,
                "description": OUTPUT_TOOL_DESCRIPTION,
                "input_schema": request.output_schema,
            }
        )
    if tools:
        body["tools"] = tools
        body["tool_choice"] = tool_choice_of(
            request.tool_choice,
            output_tool=output_tool,
            function_tools=len(request.tools),
            thinking=thinking_budget is not None,
        )
    if request.output_schema is not None and output_mode == "native":
        body["output_config"] = {
            "format": {"type": "json_schema", "schema": strict_output_schema(request.output_schema)}
        }
    if thinking_budget is not None:
        body["thinking"] = {"type": "enabled", "budget_tokens": thinking_budget}
    body |= given(temperature=temperature, top_p=top_p, stop_sequences=list(stop) if stop else None)
    body["stream"] = stream
    container = container_of(request.messages)
    if container:
        body["container"] = container
    for key, value in (extra_body or {}).items():
        current = body.get(key)
        if key == "container" and container and isinstance(value, Mapping) and "id" not in value:
            body[key] = {**value, "id": container}  # skills to load, in the carried container
        elif isinstance(current, dict) and isinstance(value, Mapping):
            body[key] = {**current, **value}
        elif key == "tools" and isinstance(current, list) and isinstance(value, list):
            body[key] = [*current, *value]  # server tools (web search, ...) beside the agent's
        else:
            body[key] = value
    return body


CONTAINER_BLOCK = "container"
"""The `ServerToolBlock.type` that keeps the code-execution container a response named
(its `id`; `raw` is the response's `container` object, with `expires_at`). It is no content
block: it goes back as the request's `container`, never among the turn's blocks."""


def container_of(messages: Sequence[Message], now: float | None = None) -> str:
    """The ID of the code-execution container the conversation's latest Anthropic answer
    ran in, to send as the request's `container` (a paused turn continues in it, and files
    made there stay available); "" when the latest one named has expired (its `expires_at`
    is past at `now`, default the current time) or none was named."""
    for m in reversed(messages):
        if m.role != "assistant":
            continue
        for b in reversed(m.server_tools):
            if b.provider == PROVIDER and b.type == CONTAINER_BLOCK and b.id:
                expires = _expiry(json_object(b.raw))
                if expires is not None and expires <= (time.time() if now is None else now):
                    return ""
                return b.id
    return ""


def _expiry(container: Mapping[str, Any] | None) -> float | None:
    """When a container expires (POSIX seconds), None when it does not say or not readably."""
    value = container.get("expires_at") if container is not None else None
    if not isinstance(value, str):
        return None
    try:
        when = datetime.fromisoformat(value)
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return when.timestamp()
    except (ValueError, OverflowError, OSError):
        return None


def tool_choice_of(
    choice: str, *, output_tool: bool = False, function_tools: int = 1, thinking: bool = False
) -> dict[str, Any]:
    """The `tool_choice` object for a golem tool choice."""
    if choice == "none":
        return {"type": "none"}
    if thinking:
        if choice != "auto":
            raise BadRequest(
                f'anthropic refuses tool_choice "{choice}" with extended thinking '
                '(only "auto" and "none" are allowed); drop thinking_budget or the tool choice',
                provider=PROVIDER,
            )
        return {"type": "auto"}
    if choice == "auto":
        if not output_tool:
            return {"type": "auto"}
        if function_tools == 0:
            return {"type": "tool", "name": OUTPUT_TOOL_NAME}
        return {"type": "any"}
    if choice == "required":
        return {"type": "any"}
    return {"type": "tool", "name": choice}


def _tool(spec: ToolSpec) -> dict[str, Any]:
    return {"name": spec.name, "description": spec.description, "input_schema": spec.schema}


_ID_OK = re.compile(r"[A-Za-z0-9_-]+")
_ID_BAD = re.compile(r"[^A-Za-z0-9_-]")


@dataclass
class _CallIds:
    """Maps golem tool-call IDs to IDs the API accepts (`^[a-zA-Z0-9_-]+$`), stably."""

    _open: list[tuple[str, str]] = field(default_factory=list)
    _count: int = 0

    def for_call(self, call: ToolCall) -> str:
        if call.id:
            return _clean_id(call.id)
        self._count += 1
        wire = f"call_golem_{self._count}"
        self._open.append((call.name, wire))
        return wire

    def for_result(self, message: Message) -> str:
        if message.tool_call_id:
            return _clean_id(message.tool_call_id)
        for i, (name, wire) in enumerate(self._open):
            if name == message.tool_name:
                del self._open[i]
                return wire
        if self._open:
            return self._open.pop(0)[1]
        return "call_golem_unmatched"


def _clean_id(raw: str) -> str:
    if _ID_OK.fullmatch(raw):
        return raw
    digest = hashlib.sha256(raw.encode()).hexdigest()[:8]
    return f"{_ID_BAD.sub('_', raw)}_{digest}"


def _messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    ids = _CallIds()
    media: list[Part] = []
    for m in messages:
        if m.role == "system":
            continue
        if media and m.role != "tool":
            _append_user(out, _media_blocks(media))
            media = []
        if m.role == "assistant":
            blocks = _assistant_blocks(m, ids)
            role = "assistant"
            media = list(m.parts)  # assistant turns take no media: they follow the results
        elif m.role == "tool":
            blocks = [_tool_result(m, ids)]
            role = "user"
        else:
            blocks = _user_blocks(m)
            role = "user"
            if not blocks and not (out and out[-1]["role"] == "user"):
                blocks = [{"type": "text", "text": EMPTY_PROMPT_TEXT}]
        if not blocks:
            continue
        if out and out[-1]["role"] == role:
            # consecutive user turns (tool results and a prompt), or assistant turns (a turn
            # the API paused, `pause_turn`, and its continuation) form one turn
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    if media:
        _append_user(out, _media_blocks(media))
    if out and out[-1]["role"] == "assistant":
        _trim_last_turn(out)
    if not out:
        out.append({"role": "user", "content": [{"type": "text", "text": EMPTY_PROMPT_TEXT}]})
    return out


def _trim_last_turn(out: list[dict[str, Any]]) -> None:
    """A request that ends with an assistant turn (a paused turn sent back to go on): the
    API refuses one whose last text ends in whitespace, so that whitespace is left out (a
    block left empty goes, and a turn left empty)."""
    blocks = out[-1]["content"]
    while blocks and blocks[-1].get("type") == "text" and not blocks[-1].get("citations"):
        text = blocks[-1]["text"].rstrip()
        if text:
            blocks[-1] = {**blocks[-1], "text": text}
            break
        blocks.pop()
    if not blocks:
        out.pop()


def _append_user(out: list[dict[str, Any]], blocks: list[dict[str, Any]]) -> None:
    """Add `blocks` as a user turn, or to the user turn `out` ends with."""
    if out and out[-1]["role"] == "user":
        out[-1]["content"].extend(blocks)
    else:
        out.append({"role": "user", "content": blocks})


def _media_blocks(parts: list[Part]) -> list[dict[str, Any]]:
    """The blocks carrying the media of an assistant message, in the user turn after it
    (after the results of its calls, which must come first; ADR 0060)."""
    return [{"type": "text", "text": ASSISTANT_MEDIA_TEXT}, *(_part_block(p) for p in parts)]


def _replayable_thinking(m: Message) -> list[ThinkingBlock]:
    """The thinking blocks of `m` that Anthropic signed, as far as the message tells."""
    if not m.thinking or any(c.signature for c in m.tool_calls):
        return []
    anthropic_calls = any(c.id.startswith("toolu_") for c in m.tool_calls) or any(
        b.provider == PROVIDER for b in m.server_tools
    )
    return [
        t
        for t in m.thinking
        if t.redacted
        or (
            t.signature
            and not t.signature.startswith(RESPONSES_REASONING_PREFIX)
            and (t.text or anthropic_calls)
        )
    ]


def _assistant_blocks(m: Message, ids: _CallIds) -> list[dict[str, Any]]:
    """The content blocks of an assistant turn."""
    replayable = {id(t) for t in _replayable_thinking(m)}
    server = own_blocks(m, PROVIDER, lambda kind: kind != CONTAINER_BLOCK)
    blocks: list[dict[str, Any]] = []
    for item in in_order(m, server):
        if isinstance(item, ThinkingBlock):
            if id(item) not in replayable:
                continue
            if item.redacted:
                blocks.append({"type": "redacted_thinking", "data": item.redacted})
            else:
                blocks.append(
                    {"type": "thinking", "thinking": item.text, "signature": item.signature}
                )
        elif isinstance(item, slice):
            blocks.extend(_text_blocks(m, item.start, item.stop))
        else:
            blocks.append(item)
    for call in m.tool_calls:
        blocks.append(
            {
                "type": "tool_use",
                "id": ids.for_call(call),
                "name": call.name,
                "input": args_object(call.args),
            }
        )
    return blocks


_REPLAYED_CITATIONS = frozenset(("web_search_result_location",))
"""Citations sent back on their text: self-contained ones. Document citations point at
documents of the request by index, which an edited or trimmed history may no longer hold."""


def _text_blocks(m: Message, start: int, end: int) -> list[dict[str, Any]]:
    """Text blocks for `m.content[start:end]`, cut at the spans of replayable citations."""
    cited: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for c in m.citations:
        if c.provider != PROVIDER or not (start <= c.start < c.end <= end):
            continue
        raw = json_object(c.raw)
        if raw is not None and raw.get("type") in _REPLAYED_CITATIONS:
            cited.setdefault((c.start, c.end), []).append(raw)
    cuts = sorted({start, end, *(i for span in cited for i in span)})
    blocks: list[dict[str, Any]] = []
    for a, b in itertools.pairwise(cuts):
        text = m.content[a:b]
        citations = cited.get((a, b))
        if not text.strip() and not citations:
            if blocks:
                blocks[-1]["text"] += text
            continue
        block: dict[str, Any] = {"type": "text", "text": text}
        if citations:
            block["citations"] = citations
        blocks.append(block)
    return blocks


def _user_blocks(m: Message) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if m.content:
        blocks.append({"type": "text", "text": m.content})
    blocks.extend(_part_block(p) for p in m.parts)
    return blocks


def _tool_result(m: Message, ids: _CallIds) -> dict[str, Any]:
    content: str | list[dict[str, Any]] = _user_blocks(m) if m.parts else m.content
    return {
        "type": "tool_result",
        "tool_use_id": ids.for_result(m),
        "content": content,
        "is_error": m.failed,
    }


def _part_block(p: Part) -> dict[str, Any]:
    """The content block of one part; kinds the API cannot read become a text note."""
    if p.kind == "text" and p.text:
        return {"type": "text", "text": p.text}
    if p.kind == "image":
        if p.url:
            return {"type": "image", "source": {"type": "url", "url": p.url}}
        if p.data is not None:
            return {"type": "image", "source": _base64_source(p.data, p.media_type or "")}
    elif p.kind == "document":
        if p.url:
            return {"type": "document", "source": {"type": "url", "url": p.url}}
        if p.data is not None:
            media_type = p.media_type or ""
            if media_type == "application/pdf":
                return {"type": "document", "source": _base64_source(p.data, media_type)}
            if media_type.startswith("text/"):
                text = p.data.decode("utf-8", errors="replace")
                source = {"type": "text", "media_type": "text/plain", "data": text}
                return {"type": "document", "source": source}
    where = f" at {p.url}" if p.url else ""
    media = f" ({p.media_type})" if p.media_type else ""
    return {
        "type": "text",
        "text": f"[{p.kind}{media}{where} omitted: the Anthropic API does not accept it]",
    }


def _base64_source(data: bytes, media_type: str) -> dict[str, str]:
    return {"type": "base64", "media_type": media_type, "data": base64.b64encode(data).decode()}


# --------------------------------------------------------------------------- output schema

_SUPPORTED_FORMATS = frozenset(
    ("date-time", "time", "date", "duration", "email", "hostname", "uri", "ipv4", "ipv6", "uuid")
)
_UNSUPPORTED_KEYS = frozenset(
    [
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minLength",
        "maxLength",
        "pattern",
        "maxItems",
        "uniqueItems",
        "minProperties",
        "maxProperties",
        "patternProperties",
    ]
)
_SCHEMA_MAPS = ("properties", "$defs", "definitions")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SCHEMA_ONE = ("items", "not", "contains")


def strict_output_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The schema sent as `output_config.format`: what Anthropic's structured outputs accept."""
    out: dict[str, Any] = {}
    moved: list[str] = []
    for key, value in schema.items():
        if key in _SCHEMA_MAPS and isinstance(value, Mapping):
            out[key] = {
                k: strict_output_schema(v) if isinstance(v, Mapping) else v
                for k, v in value.items()
            }
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = [strict_output_schema(v) if isinstance(v, Mapping) else v for v in value]
        elif key in _SCHEMA_ONE and isinstance(value, Mapping):
            out[key] = strict_output_schema(value)
        elif key == "additionalProperties" and value is not False:
            moved.append(f"additionalProperties: {json.dumps(value)}")
        elif (
            key in _UNSUPPORTED_KEYS
            or (key == "format" and value not in _SUPPORTED_FORMATS)
            or (key == "minItems" and value not in (0, 1))
        ):
            moved.append(f"{key}: {value}")
        else:
            out[key] = value
    if out.get("type") == "object" or "properties" in out:
        out["additionalProperties"] = False
    if moved:
        note = "{" + ", ".join(moved) + "}"
        described = out.get("description")
        out["description"] = f"{described}\n\n{note}" if described else note
    return out


# --------------------------------------------------------------------------- responses
