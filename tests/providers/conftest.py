"""Test cases drawn from the recordings never parametrize to nothing silently.

A test parametrized over recorded interactions gets an empty parameter set when the recordings are
missing; pytest would skip it with "got empty parameter set". Here it skips with the reason that
says where the recordings were looked for and how to set `GOLEM_RECORDINGS`. When the recordings
are there and a selection is still empty, the filter or the recordings changed: the test fails.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.recordings import MISSING, RECORDINGS, available

HERE = Path(__file__).resolve().parent
EMPTY = "got empty parameter set"


def _empty_set_mark(item: pytest.Item) -> Any:
    for mark in item.own_markers:
        if mark.name == "skip" and str(mark.kwargs.get("reason", "")).startswith(EMPTY):
            return mark
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE not in Path(str(item.path)).resolve().parents:
            continue
        mark = _empty_set_mark(item)
        if mark is None:
            continue
        if not available():
            item.add_marker(pytest.mark.skip(reason=MISSING), append=False)
            continue
        item.own_markers.remove(mark)
        message = (
            f"{item.nodeid}: no recorded interaction selected from {RECORDINGS} "
            "(the recordings are there: the selection or the recordings changed)"
        )

        def fail(message: str = message) -> None:
            pytest.fail(message, pytrace=False)

        item.setup = fail  # type: ignore[method-assign]  (before the empty parameter's fixtures)
