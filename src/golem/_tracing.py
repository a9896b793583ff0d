"""The switch between golem's store, worker and service operations and
`golem.integrations.otel`, which installs `hooks`; until then each operation runs directly."""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any, Protocol, TypeVar, cast

__all__ = ["Hooks", "ToolSpans", "hooks", "identify", "store_op", "worker_op"]

_F = TypeVar("_F", bound=Callable[..., Coroutine[Any, Any, Any]])


class ToolSpans(Protocol):
    """What the run loop asks of a run's tracer: make a tool call's span current while it runs."""

    def enter_tool(self, call_id: str) -> object | None:
        """Make the span of tool call `call_id` current; returns a token for `leave_tool`."""
        ...

    def leave_tool(self, token: object | None) -> None:
        """Restore the context `enter_tool` replaced."""
        ...


class Hooks(Protocol):
    """What `golem.integrations.otel` installs while `instrument()` is in effect."""

    def store_op(
        self, op: str, fn: Callable[..., Coroutine[Any, Any, Any]], args: Any, kwargs: Any
    ) -> Coroutine[Any, Any, Any]:
        """Run one store operation as a `golem.durable.store.<op>` span."""
        ...

    def worker_op(
        self, op: str, fn: Callable[..., Coroutine[Any, Any, Any]], args: Any, kwargs: Any
    ) -> Coroutine[Any, Any, Any]:
        """Run one worker step as a current `golem.durable.worker.<op>` span."""
        ...

    def identify(self, identity: str) -> None:
        """Record the authenticated operator on the current span."""
        ...

    def serve(
        self, app: Any, scope: Any, receive: Any, send: Any, route: str
    ) -> Coroutine[Any, Any, None]:
        """Handle one HTTP request of the service as a server span (`route`: its template)."""
        ...


hooks: Hooks | None = None
"""Set by `golem.integrations.otel.instrument()`, cleared by `uninstrument()`."""


def _decorator(kind: str, op: str) -> Callable[[_F], _F]:
    def decorate(fn: _F) -> _F:
        @functools.wraps(fn)
        def traced(*args: Any, **kwargs: Any) -> Coroutine[Any, Any, Any]:
            h = hooks
            if h is None:
                return fn(*args, **kwargs)  # the coroutine itself: no extra frame when off
            run: Coroutine[Any, Any, Any] = getattr(h, kind)(op, fn, args, kwargs)
            return run

        return cast(_F, traced)

    return decorate


def store_op(op: str) -> Callable[[_F], _F]:
    """Trace an async store method as the span `golem.durable.store.<op>` when tracing is on."""
    return _decorator("store_op", op)


def worker_op(op: str) -> Callable[[_F], _F]:
    """Trace an async worker method as the current span `golem.durable.worker.<op>` when on."""
    return _decorator("worker_op", op)


def identify(identity: str) -> None:
    """Record `identity` (an authenticated operator) as `enduser.id` on the current span."""
    h = hooks
    if h is not None:
        h.identify(identity)
