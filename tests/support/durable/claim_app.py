"""A process that claims ready runs until none is left: in batches, or one at a time with limit 1
(`tests/durable/store/test_leases.py`)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any


async def _main(config: dict[str, Any]) -> None:
    from tests.support.durable.backends import open_spec

    store = await open_spec(config["spec"])
    go = Path(config["go_file"])
    try:
        (go.parent / f"{config['worker_id']}.ready").touch()
        while not await asyncio.to_thread(go.exists):  # noqa: ASYNC110 - another process makes it
            await asyncio.sleep(0.01)
        got: list[str] = []
        worker, limit = config["worker_id"], config["limit"]
        while True:
            if limit == 1:
                one = await store.claim_ready(worker, 60)
                batch = [] if one is None else [one]
            else:
                batch = await store.claim_ready_many(worker, 60, limit=limit)
            if not batch:
                break
            assert len(batch) <= limit, batch
            got.extend(c.run.id for c in batch)
        print(json.dumps(got))
    finally:
        await store.close()


if __name__ == "__main__":
    asyncio.run(_main(json.loads(sys.argv[1])))
