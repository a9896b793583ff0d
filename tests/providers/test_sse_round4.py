"""Fourth round of traffic the recordings do not show: properties over every recorded stream.

Each recorded stream of the four APIs (every one, drawn by Hypothesis, not the first few)
goes through its adapter's HTTP path re-framed and damaged the ways the SSE standard allows
and servers, proxies and newer API versions do. The properties:

- (i) the bytes cut into chunks anywhere, preferring the hard places (inside a multi-byte
  UTF-8 character, between the `\\r` and `\\n` of a line ending), give the same deltas and
  response as the stream in one piece;
- (ii) `\\n`, `\\r\\n` and `\\r` line endings, mixed line by line, give the same result;
- (iii) what the standard says a reader ignores is ignored: comment lines, `id:` and
  `retry:` lines, fields of unknown names, lines without a colon, a space or none after
  `data:`, events of unknown names carrying data of an unknown type, blocks without data;
- (iv) a stream cut off anywhere (framed any way) is a retryable `ProviderError` or the
  whole answer, never another exception;
- (v) unknown JSON fields in every object of every event, and unknown block / part / item
  types among the known ones, are tolerated: the same answer (the unknown fields are kept
  only inside the provider blocks golem keeps verbatim), or, for unknown items, the same
  calls, finish and usage with the unknown item kept or skipped. The non-streamed answers
  of the four APIs get the same damage.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from golem.errors import GolemError, ProviderError
from golem.model import Delta, ModelResponse
from tests.support.adapters import accumulated, plain_calls, send
from tests.support.recordings import all_interactions, available, needs_recordings
from tests.support.streams import FIXTURES, events_of, plain

UNKNOWN = "golem_unknown"
"""The name of every field and type this file makes up."""


def _recorded_streams() -> list[tuple[str, list[tuple[str, str]]]]:
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


def _recorded_bodies() -> list[tuple[str, str]]:
    out = []
    for api in ("openai-chat", "openai-responses", "anthropic", "gemini"):
        if not available(api):
            continue
        for it in all_interactions(api):
            if not it.is_stream and it.status == 200 and it.body.lstrip().startswith("{"):
                out.append((api, it.body))
    return out


STREAMS = _recorded_streams()
BODIES = _recorded_bodies()

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# --------------------------------------------------------------------------- framing


async def _baseline(api: str, events: list[tuple[str, str]]) -> list[Delta | ModelResponse]:
    return await send(api, [plain(events)], stream=True)


# --------------------------------------------------------------------------- (i)-(iii)


# --------------------------------------------------------------------------- (iv)


# --------------------------------------------------------------------------- (v)

_KEPT_AS_WRITTEN = frozenset(("input", "args", "arguments", "partialArgs", "partial_json"))
"""Keys whose values are the model's own JSON (tool arguments): an added field would change
what the model said, not the shape of the answer."""


def _with_unknown_fields(value: Any, draw: st.DrawFn) -> Any:
    """`value` with an unknown field added to some of its objects (never inside arguments)."""
    if isinstance(value, dict):
        out = {
            k: v if k in _KEPT_AS_WRITTEN else _with_unknown_fields(v, draw)
            for k, v in value.items()
        }
        if draw(st.booleans()):
            extra = draw(
                st.one_of(
                    st.none(),
                    st.integers(-5, 5),
                    st.text(max_size=3),
                    st.just({"type": UNKNOWN, "text": "é"}),
                    st.just([{"type": UNKNOWN}]),
                )
            )
            out[UNKNOWN] = extra
        return out
    if isinstance(value, list):
        return [_with_unknown_fields(v, draw) for v in value]
    return value


def _strip_unknown(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_unknown(v) for k, v in value.items() if k != UNKNOWN}
    if isinstance(value, list):
        return [_strip_unknown(v) for v in value]
    return value


def _comparable(value: Any) -> Any:
    """A result as plain data, the provider objects golem keeps verbatim (`raw`) read as
    JSON without the unknown fields."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {}
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            if f.name == "raw" and isinstance(item, str) and item:
                with contextlib.suppress(ValueError):
                    item = json.dumps(_strip_unknown(json.loads(item)), sort_keys=True)
            out[f.name] = _comparable(item)
        return out
    if isinstance(value, list):
        return [_comparable(v) for v in value]
    return value


@needs_recordings
@SETTINGS
@given(data=st.data())
async def test_unknown_fields_in_answers_are_tolerated(data: st.DataObject) -> None:
    api, body = data.draw(st.sampled_from(BODIES))
    try:
        expected = await send(api, body, stream=False)
    except GolemError:
        assume(False)  # a recorded answer the adapter refuses: not this property's concern
    damaged = json.dumps(_with_unknown_fields(json.loads(body), data.draw), ensure_ascii=False)
    got = await send(api, damaged, stream=False)
    assert _comparable(got) == _comparable(expected)


# unknown item types: one made-up item among the known ones of each list that holds them

_ITEM_LISTS = {
    "anthropic": ("content",),
    "openai-responses": ("output", "content", "summary"),
    "gemini": ("parts",),
    "openai-chat": ("content", "tool_calls", "annotations"),
}


def _unknown_item(api: str) -> dict[str, Any]:
    if api == "gemini":
        return {UNKNOWN: {"value": "é"}}
    return {"type": UNKNOWN, "id": "x_unknown_1", "value": "é"}


def _with_unknown_items(value: Any, api: str, draw: st.DrawFn, key: str = "") -> Any:
    if isinstance(value, dict):
        return {
            k: v if k in _KEPT_AS_WRITTEN else _with_unknown_items(v, api, draw, k)
            for k, v in value.items()
        }
    if isinstance(value, list):
        out = [_with_unknown_items(v, api, draw) for v in value]
        lists_items = key in _ITEM_LISTS[api] and all(isinstance(v, dict) for v in out)
        if lists_items and out and draw(st.booleans()):
            out.insert(draw(st.integers(0, len(out))), _unknown_item(api))
        return out
    return value


def _essentials(response: ModelResponse) -> Any:
    m = response.message
    return (
        [(c.id, c.name, c.args) for c in m.tool_calls],
        m.content.replace("\n\n", ""),
        "".join(t.text for t in m.thinking),  # an unknown item between thoughts parts them
        response.finish_reason,
        response.usage,
    )


@needs_recordings
@SETTINGS
@given(data=st.data())
async def test_unknown_item_types_in_answers_are_tolerated(data: st.DataObject) -> None:
    api, body = data.draw(st.sampled_from(BODIES))
    try:
        (expected,) = await send(api, body, stream=False)
    except GolemError:
        assume(False)
    assert isinstance(expected, ModelResponse)
    damaged = _with_unknown_items(json.loads(body), api, data.draw)
    (got,) = await send(api, json.dumps(damaged, ensure_ascii=False), stream=False)
    assert isinstance(got, ModelResponse)
    assert _essentials(got) == _essentials(expected)


# --------------------------------------------------------------------------- found by the above


def _chat_body(tool_calls: list[dict[str, Any]]) -> str:
    message = {"role": "assistant", "content": None, "tool_calls": tool_calls}
    choice = {"index": 0, "message": message, "finish_reason": "tool_calls"}
    return json.dumps({"id": "x", "object": "chat.completion", "model": "m", "choices": [choice]})


_CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "look", "arguments": '{"at": "sky"}'},
}
_FOREIGN = {"id": "x_1", "type": UNKNOWN, UNKNOWN: {"what": "é"}}


async def test_a_chat_tool_call_of_an_unknown_type_is_skipped() -> None:
    # it was a call without a name: a ResponseFormatError that lost the answer
    (response,) = await send("openai-chat", _chat_body([_FOREIGN, _CALL]), stream=False)
    assert isinstance(response, ModelResponse)
    assert [(c.id, c.name) for c in response.message.tool_calls] == [("call_1", "look")]


def _chat_chunks(*tool_calls: dict[str, Any]) -> list[tuple[str, str]]:
    out = []
    for tc in tool_calls:
        choice = {"index": 0, "delta": {"tool_calls": [tc]}, "finish_reason": None}
        out.append(("", json.dumps({"id": "x", "model": "m", "choices": [choice]})))
    last = {"index": 0, "delta": {}, "finish_reason": "tool_calls"}
    out.append(("", json.dumps({"id": "x", "model": "m", "choices": [last]})))
    return [*out, ("", "[DONE]")]


async def test_streamed_fragments_of_a_chat_tool_call_of_an_unknown_type_are_skipped() -> None:
    events = _chat_chunks(
        {"index": 0, **_FOREIGN},
        {"index": 0, UNKNOWN: {"more": "x"}},
        {"index": 1, **_CALL, "function": {"name": "look", "arguments": '{"at": '}},
        {"index": 1, "function": {"arguments": '"sky"}'}},
    )
    items = await send("openai-chat", [plain(events)], stream=True)
    response = items[-1]
    assert isinstance(response, ModelResponse)
    assert [(c.id, c.name, c.args) for c in response.message.tool_calls] == [
        ("call_1", "look", '{"at": "sky"}')
    ]
    assert [d.index for i in items if isinstance(i, Delta) for d in i.tool_calls] == [0, 0]


async def test_a_streamed_custom_tool_call_keeps_its_name_and_input() -> None:
    # the unstreamed answer read `custom`; the stream read only `function` (a nameless call)
    events = _chat_chunks(
        {"index": 0, "id": "call_9", "type": "custom", "custom": {"name": "sh", "input": "ls "}},
        {"index": 0, "custom": {"input": "-l"}},
    )
    items = await send("openai-chat", [plain(events)], stream=True)
    response = items[-1]
    assert isinstance(response, ModelResponse)
    assert [(c.id, c.name, c.args) for c in response.message.tool_calls] == [
        ("call_9", "sh", "ls -l")
    ]


@needs_recordings
@SETTINGS
@given(data=st.data())
async def test_an_answer_cut_off_anywhere_is_a_named_error_or_whole(data: st.DataObject) -> None:
    api, body = data.draw(st.sampled_from(BODIES))
    try:
        (expected,) = await send(api, body, stream=False)
    except GolemError:
        assume(False)
    raw = body.encode()
    end = data.draw(st.integers(0, len(raw)))
    try:
        (got,) = await send(api, [raw[:end]], stream=False)
    except ProviderError:
        return  # named (an empty body is retryable; a cut one is "not JSON")
    assert isinstance(got, ModelResponse)
    assert got == expected


# --------------------------------------------------------------------------- arguments whole


def _unstreamed_arguments(api: str, events: list[tuple[str, str]], in_start: bool) -> list[Any]:
    """`events` as a server sends them that does not stream tool-call arguments: Anthropic
    puts the whole `input` in the block's start; Responses puts the `arguments` in the added
    item (`in_start`) or only in the events that end the call."""
    parsed = [(e, json.loads(d)) if d.lstrip().startswith("{") else (e, d) for e, d in events]
    args: dict[int, str] = {}
    for _, d in parsed:
        if not isinstance(d, dict):
            continue
        delta = d.get("delta")
        if d.get("type") == "content_block_delta" and isinstance(delta, dict):
            if delta.get("type") == "input_json_delta":
                args[d["index"]] = args.get(d["index"], "") + delta["partial_json"]
        elif d.get("type") == "response.function_call_arguments.delta":
            args[d["output_index"]] = args.get(d["output_index"], "") + d["delta"]
    out: list[Any] = []
    for e, d in parsed:
        if not isinstance(d, dict):
            out.append((e, d))
            continue
        kind = d.get("type")
        if kind == "content_block_delta" and d["delta"].get("type") == "input_json_delta":
            continue
        if kind == "response.function_call_arguments.delta":
            continue
        if kind == "content_block_start" and d["content_block"].get("type") == "tool_use":
            text = args.get(d["index"], "")
            d = {**d, "content_block": {**d["content_block"], "input": json.loads(text or "{}")}}
        if kind == "response.output_item.added" and d["item"].get("type") == "function_call":
            whole = args.get(d["output_index"], "") if in_start else ""
            d = {**d, "item": {**d["item"], "arguments": whole}}
        out.append((e, json.dumps(d)))
    return out


CALLING = [
    (api, events)
    for api, events in STREAMS
    if api in ("anthropic", "openai-responses")
    and any("input_json_delta" in d or "function_call_arguments.delta" in d for _, d in events)
]


def test_there_are_streamed_calls_of_both_apis() -> None:
    if available():
        assert {api for api, _ in CALLING} == {"anthropic", "openai-responses"}


@needs_recordings
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
async def test_arguments_that_arrive_whole_stream_as_one_fragment(data: st.DataObject) -> None:
    # the deltas of a call whose arguments were not streamed had no arguments at all
    assume(CALLING)
    api, events = data.draw(st.sampled_from(CALLING))
    original = (await _baseline(api, events))[-1]
    assert isinstance(original, ModelResponse)
    damaged = _unstreamed_arguments(api, events, data.draw(st.booleans()))
    items = await send(api, [plain(damaged)], stream=True)
    response = items[-1]
    assert isinstance(response, ModelResponse)
    assert accumulated(items) == plain_calls(response)
    assert [json.loads(c.args or "{}") for c in response.message.tool_calls] == [
        json.loads(c.args or "{}") for c in original.message.tool_calls
    ]


_AS_TEXT = '{"a": 1, "b": [true, null]}'


@pytest.mark.parametrize(
    ("api", "body"),
    [
        (
            "openai-responses",
            {
                "id": "r",
                "object": "response",
                "status": "completed",
                "output": [
                    {"type": "function_call", "call_id": "c", "name": "f", "arguments": "OBJ"}
                ],
            },
        ),
        (
            "anthropic",
            {
                "type": "message",
                "content": [{"type": "tool_use", "id": "t", "name": "f", "input": "TEXT"}],
                "stop_reason": "tool_use",
            },
        ),
        (
            "gemini",
            {
                "candidates": [
                    {
                        "content": {"parts": [{"functionCall": {"name": "f", "args": "TEXT"}}]},
                        "finishReason": "STOP",
                    }
                ]
            },
        ),
    ],
)
async def test_arguments_in_the_other_json_form_are_read(api: str, body: dict[str, Any]) -> None:
    # Responses arguments sent as an object were lost (""); Anthropic input and Gemini args
    # sent as text holding an object became a JSON string, which no tool takes
    text = json.dumps(body).replace('"OBJ"', _AS_TEXT).replace('"TEXT"', json.dumps(_AS_TEXT))
    (response,) = await send(api, text, stream=False)
    assert isinstance(response, ModelResponse)
    (call,) = response.message.tool_calls
    assert json.loads(call.args) == {"a": 1, "b": [True, None]}


async def test_a_streamed_tool_use_start_with_its_input_as_text_streams_it() -> None:
    start = {"type": "tool_use", "id": "toolu_1", "name": "f", "input": _AS_TEXT}
    events = [
        {"type": "message_start", "message": {"model": "m", "usage": {}}},
        {"type": "content_block_start", "index": 0, "content_block": start},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {}},
        {"type": "message_stop"},
    ]
    items = await send(
        "anthropic", [plain([(e["type"], json.dumps(e)) for e in events])], stream=True
    )
    response = items[-1]
    assert isinstance(response, ModelResponse)
    assert accumulated(items) == plain_calls(response)
    assert response.message.tool_calls[0].args == _AS_TEXT
