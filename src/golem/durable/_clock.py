"""This machine's elapsed-time clock, for lease arithmetic that no wall-clock step moves."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

__all__ = ["elapsed"]


def elapsed() -> float:
    """Seconds on this machine's elapsed-time clock: never stepped by a wall-clock change,
    and (where the system has one: Linux `CLOCK_BOOTTIME`) still counting while the machine
    is suspended, which `time.monotonic()` does not."""
    return _elapsed()


_elapsed: Callable[[], float] = (
    functools.partial(time.clock_gettime, time.CLOCK_BOOTTIME)
    if hasattr(time, "CLOCK_BOOTTIME")
    else time.monotonic
)
