"""What the bench scripts share: timing, reporting, and a model that costs nothing."""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Awaitable, Callable

from golem.model import ModelRequest, ModelResponse


def measure(
    fn: Callable[[], Awaitable[object]],
    *,
    rounds: int = 7,
    per_round: int = 200,
    cpu: bool = False,
) -> float:
    """µs per call of the async `fn`: the best of `rounds` rounds (after a warm-up).

    The best round, as `timeit` reports, is the least disturbed by other work on the
    machine; both sides of a comparison are measured the same way. `cpu=True` counts this
    process's CPU time (all its threads) instead of the wall clock: on a shared machine the
    wall clock also measures the others.
    """
    clock = time.process_time if cpu else time.perf_counter

    async def run_round(n: int) -> float:
        start = clock()
        for _ in range(n):
            await fn()
        return (clock() - start) / n * 1e6

    async def main() -> float:
        await run_round(max(20, per_round // 5))  # warm up caches, schemas, imports
        samples = []
        gc.disable()
        try:
            for _ in range(rounds):
                samples.append(await run_round(per_round))
        finally:
            gc.enable()
        return min(samples)

    return asyncio.run(main())


def report(label: str, micros: float) -> None:
    print(f"{label:<58} {micros:>10.1f} µs")


class InstantModel:
    """A model that answers at once from a function: what remains is golem's own cost.

    (golem.testing.FunctionModel would add its recording of deep-copied requests.)
    """

    def __init__(self, respond: Callable[[ModelRequest], ModelResponse]) -> None:
        self.respond = respond

    async def generate(self, request: ModelRequest) -> ModelResponse:
        return self.respond(request)
