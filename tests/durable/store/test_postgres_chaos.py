"""Chaos on PostgreSQL: workers, a producer and an event stream on one schema while something is
taken away — the server (restarted, down, frozen, read-only), connections (killed at random or in
their COMMIT, cut with the COMMIT's answer lost, out of slots), time (timeouts an operator sets), a
table (locked). After each, `check_invariants`: every run terminal, no approved call run twice, a
completed run's call run once by that run, the audit log without gaps (ADRs 0045, 0059, 0062, 0068)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from golem.durable.store import (
    AuditAction,
    Decision,
    RunRecord,
    RunStatus,
    StoreBusy,
    StoreReadOnly,
)
from golem.durable.store.postgres import PostgresStore
from golem.durable.worker import Worker, start_run
from golem.errors import StoreError
from golem.service import ServiceSettings, create_app
from tests.support.agents import build_registry
from tests.support.durable.backends import postgres_dsn
from tests.support.durable.chaos import (
    Cluster,
    FaultProxy,
    Hold,
    Scene,
    Summary,
    admin,
    backends_of,
    chaos_registry,
    database,
    disrupting,
    executions,
    frozen,
    locks_waiting,
    stalled_commits,
    terminate_backends,
    until,
)
from tests.support.durable.runs import approval, make_run
from tests.support.durable.worker_app import prompt_for
from tests.support.service import Stream, bearer, make_auth, open_stream

pytestmark = pytest.mark.postgres
COMPLETED, INTERRUPTED = RunStatus.COMPLETED, RunStatus.INTERRUPTED


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """A PostgreSQL cluster of this module's own: its tests restart, stop and reconfigure it."""
    c = Cluster.start()
    try:
        yield c
    finally:
        c.run("stop")


def _app() -> str:
    return f"golem-chaos-{uuid.uuid4().hex[:8]}"


def _said(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(r.getMessage() for r in caplog.records)


# ---------------------------------------------------------------------- 1. at random: one table


@dataclass(frozen=True)
class Chaos:
    """What is taken away again and again, at random, while `runs` runs are started and approved
    (`at_once` producers side by side) and `workers` workers resume them."""

    disrupt: str
    """"kill" (`pg_terminate_backend`, mostly mid-transaction), "restart" (`-m immediate`),
    "freeze" (`SIGSTOP` for up to 0.8 s, the worker's store timing out at 0.3 s) or "none"."""
    seed: int = 7
    runs: int = 30
    at_once: int = 1
    workers: int = 1
    pause: tuple[float, float] = (0, 0.02)
    at_least: int = 0
    """Kills that hit a transaction in flight, or restarts and freezes (the disrupter goes on)."""
    settings: dict[str, str] = field(default_factory=dict)
    """`ALTER DATABASE … SET` on the scene's database (golem's connections only)."""
    producer_too: bool = True
    size: int = 0
    """Bytes each approved call returns (and a third of it in each run's deps)."""
    slow: bool = False
    """Every in-transaction gap made 30 ms (`slow_round_trips`)."""
    quiet: bool = False
    """golem logs nothing beyond progress."""


def _deep(c: Chaos, id: str) -> Any:
    return pytest.param(c, id=id, marks=pytest.mark.deep)


CHAOS = [
    pytest.param(Chaos("kill", seed=45, runs=50, at_least=1), id="kill-45"),
    _deep(Chaos("kill", seed=4545, runs=50, at_least=1), "kill-4545"),
    *(
        pytest.param(Chaos("kill", workers=2, pause=(0, 0.1), settings=s), id=f"kill-{id}")
        for id, s in {
            "idle_in_transaction": {"idle_in_transaction_session_timeout": "20ms"},
            "statement": {"statement_timeout": "300ms"},
            "idle_session": {"idle_session_timeout": "300ms"},
            "both_idle_1ms": {
                "idle_in_transaction_session_timeout": "1ms",
                "idle_session_timeout": "1ms",
            },
        }.items()
    ),
    _deep(
        Chaos("kill", 3, runs=16, workers=2, pause=(0, 0.15), at_least=1, size=3_000_000),
        "kill-megabytes",
    ),
    _deep(Chaos("restart", 62, runs=40, workers=3, pause=(0.1, 0.8), at_least=3), "restart-62"),
    *(
        pytest.param(
            Chaos("freeze", seed, runs=60, pause=(0, 0.05), at_least=12, producer_too=False),
            id=f"freeze-{seed}",
            marks=[pytest.mark.loop, *([pytest.mark.deep] if seed == 77 else [])],
        )
        for seed in (7, 77)
    ),
    _deep(
        Chaos(
            "none",
            runs=12,
            workers=2,
            slow=True,
            settings={"idle_in_transaction_session_timeout": "1ms"},
        ),
        "idle_in_transaction-1ms",
    ),
    pytest.param(
        Chaos(
            "none",
            runs=20,
            at_once=4,
            workers=3,
            quiet=True,
            settings={"idle_session_timeout": "1ms"},
        ),
        id="idle_session-1ms",
    ),
]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("c", CHAOS)
async def test_disrupted_at_random_runs_lose_and_repeat_nothing(
    c: Chaos, request: pytest.FixtureRequest, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "golem")
    slow = request.getfixturevalue("slow_round_trips") if c.slow else lambda dsn: dsn
    restarts: Cluster | None = (
        request.getfixturevalue("cluster") if c.disrupt == "restart" else None
    )
    base = restarts.dsn if restarts else postgres_dsn()
    exec_dir = tmp_path / "exec"
    exec_dir.mkdir()
    rng = random.Random(c.seed)
    app = _app()
    hits = Counter[str]()
    async with database(base, **c.settings) as created:
        dsn = slow(created)
        # the test's own sessions (cleanup, kills) keep no idle timeout: only golem's are tried
        own = make_conninfo(dsn, options="-c idle_session_timeout=0") if c.settings else dsn
        victim = make_conninfo(dsn, application_name=app)
        async with Scene(
            own, exec_dir, worker_dsn=victim, producer_dsn=victim if c.producer_too else own,
            workers=c.workers, size=c.size,
        ) as s:  # fmt: skip
            if c.disrupt == "freeze":
                s.store.command_timeout = 0.3
            s.producer.deps = {"pad": "y" * (c.size // 3)} if c.size else {}

            async def disrupt() -> None:
                if c.disrupt == "kill":
                    busy = rng.random() < 0.8
                    hits["in flight" if busy else "any"] += await terminate_backends(
                        own, app, busy=busy
                    )
                elif restarts is not None:
                    await asyncio.to_thread(restarts.run, "restart", "immediate")
                    hits["restart"] += 1
                else:
                    mode = rng.choice(["all", "busy", "one"])
                    pids = await backends_of(own, app, busy=mode == "busy")
                    if not pids:
                        return
                    with contextlib.ExitStack() as stack:
                        for pid in pids if mode == "all" else [rng.choice(pids)]:
                            stack.enter_context(frozen(pid))
                        hits[mode] += 1  # all at once: past the timeout, the next calls time out
                        await asyncio.sleep(rng.uniform(0.35 if mode == "all" else 0.05, 0.8))

            n = c.runs // c.at_once
            work = asyncio.gather(*(s.producer.many(n) for _ in range(c.at_once)))
            if c.disrupt == "none":
                await work
            else:
                enough = c.at_least if c.disrupt != "kill" else 0
                await disrupting(
                    work, disrupt, pause=lambda: rng.uniform(*c.pause),
                    enough=lambda: hits.total() >= enough,
                )  # fmt: skip
            summary = await s.settle()
            done = [await s.store.get_run(i) for i in s.producer.approved] if c.size else []
    if c.disrupt == "restart":  # a finish cut after its COMMIT reached the disk may end
        # interrupted: reported, never run twice
        assert set(summary.statuses) <= {COMPLETED, INTERRUPTED}, summary
        assert summary.statuses[COMPLETED] > 0
    else:
        assert set(summary.statuses) == {COMPLETED}, summary
    if c.disrupt == "kill":
        assert hits["in flight"] >= c.at_least, hits
    if c.disrupt == "none":
        assert summary.statuses == {COMPLETED: c.runs}, summary
        assert s.producer.unknown_starts == 0
    assert all(len(r.conversation) > c.size for r in done)
    if c.quiet:
        progress = ("claimed run", "resuming run", "completed", "stopping")
        said = [
            r.getMessage()
            for r in caplog.records
            if r.levelno >= logging.INFO and not any(p in r.getMessage() for p in progress)
        ]
        assert not said, said


# ---------------------------------------------------------------------- 2. inside a COMMIT


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("disrupt", "stage"),
    [
        ("restart", "claim"),
        pytest.param("restart", "finish", marks=pytest.mark.deep),
        pytest.param("kill", "claim", marks=pytest.mark.deep),
        ("kill", "finish"),
    ],
)
async def test_workers_waiting_inside_their_commit_lose_and_repeat_nothing(
    cluster: Cluster, tmp_path: Path, disrupt: str, stage: str
) -> None:
    """Three workers' claims (or finishes) wait inside their COMMIT (a stalled WAL disk) when the
    server restarts with `-m immediate` (crash recovery loses them), or their backends are killed,
    four times over: each worker is left not knowing whether its COMMIT took."""
    exec_dir = tmp_path / "exec"
    exec_dir.mkdir()
    app = _app()
    workers = make_conninfo(cluster.dsn, application_name=app)
    killed = 0
    async with Scene(
        cluster.dsn, exec_dir, worker_dsn=workers, workers=3, start=stage == "finish"
    ) as s:
        # ready (claim) or inside their tool (finish) before the stall is set
        held = await s.producer.many(9, hold=stage == "finish")
        if stage == "finish":
            await until(lambda: s.hold.entered == 9, "nine resumes to be inside their tool")
        with stalled_commits(cluster.dsn, s.schema, "running" if stage == "claim" else "completed"):
            if stage == "claim":
                s.start()
            else:
                s.hold.release()
            for _ in range(1 if disrupt == "restart" else 4):
                # one COMMIT waits for the lock, the others' transactions behind it for the
                # audit sequence's row (claims skip each other's runs)
                least = 2 if disrupt == "restart" else 1
                await until(
                    lambda: _at_least(locks_waiting(cluster.dsn, app), least),  # noqa: B023
                    f"{stage}s to wait in their COMMIT",
                )
                if disrupt == "restart":
                    await asyncio.to_thread(cluster.run, "restart", "immediate")
                else:
                    sql = (
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE application_name = %s AND wait_event_type = 'Lock'"
                    )
                    killed += len(await asyncio.to_thread(admin, cluster.dsn, sql, app))
        await s.all_done(held)
        summary = await s.settle()
    assert killed >= (0 if disrupt == "restart" else 4)
    assert summary.statuses == {COMPLETED: 9}, summary
    assert summary.interrupted_unexecuted == []


async def _at_least(count: Awaitable[int], n: int) -> bool:
    return await count >= n


# ---------------------------------------------------------------------- 3. a COMMIT's answer lost


@pytest.fixture
def proxy() -> Iterator[FaultProxy]:
    p = FaultProxy(postgres_dsn())
    try:
        yield p
    finally:
        p.close()


Cut = Callable[[Scene, FaultProxy, str, pytest.LogCaptureFixture], Awaitable[dict[RunStatus, int]]]


async def _fired(cut: Any, lose: str) -> None:
    assert await asyncio.to_thread(cut.fired.wait, 60), "the armed cut never fired"
    assert cut.committed is (True if lose == "answer" else None)


async def _finish(s: Scene, proxy: FaultProxy, lose: str, caplog: Any) -> dict[RunStatus, int]:
    """The worker retries, finds out which, and the run completes with its call run once."""
    cut = proxy.cut(b"acted on p1-0", lose)
    (run_id,) = await s.producer.many(1)
    await _fired(cut, lose)
    await s.all_done([run_id])
    await until(lambda: f"run {run_id} completed" in _said(caplog), "the worker to say so")
    assert "saving the outcome failed" in _said(caplog)
    assert "lease lost" not in _said(caplog)
    return {COMPLETED: 1}


async def _claim(s: Scene, proxy: FaultProxy, lose: str, caplog: Any) -> dict[RunStatus, int]:
    """Whether the claim committed or not, the run is resumed once, not left to its lease."""
    (run_id,) = await s.producer.many(1)
    cut = proxy.cut(b"claimed", lose)
    s.start()
    await _fired(cut, lose)
    await s.all_done([run_id])
    return {COMPLETED: 1}


async def _decide(s: Scene, proxy: FaultProxy, lose: str, caplog: Any) -> dict[RunStatus, int]:
    """The approver gets a plain `StoreError` (not a success it cannot trust); deciding again the
    same way is recorded once."""
    run = await s.producer.one_started()
    cut = proxy.cut(run.id.encode(), lose)
    with pytest.raises(StoreError) as info:
        await s.producer_store.decide(run.id, "p1-0", Decision.approve(), decided_by="bob")
    assert type(info.value) is StoreError
    await _fired(cut, lose)
    again = await s.producer_store.decide(run.id, "p1-0", Decision.approve(), decided_by="bob")
    assert again.decided_by == "bob"
    s.producer.approved[run.id] = "p1-0"
    await s.all_done([run.id])
    return {COMPLETED: 1}


async def _start(s: Scene, proxy: FaultProxy, lose: str, caplog: Any) -> dict[RunStatus, int]:
    """`start_run` raises; the run exists exactly when the server committed, resumable."""
    cut = proxy.cut(b"calls:p1:1", lose)
    assert await s.producer.one() is None
    await _fired(cut, lose)
    assert s.producer.unknown_starts == 1
    strays = await s.producer.approve_strays()
    assert len(strays) == (1 if lose == "answer" else 0)
    await s.all_done(strays)
    return {COMPLETED: 1} if strays else {}


async def _start_with_id(s: Scene, proxy: FaultProxy, lose: str, caplog: Any) -> dict[Any, int]:
    """`start_run(run_id=...)` sent again after its save was cut gets the one run (ADR 0058)."""
    p = s.producer

    async def start() -> RunRecord:
        return await start_run(
            p.store, p.registry, "acts", prompt_for("k1", 1), started_by="producer",
            run_id="start-k1",
        )  # fmt: skip

    cut = proxy.cut(b"calls:k1:1", lose)
    with pytest.raises(StoreError):
        await start()
    await _fired(cut, lose)
    run = await start()
    assert (run.id, run.status) == ("start-k1", RunStatus.PENDING)
    assert [r.id for r in await p.store.list_runs(limit=10)] == ["start-k1"]
    assert [e.action for e in await p.store.audit(run.id)] == [AuditAction.CREATED]
    await p.store.decide(run.id, "k1-0", Decision.approve(), decided_by="bob")
    p.approved[run.id] = "k1-0"
    await s.all_done([run.id])
    return {COMPLETED: 1}


async def _read(s: Scene, proxy: FaultProxy, lose: str, caplog: Any) -> dict[RunStatus, int]:
    """A read cut as its COMMIT goes out committed nothing: it is repeated on a fresh connection
    (a write is only before its COMMIT went out)."""
    run = await s.producer.one_started()
    cut = proxy.cut(run.id.encode(), lose)
    assert (await s.producer_store.get_run(run.id)).id == run.id
    await _fired(cut, lose)
    assert "connection lost during a read; retrying" in _said(caplog)
    await s.producer.approve_strays()
    await s.all_done([run.id])
    return {COMPLETED: 1}


CUTS: dict[str, tuple[Cut, str]] = {  # what is cut, and whose connections go through the proxy
    "finish": (_finish, "worker"),
    "claim": (_claim, "worker"),
    "decide": (_decide, "producer"),
    "start": (_start, "producer"),
    "start_with_id": (_start_with_id, "producer"),
    "read": (_read, "producer"),
}


@pytest.mark.parametrize(
    ("what", "lose"),
    [(w, lose) for w in CUTS for lose in ("commit", "answer") if (w, lose) != ("read", "answer")],
)
async def test_a_transaction_whose_commit_or_its_answer_is_lost_is_resolved_not_repeated(
    exec_dir: Path, proxy: FaultProxy, what: str, lose: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The connection dies right after the COMMIT went out: before the server got it ("commit"),
    or after it committed but before the client heard ("answer")."""
    caplog.set_level(logging.INFO, "golem")
    check, through = CUTS[what]
    via = {f"{through}_dsn": proxy.dsn}
    async with Scene(postgres_dsn(), exec_dir, start=what != "claim", **via) as s:  # type: ignore[arg-type]
        expected = await check(s, proxy, lose, caplog)
        summary = await s.settle()
    assert summary.statuses == expected, summary


# ---------------------------------------------------------------------- 4. the server goes away


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "how",
    ["immediate", *(pytest.param(h, marks=pytest.mark.deep) for h in ("fast", "down"))],
)
async def test_a_server_restart_mid_flight_loses_nothing_and_runs_nothing_twice(
    cluster: Cluster, tmp_path: Path, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The server restarts (`-m immediate`, `-m fast`, or stays down refusing connections) while
    four resumes wait inside their tool, more runs are started and approved, and an event stream
    listens. The worker, never restarted, carries on and the stream is pushed changes again."""
    caplog.set_level(logging.WARNING, "golem")
    exec_dir = tmp_path / "exec"
    exec_dir.mkdir()
    async with Scene(cluster.dsn, exec_dir) as s:
        held = await s.producer.many(4, hold=True)
        await until(lambda: s.hold.entered == 4, "four resumes to be inside their tool")
        await s.all_done(await s.producer.many(4))
        busy = asyncio.create_task(s.producer.many(30))
        try:
            await until(lambda: len(s.producer.approved) >= 12 or busy.done(), "producing")
            if how == "down":
                await asyncio.to_thread(cluster.run, "down", "immediate")
                try:
                    with pytest.raises(StoreError, match="cannot connect to PostgreSQL"):
                        await s.producer_store.get_run(held[0])
                    await until(lambda: "claiming failed" in _said(caplog), "the worker to notice")
                finally:
                    await asyncio.to_thread(cluster.run, "up")
            else:
                await asyncio.to_thread(cluster.run, "restart", how)
        finally:
            await busy
        s.hold.release()
        await s.all_done(held)
        await s.all_done(await s.producer.many(5))
        assert not s.task.done()
        for _ in range(2):  # LISTEN again: changes are pushed (the safety-net poll is hourly)
            mark = s.feed.last_id
            await s.producer.one()
            assert await s.feed.wait_for_change(mark, 60) > mark
        summary = await s.settle()
    assert summary.statuses[COMPLETED] >= 4 + 4 + 5 + 2
    assert summary.interrupted_unexecuted == [], "a claimed run was never resumed"


@pytest.mark.timeout(300)
async def test_an_outage_longer_than_the_lease_ends_interrupted_with_the_call_run_once(
    cluster: Cluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The server goes down while a resume is inside its tool and stays down until the worker gave
    up saving the outcome: once it is back, the sweep marks the run interrupted, never run again."""
    caplog.set_level(logging.WARNING, "golem")
    exec_dir = tmp_path / "exec"
    exec_dir.mkdir()
    async with Scene(cluster.dsn, exec_dir, lease_seconds=3) as s:
        (held,) = await s.producer.many(1, hold=True)
        await until(lambda: s.hold.entered == 1, "the resume to be inside its tool")
        await asyncio.to_thread(cluster.run, "down", "immediate")
        try:
            s.hold.release()  # (a heartbeat too late on a loaded machine: abandoned, same end)
            gave_up = ("until the lease ran out", "abandoned")
            await until(lambda: any(m in _said(caplog) for m in gave_up), "the worker to give up")
        finally:
            await asyncio.to_thread(cluster.run, "up")
        summary = await s.settle()
        run = await s.store.get_run(held)
    assert summary == Summary(Counter({INTERRUPTED: 1}), [], summary.audit_entries)
    assert run.outcome is not None
    assert 'worker "survivor" lost its lease' in run.outcome.error


async def _read_only(dsn: str, on: bool) -> None:
    name = conninfo_to_dict(dsn)["dbname"]
    verb = "SET default_transaction_read_only = on" if on else "RESET default_transaction_read_only"
    await asyncio.to_thread(admin, postgres_dsn(), f'ALTER DATABASE "{name}" {verb}')


@pytest.mark.deep
async def test_workers_across_a_read_only_spell_lose_and_repeat_nothing(tmp_path: Path) -> None:
    """The database turns read-only (every connection cut, each reconnects read-only) while two
    workers run and a call is inside its tool: starts raise `StoreReadOnly`, the workers poll on,
    the held outcome waits (its lease holds) and is saved once writes are back."""
    exec_dir = tmp_path / "exec"
    exec_dir.mkdir()
    app = _app()
    async with database(postgres_dsn()) as dsn:
        mine = make_conninfo(dsn, application_name=app)
        async with Scene(dsn, exec_dir, worker_dsn=mine, producer_dsn=mine, workers=2) as s:
            await s.all_done(await s.producer.many(3))
            (held,) = await s.producer.many(1, hold=True)
            await until(lambda: s.hold.entered == 1, "the resume to be inside its tool")
            await _read_only(dsn, True)
            await terminate_backends(dsn, app)
            for _ in range(3):  # a pooled connection killed just now may fail first
                try:
                    await s.producer.one_started()
                except StoreReadOnly:
                    break
                except StoreError as exc:
                    if type(exc) is not StoreError:
                        raise
            else:
                raise AssertionError("a start succeeded on a read-only database")
            s.hold.release()
            await asyncio.sleep(0.5)  # the outcome's save is refused meanwhile
            assert await s.status(held) is RunStatus.RUNNING
            await _read_only(dsn, False)
            await terminate_backends(dsn, app)
            await s.all_done([held])
            await s.all_done(await s.producer.many(3))
            summary = await s.settle()
    assert summary.statuses == {COMPLETED: 7}, summary


@pytest.mark.deep
@pytest.mark.timeout(300)
@pytest.mark.parametrize("setting", ["lock_timeout", "statement_timeout"])
async def test_millisecond_lock_and_statement_timeouts_set_mid_flight_lose_and_repeat_nothing(
    tmp_path: Path, setting: str
) -> None:
    """`lock_timeout` or `statement_timeout` set to 1 ms while three workers and four producers run
    (every connection cut, so each reconnects under it): calls the server cancels fail with a
    `StoreError`, nothing hangs; once lifted every saved run completes."""
    exec_dir = tmp_path / "exec"
    exec_dir.mkdir()
    app = _app()
    base = postgres_dsn()
    async with database(base) as dsn:
        name = conninfo_to_dict(dsn)["dbname"]
        mine = make_conninfo(dsn, application_name=app)
        async with Scene(dsn, exec_dir, worker_dsn=mine, producer_dsn=mine, workers=3) as s:
            await asyncio.to_thread(admin, base, f"ALTER DATABASE \"{name}\" SET {setting} = '1ms'")
            await terminate_backends(base, app)
            await asyncio.wait_for(asyncio.gather(*(s.producer.many(5) for _ in range(4))), 120)
            await asyncio.to_thread(admin, base, f'ALTER DATABASE "{name}" RESET {setting}')
            await terminate_backends(base, app)
            summary = await s.settle()
    assert set(summary.statuses) == {COMPLETED}, summary
    assert sum(summary.statuses.values()) + s.producer.unknown_starts == 20


@pytest.mark.timeout(300)
async def test_exhausted_connection_slots_raise_store_busy_and_nothing_is_lost(
    cluster: Cluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Other clients take every slot the application's role may have: calls needing a new
    connection fail at once with `StoreBusy` (never hang), a resume's outcome waits for a slot
    while its lease holds, and once slots free the same workers carry on."""
    caplog.set_level(logging.WARNING, "golem")
    exec_dir = tmp_path / "exec"
    exec_dir.mkdir()
    role = f"chaos_{uuid.uuid4().hex[:8]}"
    dbname = conninfo_to_dict(cluster.dsn)["dbname"]
    admin(cluster.dsn, f"CREATE ROLE {role} LOGIN CONNECTION LIMIT 12")
    admin(cluster.dsn, f'GRANT CREATE ON DATABASE "{dbname}" TO {role}')
    app = f"golem-busy-{uuid.uuid4().hex[:8]}"
    mine = make_conninfo(cluster.dsn, user=role, application_name=app)
    others: list[psycopg.Connection[Any]] = []

    def take_every_free_slot() -> None:
        while True:
            try:
                others.append(
                    psycopg.connect(make_conninfo(cluster.dsn, user=role), autocommit=True)
                )
            except psycopg.OperationalError:
                return

    try:
        async with Scene(cluster.dsn, exec_dir, worker_dsn=mine, producer_dsn=mine) as s:
            await s.all_done(await s.producer.many(2))
            (held,) = await s.producer.many(1, hold=True)
            await until(lambda: s.hold.entered == 1, "the resume to be inside its tool")
            for _ in range(50):  # until the scene holds no connection and none is free
                await asyncio.to_thread(take_every_free_slot)
                if not await terminate_backends(cluster.dsn, app):
                    break
            else:
                raise AssertionError("the scene kept getting connections")
            errors: list[StoreError] = []
            for _ in range(3):  # a pooled connection killed just now may fail first
                try:
                    await asyncio.wait_for(s.producer.one_started(), 60)
                except StoreError as exc:
                    errors.append(exc)
                    if isinstance(exc, StoreBusy):
                        break
            assert isinstance(errors[-1], StoreBusy), errors
            assert "no free connection slot" in str(errors[-1])
            assert all("closed the connection" in str(e) for e in errors[:-1]), errors
            s.hold.release()  # its outcome cannot be saved until a slot frees
            said = lambda: [r.getMessage() for r in caplog.records]  # noqa: E731
            retrying = lambda: any("saving the outcome failed" in m and "slot" in m for m in said())  # noqa: E731
            await until(retrying, "the worker to retry saving the outcome")
            for conn in others:
                conn.close()
            others.clear()
            await s.all_done([held])
            await s.all_done(await s.producer.many(3))
            summary = await s.settle()
    finally:
        for conn in others:
            conn.close()
        admin(cluster.dsn, f'REVOKE CREATE ON DATABASE "{dbname}" FROM {role}')
        admin(
            cluster.dsn,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
            role,
        )
        gone = "SELECT 1 FROM pg_stat_activity WHERE usename = %s"
        await until(lambda: not admin(cluster.dsn, gone, role), f"the sessions of {role} to end")
        admin(cluster.dsn, f"DROP OWNED BY {role}")
        admin(cluster.dsn, f"DROP ROLE {role}")
    assert summary.statuses == {COMPLETED: 6}, summary


async def test_the_worker_waits_out_a_locked_table_and_carries_on(exec_dir: Path) -> None:
    """The runs table is locked while runs are started, approved and resumed: every call waits;
    once the lock is released everything completes, each call run once, the pool clean."""
    dsn = postgres_dsn()
    app = _app()
    victim = make_conninfo(dsn, application_name=app)
    async with Scene(dsn, exec_dir, worker_dsn=victim, producer_dsn=victim) as s:
        await s.all_done(await s.producer.many(3))
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as locker:
            await locker.execute("BEGIN")
            await locker.execute(f'LOCK TABLE "{s.schema}".golem_runs IN ACCESS EXCLUSIVE MODE')
            busy = asyncio.create_task(s.producer.many(10))
            await until(lambda: _at_least(locks_waiting(dsn, app), 2), "both to wait on the lock")
            assert not busy.done()
            await locker.execute("ROLLBACK")
        await asyncio.wait_for(busy, 60)
        summary = await s.settle()
        idle = "SELECT state FROM pg_stat_activity WHERE application_name = %s AND backend_type = 'client backend'"
        await until(lambda: all(st == "idle" for (st,) in admin(dsn, idle, app)), "a clean pool")
    assert summary.statuses == {COMPLETED: 13}


# ---------------------------------------------------------------------- 5. one worker, one fault


class _NoRenewals(PostgresStore):
    """Lease renewals always fail for want of a database (the path to the primary flapping for
    this one statement); everything else works."""

    renewals = 0

    async def renew_lease(self, *args: Any, **kw: Any) -> Any:
        type(self).renewals += 1
        raise StoreError("postgresql: server closed the connection unexpectedly")


@pytest.mark.timeout(120)
async def test_a_worker_whose_renewals_keep_failing_runs_no_approved_call_after_its_lease(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A run with two approved calls; the first waits in its tool while every renewal fails, until
    the lease ran out and another worker's sweep marked the run interrupted: the second never runs."""
    dsn = postgres_dsn()
    hold = Hold()
    registry = chaos_registry(tmp_path, hold)
    schema = f"chaos_{uuid.uuid4().hex[:12]}"
    store = await _NoRenewals.open(dsn, schema=schema)
    sweeper = await PostgresStore.open(dsn, schema=schema)
    try:
        run = await start_run(
            sweeper, registry, "acts", prompt_for("p", 2), deps_ref={"hold": True},
            started_by="ann",
        )  # fmt: skip
        for call in ("p-0", "p-1"):
            await sweeper.decide(run.id, call, Decision.approve(), decided_by="bob")
        worker = Worker(store, registry, worker_id="w1", lease_seconds=1.5, sweep_interval=3600)
        resuming = asyncio.create_task(worker.run_once())
        await until(lambda: hold.entered == 1, "the first approved call to run")

        async def swept() -> bool:
            return run.id in await sweeper.sweep_interrupted()

        await until(swept, "the lease to run out and the run to be marked interrupted")
        assert _NoRenewals.renewals > 0, "the heartbeat tried"
        hold.release()
        assert await asyncio.wait_for(resuming, 60) is True
        after = await sweeper.get_run(run.id)
    finally:
        await store.close()
        await sweeper.close()
        await asyncio.to_thread(admin, dsn, f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    assert executions(tmp_path) == {"p-0": [run.id]}, "p-1 never ran"
    assert after.status is INTERRUPTED
    assert "renewing the lease" in _said(caplog)


async def test_a_reload_to_a_millisecond_idle_in_transaction_timeout_fails_no_call(
    cluster: Cluster, slow_round_trips: Callable[[str], str]
) -> None:
    """`ALTER SYSTEM SET idle_in_transaction_session_timeout = '1ms'` and a reload while a store's
    connections are open (ADR 0068): they keep the value pinned when they opened, connections
    opened after raise it to 10 s; multi-round-trip reads and full decisions work on both."""
    schema = f"reload_{uuid.uuid4().hex[:8]}"
    slow = slow_round_trips(cluster.dsn)
    early = await PostgresStore.open(slow, schema=schema, pool_size=3)
    late: PostgresStore | None = None
    try:
        run = make_run(approval("c1"), approval("c2"), approval("c3"))
        await early.save_pending(run)
        # three connections open before the reload: a call whose connection the timeout broke
        # would be retried on another of them, as stale as the first
        await asyncio.gather(*(early.get_run(run.id) for _ in range(3)))
        admin(cluster.dsn, "ALTER SYSTEM SET idle_in_transaction_session_timeout = '1ms'")
        admin(cluster.dsn, "SELECT pg_reload_conf()")
        show = "SHOW idle_in_transaction_session_timeout"
        await until(lambda: admin(cluster.dsn, show)[0][0] == "1ms", "the reload")
        late = await PostgresStore.open(slow, schema=schema, pool_size=3)
        for store, call in ((early, "c1"), (late, "c2")):
            assert (await store.get_run(run.id)).status is RunStatus.PENDING
            assert len(await store.list_runs()) == 1
            assert len((await store.list_pending_calls()).items) >= 2
            edited = Decision.approve({"path": f"/{call}"})  # edited: the full transaction
            await store.decide(run.id, call, edited, decided_by="bob")
    finally:
        admin(cluster.dsn, "ALTER SYSTEM RESET idle_in_transaction_session_timeout")
        admin(cluster.dsn, "SELECT pg_reload_conf()")
        await early.close()
        if late is not None:
            await late.close()
        admin(cluster.dsn, f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.mark.timeout(300)
async def test_a_server_restart_while_the_service_streams_events_loses_no_change(
    cluster: Cluster,
) -> None:
    """`/api/events` streams from a PostgreSQL store when the server restarts (`-m immediate`): the
    stream carries on or ends cleanly (no exception after its 200), and the client, reconnecting
    from the last ID it got, receives every change once, in order."""
    schema = f"stream_{uuid.uuid4().hex[:8]}"
    store = await PostgresStore.open(cluster.dsn, schema=schema, connect_timeout=5)
    app = create_app(
        ServiceSettings(build_registry(), store, auth=make_auth(), stream_heartbeat=0.05)
    )
    streams: list[Stream] = []
    got: list[int] = []
    async with contextlib.AsyncExitStack() as opened:

        async def reconnect() -> None:  # from the last ID the client got
            query = f"cursor={got[-1] if got else 0}"
            streams.append(
                await opened.enter_async_context(
                    open_stream(app, headers=bearer("alice"), query=query)
                )
            )

        try:
            run = make_run(approval("c1"), approval("c2"), agent="twin")
            await store.save_pending(run)
            await reconnect()
            assert streams[0].status == 200
            got.append(int((await streams[0].next("change")).id or 0))
            await asyncio.to_thread(cluster.run, "restart", "immediate")
            for call in ("c1", "c2"):

                async def recorded(call: str = call) -> bool:
                    with contextlib.suppress(StoreError):  # the server is still coming back
                        await store.decide(run.id, call, Decision.approve(), decided_by="bob")
                        return True
                    return False

                await until(recorded, f"{call} to be decided")
            last = await store.last_change_id()

            async def all_heard() -> bool:
                stream = streams[-1]
                got.extend(int(e.id or 0) for e in stream.received() if e.event == "change")
                if got[-1] >= last:
                    return True
                if stream.task is not None and stream.task.done():  # ended cleanly
                    assert stream.task.exception() is None
                    await reconnect()
                return False

            await until(all_heard, "every change to reach the client")
        finally:
            await opened.aclose()
            await store.close()
            admin(cluster.dsn, f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    assert got == list(range(1, last + 1)), got
