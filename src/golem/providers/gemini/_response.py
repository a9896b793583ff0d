"""Responses: Gemini `GenerateContentResponse` objects as golem deltas and `ModelResponse`s.

`ResponseBuilder` folds one response (a plain call) or every event of a stream into
deltas and a final `ModelResponse`; `parse_response` is its one-shot form.

Thought signatures: a `thoughtSignature` on a `functionCall` part becomes
`ToolCall.signature`; one on a plain text part becomes a `ThinkingBlock` with empty text
and that signature; thought text parts (`thought: true`) become `ThinkingBlock`s.
Function calls without an ID get a stable synthesized one (`SYNTHETIC_ID_PREFIX`).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from typing import Any

from golem.messages import Message, ThinkingBlock, ToolCall
from golem.model import Delta, FinishReason, ModelResponse, ThinkingDelta
from golem.model import ToolCallDelta as _ToolCallDelta
from golem.providers.gemini._wire import SYNTHETIC_ID_PREFIX
from golem.usage import Usage

__all__ = ["ResponseBuilder", "finish_reason", "parse_response", "usage_from_metadata"]

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

_ID_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


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
        self._usage: Mapping[str, Any] = {}
        """The latest `usageMetadata` (cumulative when streamed); mapped once, at the end."""
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
            self._usage = meta
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
            usage=usage_from_metadata(self._usage),
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
