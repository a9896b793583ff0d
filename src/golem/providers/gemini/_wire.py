"""Mapping between golem's model port and the Gemini `generateContent` wire format.

Requests: `build_request_body` turns a `ModelRequest` into the JSON body of
`models/{model}:generateContent` (and `:streamGenerateContent`). Responses:
`ResponseBuilder` folds one or more `GenerateContentResponse` objects (one for a plain
call, one per server-sent event for a stream) into deltas and a final `ModelResponse`;
`parse_response` is its one-shot form.

Thought signatures: a `thoughtSignature` on a `functionCall` part becomes
`ToolCall.signature`; one on a plain text part becomes a `ThinkingBlock` with empty
text and that signature; thought text parts (`thought: true`) become `ThinkingBlock`s.
All of them are sent back on later turns in the same places.
"""

from __future__ import annotations

import base64
import binascii
import json
import mimetypes
import re
import uuid
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from golem.messages import Message, Part, ThinkingBlock, ToolCall
from golem.model import Delta, FinishReason, ModelRequest, ModelResponse, ThinkingDelta
from golem.model import ToolCallDelta as _ToolCallDelta
from golem.usage import Usage

__all__ = [
    "DUMMY_SIGNATURE",
    "SYNTHETIC_ID_PREFIX",
    "ResponseBuilder",
    "build_request_body",
    "deep_merge",
    "finish_reason",
    "parse_response",
    "supports_json_output_with_tools",
    "usage_from_metadata",
]

SYNTHETIC_ID_PREFIX = "gemini_"
"""Prefix of the call IDs this adapter makes up for function calls Gemini sent without one.

Calls whose ID starts with it are sent back without an `id` (as Gemini produced them).
"""

DUMMY_SIGNATURE = base64.b64encode(b"skip_thought_signature_validator").decode("ascii")
"""The documented placeholder signature for a function call that has none of its own.

Gemini 3 rejects a model turn whose first function call carries no thought signature;
calls that came from another provider (or a scripted model) get this one instead.
"""

_FILTERED = frozenset(
    (
        "SAFETY",
        "RECITATION",
        "BLOCKLIST",
        "PROHIBITED_CONTENT",
        "SPII",
        "IMAGE_SAFETY",
        "IMAGE_PROHIBITED_CONTENT",
        "IMAGE_RECITATION",
    )
)

_PROMPTED_OUTPUT = (
    "Answer with a single JSON value that matches the JSON schema below, "
    "with no other text and no code fences.\nJSON schema: "
)

_GEMINI_VERSION = re.compile(r"gemini-(\d+)")
_ID_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


# --------------------------------------------------------------------------- request


def supports_json_output_with_tools(model: str) -> bool:
    """Whether `model` accepts a JSON response schema together with function declarations.

    Gemini 3 and later do; Gemini 2.x and earlier reject the combination with HTTP 400.
    """
    match = _GEMINI_VERSION.search(model.rsplit("/", 1)[-1])
    return match is not None and int(match.group(1)) >= 3


def build_request_body(
    request: ModelRequest,
    *,
    max_tokens: int | None = None,
    temperature: float | None = None,
    top_p: float | None = None,
    stop: Sequence[str] | None = None,
    thinking_budget: int | None = None,
    include_thoughts: bool = False,
    json_output_with_tools: bool = False,
    extra_body: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Build the JSON body of a `generateContent` request.

    Args:
        request: the conversation, tools and optional output schema.
        max_tokens, temperature, top_p, stop: `generationConfig` settings (omitted when None).
        thinking_budget, include_thoughts: `generationConfig.thinkingConfig`.
        json_output_with_tools: send `output_schema` as a native JSON response schema even
            when tools are declared (Gemini 3+). Otherwise, with tools present, the schema
            goes into the system instruction instead (older models reject the combination).
        extra_body: merged last, recursively (nested objects merge, other values replace).
    """
    system, contents = _contents(request.messages)
    body: dict[str, Any] = {"contents": contents}

    config: dict[str, Any] = {}
    if max_tokens is not None:
        config["maxOutputTokens"] = max_tokens
    if temperature is not None:
        config["temperature"] = temperature
    if top_p is not None:
        config["topP"] = top_p
    if stop:
        config["stopSequences"] = list(stop)
    thinking: dict[str, Any] = {}
    if thinking_budget is not None:
        thinking["thinkingBudget"] = thinking_budget
    if include_thoughts:
        thinking["includeThoughts"] = True
    if thinking:
        config["thinkingConfig"] = thinking
    if request.output_schema is not None:
        if request.tools and not json_output_with_tools:
            system.append(_PROMPTED_OUTPUT + _compact(request.output_schema))
        else:
            config["responseMimeType"] = "application/json"
            config["responseJsonSchema"] = request.output_schema

    if system:
        body["systemInstruction"] = {"role": "user", "parts": [{"text": t} for t in system]}
    if request.tools:
        declarations = []
        for spec in request.tools:
            decl: dict[str, Any] = {"name": spec.name, "description": spec.description}
            if spec.schema:
                decl["parametersJsonSchema"] = spec.schema
            declarations.append(decl)
        body["tools"] = [{"functionDeclarations": declarations}]
    if config:
        body["generationConfig"] = config
    if extra_body:
        deep_merge(body, extra_body)
    return body


def deep_merge(target: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """Merge `extra` into `target` in place: nested objects merge, other values replace."""
    for key, value in extra.items():
        current = target.get(key)
        if isinstance(current, dict) and isinstance(value, Mapping):
            deep_merge(current, value)
        else:
            target[key] = value
    return target


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def _contents(messages: Sequence[Message]) -> tuple[list[str], list[dict[str, Any]]]:
    """System texts and `contents` for a conversation.

    Consecutive tool messages become one user content of `functionResponse` parts; the
    images/documents those results carry follow in a second user content.
    """
    system: list[str] = []
    contents: list[dict[str, Any]] = []
    call_names: dict[str, str] = {}
    responses: list[dict[str, Any]] = []
    media: list[tuple[str, list[dict[str, Any]]]] = []

    def flush() -> None:
        if responses:
            contents.append({"role": "user", "parts": list(responses)})
        if media:
            parts: list[dict[str, Any]] = []
            for name, tool_parts in media:
                if len(media) > 1:
                    parts.append({"text": f'Attachments of the "{name}" result:'})
                parts.extend(tool_parts)
            contents.append({"role": "user", "parts": parts})
        responses.clear()
        media.clear()

    for m in messages:
        if m.role == "tool":
            name = m.tool_name or call_names.get(m.tool_call_id, "") or "unknown_tool"
            call: dict[str, Any] = {"name": name}
            if m.tool_call_id and not m.tool_call_id.startswith(SYNTHETIC_ID_PREFIX):
                call["id"] = m.tool_call_id
            call["response"] = {"error" if m.failed else "output": m.content}
            responses.append({"functionResponse": call})
            if m.parts:
                media.append((name, [_part(p) for p in m.parts]))
            continue
        flush()
        if m.role == "system":
            if m.content:
                system.append(m.content)
        elif m.role == "user":
            parts = [{"text": m.content}] if m.content else []
            parts.extend(_part(p) for p in m.parts)
            if parts:
                contents.append({"role": "user", "parts": parts})
        else:
            model_parts = _model_parts(m)
            for c in m.tool_calls:
                call_names[c.id] = c.name
            if model_parts:
                contents.append({"role": "model", "parts": model_parts})
    flush()
    return system, contents


def _model_parts(m: Message) -> list[dict[str, Any]]:
    """The parts of a `model` content for an assistant message, signatures in place."""
    parts: list[dict[str, Any]] = []
    text_signatures: list[str] = []
    for block in m.thinking:
        if block.text:
            # Signatures on thought text are not replayed: Gemini never puts them there,
            # and a block from another provider would carry a signature Gemini rejects.
            parts.append({"text": block.text, "thought": True})
        elif block.signature and not block.redacted:
            text_signatures.append(block.signature)
    text_part: dict[str, Any] | None = None
    if m.content or text_signatures:
        text_part = {"text": m.content}
        if text_signatures:
            text_part["thoughtSignature"] = text_signatures[0]
    if text_part is not None and m.content:
        parts.append(text_part)
    parts.extend(_part(p) for p in m.parts)
    for i, c in enumerate(m.tool_calls):
        call: dict[str, Any] = {"name": c.name, "args": _args_object(c.args)}
        if c.id and not c.id.startswith(SYNTHETIC_ID_PREFIX):
            call["id"] = c.id
        part: dict[str, Any] = {"functionCall": call}
        if c.signature:
            part["thoughtSignature"] = c.signature
        elif i == 0:
            part["thoughtSignature"] = DUMMY_SIGNATURE
        parts.append(part)
    if text_part is not None and not m.content:
        parts.append(text_part)  # a signature-only text part, as Gemini sends it
    return parts


def _args_object(args: str) -> dict[str, Any]:
    """The `args` object for raw argument text; text that is not a JSON object is wrapped."""
    try:
        value = json.loads(args, parse_constant=_reject_constant)
    except ValueError:
        return {"truncated_args": args}
    if isinstance(value, dict):
        return value
    return {"truncated_args": args}


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _part(p: Part) -> dict[str, Any]:
    """An `inlineData` or `fileData` part for an image/document/audio/video part."""
    if p.data is not None:
        return {
            "inlineData": {
                "mimeType": p.media_type or "application/octet-stream",
                "data": base64.b64encode(p.data).decode("ascii"),
            }
        }
    url = p.url or ""
    if url.startswith("data:"):
        inline = _data_url(url)
        if inline is not None:
            return {"inlineData": inline}
    file_data: dict[str, Any] = {"fileUri": url}
    mime = p.media_type or _guess_mime(url)
    if mime:
        file_data["mimeType"] = mime
    return {"fileData": file_data}


def _data_url(url: str) -> dict[str, Any] | None:
    """`inlineData` for a base64 `data:` URL, or None when it is not one."""
    header, sep, payload = url[5:].partition(",")
    if not sep or not header.endswith(";base64"):
        return None
    try:
        base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        return None
    return {"mimeType": header[: -len(";base64")] or "application/octet-stream", "data": payload}


def _guess_mime(url: str) -> str | None:
    path = urlsplit(url).path
    mime, _ = mimetypes.guess_type(path, strict=False)
    return mime


# --------------------------------------------------------------------------- response


def finish_reason(raw: str, has_tool_calls: bool) -> FinishReason:
    """Normalize a Gemini `finishReason` ("" when the response has none)."""
    if not raw:
        return ""
    if raw == "STOP":
        return "tool_call" if has_tool_calls else "stop"
    if raw == "MAX_TOKENS":
        return "length"
    if raw in _FILTERED:
        return "content_filter"
    return "other"


def usage_from_metadata(meta: Mapping[str, Any]) -> Usage:
    """Token usage from a `usageMetadata` object.

    Input is the prompt (cached tokens included) plus tool-use prompt tokens; output is
    the candidates plus the thoughts, so input + output equals `totalTokenCount`.
    """
    thoughts = _int(meta.get("thoughtsTokenCount"))
    return Usage(
        input_tokens=_int(meta.get("promptTokenCount")) + _int(meta.get("toolUsePromptTokenCount")),
        output_tokens=_int(meta.get("candidatesTokenCount")) + thoughts,
        cache_read_tokens=_int(meta.get("cachedContentTokenCount")),
        reasoning_tokens=thoughts,
    )


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


class _Block:
    __slots__ = ("closed", "index", "signature", "text")

    def __init__(self, index: int, text: str, signature: str) -> None:
        self.index = index
        self.text = [text] if text else []
        self.signature = signature
        self.closed = bool(signature)


class ResponseBuilder:
    """Folds `GenerateContentResponse` objects into deltas and one `ModelResponse`.

    Feed a plain response once, or every event of a stream in order; parts are read
    from the first candidate and appended in arrival order, usage and finish reason
    are taken from the latest object that has them (streamed usage is cumulative).

    Args:
        deltas: build the `Delta`s `add` returns (a plain response needs none).
    """

    def __init__(self, *, deltas: bool = True) -> None:
        self._deltas = deltas
        self._text: list[str] = []
        self._blocks: list[_Block] = []
        self._open: _Block | None = None
        self._calls: list[ToolCall] = []
        self._usage = Usage()
        self._finish = ""
        self._blocked = False
        self._model_name = ""
        self._response_id = ""

    @property
    def complete(self) -> bool:
        """Whether a finish reason (or a blocked prompt) has been seen."""
        return bool(self._finish) or self._blocked

    def add(self, chunk: Mapping[str, Any]) -> list[Delta]:
        """Fold one response object in; return the deltas it adds, in part order."""
        model_version = chunk.get("modelVersion")
        if isinstance(model_version, str) and model_version:
            self._model_name = model_version
        response_id = chunk.get("responseId")
        if isinstance(response_id, str) and response_id and not self._response_id:
            self._response_id = response_id
        meta = chunk.get("usageMetadata")
        if isinstance(meta, dict):
            self._usage = usage_from_metadata(meta)
        candidates = chunk.get("candidates")
        if not isinstance(candidates, list) or not candidates:
            feedback = chunk.get("promptFeedback")
            if isinstance(feedback, dict) and feedback.get("blockReason"):
                self._blocked = True
            return []
        candidate = candidates[0]
        if not isinstance(candidate, dict):
            return []
        deltas: list[Delta] = []
        content = candidate.get("content")
        parts = content.get("parts") if isinstance(content, dict) else None
        if isinstance(parts, list):
            for part in parts:
                if isinstance(part, dict):
                    delta = self._add_part(part)
                    if delta is not None:
                        deltas.append(delta)
        reason = candidate.get("finishReason")
        if isinstance(reason, str) and reason:
            self._finish = reason
        return deltas

    def _add_part(self, part: dict[str, Any]) -> Delta | None:
        signature = part.get("thoughtSignature")
        if not isinstance(signature, str):
            signature = ""
        text = part.get("text")
        if isinstance(text, str):
            if part.get("thought") is True:
                return self._add_thought(text, signature)
            self._open = None
            if not text and not signature:
                return None
            self._text.append(text)
            thinking: list[ThinkingDelta] = []
            if signature:
                block = _Block(len(self._blocks), "", signature)
                self._blocks.append(block)
                if self._deltas:
                    thinking.append(ThinkingDelta(index=block.index, signature=signature))
            return Delta(content=text, thinking=thinking) if self._deltas else None
        self._open = None
        call = part.get("functionCall")
        if not isinstance(call, dict):
            return None  # executable code, server-side tool steps, media: not golem's to keep
        index = len(self._calls)
        call_id = _str(call.get("id")) or self._synthetic_id(index)
        name = _str(call.get("name"))
        args = call.get("args")
        args_text = "{}" if args is None or args == {} else _compact_args(args)
        self._calls.append(ToolCall(id=call_id, name=name, args=args_text, signature=signature))
        if not self._deltas:
            return None
        return Delta(
            tool_calls=[
                _ToolCallDelta(
                    index=index, id=call_id, name=name, args_fragment=args_text, signature=signature
                )
            ]
        )

    def _add_thought(self, text: str, signature: str) -> Delta | None:
        if not text and not signature:
            return None
        block = self._open
        if block is None or block.closed:
            block = _Block(len(self._blocks), text, signature)
            self._blocks.append(block)
        else:
            if text:
                block.text.append(text)
            if signature:
                block.signature = signature
                block.closed = True
        self._open = block
        if not self._deltas:
            return None
        return Delta(thinking=[ThinkingDelta(index=block.index, text=text, signature=signature)])

    def _synthetic_id(self, index: int) -> str:
        base = _ID_UNSAFE.sub("", self._response_id)[:24] or uuid.uuid4().hex[:16]
        self._response_id = self._response_id or base
        return f"{SYNTHETIC_ID_PREFIX}{base}_{index}"

    def response(self) -> ModelResponse:
        """The response folded so far."""
        message = Message(
            role="assistant",
            content="".join(self._text),
            tool_calls=list(self._calls),
            thinking=[
                ThinkingBlock(text="".join(b.text), signature=b.signature) for b in self._blocks
            ],
        )
        return ModelResponse(
            message=message,
            usage=self._usage,
            finish_reason=(
                "content_filter"
                if self._blocked and not self._finish
                else finish_reason(self._finish, bool(self._calls))
            ),
            model_name=self._model_name,
        )


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


_ARGS_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def _compact_args(args: Any) -> str:
    return _ARGS_ENCODER.encode(args)


def parse_response(body: Mapping[str, Any]) -> ModelResponse:
    """Parse a `generateContent` response body into a `ModelResponse`."""
    builder = ResponseBuilder(deltas=False)
    builder.add(body)
    return builder.response()
