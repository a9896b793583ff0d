"""Event streams are push-fed: two service processes on one PostgreSQL see every change.

Each app has its own store (its own connections and `LISTEN` connection), as two service
processes would; the streams' own poll interval is an hour, so only `NOTIFY` can deliver.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from golem.durable.store import Decision
from golem.durable.worker import start_run
from golem.service import ServiceSettings, create_app
from tests.support.durable.backends import Backend, backend_for
from tests.support.service import bearer, make_auth, open_stream

pytestmark = [pytest.mark.postgres, pytest.mark.loop]


@pytest.fixture
def pg(tmp_path: Path) -> Iterator[Backend]:
    with backend_for("postgres", tmp_path) as backend:
        yield backend


async def test_two_service_processes_both_stream_every_change(registry: Any, pg: Backend) -> None:
    a, b, writer = await pg.open(), await pg.open(), await pg.open()
    try:
        apps = [
            create_app(
                ServiceSettings(
                    registry, s, auth=make_auth(), stream_poll_interval=3600, stream_heartbeat=3600
                )
            )
            for s in (a, b)
        ]
        async with (
            open_stream(apps[0], headers=bearer("alice")) as first,
            open_stream(apps[1], headers=bearer("alice")) as second,
        ):
            for stream in (first, second):
                await stream.next("hello")
            runs = [
                await start_run(writer, registry, "twin", "go", started_by="w") for _ in range(3)
            ]
            for run in runs:
                await writer.decide(run.id, "c1", Decision.approve(), decided_by="zoe")
            expected = [e.id for r in runs for e in await writer.audit(r.id)]
            for stream in (first, second):
                got = [int((await stream.next("change")).id or 0) for _ in expected]
                assert got == sorted(expected)
    finally:
        for s in (a, b, writer):
            await s.close()
