"""The suite's own guards: a hanging test fails at its timeout, Hypothesis has no deadline."""

from __future__ import annotations

import pytest
from hypothesis import settings

HANGS = """
import asyncio
import threading

import pytest


@pytest.mark.timeout(1)
async def test_async_hang():
    await asyncio.Event().wait()


@pytest.mark.timeout(1)
def test_blocked_thread_wait():
    threading.Event().wait()


def test_passes():
    pass
"""


def test_every_test_has_a_generous_timeout(pytestconfig: pytest.Config) -> None:
    assert 60 <= float(pytestconfig.getini("timeout")) <= 600


def test_a_hanging_test_fails_at_its_timeout_and_the_run_goes_on(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini(
        "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"
    )
    pytester.makepyfile(test_hangs=HANGS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=60)
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(["*Timeout (>1.0s) from pytest-timeout*"])


def test_hypothesis_has_no_per_example_deadline() -> None:
    assert settings.default.deadline is None
