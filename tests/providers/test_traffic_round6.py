"""The sixth traffic round: rate-limit resets, stops and streams the recordings do not show.

Each answer is shaped as the provider's API reference documents it and replayed through the
adapter's HTTP path (streamed and not). What each test found, before its fix, is in its
docstring.
"""

from __future__ import annotations

import asyncio
import datetime
import json
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from golem import Agent, dumps_history, loads_history
from golem.errors import ProviderError, RateLimited, ResponseFormatError
from golem.messages import Message
from golem.model import ModelRequest, ModelResponse
from golem.providers._http import MAX_RETRY_AFTER, rate_limit_reset
from golem.result import RunError
from tests.providers._recordings import all_interactions, needs_recordings
from tests.providers._unseen import MODELS, REQUEST, Chunks, accumulated, final, send

NOW = 1_755_780_000.0  # 2025-08-21T12:40:00Z


def _at(seconds: float) -> str:
    """The RFC 3339 time `seconds` after `NOW`, as Anthropic writes it."""
    when = datetime.datetime.fromtimestamp(NOW + seconds, datetime.UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


# ------------------------------------------------------------------ Anthropic rate-limit resets


def _anthropic_limits(**remaining_and_reset: tuple[str, str]) -> dict[str, str]:
    headers = {}
    for kind, (remaining, reset) in remaining_and_reset.items():
        name = kind.replace("_", "-")
        headers[f"anthropic-ratelimit-{name}-remaining"] = remaining
        headers[f"anthropic-ratelimit-{name}-reset"] = reset
    return headers


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        # the exhausted limit's reset, not the others'
        (
            _anthropic_limits(
                requests=("49", _at(5)), tokens=("0", _at(42)), input_tokens=("0", _at(42))
            ),
            42.0,
        ),
        (_anthropic_limits(output_tokens=("0", _at(17))), 17.0),
        # several exhausted: the latest
        (_anthropic_limits(requests=("0", _at(3)), input_tokens=("0", _at(60))), 60.0),
        # no remaining count given: any reset
        ({"anthropic-ratelimit-tokens-reset": _at(9)}, 9.0),
        # nothing exhausted: no answer (the run backs off as usual)
        (_anthropic_limits(requests=("10", _at(30))), None),
        # fractions, offsets, lower case, a space for the T
        ({"anthropic-ratelimit-tokens-reset": "2025-08-21T12:40:07.250Z"}, 7.25),
        ({"anthropic-ratelimit-tokens-reset": "2025-08-21T14:40:08+02:00"}, 8.0),
        ({"anthropic-ratelimit-tokens-reset": "2025-08-21T10:10:08-02:30"}, 8.0),
        ({"anthropic-ratelimit-tokens-reset": "2025-08-21t12:40:08z"}, 8.0),
        ({"anthropic-ratelimit-tokens-reset": "2025-08-21 12:40:08Z"}, 8.0),
        ({"anthropic-ratelimit-tokens-reset": "2025-08-21T12:40:08"}, 8.0),  # no zone: UTC
        ({"anthropic-ratelimit-tokens-reset": "2025-08-21T12:40:60Z"}, 59.0),  # leap second
        # past: 0; far ahead: the bound
        ({"anthropic-ratelimit-tokens-reset": "2025-08-21T12:39:00Z"}, 0.0),
        ({"anthropic-ratelimit-tokens-reset": "9999-12-31T23:59:59Z"}, MAX_RETRY_AFTER),
        # no time: no answer
        ({"anthropic-ratelimit-tokens-reset": "2025-13-21T12:40:08Z"}, None),
        ({"anthropic-ratelimit-tokens-reset": "2025-04-31T12:40:08Z"}, None),
        ({"anthropic-ratelimit-tokens-reset": "2025-08-21T24:40:08Z"}, None),
        ({"anthropic-ratelimit-tokens-reset": "2025-08-21T12:40:08+24:00"}, None),
        ({"anthropic-ratelimit-tokens-reset": "2025-08-21T12:40:08+01:60"}, None),
        ({"anthropic-ratelimit-tokens-reset": "0000-01-01T00:00:00Z"}, None),
        ({"anthropic-ratelimit-tokens-reset": "soon"}, None),
        ({"anthropic-ratelimit-tokens-reset": "2025-08-21"}, None),
        # Priority Tier limits
        (
            {
                "anthropic-priority-input-tokens-remaining": "0",
                "anthropic-priority-input-tokens-reset": _at(12),
            },
            12.0,
        ),
        # OpenAI's durations and Anthropic's times together: the latest exhausted
        (
            {
                "x-ratelimit-remaining-tokens": "0",
                "x-ratelimit-reset-tokens": "6s",
                **_anthropic_limits(tokens=("0", _at(20))),
            },
            20.0,
        ),
    ],
)
def test_anthropic_rate_limit_resets_are_read(
    headers: dict[str, str], expected: float | None
) -> None:
    """Before: the `anthropic-ratelimit-*-reset` headers were not read (None for all)."""
    assert rate_limit_reset(httpx.Headers(headers), now=NOW) == expected


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.text(max_size=40),
        st.from_regex(
            r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,12})?"
            r"([Zz]|[+-][0-9]{2}:[0-9]{2})?",
            fullmatch=True,
        ),
    ),
    st.sampled_from(["0", "", "3", None]),
)
def test_any_anthropic_reset_is_none_or_a_bounded_wait(value: str, remaining: str | None) -> None:
    headers = {"anthropic-ratelimit-requests-reset": value}
    if remaining is not None:
        headers["anthropic-ratelimit-requests-remaining"] = remaining
    try:
        parsed = httpx.Headers(headers)
    except (UnicodeEncodeError, ValueError):
        return  # not a header httpx sends
    wait = rate_limit_reset(parsed, now=NOW)
    assert wait is None or 0.0 <= wait <= MAX_RETRY_AFTER


async def _fail(api: str, status: int, body: bytes, headers: dict[str, str], stream: bool) -> Any:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, headers=headers, stream=Chunks([body]))

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        model = MODELS[api](client)
        with pytest.raises(ProviderError) as caught:
            if stream:
                async for _ in model.generate_stream(REQUEST):
                    pass
            else:
                await model.generate(REQUEST)
    return caught.value


_ANTHROPIC_429 = json.dumps(
    {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": "Number of request tokens has exceeded"},
    }
).encode()


@pytest.mark.parametrize("stream", [False, True])
async def test_an_anthropic_429_without_retry_after_waits_for_the_exhausted_limit(
    stream: bool,
) -> None:
    """Before: a 429 from a proxy that dropped `retry-after` (or a server that sent none)
    had `retry_after=None`, and the run retried on its own short backoff into the same
    exhausted limit."""
    ahead = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
    headers = {
        "content-type": "application/json",
        "anthropic-ratelimit-requests-remaining": "40",
        "anthropic-ratelimit-requests-reset": datetime.datetime.now(datetime.UTC).isoformat(),
        "anthropic-ratelimit-input-tokens-remaining": "0",
        "anthropic-ratelimit-input-tokens-reset": ahead.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    error = await _fail("anthropic", 429, _ANTHROPIC_429, headers, stream)
    assert isinstance(error, RateLimited)
    assert error.retry_after is not None
    assert 3000.0 < error.retry_after <= 3600.0
    error = await _fail("anthropic", 429, _ANTHROPIC_429, {**headers, "retry-after": "7"}, stream)
    assert isinstance(error, RateLimited)
    assert error.retry_after == 7.0  # the header wins


@pytest.mark.parametrize("status", [500, 529, 400])
async def test_reset_headers_give_no_wait_to_other_errors(status: int) -> None:
    headers = _anthropic_limits(tokens=("0", "2999-01-01T00:00:00Z"))
    error = await _fail("anthropic", status, _ANTHROPIC_429, headers, stream=False)
    assert getattr(error, "retry_after", None) is None


# ------------------------------------------------------------------ Gemini stops that are no answer


async def _gemini(body: Any, *, stream: bool) -> ModelResponse:
    text = json.dumps(body)
    return final(await send("gemini", f"data: {text}\n\n" if stream else text, stream=stream))


_USAGE = {"promptTokenCount": 11, "candidatesTokenCount": 0, "totalTokenCount": 11}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "reason", ["OTHER", "IMAGE_OTHER", "NO_IMAGE", "FINISH_REASON_UNSPECIFIED", "SOMETHING_NEW"]
)
@pytest.mark.parametrize(
    "content", [None, {"role": "model"}, {"role": "model", "parts": []}, {"parts": [{"text": ""}]}]
)
async def test_a_gemini_stop_without_cause_or_content_is_a_retryable_error(
    reason: str, content: dict[str, Any] | None, stream: bool
) -> None:
    """Before: the run ended with an empty answer (`finish_reason == "other"`), as if the
    model had said nothing on purpose; an image model's `NO_IMAGE` likewise."""
    candidate: dict[str, Any] = {"finishReason": reason, "index": 0}
    if content is not None:
        candidate["content"] = content
    body = {"candidates": [candidate], "usageMetadata": _USAGE, "modelVersion": "gemini-x"}
    with pytest.raises(ResponseFormatError, match=reason) as caught:
        await _gemini(body, stream=stream)
    assert caught.value.retryable
    assert caught.value.usage is not None
    assert caught.value.usage.input_tokens == 11


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "part",
    [
        {"text": "Partial answer"},
        {"functionCall": {"name": "f", "args": {}}},
        {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}},
        {"executableCode": {"language": "PYTHON", "code": "print(1)"}},
    ],
)
async def test_a_gemini_stop_without_cause_keeps_what_came(
    part: dict[str, Any], stream: bool
) -> None:
    body = {
        "candidates": [{"content": {"role": "model", "parts": [part]}, "finishReason": "OTHER"}],
        "usageMetadata": _USAGE,
    }
    response = await _gemini(body, stream=stream)
    assert response.finish_reason == "other"
    m = response.message
    assert m.content or m.tool_calls or m.parts or m.server_tools


@pytest.mark.parametrize("stream", [False, True])
async def test_a_gemini_language_stop_is_a_content_filter(stream: bool) -> None:
    """Before: `LANGUAGE` (the answer was flagged for an unsupported language) was `other`,
    so the loop did not treat the answer as cut by a filter."""
    body = {"candidates": [{"finishReason": "LANGUAGE", "index": 0}], "usageMetadata": _USAGE}
    response = await _gemini(body, stream=stream)
    assert response.finish_reason == "content_filter"


async def test_an_empty_gemini_candidate_without_finish_reason_is_no_answer() -> None:
    """Before: a plain body `{"candidates": [{"index": 0}]}` was an empty answer with no
    finish reason (a stream of it is already a 'stream ended' error)."""
    with pytest.raises(ResponseFormatError, match="empty candidate") as caught:
        await _gemini({"candidates": [{"index": 0}], "usageMetadata": _USAGE}, stream=False)
    assert caught.value.retryable


async def test_a_run_retries_a_gemini_stop_without_cause_and_counts_its_usage() -> None:
    empty = {"candidates": [{"finishReason": "OTHER", "index": 0}], "usageMetadata": _USAGE}
    good = {
        "candidates": [
            {"content": {"role": "model", "parts": [{"text": "hello"}]}, "finishReason": "STOP"}
        ],
        "usageMetadata": {"promptTokenCount": 11, "candidatesTokenCount": 2},
    }
    bodies = [empty, good]

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=bodies.pop(0))

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        agent = Agent(MODELS["gemini"](client), max_attempts=2, retry_backoff=lambda attempt: 0.0)
        result = await agent.run("hi")
    assert result.output == "hello"
    assert result.usage.input_tokens == 22


# ------------------------------------------------------------------ Chat: legacy calls, choices


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


async def test_the_chat_answer_is_the_choice_of_index_0_whatever_the_order() -> None:
    """Before: a body with several choices (a server that ignores the absent `n`, or was
    sent one through `extra_body`) was read from its first entry, whatever its `index`; the
    stream read index 0."""
    choices = [
        {
            "index": 1,
            "message": {"role": "assistant", "content": "second"},
            "finish_reason": "stop",
        },
        {"index": 0, "message": {"role": "assistant", "content": "first"}, "finish_reason": "stop"},
    ]
    body = {"id": "c", "object": "chat.completion", "model": "m", "choices": choices}
    assert final(await send("openai-chat", json.dumps(body), stream=False)).message.content == (
        "first"
    )
    stream = _sse(
        [
            _chunk({"role": "assistant", "content": "sec"}, index=1),
            _chunk({"role": "assistant", "content": "fir"}),
            _chunk({"content": "ond"}, index=1),
            _chunk({"content": "st"}),
            _chunk({}, "stop", index=1),
            _chunk({}, "stop"),
            "[DONE]",
        ]
    )
    assert final(await send("openai-chat", stream, stream=True)).message.content == "first"


# ------------------------------------------------------------------ Gemini: several candidates


def _candidate(text: str, index: int | None, finish: str | None = "STOP") -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": [{"text": text}]}}
    if index is not None:
        candidate["index"] = index
    if finish:
        candidate["finishReason"] = finish
    return candidate


@pytest.mark.parametrize("stream", [False, True])
async def test_the_gemini_answer_is_the_candidate_of_index_0(stream: bool) -> None:
    """Before: the first entry of `candidates` was read whatever its `index`: with
    `candidateCount` > 1 a stream event carrying only candidate 1 mixed its text into the
    answer, and a body listing candidate 1 first answered with it."""
    if stream:
        events = [
            {"candidates": [_candidate("Sec", 1, None)]},
            {"candidates": [_candidate("Fir", None, None)]},
            {"candidates": [_candidate("ond", 1), _candidate("st", 0)]},
        ]
        body = "".join(f"data: {json.dumps(e)}\n\n" for e in events)
    else:
        body = json.dumps({"candidates": [_candidate("Second", 1), _candidate("First", None)]})
    items = await send("gemini", body, stream=stream)
    assert final(items).message.content == "First"
    if stream:
        assert "".join(i.content for i in items if not isinstance(i, ModelResponse)) == "First"


# ------------------------------------------------------------------ Responses: items only when done


_R = {"id": "resp_1", "object": "response", "model": "gpt-5"}
_USAGE_R = {"input_tokens": 5, "output_tokens": 3}


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


async def _responses(events: list[dict[str, Any]]) -> tuple[list[Any], ModelResponse]:
    items = await send("openai-responses", _sse(events, named=True), stream=True)
    return items, final(items)


def _streamed_text(items: list[Any]) -> str:
    return "".join(i.content for i in items if not isinstance(i, ModelResponse))


@pytest.mark.parametrize("refusal", [False, True])
@pytest.mark.parametrize("terminal_output", [True, False])
async def test_responses_text_sent_only_when_done_streams_as_one_delta(
    refusal: bool, terminal_output: bool
) -> None:
    """Before: text (or a refusal) that a server sent only in `response.output_text.done` /
    `response.refusal.done` / `response.output_item.done`, with no delta, was in the final
    response but never streamed: a streaming UI showed nothing of the answer."""
    message = _message("Hello ", "there", refusal=refusal)
    done = "response.refusal.done" if refusal else "response.output_text.done"
    key = "refusal" if refusal else "text"
    events = [
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {**message, "content": [], "status": "in_progress"},
        },
        {"type": done, "output_index": 0, "content_index": 0, key: "Hello "},
        {"type": "response.output_item.done", "output_index": 0, "item": message},
        {
            "type": "response.completed",
            "response": {
                **_R,
                "status": "completed",
                "usage": _USAGE_R,
                **({"output": [message]} if terminal_output else {}),
            },
        },
    ]
    items, response = await _responses(events)
    assert response.message.content == "Hello there"
    assert _streamed_text(items) == "Hello there"  # the first part once, the second when done
    assert response.finish_reason == ("content_filter" if refusal else "stop")


async def test_a_responses_call_sent_only_when_done_streams_its_id_name_and_arguments() -> None:
    """Before: a `function_call` item that came only in `response.output_item.done` (no
    `output_item.added`) streamed nothing; the final response had the call."""
    call = {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "f",
        "arguments": '{"x": 1}',
        "status": "completed",
    }
    events = [
        {"type": "response.output_item.done", "output_index": 0, "item": call},
        {
            "type": "response.completed",
            "response": {**_R, "status": "completed", "output": [call], "usage": _USAGE_R},
        },
    ]
    items, response = await _responses(events)
    assert (
        [(c.id, c.name, c.args) for c in accumulated(items)]
        == [(c.id, c.name, c.args) for c in response.message.tool_calls]
        == [("call_1", "f", '{"x": 1}')]
    )


async def test_a_responses_summary_sent_only_when_done_streams_as_thinking() -> None:
    """Before: a reasoning summary that came only with its done item streamed no thinking."""
    reasoning = {
        "type": "reasoning",
        "id": "rs_1",
        "encrypted_content": "ENC",
        "summary": [
            {"type": "summary_text", "text": "Think A"},
            {"type": "summary_text", "text": "Think B"},
        ],
    }
    events = [
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {"type": "reasoning", "id": "rs_1", "summary": []},
        },
        {
            "type": "response.reasoning_summary_text.done",
            "output_index": 0,
            "summary_index": 0,
            "text": "Think A",
        },
        {"type": "response.output_item.done", "output_index": 0, "item": reasoning},
        {
            "type": "response.completed",
            "response": {**_R, "status": "completed", "output": [reasoning], "usage": _USAGE_R},
        },
    ]
    items, response = await _responses(events)
    streamed = "".join(
        t.text for i in items if not isinstance(i, ModelResponse) for t in i.thinking
    )
    assert streamed == response.message.thinking[0].text == "Think A\n\nThink B"


@pytest.mark.parametrize("stream", [False, True])
async def test_an_empty_responses_answer_incomplete_for_an_unknown_reason_is_no_answer(
    stream: bool,
) -> None:
    """Before: an answer `incomplete` for a reason golem does not know, with no output, was
    an empty answer (`finish_reason == "other"`)."""
    response = {
        **_R,
        "status": "incomplete",
        "incomplete_details": {"reason": "brand_new"},
        "output": [],
        "usage": _USAGE_R,
    }
    body = (
        _sse([{"type": "response.incomplete", "response": response}], named=True)
        if stream
        else json.dumps(response)
    )
    with pytest.raises(ResponseFormatError, match="brand_new") as caught:
        await send("openai-responses", body, stream=stream)
    assert caught.value.retryable
    assert caught.value.usage is not None
    assert caught.value.usage.output_tokens == 3


_TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\r"), min_size=1, max_size=12)


def _pieces(data: st.DataObject, text: str) -> list[str]:
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(text) - 1)), max_size=3)))
    out, last = [], 0
    for c in [*cuts, len(text)]:
        if c > last:
            out.append(text[last:c])
            last = c
    return out


def _item_events(data: st.DataObject, i: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One output item at `output_index` `i` and the events a server may send for it: with
    or without deltas, `.done` events, `output_item.added`."""
    kind = data.draw(st.sampled_from(["message", "reasoning", "function_call", "web_search"]))
    added = data.draw(st.booleans())
    events: list[dict[str, Any]] = []
    if kind == "message":
        texts = data.draw(st.lists(_TEXT, min_size=1, max_size=2))
        item = {**_message(*texts), "id": f"msg_{i}"}
        mode = data.draw(st.sampled_from(["deltas", "text_done", "item_done", "both"]))
        if added:
            events.append(
                {
                    "type": "response.output_item.added",
                    "output_index": i,
                    "item_id": item["id"],
                    "item": {**item, "content": []},
                }
            )
        for j, t in enumerate(texts):
            if mode in ("deltas", "both"):
                events += [
                    {
                        "type": "response.output_text.delta",
                        "output_index": i,
                        "item_id": item["id"],
                        "content_index": j,
                        "delta": p,
                    }
                    for p in _pieces(data, t)
                ]
            if mode in ("text_done", "both"):
                events.append(
                    {
                        "type": "response.output_text.done",
                        "output_index": i,
                        "item_id": item["id"],
                        "content_index": j,
                        "text": t,
                    }
                )
    elif kind == "reasoning":
        texts = data.draw(st.lists(_TEXT, min_size=1, max_size=2))
        item = {
            "type": "reasoning",
            "id": f"rs_{i}",
            "encrypted_content": "E",
            "summary": [{"type": "summary_text", "text": t} for t in texts],
        }
        if added or data.draw(st.booleans()):
            events.append(
                {
                    "type": "response.output_item.added",
                    "output_index": i,
                    "item_id": item["id"],
                    "item": {**item, "summary": []},
                }
            )
            if data.draw(st.booleans()):
                for j, t in enumerate(texts):
                    events += [
                        {
                            "type": "response.reasoning_summary_text.delta",
                            "output_index": i,
                            "item_id": item["id"],
                            "summary_index": j,
                            "delta": p,
                        }
                        for p in _pieces(data, t)
                    ]
    elif kind == "function_call":
        args = json.dumps({"v": data.draw(_TEXT)})
        item = {
            "type": "function_call",
            "id": f"fc_{i}",
            "call_id": f"call_{i}",
            "name": "f",
            "arguments": args,
            "status": "completed",
        }
        if added:
            whole = data.draw(st.booleans())
            events.append(
                {
                    "type": "response.output_item.added",
                    "output_index": i,
                    "item_id": item["id"],
                    "item": {**item, "arguments": args if whole else ""},
                }
            )
            if not whole:
                events += [
                    {
                        "type": "response.function_call_arguments.delta",
                        "output_index": i,
                        "item_id": item["id"],
                        "delta": p,
                    }
                    for p in _pieces(data, args)
                ]
                if data.draw(st.booleans()):
                    events.append(
                        {
                            "type": "response.function_call_arguments.done",
                            "output_index": i,
                            "item_id": item["id"],
                            "arguments": args,
                        }
                    )
    else:
        item = {
            "type": "web_search_call",
            "id": f"ws_{i}",
            "status": "completed",
            "action": {"type": "search", "query": "q"},
        }
        if added:
            events.append(
                {
                    "type": "response.output_item.added",
                    "output_index": i,
                    "item_id": item["id"],
                    "item": item,
                }
            )
    events.append(
        {
            "type": "response.output_item.done",
            "output_index": i,
            "item_id": item["id"],
            "item": item,
        }
    )
    return item, events


@settings(max_examples=150, deadline=None)
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
    terminal = {**_R, "status": "completed", "usage": _USAGE_R}
    if data.draw(st.booleans()):
        terminal["output"] = items
    events.append({"type": "response.completed", "response": terminal})
    if data.draw(st.booleans()):  # a server that names items only by their IDs
        events = [{k: v for k, v in e.items() if k != "output_index"} for e in events]
    out = asyncio.run(send("openai-responses", _sse(events, named=True), stream=True))
    response = final(out)
    deltas = [d for d in out if not isinstance(d, ModelResponse)]
    assert "".join(d.content for d in deltas) == response.message.content
    thinking: dict[int, str] = {}
    for d in deltas:
        for t in d.thinking:
            thinking[t.index] = thinking.get(t.index, "") + t.text
    assert [thinking.get(n, "") for n in range(len(response.message.thinking))] == [
        t.text for t in response.message.thinking
    ]
    assert [(c.id, c.name, c.args) for c in accumulated(out)] == [
        (c.id, c.name, c.args) for c in response.message.tool_calls
    ]


# ------------------------------------------------------------------ stops without cause, any API


def _chat_stop(reason: str, content: str, stream: bool) -> str:
    if stream:
        return _sse(
            [
                _chunk({"role": "assistant", "content": content}),
                _chunk({}, reason),
                {
                    **_chunk({}),
                    "choices": [],
                    "usage": {"prompt_tokens": 9, "completion_tokens": 0},
                },
                "[DONE]",
            ]
        )
    message = {"role": "assistant", "content": content or None}
    choice = {"index": 0, "message": message, "finish_reason": reason}
    return json.dumps(
        {
            "id": "c",
            "object": "chat.completion",
            "model": "m",
            "choices": [choice],
            "usage": {"prompt_tokens": 9, "completion_tokens": 0},
        }
    )


def _anthropic_stop(reason: str, content: str, stream: bool) -> str:
    blocks = [{"type": "text", "text": content}] if content else []
    usage = {"input_tokens": 9, "output_tokens": 0}
    if not stream:
        return json.dumps(
            {
                "id": "m",
                "type": "message",
                "role": "assistant",
                "model": "claude-x",
                "content": blocks,
                "stop_reason": reason,
                "usage": usage,
            }
        )
    start = {
        "type": "message_start",
        "message": {
            "id": "m",
            "type": "message",
            "role": "assistant",
            "model": "claude-x",
            "content": [],
            "stop_reason": None,
            "usage": usage,
        },
    }
    events: list[Any] = [start]
    for i, b in enumerate(blocks):
        events += [
            {"type": "content_block_start", "index": i, "content_block": b},
            {"type": "content_block_stop", "index": i},
        ]
    events += [
        {"type": "message_delta", "delta": {"stop_reason": reason}, "usage": {"output_tokens": 0}},
        {"type": "message_stop"},
    ]
    return _sse(events, named=True)


_STOPS = {"openai-chat": _chat_stop, "anthropic": _anthropic_stop}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("api", "reason"),
    [("openai-chat", "abort"), ("openai-chat", "error"), ("anthropic", "brand_new_stop")],
)
async def test_an_unknown_stop_with_nothing_in_the_answer_is_a_retryable_error(
    api: str, reason: str, stream: bool
) -> None:
    """Before: vLLM's `abort`, a router's `error` finish reason, or an Anthropic stop reason
    golem does not know, with nothing in the answer, ended the run with an empty answer
    (`finish_reason == "other"`)."""
    with pytest.raises(ResponseFormatError, match=reason) as caught:
        await send(api, _STOPS[api](reason, "", stream), stream=stream)
    assert caught.value.retryable
    assert caught.value.usage is not None
    assert caught.value.usage.input_tokens == 9


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("api", list(_STOPS))
async def test_an_unknown_stop_keeps_the_answer_that_came(api: str, stream: bool) -> None:
    response = final(
        await send(api, _STOPS[api]("brand_new_stop", "Partial", stream), stream=stream)
    )
    assert (response.message.content, response.finish_reason) == ("Partial", "other")


# ------------------------------------------------------------------ recorded answers, sent back


async def _request_bytes(api: str, messages: list[Message]) -> bytes:
    """The body the `api` adapter sends for `messages` (the server's answer is not read)."""
    sent: list[bytes] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request.content)
        return httpx.Response(400, json={"error": {"message": "stop here"}})

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        with pytest.raises(ProviderError):
            await MODELS[api](client).generate(ModelRequest(messages))
    return sent[0]


@needs_recordings
@pytest.mark.parametrize("api", list(MODELS))
async def test_every_recorded_answer_goes_back_the_same_after_a_history_round_trip(
    api: str,
) -> None:
    """Each recorded answer, streamed or not, read into a history, written as JSON and read
    back, makes the next request byte for byte what the history before the round trip makes:
    nothing a provider needs back is lost or respelled by the history codec."""
    checked = 0
    for it in all_interactions(api):
        if it.status != 200:
            continue
        try:
            items = await send(api, it.body, stream=it.is_stream)
        except ProviderError:
            continue  # a recorded answer that is an error (Responses `failed`, ...)
        history = [Message("user", "hi"), final(items).message, Message("user", "go on")]
        again = loads_history(dumps_history(history))
        assert await _request_bytes(api, again) == await _request_bytes(api, history), (
            it.cassette,
            it.index,
        )
        checked += 1
    assert checked > 10


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


_ARGS = st.dictionaries(
    st.text(min_size=1, max_size=4),
    st.one_of(
        st.integers(), st.text(max_size=6), st.dictionaries(st.text(max_size=3), st.booleans())
    ),
    max_size=3,
).map(lambda d: json.dumps(d, ensure_ascii=False))


@settings(max_examples=150, deadline=None)
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


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("reason", "finish"),
    [
        ("eos_token", "stop"),
        ("stop_sequence", "stop"),
        ("end_turn", "stop"),
        ("max_tokens", "length"),
    ],
)
async def test_a_compatible_servers_name_for_a_known_stop_is_that_stop(
    reason: str, finish: str, stream: bool
) -> None:
    """TGI's `eos_token` and a proxy's Anthropic names are the stops they name: an empty
    answer with one of them is an answer (an unknown name with nothing is an error)."""
    response = final(await send("openai-chat", _chat_stop(reason, "", stream), stream=stream))
    assert (response.message.content, response.finish_reason) == ("", finish)


async def test_a_streamed_run_ending_in_a_stop_without_cause_fails_with_its_usage() -> None:
    """A streamed turn is not retried: the run fails (it used to end with `output == ""`),
    naming the stop, and counts what the answer used."""
    empty = {"candidates": [{"finishReason": "OTHER", "index": 0}], "usageMetadata": _USAGE}

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200,
            headers={"content-type": "text/event-stream"},
            text=f"data: {json.dumps(empty)}\n\n",
        )

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        with pytest.raises(RunError) as caught:
            async with Agent(MODELS["gemini"](client)).run_stream("hi") as s:
                async for _ in s:
                    pass
    assert isinstance(caught.value.__cause__, ResponseFormatError)
    assert "OTHER" in str(caught.value.__cause__)
    assert caught.value.partial is not None
    assert caught.value.partial.usage.input_tokens == 11
