"""`Worker(concurrency=N)`: several resumes in flight in one worker, each on its own lease."""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from golem import Agent, Message, RunContext, ToolCall
from golem.durable.store import AuditAction, Decision, RunStatus, Store, utc_now
from golem.durable.store.sqlite import SQLiteStore
from golem.durable.worker import AgentEntry, Worker, start_run
from golem.model import ModelRequest
from golem.testing import FunctionModel
from golem.tool import DeferKind, Deferred, call_approved
from tests.support.durable.backends import Backend
from tests.support.store import behind_the_back

WAIT = 60.0  # a guard against a hang, never a duration the test asserts


class Slots:
    """An agent whose approved tool `act` records each execution, then waits on `hold`."""

    def __init__(self) -> None:
        self.executed: Counter[tuple[str, str]] = Counter()
        """(run ID, call ID) -> how many times the approved call ran."""
        self.inside = 0
        self.max_inside = 0
        self.cancelled: list[str] = []
        """Runs whose tool saw its resume cancelled."""
        self.changed = asyncio.Event()
        self.hold: Callable[[str], Awaitable[object]] = _no_wait
        self.yields: dict[str, int] = {}
        """Per key: how many times `act` yields to the event loop before it returns."""

        async def act(ctx: RunContext[Any], key: str) -> str:
            """Do something irreversible (after approval)."""
            if not call_approved():
                raise Deferred(DeferKind.APPROVAL, f"act on {key}")
            self.executed[(ctx.run_id, ctx.call_id)] += 1
            self.inside += 1
            self.max_inside = max(self.max_inside, self.inside)
            self.changed.set()
            try:
                if key == "boom":
                    raise RuntimeError("disk on fire")
                for _ in range(self.yields.get(key, 0)):
                    await asyncio.sleep(0)
                await self.hold(ctx.run_id)
            except asyncio.CancelledError:
                self.cancelled.append(ctx.run_id)
                self.changed.set()
                raise
            finally:
                self.inside -= 1
            return f"acted on {key}"

        agent: Agent[Any, str] = Agent(FunctionModel(_model), tools=[act])
        self.registry = {"slots": AgentEntry(agent)}

    async def until(self, condition: Callable[[], bool]) -> None:
        """Wait (bounded) until `condition()` holds; it is re-checked whenever `act` moves."""
        async with asyncio.timeout(WAIT):
            while not condition():
                self.changed.clear()
                await self.changed.wait()


async def _no_wait(run_id: str) -> None:
    return None


def _model(request: ModelRequest) -> Message | str:
    last = request.messages[-1]
    if last.role == "user" and last.content.startswith("go:"):
        _, key, n = last.content.split(":")
        calls = [ToolCall(f"c{i}", "act", json.dumps({"key": key})) for i in range(int(n))]
        return Message(role="assistant", tool_calls=calls)
    return "done"


async def _ready(store: Store, app: Slots, key: str, calls: int = 1) -> str:
    run = await start_run(store, app.registry, "slots", f"go:{key}:{calls}", started_by="t")
    for c in run.calls:
        await store.decide(run.id, c.call_id, Decision.approve(), decided_by="bob")
    return run.id


async def _statuses(store: Store, ids: list[str]) -> list[RunStatus]:
    return [(await store.get_run(i)).status for i in ids]


async def _until_finished(store: Store, ids: list[str]) -> None:
    async with asyncio.timeout(WAIT):
        while not all(s.terminal for s in await _statuses(store, ids)):  # noqa: ASYNC110
            await asyncio.sleep(0.02)


@dataclass
class Rig:
    """A store, the `Slots` agent (held at `gate`) and at most one worker's `run_forever`."""

    store: Store
    app: Slots
    gate: asyncio.Event = field(default_factory=asyncio.Event)
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None

    def start(self, **worker: Any) -> asyncio.Task[None]:
        w = Worker(self.store, self.app.registry, worker_id="w", **worker)
        self.task = asyncio.create_task(w.run_forever(poll_interval=0.05, stop_event=self.stop))
        return self.task

    def hold_together(self, n: int) -> None:
        """Resumes wait until `n` of them are inside the tool at once."""
        barrier = asyncio.Barrier(n)

        async def together(run_id: str) -> None:
            await barrier.wait()

        self.app.hold = together

    async def stopped(self) -> None:
        """Set the stop event and wait (bounded) for `run_forever` to return."""
        self.stop.set()
        assert self.task is not None
        await asyncio.wait_for(self.task, WAIT)


@pytest.fixture
async def rig(backend: Backend) -> AsyncIterator[Rig]:
    r = Rig(await backend.open(), Slots())
    r.app.hold = lambda run_id: r.gate.wait()
    try:
        yield r
    finally:
        r.gate.set()
        r.stop.set()
        if r.task is not None and not r.task.done():
            r.task.cancel()
            await asyncio.gather(r.task, return_exceptions=True)
        await r.store.close()


async def test_never_more_than_concurrency_and_free_slots_are_claimed_in_one_batch(
    rig: Rig,
) -> None:
    store, app = rig.store, rig.app
    ids = [await _ready(store, app, f"k{i}") for i in range(7)]
    rig.start(concurrency=3)
    await app.until(lambda: app.inside == 3)  # three resumes in flight at once
    statuses = await _statuses(store, ids)
    assert statuses.count(RunStatus.RUNNING) == 3, "every slot busy: nothing more claimed"
    assert statuses.count(RunStatus.READY) == 4
    first = [i for i, s in zip(ids, statuses, strict=True) if s is RunStatus.RUNNING]
    claims = [
        next(e for e in await store.audit(i) if e.action is AuditAction.CLAIMED) for i in first
    ]
    assert len({e.at for e in claims}) == 1, "the three free slots were filled by one claim"
    rig.gate.set()
    await _until_finished(store, ids)
    await rig.stopped()
    assert await _statuses(store, ids) == [RunStatus.COMPLETED] * 7
    assert app.executed == Counter({(i, "c0"): 1 for i in ids})
    assert app.max_inside == 3


async def test_one_runs_failure_does_not_touch_its_siblings(rig: Rig) -> None:
    store, app = rig.store, rig.app
    rig.hold_together(2)  # the two healthy runs are in flight beside the failing one
    ids = [await _ready(store, app, key) for key in ("a", "boom", "c")]
    rig.start(concurrency=3)
    await _until_finished(store, ids)
    await rig.stopped()
    runs = [await store.get_run(i) for i in ids]
    assert [r.status for r in runs] == [RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.COMPLETED]
    assert runs[1].outcome is not None
    assert "disk on fire" in runs[1].outcome.error
    assert app.executed == Counter({(i, "c0"): 1 for i in ids})


async def test_one_runs_lost_lease_abandons_only_that_run(rig: Rig, backend: Backend) -> None:
    """Another worker takes one run's lease mid-resume: its heartbeat finds out and cancels
    that resume; the sibling resume keeps its own lease and completes."""
    store, app = rig.store, rig.app
    victim, sibling = await _ready(store, app, "v"), await _ready(store, app, "s")
    task = rig.start(lease_seconds=3, concurrency=2)
    await app.until(lambda: app.inside == 2)
    behind_the_back(backend, "UPDATE golem_runs SET lease_owner = 'thief' WHERE id = %s", victim)
    await app.until(lambda: victim in app.cancelled)  # the next heartbeat found out
    assert not task.done()
    rig.gate.set()
    await _until_finished(store, [sibling])
    await rig.stopped()
    assert (await store.get_run(sibling)).status is RunStatus.COMPLETED
    taken = await store.get_run(victim)
    assert (taken.status, taken.lease_owner) == (RunStatus.RUNNING, "thief")
    assert app.cancelled == [victim]
    assert app.executed == Counter({(victim, "c0"): 1, (sibling, "c0"): 1})


async def test_stop_claims_nothing_more_and_waits_for_in_flight_resumes(rig: Rig) -> None:
    store, app = rig.store, rig.app
    ids = [await _ready(store, app, f"k{i}") for i in range(3)]
    task = rig.start(concurrency=2)
    await app.until(lambda: app.inside == 2)
    rig.stop.set()
    later = await _ready(store, app, "late")  # ready after the stop: never claimed
    for _ in range(20):
        await asyncio.sleep(0)
    assert not task.done(), "run_forever waits for its in-flight resumes"
    rig.gate.set()
    await rig.stopped()
    statuses = await _statuses(store, [*ids, later])
    assert statuses.count(RunStatus.COMPLETED) == 2, "the in-flight resumes finished"
    assert statuses.count(RunStatus.READY) == 2, "nothing was claimed after the stop"
    assert sum(app.executed.values()) == 2


async def test_cancel_abandons_in_flight_resumes_to_the_interrupted_sweep(rig: Rig) -> None:
    store, app = rig.store, rig.app
    ids = [await _ready(store, app, f"k{i}") for i in range(2)]
    task = rig.start(lease_seconds=30, concurrency=2)
    await app.until(lambda: app.inside == 2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, WAIT)
    assert sorted(app.cancelled) == sorted(ids), "both resumes were cancelled"
    runs = [await store.get_run(i) for i in ids]
    assert [(r.status, r.lease_owner) for r in runs] == [(RunStatus.RUNNING, "w")] * 2
    after_lease = utc_now() + timedelta(seconds=31)
    assert sorted(await store.sweep_interrupted(after_lease)) == sorted(ids)
    assert not await Worker(store, app.registry, worker_id="w2").run_once()
    assert app.executed == Counter({(i, "c0"): 1 for i in ids}), "never run again"


async def test_sweeps_stay_due_while_every_slot_is_busy(rig: Rig) -> None:
    """A worker whose only slot is held by a long resume still denies an overdue call."""
    store, app = rig.store, rig.app
    busy = await _ready(store, app, "busy")
    rig.start(sweep_interval=0, concurrency=1)
    await app.until(lambda: app.inside == 1)
    overdue = await start_run(  # saved once the slot is busy: only a later sweep sees it
        store, app.registry, "slots", "go:late:1", started_by="t", expires_in=0.001
    )

    async def denied() -> bool:
        run = await store.get_run(overdue.id)
        return run.calls[0].decision is not None

    async with asyncio.timeout(WAIT):
        while not await denied():  # noqa: ASYNC110 - the state lives in the database
            await asyncio.sleep(0.02)
    call = (await store.get_run(overdue.id)).calls[0]
    assert call.decision is not None
    assert call.decision.reason == "expired"
    assert (await store.get_run(busy)).status is RunStatus.RUNNING, "still in its slot"
    rig.gate.set()
    await _until_finished(store, [busy, overdue.id])
    await rig.stopped()
    assert app.executed == Counter({(busy, "c0"): 1}), "the expired call never ran"


def test_concurrency_must_be_a_positive_integer(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "x.db")
    for bad in (0, -2, 1.5, True, "4"):
        with pytest.raises(ValueError, match="concurrency must be an integer >= 1"):
            Worker(store, {}, concurrency=bad)  # type: ignore[arg-type]
    assert Worker(store, {}).concurrency == 1
    assert Worker(store, {}, concurrency=8).concurrency == 8


# --------------------------------------------------------------------------- property

_run_plans = st.lists(
    st.tuples(
        st.integers(1, 2),  # calls in the run
        st.sampled_from(["approve", "deny", "mixed"]),
        st.integers(0, 3),  # tool yields
        st.booleans(),  # the tool fails
    ),
    min_size=1,
    max_size=7,
)


@dataclass(frozen=True)
class Schedule:
    """One interleaving: the runs, each worker's concurrency, the yields between decisions,
    and whether (and before which run's decisions) worker 1 is stopped or cancelled."""

    plans: list[tuple[int, str, int, bool]]
    concurrency: tuple[int, int]
    gaps: list[int]
    interference: str
    at: int


_schedules = st.builds(
    Schedule,
    plans=_run_plans,
    concurrency=st.tuples(st.integers(1, 4), st.integers(1, 4)),
    gaps=st.lists(st.integers(0, 4), min_size=7, max_size=7),
    interference=st.sampled_from(["none", "stop", "cancel"]),
    at=st.integers(0, 6),
)


@settings(max_examples=20)
@given(schedule=_schedules)
def test_no_approved_call_runs_twice_under_any_interleaving(schedule: Schedule) -> None:
    """Two concurrent workers (own store instances on one SQLite file) resume runs decided in a
    random order with random yields; one of them may be stopped or cancelled midway."""
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(_interleaving(Path(tmp), schedule))


async def _interleaving(tmp: Path, schedule: Schedule) -> None:
    plans, concurrency, gaps = schedule.plans, schedule.concurrency, schedule.gaps
    interference, at = schedule.interference, schedule.at
    stores = [await SQLiteStore.open(tmp / "g.db", poll_interval=0.02) for _ in range(2)]
    app = Slots()
    stops = [asyncio.Event(), asyncio.Event()]
    tasks: list[asyncio.Task[None]] = []
    try:
        runs = []
        for i, (calls, _, yields, fails) in enumerate(plans):
            key = "boom" if fails else f"k{i}"
            app.yields[key] = yields
            prompt = f"go:{key}:{calls}"
            runs.append(await start_run(stores[0], app.registry, "slots", prompt, started_by="t"))
        for n, (store, stop) in enumerate(zip(stores, stops, strict=True)):
            worker = Worker(store, app.registry, worker_id=f"w{n}", concurrency=concurrency[n])
            tasks.append(asyncio.create_task(worker.run_forever(0.02, stop)))
        approved: set[tuple[str, str]] = set()
        for i, (run, (_, how, _, _)) in enumerate(zip(runs, plans, strict=True)):
            if i == at and interference == "stop":
                stops[1].set()
            elif i == at and interference == "cancel":
                tasks[1].cancel()
            for j, call in enumerate(run.calls):
                yes = how == "approve" or (how == "mixed" and j % 2 == 0)
                d = Decision.approve() if yes else Decision.deny("no")
                await stores[i % 2].decide(run.id, call.call_id, d, decided_by="bob")
                if yes:
                    approved.add((run.id, call.call_id))
            for _ in range(gaps[i]):
                await asyncio.sleep(0)
        ids = [r.id for r in runs]

        async def settled() -> bool:
            left = [s for s in await _statuses(stores[0], ids) if not s.terminal]
            if not left:
                return True
            if tasks[0].done():  # never: worker 0 runs until the end
                raise AssertionError("worker 0 stopped early")
            # runs only a cancelled worker held stay RUNNING until the sweep below
            return interference == "cancel" and all(s is RunStatus.RUNNING for s in left)

        async with asyncio.timeout(WAIT):
            while not await settled():  # noqa: ASYNC110 - the state lives in the database
                await asyncio.sleep(0.02)
        for stop in stops:
            stop.set()
        await asyncio.wait(tasks, timeout=WAIT)
        await stores[0].sweep_interrupted(utc_now() + timedelta(seconds=120))

        assert set(app.executed) <= approved, "a denied call ran"
        assert all(n == 1 for n in app.executed.values()), f"ran twice: {app.executed}"
        for run in runs:
            record = await stores[0].get_run(run.id)
            claims = [e for e in await stores[0].audit(run.id) if e.action is AuditAction.CLAIMED]
            assert len(claims) <= 1
            if record.status is RunStatus.COMPLETED:
                mine = {(run.id, c.call_id) for c in run.calls} & approved
                assert {k for k in app.executed if k[0] == run.id} == mine
            else:
                assert record.status in (RunStatus.FAILED, RunStatus.INTERRUPTED), record.status
                if record.status is RunStatus.INTERRUPTED:
                    assert claims[0].actor == "worker:w1", "only the cancelled worker's runs"
    finally:
        for stop in stops:
            stop.set()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for s in stores:
            await s.close()
