"""Provider answers the adapters never saw: every failure is a named golem error.

The recorded exchanges of all four APIs are replayed with random damage — a value swapped for
one of another type, a key dropped, an unknown one added, a stream event dropped, repeated or
cut short, an error status on a success body. Whatever the adapter makes of it, it either
answers or raises a `GolemError` (a `ProviderError` for the caller to classify); a `KeyError`
or `TypeError` escaping from a parser is a bug. The examples below pin the cases this found.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from golem.errors import GolemError
from golem.model import Delta, ThinkingDelta
from tests._json_paths import json_paths
from tests.support.adapters import DONE, parsed, send, streamed
from tests.support.events import sse
from tests.support.recordings import APIS, Interaction, all_interactions, available

_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),
    st.text(max_size=8),
    st.sampled_from(["\x00", "9" * 400, "text", "tool_use", "thinking", "function_call"]),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.sampled_from(["type", "index", "text", "id"]), st.integers(), max_size=2),
)


def _damage(value: Any, data: st.DataObject) -> Any:
    """`value` (parsed JSON) with one random change somewhere inside."""
    paths = json_paths(value)[1:]
    if not paths:
        return data.draw(_VALUES)
    path = data.draw(st.sampled_from(paths))
    parent = value
    for key in path[:-1]:
        parent = parent[key]
    how = data.draw(st.sampled_from(["replace", "drop", "add"]))
    if how == "drop" and isinstance(parent, dict):
        del parent[path[-1]]
    elif how == "add" and isinstance(parent, dict):
        parent["golem_unknown"] = data.draw(_VALUES)
    elif how == "add":
        parent.insert(path[-1], data.draw(_VALUES))
    else:
        parent[path[-1]] = data.draw(_VALUES)
    return value


def _damage_stream(body: str, data: st.DataObject) -> str:
    lines = body.split("\n")
    events = [i for i, line in enumerate(lines) if line.startswith("data:")]
    if not events:
        return body[: data.draw(st.integers(0, len(body)))]
    i = data.draw(st.sampled_from(events))
    how = data.draw(st.sampled_from(["change", "change", "drop", "repeat", "cut"]))
    if how == "drop":
        del lines[i]
    elif how == "repeat":
        lines.insert(i, lines[i])
    elif how == "cut":
        lines = lines[:i]
    else:
        try:
            event = json.loads(lines[i][5:])
        except ValueError:
            return body
        lines[i] = "data: " + json.dumps(_damage(event, data), allow_nan=True)
    return "\n".join(lines)


def _recorded(api: str) -> list[Interaction]:
    """The model calls among the recorded exchanges (not the file downloads beside them)."""
    if not available(api):
        return []
    return [it for it in all_interactions(api) if it.is_stream or it.body.lstrip().startswith("{")]


_RECORDED = {api: _recorded(api) for api in APIS}


async def _replay(api: str, it: Interaction, status: int, body: str) -> None:
    ctype = it.headers.get("content-type", "application/json")
    await send(api, body, stream=it.is_stream, ctype=ctype, status=status)


@pytest.mark.parametrize("api", APIS)
@settings(
    deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(data=st.data())
async def test_a_damaged_recorded_answer_fails_only_with_golem_errors(
    api: str, data: st.DataObject
) -> None:
    recorded = _RECORDED[api]
    if not recorded:
        pytest.skip(f"no {api} recordings")
    it = data.draw(st.sampled_from(recorded), label="interaction")
    body = it.body
    for _ in range(data.draw(st.integers(1, 3), label="changes")):
        if it.is_stream:
            body = _damage_stream(body, data)
        else:
            try:
                body = json.dumps(_damage(json.loads(body), data), allow_nan=True)
            except ValueError:
                break
    status = data.draw(st.sampled_from([it.status] * 6 + [400, 429, 500, 529]), label="status")
    with contextlib.suppress(GolemError):  # a named failure; anything else escapes and fails
        await _replay(api, it, status, body)


# ------------------------------------------------------------------ the cases it found


def _anthropic(kind: str, *deltas: dict[str, Any]) -> list[Any]:
    """The deltas of an Anthropic stream of one `kind` block receiving `deltas`."""
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": {"model": "m", "usage": {"input_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": kind}},
        *({"type": "content_block_delta", "index": 0, "delta": d} for d in deltas),
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {}},
        {"type": "message_stop"},
    ]
    return streamed("anthropic", sse(events, named=True))[:-1]


def test_a_thinking_delta_for_a_text_block_is_ignored() -> None:
    thinking = {"type": "thinking_delta", "thinking": "x"}
    signature = {"type": "signature_delta", "signature": "s"}
    text = {"type": "text_delta", "text": "hi"}
    assert _anthropic("text", thinking, signature, text) == [Delta(content="hi")]


def test_a_thinking_delta_still_reaches_its_thinking_block() -> None:
    got = _anthropic("thinking", {"type": "thinking_delta", "thinking": "hm"})
    assert got == [Delta(thinking=[ThinkingDelta(0, text="hm")])]


@pytest.mark.parametrize("kind", [["response.completed"], {"a": 1}, 7, None])
def test_a_responses_event_whose_type_is_not_a_string_is_ignored(kind: Any) -> None:
    done = {"type": "response.completed", "response": {**DONE["openai-responses"], "output": []}}
    items = streamed("openai-responses", sse([{"type": kind, "delta": "x"}, done]))
    assert [i for i in items if isinstance(i, Delta)] == []


def test_responses_items_whose_lists_are_not_lists_are_read_as_empty() -> None:
    body = {
        "id": "resp_1",
        "status": "completed",
        "output": [
            {"type": "reasoning", "id": "rs_1", "summary": 3, "content": "no"},
            {"type": "message", "content": 5},
            {"type": "message", "content": [{"type": "output_text", "text": "ok"}]},
        ],
    }
    assert parsed("openai-responses", body).message.content == "ok"


def test_chat_stream_tool_calls_that_are_not_a_list_are_ignored() -> None:
    chunk = {"choices": [{"index": 0, "delta": {"content": "a", "tool_calls": 5}}]}
    stop = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    assert streamed("openai-chat", sse([chunk, stop]))[:-1] == [Delta(content="a")]
