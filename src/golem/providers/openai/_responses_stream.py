"""Streamed Responses API events to `Delta`s and a final `ModelResponse`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from golem.errors import ProviderConnectionError
from golem.model import Delta, ModelResponse, ThinkingDelta, ToolCallDelta
from golem.providers._answers import replay_deltas, unique_call_id
from golem.providers._errors import STREAM_ENDED
from golem.providers._jsonio import parse_event_data, text_of
from golem.providers._sse import replay, sse_events
from golem.providers.openai._errors import error_from_payload
from golem.providers.openai._responses_wire import (
    PROVIDER,
    function_arguments,
    function_call_id,
    parse_responses_response,
    reasoning_block,
)

__all__ = ["ResponsesStreamParser", "parse_responses_stream"]

_NOTHING = object()
"""No text delta yet."""

_TERMINAL = frozenset(("response.completed", "response.incomplete", "response.failed"))


class ResponsesStreamParser:
    """Consumes the events of one streamed response, in order (see the module docstring)."""

    def __init__(self) -> None:
        self._calls: dict[int | str, int] = {}
        """A function call's item (`_key`) → its index among the response's calls."""
        self._reasoning: dict[int | str, int] = {}
        """A reasoning item (`_key`) → its index among the thinking blocks."""
        self._parts: dict[int, Any] = {}
        """Thinking block → the summary (or content) part its last text delta belonged to."""
        self._final: ModelResponse | None = None
        self._streamed: set[int] = set()  # calls whose arguments streamed in fragments
        self._argued: set[int] = set()
        """Calls whose arguments came whole (in the added item, or only when done)."""
        self._done: dict[int, Mapping[str, Any]] = {}
        """The items of `response.output_item.done` events by `output_index`: the output of a
        terminal event that leaves its `output` out (a compatible server's)."""
        self._ids: set[str] = set()
        """The call IDs given so far (a repeated one is renamed, as in the final response)."""
        self._response_id = ""
        self._texted: Any = _NOTHING
        """The item (`output_index`, else `item_id`) of the last text delta (`_NOTHING`
        before any; None when it named neither: then no text is taken from `.done` events).
        Items stream one after another, so an item's done events follow its deltas."""
        self._separated = False
        self._told: set[tuple[Any, Any]] = set()
        """`(item, content_index)` of text parts that came whole in a `.done` event
        (a server that does not stream them), already yielded as one delta."""
        self._others: set[int | str] = set()
        """The built-in tools' items (`_key`; text around them is separated)."""
        self._thought: set[int] = set()  # thinking blocks whose text streamed in deltas

    @property
    def done(self) -> bool:
        """Whether the terminal event has arrived."""
        return self._final is not None

    def feed(self, name: str | None, data: str) -> Delta | list[Delta] | None:
        """Process one event's `data`; return the `Delta` it produces, if any."""
        event = parse_event_data(PROVIDER, data)
        if event is None:  # an event without data (a proxy's keep-alive) carries nothing
            return None
        kind = event.get("type")
        if not isinstance(kind, str):
            if event.get("object") == "response":  # a whole response: no stream after all
                self._final = parse_responses_response(event)
                return replay_deltas(self._final, signatures=False)
            elif isinstance(event.get("error"), Mapping):  # an error body from a proxy
                raise error_from_payload(event)
            return None  # not an event this parser knows
        if kind == "response.output_text.delta" or kind == "response.refusal.delta":
            return self._text_delta(event)
        if kind == "response.function_call_arguments.delta":
            fragment = event.get("delta")
            n = self._calls.get(_key(event))
            if n is None or not isinstance(fragment, str) or not fragment or n in self._argued:
                return None
            self._streamed.add(n)
            return Delta(tool_calls=[ToolCallDelta(n, args_fragment=fragment)])
        if kind == "response.function_call_arguments.done":
            return self._whole_args(self._calls.get(_key(event)), event.get("arguments"))
        if kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            text = event.get("delta")
            n = self._reasoning.get(_key(event))
            if n is None or not isinstance(text, str) or not text:
                return None
            part = event.get("summary_index", event.get("content_index"))
            last = self._parts.get(n)
            if last is not None and part != last:
                text = "\n\n" + text  # the final block joins summary parts by a blank line
            self._parts[n] = part
            self._thought.add(n)
            return Delta(thinking=[ThinkingDelta(n, text=text)])
        if kind == "response.output_text.done" or kind == "response.refusal.done":
            return self._whole_text(event)
        if kind == "response.output_item.added":
            return self._added(event)
        if kind == "response.output_item.done":
            item = event.get("item")
            delta = None
            if isinstance(item, Mapping):
                delta = self._item_done(event, item)
                index = _index(event)
                if index < 0:  # no output_index: the items come in order
                    index = max(self._done, default=-1) + 1
                self._done[index] = item
            return delta
        if kind in ("response.created", "response.in_progress") and not self._response_id:
            response = event.get("response")
            if isinstance(response, Mapping) and isinstance(response.get("id"), str):
                self._response_id = response["id"]
        if kind in _TERMINAL:
            response = event.get("response")
            if not isinstance(response, Mapping):
                response = {}
            if self._done and not (
                isinstance(response.get("output"), list) and response["output"]
            ):  # no output list, or an empty one, after items that were done
                response = {**response, "output": [self._done[i] for i in sorted(self._done)]}
            self._final = parse_responses_response(response)
            return None
        if kind == "error":  # `{"type": "error", "code", "message"}`, or an `error` object
            error = event.get("error") or {k: v for k, v in event.items() if k != "type"}
            raise error_from_payload({"error": error})
        return None

    def _text_delta(self, event: Mapping[str, Any]) -> Delta | None:
        """A fragment of an output message's text (or refusal)."""
        text = event.get("delta")
        if not isinstance(text, str) or not text:
            return None
        index = event.get("output_index")
        delta = self._text(text)
        self._texted = event.get("item_id") if index is None else index  # by ID: no index
        return delta

    def _added(self, event: Mapping[str, Any]) -> Delta | None:
        item = event.get("item")
        if not isinstance(item, Mapping):
            return None
        key = _key(event)
        if key in self._calls or key in self._reasoning or key in self._others:
            return None  # an item is added once: a repeated event (a proxy's replay) is ignored
        kind = item.get("type")
        if kind == "function_call":
            n = self._calls[key] = len(self._calls)
            call_id = function_call_id(item, self._response_id, _index(event))
            call_id = unique_call_id(call_id, self._ids)
            whole = function_arguments(item.get("arguments"))
            if whole:
                self._argued.add(n)  # a server that does not stream the arguments
            name = text_of(item.get("name"))
            return Delta(tool_calls=[ToolCallDelta(n, id=call_id, name=name, args_fragment=whole)])
        if kind == "reasoning":
            self._reasoning[key] = len(self._reasoning)
        elif kind != "message":
            self._separated = True
            self._others.add(key)
        return None

    def _text(self, text: str) -> Delta:
        """The delta of a piece of the answer's text (a blank line first when a built-in
        tool's item separates it from earlier text, as the final message joins them)."""
        if self._separated and (self._texted is not _NOTHING or self._told):
            text = "\n\n" + text
        self._separated = False
        return Delta(content=text)

    def _whole_text(self, event: Mapping[str, Any]) -> Delta | None:
        """A text (or refusal) part that came whole in its `.done` event, as one delta, when
        none of its message's text streamed."""
        index = _key(event)
        key = (index, event.get("content_index", 0))
        if self._texted == index or self._texted is None or key in self._told:
            return None
        text = event.get("text", event.get("refusal"))
        if not isinstance(text, str) or not text:
            return None
        delta = self._text(text)
        self._told.add(key)
        return delta

    def _item_done(self, event: Mapping[str, Any], item: Mapping[str, Any]) -> Delta | None:
        """What a done item carries that no delta streamed: a message's text, a reasoning
        item's summary, a function call's ID, name and arguments (a server that sends
        items only when done)."""
        key = _key(event)
        kind = item.get("type")
        if kind == "function_call":
            if key not in self._calls:
                return self._added(event)
            return self._whole_args(self._calls.get(key), item.get("arguments"))
        if kind == "message":
            if self._texted == key or self._texted is None:
                return None
            pieces, told = [], []
            content = item.get("content")
            for j, part in enumerate(content if isinstance(content, list) else ()):
                if not isinstance(part, Mapping) or (key, j) in self._told:
                    continue
                piece = part.get("text") or part.get("refusal")
                if isinstance(piece, str) and piece:
                    told.append((key, j))
                    pieces.append(piece)
            if not pieces:
                return None
            delta = self._text("".join(pieces))
            self._told.update(told)
            return delta
        if kind == "reasoning":
            n = self._reasoning.get(key)
            if n is None:
                if key in self._calls:
                    return None
                n = self._reasoning[key] = len(self._reasoning)
            if n in self._thought:
                return None
            text = reasoning_block(item).text
            if not text:
                return None
            self._thought.add(n)
            return Delta(thinking=[ThinkingDelta(n, text=text)])
        if key not in self._others:  # a built-in tool's item, never added: it separates
            self._others.add(key)  # the text around it, as in the final message
            self._separated = True
        return None

    def _whole_args(self, n: int | None, args: Any) -> Delta | None:
        """The whole arguments of call `n` as its one fragment, when none streamed (a server
        that sends them only when done); None otherwise."""
        if n is None or n in self._streamed or n in self._argued:
            return None
        text = function_arguments(args)
        if not text:
            return None
        self._argued.add(n)
        return Delta(tool_calls=[ToolCallDelta(n, args_fragment=text)])

    def response(self) -> ModelResponse:
        """The final response."""
        if self._final is None:
            raise ProviderConnectionError(
                f"openai {STREAM_ENDED}", provider=PROVIDER, retryable=True
            )
        return self._final


def _key(event: Mapping[str, Any]) -> int | str:
    """Which item an event is about: its `output_index`, else its item's ID (`item_id`, or
    the `id` of the item it carries: a server that leaves the index out); -1 when neither."""
    index = event.get("output_index")
    if isinstance(index, int):
        return index
    item = event.get("item")
    key = event.get("item_id") or (item.get("id") if isinstance(item, Mapping) else None)
    return key if isinstance(key, str) and key else -1


def _index(event: Mapping[str, Any]) -> int:
    index = event.get("output_index")
    return index if isinstance(index, int) else -1


def parse_responses_stream(lines: Iterable[str]) -> list[Delta | ModelResponse]:
    """Parse a whole recorded stream (its raw lines): the deltas in order, then the response."""
    return replay(ResponsesStreamParser(), sse_events(lines))
