"""Fixtures of the store contract suite: one `store` per backend and test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from golem.store import Store
from tests.store.backends import BACKENDS, Backend, backend_for


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """A fresh, empty database of each backend."""
    with backend_for(request.param, tmp_path) as b:
        yield b


@pytest.fixture
async def store(backend: Backend) -> AsyncIterator[Store]:
    """An open store on `backend`, closed after the test."""
    s = await backend.open()
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
def exec_dir(tmp_path: Path) -> Path:
    """Where approved calls of the chaos agent record each execution (`chaos.executions`)."""
    d = tmp_path / "exec"
    d.mkdir()
    return d
