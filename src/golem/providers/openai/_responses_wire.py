"""The Responses API wire format (`POST /v1/responses`): request bodies and response parsing."""

from __future__ import annotations

import hashlib
import mimetypes
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from golem.errors import ProviderError, ResponseFormatError
from golem.messages import Citation, Message, Part, ServerToolBlock, ThinkingBlock, ToolCall
from golem.model import FinishReason, ModelRequest, ModelResponse, ToolSpec
from golem.providers._answers import (
    RESPONSES_IMAGE_PREFIX,
    RESPONSES_REASONING_PREFIX,
    TextRuns,
    in_order,
    named_calls,
    own_blocks,
    unique_call_id,
    with_block,
)
from golem.providers._jsonio import (
    args_json,
    base64_bytes,
    given,
    json_text,
    raw_json,
    text_of,
    usage_of,
)
from golem.providers.openai._errors import error_from_payload
from golem.providers.openai._schemas import strict_compatible
from golem.providers.openai._wire import (
    Options,
    data_url,
    json_schema_format,
    media_message,
    synthesize_call_id,
    tool_choice_of,
    user_content,
    wire_args,
)

__all__ = [
    "BLOCKS",
    "PROVIDER",
    "ResponsesOptions",
    "build_responses_body",
    "function_arguments",
    "function_call_id",
    "parse_reasoning_signature",
    "parse_responses_response",
    "reasoning_signature",
]

PROVIDER = "openai"
BLOCKS = "openai-responses"
"""The `provider` of the citations and built-in tool items this API returns."""


@dataclass(frozen=True, slots=True)
class ResponsesOptions(Options):
    """What an `OpenAIResponsesModel` adds to every request body (beside `Options`)."""

    reasoning_summary: str | None = None
    """Sent as `reasoning.summary` ("auto", "concise", "detailed"): summaries become thinking text."""
    encrypted_reasoning: bool = False
    """Ask for `reasoning.encrypted_content`, so reasoning can be replayed without `store`."""
    store: bool = False
    """Sent as `store`: whether OpenAI keeps the response (golem does not rely on it)."""


# --------------------------------------------------------------------------- reasoning items


def reasoning_signature(item_id: str, encrypted: str) -> str:
    """The `ThinkingBlock.signature` of a reasoning item: a prefix, its ID, its encrypted content."""
    return f"{RESPONSES_REASONING_PREFIX}{item_id}/{encrypted}"


def parse_reasoning_signature(signature: str) -> tuple[str, str] | None:
    """`(item ID, encrypted content)` of a signature made by `reasoning_signature`, else None."""
    if not signature.startswith(RESPONSES_REASONING_PREFIX):
        return None
    item_id, sep, encrypted = signature[len(RESPONSES_REASONING_PREFIX) :].partition("/")
    if not sep or not item_id:
        return None
    return item_id, encrypted


# --------------------------------------------------------------------------- request


def build_responses_body(
    request: ModelRequest, options: ResponsesOptions, *, stream: bool = False
) -> dict[str, Any]:
    """The JSON body of `POST /responses` for `request`."""
    body: dict[str, Any] = {
        "model": options.model,
        "input": input_items(request.messages, store=options.store),
    }
    system = [m.content for m in request.messages if m.role == "system" and m.content]
    if system:
        body["instructions"] = "\n\n".join(system)
    body["stream"] = stream
    body["store"] = options.store
    if options.encrypted_reasoning:
        body["include"] = ["reasoning.encrypted_content"]
    if request.tools:
        body["tools"] = [_tool(t, options.strict) for t in request.tools]
        body["tool_choice"] = tool_choice_of(request.tool_choice, nested=False)
    if request.output_schema is not None:
        fmt = json_schema_format(request.output_schema, options.strict)
        body["text"] = {"format": {"type": "json_schema", **fmt}}
    reasoning: dict[str, Any] = {}
    if options.reasoning_effort is not None:
        reasoning["effort"] = options.reasoning_effort
    if options.reasoning_summary is not None:
        reasoning["summary"] = options.reasoning_summary
    if reasoning:
        body["reasoning"] = reasoning
    body |= given(
        max_output_tokens=options.max_tokens, temperature=options.temperature, top_p=options.top_p
    )
    if options.extra_body:
        extra = dict(options.extra_body)
        extra_tools = extra.get("tools")
        if isinstance(extra_tools, list) and "tools" in body:
            # built-in tools (web_search, file_search, ...) join the functions
            extra["tools"] = [*body["tools"], *extra_tools]
        body.update(extra)
    return body


def _tool(spec: ToolSpec, strict: bool) -> dict[str, Any]:
    # the API assumes strict when the field is missing: always say which
    return {
        "type": "function",
        "name": spec.name,
        "description": spec.description,
        "parameters": spec.schema,
        "strict": strict and strict_compatible(spec.schema),
    }


def input_items(messages: Sequence[Message], *, store: bool = False) -> list[dict[str, Any]]:
    """The `input` items of a conversation (system messages excluded: they are `instructions`)."""
    items: list[dict[str, Any]] = []
    media: list[Part] = []
    for m in messages:
        if media and m.role != "tool":
            items.append(media_message(media, _part, "input_text"))
            media = []
        if m.role == "user":
            items.append({"role": "user", "content": user_content(m, _part, "input_text")})
        elif m.role == "assistant":
            _assistant_items(m, items, store)
            # assistant output takes text only: the media follow it (but for the images of
            # image generation calls that went back themselves, with `store`)
            media = [p for p in m.parts if not (store and _sent_image(m, p))]
        elif m.role == "tool":
            output = user_content(m, _part, "input_text")
            items.append(
                {"type": "function_call_output", "call_id": m.tool_call_id, "output": output}
            )
    if media:
        items.append(media_message(media, _part, "input_text"))
    if not any(i.get("role") == "user" for i in items):
        items.insert(0, {"role": "user", "content": ""})
    return items


def _sent_image(m: Message, p: Part) -> bool:
    """Whether `p` is the image of one of `m`'s image generation calls (sent back with `store`)."""
    if not p.signature.startswith(RESPONSES_IMAGE_PREFIX):
        return False
    call_id = p.signature[len(RESPONSES_IMAGE_PREFIX) :]
    return any(
        b.provider == BLOCKS and b.type == "image_generation_call" and b.id == call_id
        for b in m.server_tools
    )


def _assistant_items(m: Message, items: list[dict[str, Any]], store: bool) -> None:
    """Items of an assistant message: reasoning, text, built-in tool items, function calls."""
    server = own_blocks(
        m,
        BLOCKS,
        lambda kind: (store or kind in _SELF_CONTAINED or kind == PHASE) and kind != MODERATION,
    )
    phase = ""
    for part in in_order(m, server):
        if isinstance(part, ThinkingBlock):
            reasoning = _reasoning_item(part)
            if reasoning is not None:
                items.append(reasoning)
        elif isinstance(part, slice):
            text: dict[str, Any] = {"role": "assistant", "content": m.content[part]}
            if phase:
                text["phase"] = phase
            items.append(text)
        elif part.get("type") == "message":  # a phase mark: the text after it has that phase
            phase = text_of(part.get("phase"))
        else:
            items.append(part)
    for c in m.tool_calls:
        items.append(
            {
                "type": "function_call",
                "call_id": c.id,
                "name": c.name,
                "arguments": wire_args(c.args),
            }
        )


_SELF_CONTAINED = frozenset(("compaction",))
"""Built-in items whose content travels with them, so a stateless request may send them."""


def _reasoning_item(t: ThinkingBlock) -> dict[str, Any] | None:
    parsed = parse_reasoning_signature(t.signature)
    if parsed is None:
        return None  # reasoning from another provider cannot be replayed here
    item_id, encrypted = parsed
    item: dict[str, Any] = {
        "type": "reasoning",
        "id": item_id,
        "summary": [{"type": "summary_text", "text": t.text}] if t.text else [],
    }
    if encrypted:
        item["encrypted_content"] = encrypted
    return item


def _part(p: Part) -> dict[str, Any]:
    """An `input_image` / `input_file` item for a part; what the API cannot take becomes a note."""
    problem = p.problem()
    if problem is not None:
        return {"type": "input_text", "text": f"[{p.kind} not attached: {problem}]"}
    if p.kind == "text":
        return {"type": "input_text", "text": p.text}
    if p.kind == "image":
        return {"type": "input_image", "image_url": p.url or data_url(p), "detail": "auto"}
    if p.kind == "document":
        if p.url:
            return {"type": "input_file", "file_url": p.url}
        media_type = (p.media_type or "").split(";", 1)[0].strip()
        ext = mimetypes.guess_extension(media_type) or ".bin"
        assert p.data is not None
        name = hashlib.sha1(p.data, usedforsecurity=False).hexdigest()[:12]
        return {"type": "input_file", "file_data": data_url(p), "filename": f"{name}{ext}"}
    ref = p.url or p.media_type or "content"
    return {
        "type": "input_text",
        "text": f"[{p.kind} {ref} not attached: the Responses API does not take {p.kind} input]",
    }


# --------------------------------------------------------------------------- response


RESPONSES_USAGE = {
    "input_tokens": ("input_tokens",),
    "output_tokens": ("output_tokens",),
    "cache_read_tokens": ("input_tokens_details.cached_tokens",),
    "reasoning_tokens": ("output_tokens_details.reasoning_tokens",),
}
"""Where a Responses `usage` object keeps each count; `input_tokens` includes cached ones."""


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def reasoning_block(item: Mapping[str, Any]) -> ThinkingBlock:
    """The `ThinkingBlock` of a `reasoning` output item (summary text, or raw reasoning text)."""
    texts = [text_of(s.get("text")) for s in _list(item.get("summary")) if isinstance(s, Mapping)]
    if not any(texts):
        texts = [
            text_of(c.get("text")) for c in _list(item.get("content")) if isinstance(c, Mapping)
        ]
    signature = ""
    item_id = text_of(item.get("id"))
    if item_id:
        signature = reasoning_signature(item_id, text_of(item.get("encrypted_content")))
    return ThinkingBlock(text="\n\n".join(t for t in texts if t), signature=signature)


def function_arguments(value: Any) -> str:
    """A `function_call` item's `arguments` as text: the API's string as it is, an object (a
    compatible server's) as JSON, null as ""."""
    if isinstance(value, str):
        return value
    return "" if value is None else args_json(value)


def function_call_id(item: Mapping[str, Any], response_id: str, index: int) -> str:
    """The call ID of a `function_call` item: its `call_id` (or item `id`); for an item
    with neither, one derived from the response ID and the item's `output_index`, so a
    stream's deltas and its final response agree on it."""
    call_id = text_of(item.get("call_id")) or text_of(item.get("id"))
    if call_id:
        return call_id
    if not response_id:
        return synthesize_call_id()
    digest = hashlib.sha256(f"{response_id}/{index}".encode()).hexdigest()[:24]
    return f"call_{digest}"


def message_from_output(output: Sequence[Any], response_id: str = "") -> tuple[Message, bool]:
    """The assistant message of a response's `output` items, and whether it was a refusal."""
    seen: set[str] = set()
    runs = TextRuns()
    thinking: list[ThinkingBlock] = []
    calls: list[ToolCall] = []
    citations: list[Citation] = []
    server: list[ServerToolBlock] = []
    parts: list[Part] = []
    refused = False
    for index, item in enumerate(output):
        if not isinstance(item, Mapping):
            continue
        kind = item.get("type")
        if kind == "message":
            mark = _phase_mark(item, runs.length, len(thinking))
            if mark is not None:
                server.append(mark)
            for part in _list(item.get("content")):
                if not isinstance(part, Mapping):
                    continue
                piece = text_of(part.get("text")) or text_of(part.get("refusal"))
                refused = refused or part.get("type") == "refusal"
                runs.add(piece)
                annotations = part.get("annotations")
                if isinstance(annotations, list):
                    start = runs.length - len(piece)
                    citations.extend(
                        _citation(a, start, len(piece))
                        for a in annotations
                        if isinstance(a, Mapping)
                    )
        elif kind == "reasoning":
            thinking.append(reasoning_block(item))
        elif kind == "function_call":
            calls.append(
                ToolCall(
                    id=unique_call_id(function_call_id(item, response_id, index), seen),
                    name=text_of(item.get("name")),
                    args=function_arguments(item.get("arguments")),
                )
            )
        else:
            runs.separated = True
            image = _generated_image(item) if kind == "image_generation_call" else None
            if image is not None:
                parts.append(image)
            server.append(_builtin_block(item, runs.length, len(thinking)))
    message = Message(
        role="assistant",
        content="".join(runs.parts),
        tool_calls=named_calls(PROVIDER, calls),
        thinking=thinking,
        citations=citations,
        server_tools=server,
        parts=parts,
    )
    return message, refused


PHASE = "message"
"""The `ServerToolBlock.type` that marks where a message item with a `phase` starts: its
`name` is the phase ("commentary", "final_answer"), sent back on the text that follows."""

MODERATION = "moderation"
"""The `ServerToolBlock.type` of a response's `moderation` results (kept, never sent back)."""


def _phase_mark(item: Mapping[str, Any], at: int, thinking: int) -> ServerToolBlock | None:
    """The mark of a message item's `phase` (the item without its text, which is `content`);
    None when it has no phase or no text."""
    phase = text_of(item.get("phase"))
    content = [c for c in _list(item.get("content")) if isinstance(c, Mapping)]
    if not phase or not any(text_of(c.get("text")) for c in content):
        return None
    return ServerToolBlock(
        provider=BLOCKS,
        type=PHASE,
        id=text_of(item.get("id")),
        name=phase,
        raw=raw_json({"type": "message", "id": text_of(item.get("id")), "phase": phase}),
        at=at,
        thinking_before=thinking,
    )


def _builtin_block(item: Mapping[str, Any], at: int, thinking: int) -> ServerToolBlock:
    """A built-in tool's item (web search, code interpreter, ...), kept where it sat."""
    kind = text_of(item.get("type"))
    return ServerToolBlock(
        provider=BLOCKS,
        type=kind,
        id=text_of(item.get("id")),
        name=text_of(item.get("name")) or kind.removesuffix("_call"),
        raw=raw_json(dict(item)),
        at=at,
        thinking_before=thinking,
    )


def _generated_image(item: Mapping[str, Any]) -> Part | None:
    """The image an `image_generation_call` made (base64 `result`), None when it has none."""
    result = item.get("result")
    if not isinstance(result, str) or not result:
        return None
    data = base64_bytes(result)
    if data is None:
        return None
    media = text_of(item.get("output_format")).lower() or "png"
    return Part(
        kind="image",
        data=data,
        media_type=f"image/{media}",
        signature=RESPONSES_IMAGE_PREFIX + text_of(item.get("id")),
    )


def _with_moderation(message: Message, moderation: Any) -> Message:
    """`message` with the response's `moderation` results kept as a block at its end."""
    if moderation is None or moderation == {}:
        return message
    block_id = text_of(moderation.get("id")) if isinstance(moderation, Mapping) else ""
    return with_block(message, BLOCKS, MODERATION, moderation, id=block_id, name=MODERATION)


def _citation(a: Mapping[str, Any], offset: int, length: int) -> Citation:
    """An annotation of a text part that starts at `offset` in the message's text."""
    start, end = a.get("start_index"), a.get("end_index")
    if not isinstance(start, int) or not isinstance(end, int):
        start = end = a.get("index")
    start = min(max(start, 0), length) if isinstance(start, int) else 0
    end = min(max(end, start), length) if isinstance(end, int) else start
    return Citation(
        start=offset + start,
        end=offset + end,
        url=text_of(a.get("url")),
        title=text_of(a.get("title")) or text_of(a.get("filename")),
        provider=BLOCKS,
        raw=raw_json(dict(a)),
    )


_FAILED = "the response failed and carried no error object"

_INCOMPLETE: dict[str, FinishReason] = {
    "max_output_tokens": "length",
    "content_filter": "content_filter",
}


def finish_of(body: Mapping[str, Any], message: Message, refused: bool) -> FinishReason:
    """The finish reason of a response from its `status` and `incomplete_details`."""
    status = body.get("status")
    if status == "incomplete":
        details = body.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, Mapping) else None
        return _INCOMPLETE.get(text_of(reason), "other")
    if status != "completed":
        return ""
    if refused:
        return "content_filter"
    return "tool_call" if message.tool_calls else "stop"


def parse_responses_response(body: Mapping[str, Any]) -> ModelResponse:
    """Map a `response` object (a body, or the one a stream's last event carries)."""
    error = body.get("error")
    status = body.get("status")
    failure: ProviderError | None = None
    if isinstance(error, Mapping) and (status == "failed" or "output" not in body):
        failure = error_from_payload({"error": dict(error)})
    elif status == "failed":
        failure = error_from_payload({"error": {"code": "server_error", "message": _FAILED}})
    elif status == "cancelled":
        failure = ProviderError(
            "openai response was cancelled before it completed", provider=PROVIDER
        )
    if failure is not None:
        if isinstance(body.get("usage"), Mapping):
            failure.usage = usage_of(body["usage"], RESPONSES_USAGE)
        raise failure
    if status in ("queued", "in_progress"):
        raise ResponseFormatError(
            f"openai response is not finished (status {status!r}): golem does not poll "
            "background responses",
            provider=PROVIDER,
        )
    output = body.get("output")
    if not isinstance(output, list):
        raise ResponseFormatError(
            f"openai response has no output list: {json_text(body)[:200]}", provider=PROVIDER
        )
    message, refused = message_from_output(output, text_of(body.get("id")))
    finish = finish_of(body, message, refused)
    if finish == "other" and not (message.content or message.tool_calls or message.server_tools):
        details = body.get("incomplete_details")
        error = ResponseFormatError(
            f"openai response is incomplete for a reason golem does not know and holds no "
            f"answer: {json_text(details)[:200]}",
            provider=PROVIDER,
            retryable=True,
        )
        error.usage = usage_of(body.get("usage"), RESPONSES_USAGE)
        raise error
    return ModelResponse(
        message=_with_moderation(message, body.get("moderation")),
        usage=usage_of(body.get("usage"), RESPONSES_USAGE),
        finish_reason=finish,
        model_name=text_of(body.get("model")),
    )
