"""Server-sent events: the streaming decoder for a response (`iter_sse`) and the line
decoder for recorded text (`sse_events`)."""

from __future__ import annotations

import codecs
import re
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from typing import Protocol

import httpx
from pydantic_core import from_json

from golem.errors import ResponseFormatError
from golem.model import Delta, ModelResponse
from golem.providers._jsonio import lenient_json

__all__ = [
    "MAX_BODY",
    "EventParser",
    "WholeBody",
    "deltas_in",
    "iter_sse",
    "replay",
    "sse_block",
    "sse_events",
]


MAX_BODY = 256 * 1024 * 1024
"""Bytes of a successful answer (one JSON body, or one stream event) read at most: beyond
it the answer is refused rather than read into memory without end."""


async def iter_sse(
    response: httpx.Response, provider: str | None = None
) -> AsyncIterator[tuple[str, str]]:
    """Yield `(event, data)` for each server-sent event of a streaming response."""
    head = ""  # the stream's first line, to quote when it holds no event
    heading = True
    yielded = False
    buffer = ""
    cr = False  # the last chunk ended in "\r": the next may start with its "\n"
    start = True  # no text yet: a BOM may come first
    # an event stream is UTF-8 whatever charset the header declares (the SSE standard);
    # the decoder keeps a character cut between chunks for the next one
    decode = codecs.getincrementaldecoder("utf-8")("replace").decode
    async for chunk in response.aiter_bytes():
        text = decode(chunk)
        if start and text:
            start = False
            if text[0] == "\ufeff":
                text = text[1:]
        if cr:
            text, cr = "\r" + text, False
        if "\r" in text:
            if text.endswith("\r"):
                text, cr = text[:-1], True
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        if not text:
            continue
        if heading:  # until the first line is whole
            head += text[:200]
            heading = len(head) < 200 and "\n" not in head
        # only the new text (and the newline before it) can complete an event
        complete = "\n\n" in text or (text[0] == "\n" and buffer.endswith("\n"))
        buffer += text
        if not complete:
            if len(buffer) > MAX_BODY:
                raise ResponseFormatError(
                    f"{provider} sent a stream event longer than {MAX_BODY} bytes",
                    provider=provider or "",
                )
            continue
        *blocks, buffer = buffer.split("\n\n")
        for block in blocks:
            item = sse_block(block)
            if item is not None:
                yielded = True
                yield item
    buffer += decode(b"", True)  # a character the stream cut off: U+FFFD
    if cr:  # the stream ended in "\r": a line ending
        buffer += "\n"
    *blocks, buffer = buffer.split("\n\n")
    for block in blocks:
        item = sse_block(block)
        if item is not None:
            yielded = True
            yield item
    if buffer.strip("\n"):
        item = _whole(sse_block(buffer.strip("\n")))
        if item is not None:
            yield item
            return
    if provider and not yielded and head.strip() and not _SSE_START.match(head.lstrip("\n")):
        _refuse_no_stream(provider, head, buffer)


def _refuse_no_stream(provider: str, head: str, rest: str) -> None:
    """Raise for a "stream" whose first line `head` is no event-stream field: `WholeBody`
    when the text (`rest`) is one JSON document, else a retryable `ResponseFormatError`."""
    if head.lstrip().startswith(("{", "[")) and rest.strip():
        try:
            from_json(rest)
        except ValueError:
            pass
        else:  # one JSON document under another content type: the answer, unstreamed
            raise WholeBody(rest)
    raise ResponseFormatError(
        f"{provider} answered a stream with text that is no event stream: {head!r}",
        provider=provider,
        retryable=True,
    )


class WholeBody(Exception):
    """Raised by `iter_sse` (with a provider named) for a "stream" that is one JSON document
    served under another content type (`text/event-stream`, `text/plain`, an upper-case
    `APPLICATION/JSON`): `text` is the answer, to read as the unstreamed body it is."""

    def __init__(self, text: str) -> None:
        super().__init__("the stream is one JSON document")
        self.text = text


_SSE_START = re.compile(r"(?:data|event|id|retry)(?::|\n|$)|:")
"""How an event stream's first line starts: a field name, or a comment."""


def _whole(item: tuple[str, str] | None) -> tuple[str, str] | None:
    """The event the stream ended in, without the blank line that ends an event: kept when
    its data is whole (JSON, or Chat Completions' `[DONE]`), dropped when it was cut off
    (the SSE standard drops any such event; a lenient reader keeps a whole one). A cut event is a connection that closed
    early, which the adapters report as a retryable "stream ended" error, not as an
    unreadable event."""
    if item is None or item[1].strip() == "[DONE]":
        return item
    try:
        from_json(item[1])
    except ValueError:
        return item if lenient_json(item[1]) is not None else None
    return item


def sse_block(block: str) -> tuple[str, str] | None:
    """`(event, data)` of one event's lines (`\n`-separated), or None when it has no data."""
    if block.startswith("data:") and "\n" not in block:  # the common one-line event
        value = block[5:]
        return "", value[1:] if value.startswith(" ") else value
    event = ""
    data: list[str] = []
    for line in block.split("\n"):
        if not line or line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            data.append(value)
        elif name == "event":
            event = value
    return (event, "\n".join(data)) if data else None


def sse_events(lines: Iterable[str]) -> Iterator[tuple[str, str]]:
    """Split raw server-sent-event lines into `(event, data)` pairs (the sync `iter_sse`)."""
    block: list[str] = []
    for n, line in enumerate(lines):
        line = line.rstrip("\r\n").removeprefix("\ufeff" if n == 0 else "")
        if line:
            block.append(line)
        elif block:
            item = sse_block("\n".join(block))
            block = []
            if item is not None:
                yield item
    item = _whole(sse_block("\n".join(block))) if block else None
    if item is not None:
        yield item


class EventParser(Protocol):
    """What turns the events of one streamed answer into deltas and a final response."""

    @property
    def done(self) -> bool:
        """Whether the answer is complete (the rest of the stream is not read)."""

    def feed(self, event: str | None, data: str) -> Delta | list[Delta] | None:
        """The deltas of one event (`event` None: the whole answer as one JSON document)."""

    def response(self) -> ModelResponse:
        """The final response, or the error of a stream that ended too early."""


def deltas_in(fed: Delta | list[Delta] | None) -> Sequence[Delta]:
    """What `EventParser.feed` returned, as a sequence of deltas."""
    return fed if isinstance(fed, list) else () if fed is None else (fed,)


def replay(parser: EventParser, events: Iterable[tuple[str, str]]) -> list[Delta | ModelResponse]:
    """Feed a whole recorded stream to `parser`: its deltas in order, then the final response."""
    out: list[Delta | ModelResponse] = []
    for event, data in events:
        out.extend(deltas_in(parser.feed(event, data)))
        if parser.done:
            break
    out.append(parser.response())
    return out
