"""Leases while tools hog threads or the event loop."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from golem import Agent, RunContext, Tool
from golem.durable.store import ClaimedRun, RunStatus, Store
from golem.durable.worker import AgentEntry, Worker
from golem.testing import FunctionModel
from golem.tool import DeferKind, Deferred, call_approved
from tests.support.durable.backends import Backend
from tests.support.durable.procs import eventually
from tests.support.durable.worker_app import approved_run, model, registry
from tests.support.store import LostAnswers

pytestmark = pytest.mark.loop


async def _approved(
    store: Store, reg: dict[str, AgentEntry], prefix: str, n: int, deps: Any
) -> str:
    return (await approved_run(store, reg, prefix, n, deps)).id


async def test_blocking_sync_tools_on_every_default_thread_keep_their_leases(
    backend: Backend, tmp_path: Path
) -> None:
    exec_dir = tmp_path / "exec"
    exec_dir.mkdir()
    threads = 2
    executor = concurrent.futures.ThreadPoolExecutor(max_workers=threads)
    asyncio.get_running_loop().set_default_executor(executor)
    observer = await backend.open()
    worker_store = await backend.open()  # one connection so far: renewals must open more
    reg = registry()
    deps = {"exec_dir": str(exec_dir), "block": True}
    ids = [await _approved(observer, reg, f"hog{i}", 1, deps) for i in range(threads)]
    worker = Worker(worker_store, reg, worker_id="w", lease_seconds=3, concurrency=threads)
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run_forever(0.05, stop))
    try:
        leases: dict[str, set[Any]] = {i: set() for i in ids}

        async def renewed_twice() -> bool:
            assert await observer.sweep_interrupted() == [], "a live lease was swept"
            for run_id in ids:
                run = await observer.get_run(run_id)
                assert run.status in (RunStatus.READY, RunStatus.RUNNING), run.status
                if run.lease_expires_at is not None:
                    leases[run_id].add(run.lease_expires_at)
            started = all((exec_dir / f"hog{i}-0.started").exists() for i in range(threads))
            return started and all(len(seen) >= 3 for seen in leases.values())

        await eventually(renewed_twice, 90, "every blocked run's lease to be renewed twice")
    finally:
        for i in range(threads):
            (exec_dir / f"hog{i}-0.release").touch()
    try:

        async def completed() -> bool:
            runs = [await observer.get_run(i) for i in ids]
            return all(r.status is RunStatus.COMPLETED for r in runs)

        await eventually(completed, 60, "the runs to complete")
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)
        await worker_store.close()
        await observer.close()
        executor.shutdown(wait=False)
    for i in range(threads):
        assert len((exec_dir / f"hog{i}-0").read_text().splitlines()) == 1


async def test_a_tool_blocking_the_loop_past_its_lease_runs_no_further_approved_call(
    backend: Backend, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "golem")
    ran: list[str] = []
    swept = threading.Event()

    def act(ctx: RunContext[Any], key: str) -> str:
        """Blocks the event loop (a sync tool run on it) until the run was swept."""
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, f"act on {key}")
        ran.append(key)
        if key == "loop-0":
            assert swept.wait(60), "never swept"
        return f"acted on {key}"

    agent: Agent[Any, str] = Agent(
        FunctionModel(model), tools=[Tool.from_function(act, run_in_thread=False)]
    )
    reg = {"acts": AgentEntry(agent)}
    store = await backend.open()
    run_id = await _approved(store, reg, "loop", 2, None)

    def sweeper() -> None:
        async def sweep() -> None:
            other = await backend.open()
            try:
                while run_id not in await other.sweep_interrupted():  # noqa: ASYNC110
                    await asyncio.sleep(0.05)
            finally:
                await other.close()
            swept.set()

        asyncio.run(sweep())

    thread = threading.Thread(target=sweeper)
    thread.start()
    try:
        worker = Worker(store, reg, worker_id="w", lease_seconds=0.5, sweep_interval=3600)
        assert await worker.run_once() is True
    finally:
        swept.set()
        thread.join(60)
    try:
        assert ran == ["loop-0"], "no approved call ran after the lease was lost"
        assert (await store.get_run(run_id)).status is RunStatus.INTERRUPTED
        assert "abandoned" in caplog.text
    finally:
        await store.close()


class _LateClaim(LostAnswers):
    """`LostAnswers` whose claim answers arrive `late` seconds after the lease began."""

    def __init__(self, store: Store, plan: dict[tuple[str, int], str], late: float) -> None:
        super().__init__(store, plan)
        self.late = timedelta(seconds=late)

    async def claim_ready(self, *args: Any, **kwargs: Any) -> ClaimedRun | None:
        claimed = await self._store.claim_ready(*args, **kwargs)
        return claimed and replace(claimed, lease_expires_at=claimed.lease_expires_at - self.late)


@pytest.mark.parametrize(
    ("late", "renewals", "status"),
    [(20, 3, RunStatus.COMPLETED), (31, 1, RunStatus.FAILED)],
    ids=["blips-retried", "lease-gone"],
)
async def test_a_failed_renewal_at_the_fence_is_tried_again_while_the_lease_lasts(
    backend: Backend, tmp_path: Path, late: float, renewals: int, status: RunStatus
) -> None:
    """Before an approved call, with less than half the lease left, the worker renews; a
    renewal failing for want of a database (a blip) is tried again instead of failing the
    run, while the local deadline lasts; past it the run fails on that error and no call runs."""
    store = await backend.open()
    try:
        run_id = await _approved(store, registry(), "fence", 1, {"exec_dir": str(tmp_path)})
        plan = {("renew_lease", 1): "before", ("renew_lease", 2): "before"}
        blips = _LateClaim(store, plan, late)
        worker = Worker(blips, registry(), worker_id="w", lease_seconds=30)  # type: ignore[arg-type]
        assert await worker.run_once() is True
        assert blips._calls["renew_lease"] == renewals
        run = await store.get_run(run_id)
        assert run.status is status
        if status is RunStatus.FAILED:
            assert "StoreError" in (run.outcome.error or "")  # type: ignore[union-attr]
        assert (tmp_path / "fence-0").exists() is (status is RunStatus.COMPLETED)
    finally:
        await store.close()
