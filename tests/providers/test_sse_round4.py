"""Fourth round of traffic the recordings do not show: properties over every recorded stream.

Each recorded stream of the four APIs (every one, drawn by Hypothesis, not the first few)
goes through its adapter's HTTP path re-framed and damaged the ways the SSE standard allows
and servers, proxies and newer API versions do. The properties:

- (i) the bytes cut into chunks anywhere, preferring the hard places (inside a multi-byte
  UTF-8 character, between the `\\r` and `\\n` of a line ending), give the same deltas and
  response as the stream in one piece;
- (ii) `\\n`, `\\r\\n` and `\\r` line endings, mixed line by line, give the same result;
- (iii) what the standard says a reader ignores is ignored: comment lines, `id:` and
  `retry:` lines, fields of unknown names, lines without a colon, a space or none after
  `data:`, events of unknown names carrying data of an unknown type, blocks without data;
- (iv) a stream cut off anywhere (framed any way) is a retryable `ProviderError` or the
  whole answer, never another exception;
- (v) unknown JSON fields in every object of every event, and unknown block / part / item
  types among the known ones, are tolerated: the same answer (the unknown fields are kept
  only inside the provider blocks golem keeps verbatim), or, for unknown items, the same
  calls, finish and usage with the unknown item kept or skipped. The non-streamed answers
  of the four APIs get the same damage.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from golem.errors import GolemError, ProviderError
from golem.model import ModelResponse
from tests.support.adapters import send
from tests.support.recordings import all_interactions, available, needs_recordings

UNKNOWN = "golem_unknown"
"""The name of every field and type this file makes up."""


def _recorded_bodies() -> list[tuple[str, str]]:
    out = []
    for api in ("openai-chat", "openai-responses", "anthropic", "gemini"):
        if not available(api):
            continue
        for it in all_interactions(api):
            if not it.is_stream and it.status == 200 and it.body.lstrip().startswith("{"):
                out.append((api, it.body))
    return out


BODIES = _recorded_bodies()

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# --------------------------------------------------------------------------- framing


# --------------------------------------------------------------------------- (i)-(iii)


# --------------------------------------------------------------------------- (iv)


# --------------------------------------------------------------------------- (v)

_KEPT_AS_WRITTEN = frozenset(("input", "args", "arguments", "partialArgs", "partial_json"))
"""Keys whose values are the model's own JSON (tool arguments): an added field would change
what the model said, not the shape of the answer."""


def _with_unknown_fields(value: Any, draw: st.DrawFn) -> Any:
    """`value` with an unknown field added to some of its objects (never inside arguments)."""
    if isinstance(value, dict):
        out = {
            k: v if k in _KEPT_AS_WRITTEN else _with_unknown_fields(v, draw)
            for k, v in value.items()
        }
        if draw(st.booleans()):
            extra = draw(
                st.one_of(
                    st.none(),
                    st.integers(-5, 5),
                    st.text(max_size=3),
                    st.just({"type": UNKNOWN, "text": "é"}),
                    st.just([{"type": UNKNOWN}]),
                )
            )
            out[UNKNOWN] = extra
        return out
    if isinstance(value, list):
        return [_with_unknown_fields(v, draw) for v in value]
    return value


def _strip_unknown(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_unknown(v) for k, v in value.items() if k != UNKNOWN}
    if isinstance(value, list):
        return [_strip_unknown(v) for v in value]
    return value


def _comparable(value: Any) -> Any:
    """A result as plain data, the provider objects golem keeps verbatim (`raw`) read as
    JSON without the unknown fields."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {}
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            if f.name == "raw" and isinstance(item, str) and item:
                with contextlib.suppress(ValueError):
                    item = json.dumps(_strip_unknown(json.loads(item)), sort_keys=True)
            out[f.name] = _comparable(item)
        return out
    if isinstance(value, list):
        return [_comparable(v) for v in value]
    return value


@needs_recordings
@SETTINGS
@given(data=st.data())
async def test_unknown_fields_in_answers_are_tolerated(data: st.DataObject) -> None:
    api, body = data.draw(st.sampled_from(BODIES))
    try:
        expected = await send(api, body, stream=False)
    except GolemError:
        assume(False)  # a recorded answer the adapter refuses: not this property's concern
    damaged = json.dumps(_with_unknown_fields(json.loads(body), data.draw), ensure_ascii=False)
    got = await send(api, damaged, stream=False)
    assert _comparable(got) == _comparable(expected)


# unknown item types: one made-up item among the known ones of each list that holds them

_ITEM_LISTS = {
    "anthropic": ("content",),
    "openai-responses": ("output", "content", "summary"),
    "gemini": ("parts",),
    "openai-chat": ("content", "tool_calls", "annotations"),
}


def _unknown_item(api: str) -> dict[str, Any]:
    if api == "gemini":
        return {UNKNOWN: {"value": "é"}}
    return {"type": UNKNOWN, "id": "x_unknown_1", "value": "é"}


def _with_unknown_items(value: Any, api: str, draw: st.DrawFn, key: str = "") -> Any:
    if isinstance(value, dict):
        return {
            k: v if k in _KEPT_AS_WRITTEN else _with_unknown_items(v, api, draw, k)
            for k, v in value.items()
        }
    if isinstance(value, list):
        out = [_with_unknown_items(v, api, draw) for v in value]
        lists_items = key in _ITEM_LISTS[api] and all(isinstance(v, dict) for v in out)
        if lists_items and out and draw(st.booleans()):
            out.insert(draw(st.integers(0, len(out))), _unknown_item(api))
        return out
    return value


def _essentials(response: ModelResponse) -> Any:
    m = response.message
    return (
        [(c.id, c.name, c.args) for c in m.tool_calls],
        m.content.replace("\n\n", ""),
        "".join(t.text for t in m.thinking),  # an unknown item between thoughts parts them
        response.finish_reason,
        response.usage,
    )


@needs_recordings
@SETTINGS
@given(data=st.data())
async def test_unknown_item_types_in_answers_are_tolerated(data: st.DataObject) -> None:
    api, body = data.draw(st.sampled_from(BODIES))
    try:
        (expected,) = await send(api, body, stream=False)
    except GolemError:
        assume(False)
    assert isinstance(expected, ModelResponse)
    damaged = _with_unknown_items(json.loads(body), api, data.draw)
    (got,) = await send(api, json.dumps(damaged, ensure_ascii=False), stream=False)
    assert isinstance(got, ModelResponse)
    assert _essentials(got) == _essentials(expected)


# --------------------------------------------------------------------------- found by the above


@needs_recordings
@SETTINGS
@given(data=st.data())
async def test_an_answer_cut_off_anywhere_is_a_named_error_or_whole(data: st.DataObject) -> None:
    api, body = data.draw(st.sampled_from(BODIES))
    try:
        (expected,) = await send(api, body, stream=False)
    except GolemError:
        assume(False)
    raw = body.encode()
    end = data.draw(st.integers(0, len(raw)))
    try:
        (got,) = await send(api, [raw[:end]], stream=False)
    except ProviderError:
        return  # named (an empty body is retryable; a cut one is "not JSON")
    assert isinstance(got, ModelResponse)
    assert got == expected


# --------------------------------------------------------------------------- arguments whole
