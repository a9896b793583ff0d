"""Helpers of the PostgreSQL chaos tests: a cluster of a test's own, a proxy that cuts a COMMIT,
an agent whose approved calls leave a ledger, workers and a producer on one schema (`Scene`),
ways to take something away, and the invariants that must hold after."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import re
import signal
import subprocess
import threading
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from golem import Agent, RunContext
from golem.durable.store import (
    AuditAction,
    Decision,
    RunRecord,
    RunStatus,
    Store,
    StoreBusy,
    StoreTimeout,
    utc_now,
)
from golem.durable.store.postgres import PostgresStore
from golem.durable.worker import AgentEntry, Worker, start_run
from golem.errors import StoreError
from golem.testing import FunctionModel
from golem.tool import DeferKind, Deferred, call_approved
from tests.support.durable.procs import ROOT, eventually
from tests.support.durable.worker_app import model, prompt_for

__all__ = [
    "Cluster",
    "FaultProxy",
    "Hold",
    "Producer",
    "Scene",
    "Summary",
    "admin",
    "all_runs",
    "backends_of",
    "chaos_registry",
    "check_invariants",
    "database",
    "disrupting",
    "executions",
    "frozen",
    "locks_waiting",
    "new_schema",
    "stalled_commits",
    "terminate_backends",
    "until",
]

_T = TypeVar("_T")
_SCRIPT = ROOT / "scripts" / "pg_test_cluster.sh"


# ---------------------------------------------------------------------- the cluster


@dataclass(frozen=True)
class Cluster:
    """A PostgreSQL cluster started for one test module; `dsn` reaches its database."""

    dsn: str
    dir: str

    @classmethod
    def start(cls) -> Cluster:
        """Start a cluster (skips, or fails under `GOLEM_REQUIRE_POSTGRES=1`, without PostgreSQL)."""
        for _ in range(3):  # the script picks a random port: another cluster may have it
            out = subprocess.run(
                ["bash", str(_SCRIPT), "start"], capture_output=True, text=True, timeout=300
            )
            found = dict(re.findall(r"export (\w+)='([^']*)'", out.stdout))
            if out.returncode == 0 or "not installed" in out.stdout:
                break
        if out.returncode != 0 or "GOLEM_TEST_POSTGRES_DSN" not in found:
            problem = f"cannot start a PostgreSQL cluster of its own: {out.stdout}{out.stderr}"
            if os.environ.get("GOLEM_REQUIRE_POSTGRES") == "1":
                pytest.fail(problem)
            pytest.skip(problem)
        return cls(found["GOLEM_TEST_POSTGRES_DSN"], found["GOLEM_TEST_POSTGRES_DIR"])

    def run(self, command: str, *mode: str) -> None:
        """`scripts/pg_test_cluster.sh COMMAND DIR [MODE]`: "restart" (`pg_ctl restart -m MODE`,
        back once it accepts connections), "down" (refusing connections until "up", same port),
        "up", or "stop" (and delete the cluster)."""
        subprocess.run(
            ["bash", str(_SCRIPT), command, self.dir, *mode],
            check=True, capture_output=True, timeout=300,
        )  # fmt: skip


# ---------------------------------------------------------------------- the proxy


@dataclass
class _Cut:
    marker: bytes
    lose: str  # "commit": the COMMIT never reaches the server; "answer": its answer is lost
    fired: threading.Event = field(default_factory=threading.Event)
    committed: bool | None = None
    """With `lose="answer"`: whether the server's answer said COMMIT (the data is saved)."""


class FaultProxy:
    """A TCP proxy to PostgreSQL on a thread of its own; `dsn` goes through it. With `gap`, each
    answer that leaves a transaction open reaches the client `gap` seconds late."""

    def __init__(self, dsn: str, gap: float = 0.0) -> None:
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        params = conninfo_to_dict(dsn)
        self._target = (str(params.get("host", "127.0.0.1")), int(params.get("port", 5432)))
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._cuts: list[_Cut] = []
        self._gap = gap
        self._lock = threading.Lock()
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None
        port = asyncio.run_coroutine_threadsafe(self._serve(), self._loop).result(30)
        self.dsn = make_conninfo(dsn, host="127.0.0.1", port=str(port))

    def cut(self, marker: bytes, lose: str) -> _Cut:
        """Arm a cut for the next transaction carrying `marker` (see the class docstring)."""
        assert lose in ("commit", "answer")
        rule = _Cut(marker, lose)
        with self._lock:
            self._cuts.append(rule)
        return rule

    def close(self) -> None:
        async def stop() -> None:
            if self._server is not None:
                self._server.close()
            for w in list(self._writers):
                w.transport.abort()
            links = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in links:
                t.cancel()
            await asyncio.gather(*links, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)
        self._loop.close()

    async def _serve(self) -> int:
        self._server = await asyncio.start_server(self._link, "127.0.0.1", 0)
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    def _armed(self, sent: bytes) -> _Cut | None:
        with self._lock:
            for rule in self._cuts:
                if rule.marker in sent:
                    self._cuts.remove(rule)
                    return rule
        return None

    async def _link(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        try:
            sreader, swriter = await asyncio.open_connection(*self._target)
        except OSError:
            cwriter.close()
            return
        self._writers.update((cwriter, swriter))
        swallow: list[_Cut] = []  # the cut whose answer must not reach the client

        def sever() -> None:
            for w in (cwriter, swriter):
                w.transport.abort()
                self._writers.discard(w)

        async def up() -> None:
            since_commit = b""
            while data := await creader.read(65536):
                since_commit += data
                rule = self._armed(since_commit) if b"COMMIT" in since_commit else None
                if b"COMMIT" in since_commit:
                    since_commit = b""
                if rule is not None and rule.lose == "commit":
                    sever()
                    rule.fired.set()
                    return
                if rule is not None:
                    swallow.append(rule)
                swriter.write(data)
                await swriter.drain()
            swriter.close()

        async def down() -> None:
            answer, tail = b"", b""
            while data := await sreader.read(65536):
                if self._gap and b"Z\x00\x00\x00\x05T" in tail + data:  # ReadyForQuery: in a
                    await asyncio.sleep(self._gap)  # transaction, idle until the client goes on
                tail = data[-5:]
                if swallow:
                    answer += data
                    if b"Z\x00\x00\x00\x05" in answer:  # ReadyForQuery: the sync's answer is in
                        rule = swallow[0]
                        rule.committed = b"COMMIT\x00" in answer
                        sever()
                        rule.fired.set()
                        return
                    continue
                cwriter.write(data)
                await cwriter.drain()
            cwriter.close()

        tasks = [asyncio.ensure_future(up()), asyncio.ensure_future(down())]
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        sever()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


# ---------------------------------------------------------------------- the agent


class Hold:
    """Approved calls of runs started with deps `{"hold": true}` wait here until `release`."""

    def __init__(self) -> None:
        self.entered = 0
        self._released = asyncio.Event()

    async def enter(self) -> None:
        self.entered += 1
        await self._released.wait()

    def release(self) -> None:
        self._released.set()


def chaos_registry(
    exec_dir: Path, hold: Hold | None = None, size: int = 0
) -> dict[str, AgentEntry]:
    """The agent "acts": a `prompt_for` prompt asks for calls of `act`, each deferred for approval;
    once approved, `act` appends the run's ID to `<exec_dir>/<call id>`, waits at `hold` when the
    run's deps say `{"hold": true}`, and returns `size` bytes more than its key."""

    async def act(ctx: RunContext[dict[str, Any]], key: str) -> str:
        """Do something irreversible (after approval)."""
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, f"act on {key}")
        with (exec_dir / ctx.call_id).open("a", encoding="utf-8") as f:
            f.write(f"{ctx.run_id}\n")
        if hold is not None and ctx.deps.get("hold"):
            await hold.enter()
        return f"acted on {key}" + "x" * size

    agent: Agent[Any, str] = Agent(FunctionModel(model), tools=[act])
    return {"acts": AgentEntry(agent, deps_factory=lambda ref: dict(ref or {}))}


def executions(exec_dir: Path) -> dict[str, list[str]]:
    """Call ID -> the IDs of the runs that executed it, once per execution."""
    return {p.name: p.read_text().splitlines() for p in exec_dir.iterdir() if p.is_file()}


# ---------------------------------------------------------------------- producing


async def until(condition: Callable[[], Any], what: str, timeout: float = 60.0) -> None:
    """Poll `condition` (a predicate, sync or async) until it holds; fail after `timeout` s."""

    async def holds() -> bool:
        got = condition()
        return bool(await got if inspect.isawaitable(got) else got)

    await eventually(holds, timeout, what)


def _unavailable(exc: StoreError) -> bool:
    """The database was away or had no free connection (its answer, if any, is unknown)."""
    return type(exc) is StoreError or isinstance(exc, (StoreBusy, StoreTimeout))


async def _retry(op: Callable[[], Awaitable[Any]], what: str, timeout: float = 60.0) -> Any:
    """`op()` again after a plain `StoreError` (the database is away), for up to `timeout` s."""
    try:
        async with asyncio.timeout(timeout):
            while True:
                try:
                    return await op()
                except StoreError as exc:
                    if not _unavailable(exc):
                        raise
                    await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"timed out after {timeout}s retrying {what}") from None


@dataclass
class Producer:
    """Starts runs of "acts" (one call each) and approves them, through `store`."""

    store: Store
    registry: dict[str, AgentEntry]
    exec_dir: Path
    approved: dict[str, str] = field(default_factory=dict)
    """Run ID -> its call ID, for every run whose approval was recorded."""
    unknown_starts: int = 0
    """Starts whose save failed: the run may or may not exist."""
    deps: dict[str, Any] = field(default_factory=dict)
    """More deps for every run (saved, claimed and listed with it)."""
    _n: int = 0

    async def one_started(self, *, hold: bool = False) -> RunRecord:
        """Start one run (its only call `p<n>-0` waits for approval)."""
        self._n += 1
        return await start_run(
            self.store,
            self.registry,
            "acts",
            prompt_for(f"p{self._n}", 1),
            deps_ref={"hold": hold, **self.deps},
            started_by="producer",
        )

    async def one(self, *, hold: bool = False) -> str | None:
        """Start and approve one run; its ID, or None when its start's outcome is unknown."""
        try:
            run = await self.one_started(hold=hold)
        except StoreError as exc:
            if not _unavailable(exc):
                raise
            self.unknown_starts += 1
            return None
        assert run.status is RunStatus.PENDING, run
        call_id = run.calls[0].call_id
        await _retry(
            lambda: self.store.decide(run.id, call_id, Decision.approve(), decided_by="bob"),
            f"approving run {run.id}",
        )
        self.approved[run.id] = call_id
        return run.id

    async def many(self, n: int, *, hold: bool = False) -> list[str]:
        """Start and approve `n` runs one after another."""
        ids = []
        for _ in range(n):
            run_id = await self.one(hold=hold)
            if run_id is not None:
                ids.append(run_id)
        return ids

    async def approve_strays(self) -> list[str]:
        """Approve the runs saved by starts the producer thought failed; their IDs."""
        strays: list[RunRecord] = await _retry(
            lambda: self.store.list_runs(status=RunStatus.PENDING, limit=10_000), "listing"
        )
        for run in strays:
            call_id = run.calls[0].call_id
            await _retry(
                lambda r=run, c=call_id: self.store.decide(  # type: ignore[misc]
                    r.id, c, Decision.approve(), decided_by="bob"
                ),
                f"approving run {run.id}",
            )
            self.approved[run.id] = call_id
        return [r.id for r in strays]


# ---------------------------------------------------------------------- the scene


def new_schema() -> str:
    """A fresh schema name for one test's tables."""
    return f"chaos_{uuid.uuid4().hex[:12]}"


def admin(dsn: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    """Run `sql` on a connection of its own (autocommit); its rows, if any."""
    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        cur = conn.execute(sql, params)
        return cur.fetchall() if cur.description else []


class Scene:
    """Workers and a producer on one schema, each with a store of its own (as separate processes
    would have), and an event stream's change feed on the first worker's store."""

    def __init__(
        self,
        dsn: str,
        exec_dir: Path,
        *,
        worker_dsn: str | None = None,
        producer_dsn: str | None = None,
        start: bool = True,
        lease_seconds: float = 30,
        workers: int = 1,
        size: int = 0,
    ) -> None:
        self.dsn = dsn
        self.schema = new_schema()
        self.exec_dir = exec_dir
        self.worker_dsn = worker_dsn or dsn
        self.producer_dsn = producer_dsn or dsn
        self.start_now = start
        self.lease_seconds = lease_seconds
        self.hold = Hold()
        self.registry = chaos_registry(exec_dir, self.hold, size)
        self.stop = asyncio.Event()
        self.n_workers = workers
        self.workers: list[tuple[PostgresStore, Worker]] = []
        self.tasks: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> Scene:
        for i in range(self.n_workers):
            store = await PostgresStore.open(self.worker_dsn, schema=self.schema, connect_timeout=5)
            worker = Worker(
                store,
                self.registry,
                worker_id="survivor" if i == 0 else f"survivor-{i}",
                lease_seconds=self.lease_seconds,
                concurrency=8,
            )
            self.workers.append((store, worker))
        self.store, self.worker = self.workers[0]
        self.producer_store = await PostgresStore.open(
            self.producer_dsn, schema=self.schema, pool_size=2
        )
        self.feed = self.store.change_feed()
        self.producer = Producer(self.producer_store, self.registry, self.exec_dir)
        if self.start_now:
            self.start()
        return self

    def start(self) -> None:
        """Start the workers."""
        self.tasks = [
            asyncio.create_task(worker.run_forever(0.2, self.stop)) for _, worker in self.workers
        ]
        self.task = self.tasks[0]

    async def _stopped(self) -> None:
        self.hold.release()
        self.stop.set()
        if self.tasks:
            await asyncio.wait_for(asyncio.shield(asyncio.gather(*self.tasks)), 60)

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self._stopped()
        finally:
            for store, _ in self.workers:
                await store.close()
            await self.producer_store.close()
            await asyncio.to_thread(
                admin, self.dsn, f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE'
            )

    async def status(self, run_id: str) -> RunStatus | None:
        try:
            return (await self.producer_store.get_run(run_id)).status
        except StoreError:
            return None

    async def all_done(self, ids: list[str]) -> None:
        async def done() -> bool:
            return all([await self.status(i) is RunStatus.COMPLETED for i in ids])

        await until(done, f"runs {ids} to complete")

    async def settle(self) -> Summary:
        """Approve stray runs, let every approved run end, stop the worker, sweep, check."""
        await self.producer.approve_strays()

        async def quiet() -> bool:
            try:
                busy = await self.producer_store.list_runs(
                    status=[RunStatus.PENDING, RunStatus.READY], limit=1
                )
            except StoreError:
                return False
            return not busy

        await until(quiet, "every approved run to be claimed")
        await self._stopped()
        # nothing is in flight now: a run still running lost its worker's claim or finish
        await self.store.sweep_interrupted(now=utc_now() + timedelta(hours=1))
        return await check_invariants(self.store, self.exec_dir, self.producer.approved)


# ---------------------------------------------------------------------- disrupting


def _where(busy: bool) -> str:
    return "application_name = %s AND backend_type = 'client backend'" + (
        " AND state <> 'idle'" if busy else ""
    )


async def backends_of(dsn: str, app: str, *, busy: bool = False) -> list[int]:
    """The backends of the connections named `app` (with `busy`, only those running a
    statement or inside a transaction)."""
    rows = await asyncio.to_thread(
        admin, dsn, f"SELECT pid FROM pg_stat_activity WHERE {_where(busy)}", app
    )
    return [pid for (pid,) in rows]


async def terminate_backends(dsn: str, app: str, *, busy: bool = False) -> int:
    """`pg_terminate_backend` on the backends `backends_of` names, picked and killed in one
    statement (so a busy one is still busy when killed); how many were killed."""
    rows = await asyncio.to_thread(
        admin,
        dsn,
        f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE {_where(busy)}",
        app,
    )
    return len(rows)


async def locks_waiting(dsn: str, app: str | None = None) -> int:
    """How many sessions (named `app`, if given) wait on a lock."""
    sql = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
    rows = await asyncio.to_thread(
        admin, dsn, sql + (" AND application_name = %s" if app else ""), *([app] if app else [])
    )
    return int(rows[0][0])


@contextlib.asynccontextmanager
async def database(dsn: str, **settings: str) -> AsyncIterator[str]:
    """A database of its own next to `dsn`'s, with `ALTER DATABASE … SET` settings; its DSN."""
    name = f"chaos_{uuid.uuid4().hex[:8]}"
    await asyncio.to_thread(admin, dsn, f'CREATE DATABASE "{name}"')
    try:
        for key, value in settings.items():
            await asyncio.to_thread(admin, dsn, f"ALTER DATABASE \"{name}\" SET {key} = '{value}'")
        yield make_conninfo(dsn, dbname=name)
    finally:
        await asyncio.to_thread(admin, dsn, f'DROP DATABASE "{name}" WITH (FORCE)')


@contextlib.contextmanager
def frozen(pid: int) -> Iterator[None]:
    """The backend `pid` stopped (`SIGSTOP`: its socket stays open and acknowledged) until the end."""
    try:
        os.kill(pid, signal.SIGSTOP)
    except PermissionError:
        pytest.skip("cannot signal the PostgreSQL server's processes from this user")
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


@contextlib.contextmanager
def stalled_commits(dsn: str, schema: str, status: str) -> Iterator[psycopg.Connection[Any]]:
    """Every transaction that sets a run's status to `status` waits at its COMMIT (its row locks
    held, as behind a stalled WAL disk) while the returned session holds advisory lock 4242."""
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


async def disrupting(
    work: Awaitable[_T],
    disrupt: Callable[[], Awaitable[object]],
    *,
    pause: Callable[[], float],
    enough: Callable[[], bool] = lambda: True,
) -> _T:
    """Await `work` while `disrupt()` runs again and again, `pause()` seconds apart, until
    `work` is done and `enough()` holds (a test's minimum of disruptions); then return
    `work`'s result, once the last disruption is over."""
    done = asyncio.Event()

    async def loop() -> None:
        while not done.is_set() or not enough():
            await asyncio.sleep(pause())
            await disrupt()

    disrupter = asyncio.create_task(loop())
    try:
        return await work
    finally:
        done.set()
        await disrupter


# ---------------------------------------------------------------------- the invariants


@dataclass
class Summary:
    """What the runs ended as (for assertions beyond the invariants, and for reports)."""

    statuses: Counter[RunStatus]
    interrupted_unexecuted: list[str]
    """Interrupted runs whose approved call never ran (a claim whose answer was lost)."""
    audit_entries: int


async def all_runs(store: Store) -> list[RunRecord]:
    """Every run of the store, page by page."""
    runs: list[RunRecord] = []
    after = None
    while True:
        page = await store.list_runs_page(after=after, limit=500)
        runs.extend(page.items)
        if page.next_cursor is None:
            return runs
        after = page.next_cursor


_TERMINAL = {RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.INTERRUPTED}
_ENDS = {
    AuditAction.COMPLETED: RunStatus.COMPLETED,
    AuditAction.FAILED: RunStatus.FAILED,
    AuditAction.INTERRUPTED: RunStatus.INTERRUPTED,
    AuditAction.PAUSED: RunStatus.PAUSED,
}


async def check_invariants(store: Store, exec_dir: Path, approved: dict[str, str]) -> Summary:
    """Check, once no worker runs and a sweep has run: every run terminal; every call executed at
    most once (a completed run's exactly once, by that run); audit IDs 1..n without gaps, each run's
    entries CREATED, DECIDED, READY, CLAIMED, then the end matching its status."""
    runs = {r.id: r for r in await all_runs(store)}
    assert set(approved) <= set(runs), "an approved run is missing"
    stuck = {r.id: r.status for r in runs.values() if r.status not in _TERMINAL}
    assert not stuck, f"runs not terminal: {stuck}"

    done = executions(exec_dir)
    twice = {call: ids for call, ids in done.items() if len(ids) > 1}
    assert not twice, f"approved calls executed more than once: {twice}"
    by_call = {r.calls[0].call_id: r for r in runs.values()}
    for call, ids in done.items():
        assert call in by_call, f"{call} ran but no run has it"
        assert ids == [by_call[call].id], (call, ids)

    entries = []
    cursor = 0
    while batch := await store.changes_since(cursor, 1000):
        entries.extend(batch)
        cursor = batch[-1].id
    assert [e.id for e in entries] == list(range(1, len(entries) + 1)), "audit IDs not 1..n"
    actions: dict[str, list[AuditAction]] = {}
    for e in entries:
        actions.setdefault(e.run_id, []).append(e.action)
    assert set(actions) == set(runs), "every run, and only runs, in the audit log"

    unexecuted = []
    for run in runs.values():
        acts = actions[run.id]
        head = [AuditAction.CREATED, AuditAction.DECIDED, AuditAction.READY, AuditAction.CLAIMED]
        assert acts[:4] == head, (run.id, acts)
        assert len(acts) == 5, (run.id, acts)
        assert _ENDS.get(acts[4]) is run.status, (run.id, acts, run.status)
        call = run.calls[0].call_id
        if run.status is RunStatus.COMPLETED:
            assert done.get(call) == [run.id], (
                f"completed run {run.id}: {call} ran {done.get(call)}"
            )
        elif run.status is RunStatus.INTERRUPTED and call not in done:
            unexecuted.append(run.id)
    return Summary(Counter(r.status for r in runs.values()), unexecuted, len(entries))
