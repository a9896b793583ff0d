"""Fixtures of the service tests: a SQLite store, approvers, the app and HTTP clients."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from golem.durable.store import Store
from golem.durable.store.sqlite import SQLiteStore
from golem.service import Approver, AuthConfig, ServiceSettings, create_app
from tests.service.agents import build_registry

TOKENS = {
    "alice": "tok-alice",  # may do everything
    "olga": "tok-olga",  # agents twin + echo only
    "tess": "tok-tess",  # tool lookup only
    "vic": "tok-vic",  # may not start runs
}


def make_auth() -> AuthConfig:
    """The approvers every service test uses."""
    return AuthConfig(
        tokens={
            TOKENS["alice"]: Approver("alice"),
            TOKENS["olga"]: Approver("olga", agents=frozenset({"twin", "echo"})),
            TOKENS["tess"]: Approver("tess", tools=frozenset({"lookup"})),
            TOKENS["vic"]: Approver("vic", can_start=False),
        },
        secret=b"test-secret-that-is-32-bytes-long",
    )


def bearer(who: str) -> dict[str, str]:
    """The Authorization header of a test approver."""
    return {"Authorization": f"Bearer {TOKENS[who]}"}


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


StartRun = Callable[..., Awaitable[dict[str, Any]]]


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
