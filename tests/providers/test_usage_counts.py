"""Usage counts as each API reports them, through each adapter's HTTP path and as
`token_count` reads one (a unit test of `golem.providers._jsonio`): digits and integral
floats (`"12"`, `12.0`) are counts; a negative, fractional, boolean or textual count is 0, so
that no count lowers a run's totals (and so its usage limits); a count beyond
`MAX_TOKEN_COUNT`, or too long to convert, is that bound.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from golem.providers._jsonio import MAX_TOKEN_COUNT, token_count
from golem.usage import Usage
from tests.support.adapters import MODELS, final, send, text_answer


def _with_usage(api: str, counts: dict[str, Any]) -> dict[str, Any]:
    body = text_answer(api, "a")
    if api == "openai-chat":
        body["usage"] = {"prompt_tokens": counts["in"], "completion_tokens": counts["out"]}
    elif api == "gemini":
        body["usageMetadata"] = {
            "promptTokenCount": counts["in"],
            "candidatesTokenCount": counts["out"],
        }
    else:
        body["usage"] = {"input_tokens": counts["in"], "output_tokens": counts["out"]}
    return body


APIS = list(MODELS)


LONG = "9" * 5000  # JSON allows it; Python converts at most 4300 digits by default


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize(
    ("reported", "read"),
    [
        ({"in": "12", "out": "3"}, (12, 3)),
        ({"in": 12.0, "out": 3.0}, (12, 3)),
        ({"in": -5, "out": 3}, (0, 3)),
        ({"in": None, "out": True}, (0, 0)),
        ({"in": 12.5, "out": "3 tokens"}, (0, 0)),
        ({"in": 10**40, "out": 1e300}, (MAX_TOKEN_COUNT, MAX_TOKEN_COUNT)),
    ],
)
async def test_usage_counts_are_read_as_counts(
    api: str, reported: dict[str, Any], read: tuple[int, int]
) -> None:
    response = final(await send(api, json.dumps(_with_usage(api, reported)), stream=False))
    assert (response.usage.input_tokens, response.usage.output_tokens) == read


@given(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(),
        st.text(max_size=8),
        st.lists(st.integers(), max_size=2),
    )
)
def test_a_token_count_is_never_negative_nor_beyond_the_bound(value: Any) -> None:
    count = token_count(value)
    assert type(count) is int
    assert 0 <= count <= MAX_TOKEN_COUNT
    # totals of such counts stay exact as floats
    assert float(count) == count


def test_usage_totals_cannot_be_lowered_by_a_count() -> None:
    total = Usage(input_tokens=10) + Usage(input_tokens=token_count(-5))
    assert total.input_tokens == 10


async def test_a_usage_count_too_long_to_convert_is_the_bound() -> None:
    text = json.dumps(_with_usage("anthropic", {"in": 1, "out": 2})).replace(
        '"input_tokens": 1', f'"input_tokens": {LONG}'
    )
    response = final(await send("anthropic", text, stream=False))
    assert response.usage.input_tokens == MAX_TOKEN_COUNT


@pytest.mark.parametrize(
    ("value", "count"),
    [
        ("00000000000000000012", 12),
        ("   12                 ", 12),
        ("0" * 40, 0),
        ("9" * 20, 2**53 - 1),
    ],
)
def test_a_count_in_digits_is_read_by_its_magnitude(value: str, count: int) -> None:
    assert token_count(value) == count
