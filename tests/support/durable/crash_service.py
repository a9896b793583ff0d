"""A service-like process that SIGKILLs itself at a chosen SQL statement (the SQLite crash test's
third process)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from pathlib import Path
from typing import Any

from golem.durable.store import Decision
from golem.durable.worker import start_run
from tests.support.durable import crash_app
from tests.support.durable.crash_app import CrashStore, registry
from tests.support.durable.worker_app import prompt_for


async def _follow(store: CrashStore) -> None:
    feed = store.change_feed()
    cursor = 0
    while True:
        await feed.wait_for_change(cursor, 0.5)
        while batch := await store.changes_since(cursor, 50):
            cursor = batch[-1].id


async def _main(config: dict[str, Any]) -> None:
    crash_app._killer = crash_app._Killer(config["kill"])
    store = await CrashStore.open(config["path"])
    reg = registry(Path(config["exec_dir"]))
    follower = asyncio.create_task(_follow(store))
    try:
        for i in range(config["runs"]):
            run = await start_run(
                store,
                reg,
                "acts",
                prompt_for(f"{config['name']}n{i}", 1),
                deps_ref=config["deps"][i],
                started_by="service",
            )
            call_id = run.calls[0].call_id
            await store.decide(run.id, call_id, Decision.approve(), decided_by="bob")
    finally:
        follower.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await follower
        await store.close()


if __name__ == "__main__":
    asyncio.run(_main(json.loads(sys.argv[1])))
