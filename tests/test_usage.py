"""Usage and UsageLimits as data."""

from __future__ import annotations

import dataclasses

import pytest

from golem import Usage, UsageLimits


def test_usage_is_frozen_zero_by_default_adds_every_field_and_totals_input_and_output() -> None:
    assert Usage() == Usage(0, 0, 0, 0, 0)
    u = Usage(
        input_tokens=1,
        output_tokens=2,
        cache_read_tokens=3,
        cache_write_tokens=4,
        reasoning_tokens=5,
    )
    assert u + Usage(10, 20, 30, 40, 50) == Usage(11, 22, 33, 44, 55)
    assert Usage(input_tokens=7, output_tokens=5, cache_read_tokens=100).total_tokens == 12
    with pytest.raises(dataclasses.FrozenInstanceError):
        Usage().input_tokens = 3  # type: ignore[misc]


FIELDS = ("input_tokens", "output_tokens", "total_tokens", "requests", "tool_calls", "cost")


@pytest.mark.parametrize("field", FIELDS)
def test_usage_limits_are_unbounded_by_default_zero_allowed_negative_refused(field: str) -> None:
    assert getattr(UsageLimits(), field) is None
    assert getattr(UsageLimits(**{field: 0}), field) == 0
    with pytest.raises(ValueError, match=field):
        UsageLimits(**{field: -1})


def test_usage_limits_take_the_fields_positionally() -> None:
    limits = UsageLimits(1, 2, 3, 4, 5, 6.5)
    assert tuple(getattr(limits, f) for f in FIELDS) == (1, 2, 3, 4, 5, 6.5)
