"""Helpers and SSE fixtures for the OpenAI Chat Completions adapter tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[1] / "providers" / "openai_fixtures"


def fixture(name: str) -> str:
    """The text of a fixture file in this directory."""
    return (HERE / name).read_text()


def sse(events: list[dict[str, Any] | str]) -> str:
    """An SSE body with one `data:` event per item (dicts are JSON-encoded)."""
    out = []
    for e in events:
        data = e if isinstance(e, str) else json.dumps(e, separators=(",", ":"))
        out.append(f"data: {data}\n\n")
    return "".join(out)


def chunk(
    delta: dict[str, Any] | None = None,
    finish: str | None = None,
    *,
    model: str = "gpt-4o-2024-08-06",
    usage: dict[str, Any] | None = None,
    choices: bool = True,
) -> dict[str, Any]:
    """One `chat.completion.chunk` object shaped like OpenAI's."""
    obj: dict[str, Any] = {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "created": 1745000000,
        "model": model,
        "service_tier": "default",
        "system_fingerprint": "fp_test",
        "choices": [],
        "usage": usage,
    }
    if choices:
        obj["choices"] = [
            {"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": finish}
        ]
    return obj


def _pieces(text: str, n: int = 3) -> list[str]:
    if not text:
        return []
    size = max(1, -(-len(text) // n))
    return [text[i : i + size] for i in range(0, len(text), size)]


def stream_from_body(body: dict[str, Any]) -> str:
    """The SSE stream OpenAI would send for a recorded non-streamed completion.

    Content and arguments are split into fragments; the ID and name of each call come in its
    first fragment, as OpenAI sends them; usage arrives in a final chunk without choices.
    """
    model = body["model"]
    choice = body["choices"][0]
    msg = choice["message"]
    events: list[dict[str, Any] | str] = [
        chunk({"role": "assistant", "content": "", "refusal": None}, model=model)
    ]
    for field in ("reasoning_content", "reasoning"):
        for piece in _pieces(msg.get(field) or ""):
            events.append(chunk({field: piece}, model=model))
    for piece in _pieces(msg.get("content") or ""):
        events.append(chunk({"content": piece}, model=model))
    for piece in _pieces(msg.get("refusal") or ""):
        events.append(chunk({"refusal": piece}, model=model))
    for i, tc in enumerate(msg.get("tool_calls") or []):
        first = {
            "index": i,
            "id": tc["id"],
            "type": "function",
            "function": {"name": tc["function"]["name"], "arguments": ""},
        }
        events.append(chunk({"tool_calls": [first]}, model=model))
        for piece in _pieces(tc["function"]["arguments"]):
            frag = {"index": i, "function": {"arguments": piece}}
            events.append(chunk({"tool_calls": [frag]}, model=model))
    events.append(chunk({}, choice["finish_reason"], model=model))
    events.append(chunk(model=model, usage=body.get("usage"), choices=False))
    events.append("[DONE]")
    return sse(events)
