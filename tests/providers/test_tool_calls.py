"""Tool calls however each API sends them, through each adapter's HTTP path, streamed and
not: parallel calls with interleaved fragments, however a server numbers them (by index,
digits, none, the same one twice); IDs repeated or missing (renamed `<id>_2` or made up,
alike in the deltas and the final response); legacy `function_call`s; calls of a type golem
does not know (skipped) and custom tool calls (kept); a call without a name (a retryable
`ResponseFormatError`). Their arguments: test_tool_call_arguments.py.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from golem.errors import (
    ResponseFormatError,
)
from golem.model import Delta, ModelResponse
from tests.support.adapters import accumulated, final, plain_calls, send
from tests.support.recordings import all_interactions, available
from tests.support.streams import FIXTURES, events_of, plain


def sse(events: list[dict[str, Any]], *, named: bool = False, done: bool = False) -> str:
    out = []
    for e in events:
        head = f"event: {e['type']}\n" if named else ""
        out.append(f"{head}data: {json.dumps(e, ensure_ascii=False)}\n\n")
    if done:
        out.append("data: [DONE]\n\n")
    return "".join(out)


_ARG_TEXTS = st.one_of(
    st.builds(
        lambda n, s: json.dumps({"n": n, "s": s}, ensure_ascii=False),
        st.integers(min_value=2**53, max_value=2**80),
        st.text(alphabet='a😀𝄞€\u00e9\\"', max_size=6),
    ),
    st.sampled_from(['{"a": 1', "not json", '{"a": NaN}', "", '{"big": 1e400}', "[1, 2]"]),
)


def _fragments(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts})
    out, last = [], 0
    for p in [*points, len(text)]:
        if p > last:
            out.append(text[last:p])
        last = p
    return out


def _chunk_event(delta: dict[str, Any], finish: str | None = None) -> str:
    """A Chat Completions chunk of `delta` as one SSE event."""
    body = {
        "id": "x",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return f"data: {json.dumps(body)}\n\n"


def _chat_calls_body(tool_calls: list[dict[str, Any]]) -> str:
    """A Chat Completions answer of `tool_calls`."""
    message = {"role": "assistant", "content": None, "tool_calls": tool_calls}
    choice = {"index": 0, "message": message, "finish_reason": "tool_calls"}
    return json.dumps({"id": "x", "object": "chat.completion", "model": "m", "choices": [choice]})


def _chat_body(ids: list[str]) -> str:
    calls = [
        {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in ids
    ]
    message = {"role": "assistant", "content": None, "tool_calls": calls}
    return json.dumps(
        {"choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]}
    )


def _anthropic_stream(calls: list[tuple[str, str]], stop: str = "tool_use") -> str:
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": {"model": "claude-x", "usage": {"input_tokens": 3}}}
    ]
    for i, (call_id, args) in enumerate(calls):
        block = {"type": "tool_use", "id": call_id, "name": "f", "input": {}}
        events.append({"type": "content_block_start", "index": i, "content_block": block})
        for frag in _fragments(args, [3, 7]):
            delta = {"type": "input_json_delta", "partial_json": frag}
            events.append({"type": "content_block_delta", "index": i, "delta": delta})
        events.append({"type": "content_block_stop", "index": i})
    events.append({"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {}})
    events.append({"type": "message_stop"})
    return sse(events, named=True)


def _responses_stream(items: list[dict[str, Any]]) -> str:
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": {"id": "resp_1", "status": "in_progress"}}
    ]
    for i, item in enumerate(items):
        events.append({"type": "response.output_item.added", "output_index": i, "item": item})
        events.append(
            {
                "type": "response.function_call_arguments.delta",
                "output_index": i,
                "delta": item["arguments"],
            }
        )
    done = {"id": "resp_1", "status": "completed", "output": items}
    events.append({"type": "response.completed", "response": done})
    return sse(events, named=True)


def _sse(events: list[Any], named: bool = False) -> str:
    out = []
    for e in events:
        data = e if isinstance(e, str) else json.dumps(e)
        name = f"event: {e['type']}\n" if named and not isinstance(e, str) else ""
        out.append(f"{name}data: {data}\n\n")
    return "".join(out)


def _chunk(delta: dict[str, Any], finish: str | None = None, index: int = 0) -> dict[str, Any]:
    return {
        "id": "c",
        "object": "chat.completion.chunk",
        "model": "gpt-4o",
        "choices": [{"index": index, "delta": delta, "finish_reason": finish}],
    }


_R = {"id": "resp_1", "object": "response", "model": "gpt-5"}


_USAGE_R = {"input_tokens": 5, "output_tokens": 3}


async def _responses(events: list[dict[str, Any]]) -> tuple[list[Any], ModelResponse]:
    items = await send("openai-responses", _sse(events, named=True), stream=True)
    return items, final(items)


def _pieces(data: st.DataObject, text: str) -> list[str]:
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(text) - 1)), max_size=3)))
    out, last = [], 0
    for c in [*cuts, len(text)]:
        if c > last:
            out.append(text[last:c])
            last = c
    return out


_ARGS = st.dictionaries(
    st.text(min_size=1, max_size=4),
    st.one_of(
        st.integers(), st.text(max_size=6), st.dictionaries(st.text(max_size=3), st.booleans())
    ),
    max_size=3,
).map(lambda d: json.dumps(d, ensure_ascii=False))


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


STREAMS = _recorded_streams()


_CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "look", "arguments": '{"at": "sky"}'},
}


_FOREIGN = {"id": "x_1", "type": UNKNOWN, UNKNOWN: {"what": "é"}}


def _chat_chunks(*tool_calls: dict[str, Any]) -> list[tuple[str, str]]:
    out = []
    for tc in tool_calls:
        choice = {"index": 0, "delta": {"tool_calls": [tc]}, "finish_reason": None}
        out.append(("", json.dumps({"id": "x", "model": "m", "choices": [choice]})))
    last = {"index": 0, "delta": {}, "finish_reason": "tool_calls"}
    out.append(("", json.dumps({"id": "x", "model": "m", "choices": [last]})))
    return [*out, ("", "[DONE]")]


CALLING = [
    (api, events)
    for api, events in STREAMS
    if api in ("anthropic", "openai-responses")
    and any("input_json_delta" in d or "function_call_arguments.delta" in d for _, d in events)
]


def _chat(message: dict[str, Any]) -> str:
    return json.dumps(
        {
            "id": "x",
            "object": "chat.completion",
            "model": "gpt-4o-audio-preview",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        }
    )


def _gemini(parts: list[dict[str, Any]]) -> str:
    return json.dumps({"candidates": [{"content": {"parts": parts}, "finishReason": "STOP"}]})


NAMELESS: dict[str, tuple[str, str]] = {
    "openai-chat": (
        _chat(
            {
                "role": "assistant",
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"arguments": '{"a":1}'}}
                ],
            }
        ),
        _chunk_event(
            {"tool_calls": [{"index": 0, "id": "c1", "function": {"arguments": '{"a":1}'}}]}
        )
        + _chunk_event({}, "tool_calls")
        + "data: [DONE]\n\n",
    ),
    "anthropic": (
        json.dumps(
            {
                "id": "m",
                "type": "message",
                "role": "assistant",
                "model": "m",
                "content": [{"type": "tool_use", "id": "toolu_1", "input": {"a": 1}}],
                "stop_reason": "tool_use",
                "usage": {},
            }
        ),
        "",
    ),
    "gemini": (_gemini([{"functionCall": {"args": {"a": 1}}}]), ""),
    "openai-responses": (
        json.dumps(
            {
                "id": "r",
                "status": "completed",
                "output": [{"type": "function_call", "call_id": "c1", "arguments": '{"a":1}'}],
            }
        ),
        "",
    ),
}


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    args=st.lists(_ARG_TEXTS, min_size=1, max_size=4),
    cuts=st.lists(st.integers(0, 200), max_size=6),
    order=st.randoms(use_true_random=False),
    same_id=st.booleans(),
)
async def test_chat_parallel_calls_with_interleaved_fragments(
    args: list[str], cuts: list[int], order: Any, same_id: bool
) -> None:
    ids = ["call_same" if same_id else f"call_{i}" for i in range(len(args))]
    queues = [
        [
            {
                "index": i,
                "id": ids[i],
                "type": "function",
                "function": {"name": f"f{i}", "arguments": ""},
            }
        ]
        + [{"index": i, "function": {"arguments": frag}} for frag in _fragments(a, cuts)]
        for i, a in enumerate(args)
    ]
    chunks: list[dict[str, Any]] = []
    while any(queues):
        # a call's header comes after the headers of the calls before it (its `index`
        # orders it); the argument fragments of the calls interleave at random
        headed = [q for q in queues if q and "id" not in q[0]]
        first = next((q for q in queues if q and "id" in q[0]), None)
        q = order.choice(headed + ([first] if first else []))
        chunks.append({"choices": [{"index": 0, "delta": {"tool_calls": [q.pop(0)]}}]})
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    items = await send("openai-chat", sse(chunks, done=True), stream=True)
    response = final(items)
    assert [c.args for c in response.message.tool_calls] == args
    assert [c.name for c in response.message.tool_calls] == [f"f{i}" for i in range(len(args))]
    assert len({c.id for c in response.message.tool_calls}) == len(args)
    assert accumulated(items) == plain_calls(response)
    if same_id:
        assert [c.id for c in response.message.tool_calls][:2] == ["call_same", "call_same_2"][
            : len(args)
        ]


async def test_chat_repeated_ids_are_renamed() -> None:
    response = final(await send("openai-chat", _chat_body(["c", "c", "c_2", "d"]), stream=False))
    assert [c.id for c in response.message.tool_calls] == ["c", "c_2", "c_2_2", "d"]


async def test_anthropic_repeated_ids_are_renamed_alike_in_deltas_and_response() -> None:
    calls = [("toolu_1", '{"n": 9007199254740993}'), ("toolu_1", '{"s": "😀"}')]
    items = await send("anthropic", _anthropic_stream(calls), stream=True)
    response = final(items)
    assert [c.id for c in response.message.tool_calls] == ["toolu_1", "toolu_1_2"]
    assert [c.args for c in response.message.tool_calls] == [a for _, a in calls]
    assert accumulated(items) == plain_calls(response)

    blocks = [{"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}] * 2
    body = json.dumps({"content": blocks, "stop_reason": "tool_use", "model": "claude-x"})
    plain = final(await send("anthropic", body, stream=False))
    assert [c.id for c in plain.message.tool_calls] == ["toolu_1", "toolu_1_2"]


async def test_responses_missing_and_repeated_call_ids() -> None:
    items = [
        {"type": "function_call", "name": "f", "arguments": '{"n": 18446744073709551617}'},
        {"type": "function_call", "name": "f", "arguments": "{}", "call_id": "c"},
        {"type": "function_call", "name": "g", "arguments": "oops", "call_id": "c"},
    ]
    streamed = await send("openai-responses", _responses_stream(items), stream=True)
    response = final(streamed)
    ids = [c.id for c in response.message.tool_calls]
    assert ids[0].startswith("call_")
    assert ids[1:] == ["c", "c_2"]
    assert accumulated(streamed) == plain_calls(response)
    body = json.dumps({"id": "resp_1", "status": "completed", "output": items})
    plain = final(await send("openai-responses", body, stream=False))
    assert plain_calls(plain) == plain_calls(response)


async def test_gemini_repeated_ids_are_renamed_alike_in_deltas_and_response() -> None:
    parts = [
        {"functionCall": {"id": "g1", "name": "f", "args": {"n": 123456789012345678901}}},
        {"functionCall": {"id": "g1", "name": "f", "args": {"s": "𝄞"}}},
    ]
    chunks = [{"candidates": [{"content": {"role": "model", "parts": [p]}}]} for p in parts] + [
        {"candidates": [{"finishReason": "STOP"}]}
    ]
    items = await send("gemini", sse(chunks), stream=True)
    response = final(items)
    assert [c.id for c in response.message.tool_calls] == ["g1", "g1_2"]
    assert json.loads(response.message.tool_calls[0].args) == {"n": 123456789012345678901}
    assert json.loads(response.message.tool_calls[1].args) == {"s": "𝄞"}
    assert accumulated(items) == plain_calls(response)


@pytest.mark.parametrize("index", [0, None])
async def test_whole_chat_calls_numbered_alike_without_ids_stay_apart(index: int | None) -> None:
    """Before: a server that streams each call whole under the same `index` (or none) and
    without an ID had its calls merged into one, `f` with arguments `{"x":1}{}`: the second
    call was lost and the first could not be read."""

    def whole(name: str, args: str) -> dict[str, Any]:
        call: dict[str, Any] = {"type": "function", "function": {"name": name, "arguments": args}}
        return call if index is None else {"index": index, **call}

    stream = _sse(
        [
            _chunk({"role": "assistant", "tool_calls": [whole("f", '{"x":1}')]}),
            _chunk({"tool_calls": [whole("g", "{}")]}),
            _chunk({"tool_calls": [whole("g", '{"y": 2}')]}),
            _chunk({}, "tool_calls"),
            "[DONE]",
        ]
    )
    items = await send("openai-chat", stream, stream=True)
    calls = final(items).message.tool_calls
    assert [(c.name, c.args) for c in calls] == [("f", '{"x":1}'), ("g", "{}"), ("g", '{"y": 2}')]
    assert [(c.name, c.args) for c in accumulated(items)] == [(c.name, c.args) for c in calls]
    assert len({c.id for c in calls}) == 3


async def test_a_chat_call_whose_fragments_repeat_its_name_stays_one_call() -> None:
    def piece(args: str) -> dict[str, Any]:
        return {"index": 0, "type": "function", "function": {"name": "f", "arguments": args}}

    stream = _sse(
        [
            _chunk({"role": "assistant", "tool_calls": [{**piece(""), "id": "call_1"}]}),
            _chunk({"tool_calls": [piece('{"a": ')]}),
            _chunk({"tool_calls": [piece('{"b": 1}')]}),
            _chunk({"tool_calls": [piece("}")]}),
            _chunk({}, "tool_calls"),
            "[DONE]",
        ]
    )
    calls = final(await send("openai-chat", stream, stream=True)).message.tool_calls
    assert [(c.id, c.args) for c in calls] == [("call_1", '{"a": {"b": 1}}')]


@settings(deadline=None)
@given(
    st.data(),
    st.lists(st.tuples(st.sampled_from(["f", "g"]), _ARGS), min_size=1, max_size=4),
    st.sampled_from(["openai", "ollama", "whole", "whole_unindexed", "names_repeated"]),
)
def test_chat_tool_call_deltas_add_up_to_the_calls_however_a_server_numbers_them(
    data: st.DataObject, calls: list[tuple[str, str]], style: str
) -> None:
    """Each way servers number streamed calls — OpenAI's (an index each, the ID and name
    first), Ollama's (every call index 0, each its own ID), whole calls under one index or
    none and without IDs, the name repeated on every fragment — with the arguments cut
    anywhere: the final calls are the calls sent, and the deltas add up to them."""
    chunks: list[Any] = []
    for i, (name, args) in enumerate(calls):
        pieces = _pieces(data, args) if style not in ("whole", "whole_unindexed") else [args]
        for j, piece in enumerate(pieces):
            tc: dict[str, Any] = {"function": {"arguments": piece}}
            if style != "whole_unindexed":
                tc["index"] = 0 if style in ("ollama", "whole") else i
            if j == 0 or style == "names_repeated":
                tc["function"]["name"] = name
                tc["type"] = "function"
            if j == 0 and style in ("openai", "ollama", "names_repeated"):
                tc["id"] = f"call_{i}"
            chunks.append(_chunk({"tool_calls": [tc]}))
    chunks += [_chunk({}, "tool_calls"), "[DONE]"]
    out = asyncio.run(send("openai-chat", _sse(chunks), stream=True))
    got = final(out).message.tool_calls
    assert [(c.name, c.args) for c in got] == calls
    assert [(c.name, c.args) for c in accumulated(out)] == calls


async def test_a_chat_call_index_sent_as_digits_places_its_fragments() -> None:
    """Before: an `index` sent as text (`"0"`) placed nothing, so the call's later fragments
    became a nameless call: a retryable `ResponseFormatError` instead of the answer."""
    first = {
        "index": "0",
        "id": "a",
        "type": "function",
        "function": {"name": "f", "arguments": "{"},
    }
    stream = _sse(
        [
            _chunk({"role": "assistant", "tool_calls": [first]}),
            _chunk({"tool_calls": [{"index": "0", "function": {"arguments": '"x": 1}'}}]}),
            _chunk({}, "tool_calls"),
            "[DONE]",
        ]
    )
    calls = final(await send("openai-chat", stream, stream=True)).message.tool_calls
    assert [(c.id, c.name, c.args) for c in calls] == [("a", "f", '{"x": 1}')]


async def test_a_streamed_legacy_function_call_is_a_call() -> None:
    """Before: a server speaking the legacy `functions` API streams `delta.function_call`
    (name, then argument pieces) and `finish_reason: function_call`; the stream read none of
    it and ended with an empty answer whose finish reason said `tool_call` (the unstreamed
    answer's `message.function_call` was read)."""
    fn = {"name": "get_weather", "arguments": ""}
    stream = _sse(
        [
            _chunk({"role": "assistant", "content": None, "function_call": fn}),
            _chunk({"function_call": {"arguments": '{"city":'}}),
            _chunk({"function_call": {"arguments": ' "Paris"}'}}),
            _chunk({}, "function_call"),
            "[DONE]",
        ]
    )
    items = await send("openai-chat", stream, stream=True)
    response = final(items)
    [call] = response.message.tool_calls
    assert (call.name, call.args) == ("get_weather", '{"city": "Paris"}')
    assert call.id
    assert response.finish_reason == "tool_call"
    assert [(c.id, c.name, c.args) for c in accumulated(items)] == [(call.id, call.name, call.args)]
    body = {
        "id": "c",
        "object": "chat.completion",
        "model": "gpt-4o",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "function_call": fn | {"arguments": '{"city": "Paris"}'},
                },
                "finish_reason": "function_call",
            }
        ],
    }
    plain = final(await send("openai-chat", json.dumps(body), stream=False))
    assert [(c.name, c.args) for c in plain.message.tool_calls] == [(call.name, call.args)]


async def test_responses_calls_named_only_by_item_id_stream_apart() -> None:
    """Before: with no `output_index` on the events (a compatible server names items by
    `item_id`), the second call's `output_item.added` was taken for a repeat of the first
    and its argument deltas were added to the first call's: `{"x":0}{"x":1}`."""

    def call(i: int, args: str = "") -> dict[str, Any]:
        return {
            "type": "function_call",
            "id": f"fc_{i}",
            "call_id": f"call_{i}",
            "name": "f",
            "arguments": args,
            "status": "completed" if args else "in_progress",
        }

    events: list[dict[str, Any]] = []
    for i in range(2):
        events += [
            {"type": "response.output_item.added", "item": call(i)},
            {
                "type": "response.function_call_arguments.delta",
                "item_id": f"fc_{i}",
                "delta": f'{{"x":{i}}}',
            },
            {"type": "response.output_item.done", "item": call(i, f'{{"x":{i}}}')},
        ]
    output = [call(0, '{"x":0}'), call(1, '{"x":1}')]
    events.append(
        {
            "type": "response.completed",
            "response": {**_R, "status": "completed", "output": output, "usage": _USAGE_R},
        }
    )
    items, response = await _responses(events)
    assert (
        [(c.id, c.args) for c in accumulated(items)]
        == [(c.id, c.args) for c in response.message.tool_calls]
        == [("call_0", '{"x":0}'), ("call_1", '{"x":1}')]
    )


def test_there_are_streamed_calls_of_both_apis() -> None:
    if available():
        assert {api for api, _ in CALLING} == {"anthropic", "openai-responses"}


async def test_a_chat_tool_call_of_an_unknown_type_is_skipped() -> None:
    # it was a call without a name: a ResponseFormatError that lost the answer
    (response,) = await send("openai-chat", _chat_calls_body([_FOREIGN, _CALL]), stream=False)
    assert isinstance(response, ModelResponse)
    assert [(c.id, c.name) for c in response.message.tool_calls] == [("call_1", "look")]


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


@pytest.mark.parametrize("api", sorted(NAMELESS))
async def test_a_tool_call_without_a_name_is_a_retryable_format_error(api: str) -> None:
    # it reached the run loop, which failed the run with 'tool "" was not declared'
    body, stream = NAMELESS[api]
    with pytest.raises(ResponseFormatError, match="without a name") as caught:
        await send(api, body, stream=False)
    assert caught.value.retryable
    if stream:
        with pytest.raises(ResponseFormatError, match="without a name"):
            await send(api, stream, stream=True)
