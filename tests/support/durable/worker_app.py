"""An agent registry for multi-process worker tests, and the worker process entry point."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from golem import Agent, Message, RunContext, ToolCall
from golem.durable.store import Decision, RunRecord, Store
from golem.durable.worker import AgentEntry, AgentRegistry, Worker, start_run
from golem.model import ModelRequest
from golem.testing import FunctionModel
from golem.tool import DeferKind, Deferred, call_approved

__all__ = ["approved_run", "model", "prompt_for", "registry"]


def prompt_for(prefix: str, n: int) -> str:
    """The prompt that makes the agent request `n` calls with IDs `<prefix>-<i>`."""
    return f"calls:{prefix}:{n}"


async def approved_run(
    store: Store, registry: AgentRegistry, prefix: str, n: int, deps_ref: Any = None
) -> RunRecord:
    """Start a run of "acts" that pauses on `n` calls `<prefix>-<i>`, and approve them all."""
    run = await start_run(
        store, registry, "acts", prompt_for(prefix, n), deps_ref=deps_ref, started_by="alice"
    )
    for call in run.calls:
        await store.decide(run.id, call.call_id, Decision.approve(), decided_by="bob")
    return run


def model(request: ModelRequest) -> Message | str:
    """Asks for the calls a `prompt_for` prompt names, then answers "done"."""
    last = request.messages[-1]
    if last.role == "user" and last.content.startswith("calls:"):
        _, prefix, n = last.content.split(":")
        return Message(
            role="assistant",
            tool_calls=[
                ToolCall(f"{prefix}-{i}", "act", json.dumps({"key": f"{prefix}-{i}"}))
                for i in range(int(n))
            ],
        )
    return "done"


def act(ctx: RunContext[dict[str, Any]], key: str) -> str:
    """Do something irreversible (after approval). Sync: runs in a worker thread."""
    if not call_approved():
        raise Deferred(DeferKind.APPROVAL, f"act on {key}")
    exec_dir = Path(ctx.deps["exec_dir"])
    with open(exec_dir / ctx.call_id, "a", encoding="utf-8") as f:
        f.write(f"{os.getpid()} {ctx.run_id}\n")
    if ctx.deps.get("block"):
        (exec_dir / f"{ctx.call_id}.started").touch()
        release = exec_dir / f"{ctx.call_id}.release"
        while not release.exists():
            time.sleep(0.05)
    return f"acted on {key}"


def registry() -> dict[str, AgentEntry]:
    """A fresh registry (a zero-argument callable, as `load_registry` accepts)."""
    agent: Agent[Any, str] = Agent(FunctionModel(model), tools=[act])
    return {"acts": AgentEntry(agent, deps_factory=dict, description="acts after approval")}


def _skew(seconds: float) -> None:
    """Make this process's wall clock, as golem reads it (`utc_now`), run `seconds` off: in
    every loaded golem module that holds `golem.durable.store.utc_now`."""
    import golem.durable.store

    real = golem.durable.store.utc_now

    def skewed() -> datetime:
        return real() + timedelta(seconds=seconds)

    for name, module in list(sys.modules.items()):
        if name.startswith("golem.") and getattr(module, "utc_now", None) is real:
            module.utc_now = skewed  # type: ignore[attr-defined]


async def _main(config: dict[str, Any]) -> None:
    from tests.support.durable.backends import open_spec

    if config.get("skew_seconds"):
        _skew(config["skew_seconds"])
    store = await open_spec(config["spec"])
    worker = Worker(
        store,
        registry(),
        worker_id=config["worker_id"],
        lease_seconds=config["lease_seconds"],
        sweep_interval=config["sweep_interval"],
    )
    stop_file = Path(config["stop_file"])
    (stop_file.parent / f"{config['worker_id']}.ready").touch()
    try:
        while not await asyncio.to_thread(stop_file.exists):
            if not await worker.run_once():
                await asyncio.sleep(0.02)
    finally:
        await store.close()


if __name__ == "__main__":
    asyncio.run(_main(json.loads(sys.argv[1])))
