"""Responses: Gemini `GenerateContentResponse` objects as golem deltas and `ModelResponse`s."""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from typing import Any

from golem.errors import (
    BadRequest,
    ResponseFormatError,
)
from golem.messages import Citation, Message, Part, ServerToolBlock, ThinkingBlock, ToolCall
from golem.model import Delta, FinishReason, ModelResponse, ThinkingDelta
from golem.model import ToolCallDelta as _ToolCallDelta
from golem.providers._answers import (
    TextRuns,
    finish_of,
    named_calls,
    unique_call_id,
    with_block,
)
from golem.providers._jsonio import (
    args_json,
    base64_bytes,
    int_of,
    json_text,
    object_text,
    raw_json,
    text_of,
    usage_of,
)
from golem.providers.gemini._errors import error_from_payload
from golem.providers.gemini._wire import SERVER_PARTS, SYNTHETIC_ID_PREFIX
from golem.usage import Usage

__all__ = [
    "PROVIDER",
    "ResponseBuilder",
    "finish_reason",
    "parse_response",
    "usage_from_metadata",
]

PROVIDER = "gemini"
_METADATA = ("groundingMetadata", "urlContextMetadata")
_METADATA_KEYS = frozenset(
    ("thought", "thoughtSignature", "partMetadata", "videoMetadata", "mediaResolution")
)
"""Keys of a part that describe it rather than hold its content."""


_FILTERED = frozenset(
    [
        "SAFETY",
        "RECITATION",
        "BLOCKLIST",
        "PROHIBITED_CONTENT",
        "SPII",
        "IMAGE_SAFETY",
        "IMAGE_PROHIBITED_CONTENT",
        "IMAGE_RECITATION",
        "LANGUAGE",
    ]
)

_CALL_FAILED = frozenset(("MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL", "TOO_MANY_TOOL_CALLS"))
"""Finish reasons that say the model's answer (its function call) could not be read: the
answer is lost, and sampling again usually succeeds."""
_NOT_ANSWERS = frozenset(("STOP", "MAX_TOKENS", *_FILTERED, *_CALL_FAILED))
"""Finish reasons that say why an answer ended; any other (`OTHER`, `IMAGE_OTHER`,
`NO_IMAGE`, `FINISH_REASON_UNSPECIFIED`, a newer API's) on an answer that holds nothing
says only that there is no answer."""
_REQUEST_FAILED = frozenset(("MISSING_THOUGHT_SIGNATURE",))
"""Finish reasons that blame the request: sending it again fails the same way."""

_ID_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


_FINISH: dict[str, FinishReason] = {
    "STOP": "stop",
    "MAX_TOKENS": "length",
    **dict.fromkeys(_FILTERED, "content_filter"),
}


def finish_reason(raw: str, has_tool_calls: bool) -> FinishReason:
    """Normalize a Gemini `finishReason` ("" when the response has none)."""
    finish = finish_of(_FINISH, raw)
    return "tool_call" if finish == "stop" and has_tool_calls else finish


_USAGE = {
    "input_tokens": ("promptTokenCount", "toolUsePromptTokenCount"),
    "output_tokens": ("candidatesTokenCount", "thoughtsTokenCount"),
    "cache_read_tokens": ("cachedContentTokenCount",),
    "reasoning_tokens": ("thoughtsTokenCount",),
}


def usage_from_metadata(meta: Mapping[str, Any]) -> Usage:
    """Token usage from a `usageMetadata` object."""
    return usage_of(meta, _USAGE)


class _Block:
    __slots__ = ("closed", "index", "signature", "text")

    def __init__(self, index: int, text: str, signature: str) -> None:
        self.index = index
        self.text = [text] if text else []
        self.signature = signature
        self.closed = bool(signature)


class ResponseBuilder:
    """Folds `GenerateContentResponse` objects into deltas and one `ModelResponse`."""

    def __init__(self, *, deltas: bool = True) -> None:
        self._deltas = deltas
        self._runs = TextRuns()
        self._blocks: list[_Block] = []
        self._open: _Block | None = None
        self._calls: list[ToolCall] = []
        self._parts: list[Part] = []
        """Media the model produced (`inlineData`, `fileData`), in arrival order."""
        self._ids: set[str] = set()
        self._usage: Mapping[str, Any] = {}
        """The latest `usageMetadata` (cumulative when streamed); mapped once, at the end."""
        self._finish = ""
        self._finish_message = ""
        self._candidate = False
        """Whether any object carried a candidate (a plain response without one is unreadable)."""
        self._blocked = False
        self._model_name = ""
        self._response_id = ""
        self._server: list[ServerToolBlock] = []
        self._metadata: dict[str, Mapping[str, Any]] = {}
        """The latest `groundingMetadata` / `urlContextMetadata` of the candidate."""

    @property
    def has_candidate(self) -> bool:
        """Whether any object folded in carried a candidate."""
        return self._candidate

    @property
    def empty(self) -> bool:
        """Whether nothing of an answer came: no text, call, media or server-side part."""
        return not (self._runs.parts or self._calls or self._parts or self._server)

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
            self._usage = meta
        candidates = chunk.get("candidates")
        if not isinstance(candidates, list) or not candidates:
            feedback = chunk.get("promptFeedback")
            if isinstance(feedback, dict) and feedback.get("blockReason"):
                self._blocked = True
            return []
        candidate = candidates[0]
        if not isinstance(candidate, dict) or candidate.get("index"):
            # several candidates (`candidateCount`), in any order, a stream event carrying
            # some of them: only the first (index 0, left out as proto3 JSON leaves zeros)
            candidate = _first_candidate(candidates)
            if candidate is None:
                return []
        self._candidate = True
        deltas: list[Delta] = []
        content = candidate.get("content")
        parts = content.get("parts") if isinstance(content, dict) else None
        if isinstance(parts, list):
            for part in parts:
                if isinstance(part, dict):
                    delta = self._add_part(part)
                    if delta is not None:
                        deltas.append(delta)
        for key in _METADATA:
            metadata = candidate.get(key)
            if isinstance(metadata, dict) and metadata:
                self._metadata[key] = metadata
        reason = candidate.get("finishReason")
        if isinstance(reason, str) and reason:
            self._finish = reason
            message = candidate.get("finishMessage")
            if isinstance(message, str):
                self._finish_message = message
        return deltas

    def _add_part(self, part: dict[str, Any]) -> Delta | None:
        signature = text_of(part.get("thoughtSignature"))
        text = part.get("text")
        if text is None and signature and part.keys() <= _METADATA_KEYS:
            text = ""  # a signature on an empty text part, its empty text left out (proto3 JSON)
        if isinstance(text, str):
            if part.get("thought") is True:
                return self._add_thought(text, signature)
            return self._add_text(text, signature)
        self._open = None
        for key, name in SERVER_PARTS.items():
            inner = part.get(key)
            if isinstance(inner, dict):
                name = name or text_of(inner.get("toolType")).lower()
                self._keep(key, part, id=text_of(inner.get("id")), name=name)
                return None
        call = part.get("functionCall")
        if not isinstance(call, dict):
            media = part.get("inlineData") or part.get("fileData")
            if isinstance(media, dict):
                if part.get("thought") is not True:  # a thought image is an interim draft
                    found = media_part(media, signature)
                    if found is not None:
                        self._parts.append(found)
                        self._runs.separated = True
                return None
            unknown = next((k for k in part if k not in _METADATA_KEYS), None)
            if unknown is not None:
                # a kind of part golem does not know (a newer API's, a functionResponse in an
                # answer): kept where it sat, as the provider sent it; never sent back
                self._keep(unknown, part)
            return None
        if "partialArgs" in call or call.get("willContinue") is True:
            raise ResponseFormatError(
                "gemini streamed a function call's arguments in parts "
                "(toolConfig.functionCallingConfig.streamFunctionCallArguments), which golem "
                "does not assemble: leave that setting off",
                provider=PROVIDER,
            )
        index = len(self._calls)
        call_id = unique_call_id(text_of(call.get("id")) or self._synthetic_id(index), self._ids)
        name = text_of(call.get("name"))
        args = call.get("args")
        args_text = "{}" if args is None or args == {} else _compact_args(args)
        self._calls.append(ToolCall(id=call_id, name=name, args=args_text, signature=signature))
        if not self._deltas:
            return None
        delta = _ToolCallDelta(
            index, id=call_id, name=name, args_fragment=args_text, signature=signature
        )
        return Delta(tool_calls=[delta])

    def _keep(self, kind: str, part: dict[str, Any], **names: str) -> None:
        """Keep `part` as a server-side block where it sat (it separates text runs)."""
        self._runs.separated = True
        at, thinking = self._runs.length, len(self._blocks)
        raw = raw_json(part)
        self._server.append(
            ServerToolBlock(PROVIDER, kind, raw=raw, at=at, thinking_before=thinking, **names)
        )

    def _add_text(self, text: str, signature: str) -> Delta | None:
        """A text part of the answer (a signature on it kept as a signature-only block)."""
        self._open = None
        if not text and not signature:
            return None
        text = self._runs.add(text)
        thinking: list[ThinkingDelta] = []
        if signature:
            block = _Block(len(self._blocks), "", signature)
            self._blocks.append(block)
            if self._deltas:
                thinking.append(ThinkingDelta(index=block.index, signature=signature))
        return Delta(content=text, thinking=thinking) if self._deltas else None

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

    def usage(self) -> Usage | None:
        """The usage reported so far, None when no event reported any."""
        return usage_from_metadata(self._usage) if self._usage else None

    def response(self) -> ModelResponse:
        """The response folded so far."""
        if not self._calls and (
            self._finish in _CALL_FAILED | _REQUEST_FAILED
            or (self._finish and self._finish not in _NOT_ANSWERS and self.empty)
        ):
            detail = f": {self._finish_message}" if self._finish_message else ""
            if self._finish in _REQUEST_FAILED:
                raise BadRequest(
                    f"gemini rejected the conversation ({self._finish}){detail}", provider=PROVIDER
                )
            error = ResponseFormatError(
                f"gemini could not produce a readable answer ({self._finish}){detail}",
                provider=PROVIDER,
                retryable=True,
            )
            error.usage = self.usage()
            raise error
        content = "".join(self._runs.parts)
        grounding = self._metadata.get("groundingMetadata")
        message = Message(
            role="assistant",
            content=content,
            parts=list(self._parts),
            tool_calls=named_calls(PROVIDER, list(self._calls)),
            thinking=[
                ThinkingBlock(text="".join(b.text), signature=b.signature) for b in self._blocks
            ],
            citations=[] if grounding is None else grounding_citations(grounding, content),
            server_tools=list(self._server),
        )
        for key in _METADATA:
            if key in self._metadata:
                message = with_block(message, PROVIDER, key, self._metadata[key])
        return ModelResponse(
            message=message,
            usage=usage_from_metadata(self._usage),
            finish_reason=(
                "content_filter"
                if self._blocked and not self._finish
                else finish_reason(self._finish, bool(self._calls))
            ),
            model_name=self._model_name,
        )


def _first_candidate(candidates: list[Any]) -> dict[str, Any] | None:
    """The candidate of index 0 among `candidates` (an index that is no integer counts as
    0), None when they hold no such object."""
    for candidate in candidates:
        if isinstance(candidate, dict):
            index = candidate.get("index", 0)
            if index == 0 or not isinstance(index, int):
                return candidate
    return None


def media_part(media: Mapping[str, Any], signature: str = "") -> Part | None:
    """The `Part` for an `inlineData` (base64 bytes) or `fileData` (a URI) object of an
    answer, or None when it holds nothing (empty data, no URI); its kind follows the MIME
    type (image, audio, video, else document)."""
    mime = text_of(media.get("mimeType"))
    top = mime.partition("/")[0].lower()
    kind = top if top in ("image", "audio", "video") else "document"
    uri = media.get("fileUri")
    if isinstance(uri, str) and uri:
        return Part(kind, url=uri, media_type=mime or None, signature=signature)
    data = media.get("data")
    if data is None or data == "":
        return None
    raw = _base64(data) if isinstance(data, str) else None
    if raw is None:
        raise ResponseFormatError(
            f"gemini answered with {kind} data ({mime or 'no MIME type'}) that is not base64",
            provider=PROVIDER,
        )
    return Part(kind, data=raw, media_type=mime or _OCTETS, signature=signature)


def _base64(text: str) -> bytes | None:
    """Standard or URL-safe base64 (whitespace ignored, padding optional), or None."""
    text = "".join(text.split())
    text += "=" * (-len(text) % 4)
    return base64_bytes(text) or base64_bytes(text, b"-_")


_OCTETS = "application/octet-stream"


def grounding_citations(metadata: Mapping[str, Any], content: str) -> list[Citation]:
    """One `Citation` per grounding support and chunk it cites."""
    chunks = metadata.get("groundingChunks")
    chunks = chunks if isinstance(chunks, list) else []
    supports = metadata.get("groundingSupports")
    encoded = content.encode()
    out: list[Citation] = []
    for support in supports if isinstance(supports, list) else ():
        if not isinstance(support, dict):
            continue
        segment = support.get("segment")
        segment = segment if isinstance(segment, dict) else {}
        start = _char_index(encoded, int_of(segment.get("startIndex")))
        end = max(start, _char_index(encoded, int_of(segment.get("endIndex"))))
        text = text_of(segment.get("text"))
        if text and content[start:end] != text and (found := content.find(text)) >= 0:
            start, end = found, found + len(text)
        indices = support.get("groundingChunkIndices")
        for i in indices if isinstance(indices, list) else ():
            chunk = chunks[i] if isinstance(i, int) and 0 <= i < len(chunks) else None
            if not isinstance(chunk, dict):
                continue
            source = chunk.get("web") or chunk.get("retrievedContext") or chunk.get("maps") or {}
            source = source if isinstance(source, dict) else {}
            out.append(
                Citation(
                    start=start,
                    end=end,
                    url=text_of(source.get("uri")),
                    title=text_of(source.get("title")),
                    cited_text=text_of(source.get("text")),
                    provider=PROVIDER,
                    raw=raw_json({"support": support, "chunk": chunk}),
                )
            )
    return out


def _char_index(encoded: bytes, offset: int) -> int:
    """The `str` index of a UTF-8 byte offset (clamped to the text)."""
    return len(encoded[: max(offset, 0)].decode("utf-8", errors="ignore"))


def _compact_args(args: Any) -> str:
    """The arguments as JSON text (text holding an object, a proxy's, is that text)."""
    return object_text(args) or args_json(args)


def parse_response(body: Mapping[str, Any]) -> ModelResponse:
    """Parse a `generateContent` response body into a `ModelResponse`."""
    if isinstance(body.get("error"), Mapping):
        raise error_from_payload(body)
    builder = ResponseBuilder(deltas=False)
    builder.add(body)
    if not builder.complete and not builder.has_candidate:
        raise ResponseFormatError(
            f"gemini response has no candidate: {json_text(dict(body))[:200]}", provider=PROVIDER
        )
    if not builder.complete and builder.empty:
        error = ResponseFormatError(
            f"gemini answered with an empty candidate and no finish reason: "
            f"{json_text(dict(body))[:200]}",
            provider=PROVIDER,
            retryable=True,
        )
        error.usage = builder.usage()
        raise error
    return builder.response()
