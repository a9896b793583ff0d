"""A worker process that SIGKILLs itself at a chosen point (the SQLite crash test)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from golem import Agent, RunContext
from golem.durable.store._pg_wire import PgConn as _PgConn
from golem.durable.store.postgres import PostgresStore
from golem.durable.store.sqlite import SQLiteStore
from golem.durable.worker import AgentEntry, Worker
from golem.testing import FunctionModel
from golem.tool import DeferKind, Deferred, call_approved
from tests.support.durable.worker_app import model

__all__ = ["KILL_POINTS", "registry"]

KILL_POINTS = (
    "claim.commit",
    "claim.returned",
    "renew.commit",
    "tool.before",
    "tool.after",
    "finish.called",
    "finish.commit",
    "finish.returned",
    "sweep.commit",
    "statement",
)
"""Where a crash-test worker can be told to kill itself (see the module docstring)."""


class _Killer:
    """Counts arrivals at each point; SIGKILLs this process at the planned one."""

    def __init__(self, plan: dict[str, Any] | None) -> None:
        self.point = None if plan is None else plan["point"]
        self.nth = 0 if plan is None else int(plan["nth"])
        self.seen: Counter[str] = Counter()

    def at(self, point: str) -> None:
        if self.due(point):
            os.kill(os.getpid(), signal.SIGKILL)

    def due(self, point: str) -> bool:
        """Count an arrival at `point`; True when it is the planned one."""
        if point != self.point:
            return False
        self.seen[point] += 1
        return self.seen[point] == self.nth


_killer = _Killer(None)


def _kind(sql: str) -> str | None:
    """Which transaction a statement's text marks (the store's guarded updates)."""
    if not sql.startswith(("UPDATE golem_runs", "WITH picked")):
        return None
    if "SET status = 'running'" in sql:
        return "claim"
    if "SET status = 'interrupted'" in sql:
        return "sweep"
    if "child_run_id = " in sql:
        return "finish"
    if "SET lease_expires_at = " in sql:
        return "renew"
    return None


class _Points:
    """The kill points around a store's claims and finishes (any backend)."""

    async def claim_ready(self, *args: Any, **kwargs: Any) -> Any:
        claimed = await super().claim_ready(*args, **kwargs)  # type: ignore[misc]
        if claimed is not None:
            _killer.at("claim.returned")
        return claimed

    async def claim_ready_many(self, *args: Any, **kwargs: Any) -> Any:
        claimed = await super().claim_ready_many(*args, **kwargs)  # type: ignore[misc]
        if claimed:
            _killer.at("claim.returned")
        return claimed

    async def finish(self, *args: Any, **kwargs: Any) -> Any:
        _killer.at("finish.called")
        record = await super().finish(*args, **kwargs)  # type: ignore[misc]
        _killer.at("finish.returned")
        return record


class CrashPgStore(_Points, PostgresStore):
    """A `PostgresStore` whose connections report every statement to the killer; a
    `<kind>.commit` kill happens once the COMMIT is on its way to the server, before its
    answer (the server commits it, or not, without the process)."""

    @staticmethod
    def install() -> None:
        """Hook the PostgreSQL connection class (in this process only)."""
        send, begin, end = _PgConn._send, _PgConn.begin, _PgConn.end
        kinds: dict[int, set[str]] = {}

        def hooked_send(self: _PgConn, sql: str, params: Any, then: Any = None) -> None:
            _killer.at("statement")
            if (kind := _kind(sql)) is not None:
                kinds.setdefault(id(self), set()).add(kind)
            send(self, sql, params, then)

        def hooked_begin(self: _PgConn, sql: bytes) -> None:
            kinds.pop(id(self), None)
            begin(self, sql)

        def hooked_end(self: _PgConn) -> None:
            due = [k for k in kinds.pop(id(self), set()) if _killer.due(f"{k}.commit")]
            if due:
                self._send_plain(b"COMMIT")
                self.pg.pipeline_sync()
                self._flush()
                os.kill(os.getpid(), signal.SIGKILL)
            end(self)

        _PgConn._send = hooked_send  # type: ignore[method-assign]
        _PgConn.begin = hooked_begin  # type: ignore[method-assign]
        _PgConn.end = hooked_end  # type: ignore[method-assign]


class CrashStore(_Points, SQLiteStore):
    """A `SQLiteStore` whose connections report every statement to the killer."""

    def _connect(self, slot: Any) -> Any:
        conn = super()._connect(slot)
        kinds: list[str] = []

        def trace(sql: str) -> None:
            _killer.at("statement")
            if sql.startswith(("BEGIN", "ROLLBACK")):
                kinds.clear()
            elif sql == "COMMIT":
                for kind in set(kinds):
                    _killer.at(f"{kind}.commit")
                kinds.clear()
            elif (kind := _kind(sql)) is not None:
                kinds.append(kind)

        conn._conn.set_trace_callback(trace)
        return conn


def _append(path: Path, line: str) -> None:
    """One durable append: a single write to an O_APPEND file, then fsync."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def registry(exec_dir: Path) -> dict[str, AgentEntry]:
    """The agent "acts" (prompts from `tests.support.durable.worker_app.prompt_for`), its approved
    tool appending to the ledger in `exec_dir`."""

    async def act(ctx: RunContext[dict[str, Any]], key: str) -> str:
        """Do something irreversible (after approval)."""
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, f"act on {key}")
        _killer.at("tool.before")
        await asyncio.to_thread(_append, exec_dir / ctx.call_id, f"{ctx.run_id}\n")
        _killer.at("tool.after")
        if slow := ctx.deps.get("slow"):
            await asyncio.sleep(float(slow))
        return f"acted on {key}"

    agent: Agent[Any, str] = Agent(FunctionModel(model), tools=[act])
    return {"acts": AgentEntry(agent, deps_factory=lambda ref: dict(ref or {}))}


async def _main(config: dict[str, Any]) -> None:
    global _killer
    _killer = _Killer(config["kill"])
    store: SQLiteStore | PostgresStore
    if config.get("dsn"):
        CrashPgStore.install()
        store = await CrashPgStore.open(config["dsn"], schema=config["schema"], pool_size=2)
    else:
        store = await CrashStore.open(config["path"])
    worker = Worker(
        store,
        registry(Path(config["exec_dir"])),
        worker_id=config["worker_id"],
        lease_seconds=config["lease_seconds"],
        sweep_interval=config["sweep_interval"],
        concurrency=config["concurrency"],
    )
    stop_file = Path(config["stop_file"])
    stop = asyncio.Event()

    async def watch() -> None:
        while not await asyncio.to_thread(stop_file.exists):  # noqa: ASYNC110 - a file
            await asyncio.sleep(0.02)
        stop.set()

    watcher = asyncio.create_task(watch())
    try:
        await worker.run_forever(poll_interval=0.05, stop_event=stop)
    finally:
        watcher.cancel()
        await store.close()


if __name__ == "__main__":
    asyncio.run(_main(json.loads(sys.argv[1])))
