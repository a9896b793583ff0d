"""Stops and limits through each adapter's HTTP path and the run loop (ADR 0074).

An answer that reached its output token limit (`finish_reason` "length": Chat `length`,
Responses `incomplete` / `max_output_tokens`, Anthropic `max_tokens`, Gemini `MAX_TOKENS`)
was cut while it wrote its last tool call. Its arguments may parse and still be half written:
Anthropic streams a `tool_use` start with `input: {}` and had no delta yet, or answers
unstreamed with the partial object it parsed; a Chat or Responses call cut at its first
character has `""`, which a tool reads as `{}`. That call used to run (or ask for approval)
with that input. It is now refused like invalid arguments: the tool does not run, the model
is told why, and the run goes on.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from golem import Agent
from golem.errors import Overloaded, ProviderError, UsageLimitExceeded
from golem.limits import UsageLimits
from golem.messages import Message, ToolCall
from golem.model import Delta, ModelResponse
from golem.providers._jsonio import MAX_TOKEN_COUNT
from golem.result import RunError
from golem.testing import ScriptedModel
from golem.usage import Usage
from tests.support.adapters import DONE, MODELS, send
from tests.support.events import sse


def _chat(args: str) -> tuple[dict[str, Any], str]:
    call = {"id": "call_1", "type": "function", "function": {"name": "wipe", "arguments": args}}
    body = {
        "id": "c",
        "object": "chat.completion",
        "model": "gpt-4o",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": None, "tool_calls": [call]},
                "finish_reason": "length",
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 16},
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": "c",
            "object": "chat.completion.chunk",
            "model": "gpt-4o",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    start = {"index": 0, "id": "call_1", "type": "function"}
    stream = sse(
        [
            chunk({"role": "assistant", "tool_calls": [{**start, "function": {"name": "wipe"}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": args}}]}),
            chunk({}, "length"),
            {**chunk({}), "choices": [], "usage": body["usage"]},
            "[DONE]",
        ]
    )
    return body, stream


def _responses(args: str) -> tuple[dict[str, Any], str]:
    item = {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "wipe",
        "arguments": args,
        "status": "incomplete",
    }
    body = {
        "id": "r",
        "object": "response",
        "model": "gpt-4o",
        "status": "incomplete",
        "incomplete_details": {"reason": "max_output_tokens"},
        "output": [item],
        "usage": {"input_tokens": 10, "output_tokens": 16},
    }
    stream = sse(
        [
            {"type": "response.created", "response": {**body, "status": "in_progress"}},
            {
                "type": "response.output_item.added",
                "output_index": 0,
                "item": {**item, "arguments": "", "status": "in_progress"},
            },
            {
                "type": "response.function_call_arguments.delta",
                "output_index": 0,
                "item_id": "fc_1",
                "delta": args,
            },
            {"type": "response.incomplete", "response": body},
        ]
    )
    return body, stream


def _anthropic(args: str) -> tuple[dict[str, Any], str]:
    body = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
        "content": [{"type": "tool_use", "id": "toolu_1", "name": "wipe", "input": {}}],
        "stop_reason": "max_tokens",
        "usage": {"input_tokens": 10, "output_tokens": 16},
    }
    start = {**body, "content": [], "stop_reason": None}
    events: list[Any] = [
        {"type": "message_start", "message": start},
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "tool_use", "id": "toolu_1", "name": "wipe", "input": {}},
        },
    ]
    if args:
        events.append(
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": args},
            }
        )
    events += [
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "max_tokens"},
            "usage": {"output_tokens": 16},
        },
        {"type": "message_stop"},
    ]
    return body, sse(events, named=True)


def _gemini(args: str) -> tuple[dict[str, Any], str]:
    body = {
        "candidates": [
            {
                "content": {
                    "role": "model",
                    "parts": [{"functionCall": {"name": "wipe", "args": json.loads(args or "{}")}}],
                },
                "finishReason": "MAX_TOKENS",
            }
        ],
        "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 16},
        "modelVersion": "gemini-x",
    }
    return body, sse([body])


CUT = {"openai-chat": _chat, "openai-responses": _responses, "anthropic": _anthropic}
CUT["gemini"] = _gemini


@pytest.mark.parametrize("args", ["{}", ""])
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("api", list(MODELS))
async def test_a_tool_call_cut_at_the_token_limit_never_runs(
    api: str, stream: bool, args: str
) -> None:
    cut_body, cut_stream = CUT[api](args)
    answers = [cut_stream if stream else json.dumps(cut_body), json.dumps(DONE[api])]
    sent: list[dict[str, Any]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        text = answers[len(sent) - 1]
        ctype = "text/event-stream" if text.startswith(("data:", "event:")) else "application/json"
        return httpx.Response(200, headers={"content-type": ctype}, text=text)

    runs: list[dict[str, Any]] = []
    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        agent = Agent(MODELS[api](client))

        @agent.tool
        def wipe(everything: bool = True) -> str:
            """Wipe the disk."""
            runs.append({"everything": everything})
            return "wiped"

        if stream:
            async with agent.run_stream("clean up") as s:
                async for _ in s:
                    pass
            result = s.result
        else:
            result = await agent.run("clean up")
    assert runs == []
    assert result.output == "ok"
    assert len(sent) == 2
    told = next(m for m in result.messages if m.role == "tool")
    assert "output token limit" in told.content
    assert "wiped" not in json.dumps(sent[1])


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("api", list(MODELS))
async def test_a_cut_answer_reports_length_and_keeps_the_call_as_written(
    api: str, stream: bool
) -> None:
    cut_body, cut_stream = CUT[api]('{"everything": tr' if api != "gemini" else "{}")
    items = await send(api, cut_stream if stream else json.dumps(cut_body), stream=stream)
    final = items[-1]
    assert isinstance(final, ModelResponse)
    assert final.finish_reason == "length"
    assert [c.name for c in final.message.tool_calls] == ["wipe"]
    assert final.usage.output_tokens == 16 or api == "gemini"


def _anthropic_usage(usage: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "m",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
        "content": [{"type": "text", "text": "x"}],
        "stop_reason": "end_turn",
        "usage": usage,
    }


@pytest.mark.parametrize(
    "usage",
    [
        {"input_tokens": 1e30, "cache_read_input_tokens": 1e30, "cache_creation_input_tokens": 5},
        {"input_tokens": "9007199254740991", "cache_creation_input_tokens": 1},
        {"input_tokens": MAX_TOKEN_COUNT, "cache_read_input_tokens": MAX_TOKEN_COUNT},
    ],
)
async def test_anthropic_input_counts_that_add_up_past_the_bound_are_the_bound(
    usage: dict[str, Any],
) -> None:
    for stream in (False, True):
        body = json.dumps(_anthropic_usage(usage))
        if stream:
            start = {**_anthropic_usage(usage), "content": [], "stop_reason": None}
            body = sse(
                [
                    {"type": "message_start", "message": start},
                    {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {}},
                    {"type": "message_stop"},
                ],
                named=True,
            )
        final = (await send("anthropic", body, stream=stream))[-1]
        assert isinstance(final, ModelResponse)
        assert 0 <= final.usage.input_tokens <= MAX_TOKEN_COUNT
        assert final.usage.input_tokens == MAX_TOKEN_COUNT


async def test_gemini_counts_that_add_up_past_the_bound_are_the_bound() -> None:
    meta = {
        "promptTokenCount": MAX_TOKEN_COUNT,
        "toolUsePromptTokenCount": "12",
        "candidatesTokenCount": 1e300,
        "thoughtsTokenCount": 7,
    }
    body = {**DONE["gemini"], "usageMetadata": meta}
    for stream in (False, True):
        final = (await send("gemini", sse([body]) if stream else json.dumps(body), stream=stream))[
            -1
        ]
        assert isinstance(final, ModelResponse)
        assert final.usage.input_tokens == MAX_TOKEN_COUNT
        assert final.usage.output_tokens == MAX_TOKEN_COUNT


def _calls_answer(api: str, ids: list[str | None]) -> dict[str, Any]:
    """An answer of `api` with one call of `add` per entry of `ids` (None: no ID field)."""

    def with_id(entry: dict[str, Any], key: str, call_id: str | None) -> dict[str, Any]:
        return entry if call_id is None else {**entry, key: call_id}

    if api == "openai-chat":
        calls = [
            with_id(
                {"type": "function", "function": {"name": "add", "arguments": f'{{"n":{n}}}'}},
                "id",
                i,
            )
            for n, i in enumerate(ids)
        ]
        return {
            **DONE[api],
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": None, "tool_calls": calls},
                    "finish_reason": "tool_calls",
                }
            ],
        }
    if api == "openai-responses":
        items = [
            with_id(
                {"type": "function_call", "name": "add", "arguments": f'{{"n":{n}}}'}, "call_id", i
            )
            for n, i in enumerate(ids)
        ]
        return {**DONE[api], "output": items}
    if api == "anthropic":
        blocks = [
            with_id({"type": "tool_use", "name": "add", "input": {"n": n}}, "id", i)
            for n, i in enumerate(ids)
        ]
        return {**DONE[api], "content": blocks, "stop_reason": "tool_use"}
    parts = [
        {"functionCall": with_id({"name": "add", "args": {"n": n}}, "id", i)}
        for n, i in enumerate(ids)
    ]
    return {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP"}]}


@pytest.mark.parametrize(
    "ids",
    [
        ["", None, "x", "x"],
        [None, None],
        ["", ""],
        [f"c{i % 7}" for i in range(1000)],
        [None] * 1000,
    ],
    ids=["mixed", "missing", "empty", "1000-repeating", "1000-missing"],
)
@pytest.mark.parametrize("api", list(MODELS))
async def test_every_call_of_an_answer_gets_its_own_id(api: str, ids: list[str | None]) -> None:
    final = (await send(api, json.dumps(_calls_answer(api, ids)), stream=False))[-1]
    assert isinstance(final, ModelResponse)
    got = [c.id for c in final.message.tool_calls]
    assert len(got) == len(ids)
    assert all(got)
    assert len(set(got)) == len(got)
    assert [json.loads(c.args)["n"] for c in final.message.tool_calls] == list(range(len(ids)))


# ----------------------------------------------------------- errors inside a 200 stream

BROKEN: dict[str, str] = {
    "openai-chat": sse(
        [
            {
                "id": "c",
                "object": "chat.completion.chunk",
                "model": "gpt-4o",
                "choices": [{"index": 0, "delta": {"content": "Hel"}, "finish_reason": None}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 16},
            },
            {"error": {"message": "The server had an error", "type": "server_error"}},
        ]
    ),
    "openai-responses": sse(
        [
            {"type": "response.created", "response": {"id": "r", "status": "in_progress"}},
            {
                "type": "response.failed",
                "response": {
                    "id": "r",
                    "status": "failed",
                    "error": {"code": "server_error", "message": "boom"},
                    "output": [],
                    "usage": {"input_tokens": 10, "output_tokens": 16},
                },
            },
        ]
    ),
    "anthropic": sse(
        [
            {
                "type": "message_start",
                "message": {
                    "id": "m",
                    "type": "message",
                    "role": "assistant",
                    "model": "claude-x",
                    "content": [],
                    "usage": {"input_tokens": 10, "output_tokens": 16},
                },
            },
            {
                "type": "error",
                "error": {"type": "overloaded_error", "message": "Overloaded"},
                "request_id": "req_body",
            },
        ],
        named=True,
    ),
    "gemini": sse(
        [
            {
                "candidates": [{"content": {"role": "model", "parts": [{"text": "Hel"}]}}],
                "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 16},
            },
            {
                "error": {
                    "code": 503,
                    "message": "The model is overloaded.",
                    "status": "UNAVAILABLE",
                }
            },
        ]
    ),
}


@pytest.mark.parametrize("api", list(MODELS))
async def test_an_error_inside_a_stream_is_named_and_carries_the_usage_so_far(api: str) -> None:
    with pytest.raises(Overloaded) as caught:
        await send(api, BROKEN[api], stream=True)
    error = caught.value
    assert error.retryable
    assert error.usage == Usage(input_tokens=10, output_tokens=16)
    assert {error.error_type, error.error_code} & {
        "server_error",
        "overloaded_error",
        "UNAVAILABLE",
    }


@pytest.mark.parametrize("api", list(MODELS))
async def test_a_run_counts_what_a_failed_answer_used(api: str) -> None:
    answers = [BROKEN[api], json.dumps(DONE[api])]
    sent: list[bytes] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request.content)
        text = answers[min(len(sent), 2) - 1]
        ctype = "text/event-stream" if text.startswith(("data:", "event:")) else "application/json"
        return httpx.Response(200, headers={"content-type": ctype}, text=text)

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        model = MODELS[api](client)
        failed = Agent(model, max_attempts=1)
        with pytest.raises(RunError) as caught:
            async with failed.run_stream("hi") as s:
                async for _ in s:
                    pass
        assert caught.value.partial is not None
        assert caught.value.partial.usage.input_tokens == 10
        assert caught.value.partial.usage.output_tokens == 16


async def test_no_retry_past_a_usage_limit_that_a_failed_answer_reached() -> None:
    failed = {
        "id": "r",
        "object": "response",
        "status": "failed",
        "error": {"code": "server_error", "message": "boom"},
        "output": [],
        "usage": {"input_tokens": 10, "output_tokens": 16},
    }
    sent: list[bytes] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request.content)
        return httpx.Response(200, json=failed)

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        model = MODELS["openai-responses"](client)
        with pytest.raises(RunError) as caught:
            await Agent(model, max_attempts=3, retry_backoff=lambda attempt: 0.0).run("hi")
        assert len(sent) == 3
        assert caught.value.partial is not None
        assert caught.value.partial.usage.total_tokens == 3 * 26
        sent.clear()
        limited = Agent(
            model,
            max_attempts=3,
            retry_backoff=lambda attempt: 0.0,
            usage_limits=UsageLimits(total_tokens=20),
        )
        with pytest.raises(RunError) as caught:
            await limited.run("hi")
        assert isinstance(caught.value.__cause__, UsageLimitExceeded)
        assert len(sent) == 1


_COUNT = st.one_of(
    st.none(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=25),
    st.booleans(),
    st.just([]),
    st.just({}),
    st.integers(min_value=0, max_value=2**64).map(str),
)

_USAGE_KEYS = {
    "openai-chat": (
        "usage",
        ["prompt_tokens", "completion_tokens", "total_tokens"],
        {"prompt_tokens_details": "cached_tokens", "completion_tokens_details": "reasoning_tokens"},
    ),
    "openai-responses": (
        "usage",
        ["input_tokens", "output_tokens", "total_tokens"],
        {"input_tokens_details": "cached_tokens", "output_tokens_details": "reasoning_tokens"},
    ),
    "anthropic": (
        "usage",
        ["input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"],
        {"output_tokens_details": "thinking_tokens"},
    ),
    "gemini": (
        "usageMetadata",
        [
            "promptTokenCount",
            "candidatesTokenCount",
            "thoughtsTokenCount",
            "cachedContentTokenCount",
            "toolUsePromptTokenCount",
        ],
        {},
    ),
}


@settings(deadline=None)
@given(data=st.data(), api=st.sampled_from(list(MODELS)))
def test_any_usage_counts_read_as_bounded_non_negative_integers(
    data: st.DataObject, api: str
) -> None:
    field_name, flat, nested = _USAGE_KEYS[api]
    usage: dict[str, Any] = {k: data.draw(_COUNT) for k in flat if data.draw(st.booleans())}
    for outer, inner in nested.items():
        if data.draw(st.booleans()):
            usage[outer] = data.draw(st.one_of(st.none(), st.fixed_dictionaries({inner: _COUNT})))
    body = {**DONE[api], field_name: data.draw(st.one_of(st.just(usage), st.none(), _COUNT))}
    final = asyncio.run(send(api, json.dumps(body), stream=False))[-1]
    assert isinstance(final, ModelResponse)
    for value in dataclasses.asdict(final.usage).values():
        assert type(value) is int
        assert 0 <= value <= MAX_TOKEN_COUNT


@pytest.mark.parametrize(
    ("stop", "refused"),
    [
        ("length", True),
        ("content_filter", True),
        ("tool_call", False),
        ("stop", False),
        ("other", False),
        ("", False),
    ],
)
@pytest.mark.parametrize("parallel", [True, False])
async def test_only_the_last_call_of_a_cut_answer_is_refused(
    stop: str, refused: bool, parallel: bool
) -> None:
    calls = [ToolCall(id=f"c{i}", name="wipe", args=f'{{"n": {i}}}') for i in range(3)]
    cut = ModelResponse(message=Message("assistant", "", tool_calls=calls), finish_reason=stop)
    model = ScriptedModel(cut, "done")
    agent = Agent(model, parallel_tool_calls=parallel)
    ran: list[int] = []

    @agent.tool
    def wipe(n: int) -> str:
        """Wipe."""
        ran.append(n)
        return f"wiped {n}"

    result = await agent.run("go")
    assert sorted(ran) == ([0, 1] if refused else [0, 1, 2])
    told = {m.tool_call_id: m.content for m in result.messages if m.role == "tool"}
    assert told["c0"] == "wiped 0"
    if refused:
        assert f"finish reason {stop}" in told["c2"]
        assert "the tool did not run" in told["c2"]
    else:
        assert told["c2"] == "wiped 2"


def _blank(value: Any, to: Any) -> Any:
    """`value` with every string in it replaced by `to` (keys kept)."""
    if isinstance(value, str):
        return to
    if isinstance(value, list):
        return [_blank(v, to) for v in value]
    if isinstance(value, dict):
        return {k: _blank(v, to) for k, v in value.items()}
    return value


@pytest.mark.parametrize("to", ["", None, 0, [], {}])
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("api", list(MODELS))
async def test_an_answer_with_every_string_blank_is_an_answer_or_a_named_error(
    api: str, stream: bool, to: Any
) -> None:
    answers = [DONE[api], _calls_answer(api, ["a", "b"]), CUT[api]('{"n": 1}')[0]]
    for answer in answers:
        body = _blank(answer, to)
        text = json.dumps(body)
        if stream:
            if api == "anthropic":
                text = sse(
                    [
                        {"type": "message_start", "message": {**body, "content": []}},
                        *[
                            {"type": "content_block_start", "index": i, "content_block": b}
                            for i, b in enumerate(body.get("content") or [])
                        ],
                        {"type": "message_delta", "delta": {"stop_reason": to}, "usage": {}},
                        {"type": "message_stop"},
                    ],
                    named=True,
                )
            elif api == "openai-responses":
                text = sse([{"type": "response.completed", "response": body}])
            elif api == "gemini":
                text = sse([body])
        try:
            items = await send(api, text, stream=stream)
        except ProviderError:
            continue
        final = items[-1]
        assert isinstance(final, ModelResponse)
        for call in final.message.tool_calls:
            assert call.id
            assert call.name


@pytest.mark.parametrize("missing", [None, ""])
async def test_a_streamed_anthropic_tool_use_without_an_id_gets_one(missing: str | None) -> None:
    block: dict[str, Any] = {"type": "tool_use", "name": "add", "input": {}}
    if missing is not None:
        block["id"] = missing
    start = {**DONE["anthropic"], "content": [], "stop_reason": None}
    text = sse(
        [
            {"type": "message_start", "message": start},
            {"type": "content_block_start", "index": 0, "content_block": block},
            {"type": "content_block_start", "index": 1, "content_block": dict(block)},
            {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {}},
            {"type": "message_stop"},
        ],
        named=True,
    )
    items = await send("anthropic", text, stream=True)
    final = items[-1]
    assert isinstance(final, ModelResponse)
    ids = [c.id for c in final.message.tool_calls]
    assert len(ids) == 2
    assert all(i.startswith("toolu_golem_") for i in ids)
    assert len(set(ids)) == 2
    streamed = [d.id for item in items if isinstance(item, Delta) for d in item.tool_calls if d.id]
    assert streamed == ids


@pytest.mark.parametrize("stream", [False, True])
async def test_a_fallback_answer_counts_what_the_failed_models_reported(stream: bool) -> None:
    from golem.providers import FallbackModel

    failed = ProviderError("broke off", retryable=True)
    failed.usage = Usage(input_tokens=10, output_tokens=16)
    plain = ProviderError("no usage", retryable=True)
    first, second = ScriptedModel(failed), ScriptedModel(plain)
    model = FallbackModel(first, second, ScriptedModel("ok"))
    if stream:
        async with Agent(model).run_stream("hi") as s:
            async for _ in s:
                pass
        result = s.result
    else:
        result = await Agent(model).run("hi")
    assert result.output == "ok"
    assert result.usage.input_tokens >= 10
    assert result.usage.output_tokens >= 16
    everyone = FallbackModel(ScriptedModel(failed), ScriptedModel(plain))
    with pytest.raises(RunError) as caught:
        await Agent(everyone).run("hi")
    assert caught.value.partial is not None
    assert caught.value.partial.usage.total_tokens == 26
