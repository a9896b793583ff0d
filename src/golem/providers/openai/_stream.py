"""Streamed Chat Completions: `chat.completion.chunk` events to `Delta`s and a final response."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from golem.errors import ProviderConnectionError, ProviderError
from golem.messages import ToolCall
from golem.model import Delta, ModelResponse, ThinkingDelta, ToolCallDelta
from golem.providers._answers import unique_call_id
from golem.providers._errors import STREAM_ENDED
from golem.providers._jsonio import args_json, dig, parse_event_data, usage_of
from golem.providers._sse import replay, sse_events
from golem.providers.openai._errors import error_from_payload
from golem.providers.openai._wire import (
    CHAT_USAGE,
    PROVIDER,
    OutputMedia,
    answer,
    foreign_call,
    reasoning_text,
    synthesize_call_id,
    text_content,
)
from golem.usage import Usage

__all__ = ["ChatStreamParser", "parse_stream_text", "sse_events"]


@dataclass(slots=True)
class _Call:
    id: str = ""
    wire: str = ""
    """The ID as the server sent it (`id` is renamed when another call has it)."""
    name: str = ""
    args: list[str] = field(default_factory=list)
    signature: str = ""


_NO_USAGE = Usage()

_LEGACY = -1
"""The slot key of a legacy `function_call` (the `tool_calls` indexes start at 0)."""


class ChatStreamParser:
    """Accumulates one streamed response; see the module docstring."""

    def __init__(self, *, reasoning_field: str | None = None) -> None:
        self._reasoning_field = reasoning_field
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._refusal: list[str] = []
        self._annotations: list[Any] = []
        self._media = OutputMedia()
        self._transcribed = False
        """The answer's text is its audio's transcript (it had no text of its own)."""
        self._calls: list[_Call] = []
        self._slots: dict[int, int] = {}
        self._foreign_indexes: set[int] = set()
        """Indexes of calls of a type golem does not know (skipped)."""
        self._ids: set[str] = set()
        self._saw_finish = False
        self._reason: Any = None  # the finish reason as the server sent it
        self._usage = Usage()
        self._model = ""
        self.done = False  # True once the `[DONE]` sentinel arrived

    def feed(self, event: str | None, data: str) -> Delta | None:
        """Consume one event's data; return its `Delta`, or None when it carries no content."""
        if data.strip() == "[DONE]":
            self.done = True
            return None
        if event == "error":
            raise self._failed(error_from_payload(_error_event(data)))
        chunk = parse_event_data(PROVIDER, data)
        if chunk is None:  # an event without data (a proxy's keep-alive) carries nothing
            return None
        return self.feed_chunk(chunk)

    def feed_chunk(self, chunk: dict[str, Any]) -> Delta | None:
        """Consume one decoded chunk object; see `feed`."""
        if chunk.get("error") or chunk.get("object") == "error":
            raise self._failed(error_from_payload(chunk))
        model = chunk.get("model")
        if isinstance(model, str) and model and not self._model:
            self._model = model
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self._usage = usage_of(usage, CHAT_USAGE)
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            return None
        text, thinking, refused, calls = "", "", "", []
        for choice in choices:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            if isinstance(delta, dict):
                content = delta.get("content")
                text += content if content.__class__ is str else text_content(content)
                thinking += reasoning_text(delta, self._reasoning_field)
                refusal = delta.get("refusal")
                if isinstance(refusal, str) and refusal:
                    self._refusal.append(refusal)
                    if not self._text and not text:
                        # the refusal is the answer's text (as `finish` makes it): stream it
                        refused += refusal
                if "audio" in delta or "images" in delta or content.__class__ is list:
                    transcript = self._media.add(delta)
                    if transcript and not self._text and not text:
                        self._transcribed = True
                    if self._transcribed:
                        text += transcript  # an audio answer: its text is what it says
                annotations = delta.get("annotations")
                if isinstance(annotations, list):
                    self._annotations.extend(annotations)
                tool_calls = delta.get("tool_calls")
                for tc in tool_calls if isinstance(tool_calls, list) else ():
                    if isinstance(tc, dict) and not self._foreign(tc):
                        calls.append(self._call_fragment(tc))
                if tool_calls is None and "function_call" in delta:
                    legacy = self._legacy_fragment(delta["function_call"])
                    if legacy is not None:
                        calls.append(legacy)
            reason = choice.get("finish_reason")
            if reason:
                self._reason = reason
                self._saw_finish = True
        if text:
            self._text.append(text)
        if thinking:
            self._reasoning.append(thinking)
        if not (text or thinking or calls or refused):
            return None
        return Delta(
            content=text or refused,
            thinking=[ThinkingDelta(index=0, text=thinking)] if thinking else [],
            tool_calls=calls,
        )

    def _foreign(self, tc: dict[str, Any]) -> bool:
        """Whether `tc` is a fragment of a call of a type golem does not know (`foreign_call`;
        its later fragments name only its index)."""
        index = tc.get("index")
        if foreign_call(tc):
            if isinstance(index, int) and index not in self._slots:
                self._foreign_indexes.add(index)
            return True
        return isinstance(index, int) and index in self._foreign_indexes and not tc.get("id")

    def _legacy_fragment(self, fn: Any) -> ToolCallDelta | None:
        """A fragment of the one call of the legacy `functions` API (`delta.function_call`:
        its name first, then pieces of its arguments; no ID, which golem makes up)."""
        if not isinstance(fn, dict):
            return None
        fragment: dict[str, Any] = {"index": _LEGACY, "function": fn}
        if _LEGACY not in self._slots:
            fragment["id"] = synthesize_call_id()
        return self._call_fragment(fragment)

    def _call_fragment(self, tc: dict[str, Any]) -> ToolCallDelta:
        index = tc.get("index")
        if index.__class__ is str and index.isdigit():  # a server that quotes it: "0"
            index = int(index)
        call_id = tc.get("id") if isinstance(tc.get("id"), str) else ""
        fn = tc.get("function")
        if not isinstance(fn, dict):
            fn = tc.get("custom")  # a custom tool's call: its input is its arguments
        fn = fn if isinstance(fn, dict) else {}
        slot: int | None = None
        if isinstance(index, int) and index in self._slots:
            slot = self._slots[index]
            if call_id and self._calls[slot].wire and call_id != self._calls[slot].wire:
                slot = None
        elif index is None and not call_id and self._calls:
            slot = len(self._calls) - 1
        if (
            slot is not None
            and not call_id
            and fn.get("name")
            and _next_call(self._calls[slot], fn)
        ):
            slot = None
        if slot is None:
            slot = len(self._calls)
            self._calls.append(_Call())
            if isinstance(index, int):
                self._slots[index] = slot
        call = self._calls[slot]
        new_id = new_name = signature = ""
        if call_id and not call.wire:
            call.wire = call_id
            call.id = new_id = unique_call_id(call_id, self._ids)
        name = fn.get("name")
        if isinstance(name, str) and name and not call.name:
            call.name = new_name = name
        args = fn.get("arguments", fn.get("input"))
        if args is not None and not isinstance(args, str):
            args = args_json(args)
        if args:
            call.args.append(args)
        sig = dig(tc, "extra_content", "google", "thought_signature")
        if isinstance(sig, str) and sig and not call.signature:
            call.signature = signature = sig
        return ToolCallDelta(
            index=slot, id=new_id, name=new_name, args_fragment=args or "", signature=signature
        )

    @property
    def complete(self) -> bool:
        """Whether the response completed (`[DONE]`, or a finish reason on a cleanly closed stream)."""
        return self.done or self._saw_finish

    def _failed(self, error: ProviderError) -> ProviderError:
        """`error`, carrying the usage the stream reported before it failed (if any)."""
        if self._usage != _NO_USAGE:
            error.usage = self._usage
        return error

    def response(self) -> ModelResponse:
        """The final response."""
        if not self.complete:
            raise self._failed(
                ProviderConnectionError(f"openai {STREAM_ENDED}", provider=PROVIDER, retryable=True)
            )
        calls = [
            ToolCall(c.id or synthesize_call_id(), c.name, "".join(c.args), signature=c.signature)
            for c in self._calls
        ]
        return answer(
            "".join(self._text),
            "".join(self._refusal),
            "".join(self._reasoning),
            self._media,
            calls,
            self._annotations,
            self._reason,
            self._usage,
            self._model,
        )


def _next_call(call: _Call, fn: dict[str, Any]) -> bool:
    """Whether a fragment without an ID that names a function (`fn`) starts another call
    rather than continuing `call` (a server that numbers every whole call alike, or none):
    it names another function, or the same one with arguments that open an object after
    `call`'s arguments came whole. A server that repeats the name on every fragment of one
    call continues it."""
    name = fn.get("name")
    if call.name and name != call.name:
        return True
    args = fn.get("arguments")
    if not (call.args and isinstance(args, str) and args.lstrip().startswith("{")):
        return False
    try:
        whole = json.loads("".join(call.args))
    except (ValueError, RecursionError):
        return False
    return isinstance(whole, dict)


def _error_event(data: str) -> dict[str, Any]:
    """The error object of an SSE `error` event's data (JSON or plain text)."""
    try:
        payload = json.loads(data)
    except (ValueError, RecursionError):
        return {"error": {"message": data.strip()[:500] or "error event"}}
    if isinstance(payload, dict):
        return payload if "error" in payload else {"error": payload}
    return {"error": {"message": str(payload)}}


def parse_stream_text(
    text: str, *, reasoning_field: str | None = None
) -> list[Delta | ModelResponse]:
    """Parse a whole SSE body: the deltas in order, then the final response."""
    return replay(ChatStreamParser(reasoning_field=reasoning_field), sse_events(text.splitlines()))
