"""What each API's stream events become, through each adapter's HTTP path: events that
carry an item only when it is done (Responses text, calls and summaries), terminal events
with an empty or missing `output`, error events of any shape, refusals, a `[DONE]` after a
Gemini stream, an `"error": null` beside an answer, and events, fields and item types golem
does not know (ignored, or kept where the answer keeps provider blocks). The deltas always
add up to the final response.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from golem.errors import Overloaded, ProviderError
from golem.model import Delta, ModelResponse
from tests.support.adapters import accumulated, assert_deltas_add_up, final, send
from tests.support.events import (
    RESPONSE,
    RESPONSE_USAGE,
    drawn_pieces,
    responses_answer,
    responses_status,
    responses_streamed,
    sse,
)
from tests.support.streams import STREAMS, plain, stream_of, stream_through
from tests.support.unknown import (
    SETTINGS,
    UNKNOWN,
    comparable,
    essentials,
    with_unknown_fields,
    with_unknown_items,
)


def _sse(*events: tuple[str, str]) -> list[bytes]:
    return [plain(list(events))]


def _message_item(text: str, item_id: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": item_id,
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def _message(*texts: str, refusal: bool = False) -> dict[str, Any]:
    kind, key = ("refusal", "refusal") if refusal else ("output_text", "text")
    return {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "completed",
        "content": [
            {"type": kind, key: t, **({} if refusal else {"annotations": []})} for t in texts
        ],
    }


def _streamed_text(items: list[Any]) -> str:
    return "".join(i.content for i in items if not isinstance(i, ModelResponse))


_TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\r"), min_size=1, max_size=12)


def _item_events(data: st.DataObject, i: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One output item at `output_index` `i` and the events a server may send for it: with
    or without deltas, `.done` events, `output_item.added`."""
    kind = data.draw(st.sampled_from(["message", "reasoning", "function_call", "web_search"]))
    added = data.draw(st.booleans())
    events: list[dict[str, Any]] = []

    def event(kind: str, **fields: Any) -> None:
        events.append({"type": f"response.{kind}", "output_index": i, "item_id": item["id"], **fields})

    if kind == "message":
        texts = data.draw(st.lists(_TEXT, min_size=1, max_size=2))
        item = {**_message(*texts), "id": f"msg_{i}"}
        mode = data.draw(st.sampled_from(["deltas", "text_done", "item_done", "both"]))
        if added:
            event("output_item.added", item={**item, "content": []})
        for j, t in enumerate(texts):
            if mode in ("deltas", "both"):
                for p in drawn_pieces(data, t):
                    event("output_text.delta", content_index=j, delta=p)
            if mode in ("text_done", "both"):
                event("output_text.done", content_index=j, text=t)
    elif kind == "reasoning":
        texts = data.draw(st.lists(_TEXT, min_size=1, max_size=2))
        summary = [{"type": "summary_text", "text": t} for t in texts]
        item = {"type": "reasoning", "id": f"rs_{i}", "encrypted_content": "E", "summary": summary}
        if added or data.draw(st.booleans()):
            event("output_item.added", item={**item, "summary": []})
            if data.draw(st.booleans()):
                for j, t in enumerate(texts):
                    for p in drawn_pieces(data, t):
                        event("reasoning_summary_text.delta", summary_index=j, delta=p)
    elif kind == "function_call":
        args = json.dumps({"v": data.draw(_TEXT)})
        item = {"type": "function_call", "id": f"fc_{i}", "call_id": f"call_{i}", "name": "f",
                "arguments": args, "status": "completed"}
        if added:
            whole = data.draw(st.booleans())
            event("output_item.added", item={**item, "arguments": args if whole else ""})
            if not whole:
                for p in drawn_pieces(data, args):
                    event("function_call_arguments.delta", delta=p)
                if data.draw(st.booleans()):
                    event("function_call_arguments.done", arguments=args)
    else:
        item = {"type": "web_search_call", "id": f"ws_{i}", "status": "completed",
                "action": {"type": "search", "query": "q"}}
        if added:
            event("output_item.added", item=item)
    event("output_item.done", item=item)
    return item, events


def _event_with(data: str, draw: st.DrawFn) -> str:
    try:
        value = json.loads(data)
    except ValueError:
        return data  # [DONE]
    return json.dumps(with_unknown_fields(value, draw), ensure_ascii=False)


def _anthropic_unknown_block(index: int) -> list[tuple[str, str]]:
    block = {"type": UNKNOWN, "id": "x_unknown_1", "content": ""}
    events = [
        {"type": "content_block_start", "index": index, "content_block": block},
        {"type": "content_block_delta", "index": index, "delta": {"type": UNKNOWN, "content": "é"}},
        {"type": "content_block_stop", "index": index},
    ]
    return [(e["type"], json.dumps(e, ensure_ascii=False)) for e in events]


@pytest.mark.parametrize(
    "data", ["model crashed", '{"message": "model crashed", "code": 500}', '"model crashed"']
)
async def test_a_chat_error_event_of_any_shape_fails_the_stream(data: str) -> None:
    head = ("", '{"choices":[{"index":0,"delta":{"content":"par"}}]}')
    with pytest.raises(ProviderError, match="model crashed") as caught:
        await stream_through("openai-chat", _sse(head, ("error", data)))
    if "500" in data:
        assert isinstance(caught.value, Overloaded)


async def test_a_streamed_chat_refusal_streams_as_text() -> None:
    chunks = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "refusal": ""}}]},
        {"choices": [{"index": 0, "delta": {"refusal": "I can't "}}]},
        {"choices": [{"index": 0, "delta": {"refusal": "help with that."}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    ]
    out = await stream_through("openai-chat", _sse(*[("", json.dumps(c)) for c in chunks]))
    final = out[-1]
    assert isinstance(final, ModelResponse)
    assert final.finish_reason == "content_filter"
    streamed = "".join(d.content for d in out if isinstance(d, Delta))
    assert streamed == final.message.content == "I can't help with that."


async def test_a_gemini_stream_event_with_a_null_error_is_no_error() -> None:
    candidate = {"content": {"parts": [{"text": "hi"}], "role": "model"}, "index": 0}
    events = [
        ("", json.dumps({"candidates": [candidate], "error": None})),
        ("", json.dumps({"candidates": [{**candidate, "finishReason": "STOP"}], "error": None})),
    ]
    items = await send("gemini", [plain(events)], stream=True)
    assert "".join(d.content for d in items if isinstance(d, Delta)) == "hihi"
    assert final(items).message.content == "hihi"


@pytest.mark.parametrize("output", [[], None, "missing"])
@pytest.mark.parametrize("indexed", [True, False])
async def test_responses_done_items_are_the_answer_when_the_terminal_output_is_empty(
    output: Any, indexed: bool
) -> None:
    events: list[tuple[str, str]] = []
    for i, text in enumerate(["Hello", "again"]):
        event: dict[str, Any] = {
            "type": "response.output_item.done",
            "item": _message_item(text, f"msg_{i}"),
        }
        if indexed:
            event["output_index"] = i
        events.append(("", json.dumps(event)))
    response: dict[str, Any] = {"id": "resp_1", "status": "completed", "model": "gpt-x"}
    if output != "missing":
        response["output"] = output
    events.append(("", json.dumps({"type": "response.completed", "response": response})))
    message = final(await send("openai-responses", [plain(events)], stream=True)).message
    assert message.content.replace("\n", "") == "Helloagain"


async def test_a_done_marker_after_a_gemini_stream_is_ignored() -> None:
    # a proxy that ends every stream the OpenAI way; the answer used to be lost ("not JSON")
    event = {"candidates": [{"content": {"parts": [{"text": "hi"}]}, "finishReason": "STOP"}]}
    body = f"data: {json.dumps(event)}\n\ndata: [DONE]\n\n"
    assert final(await send("gemini", body, stream=True)).message.content == "hi"


_CALL = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "f",
         "arguments": '{"x": 1}', "status": "completed"}
_REASONING = {"type": "reasoning", "id": "rs_1", "encrypted_content": "ENC",
              "summary": [{"type": "summary_text", "text": t} for t in ("Think A", "Think B")]}


def _done_only(kind: str, output: bool, refusal: bool = False) -> list[dict[str, Any]]:
    """A Responses stream whose item of `kind` comes whole only when done (one part of a text
    or summary also in its `.done` event), its terminal event with or without `output`."""
    item = {"message": _message("Hello ", "there", refusal=refusal), "call": _CALL,
            "reasoning": _REASONING}[kind]
    events: list[dict[str, Any]] = []
    if kind != "call":
        empty = {**item, "summary": []} if kind == "reasoning" else {**item, "content": []}
        events.append({"type": "response.output_item.added", "output_index": 0, "item": empty})
    if kind == "message":
        done, key = ("response.refusal.done", "refusal") if refusal else ("response.output_text.done", "text")
        events.append({"type": done, "output_index": 0, "content_index": 0, key: "Hello "})
    if kind == "reasoning":
        events.append({"type": "response.reasoning_summary_text.done", "output_index": 0,
                       "summary_index": 0, "text": "Think A"})
    events.append({"type": "response.output_item.done", "output_index": 0, "item": item})
    terminal = {**RESPONSE, "status": "completed", "usage": RESPONSE_USAGE}
    return [*events, {"type": "response.completed",
                      "response": {**terminal, **({"output": [item]} if output else {})}}]


@pytest.mark.parametrize("output", [True, False])
@pytest.mark.parametrize(
    ("kind", "refusal"), [("message", False), ("message", True), ("call", False), ("reasoning", False)]
)
async def test_a_responses_item_sent_only_when_done_streams_once_as_it_ends(
    kind: str, refusal: bool, output: bool
) -> None:
    """Before: text, a refusal, a call or a summary that a server sent only in `.done`
    events (no deltas) was in the final answer but never streamed; a terminal event without
    `output` lost items that had all arrived whole in their done events."""
    items, response = await responses_streamed(_done_only(kind, output, refusal))
    assert_deltas_add_up(items)
    m = response.message
    if kind == "message":
        assert m.content == _streamed_text(items) == "Hello there"
        assert response.finish_reason == ("content_filter" if refusal else "stop")
    elif kind == "call":
        assert [(c.id, c.name, c.args) for c in accumulated(items)] == [("call_1", "f", '{"x": 1}')]
    else:
        assert m.thinking[0].text == "Think A\n\nThink B"


@settings(deadline=None)
@given(st.data())
def test_responses_deltas_add_up_to_the_final_answer_however_items_are_sent(
    data: st.DataObject,
) -> None:
    """Whatever a server streams of each item (deltas, `.done` events, only the done item;
    with `output_index` or naming items only by `item_id`), the deltas hold the final
    answer's text, thinking and calls, each once."""
    items, events = [], []
    for i in range(data.draw(st.integers(1, 4))):
        item, item_events = _item_events(data, i)
        items.append(item)
        events += item_events
    terminal = {**RESPONSE, "status": "completed", "usage": RESPONSE_USAGE}
    if data.draw(st.booleans()):
        terminal["output"] = items
    events.append({"type": "response.completed", "response": terminal})
    if data.draw(st.booleans()):  # a server that names items only by their IDs
        events = [{k: v for k, v in e.items() if k != "output_index"} for e in events]
    out = asyncio.run(send("openai-responses", sse(events, named=True), stream=True))
    assert_deltas_add_up(out)


@SETTINGS
@given(data=st.data())
async def test_unknown_fields_in_stream_events_are_tolerated(data: st.DataObject) -> None:
    api, events = data.draw(st.sampled_from(STREAMS))
    expected = await stream_of(api, events)
    damaged = [(event, _event_with(d, data.draw)) for event, d in events]
    got = await send(api, [plain(damaged)], stream=True)
    assert comparable(got) == comparable(expected)


@SETTINGS
@given(data=st.data())
async def test_unknown_item_types_in_streams_are_tolerated(data: st.DataObject) -> None:
    api, events = data.draw(st.sampled_from(STREAMS))
    (*_, expected) = await stream_of(api, events)
    assert isinstance(expected, ModelResponse)
    damaged: list[tuple[str, str]] = []
    for event, d in events:
        try:
            value = json.loads(d)
        except ValueError:
            damaged.append((event, d))
            continue
        damaged.append((event, json.dumps(with_unknown_items(value, api, data.draw))))
    if api == "anthropic":
        at = data.draw(st.integers(0, len(damaged) - 1))
        damaged[at:at] = _anthropic_unknown_block(1000)
    (*_, got) = await send(api, [plain(damaged)], stream=True)
    assert isinstance(got, ModelResponse)
    assert essentials(got) == essentials(expected)


async def test_unknown_events_and_items_are_ignored_or_kept() -> None:
    events = [
        {"type": "response.created", "response": responses_status("in_progress")},
        {"type": "response.something_new.delta", "output_index": 0, "delta": "x"},
        {"type": "response.output_text.delta", "output_index": 1, "delta": "hi"},
        {
            "type": "response.completed",
            "response": responses_status(
                "completed",
                output=[
                    {"type": "brand_new_item", "id": "bn_1", "payload": {"k": 1}},
                    {"type": "message", "content": [{"type": "output_text", "text": "hi"}]},
                ],
            ),
        },
    ]
    body = "".join(f"data: {json.dumps(e)}\n\n" for e in events)
    got = await responses_answer(body, stream=True)
    assert got.message.content == "hi"
    assert got.finish_reason == "stop"
    assert [b.type for b in got.message.server_tools] == ["brand_new_item"]
