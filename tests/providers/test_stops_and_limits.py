"""Why an answer stopped, the token limit and usage counts, through each adapter's HTTP path and
the run loop (ADR 0074, 0078).

Each API's stop reasons (and a compatible server's names for them) are golem's
`finish_reason`; a stop golem does not know keeps what came (`other`), and with nothing in the
answer is a retryable `ResponseFormatError` carrying the usage. A tool call cut at the output
token limit is refused like invalid arguments (it used to run with its half-written input).
Usage counts are bounded non-negative integers however an API writes them, and a run counts
what a failed answer used.
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
from golem.errors import Overloaded, ProviderError, ResponseFormatError, UsageLimitExceeded
from golem.limits import UsageLimits
from golem.messages import Message, ToolCall
from golem.model import Delta, ModelResponse
from golem.providers import MAX_TOKEN_COUNT, FallbackModel
from golem.result import RunError
from golem.testing import ScriptedModel
from golem.usage import Usage
from tests.support.adapters import DONE, MODELS, final, send
from tests.support.events import answer, answered, sse, streamed_form

APIS = list(MODELS)
BOTH = pytest.mark.parametrize("stream", [False, True])
NO_CAUSE = {"promptTokenCount": 11, "candidatesTokenCount": 0, "totalTokenCount": 11}


def _gemini(*candidates: dict[str, Any], **body: Any) -> dict[str, Any]:
    return {"candidates": list(candidates), "usageMetadata": NO_CAUSE, **body}


def _parts(*parts: dict[str, Any], reason: str | None = None) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": list(parts)}}
    return {**candidate, "finishReason": reason} if reason else candidate


CALL = {"functionCall": {"name": "f", "args": {"n": 1}}}
FINISHES: list[tuple[str, str, dict[str, Any], str, tuple[bool, ...]]] = [
    # (case, api, answer, finish, streamed how)
    # TGI's `eos_token` and a proxy's Anthropic names: an empty answer with one is an answer
    *[(f"chat-{r}", "openai-chat", answer("openai-chat", stop=r, usage=(9, 0)), f, (False, True))
      for r, f in [("eos_token", "stop"), ("stop_sequence", "stop"), ("end_turn", "stop"),
                   ("max_tokens", "length")]],
    *[(f"{api}-unknown", api, answer(api, "Partial", stop="brand_new_stop"), "other", (False, True))
      for api in ("openai-chat", "anthropic")],
    *[(f"gemini-no-cause-{next(iter(p))}", "gemini", _gemini(_parts(p, reason="OTHER")), "other",
       (False, True)) for p in (
        {"text": "Partial answer"},
        CALL,
        {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}},
        {"executableCode": {"language": "PYTHON", "code": "print(1)"}},
    )],
    # `LANGUAGE` (flagged for an unsupported language) was `other`: not seen as filtered
    ("gemini-language", "gemini", _gemini({"finishReason": "LANGUAGE", "index": 0}),
     "content_filter", (False, True)),
    ("gemini-blocked-prompt", "gemini", {"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"}},
     "content_filter", (False,)),
    ("gemini-call-kept", "gemini", {"candidates": [_parts(CALL, reason="TOO_MANY_TOOL_CALLS")]},
     "other", (False,)),
    *[(f"gemini-filtered-{r}", "gemini", {"candidates": [{"finishReason": r, "index": 0}]},
       "content_filter", (True,)) for r in ("SAFETY", "RECITATION", "PROHIBITED_CONTENT", "SPII")],
]


@pytest.mark.parametrize(
    ("api", "body", "finish", "how"), [r[1:] for r in FINISHES], ids=[r[0] for r in FINISHES]
)
async def test_a_stop_is_the_finish_reason_it_names(
    api: str, body: dict[str, Any], finish: str, how: tuple[bool, ...]
) -> None:
    for stream in how:
        text = sse([body]) if stream and api == "gemini" else None
        got = final(await send(api, text, stream=True)) if text else await answered(api, body, stream=stream)
        assert got.finish_reason == finish
        m = got.message
        assert m.content or m.tool_calls or m.parts or m.server_tools or finish != "other"
        assert m.content.startswith("Partial") or "Partial" not in json.dumps(body)
        assert m.content == "" or finish != "content_filter"


NO_ANSWERS: list[Any] = [
    # (api, answer, the stop named, usage kept) — each was an empty answer ("other") before
    *[(api, answer(api, stop=reason, usage=(9, 0)), reason, "input_tokens", 9)
      for api, reason in [("openai-chat", "abort"), ("openai-chat", "error"),
                          ("anthropic", "brand_new_stop")]],
    # an image model's NO_IMAGE likewise
    *[("gemini", _gemini({"finishReason": reason, "index": 0, **content}), reason, "input_tokens", 11)
      for reason in ("OTHER", "IMAGE_OTHER", "NO_IMAGE", "FINISH_REASON_UNSPECIFIED", "SOMETHING_NEW")
      for content in ({}, {"content": {"role": "model"}}, {"content": {"role": "model", "parts": []}},
                      {"content": {"parts": [{"text": ""}]}})],
    ("openai-responses", answer("openai-responses", stop="brand_new", usage=(5, 3)), "brand_new",
     "output_tokens", 3),
]


@BOTH
@pytest.mark.parametrize(("api", "body", "reason", "field", "count"), NO_ANSWERS)
async def test_a_stop_without_cause_and_nothing_in_the_answer_is_a_retryable_error(
    api: str, body: dict[str, Any], reason: str, field: str, count: int, stream: bool
) -> None:
    text = sse([body]) if stream and api == "gemini" else None
    with pytest.raises(ResponseFormatError, match=reason) as caught:
        if text:
            await send(api, text, stream=True)
        else:
            await answered(api, body, stream=stream)
    assert caught.value.retryable
    assert caught.value.usage is not None
    assert getattr(caught.value.usage, field) == count


@pytest.mark.parametrize(
    ("body", "stream", "match", "retryable"),
    [
        # a plain `{"candidates": [{"index": 0}]}` was an empty answer with no finish reason
        ({"candidates": [{"index": 0}], "usageMetadata": NO_CAUSE}, False, "empty candidate", True),
        *[(body, False, "no candidate", None) for body in
          ({}, {"usageMetadata": {"promptTokenCount": 3}}, {"candidates": []})],
        *[({"candidates": [{"finishReason": reason, "finishMessage": "Malformed function call: print(x",
                            "index": 0}],
            "usageMetadata": {"promptTokenCount": 2595, "totalTokenCount": 2595}}, stream, reason, True)
          for reason in ("MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL", "TOO_MANY_TOOL_CALLS")
          for stream in (False, True)],
    ],
)
async def test_a_gemini_answer_without_a_readable_candidate_is_a_format_error(
    body: dict[str, Any], stream: bool, match: str, retryable: bool | None
) -> None:
    text = f"data: {json.dumps(body)}\r\n\r\n" if stream else json.dumps(body)
    with pytest.raises(ResponseFormatError, match=match) as caught:
        await send("gemini", text, stream=stream)
    if retryable is not None:
        assert caught.value.retryable is retryable
    if "finishMessage" in json.dumps(body):
        assert "print(x" in str(caught.value)


@pytest.mark.parametrize(
    ("reason", "finish"),
    [("max_output_tokens", "length"), ("content_filter", "content_filter"), ("other", "other")],
)
async def test_an_incomplete_responses_answer_is_marked_and_keeps_its_cut_call(
    reason: str, finish: str
) -> None:
    body = answer("openai-responses", calls=[("c", "f", '{"a": "cut')], stop=reason)
    got = await answered("openai-responses", body, stream=True)
    assert got.finish_reason == finish
    assert got.message.tool_calls[0].args == '{"a": "cut'


async def test_a_run_retries_a_stop_without_cause_and_counts_its_usage() -> None:
    empty = _gemini({"finishReason": "OTHER", "index": 0})
    good = {**answer("gemini", "hello", usage=(11, 2))}
    bodies = [empty, good]

    def respond(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=bodies.pop(0))

    async with httpx.AsyncClient(transport=httpx.MockTransport(respond)) as client:
        agent = Agent(MODELS["gemini"](client), max_attempts=2, retry_backoff=lambda attempt: 0.0)
        result = await agent.run("hi")
    assert result.output == "hello"
    assert result.usage.input_tokens == 22


async def test_a_streamed_run_ending_in_a_stop_without_cause_fails_with_its_usage() -> None:
    """A streamed turn is not retried: the run fails (it used to end with `output == ""`),
    naming the stop, and counts what the answer used."""
    empty = _gemini({"finishReason": "OTHER", "index": 0})

    def respond(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, text=sse([empty]))

    async with httpx.AsyncClient(transport=httpx.MockTransport(respond)) as client:
        with pytest.raises(RunError) as caught:
            async with Agent(MODELS["gemini"](client)).run_stream("hi") as s:
                async for _ in s:
                    pass
    assert isinstance(caught.value.__cause__, ResponseFormatError)
    assert "OTHER" in str(caught.value.__cause__)
    assert caught.value.partial is not None
    assert caught.value.partial.usage.input_tokens == 11


# --------------------------------------------------------------------------- the token limit


def _cut(api: str, args: str, *, stream: bool) -> str:
    """An answer of `api` cut at the token limit while it wrote `wipe`'s arguments `args`."""
    written: Any = args  # streamed: the raw text
    if api == "gemini":
        written = json.loads(args or "{}")
    elif api == "anthropic" and not stream:
        written = {}  # the partial object Anthropic parsed: nothing yet
    body = answer(api, calls=[("call_1", "wipe", written)], stop="length")
    return streamed_form(api, body) if stream else json.dumps(body)


@pytest.mark.parametrize("args", ["{}", ""])
@BOTH
@pytest.mark.parametrize("api", APIS)
async def test_a_tool_call_cut_at_the_token_limit_never_runs(
    api: str, stream: bool, args: str
) -> None:
    answers = [_cut(api, args, stream=stream), json.dumps(DONE[api])]
    sent: list[dict[str, Any]] = []

    def respond(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        text = answers[len(sent) - 1]
        ctype = "text/event-stream" if text.startswith(("data:", "event:")) else "application/json"
        return httpx.Response(200, headers={"content-type": ctype}, text=text)

    runs: list[dict[str, Any]] = []
    async with httpx.AsyncClient(transport=httpx.MockTransport(respond)) as client:
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


@BOTH
@pytest.mark.parametrize("api", APIS)
async def test_a_cut_answer_reports_length_and_keeps_the_call_as_written(
    api: str, stream: bool
) -> None:
    text = _cut(api, '{"everything": tr' if api != "gemini" else "{}", stream=stream)
    got = final(await send(api, text, stream=stream))
    assert got.finish_reason == "length"
    assert [c.name for c in got.message.tool_calls] == ["wipe"]
    assert got.usage.output_tokens == 16


@pytest.mark.parametrize(
    ("stop", "refused"),
    [("length", True), ("content_filter", True), ("tool_call", False), ("stop", False),
     ("other", False), ("", False)],
)
@pytest.mark.parametrize("parallel", [True, False])
async def test_only_the_last_call_of_a_cut_answer_is_refused(
    stop: str, refused: bool, parallel: bool
) -> None:
    calls = [ToolCall(id=f"c{i}", name="wipe", args=f'{{"n": {i}}}') for i in range(3)]
    cut = ModelResponse(message=Message("assistant", "", tool_calls=calls), finish_reason=stop)
    agent = Agent(ScriptedModel(cut, "done"), parallel_tool_calls=parallel)
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


# --------------------------------------------------------------------------- call IDs


def _calls(api: str, ids: list[str | None]) -> dict[str, Any]:
    whole = api in ("anthropic", "gemini")
    calls = [(i, "add", {"n": n} if whole else f'{{"n":{n}}}') for n, i in enumerate(ids)]
    return answer(api, calls=calls, stop="tool_call")


@pytest.mark.parametrize(
    "ids",
    [["", None, "x", "x"], [None, None], ["", ""], [f"c{i % 7}" for i in range(1000)], [None] * 1000],
    ids=["mixed", "missing", "empty", "1000-repeating", "1000-missing"],
)
@pytest.mark.parametrize("api", APIS)
async def test_every_call_of_an_answer_gets_its_own_id(api: str, ids: list[str | None]) -> None:
    got = await answered(api, _calls(api, ids), stream=False)
    calls = got.message.tool_calls
    assert len(calls) == len(ids)
    assert all(c.id for c in calls)
    assert len({c.id for c in calls}) == len(calls)
    assert [json.loads(c.args)["n"] for c in calls] == list(range(len(ids)))


@pytest.mark.parametrize("missing", [None, ""])
async def test_a_streamed_anthropic_tool_use_without_an_id_gets_one(missing: str | None) -> None:
    body = answer("anthropic", calls=[(missing, "add", {}), (missing, "add", {})], stop="tool_call")
    items = await send("anthropic", streamed_form("anthropic", body), stream=True)
    ids = [c.id for c in final(items).message.tool_calls]
    assert len(ids) == 2
    assert all(i.startswith("toolu_golem_") for i in ids)
    assert len(set(ids)) == 2
    assert [d.id for item in items if isinstance(item, Delta) for d in item.tool_calls if d.id] == ids


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
@BOTH
@pytest.mark.parametrize("api", APIS)
async def test_an_answer_with_every_string_blank_is_an_answer_or_a_named_error(
    api: str, stream: bool, to: Any
) -> None:
    cut = answer(api, calls=[("call_1", "wipe", {"n": 1} if api == "gemini" else '{"n": 1}')],
                 stop="length")
    for body in (DONE[api], _calls(api, ["a", "b"]), cut):
        blank = _blank(body, to)
        text = json.dumps(blank)
        if stream and api == "anthropic":
            text = sse([
                {"type": "message_start", "message": {**blank, "content": []}},
                *[{"type": "content_block_start", "index": i, "content_block": b}
                  for i, b in enumerate(blank.get("content") or [])],
                {"type": "message_delta", "delta": {"stop_reason": to}, "usage": {}},
                {"type": "message_stop"},
            ], named=True)
        elif stream and api != "openai-chat":
            text = sse([{"type": "response.completed", "response": blank}] if api == "openai-responses" else [blank])
        try:
            got = final(await send(api, text, stream=stream))
        except ProviderError:
            continue
        for call in got.message.tool_calls:
            assert call.id
            assert call.name


# --------------------------------------------------------------------------- usage


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize(
    ("reported", "read"),
    [
        (("12", "3"), (12, 3)),
        ((12.0, 3.0), (12, 3)),
        ((-5, 3), (0, 3)),
        ((None, True), (0, 0)),
        ((12.5, "3 tokens"), (0, 0)),
        ((10**40, 1e300), (MAX_TOKEN_COUNT, MAX_TOKEN_COUNT)),
        # digits are read by their magnitude: spaces and leading zeros are none
        (("00000000000000000012", "   12                 "), (12, 12)),
        (("0" * 40, "9" * 20), (0, MAX_TOKEN_COUNT)),
    ],
)
async def test_usage_counts_are_read_as_counts(
    api: str, reported: tuple[Any, Any], read: tuple[int, int]
) -> None:
    got = await answered(api, answer(api, "a", usage=reported), stream=False)
    assert (got.usage.input_tokens, got.usage.output_tokens) == read


async def test_a_usage_count_too_long_to_convert_is_the_bound() -> None:
    # JSON allows it; Python converts at most 4300 digits by default
    text = json.dumps(answer("anthropic", "a", usage=(1, 2)))
    text = text.replace('"input_tokens": 1', f'"input_tokens": {"9" * 5000}')
    assert final(await send("anthropic", text, stream=False)).usage.input_tokens == MAX_TOKEN_COUNT


@BOTH
@pytest.mark.parametrize(
    ("api", "usage", "expected"),
    [
        *[("anthropic", usage, (MAX_TOKEN_COUNT, None)) for usage in (
            {"input_tokens": 1e30, "cache_read_input_tokens": 1e30, "cache_creation_input_tokens": 5},
            {"input_tokens": "9007199254740991", "cache_creation_input_tokens": 1},
            {"input_tokens": MAX_TOKEN_COUNT, "cache_read_input_tokens": MAX_TOKEN_COUNT},
        )],
        ("gemini", {"promptTokenCount": MAX_TOKEN_COUNT, "toolUsePromptTokenCount": "12",
                    "candidatesTokenCount": 1e300, "thoughtsTokenCount": 7},
         (MAX_TOKEN_COUNT, MAX_TOKEN_COUNT)),
    ],
)
async def test_counts_that_add_up_past_the_bound_are_the_bound(
    api: str, usage: dict[str, Any], expected: tuple[int, int | None], stream: bool
) -> None:
    body = {**answer(api, "x"), "usage" if api == "anthropic" else "usageMetadata": usage}
    got = await answered(api, body, stream=stream)
    assert got.usage.input_tokens == expected[0]
    assert expected[1] is None or got.usage.output_tokens == expected[1]


_COUNT = st.one_of(
    st.none(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=25),
    st.booleans(),
    st.lists(st.integers(), max_size=2),
    st.just({}),
    st.integers(min_value=0, max_value=2**64).map(str),
)
_USAGE_KEYS = {
    "openai-chat": ("usage", ["prompt_tokens", "completion_tokens", "total_tokens"],
                    {"prompt_tokens_details": "cached_tokens",
                     "completion_tokens_details": "reasoning_tokens"}),
    "openai-responses": ("usage", ["input_tokens", "output_tokens", "total_tokens"],
                         {"input_tokens_details": "cached_tokens",
                          "output_tokens_details": "reasoning_tokens"}),
    "anthropic": ("usage", ["input_tokens", "output_tokens", "cache_read_input_tokens",
                            "cache_creation_input_tokens"],
                  {"output_tokens_details": "thinking_tokens"}),
    "gemini": ("usageMetadata", ["promptTokenCount", "candidatesTokenCount", "thoughtsTokenCount",
                                 "cachedContentTokenCount", "toolUsePromptTokenCount"], {}),
}


@settings(deadline=None)
@given(data=st.data(), api=st.sampled_from(APIS))
def test_any_usage_counts_read_as_bounded_non_negative_integers(
    data: st.DataObject, api: str
) -> None:
    field_name, flat, nested = _USAGE_KEYS[api]
    usage: dict[str, Any] = {k: data.draw(_COUNT) for k in flat if data.draw(st.booleans())}
    for outer, inner in nested.items():
        if data.draw(st.booleans()):
            usage[outer] = data.draw(st.one_of(st.none(), st.fixed_dictionaries({inner: _COUNT})))
    body = {**DONE[api], field_name: data.draw(st.one_of(st.just(usage), st.none(), _COUNT))}
    got = final(asyncio.run(send(api, json.dumps(body), stream=False)))
    for value in dataclasses.asdict(got.usage).values():
        assert type(value) is int
        assert 0 <= value <= MAX_TOKEN_COUNT
        assert float(value) == value  # totals of such counts stay exact as floats
    assert (Usage(input_tokens=10) + got.usage).input_tokens >= 10


# ----------------------------------------------------------- what a failed answer used


BROKEN: dict[str, str] = {
    "openai-chat": sse([
        {"id": "c", "object": "chat.completion.chunk", "model": "gpt-4o",
         "choices": [{"index": 0, "delta": {"content": "Hel"}, "finish_reason": None}],
         "usage": {"prompt_tokens": 10, "completion_tokens": 16}},
        {"error": {"message": "The server had an error", "type": "server_error"}},
    ]),
    "openai-responses": sse([
        {"type": "response.created", "response": {"id": "r", "status": "in_progress"}},
        {"type": "response.failed", "response": {
            "id": "r", "status": "failed", "error": {"code": "server_error", "message": "boom"},
            "output": [], "usage": {"input_tokens": 10, "output_tokens": 16}}},
    ]),
    "anthropic": sse([
        {"type": "message_start", "message": {**answer("anthropic"), "content": []}},
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"},
         "request_id": "req_body"},
    ], named=True),
    "gemini": sse([
        {**answer("gemini", "Hel", stop=None)},
        {"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}},
    ]),
}


@pytest.mark.parametrize("api", APIS)
async def test_an_error_inside_a_stream_is_named_and_carries_the_usage_so_far(api: str) -> None:
    with pytest.raises(Overloaded) as caught:
        await send(api, BROKEN[api], stream=True)
    error = caught.value
    assert error.retryable
    assert error.usage == Usage(input_tokens=10, output_tokens=16)
    assert {error.error_type, error.error_code} & {"server_error", "overloaded_error", "UNAVAILABLE"}


@pytest.mark.parametrize("api", APIS)
async def test_a_run_counts_what_a_failed_answer_used(api: str) -> None:
    def respond(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, text=BROKEN[api])

    async with httpx.AsyncClient(transport=httpx.MockTransport(respond)) as client:
        with pytest.raises(RunError) as caught:
            async with Agent(MODELS[api](client), max_attempts=1).run_stream("hi") as s:
                async for _ in s:
                    pass
    assert caught.value.partial is not None
    assert caught.value.partial.usage.input_tokens == 10
    assert caught.value.partial.usage.output_tokens == 16


async def test_no_retry_past_a_usage_limit_that_a_failed_answer_reached() -> None:
    failed = {"id": "r", "object": "response", "status": "failed",
              "error": {"code": "server_error", "message": "boom"}, "output": [],
              "usage": {"input_tokens": 10, "output_tokens": 16}}
    sent: list[bytes] = []

    def respond(request: httpx.Request) -> httpx.Response:
        sent.append(request.content)
        return httpx.Response(200, json=failed)

    async with httpx.AsyncClient(transport=httpx.MockTransport(respond)) as client:
        model = MODELS["openai-responses"](client)
        with pytest.raises(RunError) as caught:
            await Agent(model, max_attempts=3, retry_backoff=lambda attempt: 0.0).run("hi")
        assert len(sent) == 3
        assert caught.value.partial is not None
        assert caught.value.partial.usage.total_tokens == 3 * 26
        sent.clear()
        limited = Agent(model, max_attempts=3, retry_backoff=lambda attempt: 0.0,
                        usage_limits=UsageLimits(total_tokens=20))
        with pytest.raises(RunError) as caught:
            await limited.run("hi")
        assert isinstance(caught.value.__cause__, UsageLimitExceeded)
        assert len(sent) == 1


@BOTH
async def test_a_fallback_answer_counts_what_the_failed_models_reported(stream: bool) -> None:
    failed = ProviderError("broke off", retryable=True)
    failed.usage = Usage(input_tokens=10, output_tokens=16)
    plain = ProviderError("no usage", retryable=True)
    model = FallbackModel(ScriptedModel(failed), ScriptedModel(plain), ScriptedModel("ok"))
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
