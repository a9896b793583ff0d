"""Cancellation that awaited code swallowed: the caller's cancellation always wins
(`Task.cancelling()` compared after user code; on from Python 3.13, ADR 0067)."""

from __future__ import annotations

import asyncio
import sys

__all__ = ["EXACT_CANCELLING", "cancel_requests", "raise_if_swallowed"]

EXACT_CANCELLING = sys.version_info >= (3, 13)
"""Whether `Task.cancelling()` counts only unhonoured cancellations (Python 3.13+)."""


def cancel_requests() -> int:
    """The current task's pending cancellation requests (`Task.cancelling()`; 0 outside a
    task, or where the count is not exact)."""
    if not EXACT_CANCELLING:
        return 0
    task = asyncio.current_task()
    return task.cancelling() if task is not None else 0


def raise_if_swallowed(baseline: int) -> None:
    """Raise `CancelledError` when the task has more cancellation requests than `baseline`
    (awaited code swallowed the caller's cancellation); a no-op before Python 3.13."""
    if not EXACT_CANCELLING:
        return
    task = asyncio.current_task()
    if task is not None and task.cancelling() > baseline:
        raise asyncio.CancelledError
