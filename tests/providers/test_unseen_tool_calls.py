"""Tool calls shaped in ways the recordings do not show, through each adapter's HTTP path.

- parallel calls whose argument fragments arrive interleaved (Chat Completions numbers
  each fragment with its call's `index`);
- IDs repeated within one response: the APIs pair results with calls by ID and reject a
  conversation whose calls share one, so the adapter renames the later ones (`<id>_2`),
  the same way in the deltas and in the final response;
- IDs missing (a Responses `function_call` with no `call_id`): one is made up, and the
  deltas and the final response agree on it;
- arguments that are not valid JSON, integers beyond 2**53 and non-BMP characters: the
  argument text arrives exactly as sent.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.adapters import accumulated, final, plain_calls, send


def sse(events: list[dict[str, Any]], *, named: bool = False, done: bool = False) -> str:
    out = []
    for e in events:
        head = f"event: {e['type']}\n" if named else ""
        out.append(f"{head}data: {json.dumps(e, ensure_ascii=False)}\n\n")
    if done:
        out.append("data: [DONE]\n\n")
    return "".join(out)


# ------------------------------------------------------------------ argument texts

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


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
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


def _chat_body(ids: list[str]) -> str:
    calls = [
        {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in ids
    ]
    message = {"role": "assistant", "content": None, "tool_calls": calls}
    return json.dumps(
        {"choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]}
    )


async def test_chat_repeated_ids_are_renamed() -> None:
    response = final(await send("openai-chat", _chat_body(["c", "c", "c_2", "d"]), stream=False))
    assert [c.id for c in response.message.tool_calls] == ["c", "c_2", "c_2_2", "d"]


# ------------------------------------------------------------------ anthropic


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


async def test_anthropic_max_tokens_in_the_middle_of_a_call_keeps_the_cut_text() -> None:
    items = await send(
        "anthropic", _anthropic_stream([("t", '{"city": "Par')], "max_tokens"), stream=True
    )
    response = final(items)
    assert response.finish_reason == "length"
    assert response.message.tool_calls[0].args == '{"city": "Par'


async def test_anthropic_big_integers_in_a_plain_answer_stay_exact() -> None:
    block = {"type": "tool_use", "id": "t", "name": "f", "input": {}}
    body = json.dumps({"content": [block], "stop_reason": "tool_use"}).replace(
        '"input": {}', '"input": {"n": 123456789012345678901234567890, "s": "\\ud83d\\ude00"}'
    )
    response = final(await send("anthropic", body, stream=False))
    assert json.loads(response.message.tool_calls[0].args) == {
        "n": 123456789012345678901234567890,
        "s": "😀",
    }


# ------------------------------------------------------------------ responses


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


# ------------------------------------------------------------------ gemini


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


async def test_a_number_beyond_float_range_stays_valid_json() -> None:
    # A JSON value of args is read into floats: 1e400 becomes an infinity, which used to be
    # written back as `Infinity`, text no JSON parser accepts.
    anthropic = (
        '{"content":[{"type":"tool_use","id":"t","name":"f",'
        '"input":{"big":1e400,"neg":[-1e400],"ok":2.5}}],"stop_reason":"tool_use"}'
    )
    gemini = (
        '{"candidates":[{"content":{"parts":[{"functionCall":{"name":"f",'
        '"args":{"big":1e400,"neg":[-1e400],"ok":2.5}}}]},"finishReason":"STOP"}]}'
    )
    for api, body in (("anthropic", anthropic), ("gemini", gemini)):
        response = final(await send(api, body, stream=False))
        args = json.loads(response.message.tool_calls[0].args, parse_constant=_refuse)
        assert args == {"big": float("inf"), "neg": [float("-inf")], "ok": 2.5}


def _refuse(name: str) -> Any:
    raise AssertionError(f"{name} is not JSON")


async def test_chat_arguments_null_or_an_object_read_alike_streamed_or_not() -> None:
    # Some compatible servers send `arguments` as an object, or null for a call without any.
    calls = [
        {"id": "a", "type": "function", "function": {"name": "f", "arguments": None}},
        {"id": "b", "type": "function", "function": {"name": "g", "arguments": {"x": "BIG"}}},
    ]
    message = {"role": "assistant", "tool_calls": calls}
    body = json.dumps(
        {"choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]}
    )
    plain = final(await send("openai-chat", body.replace('"BIG"', "1e400"), stream=False))
    chunks = [
        {"choices": [{"index": 0, "delta": {"tool_calls": [dict(c, index=i)]}}]}
        for i, c in enumerate(calls)
    ]
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    stream = sse(chunks, done=True).replace('"BIG"', "1e400")
    streamed = final(await send("openai-chat", stream, stream=True))
    assert plain_calls(plain) == plain_calls(streamed)
    assert [c.args for c in plain.message.tool_calls] == ["", '{"x":1e999}']
