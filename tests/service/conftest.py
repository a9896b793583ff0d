"""Fixtures of the service tests: a SQLite store, approvers, the app and HTTP clients."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from golem.durable.store import Store
from golem.durable.store.sqlite import SQLiteStore
from golem.service import AuthConfig, ServiceSettings, create_app
from tests.support.agents import build_registry
from tests.support.service import StartRun, bearer, make_auth


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    """An open SQLite store in a temp directory."""
    s = await SQLiteStore.open(tmp_path / "golem.db")
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
def registry() -> Any:
    """The test agents (twin, mixed, echo, broken)."""
    return build_registry()


@pytest.fixture
def auth() -> AuthConfig:
    """The test approvers."""
    return make_auth()


@pytest.fixture
def app(registry: Any, store: Store, auth: AuthConfig) -> Starlette:
    """The service over the test store (no in-process worker)."""
    return create_app(
        ServiceSettings(registry, store, auth=auth, stream_poll_interval=0.02, max_body_bytes=4096)
    )


@pytest.fixture
async def client(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    """An in-process HTTP client of the app (no token set)."""
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://golem.test") as c:
        yield c


@pytest.fixture
def start(client: httpx.AsyncClient) -> StartRun:
    """Start a run through the API as alice (or `who`) and return its JSON."""

    async def go(
        agent: str = "twin", prompt: str = "ship it", who: str = "alice", **extra: Any
    ) -> dict[str, Any]:
        res = await client.post(
            "/api/runs", json={"agent": agent, "prompt": prompt, **extra}, headers=bearer(who)
        )
        assert res.status_code == 201, res.text
        run: dict[str, Any] = res.json()["run"]
        return run

    return go
