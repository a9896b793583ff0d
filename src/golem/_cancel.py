"""Cancellation that awaited code swallowed: the caller's cancellation always wins."""

from __future__ import annotations

import asyncio

__all__ = ["cancel_requests", "raise_if_swallowed"]


def cancel_requests() -> int:
    """The current task's pending cancellation requests (`Task.cancelling()`; 0 outside a
    task)."""
    task = asyncio.current_task()
    return task.cancelling() if task is not None else 0


def raise_if_swallowed(baseline: int) -> None:
    """Raise `CancelledError` when the current task has more cancellation requests than
    `baseline` (its count when the run started): a cancellation arrived during the last
    await and the awaited code — a tool, a model, a hook — swallowed it instead of
    letting it propagate. The run then stops as cancelled, never turning the caller's
    cancellation into a result, a tool error or a next step.

    Raises:
        asyncio.CancelledError: a cancellation arrived and was not honoured.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling() > baseline:
        raise asyncio.CancelledError
