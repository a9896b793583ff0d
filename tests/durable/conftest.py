"""Fixtures of the durable layer's tests: a fresh database of each backend."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.durable.backends import BACKENDS, Backend, backend_for


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """A fresh, empty database of each backend (PostgreSQL: a schema of its own)."""
    with backend_for(request.param, tmp_path) as b:
        yield b
