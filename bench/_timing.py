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


def rounds(
    jobs: dict[str, Callable[[], Awaitable[object]]],
    *,
    count: int = 15,
    per_round: dict[str, int],
) -> dict[str, list[float]]:
    """CPU µs per call of each job, one sample per job in each of `count` rounds.

    Every round runs every job (in an order that rotates from round to round), so a burst of
    load on the machine hits all of them alike; a ratio is then taken round by round. The
    garbage collector stays on, as in production.
    """
    names = list(jobs)

    async def one(name: str) -> float:
        n = per_round[name]
        start = time.process_time()
        for _ in range(n):
            await jobs[name]()
        return (time.process_time() - start) / n * 1e6

    async def main() -> dict[str, list[float]]:
        for name in names:  # warm up caches, schemas, imports
            await jobs[name]()
            await one(name)
        samples: dict[str, list[float]] = {name: [] for name in names}
        for r in range(count):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                samples[name].append(await one(name))
        return samples

    return asyncio.run(main())


def spread(values: list[float]) -> str:
    """`median (min–max)` of a list of figures."""
    ordered = sorted(values)
    middle = ordered[len(ordered) // 2]
    return f"{middle:8.1f} ({ordered[0]:.1f}–{ordered[-1]:.1f})"


def ratio_table(title: str, samples: dict[str, list[float]], ours: str) -> None:
    """Each job's CPU µs and its ratio to `ours`, round by round: median (min–max)."""
    print(f"\n{title}\nCPU µs per job, and the ratio of each job to {ours} (a job cheaper than")
    print(f"{ours} shows {ours} ÷ job instead), round by round: median (min–max) of the rounds")
    for name, values in samples.items():
        ratios = [v / o for v, o in zip(values, samples[ours], strict=True)]
        if name == ours:
            ratio = ""
        elif sorted(ratios)[len(ratios) // 2] >= 1:
            ratio = f"   {spread(ratios)} × {ours}"
        else:
            ratio = f"   {ours} is {spread([1 / r for r in ratios])} ×"
        print(f"  {name:<34} {spread(values)} µs{ratio}")
