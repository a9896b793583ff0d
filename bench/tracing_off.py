"""What the store/worker span decorators cost when tracing is off (and what spans cost on).

    python bench/tracing_off.py

One cycle through a SQLite store: `start_run` pauses on a gated tool and saves the run →
`Store.decide` approves it → `Worker.run_once` claims, resumes and finishes it. Measured
three ways in this process, best of N rounds each:

- **floor**: the store and worker methods with their `@store_op` / `@worker_op` decorators
  peeled off (`__wrapped__`), as if the instrumentation did not exist;
- **off**: golem as shipped, without `otel.instrument()` (what every user pays);
- **on**: `otel.instrument()` with an SDK tracer provider whose processor drops every span
  (the cost of creating the spans, not of exporting them).

off/floor is the price of having the instrumentation; it should be 1.00 within noise (a
cycle makes about six decorated calls of a few milliseconds each; the decorator's own cost is
printed first, measured on a trivial coroutine where it is not lost in the noise).
"""

from __future__ import annotations

import asyncio
import gc
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from golem import Agent, Message, ToolCall
from golem.durable.store import Decision
from golem.durable.store._sql import SQLStore
from golem.durable.store.sqlite import SQLiteStore
from golem.durable.worker import AgentEntry, Worker, start_run
from golem.integrations import otel
from golem.model import ModelRequest
from golem.testing import FunctionModel
from golem.tool import DeferKind, Deferred, call_approved

CYCLES = 40
ROUNDS = 7


def model(request: ModelRequest) -> Message | str:
    if request.messages[-1].role == "user":
        return Message("assistant", tool_calls=[ToolCall("c1", "act", '{"n": 1}')])
    return "done"


def act(n: int) -> str:
    """Act after approval."""
    if not call_approved():
        raise Deferred(DeferKind.APPROVAL, "needs sign-off")
    return "acted"


REGISTRY = {"ops": AgentEntry(Agent(FunctionModel(model, keep_requests=0), tools=[act]))}


@contextmanager
def peeled() -> Iterator[None]:
    """The decorated store and worker methods replaced by the functions they wrap."""
    saved: list[tuple[type, str, Callable[..., Any]]] = []
    for cls in (SQLStore, Worker):
        for name, value in list(vars(cls).items()):
            inner = getattr(value, "__wrapped__", None)
            if inner is not None:
                saved.append((cls, name, value))
                setattr(cls, name, inner)
    try:
        yield
    finally:
        for cls, name, value in saved:
            setattr(cls, name, value)


async def cycles(store: SQLiteStore, worker: Worker, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        run = await start_run(store, REGISTRY, "ops", "go", started_by="bench")
        await store.decide(run.id, "c1", Decision.approve(), decided_by="alice")
        assert await worker.run_once()
    return (time.perf_counter() - start) / n * 1e6


async def measure() -> dict[str, float]:
    """Best µs per cycle of each mode; the modes' rounds alternate (in a rotating order), so
    machine load that drifts during the run weighs on all of them alike."""
    try:
        from opentelemetry.sdk.trace import TracerProvider
    except ImportError:
        provider = None
        print("on: needs opentelemetry-sdk")
    else:
        provider = TracerProvider()  # no processor: spans are created and dropped
    modes = ["floor", "off"] + (["on"] if provider is not None else [])
    best: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        stores = {m: await SQLiteStore.open(Path(tmp) / f"{m}.db") for m in modes}
        workers = {
            m: Worker(s, REGISTRY, worker_id=m, sweep_interval=3600) for m, s in stores.items()
        }
        try:
            for round_ in range(ROUNDS + 1):  # round 0 warms up
                for mode in modes[round_ % len(modes) :] + modes[: round_ % len(modes)]:
                    if mode == "on":
                        otel.instrument(provider)
                    gc.disable()
                    try:
                        if mode == "floor":
                            with peeled():
                                micros = await cycles(stores[mode], workers[mode], CYCLES)
                        else:
                            micros = await cycles(stores[mode], workers[mode], CYCLES)
                    finally:
                        gc.enable()
                        otel.uninstrument()
                    if round_:
                        best[mode] = min(best.get(mode, micros), micros)
        finally:
            for s in stores.values():
                await s.close()
    return best


async def per_call() -> tuple[float, float]:
    """ns per await of a trivial coroutine function, bare and behind `@store_op` (off)."""
    from golem._tracing import store_op

    async def bare() -> None:
        return None

    wrapped = store_op("bench")(bare)
    n = 200_000
    best = {"bare": float("inf"), "wrapped": float("inf")}
    for _ in range(ROUNDS):
        for name, fn in (("bare", bare), ("wrapped", wrapped)):
            start = time.perf_counter()
            for _ in range(n):
                await fn()
            best[name] = min(best[name], (time.perf_counter() - start) / n * 1e9)
    return best["bare"], best["wrapped"]


def main() -> None:
    bare, wrapped = asyncio.run(per_call())
    print(f"{'await of a trivial coroutine, bare':<58} {bare:>10.0f} ns")
    print(f"{'the same behind @store_op, tracing off':<58} {wrapped:>10.0f} ns")
    print(f"decorator cost when off: {wrapped - bare:.0f} ns per store/worker call")
    best = asyncio.run(measure())
    labels = {
        "floor": "floor (no decorators)",
        "off": "off (decorated, not instrumented)",
        "on": "on (instrumented, spans dropped)",
    }
    for mode, micros in best.items():
        print(f"{labels[mode]:<58} {micros:>10.1f} µs/cycle")
    for mode in ("off", "on"):
        if mode in best:
            print(f"{mode} / floor = {best[mode] / best['floor']:.3f}")


if __name__ == "__main__":
    main()
