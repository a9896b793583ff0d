"""Counting an event loop's wake-ups from other threads."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

__all__ = ["counting_wake_ups"]


@contextlib.contextmanager
def counting_wake_ups(loop: asyncio.AbstractEventLoop) -> Iterator[list[object]]:
    """The callbacks other threads hand the loop (`call_soon_threadsafe`, one self-pipe
    wake-up each) while the block runs."""
    wakes: list[object] = []
    real = loop.call_soon_threadsafe

    def counting(callback: Any, *args: Any, **kwargs: Any) -> Any:
        wakes.append(callback)
        return real(callback, *args, **kwargs)

    loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
    try:
        yield wakes
    finally:
        loop.call_soon_threadsafe = real  # type: ignore[method-assign]
