"""A store call that commits but whose answer never arrives (the connection died after the COMMIT
was sent): the worker must neither lose the run nor run its approved call twice."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from golem import new_id
from golem.durable.store import AuditAction, Decision, RunRecord, RunStatus, Store, utc_now
from golem.durable.worker import AgentEntry, Worker, start_run
from golem.errors import StoreError
from tests.support.durable.chaos import chaos_registry, executions, until
from tests.support.durable.worker_app import approved_run, prompt_for
from tests.support.store import LostAnswers

_FAULTY = ["claim_ready_many", "finish", "list_runs_page", "get_run", "sweep_interrupted"]


@settings(
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    faults=st.dictionaries(
        st.tuples(st.sampled_from(_FAULTY), st.integers(1, 4)),
        st.sampled_from(["before", "after"]),
        max_size=5,
    )
)
@example(faults={("claim_ready_many", 1): "after"})
@example(faults={("claim_ready_many", 1): "after", ("list_runs_page", 1): "before"})
@example(faults={("claim_ready_many", 1): "after", ("claim_ready_many", 2): "before"})
@example(faults={("finish", 1): "after", ("finish", 2): "before", ("get_run", 1): "before"})
async def test_whatever_answers_are_lost_every_approved_run_completes_once(
    store: Store, tmp_path: Path, faults: dict[tuple[str, int], str]
) -> None:
    """Any mix of store calls failing before they ran, or after they committed: the worker
    completes every approved run, each approved call executed exactly once, each run
    claimed once."""
    exec_dir = tmp_path / new_id()
    exec_dir.mkdir()
    registry = chaos_registry(exec_dir)
    ids = []
    for i in range(3):
        run = await start_run(store, registry, "acts", prompt_for(f"p{i}", 1), started_by="a")
        await store.decide(run.id, f"p{i}-0", Decision.approve(), decided_by="bob")
        ids.append(run.id)
    worker = Worker(
        LostAnswers(store, faults),  # type: ignore[arg-type]
        registry,
        worker_id=new_id(),
        concurrency=5,  # slots left free after the three runs: a batched claim follows a recovery
        sweep_interval=0,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run_forever(0.01, stop))
    try:

        async def completed() -> bool:
            runs = [await store.get_run(i) for i in ids]
            return all(r.status is RunStatus.COMPLETED for r in runs)

        await until(completed, f"every run to complete despite {faults}")
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
    assert executions(exec_dir) == {f"p{i}-0": [run_id] for i, run_id in enumerate(ids)}
    for run_id in ids:
        actions = [e.action for e in await store.audit(run_id)]
        assert actions.count(AuditAction.CLAIMED) == 1
        assert actions[-1] is AuditAction.COMPLETED


@pytest.fixture
async def approved(store: Store, exec_dir: Path) -> tuple[dict[str, AgentEntry], RunRecord]:
    """The chaos registry, and a run of it whose one call (`p-0`) is approved."""
    registry = chaos_registry(exec_dir)
    return registry, await approved_run(store, registry, "p", 1)


class LostAnswer:
    """`store`, except that the first call of `method` commits, then raises `StoreError`."""

    def __init__(self, store: Store, method: str) -> None:
        self._store = store
        self._method = method
        self.lost = 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if name != self._method or self.lost:
            return attr

        async def commit_then_lose(*args: Any, **kwargs: Any) -> Any:
            result = await attr(*args, **kwargs)
            if self.lost == 0 and result:  # a claim that took nothing answers nothing
                self.lost += 1
                raise StoreError("postgresql: server closed the connection unexpectedly")
            return result

        return commit_then_lose


@pytest.mark.parametrize("method", ["claim_ready_many", "claim_ready", "finish"])
async def test_a_call_whose_answer_is_lost_neither_strands_nor_repeats_the_run(
    store: Store, exec_dir: Path, approved: Any, method: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "golem")
    registry, run = approved

    flaky = LostAnswer(store, method)
    concurrency = 1 if method == "claim_ready" else 2
    worker = Worker(flaky, registry, worker_id="w", concurrency=concurrency)  # type: ignore[arg-type]
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run_forever(0.01, stop))
    try:

        async def completed() -> bool:
            return (await store.get_run(run.id)).status is RunStatus.COMPLETED

        await until(completed, "the run to complete")
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)

    assert flaky.lost == 1
    assert executions(exec_dir) == {"p-0": [run.id]}, "the approved call ran exactly once"
    actions = [e.action for e in await store.audit(run.id)]
    assert actions == [
        AuditAction.CREATED,
        AuditAction.DECIDED,
        AuditAction.READY,
        AuditAction.CLAIMED,
        AuditAction.COMPLETED,
    ]
    text = caplog.text
    assert "lease lost" not in text
    if method.startswith("claim"):
        assert f"run {run.id} was claimed by a claim whose answer was lost" in text


async def test_a_lost_claim_is_given_up_once_its_lease_ran_out(
    store: Store, exec_dir: Path, approved: Any
) -> None:
    """A claim whose answer was lost and whose lease ran out before the worker could look:
    the run is the sweep's (interrupted), never resumed late."""
    registry, run = approved
    flaky = LostAnswer(store, "claim_ready")
    worker = Worker(flaky, registry, worker_id="w", lease_seconds=0.001)  # type: ignore[arg-type]
    with pytest.raises(StoreError):
        await worker.run_once()

    async def lapsed() -> bool:
        return (await store.sweep_interrupted()) == [run.id]

    await until(lapsed, "the lease to run out")
    assert await worker.run_once() is False
    assert executions(exec_dir) == {}
    assert (await store.get_run(run.id)).status is RunStatus.INTERRUPTED


async def test_a_worker_stopped_right_after_a_lost_claim_still_resumes_its_runs(
    store: Store, exec_dir: Path, approved: Any
) -> None:
    """The stop comes between a claim whose answer was lost and the next turn: the runs
    it took are this worker's in-flight runs, resumed as part of the graceful drain."""
    registry, run = approved
    stop = asyncio.Event()

    class StopOnLoss(LostAnswer):
        def __getattr__(self, name: str) -> Any:
            attr = super().__getattr__(name)
            if name != "claim_ready_many":
                return attr

            async def claim(*args: Any, **kwargs: Any) -> Any:
                try:
                    return await attr(*args, **kwargs)
                finally:
                    if self.lost:
                        stop.set()

            return claim

    flaky = StopOnLoss(store, "claim_ready_many")
    worker = Worker(flaky, registry, worker_id="w", concurrency=2)  # type: ignore[arg-type]
    await asyncio.wait_for(worker.run_forever(0.01, stop), 30)
    assert flaky.lost == 1
    assert (await store.get_run(run.id)).status is RunStatus.COMPLETED
    assert executions(exec_dir) == {"p-0": [run.id]}


class FinishAnswerLostAndUnreadable(LostAnswer):
    """The first `finish` commits and loses its answer; every `get_run` fails, as when the
    database goes away right after that commit."""

    def __init__(self, store: Store) -> None:
        super().__init__(store, "finish")
        self.reads = 0

    def __getattr__(self, name: str) -> Any:
        if name != "get_run":
            return super().__getattr__(name)

        async def unreadable(*args: Any, **kwargs: Any) -> Any:
            self.reads += 1
            raise StoreError("postgresql: server closed the connection unexpectedly")

        return unreadable


async def test_a_finish_that_cannot_be_confirmed_is_reported_unknown_not_as_a_lost_lease(
    store: Store, exec_dir: Path, approved: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The finish committed, its answer was lost, the retry finds the run finished and the
    read that would confirm it fails: the log says the outcome may have been saved (look
    it up), never that the lease was lost before saving — which would send an operator
    looking for a run that did not finish."""
    caplog.set_level(logging.INFO, "golem")
    registry, run = approved
    flaky = FinishAnswerLostAndUnreadable(store)
    worker = Worker(flaky, registry, worker_id="w")  # type: ignore[arg-type]
    assert await worker.run_once() is True
    assert flaky.lost == 1
    assert flaky.reads >= 2, "the confirming read is tried more than once"
    text = caplog.text
    assert "lease lost" not in text
    assert f"run {run.id}: its outcome (completed) may have been saved" in text
    assert (await store.get_run(run.id)).status is RunStatus.COMPLETED
    assert executions(exec_dir) == {"p-0": [run.id]}


async def test_a_first_finish_refused_for_a_lost_lease_reads_nothing(
    store: Store, exec_dir: Path, approved: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """No earlier attempt could have saved the outcome: `LeaseLost` on the first finish is
    reported as a lost lease at once, without reading the run."""
    caplog.set_level(logging.INFO, "golem")
    registry, run = approved

    class SweptBeforeFinish(FinishAnswerLostAndUnreadable):
        def __getattr__(self, name: str) -> Any:
            if name != "finish":
                return super().__getattr__(name)

            async def finish(*args: Any, **kwargs: Any) -> Any:
                later = utc_now() + timedelta(hours=1)
                assert await self._store.sweep_interrupted(later) == [run.id]
                return await self._store.finish(*args, **kwargs)

            return finish

    flaky = SweptBeforeFinish(store)
    assert await Worker(flaky, registry, worker_id="w").run_once() is True  # type: ignore[arg-type]
    assert flaky.reads == 0
    text = caplog.text
    assert f"run {run.id}: lease lost before its outcome could be saved" in text
    assert (await store.get_run(run.id)).status is RunStatus.INTERRUPTED


class Counting:
    """A registry whose model counts the agent's runs (each run asks the model once or more)."""

    def __init__(self, exec_dir: Path) -> None:
        from golem import Agent
        from golem.testing import FunctionModel
        from tests.support.durable.worker_app import model as scripted

        self.asked = 0
        base = chaos_registry(exec_dir)["acts"]

        def model(request: Any) -> Any:
            self.asked += 1
            return scripted(request)

        agent = Agent(FunctionModel(model), tools=list(base.agent.tools.values()))
        self.registry = {"acts": AgentEntry(agent, deps_factory=base.deps_factory)}


@pytest.mark.parametrize("fault", ["after", "before"])
async def test_a_start_retried_with_its_run_id_saves_one_run(
    store: Store, tmp_path: Path, fault: str
) -> None:
    """The save of a start fails with the plain `StoreError` of a dead connection, having
    committed ("after") or not ("before"); the same start sent again with the same
    `run_id` returns the one run — the agent runs again only when nothing was saved."""
    counting = Counting(tmp_path)
    flaky = LostAnswers(store, {("save_pending", 1): fault})

    async def start() -> Any:
        return await start_run(
            flaky,  # type: ignore[arg-type]
            counting.registry,
            "acts",
            prompt_for("p", 1),
            started_by="alice",
            run_id="start-1",
        )

    with pytest.raises(StoreError):
        await start()
    asked = counting.asked
    run = await start()
    assert run.id == "start-1"
    assert run.status is RunStatus.PENDING
    assert counting.asked == (asked if fault == "after" else 2 * asked)
    assert [r.id for r in await store.list_runs(limit=10)] == ["start-1"]
    assert [e.action for e in await store.audit(run.id)] == [AuditAction.CREATED]
    assert (await start()).id == "start-1", "any later retry is a no-op too"
    assert counting.asked == (asked if fault == "after" else 2 * asked)


async def test_a_run_id_makes_a_start_idempotent_and_names_one_start(
    store: Store, tmp_path: Path
) -> None:
    """Two starts with one `run_id` at once save one run; a `run_id` reused for another start is
    refused; without one, two starts are two runs."""
    registry = Counting(tmp_path).registry

    def start(**kw: Any) -> Any:
        return start_run(store, registry, "acts", prompt_for("p", 1), started_by="a", **kw)

    runs = await asyncio.gather(start(run_id="k"), start(run_id="k"))
    assert [r.id for r in runs] == ["k", "k"]
    assert [e.action for e in await store.audit("k")] == [AuditAction.CREATED]
    for prompt, by in ((prompt_for("q", 1), "alice"), (prompt_for("p", 1), "mallory")):
        with pytest.raises(ValueError, match='run_id "k" names a run started differently'):
            await start_run(store, registry, "acts", prompt, started_by=by, run_id="k")
    for bad in ("", "x" * 201):
        with pytest.raises(ValueError, match="run_id must be a string of 1 to 200"):
            await start(run_id=bad)
    assert [r.id for r in await store.list_runs(limit=10)] == ["k"]
    assert (await start()).id != (await start()).id
