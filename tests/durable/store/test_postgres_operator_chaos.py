"""A second chaos round on PostgreSQL: what an operator's server does that the first round
(`test_postgres_chaos.py`, `test_postgres_no_answer.py`) did not."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from golem import Agent, RunContext
from golem.durable.store import Decision, RunRecord, RunStatus, StoreBusy
from golem.durable.store.postgres import PostgresStore
from golem.durable.worker import AgentEntry, Worker, start_run
from golem.errors import StoreError
from golem.service import Approver, AuthConfig, ServiceSettings, create_app
from golem.testing import FunctionModel
from golem.tool import DeferKind, Deferred, call_approved
from tests.support.agents import build_registry
from tests.support.durable.chaos import (
    Cluster,
    Hold,
    Scene,
    admin,
    chaos_registry,
    disrupting,
    executions,
    terminate_backends,
    until,
)
from tests.support.durable.runs import approval, make_run
from tests.support.durable.worker_app import _model, prompt_for

pytestmark = pytest.mark.postgres

_AUTH = AuthConfig(
    tokens={"tok-alice": Approver("alice")}, secret=b"test-secret-that-is-32-bytes-long"
)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """A PostgreSQL cluster of this module's own: its tests restart it and change settings."""
    c = Cluster.start()
    try:
        yield c
    finally:
        c.remove()


def _with(dsn: str, **params: Any) -> str:
    return make_conninfo(dsn, **params)


async def _waiting_on_locks(dsn: str) -> int:
    rows = await asyncio.to_thread(
        admin, dsn, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
    )
    return int(rows[0][0])


@contextlib.contextmanager
def _stalled(dsn: str, schema: str, status: str) -> Iterator[psycopg.Connection[Any]]:
    """Every transaction that sets a run's status to `status` waits at its COMMIT (its row
    locks held, as behind a stalled WAL disk) while the returned session holds lock 4242."""
    admin(
        dsn,
        f"""
        CREATE FUNCTION "{schema}".stall() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.status = '{status}' THEN PERFORM pg_advisory_xact_lock_shared(4242); END IF;
            RETURN NULL;
        END $$;
        CREATE CONSTRAINT TRIGGER stall AFTER UPDATE ON "{schema}".golem_runs
            DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION "{schema}".stall();
        """,
    )
    blocker = psycopg.connect(dsn, autocommit=True)
    try:
        blocker.execute("SELECT pg_advisory_lock(4242)")
        yield blocker
    finally:
        blocker.close()


# ---------------------------------------------------------------------- 1. restarts


@pytest.mark.timeout(300)
@pytest.mark.parametrize("stage", ["claim", pytest.param("finish", marks=pytest.mark.deep)])
async def test_an_immediate_restart_while_several_workers_wait_in_their_commit(
    cluster: Cluster, tmp_path: Path, stage: str
) -> None:
    """Several workers' claims (or finishes) wait inside their COMMIT when the server is restarted
    with `-m immediate`: the server loses them (crash recovery), each worker is left not knowing
    whether its COMMIT took."""
    exec_dir = tmp_path / "exec"
    exec_dir.mkdir()
    async with Scene(cluster.dsn, exec_dir, workers=3, start=stage == "finish") as s:
        # the runs are ready (claim) or inside their tool (finish) before the stall is set
        held = await s.producer.many(9, hold=stage == "finish")
        if stage == "finish":

            async def all_in_tool() -> bool:
                return s.hold.entered == 9

            await until(all_in_tool, "nine resumes to be inside their tool")
        status = "running" if stage == "claim" else "completed"
        with _stalled(cluster.dsn, s.schema, status):
            if stage == "claim":
                s.start()
            else:
                s.hold.release()

            # one COMMIT waits for the lock; the other workers' transactions wait behind
            # it for the audit sequence's row (claims skip each other's runs: the first
            # takes eight, the second the ninth, the third none)
            async def stalled() -> bool:
                return await _waiting_on_locks(cluster.dsn) >= 2

            await until(stalled, f"{stage}s of two workers to wait in their COMMIT")
            await asyncio.to_thread(cluster.restart, "immediate")
        await s.all_done(held)
        summary = await s.settle()
    assert summary.statuses == {RunStatus.COMPLETED: 9}, summary
    assert summary.interrupted_unexecuted == []


@pytest.mark.deep
@pytest.mark.timeout(300)
async def test_immediate_restarts_at_random_with_several_workers_lose_and_repeat_nothing(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Three workers claim and finish while the server is restarted with `-m immediate`
    again and again at random moments (claims and finishes among what is cut)."""
    exec_dir = tmp_path / "exec"
    exec_dir.mkdir()
    rng = random.Random(62)
    restarts = Counter[str]()
    async with Scene(cluster.dsn, exec_dir, workers=3) as s:

        async def restart() -> None:
            await asyncio.to_thread(cluster.restart, "immediate")
            restarts["immediate"] += 1

        await disrupting(
            s.producer.many(40),
            restart,
            pause=lambda: rng.uniform(0.1, 0.8),
            enough=lambda: restarts.total() >= 3,
        )
        summary = await s.settle()
    assert restarts.total() >= 3
    # a finish cut after its COMMIT reached the disk but before the lease could be proven
    # again may end interrupted: reported, never run twice (check_invariants)
    assert set(summary.statuses) <= {RunStatus.COMPLETED, RunStatus.INTERRUPTED}, summary
    assert summary.statuses[RunStatus.COMPLETED] > 0


# ---------------------------------------------------------------------- 2. no free slot


@pytest.mark.timeout(300)
async def test_exhausted_connection_slots_raise_store_busy_and_nothing_is_lost(
    cluster: Cluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Other clients take every connection slot the application's role may have (as they
    would take `max_connections`): store calls that need a new connection fail at once
    with `StoreBusy` (never hang), a resume's outcome waits for a slot while its lease
    holds, and once slots free the same workers carry on; nothing is lost or run twice."""
    caplog.set_level(logging.WARNING, "golem")
    exec_dir = tmp_path / "exec"
    exec_dir.mkdir()
    role = f"chaos_{uuid.uuid4().hex[:8]}"
    dbname = conninfo_to_dict(cluster.dsn)["dbname"]
    admin(cluster.dsn, f"CREATE ROLE {role} LOGIN CONNECTION LIMIT 12")
    admin(cluster.dsn, f'GRANT CREATE ON DATABASE "{dbname}" TO {role}')
    app = f"golem-busy-{uuid.uuid4().hex[:8]}"
    mine = _with(cluster.dsn, user=role, application_name=app)
    others: list[psycopg.Connection[Any]] = []

    def take_every_free_slot() -> None:
        while True:
            try:
                others.append(psycopg.connect(_with(cluster.dsn, user=role), autocommit=True))
            except psycopg.OperationalError:
                return

    try:
        async with Scene(cluster.dsn, exec_dir, worker_dsn=mine, producer_dsn=mine) as s:
            await s.all_done(await s.producer.many(2))
            (held,) = await s.producer.many(1, hold=True)

            async def in_tool() -> bool:
                return s.hold.entered == 1

            await until(in_tool, "the resume to be inside its tool")
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

            async def retrying() -> bool:
                said = [r.getMessage() for r in caplog.records]
                return any("saving the outcome failed" in m and "slot" in m for m in said)

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
        await until(lambda: _no_sessions(cluster.dsn, role), f"the sessions of {role} to end")
        admin(cluster.dsn, f"DROP OWNED BY {role}")
        admin(cluster.dsn, f"DROP ROLE {role}")
    assert summary.statuses == {RunStatus.COMPLETED: 6}, summary


async def _no_sessions(dsn: str, role: str) -> bool:
    rows = await asyncio.to_thread(
        admin, dsn, "SELECT 1 FROM pg_stat_activity WHERE usename = %s", role
    )
    return not rows


# ---------------------------------------------------------------------- 3. operator timeouts


@contextlib.asynccontextmanager
async def _database(cluster: Cluster, **settings: str) -> AsyncIterator[str]:
    """A database of its own with `ALTER DATABASE … SET` settings; its DSN."""
    name = f"chaos_{uuid.uuid4().hex[:8]}"
    admin(cluster.dsn, f'CREATE DATABASE "{name}"')
    for key, value in settings.items():
        admin(cluster.dsn, f"ALTER DATABASE \"{name}\" SET {key} = '{value}'")
    try:
        yield _with(cluster.dsn, dbname=name)
    finally:
        admin(cluster.dsn, f'DROP DATABASE "{name}" WITH (FORCE)')


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "settings",
    [
        {"idle_in_transaction_session_timeout": "20ms"},
        {"statement_timeout": "300ms"},
        {"idle_session_timeout": "300ms"},
        {"idle_in_transaction_session_timeout": "1ms", "idle_session_timeout": "1ms"},
    ],
    ids=["idle_in_transaction", "statement", "idle_session", "both_idle_1ms"],
)
async def test_timeouts_set_on_the_database_lose_and_repeat_nothing(
    cluster: Cluster, tmp_path: Path, settings: dict[str, str]
) -> None:
    """An operator sets a timeout on the database (`ALTER DATABASE … SET`): it applies to every
    connection, migrations and the listener included."""
    exec_dir = tmp_path / "exec"
    exec_dir.mkdir()
    rng = random.Random(7)
    kills = Counter[str]()
    async with _database(cluster, **settings) as dsn:
        app = f"golem-timeouts-{uuid.uuid4().hex[:8]}"
        victim = _with(dsn, application_name=app)
        # the test's own sessions (cleanup, kills) keep no idle timeout: only golem's are tried
        own = _with(dsn, options="-c idle_session_timeout=0")
        async with Scene(own, exec_dir, worker_dsn=victim, producer_dsn=victim, workers=2) as s:

            async def kill() -> None:
                kills["any"] += await terminate_backends(own, app, busy=rng.random() < 0.8)

            await disrupting(s.producer.many(30), kill, pause=lambda: rng.uniform(0, 0.1))
            summary = await s.settle()
    assert set(summary.statuses) == {RunStatus.COMPLETED}, summary


# ---------------------------------------------------------------------- 4. big histories


def _big_registry(exec_dir: Path, size: int) -> dict[str, AgentEntry]:
    """ "acts" whose approved call returns `size` bytes: every finish writes a history that
    large, and the next claim of a run paused after it reads it back."""

    async def act(ctx: RunContext[dict[str, Any]], key: str) -> str:
        """Do something irreversible (after approval)."""
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, f"act on {key}")
        with (exec_dir / ctx.call_id).open("a", encoding="utf-8") as f:
            f.write(f"{ctx.run_id}\n")
        return key + "x" * size

    agent: Agent[Any, str] = Agent(FunctionModel(_model), tools=[act])
    return {"acts": AgentEntry(agent, deps_factory=lambda ref: dict(ref or {}))}


@pytest.mark.deep
@pytest.mark.timeout(300)
async def test_megabyte_histories_under_random_kills(tmp_path: Path) -> None:
    """Each run carries 1 MB of deps (saved, claimed and listed with it) and each finish
    writes a 3 MB history (many socket waits per COMMIT, the pipeline's flush blocking on a
    full send buffer) while every connection of the scene is killed at random, most of them
    mid-transaction."""
    from tests.support.durable.backends import postgres_dsn

    exec_dir = tmp_path / "exec"
    exec_dir.mkdir()
    dsn = postgres_dsn()
    app = f"golem-big-{uuid.uuid4().hex[:8]}"
    victim = _with(dsn, application_name=app)
    rng = random.Random(3)
    kills = Counter[str]()
    registry = _big_registry(exec_dir, 3_000_000)
    async with Scene(
        dsn, exec_dir, worker_dsn=victim, producer_dsn=victim, workers=2, registry=registry
    ) as s:
        p = s.producer
        n = iter(range(1, 1000))

        async def one_started(*, hold: bool = False) -> RunRecord:
            # 1 MB of deps: every save, claim and listing of the run carries them too
            return await start_run(
                p.store, p.registry, "acts", prompt_for(f"p{next(n)}", 1),
                deps_ref={"hold": hold, "pad": "y" * 1_000_000}, started_by="producer",
            )  # fmt: skip

        p.one_started = one_started  # type: ignore[method-assign]

        async def kill() -> None:
            busy = rng.random() < 0.8
            kills["in flight" if busy else "any"] += await terminate_backends(dsn, app, busy=busy)

        await disrupting(s.producer.many(16), kill, pause=lambda: rng.uniform(0, 0.15))
        summary = await s.settle()
        done = [await s.store.get_run(i) for i in s.producer.approved]
    assert kills["in flight"] > 0, kills
    assert set(summary.statuses) == {RunStatus.COMPLETED}, summary
    assert all(len(r.conversation) > 3_000_000 for r in done)


# ---------------------------------------------------------------------- 5. renewals failing


class _NoRenewals(PostgresStore):
    """A store whose lease renewals always fail for want of a database (everything else
    works): the network path to the primary flapping for this one statement, say."""

    renewals = 0

    async def renew_lease(self, *args: Any, **kw: Any) -> Any:
        type(self).renewals += 1
        raise StoreError("postgresql: server closed the connection unexpectedly")


@pytest.mark.timeout(120)
async def test_a_worker_whose_renewals_keep_failing_runs_no_approved_call_after_its_lease(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A run with two approved calls; the first waits in its tool while every renewal fails, until
    the lease ran out and another worker's sweep marked the run interrupted."""
    from tests.support.durable.backends import postgres_dsn

    dsn = postgres_dsn()
    exec_dir = tmp_path / "exec"
    exec_dir.mkdir()
    hold = Hold()
    registry = chaos_registry(exec_dir, hold)
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

        async def in_tool() -> bool:
            return hold.entered == 1

        await until(in_tool, "the first approved call to run")

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
    assert executions(exec_dir) == {"p-0": [run.id]}, "p-1 never ran"
    assert after.status is RunStatus.INTERRUPTED
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "renewing the lease" in text


# ---------------------------------------------------------------------- 6. reloads


@pytest.mark.usefixtures("slow_round_trips")
async def test_a_reload_to_a_millisecond_idle_in_transaction_timeout_fails_no_call(
    cluster: Cluster,
) -> None:
    """`ALTER SYSTEM SET idle_in_transaction_session_timeout = '1ms'` and a reload while a
    store's connections are open (ADR 0068): they keep the value they pinned when they
    opened, connections opened after raise it to 10 s, so reads of several round trips and
    full decisions keep working on both (each in-transaction gap made 30 ms)."""
    schema = f"reload_{uuid.uuid4().hex[:8]}"
    early = await PostgresStore.open(cluster.dsn, schema=schema, pool_size=3)
    late: PostgresStore | None = None
    try:
        run = make_run(approval("c1"), approval("c2"), approval("c3"))
        await early.save_pending(run)
        # three connections open before the reload: a call whose connection the timeout
        # broke would be retried on another of them, as stale as the first
        await asyncio.gather(*(early.get_run(run.id) for _ in range(3)))
        assert len(early._idle) == 3
        admin(cluster.dsn, "ALTER SYSTEM SET idle_in_transaction_session_timeout = '1ms'")
        admin(cluster.dsn, "SELECT pg_reload_conf()")

        async def reloaded() -> bool:
            rows = await asyncio.to_thread(
                admin, cluster.dsn, "SHOW idle_in_transaction_session_timeout"
            )
            return bool(rows[0][0] == "1ms")

        await until(reloaded, "the reload to reach new sessions")
        late = await PostgresStore.open(cluster.dsn, schema=schema, pool_size=3)
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


# ---------------------------------------------------------------------- 7. kills in COMMIT


@pytest.mark.timeout(300)
@pytest.mark.parametrize("stage", [pytest.param("claim", marks=pytest.mark.deep), "finish"])
async def test_workers_killed_again_and_again_inside_their_commit_lose_and_repeat_nothing(
    cluster: Cluster, tmp_path: Path, stage: str
) -> None:
    """Three workers' claims (or finishes) wait inside their COMMIT and their backends are killed
    (`pg_terminate_backend`), four times over: each time every waiting worker is left not
    knowing whether its COMMIT took, looks or retries, and waits in its COMMIT again."""
    exec_dir = tmp_path / "exec"
    exec_dir.mkdir()
    app = f"golem-commit-{uuid.uuid4().hex[:8]}"
    workers = _with(cluster.dsn, application_name=app)
    waiting = (
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE application_name = %s AND wait_event_type = 'Lock'"
    )
    killed = 0
    async with Scene(
        cluster.dsn, exec_dir, worker_dsn=workers, workers=3, start=stage == "finish"
    ) as s:
        held = await s.producer.many(9, hold=stage == "finish")
        if stage == "finish":

            async def all_in_tool() -> bool:
                return s.hold.entered == 9

            await until(all_in_tool, "nine resumes to be inside their tool")
        status = "running" if stage == "claim" else "completed"
        with _stalled(cluster.dsn, s.schema, status):
            if stage == "claim":
                s.start()
            else:
                s.hold.release()
            for _ in range(4):

                async def stalled() -> bool:
                    rows = await asyncio.to_thread(
                        admin,
                        cluster.dsn,
                        "SELECT count(*) FROM pg_stat_activity "
                        "WHERE application_name = %s AND wait_event_type = 'Lock'",
                        app,
                    )
                    return bool(rows[0][0])

                await until(stalled, f"a {stage} to wait in its COMMIT")
                killed += len(await asyncio.to_thread(admin, cluster.dsn, waiting, app))
        await s.all_done(held)
        summary = await s.settle()
    assert killed >= 4
    assert summary.statuses == {RunStatus.COMPLETED: 9}, summary
    assert summary.interrupted_unexecuted == []


# ---------------------------------------------------------------------- 8. streams


class _EventStream:
    """`GET /api/events?cursor=N` driven straight through the ASGI app: the change IDs it
    sends, and whether it ended by itself (the app returned; an exception is kept)."""

    def __init__(self, app: Any, cursor: int) -> None:
        self.ids: list[int] = []
        self.status = 0
        self.arrived = asyncio.Event()
        self._gone = asyncio.Event()
        self._buffer = ""
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": "GET",
            "scheme": "http",
            "path": "/api/events",
            "raw_path": b"/api/events",
            "root_path": "",
            "query_string": f"cursor={cursor}".encode(),
            "headers": [(b"authorization", b"Bearer tok-alice")],
            "client": ("127.0.0.1", 50000),
            "server": ("golem.test", 80),
            "state": {},
        }
        self.task = asyncio.create_task(app(scope, self._receive, self._send))

    async def _receive(self) -> dict[str, Any]:
        await self._gone.wait()
        return {"type": "http.disconnect"}

    async def _send(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            return
        self._buffer += message.get("body", b"").decode()
        while "\n\n" in self._buffer:
            block, self._buffer = self._buffer.split("\n\n", 1)
            lines = dict(line.partition(": ")[::2] for line in block.split("\n"))
            if lines.get("event") == "change":
                self.ids.append(int(lines["id"]))
                self.arrived.set()

    async def close(self) -> None:
        self._gone.set()
        await asyncio.wait_for(self.task, 60)


@pytest.mark.timeout(300)
async def test_a_server_restart_while_the_service_streams_events_loses_no_change(
    cluster: Cluster,
) -> None:
    """The service streams `/api/events` from a PostgreSQL store when the server restarts
    (`-m immediate`): the stream either carries on or ends cleanly (no exception out of
    the app after its 200), and the client, reconnecting from the last ID it got, receives
    every change — before, during and after the restart — once, in order."""
    schema = f"stream_{uuid.uuid4().hex[:8]}"
    store = await PostgresStore.open(cluster.dsn, schema=schema, connect_timeout=5)
    app = create_app(ServiceSettings(build_registry(), store, auth=_AUTH, stream_heartbeat=0.05))
    streams: list[_EventStream] = []
    try:
        run = make_run(approval("c1"), approval("c2"), agent="twin")
        await store.save_pending(run)
        first = _EventStream(app, 0)
        streams.append(first)
        await asyncio.wait_for(first.arrived.wait(), 60)
        assert first.status == 200
        await asyncio.to_thread(cluster.restart, "immediate")

        async def decide(call: str) -> None:
            async def recorded() -> bool:
                try:
                    await store.decide(run.id, call, Decision.approve(), decided_by="bob")
                except StoreError:
                    return False  # the server is still coming back
                return True

            await until(recorded, f"{call} to be decided")

        await decide("c1")
        await decide("c2")
        last = await store.last_change_id()

        async def all_heard() -> bool:
            stream = streams[-1]
            if stream.ids and stream.ids[-1] >= last:
                return True
            if stream.task.done():  # ended cleanly: reconnect from the last ID it got
                assert stream.task.exception() is None
                got = [i for s in streams for i in s.ids]
                streams.append(_EventStream(app, got[-1] if got else 0))
            return False

        await until(all_heard, "every change to reach the client")
    finally:
        for stream in streams:
            await stream.close()
        await store.close()
        admin(cluster.dsn, f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    got = [i for s in streams for i in s.ids]
    assert got == list(range(1, last + 1)), (got, [s.ids for s in streams])
