"""Recorded event streams and the ways to frame them, sent through each adapter's HTTP path."""

from __future__ import annotations

from pathlib import Path

import pytest

from golem.model import Delta, ModelResponse
from tests.support.adapters import send
from tests.support.recordings import all_interactions, available

FIXTURES = Path(__file__).resolve().parents[1] / "providers" / "openai_fixtures"


async def stream_through(api: str, chunks: list[bytes]) -> list[Delta | ModelResponse]:
    """What `generate_stream` yields when the server sends `chunks` as its SSE body."""
    return await send(api, chunks, stream=True)


def events_of(body: str) -> list[tuple[str, str]]:
    """The `(event, data)` pairs of a recorded SSE body (LF or CRLF, one `data:` line each)."""
    out: list[tuple[str, str]] = []
    for block in body.replace("\r\n", "\n").split("\n\n"):
        event, data = "", []
        for line in block.split("\n"):
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
        if data:
            out.append((event, "\n".join(data)))
    return out


def _streams() -> list[tuple[str, list[tuple[str, str]]]]:
    out = []
    for path in sorted(FIXTURES.glob("stream_*.sse")):
        if path.name not in ("stream_truncated.sse", "stream_error_event.sse"):
            out.append(("openai-chat", events_of(path.read_text())))
    for api in ("openai-responses", "anthropic", "gemini"):
        if available(api):
            for it in all_interactions(api):
                if it.is_stream and it.status == 200:
                    out.append((api, events_of(it.body)))
    return out


STREAMS = _streams()
"""Every recorded stream that completes, as `(api, events)`: the OpenAI Chat fixtures, and
the 200 streams of the recordings (when present)."""


def _bodies() -> list[tuple[str, str]]:
    out = []
    for api in ("openai-chat", "openai-responses", "anthropic", "gemini"):
        if not available(api):
            continue
        for it in all_interactions(api):
            if not it.is_stream and it.status == 200 and it.body.lstrip().startswith("{"):
                out.append((api, it.body))
    return out


BODIES = _bodies()
"""Every recorded non-streamed answer (a JSON object, status 200), as `(api, body)`."""


def plain(events: list[tuple[str, str]]) -> bytes:
    """The SSE text of `events`, LF-framed, one `data:` line each."""
    lines = [f"event: {event}\n" if event else "" for event, _ in events]
    return "".join(
        head + "".join(f"data: {line}\n" for line in data.split("\n")) + "\n"
        for head, (_, data) in zip(lines, events, strict=True)
    ).encode()


OVER_STREAMS = pytest.mark.parametrize(
    ("api", "events"), STREAMS, ids=[f"{api}-{i}" for i, (api, _) in enumerate(STREAMS)]
)
"""Parametrize a test over the recorded streams (`api`, `events`)."""
