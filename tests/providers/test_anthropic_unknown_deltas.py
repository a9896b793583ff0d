"""Streamed deltas of block types golem does not know are kept in their block.

A server-side (or new) block that streams its content in deltas of a type golem does not
read used to keep only its `content_block_start`: the deltas were dropped, so the block sent
back on the next turn lacked what the model wrote into it (and the streamed answer differed
from the same answer unstreamed). Such deltas are now merged into the block: text fields
appended, other values set, the way every documented delta type fills its block.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from golem.messages import Message
from golem.model import Delta, ModelRequest, ModelResponse
from tests.support.adapters import body_of, parsed, streamed
from tests.support.recordings import all_interactions, available

FUTURE_BLOCK = {"type": "future_tool_result", "tool_use_id": "srvtoolu_1", "content": "", "n": 1}


def _events(*deltas: dict[str, Any]) -> list[tuple[str, str]]:
    events: list[dict[str, Any]] = [
        {
            "type": "message_start",
            "message": {"model": "claude-x", "content": [], "usage": {"input_tokens": 3}},
        },
        {"type": "content_block_start", "index": 0, "content_block": FUTURE_BLOCK},
        *({"type": "content_block_delta", "index": 0, "delta": d} for d in deltas),
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "text_delta", "text": "Done."},
        },
        {"type": "content_block_stop", "index": 1},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {}},
        {"type": "message_stop"},
    ]
    return [(e["type"], json.dumps(e)) for e in events]


def test_an_unknown_delta_fills_its_block_which_goes_back_whole() -> None:
    out = streamed("anthropic",
        _events(
            {"type": "future_delta", "content": "abc"},
            {"type": "future_delta", "content": "déf", "status": "done", "n": 2},
        )
    )
    final = out[-1]
    assert isinstance(final, ModelResponse)
    (block,) = final.message.server_tools
    assert block.data() == {
        "type": "future_tool_result",
        "tool_use_id": "srvtoolu_1",
        "content": "abcdéf",
        "status": "done",
        "n": 2,
    }
    # no delta for it: it is no text, thinking or call
    assert [d.content for d in out if isinstance(d, Delta)] == ["Done."]
    body = body_of(
        "anthropic", ModelRequest([Message("user", "q"), final.message, Message("user", "more")])
    )
    assert body["messages"][1]["content"][0] == block.data()


def test_a_text_delta_for_a_block_that_is_not_text_streams_no_text() -> None:
    # it used to stream as text that the final message did not have
    out = streamed("anthropic", _events({"type": "text_delta", "text": "stray"}))
    text = "".join(d.content for d in out if isinstance(d, Delta))
    final = out[-1]
    assert isinstance(final, ModelResponse)
    assert text == final.message.content == "Done."
    assert final.message.server_tools[0].data()["text"] == "stray"


def _server_bodies() -> list[dict[str, Any]]:
    if not available("anthropic"):
        return []
    out = []
    for it in all_interactions("anthropic"):
        if it.is_stream or it.status != 200:
            continue
        try:
            body = json.loads(it.body)
        except ValueError:
            continue
        if not isinstance(body, dict) or not isinstance(body.get("content"), list):
            continue
        own = ("text", "thinking", "redacted_thinking", "tool_use")
        if any(b.get("type") not in own for b in body["content"]):
            out.append(body)
    return out


SERVER_BODIES = _server_bodies()


def _streamed(body: dict[str, Any], data: st.DataObject) -> list[tuple[str, str]]:
    """`body` streamed with the top-level text fields of its server blocks arriving in
    pieces, in deltas of a type golem does not know (the other blocks whole at their start,
    the text in one `text_delta`)."""
    message = {k: v for k, v in body.items() if k != "content"}
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": {**message, "content": []}}
    ]
    for i, b in enumerate(body["content"]):
        if b.get("type") == "text":
            start = {**b, "text": ""}
            events.append({"type": "content_block_start", "index": i, "content_block": start})
            if b["text"]:
                delta = {"type": "text_delta", "text": b["text"]}
                events.append({"type": "content_block_delta", "index": i, "delta": delta})
            continue
        own = b.get("type") in ("thinking", "redacted_thinking", "tool_use")
        texts = {} if own else {k: v for k, v in b.items() if k != "type" and isinstance(v, str)}
        start = {**b, **dict.fromkeys(texts, "")}
        events.append({"type": "content_block_start", "index": i, "content_block": start})
        for key, value in texts.items():
            cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(value) - 1)), max_size=4)))
            pieces = [value[a:b] for a, b in zip([0, *cuts], [*cuts, len(value)], strict=True)]
            for piece in pieces:
                delta = {"type": "golem_unknown_delta", key: piece}
                events.append({"type": "content_block_delta", "index": i, "delta": delta})
        events.append({"type": "content_block_stop", "index": i})
    delta = {"stop_reason": body.get("stop_reason"), "container": body.get("container")}
    events.append({"type": "message_delta", "delta": delta, "usage": body.get("usage") or {}})
    events.append({"type": "message_stop"})
    return [(e["type"], json.dumps(e)) for e in events]


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_server_blocks_streamed_in_unknown_deltas_equal_the_unstreamed_answer(
    data: st.DataObject,
) -> None:
    if not SERVER_BODIES:
        return
    body = data.draw(st.sampled_from(SERVER_BODIES))
    final = streamed("anthropic", _streamed(body, data))[-1]
    assert isinstance(final, ModelResponse)
    whole = parsed("anthropic", body)
    assert final.message == whole.message
    assert final.finish_reason == whole.finish_reason


def test_there_are_recorded_server_blocks() -> None:
    if available("anthropic"):
        assert len(SERVER_BODIES) >= 5
