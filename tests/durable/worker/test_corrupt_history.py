"""A worker claims a ready run whose stored history was damaged: the run fails with a named error
in its outcome, nothing runs, and the next ready run is resumed as usual (ADR 0070)."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from golem.durable.store import Decision, RunStatus, Store
from golem.durable.store.sqlite import SQLiteStore
from golem.durable.worker import Worker, start_run
from tests.support.histories import SPLICES
from tests.support.worker import DEL, App, calls

N = 100_000


async def _two_ready_runs(store: Store, app: App) -> tuple[str, str]:
    ids = []
    for _ in range(2):
        run = await start_run(store, app.registry, "ops", "x", started_by="a")
        await store.decide(run.id, "c1", Decision.approve(), decided_by="b")
        ids.append(run.id)
    return ids[0], ids[1]


def _store_history(path: Path, run_id: str, history: str | bytes) -> None:
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("UPDATE golem_histories SET history = ? WHERE run_id = ?", (history, run_id))
        db.commit()


async def _check(tmp: Path, damage: Any) -> None:
    path = tmp / "golem.db"
    store = await SQLiteStore.open(path)
    try:
        app = App(calls(DEL), calls(DEL), "done", "done")
        bad, good = await _two_ready_runs(store, app)
        original = (await store.get_run(bad)).history
        damaged = damage(original)
        _store_history(path, bad, damaged)
        worker = Worker(store, app.registry, worker_id="w1")
        assert await worker.run_once()  # the older run: the damaged one
        after = await store.get_run(bad)
        assert after.status in (RunStatus.FAILED, RunStatus.COMPLETED)
        if after.status is RunStatus.FAILED:
            assert after.outcome is not None
            assert after.outcome.error
            assert not any(path == "/tmp/a" for _, path, _ in app.executed) or damaged == original
        assert await worker.run_once()  # the next ready run resumes as usual
        assert (await store.get_run(good)).status is RunStatus.COMPLETED
    finally:
        await store.close()


@pytest.mark.parametrize(
    "damage",
    [
        lambda h: "not json",
        lambda h: "[" * N + "]" * N,  # deeper than any parser's stack
        lambda h: h[: len(h) // 2],
        lambda h: h.replace('"role":"user"', '"role":"robot"', 1),
        lambda h: h.replace('"role":"user"', '"role":"user","content":"\\ud800"', 1),
        lambda h: h.encode() + b"\xff",
        lambda h: "\ufeff" + h,
        lambda h: h.replace('"toolCalls":[', '"toolCalls":[null,', 1),
        lambda h: h.replace('"/tmp/a"', "1e999999", 1),
        lambda h: h.replace('"/tmp/a"', "9" * 5000, 1),
        lambda h: "[]",
        lambda h: "null",
    ],
    ids=[
        "not json",
        "deep",
        "cut",
        "unknown role",
        "lone surrogate",
        "invalid utf-8",
        "BOM",
        "null call",
        "1e999999 args",
        "5000-digit args",
        "empty",
        "null",
    ],
)
async def test_a_damaged_stored_history_fails_its_run_and_the_worker_goes_on(
    tmp_path: Path, damage: Any
) -> None:
    await _check(tmp_path, damage)


@settings(
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@example(where=0.5, splice=b"\x00")
@given(where=st.floats(0, 1), splice=st.sampled_from(SPLICES))
def test_any_splice_into_a_stored_history_fails_its_run_or_resumes_it(
    tmp_path_factory: pytest.TempPathFactory, where: float, splice: bytes
) -> None:
    def damage(history: str) -> bytes:
        raw = history.encode()
        at = int(len(raw) * where)
        return raw[:at] + splice + raw[at:]

    asyncio.run(_check(tmp_path_factory.mktemp("w"), damage))
