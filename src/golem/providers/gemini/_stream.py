"""Parsing of `streamGenerateContent?alt=sse`: server-sent events into deltas and a response."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import cast

from golem.errors import ProviderConnectionError, ResponseFormatError
from golem.model import Delta, ModelResponse
from golem.providers._errors import STREAM_ENDED
from golem.providers._jsonio import parse_json_body
from golem.providers._sse import replay, sse_events
from golem.providers.gemini._errors import PROVIDER, error_from_payload
from golem.providers.gemini._response import ResponseBuilder

__all__ = ["StreamParser", "parse_stream", "sse_events"]


class StreamParser:
    """Turns the `data` of each server-sent event into deltas; `response()` gives the response."""

    done = False
    """Never set: the stream is read to its end."""

    def __init__(self) -> None:
        self._builder = ResponseBuilder()

    def feed(self, event: str | None, data: str) -> list[Delta]:
        """Fold one event's data in (`event` None: a whole JSON body, an array of responses
        or one) and return its deltas in arrival order."""
        if event is None:
            return [d for chunk in json_chunks(data) for d in self.feed("", chunk)]
        if not data.strip():
            return []
        try:
            chunk = parse_json_body(PROVIDER, data, "a stream event")
        except ResponseFormatError:
            if data.strip() == "[DONE]":
                return []  # an OpenAI-style end marker a proxy adds: the events say the rest
            raise
        if chunk.get("error"):  # a null one (`"error": null` beside the answer) is none
            error = error_from_payload(chunk)
            error.usage = self._builder.usage()
            raise error
        return self._builder.add(chunk)

    def response(self) -> ModelResponse:
        """The final response."""
        if not self._builder.complete:
            error = ProviderConnectionError(STREAM_ENDED, retryable=True, provider=PROVIDER)
            error.usage = self._builder.usage()
            raise error
        return self._builder.response()


def parse_stream(events: Iterable[tuple[str, str]]) -> tuple[list[Delta], ModelResponse]:
    """Parse a whole recorded stream: every delta in order, then the final response."""
    *deltas, response = replay(StreamParser(), events)
    return cast(list[Delta], deltas), cast(ModelResponse, response)


def json_chunks(text: str) -> list[str]:
    """The responses of a streamed body that is no event stream (a JSON array, or one object)."""
    if not text.strip():  # nothing came: a transfer cut short, another may be whole
        raise ResponseFormatError(
            "gemini returned a stream body that is empty", provider=PROVIDER, retryable=True
        )
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ResponseFormatError(
            f"gemini returned a stream body that is neither SSE nor JSON: {text[:200]!r}",
            provider=PROVIDER,
        ) from exc
    return [json.dumps(item) for item in (data if isinstance(data, list) else [data])]
