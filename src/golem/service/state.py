"""`ServiceState`: what every route shares (`app.state.golem`), and the store it reads."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request

from golem.durable.store import Store
from golem.durable.worker import AgentRegistry
from golem.seal import SealKey
from golem.service.auth import AuthConfig, LoginLimiter, TokenFailures
from golem.service.errors import ApiError

# Internals of `golem.service.create_app`; nothing here is public API.
__all__: list[str] = []


@dataclass
class ServiceState:
    """What every route needs: the registry, the store, auth and limits (`app.state.golem`)."""

    registry: AgentRegistry
    """Agent name → entry."""
    store: Store | None
    """The store (None until the lifespan opened it when the app was given a URL)."""
    auth: AuthConfig
    """Tokens, approvers and signing key."""
    max_body_bytes: int
    """Largest accepted request body."""
    stream_poll_interval: float
    """How often the event stream polls the audit log (seconds)."""
    stream_heartbeat: float
    """How often the event stream sends a keep-alive comment (seconds)."""
    default_expires_in: float | None
    """Default deadline of started runs' pending calls (seconds), None for none."""
    undo_seconds: float = 5.0
    """The inbox's undo window before a decision is sent (0: send at once; API unaffected)."""
    max_streams_per_identity: int = 8
    """Open event streams allowed per approver identity."""
    stream_recheck: float = 5.0
    """Seconds between re-checks of an open stream's session or stream token."""
    open_streams: dict[str, int] = field(default_factory=dict)
    """Identity → event streams open now."""
    login_limiter: LoginLimiter = field(default_factory=LoginLimiter)
    """Sign-in attempts allowed per client address."""
    token_failures: TokenFailures = field(default_factory=TokenFailures)
    """Wrong bearer tokens allowed per client address (429 beyond, for a while)."""
    presenters: dict[str, Any] = field(default_factory=dict)
    """Tool name → presenter of its calls in the inbox (`golem.service.views.Presentation`)."""
    notifier: Any = None
    """The webhook `Notifier` while the app runs with webhooks (else None)."""
    seal_key: SealKey | None = None
    """The workers' seal key: runs started here are saved with every pending call sealed."""


def require_store(state: ServiceState) -> Store:
    """The store, or 503 while it is still being opened."""
    if state.store is None:
        raise ApiError(503, "unavailable", "the store is not open yet")
    return state.store


def state_of(request: Request) -> ServiceState:
    """The app's shared state (`app.state.golem`)."""
    state: ServiceState = request.app.state.golem
    return state
