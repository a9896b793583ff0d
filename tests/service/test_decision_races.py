"""Decisions that race, repeat or come too late: one wins, the loser is told who did, and an
approved call runs once (the side-effect counter is `tests.support.agents.EXECUTED`)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from golem.durable.store import (
    RunStatus,
    Store,
)
from golem.durable.worker import Worker
from golem.service.views import path
from tests.support.agents import EXECUTED
from tests.support.durable.backends import BACKENDS, backend_for
from tests.support.service import (
    StartRun,
    bearer,
    sign_in,
)


@pytest.fixture(autouse=True)
def _fresh_counter() -> None:
    EXECUTED.clear()


WAIT = 30.0  # a guard against a hang, never a duration the test asserts


def _url(run_id: str, call_id: str) -> str:
    return f"/api/runs/{run_id}/calls/{call_id}/decision"


async def test_conflicting_decisions_at_once_one_wins_the_loser_is_told_who_and_it_runs_once(
    client: httpx.AsyncClient, start: StartRun, store: Store, registry: Any
) -> None:
    # Found: the store took the same decision again from anyone as a no-op, so two approvers
    # both got 200 and the loser was told (decided_by aside) that they approved.
    run = await start("twin")
    url = _url(run["id"], "c1")
    sent = [("alice", "approve"), ("olga", "approve"), ("alice", "deny"), ("olga", "deny")] * 5
    answers = await asyncio.gather(
        *(client.post(url, json={"decision": k, "reason": "no" if k == "deny" else None},
                      headers=bearer(who)) for who, k in sent)
    )  # fmt: skip
    won = (await store.get_run(run["id"])).call("c1").decision
    assert won is not None
    for (who, kind), res in zip(sent, answers, strict=True):
        if (who, kind) == (won.decided_by, won.kind.value):
            assert res.status_code == 200, res.text  # the same decision again: a no-op
        else:
            assert res.status_code == 409, res.text
            assert res.json()["error"]["code"] == "decision_conflict"
            assert f"{won.kind.value} by {won.decided_by}" in res.json()["error"]["message"]
    decided = [e for e in await store.audit(run["id"]) if e.action.value == "decided"]
    assert len(decided) == 1
    await client.post(_url(run["id"], "c2"), json={"decision": "deny"}, headers=bearer("alice"))
    worker = Worker(store, registry)
    assert await worker.run_once()
    assert not await worker.run_once()  # nothing left: the run was claimed once
    assert EXECUTED.count("c1") == (1 if won.kind.value == "approve" else 0)
    assert "c2" not in EXECUTED


@contextmanager
def _services(url: str, n: int = 2) -> Iterator[list[str]]:
    """`n` service processes over one store; their base URLs."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.support.race_service", url],
            stdout=subprocess.PIPE,
            cwd=Path(__file__).resolve().parents[2],
        )
        for _ in range(n)
    ]
    try:
        bases = []
        for p in procs:
            assert p.stdout is not None
            line = p.stdout.readline().decode()  # blocks until it listens (or exits)
            assert line.startswith("port "), f"the service did not start: {line!r}"
            bases.append(f"http://127.0.0.1:{int(line.split()[1])}")
        yield bases
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=WAIT * 3)
            if p.stdout is not None:
                p.stdout.close()


def _race(bases: list[str], run_id: str, who_kind: list[tuple[str, str]]) -> list[Any]:
    """Each (approver, kind) decides call c1 of the run through its own process, released
    together by a barrier; their answers in order."""
    barrier = threading.Barrier(len(who_kind))
    answers: list[Any] = [None] * len(who_kind)

    def decide(i: int) -> None:
        who, kind = who_kind[i]
        with httpx.Client(base_url=bases[i % len(bases)], timeout=WAIT * 3) as c:
            c.get("/api/health")  # connected before the barrier
            barrier.wait(timeout=WAIT * 3)
            res = c.post(
                f"/api/runs/{run_id}/calls/c1/decision",
                json={"decision": kind},
                headers=bearer(who),
            )
            answers[i] = (res.status_code, res.json())

    threads = [threading.Thread(target=decide, args=(i,)) for i in range(len(who_kind))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT * 3)
    return answers


@pytest.mark.parametrize("kind", BACKENDS)
def test_two_service_processes_deciding_one_call_at_once_record_one_decision(
    kind: str, tmp_path: Path
) -> None:
    # Two approvers press Approve (or one Approve, one Deny) on the same call at the same
    # moment, each through its own service process on one database. Exactly one answer
    # is 200 and names its approver; the other is 409 decision_conflict naming the winner;
    # the run's audit log holds one decision of the call, the winner's.
    with backend_for(kind, tmp_path) as backend:
        if kind == "sqlite":
            url = f"sqlite:///{backend.path}"
        else:
            assert backend.dsn is not None
            asyncio.run(_make_schema(backend))
            url = backend.dsn + ("&" if "?" in backend.dsn else "?")
            url += f"options=-csearch_path%3D{backend.schema}"
        with _services(url) as bases:
            for round_ in range(6):
                started = httpx.post(
                    bases[0] + "/api/runs",
                    json={"agent": "twin", "prompt": f"r{round_}"},
                    headers=bearer("alice"),
                    timeout=WAIT * 3,
                )
                assert started.status_code == 201, started.text
                run_id = started.json()["run"]["id"]
                kinds = ("approve", "approve") if round_ % 2 else ("approve", "deny")
                answers = _race(bases, run_id, [("alice", kinds[0]), ("vic", kinds[1])])
                codes = sorted(a[0] for a in answers)
                assert codes == [200, 409], answers
                (winner,) = [
                    w for w, a in zip(("alice", "vic"), answers, strict=True) if a[0] == 200
                ]
                loser = next(a for a in answers if a[0] == 409)[1]
                assert loser["error"]["code"] == "decision_conflict", loser
                assert winner in loser["error"]["message"]
                shown = httpx.get(
                    bases[1] + f"/api/runs/{run_id}", headers=bearer("alice"), timeout=WAIT * 3
                ).json()["run"]
                decided = [
                    e
                    for e in shown["audit"]
                    if e["action"] == "decided" and e["detail"].get("call_id") == "c1"
                ]
                assert [e["actor"] for e in decided] == [winner], shown["audit"]


async def _make_schema(backend: Any) -> None:
    """Create the backend's schema (its tables are created on first open)."""
    store = await backend.open()
    await store.close()


async def test_the_inbox_shows_the_loser_of_a_race_who_decided(
    app: Starlette, client: httpx.AsyncClient, store: Store, start: StartRun
) -> None:
    run = await start("twin")
    await client.post(_url(run["id"], "c1"), json={"decision": "approve"}, headers=bearer("alice"))
    csrf = await sign_in(client, "olga")
    res = await client.post(
        path("runs", run["id"], "calls", "c1", "decision"),
        data={"csrf": csrf, "decision": "approve"},
    )
    assert res.status_code == 409
    assert "alice" in res.text
    assert (await store.get_run(run["id"])).call("c1").decision.decided_by == "alice"  # type: ignore[union-attr]


async def test_a_decision_replayed_after_the_run_resumed(
    client: httpx.AsyncClient, store: Store, start: StartRun, registry: Any
) -> None:
    run = await start("twin")
    for call in ("c1", "c2"):
        res = await client.post(
            _url(run["id"], call), json={"decision": "approve"}, headers=bearer("alice")
        )
        assert res.status_code == 200
    assert await Worker(store, registry).run_once()
    assert (await store.get_run(run["id"])).status is RunStatus.COMPLETED
    assert sorted(EXECUTED) == ["c1", "c2"]
    before = await store.audit(run["id"])
    # the approver's own retry is answered with the recorded decision, as it was
    again = await client.post(
        _url(run["id"], "c1"), json={"decision": "approve"}, headers=bearer("alice")
    )
    assert again.status_code == 200
    assert again.json()["run"]["status"] == "completed"
    # anyone else's is a conflict, the same decision or not, and so is another decision
    for who, body in (
        ("olga", {"decision": "approve"}),
        ("olga", {"decision": "deny"}),
        ("alice", {"decision": "deny", "reason": "too late"}),
    ):
        res = await client.post(_url(run["id"], "c1"), json=body, headers=bearer(who))
        assert res.status_code == 409, res.text
    assert await store.audit(run["id"]) == before
    assert not await Worker(store, registry).run_once()
    assert sorted(EXECUTED) == ["c1", "c2"]  # replays run nothing again


async def test_approve_all_sent_again_after_the_calls_were_decided_is_a_409(
    client: httpx.AsyncClient, store: Store, start: StartRun, registry: Any
) -> None:
    # Found: the bulk form decided the undecided calls it found — none, once they were
    # decided — and answered with its success notice ("Approved every call of the run."),
    # whether the run was still pending or had resumed long ago.
    run = await start("twin")
    csrf = await sign_in(client, "olga")
    url = path("runs", run["id"], "decisions")
    first = await client.post(url, data={"csrf": csrf, "decision": "approve"})
    assert first.status_code == 303
    again = await client.post(url, data={"csrf": csrf, "decision": "approve"})
    assert again.status_code == 409, again.text[:300]
    assert "notice=" not in again.headers.get("location", "")
    assert await Worker(store, registry).run_once()
    before = await store.audit(run["id"])
    late = await client.post(url, data={"csrf": csrf, "decision": "deny"})
    assert late.status_code == 409
    assert "completed" in late.text
    assert await store.audit(run["id"]) == before
