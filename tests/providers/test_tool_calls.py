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
from golem.model import ModelResponse
from tests.support.adapters import accumulated, final, plain_calls, send
from tests.support.events import (
    RESPONSE,
    RESPONSE_USAGE,
    answer,
    chat_body_of,
    chat_chunk,
    chat_chunk_event,
    drawn_pieces,
    fragments,
    gemini_body_of,
    responses_streamed,
    sse,
    streamed_form,
)
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


REPEATED = [
    # (api, the IDs sent, their arguments, the IDs kept)
    ("openai-chat", ["c", "c", "c_2", "d"], ["{}"] * 4, ["c", "c_2", "c_2_2", "d"]),
    ("anthropic", ["toolu_1", "toolu_1"], ['{"n": 9007199254740993}', '{"s": "😀"}'],
     ["toolu_1", "toolu_1_2"]),
    ("openai-responses", [None, "c", "c"], ['{"n": 18446744073709551617}', "{}", "oops"],
     [None, "c", "c_2"]),
    ("gemini", ["g1", "g1"], [{"n": 123456789012345678901}, {"s": "𝄞"}], ["g1", "g1_2"]),
]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("api", "ids", "args", "kept"), REPEATED)
async def test_repeated_and_missing_call_ids_are_renamed_alike_in_deltas_and_answer(
    api: str, ids: list[str | None], args: list[Any], kept: list[str | None], stream: bool
) -> None:
    if api == "anthropic" and not stream:
        args = [json.loads(a) for a in args]  # unstreamed: the objects
    body = answer(api, calls=[(i, "f", a) for i, a in zip(ids, args, strict=True)], stop="tool_call")
    items = await send(api, streamed_form(api, body) if stream else json.dumps(body), stream=stream)
    response = final(items)
    got = [c.id for c in response.message.tool_calls]
    assert [k or g for k, g in zip(kept, got, strict=True)] == got
    assert all(g.startswith("call_") for k, g in zip(kept, got, strict=True) if k is None)
    for sent, call in zip(args, response.message.tool_calls, strict=True):
        assert (json.loads(call.args) if isinstance(sent, dict) else call.args) == sent
    assert accumulated(items) == plain_calls(response) or not stream


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


def _whole(name: str, args: str, index: int | None) -> dict[str, Any]:
    call: dict[str, Any] = {"type": "function", "function": {"name": name, "arguments": args}}
    return call if index is None else {"index": index, **call}


def _piece(args: str, **extra: Any) -> dict[str, Any]:
    return {"index": 0, "type": "function", "function": {"name": "f", "arguments": args}, **extra}


LEGACY = {"name": "get_weather", "arguments": ""}
CHAT_CALLS: dict[str, tuple[list[Any], list[tuple[str, str, str]]]] = {
    # a server streaming each call whole under one `index` (or none), without IDs: the calls
    # were merged into one, `f` with arguments `{"x":1}{}`
    **{f"whole-index-{index}": (
        [{"tool_calls": [_whole("f", '{"x":1}', index)]}, {"tool_calls": [_whole("g", "{}", index)]},
         {"tool_calls": [_whole("g", '{"y": 2}', index)]}],
        [("", "f", '{"x":1}'), ("", "g", "{}"), ("", "g", '{"y": 2}')],
    ) for index in (0, None)},
    "name-repeated": (
        [{"tool_calls": [_piece("", id="call_1")]}, {"tool_calls": [_piece('{"a": ')]},
         {"tool_calls": [_piece('{"b": 1}')]}, {"tool_calls": [_piece("}")]}],
        [("call_1", "f", '{"a": {"b": 1}}')],
    ),
    # an `index` sent as text placed nothing: the later fragments were a nameless call
    "index-as-digits": (
        [{"tool_calls": [{**_piece("{"), "index": "0", "id": "a"}]},
         {"tool_calls": [{"index": "0", "function": {"arguments": '"x": 1}'}}]}],
        [("a", "f", '{"x": 1}')],
    ),
    # the legacy `functions` API: `delta.function_call`, `finish_reason: function_call`
    "legacy-function-call": (
        [{"content": None, "function_call": LEGACY}, {"function_call": {"arguments": '{"city":'}},
         {"function_call": {"arguments": ' "Paris"}'}}],
        [("", "get_weather", '{"city": "Paris"}')],
    ),
    # a call of a type golem does not know is skipped (it was a nameless call)
    "unknown-type": (
        [{"tool_calls": [{"index": 0, **_FOREIGN}]}, {"tool_calls": [{"index": 0, UNKNOWN: {"more": "x"}}]},
         {"tool_calls": [{"index": 1, **_CALL, "function": {"name": "look", "arguments": '{"at": '}}]},
         {"tool_calls": [{"index": 1, "function": {"arguments": '"sky"}'}}]}],
        [("call_1", "look", '{"at": "sky"}')],
    ),
    # a custom tool call (the stream read only `function`: a nameless call)
    "custom": (
        [{"tool_calls": [{"index": 0, "id": "call_9", "type": "custom",
                          "custom": {"name": "sh", "input": "ls "}}]},
         {"tool_calls": [{"index": 0, "custom": {"input": "-l"}}]}],
        [("call_9", "sh", "ls -l")],
    ),
}


@pytest.mark.parametrize(("deltas", "expected"), CHAT_CALLS.values(), ids=list(CHAT_CALLS))
async def test_a_chat_stream_of_calls_however_sent_gives_them(
    deltas: list[dict[str, Any]], expected: list[tuple[str, str, str]]
) -> None:
    finish = "function_call" if "function_call" in json.dumps(deltas) else "tool_calls"
    chunks = [chat_chunk({"role": "assistant", **deltas[0]}), *map(chat_chunk, deltas[1:])]
    items = await send("openai-chat", sse([*chunks, chat_chunk({}, finish)], done=True), stream=True)
    response = final(items)
    calls = response.message.tool_calls
    assert [(i or c.id, c.name, c.args) for (i, _, _), c in zip(expected, calls, strict=True)] == [
        (c.id, c.name, c.args) for c in calls
    ]
    assert [(c.name, c.args) for c in calls] == [(n, a) for _, n, a in expected]
    summed = accumulated(items)
    assert [(d.id or c.id, d.name, d.args) for d, c in zip(summed, calls, strict=True)] == [
        (c.id, c.name, c.args) for c in calls
    ]
    assert len({c.id for c in calls}) == len(calls)
    assert response.finish_reason == "tool_call"


async def test_unknown_custom_and_legacy_calls_of_a_plain_chat_answer() -> None:
    custom = {"id": "call_9", "type": "custom", "custom": {"name": "sh", "input": "ls -l"}}
    (response,) = await send("openai-chat", _chat_calls_body([_FOREIGN, _CALL, custom]), stream=False)
    assert isinstance(response, ModelResponse)
    calls = [(c.id, c.name, c.args) for c in response.message.tool_calls]
    assert calls == [("call_1", "look", '{"at": "sky"}'), ("call_9", "sh", "ls -l")]
    legacy = {"role": "assistant", "content": None, "function_call": LEGACY | {"arguments": "{}"}}
    (response,) = await send("openai-chat", chat_body_of(legacy), stream=False)
    assert isinstance(response, ModelResponse)
    assert [(c.name, c.args) for c in response.message.tool_calls] == [("get_weather", "{}")]


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
