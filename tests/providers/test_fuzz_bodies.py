"""Non-streamed answers of all four APIs, damaged at the byte level: a named provider error or
a valid answer, and a valid answer is one a history can keep (ADR 0070).

`test_mutated_responses.py` damages the recorded answers as JSON values; this file damages
their bytes — flipped, cut short, spliced with hostile text (`1e999999`, 10^5-digit numbers,
deep nesting, invalid UTF-8, a BOM, NUL, escaped lone surrogates) — and swaps values at random
paths for huge ones. Whatever the adapter makes of it is a `ModelResponse` whose message
`dumps_history` writes and `loads_history` reads back unchanged, or a `GolemError`.
Stream splitting is `test_streams.py`'s.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from golem import dumps_history, loads_history
from golem.errors import GolemError
from golem.model import ModelResponse
from tests._json_paths import json_paths
from tests.support.adapters import send
from tests.support.recordings import APIS, Interaction, all_interactions, available

BIG = 100_000
_SPLICES = [
    b"1e999999",
    b"-1e999999",
    b"9" * 5000,
    b"[" * 5000,
    b"null",
    b"{}",
    b'"\\ud800"',
    b"\\ud800",
    b"\x00",
    b"\xef\xbb\xbf",
    b"\xff",
    b"\xed\xa0\x80",
    b'"x":1,',
    b",",
]
_HUGE = st.sampled_from(
    [
        "@@DEEP@@",
        "@@BIGINT@@",
        "@@BIGFLOAT@@",
        "x" * 100_000,
        "\ud800",
        "\x00",
        -1,
        2**64,
        [],
        {},
        None,
        True,
    ]
)


def _recorded(api: str) -> list[Interaction]:
    if not available(api):
        return []
    return [
        it for it in all_interactions(api) if not it.is_stream and it.body.lstrip().startswith("{")
    ]


_RECORDED = {api: _recorded(api) for api in APIS}


def _huge_value(body: str, data: st.DataObject) -> bytes:
    value = json.loads(body)
    paths = json_paths(value)[1:]
    if not paths:
        return body.encode()
    path = data.draw(st.sampled_from(paths))
    parent = value
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = data.draw(_HUGE)
    text = json.dumps(value)  # escapes a lone surrogate as \ud800
    return (
        text.replace('"@@DEEP@@"', "[" * 3000 + "]" * 3000)
        .replace('"@@BIGINT@@"', "9" * 5000)
        .replace('"@@BIGFLOAT@@"', "1e999999")
        .encode()
    )


def _damaged(body: str, data: st.DataObject) -> bytes:
    raw = body.encode()
    for _ in range(data.draw(st.integers(1, 2), label="changes")):
        how = data.draw(st.sampled_from(["flip", "cut", "splice", "value"]), label="how")
        if how == "flip" and raw:
            i = data.draw(st.integers(0, len(raw) - 1))
            raw = raw[:i] + bytes([raw[i] ^ (1 << data.draw(st.integers(0, 7)))]) + raw[i + 1 :]
        elif how == "cut":
            raw = raw[: data.draw(st.integers(0, len(raw)))]
        elif how == "splice":
            i = data.draw(st.integers(0, len(raw)))
            raw = raw[:i] + data.draw(st.sampled_from(_SPLICES)) + raw[i:]
        else:
            with contextlib.suppress(ValueError, RecursionError):  # not JSON any more
                raw = _huge_value(raw.decode(), data)
    return raw


async def answer_or_named(api: str, body: bytes) -> ModelResponse | None:
    """The adapter's answer to `body`, checked to be keepable, or None for a named error."""
    try:
        (response,) = await send(api, [body], stream=False)
    except GolemError:
        return None
    assert isinstance(response, ModelResponse)
    written = dumps_history([response.message])
    assert loads_history(written) == [response.message]
    return response


@pytest.mark.parametrize("api", APIS)
@settings(
    deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(data=st.data())
async def test_a_byte_damaged_answer_is_a_named_error_or_a_keepable_answer(
    api: str, data: st.DataObject
) -> None:
    recorded = _RECORDED[api]
    if not recorded:
        pytest.skip(f"no {api} recordings")
    it = data.draw(st.sampled_from(recorded), label="interaction")
    await answer_or_named(api, _damaged(it.body, data))


HOSTILE = {
    "deep 10^5": b"[" * BIG + b"]" * BIG,
    "deep 10^5 in an unknown key": b'{"x":' + b"[" * BIG + b"]" * BIG + b"}",
    "unclosed 10^5": b"{" * BIG,
    "10^5-digit int": b'{"x":' + b"9" * BIG + b"}",
    "1e999999": b'{"x":1e999999}',
    "10 MB string": b'{"x":"' + b"a" * 10**7 + b'"}',
    "BOM": b"\xef\xbb\xbf{}",
    "NUL": b"\x00",
    "invalid UTF-8": b'{"x":"\xff"}',
    "lone surrogate": b'{"x":"\\udfff"}',
    "empty": b"",
}


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("body", list(HOSTILE.values()), ids=list(HOSTILE))
async def test_hostile_bodies_are_named_errors_or_answers(api: str, body: bytes) -> None:
    await answer_or_named(api, body)


@pytest.mark.parametrize("api", APIS)
async def test_a_huge_value_in_every_field_of_a_recorded_answer(api: str) -> None:
    """Each field of one recorded answer in turn replaced by 3,000-deep nesting, a
    5,000-digit number and `1e999999` (a deterministic sweep)."""
    recorded = _RECORDED[api]
    if not recorded:
        pytest.skip(f"no {api} recordings")
    body = recorded[0].body
    value = json.loads(body)
    for path in json_paths(value)[1:][:60]:
        for huge in ("[" * 3000 + "]" * 3000, "9" * 5000, "1e999999"):
            damaged = json.loads(body)
            parent = damaged
            for key in path[:-1]:
                parent = parent[key]
            parent[path[-1]] = "@@HUGE@@"
            await answer_or_named(api, json.dumps(damaged).replace('"@@HUGE@@"', huge).encode())


# ------------------------------------------------------------------ depth beyond json's stack

DEEP = "[" * BIG + "]" * BIG


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("status", [400, 429, 500, 200])
@pytest.mark.parametrize("stream", [False, True], ids=["body", "stream"])
async def test_a_deeply_nested_error_body_or_event_is_a_named_error(
    api: str, status: int, stream: bool
) -> None:
    """Was a bare RecursionError from every adapter for an error status with such a body, and
    from the OpenAI and Anthropic stream parsers for such an `error` event."""
    body = f"event: error\ndata: {DEEP}\n\n" if stream else DEEP
    with pytest.raises(GolemError):
        await send(api, body, stream=stream, status=status)


def _deep_history_request() -> Any:
    from golem import Message, ToolCall
    from golem.messages import Citation, ServerToolBlock
    from golem.model import ModelRequest

    deep_args = '{"a":' + "[" * 3000 + "]" * 3000 + "}"  # loads since ADR 0070: Go allows it
    return ModelRequest(
        [
            Message("user", "hi"),
            Message(
                "assistant",
                "ok",
                tool_calls=[ToolCall("c1", "act", deep_args)],
                citations=[Citation(0, 2, url="https://x.test", provider="anthropic", raw=DEEP)],
                server_tools=[ServerToolBlock("anthropic", "web_search_tool_result", raw=DEEP)],
            ),
            Message("tool", "done", tool_call_id="c1", tool_name="act"),
        ]
    )


@pytest.mark.parametrize("api", APIS)
async def test_a_history_with_deeply_nested_args_and_blocks_is_sent_or_named(api: str) -> None:
    """What the adapters re-send from the history: args and kept provider blocks nested past
    `json`'s stack were a bare RecursionError while the request was built."""
    import httpx

    from tests.support.adapters import MODELS

    recorded = _RECORDED[api]
    if not recorded:
        pytest.skip(f"no {api} recordings")
    answer_body = recorded[0].body

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "application/json"}, text=answer_body)

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        model = MODELS[api](client)
        with contextlib.suppress(GolemError):
            await model.generate(_deep_history_request())
