"""A process that runs store operations and cancels them at random points."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import sys
from typing import Any

from golem.durable.store import Decision, DecisionConflict, RunNotFound, RunNotPending
from golem.errors import StoreError
from tests.support.durable.backends import open_spec
from tests.support.durable.runs import approval, make_run


async def main(config: dict[str, Any]) -> dict[str, Any]:
    rng = random.Random(config["seed"])
    store = await open_spec(config["spec"])
    saved: list[str] = []
    decided: list[list[str]] = []
    errors: list[str] = []
    attempted: list[str] = []
    try:
        for i in range(config["ops"]):
            if attempted and rng.random() < 0.5:
                run_id = rng.choice(attempted)
                call = rng.choice(["c1", "c2"])
                op: Any = store.decide(run_id, call, Decision.approve(), decided_by="racer")
                key: Any = ("decide", run_id, call)
            else:
                run_id = f"{config['prefix']}-{i}"
                attempted.append(run_id)
                op = store.save_pending(make_run(approval("c1"), approval("c2"), id=run_id))
                key = ("save", run_id)
            task = asyncio.ensure_future(op)
            turns = rng.randrange(-4, 9)  # < 0: never cancelled
            for _ in range(max(turns, 0)):
                await asyncio.sleep(0)
            if turns >= 0:
                task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                continue
            except (RunNotFound, DecisionConflict, RunNotPending):
                continue  # deciding a run that was never saved, or decided meanwhile
            except StoreError as exc:
                errors.append(f"{key}: {exc}")
                continue
            if key[0] == "save":
                saved.append(run_id)
            else:
                decided.append([key[1], key[2]])
        final_ok = True
        try:
            await store.save_pending(make_run(id=f"{config['prefix']}-final"))
        except StoreError as exc:
            final_ok = False
            errors.append(f"final write: {exc}")
    finally:
        with contextlib.suppress(Exception):
            await store.close()
    return {"saved": saved, "decided": decided, "errors": errors, "final_ok": final_ok}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(json.loads(sys.argv[1])))))
