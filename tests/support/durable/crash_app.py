"""A worker process that SIGKILLs itself at a chosen point (the SQLite crash test)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

from golem import Agent, RunContext
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
    """A `PostgresStore` whose connections go through a `_KillProxy`."""


_STARTUP = 196608  # protocol 3.0: the last message of the connection's start without a type


class _KillProxy:
    """A TCP proxy to PostgreSQL in this process that reports every statement (an Execute
    message) to the killer; a `<kind>.commit` kill happens once the COMMIT is on its way to the
    server, before its answer (the server commits it, or not, without the process)."""

    def __init__(self, dsn: str) -> None:
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        params = conninfo_to_dict(dsn)
        self._target = (str(params.get("host", "127.0.0.1")), int(params.get("port", 5432)))
        self._listener = socket.create_server(("127.0.0.1", 0))
        port = str(self._listener.getsockname()[1])
        self.dsn = make_conninfo(
            dsn, host="127.0.0.1", port=port, sslmode="disable", gssencmode="disable"
        )
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            client, _ = self._listener.accept()
            try:
                server = socket.create_connection(self._target)
            except OSError:
                client.close()
                continue
            threading.Thread(target=_copy, args=(server, client), daemon=True).start()
            threading.Thread(target=self._up, args=(client, server), daemon=True).start()

    def _up(self, client: socket.socket, server: socket.socket) -> None:
        with contextlib.suppress(OSError):
            self._watch(client, server)

    def _watch(self, client: socket.socket, server: socket.socket) -> None:
        """Forward the client's messages, one at a time, watching the statements they run."""
        buf, started, bound = b"", False, ""
        named: dict[bytes, str] = {}
        kinds: set[str] = set()
        while data := client.recv(65536):
            buf += data
            while True:
                off = 1 if started else 0  # a type byte, except on the connection's start
                if len(buf) < off + 4:
                    break
                size = int.from_bytes(buf[off : off + 4], "big")
                if len(buf) < off + size:
                    break
                msg, buf = buf[: off + size], buf[off + size :]
                body = msg[off + 4 :]
                if not started:
                    started = int.from_bytes(body[:4], "big") == _STARTUP
                elif msg[:1] == b"P":  # Parse: statement name, SQL
                    name, sql = body.split(b"\0")[:2]
                    named[name] = sql.decode()
                elif msg[:1] == b"B":  # Bind: portal, statement name
                    bound = named.get(body.split(b"\0")[1], "")
                elif msg[:1] == b"E":  # Execute: the bound statement runs
                    if bound.startswith(("BEGIN", "ROLLBACK")):
                        kinds.clear()
                    elif bound == "COMMIT":
                        if [k for k in kinds if _killer.due(f"{k}.commit")]:
                            server.sendall(msg)
                            os.kill(os.getpid(), signal.SIGKILL)
                        kinds.clear()
                    else:
                        _killer.at("statement")
                        if (found := _kind(bound)) is not None:
                            kinds.add(found)
                server.sendall(msg)
        server.shutdown(socket.SHUT_WR)


def _copy(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
        sink.shutdown(socket.SHUT_WR)


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
        dsn = _KillProxy(config["dsn"]).dsn
        store = await CrashPgStore.open(dsn, schema=config["schema"], pool_size=2)
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
