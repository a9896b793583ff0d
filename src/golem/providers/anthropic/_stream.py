"""Streamed Messages API responses: server-sent events to `Delta`s and a final `ModelResponse`."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from golem.errors import ProviderConnectionError, ProviderError
from golem.model import Delta, ModelResponse, ThinkingDelta, ToolCallDelta
from golem.providers._answers import TextRuns, unique_call_id
from golem.providers._errors import STREAM_ENDED
from golem.providers._jsonio import object_text, parse_event_data, text_of
from golem.providers._sse import replay, sse_events
from golem.providers.anthropic._errors import error_from_event
from golem.providers.anthropic._response import (
    RawArgs,
    fresh_call_id,
    input_text,
    message_from_blocks,
    response_of,
    usage_from,
    with_container,
)
from golem.providers.anthropic._wire import PROVIDER

__all__ = ["StreamParser", "parse_stream", "sse_events"]


class StreamParser:
    """Consumes the events of one streamed response, in order."""

    def __init__(self, output_tool: str = "") -> None:
        self._output_tool = output_tool
        self._output: set[int] = set()  # wire indexes of `output_tool` blocks
        self._runs = TextRuns()
        """The text runs server-side blocks split (the streamed text itself is in `_pieces`)."""
        self._blocks: dict[int, dict[str, Any]] = {}
        self._index: dict[int, int] = {}
        """Wire block index → index among thinking blocks or among tool calls."""
        self._fragments: dict[int, list[str]] = {}
        self._whole: set[int] = set()
        """Wire indexes of `tool_use` blocks whose start carried their whole input (a
        server that does not stream it): later input fragments are not added to it."""
        self._cited: dict[int, list[Any]] = {}
        """Wire block index → citations streamed for a text block (or a server block's
        input fragments, under index -1 - wire index)."""
        self._pieces: dict[int, dict[str, list[str]]] = {}
        """Wire block index → streamed text / thinking / signature pieces, by field."""
        self._thoughts = 0
        self._calls = 0
        self._ids: set[str] = set()
        self._model = ""
        self._usage: dict[str, Any] = {}
        self._stop: Any = None
        self._container: Any = None
        """The code-execution container the response names (`message_start` or
        `message_delta`), the latest one."""
        self._done = False

    @property
    def done(self) -> bool:
        """Whether `message_stop` has arrived."""
        return self._done

    def feed(self, event: str | None, data: str) -> Delta | None:
        """Process one server-sent event."""
        if event == "error":
            raise self._failed(error_from_event(data))
        payload = parse_event_data(PROVIDER, data)
        if payload is None:  # an event without data (a proxy's keep-alive) carries nothing
            return None
        kind = payload.get("type") or event
        if kind == "content_block_delta":
            return self._delta(payload)
        if kind == "content_block_start":
            return self._start(payload)
        if kind == "message_start":
            message = payload.get("message")
            if isinstance(message, Mapping):
                model = message.get("model")
                self._model = model if isinstance(model, str) else ""
                self._merge_usage(message.get("usage"))
                if isinstance(message.get("container"), Mapping):
                    self._container = message["container"]
        elif kind == "message_delta":
            delta = payload.get("delta")
            if isinstance(delta, Mapping):
                if "stop_reason" in delta:
                    self._stop = delta["stop_reason"]
                if isinstance(delta.get("container"), Mapping):
                    self._container = delta["container"]
            self._merge_usage(payload.get("usage"))
        elif kind == "message_stop":
            self._done = True
        elif kind == "error":
            raise self._failed(error_from_event(data))
        return None

    def _failed(self, error: ProviderError) -> ProviderError:
        """`error`, carrying the usage the stream reported before it failed (if any)."""
        if self._usage:
            error.usage = usage_from(self._usage)
        return error

    def _merge_usage(self, usage: Any) -> None:
        if isinstance(usage, Mapping):
            for key, value in usage.items():
                if value is not None:
                    self._usage[key] = value

    def _start(self, payload: Mapping[str, Any]) -> Delta | None:
        index = payload.get("index")
        block = payload.get("content_block")
        if not isinstance(index, int) or not isinstance(block, Mapping):
            return None
        if index in self._blocks:
            return None  # a block starts once: a repeated start (a proxy's replay) is ignored
        block = dict(block)
        self._blocks[index] = block
        kind = block.get("type")
        if kind == "text":
            text = block.get("text")
            text = text if isinstance(text, str) else ""
            text = self._runs.add(text, empty_joins=True)  # the deltas join runs as the message
            return Delta(content=text) if text else None
        if kind in ("thinking", "redacted_thinking"):
            n = self._index[index] = self._thoughts
            self._thoughts += 1
            text, signature = block.get("thinking"), block.get("signature")
            text = text if isinstance(text, str) else ""
            signature = signature if isinstance(signature, str) else ""
            if kind == "thinking" and (text or signature):
                return Delta(thinking=[ThinkingDelta(n, text=text, signature=signature)])
            return None
        if kind != "tool_use":
            self._runs.separated = True
            self._cited[-1 - index] = []  # the input fragments of a server tool's call
            return None
        whole = _whole_input(block.get("input"))
        if whole:
            self._whole.add(index)
        self._fragments[index] = [whole] if whole else []
        if self._output_tool and block.get("name") == self._output_tool:
            self._output.add(index)
            return Delta(content=whole) if whole else None
        n = self._index[index] = self._calls
        self._calls += 1
        call_id = unique_call_id(text_of(block.get("id")) or fresh_call_id(), self._ids)
        block["id"] = call_id  # the final message names the call as the delta did
        name = text_of(block.get("name"))
        return Delta(tool_calls=[ToolCallDelta(n, id=call_id, name=name, args_fragment=whole)])

    def _delta(self, payload: Mapping[str, Any]) -> Delta | None:
        index = payload.get("index")
        delta = payload.get("delta")
        if not isinstance(index, int) or not isinstance(delta, Mapping):
            return None
        block = self._blocks.get(index)
        if block is None:
            return None
        kind = delta.get("type")
        if kind == "text_delta" and block.get("type") == "text":
            text = delta.get("text")
            if not isinstance(text, str) or not text:
                return None
            self._append(index, "text", text)
            self._runs.texted = True
            return Delta(content=text)
        if kind == "input_json_delta":
            fragment = delta.get("partial_json")
            fragments = self._fragments.get(index)
            if not isinstance(fragment, str) or not fragment or index in self._whole:
                return None
            if fragments is None:
                server = self._cited.get(-1 - index)
                if server is not None:
                    server.append(fragment)  # a server-side tool's input: no delta
                return None
            fragments.append(fragment)
            if index in self._output:
                return Delta(content=fragment)
            return Delta(tool_calls=[ToolCallDelta(self._index[index], args_fragment=fragment)])
        if kind in ("thinking_delta", "signature_delta"):
            key = "thinking" if kind == "thinking_delta" else "signature"
            piece = delta.get(key)
            n = self._thought_of(index, block)
            if n is None or not isinstance(piece, str) or not piece:
                return None
            self._append(index, key, piece)
            text, signature = (piece, "") if key == "thinking" else ("", piece)
            return Delta(thinking=[ThinkingDelta(n, text=text, signature=signature)])
        if kind == "citations_delta":
            citation = delta.get("citation")
            if isinstance(citation, Mapping):
                self._cited.setdefault(index, []).append(citation)
            return None
        if kind == "compaction_delta":
            content = delta.get("content")
            if isinstance(content, str) and content:
                self._append(index, "content", content)
            return None
        if block.get("type") not in _OWN_BLOCKS:
            self._merge(index, block, delta)
        return None

    def _merge(self, index: int, block: dict[str, Any], delta: Mapping[str, Any]) -> None:
        """A delta of a type golem does not know, for a server-side (or unknown) block: kept
        in the block, which goes back verbatim. Text fields are appended to the block's
        field of the same name, as every documented delta does (`text`, `thinking`,
        `signature`, `content`); any other value replaces the field."""
        for key, value in delta.items():
            if key == "type":
                continue
            if isinstance(value, str):
                if value:
                    self._append(index, key, value)
            else:
                block[key] = value

    def _thought_of(self, index: int, block: Mapping[str, Any]) -> int | None:
        """The thinking block number of the block at `index` (None: no thinking block)."""
        thinking = block.get("type") in ("thinking", "redacted_thinking")
        return self._index.get(index) if thinking else None

    def _append(self, index: int, key: str, piece: str) -> None:
        """Collect a text piece of a block (joined once at the end: no quadratic concatenation)."""
        self._pieces.setdefault(index, {}).setdefault(key, []).append(piece)

    def response(self) -> ModelResponse:
        """The final response."""
        if not self._done:
            raise self._failed(
                ProviderConnectionError(STREAM_ENDED, retryable=True, provider=PROVIDER)
            )
        blocks: list[Mapping[str, Any]] = []
        for index in sorted(self._blocks):
            block = self._blocks[index]
            fragments = self._fragments.get(index)
            if fragments:
                block = {**block, "input": RawArgs("".join(fragments))}
            server_input = self._cited.get(-1 - index)
            if server_input:
                block = {**block, "input": _json_or_text("".join(server_input))}
            cited = self._cited.get(index)
            if cited:
                start = block.get("citations")
                block = {
                    **block,
                    "citations": [*(start if isinstance(start, list) else ()), *cited],
                }
            pieces = self._pieces.get(index)
            if pieces:
                block = dict(block)
                for key, values in pieces.items():
                    start = block.get(key)
                    block[key] = (start if isinstance(start, str) else "") + "".join(values)
            blocks.append(block)
        return response_of(
            with_container(message_from_blocks(blocks, self._output_tool), self._container),
            usage_from(self._usage),
            self._stop,
            self._model,
        )


def _whole_input(value: Any) -> str:
    """The arguments a `tool_use` start carries whole (a server that does not stream them),
    as the unstreamed block's would read; "" for the API's empty `{}` (they follow)."""
    if isinstance(value, str) or (isinstance(value, Mapping) and value):
        return input_text(value) if not isinstance(value, str) or object_text(value) else ""
    return ""


_OWN_BLOCKS = frozenset(("text", "thinking", "redacted_thinking", "tool_use"))
"""The block types golem reads into the message; every other one is kept as it came."""


def _json_or_text(text: str) -> Any:
    """A server tool's streamed input as the object a non-streamed block carries (the text
    itself if it is not JSON, for example cut off by `max_tokens`)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return text


def parse_stream(
    events: Iterable[tuple[str, str]], output_tool: str = ""
) -> list[Delta | ModelResponse]:
    """Parse a whole recorded stream: its deltas in order, then the final response."""
    return replay(StreamParser(output_tool), events)
