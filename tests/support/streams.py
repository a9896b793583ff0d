"""Recorded event streams and the ways to frame them, sent through each adapter's HTTP path."""

from __future__ import annotations

import json
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
            recorded = [it for it in all_interactions(api) if it.is_stream and it.status == 200]
            out.extend((api, events_of(it.body)) for it in recorded[:4])
    return out


STREAMS = _streams()


def frame(
    events: list[tuple[str, str]],
    *,
    newline: str,
    bom: bool,
    comments: bool,
    split_data: bool,
    bare_events: bool,
) -> str:
    """The SSE text of `events`, framed as the flags say."""
    lines: list[str] = []
    if comments:
        lines += [": connected", ""]
    for event, data in events:
        if bare_events:
            lines += ["event: keepalive", ""]  # no data: dispatches nothing
        if event:
            lines.append(f"event: {event}")
        if comments:
            lines.append(": in the middle of an event")
        payload = data
        if split_data and data.lstrip().startswith("{"):
            payload = json.dumps(json.loads(data), indent=1, ensure_ascii=False)
        lines += [f"data: {line}" for line in payload.split("\n")]
        lines.append("")
    text = newline.join(lines) + newline
    return ("\ufeff" if bom else "") + text


def plain(events: list[tuple[str, str]]) -> bytes:
    """The SSE text of `events`, LF-framed, one `data:` line each."""
    return frame(
        events, newline="\n", bom=False, comments=False, split_data=False, bare_events=False
    ).encode()


OVER_STREAMS = pytest.mark.parametrize(
    ("api", "events"), STREAMS, ids=[f"{api}-{i}" for i, (api, _) in enumerate(STREAMS)]
)
"""Parametrize a test over the recorded streams (`api`, `events`)."""
