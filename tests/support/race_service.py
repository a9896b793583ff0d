"""One approvals-service process for the cross-process race tests.

`python -m tests.support.race_service STORE_URL` serves the test agents and approvers
(`tests.support.service.make_auth`) over the store at `STORE_URL` with uvicorn on
127.0.0.1, prints `port <n>` once it listens, and serves until killed.
"""

from __future__ import annotations

import asyncio
import sys

import uvicorn

from golem.service import ServiceSettings, create_app
from tests.support.agents import build_registry
from tests.support.service import make_auth


async def _main(url: str) -> None:
    app = create_app(ServiceSettings(build_registry(), url, auth=make_auth()))
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, log_level="warning", lifespan="on", ws="none", http="h11"
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
            raise SystemExit("uvicorn did not start")
        await asyncio.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    print(f"port {port}", flush=True)
    await task


if __name__ == "__main__":
    asyncio.run(_main(sys.argv[1]))
