"""`ServiceSettings`: everything `create_app` is built from, in one checked object; and
`ServiceState`: what the app keeps while it runs, shared by every route."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from starlette.requests import Request

from golem.durable.store import Store
from golem.durable.store.records import check_seconds
from golem.durable.worker import AgentRegistry
from golem.seal import SealKey, SealKeys, as_seal_keys
from golem.service.auth import AuthConfig, LoginLimiter, TokenFailures
from golem.service.errors import ApiError
from golem.service.notify import Webhook
from golem.service.schemas import MAX_EXPIRES_IN
from golem.service.views import Presenter

__all__ = ["ServiceSettings"]

_SECONDS = ("worker_poll_interval", "lease_seconds", "stream_poll_interval")  # as the store checks

_POSITIVE = (
    "worker_concurrency",
    "max_body_bytes",
    "body_timeout",
    "stream_heartbeat",
    "max_streams_per_identity",
    "login_attempts_per_minute",
    "token_failures_per_minute",
)


@dataclass(frozen=True)
class ServiceSettings:
    """The approval service's configuration; `ValueError` for a non-positive duration or
    limit, an undo window outside 0-60 s, a default expiry past `MAX_EXPIRES_IN` or a seal
    key shorter than 32 bytes."""

    registry: AgentRegistry
    """Agent name → `AgentEntry`: the agents runs are started and resumed with."""
    store: Store | str
    """An open `Store` (the caller closes it), or a URL the app opens and closes."""
    _: KW_ONLY
    auth: AuthConfig
    """The approvers and their tokens (`AuthConfig.from_env()`)."""
    run_worker: bool = False
    """Also run a `Worker` in-process for the app's lifetime (`golem serve`)."""
    worker_poll_interval: float = 0.5
    """Seconds between the in-process worker's polls."""
    worker_id: str | None = None
    """The in-process worker's identity (None: host, pid and a random part)."""
    lease_seconds: float = 60.0
    """The in-process worker's lease length."""
    worker_concurrency: int = 1
    """Runs the in-process worker resumes at once."""
    max_body_bytes: int = 256 * 1024
    """Larger request bodies get 413."""
    body_timeout: float = 30.0
    """Seconds a request body may take to arrive in full (408 beyond)."""
    stream_poll_interval: float = 0.5
    """How often `/api/events` polls the audit log (seconds)."""
    stream_heartbeat: float = 15.0
    """Seconds between keep-alive comments on an event stream, on a fixed schedule."""
    default_expires_in: float | None = None
    """Seconds until a started run's calls expire unless the request says (None: never)."""
    max_streams_per_identity: int = 8
    """Open `/api/events` streams allowed per approver (429 beyond)."""
    login_attempts_per_minute: int = 10
    """`POST /login` attempts allowed per client address per minute (429 beyond)."""
    token_failures_per_minute: int = 30
    """Wrong bearer tokens allowed per client address per minute (then 429 for a while)."""
    undo_seconds: float = 5.0
    """How long the inbox holds a decision, with an Undo button (0: send at once)."""
    webhooks: Sequence[Webhook] = ()
    """Notified when a run pauses, a call is about to expire or a run ends."""
    public_url: str = "http://127.0.0.1:8000"
    """The inbox's address as people reach it, for the webhooks' deep links."""
    expiring_within: float = 900.0
    """Seconds before a call's deadline that `call.expiring` is sent."""
    presenters: Mapping[str, Presenter] = field(default_factory=dict)
    """Tool name → `fn(args) -> Presentation`, shown on the tool's cards."""
    seal_key: SealKey | None = None
    """The workers' seal key: pending calls are saved sealed and verified (None: unsealed)."""

    def __post_init__(self) -> None:
        for name in _SECONDS:
            check_seconds(name, getattr(self, name))
        for name in _POSITIVE:
            value = getattr(self, name)
            if value <= 0:
                raise ValueError(f"{name} must be positive, got {value!r}")
        if not 0 <= self.undo_seconds <= 60:
            raise ValueError(f"undo_seconds must be between 0 and 60, got {self.undo_seconds!r}")
        expires = self.default_expires_in
        if expires is not None and not 0 < expires <= MAX_EXPIRES_IN:
            raise ValueError(
                f"default_expires_in must be positive and at most {MAX_EXPIRES_IN:.0f} s, "
                f"got {expires!r}"
            )
        if self.seal_key is not None:
            as_seal_keys(self.seal_key)  # raises ValueError for a short key
        object.__setattr__(self, "webhooks", tuple(self.webhooks))


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
