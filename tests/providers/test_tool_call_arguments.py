"""Tool-call arguments however each API sends them, through each adapter's HTTP path,
streamed and not: whole in one event or in fragments, as an object instead of text (or the
reverse), as `null`, cut by the token limit, with numbers beyond a float's range or too long
to convert (kept valid JSON, digit for digit). The deltas add up to the final arguments.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from golem.errors import ResponseFormatError
from golem.model import ModelResponse
from tests.support.adapters import accumulated, final, plain_calls, send
from tests.support.events import answer, anthropic_tool_stream, sse
from tests.support.recordings import needs_recordings
from tests.support.streams import CALLING, plain, stream_of


def _refuse(name: str) -> Any:
    raise AssertionError(f"{name} is not JSON")


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


_AS_TEXT = '{"a": 1, "b": [true, null]}'


LONG = "9" * 5000  # JSON allows it; Python converts at most 4300 digits by default


LONG_ARGS = {
    api: json.dumps(answer(api, calls=[("c1", "f", {"n": 0})], stop="tool_call"))
    for api in ("anthropic", "gemini", "openai-chat")  # Chat: a server sending an object
}


@needs_recordings
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
async def test_arguments_that_arrive_whole_stream_as_one_fragment(data: st.DataObject) -> None:
    # the deltas of a call whose arguments were not streamed had no arguments at all
    assume(CALLING)
    api, events = data.draw(st.sampled_from(CALLING))
    original = (await stream_of(api, events))[-1]
    assert isinstance(original, ModelResponse)
    damaged = _unstreamed_arguments(api, events, data.draw(st.booleans()))
    items = await send(api, [plain(damaged)], stream=True)
    response = items[-1]
    assert isinstance(response, ModelResponse)
    assert accumulated(items) == plain_calls(response)
    assert [json.loads(c.args or "{}") for c in response.message.tool_calls] == [
        json.loads(c.args or "{}") for c in original.message.tool_calls
    ]


@pytest.mark.parametrize(
    ("api", "form"),
    [("openai-responses", "OBJ"), ("anthropic", "TEXT"), ("gemini", "TEXT")],
)
async def test_arguments_in_the_other_json_form_are_read(api: str, form: str) -> None:
    # Responses arguments sent as an object were lost (""); Anthropic input and Gemini args
    # sent as text holding an object became a JSON string, which no tool takes
    body = answer(api, calls=[("c", "f", form)], stop="tool_call")
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


async def test_anthropic_max_tokens_in_the_middle_of_a_call_keeps_the_cut_text() -> None:
    items = await send(
        "anthropic", anthropic_tool_stream([("t", '{"city": "Par')], "max_tokens"), stream=True
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


async def test_a_number_beyond_float_range_stays_valid_json() -> None:
    # A JSON value of args is read into floats: 1e400 becomes an infinity, which used to be
    # written back as `Infinity`, text no JSON parser accepts.
    big = '{"big":1e400,"neg":[-1e400],"ok":2.5}'
    for api in ("anthropic", "gemini"):
        body = json.dumps(answer(api, calls=[("t", "f", "BIG")], stop="tool_call"))
        body = body.replace('"BIG"', big)
        response = final(await send(api, body, stream=False))
        args = json.loads(response.message.tool_calls[0].args, parse_constant=_refuse)
        assert args == {"big": float("inf"), "neg": [float("-inf")], "ok": 2.5}


@pytest.mark.parametrize("api", sorted(LONG_ARGS))
async def test_an_integer_too_long_to_convert_is_kept_digit_for_digit(api: str) -> None:
    # the whole answer used to be lost: "returned a body that is not JSON"
    body = LONG_ARGS[api].replace('"n": 0', f'"n": {LONG}')
    (call,) = final(await send(api, body, stream=False)).message.tool_calls
    assert call.args.replace(" ", "") == '{"n":' + LONG + "}"


async def test_gemini_function_call_arguments_streamed_in_parts_are_refused_by_name() -> None:
    # Vertex AI's streamFunctionCallArguments: each part used to become a call of its own (the
    # later ones without a name); golem does not assemble them and says so
    first = {
        "functionCall": {
            "name": "f",
            "partialArgs": [{"jsonPath": "$.a", "stringValue": "x"}],
            "willContinue": True,
        }
    }
    rest = {"functionCall": {"partialArgs": [{"jsonPath": "$.b", "numberValue": 1}]}}
    events = [
        {"candidates": [{"content": {"parts": [first]}}]},
        {"candidates": [{"content": {"parts": [rest]}, "finishReason": "STOP"}]},
    ]
    body = "".join(f"data: {json.dumps(e)}\n\n" for e in events)
    with pytest.raises(ResponseFormatError, match="streamFunctionCallArguments") as caught:
        await send("gemini", body, stream=True)
    assert not caught.value.retryable
