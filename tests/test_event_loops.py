"""golem behaves the same on any asyncio event loop: asyncio's own, and uvloop.

`golem serve` runs on uvloop whenever it is installed (uvicorn picks it), and so does
`golem worker` (`--loop auto`). uvloop's clock counts whole milliseconds and its timers may
fire a little before `loop.time()` reads their deadline; a tool timeout must still be a
`ToolTimeout` then. `make test` also runs the loop-sensitive tests on uvloop
(`GOLEM_TEST_LOOP=uvloop`); the tests here pin what each loop must do whatever the suite's
default is.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from golem import Agent, Message, RunContext, ToolCall
from golem.durable.store import Decision, RunStatus, Store
from golem.durable.worker import Worker, start_run
from golem.errors import Stage, ToolTimeout
from golem.result import RunError
from golem.testing import ScriptedModel
from golem.tool import Tool
from tests.support.durable.backends import BACKENDS, Backend, backend_for
from tests.support.durable.procs import eventually
from tests.support.worker import bank_app

pytestmark = pytest.mark.loop

WAIT = 30.0  # a guard against a hang, not a duration the tests assert


class _EarlyTimers(asyncio.SelectorEventLoop):
    """A loop that fires every timer 2 ms before its deadline (as uvloop may)."""

    def call_at(
        self, when: float, callback: Callable[..., object], *args: Any, context: Any = None
    ) -> asyncio.TimerHandle:
        return super().call_at(when - 0.002, callback, *args, context=context)


def _uvloop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    module = pytest.importorskip("uvloop")
    factory: Callable[[], asyncio.AbstractEventLoop] = module.new_event_loop
    return factory


LOOPS: dict[str, Callable[[], Callable[[], asyncio.AbstractEventLoop]]] = {
    "asyncio": lambda: asyncio.SelectorEventLoop,
    "early-timers": lambda: _EarlyTimers,
    "uvloop": _uvloop_factory,
}


def _on(loop: str, main: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    with asyncio.Runner(loop_factory=LOOPS[loop]()) as runner:
        return runner.run(main())


async def _overrun() -> RunError:
    async def slow(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        await asyncio.sleep(5)
        return "late"

    call = Message("assistant", tool_calls=[ToolCall("c1", "slow", "{}")])
    agent = Agent(
        ScriptedModel(call), tools=[Tool("slow", "slow", {"type": "object"}, slow, timeout=0.01)]
    )
    try:
        await agent.run("go")
    except RunError as exc:
        return exc
    raise AssertionError("the run did not fail")


@pytest.mark.parametrize("loop", LOOPS)
def test_an_async_tool_cut_off_at_its_timeout_is_a_tool_timeout(loop: str) -> None:
    error = _on(loop, _overrun)
    assert error.stage is Stage.TOOL
    assert isinstance(error.__cause__, ToolTimeout), repr(error.__cause__)


async def _cycle(open_store: Callable[[], Coroutine[Any, Any, Store]]) -> None:
    """Pause → decide → a waiting worker resumes it (woken by the store's change feed), with
    a store call cancelled mid-flight on the way: the store stays usable and closes."""
    registry, ran = bank_app()  # a paying agent whose approved calls are recorded in `ran`
    store = await open_store()
    try:
        run = await start_run(store, registry, "bank", "pay", started_by="ann")
        stop = asyncio.Event()
        worker = Worker(store, registry, worker_id="w", concurrency=2)
        serving = asyncio.create_task(worker.run_forever(poll_interval=3600, stop_event=stop))
        lookup = asyncio.create_task(store.get_run(run.id))
        await asyncio.sleep(0)
        lookup.cancel()  # cancelled as its transaction starts: it finishes without its caller
        with contextlib.suppress(asyncio.CancelledError):
            await lookup
        await store.decide(run.id, "c1", Decision.approve(), decided_by="bob")

        async def completed() -> bool:
            return (await store.get_run(run.id)).status is RunStatus.COMPLETED

        await eventually(completed, WAIT, "the worker to complete the run")
        stop.set()
        await asyncio.wait_for(serving, WAIT)
        assert ran == ["c1"]
    finally:
        await store.close()


@pytest.mark.parametrize("kind", BACKENDS)
@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_a_durable_cycle_with_a_cancelled_store_call(loop: str, kind: str, tmp_path: Path) -> None:
    backend: Backend
    with backend_for(kind, tmp_path) as backend:
        _on(loop, lambda: _cycle(backend.open))
