"""Usage and UsageLimits as data."""

from __future__ import annotations

import dataclasses

import pytest

from golem import Usage, UsageLimits


def test_usage_defaults_are_zero() -> None:
    u = Usage()
    assert (
        u.input_tokens,
        u.output_tokens,
        u.cache_read_tokens,
        u.cache_write_tokens,
        u.reasoning_tokens,
    ) == (0, 0, 0, 0, 0)


def test_usage_takes_the_issue_keywords() -> None:
    u = Usage(
        input_tokens=1,
        output_tokens=2,
        cache_read_tokens=3,
        cache_write_tokens=4,
        reasoning_tokens=5,
    )
    assert u.cache_write_tokens == 4
    assert u.reasoning_tokens == 5


def test_usage_adds_every_field() -> None:
    a = Usage(1, 2, 3, 4, 5)
    b = Usage(10, 20, 30, 40, 50)
    assert a + b == Usage(11, 22, 33, 44, 55)


def test_usage_total_tokens_is_input_plus_output() -> None:
    assert Usage(input_tokens=7, output_tokens=5, cache_read_tokens=100).total_tokens == 12


def test_usage_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        Usage().input_tokens = 3  # type: ignore[misc]


def test_usage_limits_default_to_unbounded() -> None:
    limits = UsageLimits()
    assert limits.input_tokens is None
    assert limits.output_tokens is None
    assert limits.total_tokens is None
    assert limits.requests is None
    assert limits.tool_calls is None
    assert limits.cost is None


def test_usage_limits_accept_the_issue_fields_positionally() -> None:
    limits = UsageLimits(1, 2, 3, 4, 5, 6.5)
    assert (
        limits.input_tokens,
        limits.output_tokens,
        limits.total_tokens,
        limits.requests,
        limits.tool_calls,
        limits.cost,
    ) == (1, 2, 3, 4, 5, 6.5)


@pytest.mark.parametrize(
    "field", ["input_tokens", "output_tokens", "total_tokens", "requests", "tool_calls", "cost"]
)
def test_negative_usage_limit_is_a_value_error(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        UsageLimits(**{field: -1})


def test_zero_limits_are_allowed() -> None:
    assert UsageLimits(requests=0).requests == 0
