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

from golem.errors import ResponseFormatError
from golem.model import Delta, ModelResponse
from tests.support.adapters import accumulated, final, plain_calls, send
from tests.support.events import (
    RESPONSE,
    RESPONSE_USAGE,
    anthropic_tool_stream,
    chat_body_of,
    chat_chunk,
    chat_chunk_event,
    drawn_pieces,
    fragments,
    gemini_body_of,
    responses_streamed,
    sse,
)
from tests.support.recordings import available
from tests.support.streams import CALLING, plain
from tests.support.unknown import UNKNOWN

_ARG_TEXTS = st.one_of(
    st.builds(
        lambda n, s: json.dumps({"n": n, "s": s}, ensure_ascii=False),
        st.integers(min_value=2**53, max_value=2**80),
        st.text(alphabet='a😀𝄞€\u00e9\\"', max_size=6),
    ),
    st.sampled_from(['{"a": 1', "not json", '{"a": NaN}', "", '{"big": 1e400}', "[1, 2]"]),
)


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


_ARGS = st.dictionaries(
    st.text(min_size=1, max_size=4),
    st.one_of(
        st.integers(), st.text(max_size=6), st.dictionaries(st.text(max_size=3), st.booleans())
    ),
    max_size=3,
).map(lambda d: json.dumps(d, ensure_ascii=False))


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


NAMELESS: dict[str, tuple[str, str]] = {
    "openai-chat": (
        chat_body_of(
            {
                "role": "assistant",
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"arguments": '{"a":1}'}}
                ],
            }
        ),
        chat_chunk_event(
            {"tool_calls": [{"index": 0, "id": "c1", "function": {"arguments": '{"a":1}'}}]}
        )
        + chat_chunk_event({}, "tool_calls")
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
    "gemini": (gemini_body_of([{"functionCall": {"args": {"a": 1}}}]), ""),
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
        + [{"index": i, "function": {"arguments": frag}} for frag in fragments(a, cuts)]
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
    items = await send("anthropic", anthropic_tool_stream(calls), stream=True)
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

    stream = sse(
        [
            chat_chunk({"role": "assistant", "tool_calls": [whole("f", '{"x":1}')]}),
            chat_chunk({"tool_calls": [whole("g", "{}")]}),
            chat_chunk({"tool_calls": [whole("g", '{"y": 2}')]}),
            chat_chunk({}, "tool_calls"),
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

    stream = sse(
        [
            chat_chunk({"role": "assistant", "tool_calls": [{**piece(""), "id": "call_1"}]}),
            chat_chunk({"tool_calls": [piece('{"a": ')]}),
            chat_chunk({"tool_calls": [piece('{"b": 1}')]}),
            chat_chunk({"tool_calls": [piece("}")]}),
            chat_chunk({}, "tool_calls"),
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
        pieces = drawn_pieces(data, args) if style not in ("whole", "whole_unindexed") else [args]
        for j, piece in enumerate(pieces):
            tc: dict[str, Any] = {"function": {"arguments": piece}}
            if style != "whole_unindexed":
                tc["index"] = 0 if style in ("ollama", "whole") else i
            if j == 0 or style == "names_repeated":
                tc["function"]["name"] = name
                tc["type"] = "function"
            if j == 0 and style in ("openai", "ollama", "names_repeated"):
                tc["id"] = f"call_{i}"
            chunks.append(chat_chunk({"tool_calls": [tc]}))
    chunks += [chat_chunk({}, "tool_calls"), "[DONE]"]
    out = asyncio.run(send("openai-chat", sse(chunks), stream=True))
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
    stream = sse(
        [
            chat_chunk({"role": "assistant", "tool_calls": [first]}),
            chat_chunk({"tool_calls": [{"index": "0", "function": {"arguments": '"x": 1}'}}]}),
            chat_chunk({}, "tool_calls"),
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
    stream = sse(
        [
            chat_chunk({"role": "assistant", "content": None, "function_call": fn}),
            chat_chunk({"function_call": {"arguments": '{"city":'}}),
            chat_chunk({"function_call": {"arguments": ' "Paris"}'}}),
            chat_chunk({}, "function_call"),
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
            "response": {
                **RESPONSE,
                "status": "completed",
                "output": output,
                "usage": RESPONSE_USAGE,
            },
        }
    )
    items, response = await responses_streamed(events)
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
