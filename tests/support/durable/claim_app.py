"""A process that claims ready runs in batches until none is left (`test_claim_many`)."""

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
        while batch := await store.claim_ready_many(config["worker_id"], 60, limit=config["limit"]):
            assert len(batch) <= config["limit"], batch
            got.extend(c.run.id for c in batch)
        print(json.dumps(got))
    finally:
        await store.close()


if __name__ == "__main__":
    asyncio.run(_main(json.loads(sys.argv[1])))
