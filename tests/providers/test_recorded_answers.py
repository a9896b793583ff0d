"""Response mapping over the recorded traffic of the four APIs, through each adapter's HTTP path.

Every recorded answer parses to what its body says (text runs, calls, usage, finish reason,
model); its streamed form gives the same response with deltas that add up to it; recorded
error answers are final `BadRequest`s; and a table pins exact values of representative answers.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from golem.errors import BadRequest
from golem.messages import Message, dumps_history, loads_history
from golem.model import FINISH_REASONS, Delta, ModelRequest, ModelResponse, ThinkingDelta
from golem.usage import Usage
from tests.support.adapters import accumulated, assert_deltas_add_up, body_of, final, send
from tests.support.anthropic import sse, synthesize_stream
from tests.support.openai_chat import stream_from_body
from tests.support.recordings import (
    APIS,
    Interaction,
    answers,
    interaction_id,
    load,
    needs_recordings,
)

pytestmark = needs_recordings

OK = [(api, it) for api in APIS for it in answers(api)]
FAILED = [(api, it) for api in APIS for it in answers(api, ok=False)]


def _ids(rows: list[tuple[str, Interaction]]) -> list[str]:
    return [interaction_id(it) for _, it in rows]


async def replay(api: str, it: Interaction) -> list[Delta | ModelResponse]:
    """What the adapter yields (streamed when the recording is) for the recorded answer."""
    return await send(api, it.body, stream=it.is_stream)


def view(response: ModelResponse) -> dict[str, Any]:
    m = response.message
    return {
        "content": m.content,
        "text": m.content.replace("\n\n", ""),
        "calls": [(c.id, c.name, c.args) for c in m.tool_calls],
        "call_ids": [c.id for c in m.tool_calls],
        "signatures": [c.signature for c in m.tool_calls],
        "thinking": [(t.text, t.signature) for t in m.thinking],
        "thought_signatures": [t.signature for t in m.thinking],
        "thoughts": len(m.thinking),
        "usage": response.usage,
        "input_tokens": response.usage.input_tokens,
        "finish": response.finish_reason,
        "model": response.model_name,
    }


def _text_runs(blocks: list[dict[str, Any]]) -> str:
    """Anthropic: adjacent text blocks joined, runs split by server blocks joined by a blank line."""
    runs: list[str] = []
    open_run = False
    for b in blocks:
        if b["type"] == "text":
            runs[-1:] = [runs[-1] + b["text"]] if open_run else [*runs[-1:], b["text"]]
            open_run = True
        elif b["type"] not in ("thinking", "redacted_thinking", "tool_use"):
            open_run = False
    return "\n\n".join(runs)


def _chat(body: dict[str, Any]) -> dict[str, Any]:
    msg, u = body["choices"][0]["message"], body["usage"]
    return {
        "content": msg.get("content") or "",
        "calls": [
            (c["id"], c["function"]["name"], c["function"]["arguments"])
            for c in msg.get("tool_calls") or []
        ],
        "usage": Usage(
            input_tokens=u["prompt_tokens"],
            output_tokens=u["completion_tokens"],
            cache_read_tokens=u["prompt_tokens_details"]["cached_tokens"],
            cache_write_tokens=u["prompt_tokens_details"].get("cache_write_tokens", 0),
            reasoning_tokens=u["completion_tokens_details"]["reasoning_tokens"],
        ),
        "finish": {"stop": "stop", "tool_calls": "tool_call"}[body["choices"][0]["finish_reason"]],
        "model": body["model"],
    }


def _responses(body: dict[str, Any]) -> dict[str, Any]:
    calls = [o["call_id"] for o in body["output"] if o["type"] == "function_call"]
    texts = [
        p["text"]
        for o in body["output"]
        if o["type"] == "message"
        for p in o["content"]
        if p.get("text")
    ]
    reasoning = [o for o in body["output"] if o["type"] == "reasoning"]
    return {
        "call_ids": calls,
        "finish": "tool_call" if calls else "stop",
        "model": body["model"],
        "input_tokens": body["usage"]["input_tokens"],
        "text": "".join(texts).replace("\n\n", ""),
        # the signature a paused history keeps (and the Go golem reads): prefix, ID, content
        "thought_signatures": [
            f"openai-responses/{o['id']}/{o.get('encrypted_content') or ''}" for o in reasoning
        ],
    }


def _anthropic(body: dict[str, Any]) -> dict[str, Any]:
    uses = [b["id"] for b in body["content"] if b["type"] == "tool_use"]
    return {
        "call_ids": uses,
        "content": _text_runs(body["content"]),
        "finish": "tool_call" if uses else "stop",
        "model": body["model"],
    }


EXPECTED = {"openai-chat": _chat, "openai-responses": _responses, "anthropic": _anthropic}
EXPECTED["gemini"] = lambda body: {"model": body["modelVersion"]}
"""Per API, what a recorded plain body says the response holds (Gemini: see `EXACT`)."""

PREFIX = {"openai-chat": "", "openai-responses": "", "anthropic": "claude-", "gemini": "gemini-"}


def test_the_recordings_hold_answers_of_every_kind() -> None:
    count: dict[tuple[str, bool], int] = {}
    for api, it in OK:
        count[api, it.is_stream] = count.get((api, it.is_stream), 0) + 1
    least = {("openai-chat", False): 65, ("openai-responses", False): 40, ("anthropic", False): 84}
    least |= {("openai-responses", True): 8, ("anthropic", True): 6, ("gemini", True): 3}
    assert all(count.get(k, 0) >= n for k, n in least.items()), count
    assert {(api, it.status) for api, it in FAILED} >= {("openai-chat", 400), ("anthropic", 404)}


@pytest.mark.parametrize(("api", "it"), OK, ids=_ids(OK))
async def test_every_recorded_answer_parses_to_what_its_body_says(
    api: str, it: Interaction
) -> None:
    items = await replay(api, it)
    response = assert_deltas_add_up(items) if it.is_stream else final(items)
    assert all(isinstance(d, Delta) for d in items[:-1])
    assert response.message.role == "assistant"
    assert response.finish_reason in FINISH_REASONS - {""}
    assert response.usage.input_tokens > 0 or api == "openai-responses"
    assert response.model_name.startswith(PREFIX[api])
    assert response.model_name  # the model that answered, as the answer names it
    for call in response.message.tool_calls:
        assert call.id
        assert call.name
        assert isinstance(json.loads(call.args), dict)
    if api == "gemini":
        assert response.message.content or response.message.tool_calls
    if api == "anthropic":
        assert response.usage.output_tokens > 0
    if api in EXPECTED and not it.is_stream:
        expected = EXPECTED[api](it.json)
        got = view(response)
        assert {k: got[k] for k in expected} == expected


def _merged_gemini(body: str) -> dict[str, Any]:
    """A Gemini stream's events as the one plain answer they make up."""
    merged: dict[str, Any] = {"candidates": [{"content": {"role": "model", "parts": []}}]}
    for line in body.splitlines():
        if not line.startswith("data:"):
            continue
        event = json.loads(line[5:])
        merged.update({k: event[k] for k in ("modelVersion", "responseId", "usageMetadata") if k in event})
        cand = event["candidates"][0]
        merged["candidates"][0]["content"]["parts"] += cand.get("content", {}).get("parts", [])
        for k in ("finishReason", "groundingMetadata", "urlContextMetadata"):
            if k in cand:
                merged["candidates"][0][k] = cand[k]
    return merged


def _pair(api: str, it: Interaction) -> tuple[str, str]:
    """The answer as a plain body and as a stream: one recorded, the other built from it."""
    if api == "gemini":
        return json.dumps(_merged_gemini(it.body)), it.body
    if api == "openai-responses":
        done = next(line for line in it.body.splitlines() if '"response.completed"' in line)
        return json.dumps(json.loads(done.removeprefix("data:"))["response"]), it.body
    if api == "anthropic":
        return it.body, sse(*synthesize_stream(it.json))
    return it.body, stream_from_body(it.json)


PAIRED = [
    (api, it)
    for api, it in OK
    if it.is_stream == (api in ("gemini", "openai-responses"))
]


@pytest.mark.parametrize(("api", "it"), PAIRED, ids=_ids(PAIRED))
async def test_an_answer_streamed_gives_the_response_of_the_answer_whole(
    api: str, it: Interaction
) -> None:
    plain, streamed = _pair(api, it)
    items = await send(api, streamed, stream=True)
    response = final(items)
    assert response == final(await send(api, plain, stream=False))
    assert "".join(d.content for d in items if isinstance(d, Delta)) == response.message.content
    # a call with no arguments streams no fragment: "{}"
    summed = [(c.id, c.name, c.args or "{}") for c in accumulated(items)]
    assert summed == [(c.id, c.name, c.args) for c in response.message.tool_calls]
    deltas = [d for d in items if isinstance(d, Delta)]
    signatures: dict[int, str] = {}
    texts: dict[int, str] = {}
    for d in deltas:
        for t in d.thinking:
            signatures[t.index] = signatures.get(t.index, "") + t.signature
            texts[t.index] = texts.get(t.index, "") + t.text
    thinking = final(items).message.thinking
    assert [texts.get(i, "") for i in range(len(thinking))] == [t.text for t in thinking]
    if api == "openai-responses":  # only the final answer carries a reasoning item's signature
        assert not any(signatures.values())
    else:
        assert [signatures.get(i, "") for i, t in enumerate(thinking) if not t.redacted] == [
            t.signature for t in thinking if not t.redacted
        ]


@pytest.mark.parametrize(("api", "it"), FAILED, ids=_ids(FAILED))
async def test_every_recorded_error_answer_is_a_final_bad_request(
    api: str, it: Interaction
) -> None:
    with pytest.raises(BadRequest) as caught:
        await replay(api, it)
    assert caught.value.status_code == it.status
    assert not caught.value.retryable
    assert it.json["error"]["message"] in str(caught.value)


class Starts(str):
    """A text compared by its beginning."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and other.startswith(self)

    __hash__ = str.__hash__


MATRIX = "test_multimodal_tool_return_matrix[tool_return_content-url-document-google_2_5].yaml"
EXACT: list[tuple[str, str, int, dict[str, Any]]] = [
    ("anthropic", "test_multiple_parallel_tool_calls.yaml", 0, {
        "content": "I'll help you find out who is the youngest by retrieving information about "
        "each family member. I'll retrieve their entity information to compare their ages.",
        "calls": [
            ("toolu_0167cfEnoQaPviGdVXA95zcu", "retrieve_entity_info", '{"name": "Alice"}'),
            ("toolu_01EEe2V5HD1Ac4rKiUR4HD2T", "retrieve_entity_info", '{"name": "Bob"}'),
            ("toolu_01XFyAjstT3966qvRynZyVPo", "retrieve_entity_info", '{"name": "Charlie"}'),
            ("toolu_013mnQZbgtK2oe3Mo3XKJsx3", "retrieve_entity_info", '{"name": "Daisy"}'),
        ],
        "usage": Usage(input_tokens=423, output_tokens=202),
        "finish": "tool_call",
        "model": "claude-haiku-4-5-20251001",
    }),
    ("anthropic", "test_anthropic_model_thinking_part.yaml", 0, {
        "content": Starts("Here's how to cross the street safely:"),
        "thinking": [(Starts("This is a straightforward question about"), Starts("Eq8CCkYICxgCKkDd"))],
        "usage": Usage(input_tokens=43, output_tokens=321),
    }),
    ("anthropic", "test_anthropic_cache_real_api.yaml", 1, {
        # input_tokens 3 + cache_read 1111 + cache_creation 418
        "usage": Usage(input_tokens=1532, output_tokens=33, cache_read_tokens=1111, cache_write_tokens=418),
    }),
    ("anthropic", "test_anthropic_opus_5_features.yaml", 0, {
        "usage": Usage(input_tokens=13, output_tokens=44, reasoning_tokens=33),
        "content": "2 + 2 = 4",
        "thoughts": 1,
    }),
    ("anthropic", "test_anthropic_server_tool_receive_history_from_another_provider.yaml", 1, {
        "calls": [],
        "content": "Let me calculate that for you!\n\n**37,170 \u00d7 12,390 = 460,536,300**",
        "finish": "stop",
    }),
    ("anthropic", "test_anthropic_mcp_servers.yaml", 0, {
        "calls": [], "content": Starts("**Pydantic AI** is a Python agent framework"),
    }),
    ("anthropic", "test_anthropic_advisor_tool.yaml", 0, {
        "calls": [], "thinking": [("", Starts("EsECCokBCA8Y"))],
    }),
    ("anthropic", "test_anthropic_model_thinking_part_stream.yaml", 0, {
        "content": Starts("Here are the basic steps for safely crossing the street"),
        "thinking": [
            (Starts("This is a straightforward question about pedestrian safety."),
             Starts("EvMCCkYICxgCKkCHP2cSuEdcJK")),
        ],
        # message_delta's usage replaces message_start's (output_tokens 1 → final count)
        "usage": Usage(input_tokens=43, output_tokens=282),
        "finish": "stop",
        "model": "claude-sonnet-4-20250514",
    }),
    ("anthropic", "test_anthropic_web_fetch_tool_stream.yaml", 0, {
        "calls": [],  # the server tool's streamed arguments are not calls
        "usage": Usage(input_tokens=7244, output_tokens=153),
        "content": Starts("Pydantic AI is a Python agent framework"),
    }),
    ("gemini", "test_google_model.yaml", 0, {
        "content": "Hello! How can I help you today?",
        "usage": Usage(input_tokens=9, output_tokens=43, reasoning_tokens=34),
        "finish": "stop",
        "model": "gemini-2.5-flash",
        "thinking": [],
    }),
    ("gemini", "test_google_model_retry.yaml", 0, {
        # no ID from Gemini: one made from the response ID, the same on every parse
        "calls": [("gemini_g5YoaezOBeyrqtsPwYqL2Q8_0", "get_capital", '{"country":"France"}')],
        "signatures": [Starts("CpYEAXLI2nx")],
        "content": "",
        "finish": "tool_call",
        "usage": Usage(input_tokens=57, output_tokens=15 + 124, reasoning_tokens=124),
    }),
    ("gemini", "test_google_model_retry.yaml", 1, {
        "call_ids": ["gemini_h5YoaYnYK5q5mtkP6u3JoAs_0"],  # another response: another ID
    }),
    ("gemini", "test_google_model_retry.yaml", 2, {
        # a signature on a text part is an empty thinking block
        "content": "Paris", "thinking": [("", Starts("CqQDAXLI2nz"))], "finish": "stop",
    }),
    ("gemini", "test_google_model_thinking_part.yaml", 0, {
        "thinking": [(Starts("**A Safe Street-Crossing Guide"), ""), ("", Starts("EqoeCqceAdHtim"))],
        "content": Starts("Crossing the street safely"),
        "usage": Usage(input_tokens=29, output_tokens=1737, reasoning_tokens=1001),
    }),
    ("gemini", "test_google_model_max_tokens.yaml", 0, {
        "content": "The capital of France is",
        "finish": "length",
        "usage": Usage(input_tokens=15, output_tokens=5),
    }),
    ("gemini", MATRIX, 2, {
        "usage": Usage(input_tokens=328, output_tokens=39, cache_read_tokens=220),
    }),
    ("gemini", "test_google_model_web_fetch_tool.yaml", 0, {
        # tool-use prompt tokens count as input
        "usage": Usage(input_tokens=32 + 2395, output_tokens=41 + 47, reasoning_tokens=47),
        "content": Starts("Pydantic AI is a Python agent framework"),
    }),
    ("gemini", "test_google_model_thinking_part_iter.yaml", 0, {
        # four thought chunks make one block; the text's signature another
        "thinking": [(Starts("**Clarifying User Goals**"), ""), ("", Starts("CiIB0e2Kb6Syj1a9"))],
        "usage": Usage(input_tokens=34, output_tokens=469 + 787, reasoning_tokens=787),
        "finish": "stop",
    }),
    ("gemini", "test_google_model_file_search_grounding_gemini_3[True].yaml", 3, {
        # FILE_SEARCH toolCall / toolResponse parts are server-side: no calls, text and signature kept
        "content": Starts("The capital of France is **Paris**."),
        "calls": [],
        "thinking": [("", Starts("EsUBCsIBAQw51sdPkH+3cSEO15H8ynZHJdCu8bTu"))],
    }),
    ("gemini", "test_cancel_recorded_provider_stream[google].yaml", 0, {
        "content": "Paris",
        "usage": Usage(input_tokens=6, output_tokens=36, reasoning_tokens=35),
    }),
]


@pytest.mark.parametrize(
    ("api", "cassette", "index", "expected"),
    EXACT,
    ids=[f"{c.removesuffix('.yaml')}#{i}" for _, c, i, _ in EXACT],
)
async def test_representative_answers_exactly(
    api: str, cassette: str, index: int, expected: dict[str, Any]
) -> None:
    got = view(final(await replay(api, load(api, cassette)[index])))
    assert {k: got[k] for k in expected} == expected


@pytest.mark.parametrize(
    ("api", "cassette", "first_text"),
    [
        ("anthropic", "test_anthropic_model_thinking_part_stream.yaml", 0),
        ("gemini", "test_google_model_thinking_part_iter.yaml", 4),
    ],
)
async def test_recorded_thoughts_stream_before_the_text(
    api: str, cassette: str, first_text: int
) -> None:
    items = await replay(api, load(api, cassette)[0])
    deltas = [d for d in items if isinstance(d, Delta)]
    kinds = ["thinking" if d.thinking and not d.content else "text" for d in deltas]
    assert kinds == sorted(kinds, key=lambda k: k != "thinking")
    if first_text:  # Gemini: the text part's signature comes with its first text, as block 1
        assert kinds.index("text") == first_text
        assert deltas[first_text].thinking == [
            ThinkingDelta(index=1, signature=final(items).message.thinking[1].signature)
        ]


async def test_a_one_event_gemini_stream_is_one_delta() -> None:
    items = await replay("gemini", load("gemini", "test_cancel_recorded_provider_stream[google].yaml")[0])
    assert items[:-1] == [Delta(content="Paris")]



@pytest.mark.parametrize(("api", "it"), OK, ids=_ids(OK))
async def test_every_recorded_answer_goes_back_the_same_after_a_history_round_trip(
    api: str, it: Interaction
) -> None:
    """Read into a history, written as JSON and read back, the answer makes the next request
    what it made before: nothing a provider needs back is lost or respelled."""
    answer = final(await replay(api, it)).message
    history = [Message("user", "hi"), answer, Message("user", "go on")]
    again = loads_history(dumps_history(history))
    assert json.dumps(body_of(api, ModelRequest(again))) == json.dumps(body_of(api, ModelRequest(history)))
