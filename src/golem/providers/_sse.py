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


class _Reader:
    """The `(event, data)` pairs of an event stream's text, fed in pieces (CR, LF or CRLF
    line ends; a BOM first): `feed` gives the events each piece completes, `close` the rest."""

    def __init__(self, provider: str | None) -> None:
        self.provider = provider
        self.pending: list[str] = []  # text after the last blank line, in pieces (joined once)
        self.size = 0  # its length
        self.last = ""  # its last character
        self.head = ""  # the stream's first line, to quote when it holds no event
        self.cr = False  # the last piece ended in "\r": the next may start with its "\n"
        self.start = True  # no text yet: a BOM may come first

    def feed(self, text: str) -> list[tuple[str, str]]:
        if self.start and text:
            self.start = False
            text = text.removeprefix("\ufeff")
        if self.cr:
            text, self.cr = "\r" + text, False
        if "\r" in text:
            if text.endswith("\r"):
                text, self.cr = text[:-1], True
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        if not text:
            return []
        if len(self.head) < 200 and "\n" not in self.head:  # until the first line is whole
            self.head += text[:200]
        # only the new text (and the newline before it) can complete an event
        complete = "\n\n" in text or (text[0] == "\n" and self.last == "\n")
        self.pending.append(text)
        self.size += len(text)
        self.last = text[-1]
        if not complete:
            if self.size > MAX_BODY:
                raise ResponseFormatError(
                    f"{self.provider} sent a stream event longer than {MAX_BODY} bytes",
                    provider=self.provider or "",
                )
            return []
        *blocks, rest = "".join(self.pending).split("\n\n")
        self.pending, self.size, self.last = [rest], len(rest), rest[-1:]
        return [item for item in map(sse_block, blocks) if item is not None]

    def close(self, rest: str = "") -> list[tuple[str, str]]:
        """The events left at the end (`rest`: the decoder's last text); a last event
        without its blank line is kept when whole (`_whole`)."""
        text = "".join(self.pending) + rest + ("\n" if self.cr else "")  # a final "\r" ends a line
        *blocks, tail = text.split("\n\n")
        self.pending, self.size, self.last = [tail], len(tail), tail[-1:]
        items = [item for item in map(sse_block, blocks) if item is not None]
        last = _whole(sse_block(tail.strip("\n"))) if tail.strip("\n") else None
        return items if last is None else [*items, last]


async def iter_sse(
    response: httpx.Response, provider: str | None = None
) -> AsyncIterator[tuple[str, str]]:
    """Yield `(event, data)` for each server-sent event of a streaming response."""
    reader = _Reader(provider)
    yielded = False
    # an event stream is UTF-8 whatever charset the header declares (the SSE standard);
    # the decoder keeps a character cut between chunks for the next one
    decode = codecs.getincrementaldecoder("utf-8")("replace").decode
    async for chunk in response.aiter_bytes():
        for item in reader.feed(decode(chunk)):
            yielded = True
            yield item
    rest = reader.close(decode(b"", True))  # a character the stream cut off: U+FFFD
    for item in rest:
        yield item
    head = reader.head
    if (
        provider
        and not (yielded or rest)
        and head.strip()
        and not _SSE_START.match(head.lstrip("\n"))
    ):
        _refuse_no_stream(provider, head, "".join(reader.pending))


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
    """The event a stream ended in without its blank line: kept when its data is whole (JSON,
    or `[DONE]`), else dropped (a cut connection: a "stream ended" error, not a bad event)."""
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
    reader = _Reader(None)
    for line in lines:
        yield from reader.feed(line.rstrip("\r\n") + "\n")
    yield from reader.close()


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
