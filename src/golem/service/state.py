"""`ServiceState`: what every route shares (`app.state.golem`), and the store it reads."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request

from golem.durable.store import Store
from golem.durable.worker import AgentRegistry
from golem.seal import SealKeys
from golem.service.auth import AuthConfig, LoginLimiter, TokenFailures
from golem.service.errors import ApiError
from golem.service.settings import ServiceSettings

# Internals of `golem.service.create_app`; nothing here is public API.
__all__: list[str] = []


@dataclass
class ServiceState:
    """What every route needs (`app.state.golem`): the settings and what the app keeps while
    it runs."""

    settings: ServiceSettings
    store: Store | None
    """None until the lifespan opened it (when the app was given a URL)."""
    seal_key: SealKeys | None = None
    login_limiter: LoginLimiter = field(default_factory=LoginLimiter)
    token_failures: TokenFailures = field(default_factory=TokenFailures)
    open_streams: dict[str, int] = field(default_factory=dict)
    """Identity → event streams open now."""
    stream_recheck: float = 5.0
    """Seconds between re-checks of an open stream's credential."""
    notifier: Any = None
    """The webhook `Notifier` while the app runs with webhooks."""

    @property
    def registry(self) -> AgentRegistry:
        return self.settings.registry

    @property
    def auth(self) -> AuthConfig:
        return self.settings.auth


def require_store(state: ServiceState) -> Store:
    """The store, or 503 while it is still being opened."""
    if state.store is None:
        raise ApiError(503, "unavailable", "the store is not open yet")
    return state.store


def state_of(request: Request) -> ServiceState:
    """The app's shared state (`app.state.golem`)."""
    state: ServiceState = request.app.state.golem
    return state
