"""Attacks on decisions: races, decisions aimed at the wrong call or too late, forged and
replayed seals, and edited arguments the tool does not take.

The side-effect counter is `tests.support.agents.EXECUTED` (one entry per approved
`deploy` that ran): whatever is sent, an approved call runs at most once and a refused or
tampered one never.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from golem.durable.store import RunStatus, Store
from golem.durable.worker import Worker
from golem.service import ServiceSettings, create_app
from tests.support.agents import EXECUTED
from tests.support.service import TOKENS, StartRun, bearer, make_auth, serve, sign_in

pytestmark = pytest.mark.version

SEAL_KEY = b"k" * 32
WAIT = 30.0  # a guard against a hang, never a duration the test asserts


@pytest.fixture(autouse=True)
def _fresh_counter() -> None:
    EXECUTED.clear()


def _decision_url(run_id: str, call_id: str) -> str:
    return f"/api/runs/{run_id}/calls/{call_id}/decision"


# --------------------------------------------------------------------------- races


async def test_conflicting_decisions_at_once_one_wins_and_the_tool_runs_once(
    client: httpx.AsyncClient, start: StartRun, store: Store, registry: Any
) -> None:
    run = await start("twin")
    url = _decision_url(run["id"], "c1")
    bodies = [{"decision": "approve"}, {"decision": "deny", "reason": "no"}] * 10
    answers = await asyncio.gather(
        *(client.post(url, json=b, headers=bearer("alice")) for b in bodies)
    )
    won = (await store.get_run(run["id"])).call("c1").decision
    assert won is not None
    winner = won.kind.value
    for body, res in zip(bodies, answers, strict=True):
        if body["decision"] == winner:
            assert res.status_code == 200, res.text  # the same decision again: a no-op
        else:
            assert res.status_code == 409, res.text
            assert res.json()["error"]["code"] == "decision_conflict"
    decided = [e for e in await store.audit(run["id"]) if e.action.value == "decided"]
    assert len(decided) == 1
    await client.post(
        _decision_url(run["id"], "c2"), json={"decision": "deny"}, headers=bearer("alice")
    )
    worker = Worker(store, registry)
    assert await worker.run_once()
    assert not await worker.run_once()  # nothing left: the run was claimed once
    assert EXECUTED.count("c1") == (1 if winner == "approve" else 0)
    assert "c2" not in EXECUTED


def test_racing_clients_over_real_sockets_decide_once(registry: Any, tmp_path: Path) -> None:
    # Real HTTP, real threads: eight clients released together, half approving and half
    # denying one call, against `golem serve`'s shape (in-process worker).
    app = create_app(
        ServiceSettings(
            registry,
            f"sqlite:///{tmp_path / 'race.db'}",
            auth=make_auth(),
            run_worker=True,
            worker_poll_interval=0.02,
        )
    )
    with serve(app) as base:
        res = httpx.post(
            base + "/api/runs", json={"agent": "twin", "prompt": "go"}, headers=bearer("alice")
        )
        run_id = res.json()["run"]["id"]
        httpx.post(
            base + _decision_url(run_id, "c2"), json={"decision": "deny"}, headers=bearer("alice")
        )
        barrier = threading.Barrier(8)
        codes: list[tuple[str, int]] = []

        def decide(kind: str) -> None:
            body: dict[str, str] = {"decision": kind}
            with httpx.Client(base_url=base, timeout=WAIT) as c:
                barrier.wait(timeout=WAIT)
                res = c.post(_decision_url(run_id, "c1"), json=body, headers=bearer("alice"))
                codes.append((kind, res.status_code))

        threads = [
            threading.Thread(target=decide, args=("approve" if i % 2 else "deny",))
            for i in range(8)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(WAIT)
        winners = {kind for kind, code in codes if code == 200}
        assert len(winners) == 1, codes
        assert all(code == 409 for kind, code in codes if kind not in winners), codes
        deadline = time.monotonic() + WAIT
        while True:
            shown = httpx.get(base + f"/api/runs/{run_id}", headers=bearer("alice")).json()
            if shown["run"]["status"] == "completed" or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert shown["run"]["status"] == "completed"
    assert Counter(EXECUTED)["c1"] == (1 if winners == {"approve"} else 0)


# --------------------------------------------------------------------------- wrong call, too late


async def test_a_decision_only_reaches_the_call_of_the_run_it_names(
    client: httpx.AsyncClient, start: StartRun, store: Store
) -> None:
    one, two = await start("twin"), await start("twin")  # both have calls c1 and c2
    mixed = await start("mixed")
    res = await client.post(
        _decision_url(one["id"], "c1"), json={"decision": "approve"}, headers=bearer("alice")
    )
    assert res.status_code == 200
    assert (await store.get_run(two["id"])).call("c1").decision is None
    res = await client.post(  # another run's call ID
        _decision_url(one["id"], "a1"), json={"decision": "approve"}, headers=bearer("alice")
    )
    assert res.status_code == 404
    assert res.json()["error"]["code"] == "call_not_found"
    assert (await store.get_run(mixed["id"])).call("a1").decision is None
    # olga may not see "mixed": its run is not found whichever call is named, even a real one
    res = await client.post(
        _decision_url(mixed["id"], "a1"), json={"decision": "approve"}, headers=bearer("olga")
    )
    assert res.status_code == 404
    assert res.json()["error"]["code"] == "run_not_found"
    assert (await store.get_run(mixed["id"])).call("a1").decision is None


async def test_a_decision_after_the_run_moved_on_changes_nothing(
    client: httpx.AsyncClient, start: StartRun, store: Store, registry: Any
) -> None:
    run = await start("twin")
    for call in ("c1", "c2"):
        await client.post(
            _decision_url(run["id"], call), json={"decision": "approve"}, headers=bearer("alice")
        )
    assert await Worker(store, registry).run_once()
    assert (await store.get_run(run["id"])).status is RunStatus.COMPLETED
    assert sorted(EXECUTED) == ["c1", "c2"]
    for body in ({"decision": "deny", "reason": "too late"}, {"decision": "approve"}):
        res = await client.post(_decision_url(run["id"], "c1"), json=body, headers=bearer("alice"))
        assert res.status_code in (200, 409), res.text  # a replay is a no-op; a change, 409
        if body["decision"] == "deny":
            assert res.status_code == 409
    assert not await Worker(store, registry).run_once()
    assert sorted(EXECUTED) == ["c1", "c2"]  # replays run nothing again


async def test_a_decision_after_the_deadline_is_refused_and_nothing_runs(
    client: httpx.AsyncClient, start: StartRun, store: Store, registry: Any
) -> None:
    run = await start("twin", expires_in=1e-6)
    await asyncio.sleep(0.01)
    res = await client.post(
        _decision_url(run["id"], "c1"), json={"decision": "approve"}, headers=bearer("alice")
    )
    assert res.status_code == 409
    assert res.json()["error"]["code"] == "call_expired"
    await Worker(store, registry).run_once()
    assert EXECUTED == []
    c1 = (await store.get_run(run["id"])).call("c1")
    assert c1.decision is not None
    assert c1.decision.kind.value == "deny"


# --------------------------------------------------------------------------- seals


def _tamper(
    db: Path, run_id: str, sql_calls: str, params: tuple[Any, ...], old: str, new: str
) -> None:
    """Edit the stored run behind the service's back, consistently (calls and history)."""
    # `with connect()` only commits; closing() closes (3.13 warns about an unclosed one)
    with contextlib.closing(sqlite3.connect(db)) as con, con:
        con.execute(sql_calls, params)
        (history,) = con.execute(
            "SELECT history FROM golem_histories WHERE run_id = ?", (run_id,)
        ).fetchone()
        assert old in history
        con.execute(
            "UPDATE golem_histories SET history = ? WHERE run_id = ?",
            (history.replace(old, new), run_id),
        )


@pytest.fixture
def sealed_app(registry: Any, store: Store) -> Starlette:
    return create_app(ServiceSettings(registry, store, auth=make_auth(), seal_key=SEAL_KEY))


@pytest.fixture
async def sealed(sealed_app: Starlette) -> Any:
    transport = httpx.ASGITransport(app=sealed_app)
    async with httpx.AsyncClient(transport=transport, base_url="http://golem.test") as c:
        yield c


async def _approved_twin(c: httpx.AsyncClient) -> str:
    res = await c.post("/api/runs", json={"agent": "twin", "prompt": "go"}, headers=bearer("alice"))
    run_id: str = res.json()["run"]["id"]
    for call in ("c1", "c2"):
        res = await c.post(
            _decision_url(run_id, call), json={"decision": "approve"}, headers=bearer("alice")
        )
        assert res.status_code == 200
    return run_id


async def test_runs_started_by_a_sealing_service_are_sealed_and_resume(
    sealed: httpx.AsyncClient, store: Store, registry: Any
) -> None:
    run_id = await _approved_twin(sealed)
    run = await store.get_run(run_id)
    assert all(c.seal and c.seal.startswith("v1.k1.approval.") for c in run.calls)
    assert await Worker(store, registry, seal_key=SEAL_KEY).run_once()
    assert (await store.get_run(run_id)).status is RunStatus.COMPLETED
    assert sorted(EXECUTED) == ["c1", "c2"]


@pytest.mark.parametrize("attack", ["edited args", "replayed seal", "stripped seal"])
async def test_a_run_edited_in_the_database_after_approval_runs_nothing(
    sealed: httpx.AsyncClient, store: Store, registry: Any, tmp_path: Path, attack: str
) -> None:
    # The approver saw "staging" and "production"; someone with write access to the
    # database changes what was approved, in the calls table and the history alike.
    run_id = await _approved_twin(sealed)
    db = tmp_path / "golem.db"
    seals = {c.call_id: c.seal for c in (await store.get_run(run_id)).calls}
    if attack == "edited args":
        _tamper(
            db,
            run_id,
            "UPDATE golem_calls SET args = ? WHERE run_id = ? AND call_id = 'c1'",
            ('{"target": "evil"}', run_id),
            '{"target": "staging"}',
            '{"target": "evil"}',
        )
    elif attack == "replayed seal":  # c2's genuine seal moved onto c1
        _tamper(
            db,
            run_id,
            "UPDATE golem_calls SET seal = ? WHERE run_id = ? AND call_id = 'c1'",
            (seals["c2"], run_id),
            str(seals["c1"]),
            str(seals["c2"]),
        )
    else:
        _tamper(
            db,
            run_id,
            "UPDATE golem_calls SET seal = NULL WHERE run_id = ? AND call_id = 'c1'",
            (run_id,),
            f'"seal":"{seals["c1"]}"',
            '"seal":null',
        )
    await Worker(store, registry, seal_key=SEAL_KEY).run_once()
    after = await store.get_run(run_id)
    assert after.status is RunStatus.FAILED, after.status
    assert EXECUTED == []  # neither the tampered call nor its untouched sibling ran


# --------------------------------------------------------------------------- edited arguments


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        ('{"target": "x", "force": true}', "not a field"),
        ('{"target": 5}', "must be string"),
        ("{}", "required"),
        ('["x"]', "JSON object"),
        ('{"target": NaN}', "JSON"),
    ],
)
async def test_edited_arguments_the_tool_does_not_take_are_refused(
    client: httpx.AsyncClient, start: StartRun, store: Store, args: str, problem: str
) -> None:
    run = await start("twin")
    csrf = await sign_in(client)
    res = await client.post(
        f"/runs/{run['id']}/calls/c1/decision",
        data={"csrf": csrf, "decision": "approve", "args": args},
    )
    assert res.status_code == 422, res.text
    assert problem in res.text
    assert (await store.get_run(run["id"])).call("c1").decision is None


async def test_edited_arguments_cannot_turn_an_external_call_into_an_approval(
    client: httpx.AsyncClient, start: StartRun, store: Store
) -> None:
    run = await start("mixed")
    csrf = await sign_in(client)
    res = await client.post(
        f"/runs/{run['id']}/calls/x1/decision",
        data={"csrf": csrf, "decision": "approve", "args": '{"key": "other"}'},
    )
    assert res.status_code == 422, res.text
    assert (await store.get_run(run["id"])).call("x1").decision is None
    res = await client.post(  # the JSON API takes no edited arguments at all
        _decision_url(run["id"], "a1"),
        json={"decision": "approve", "args": {"target": "elsewhere"}},
        headers=bearer("alice"),
    )
    assert res.status_code == 422
    assert (await store.get_run(run["id"])).call("a1").decision is None


async def test_an_approver_limited_to_one_tool_cannot_edit_another(
    client: httpx.AsyncClient, start: StartRun, store: Store
) -> None:
    run = await start("mixed")
    csrf = await sign_in(client, "tess")  # may decide `lookup` only
    res = await client.post(
        f"/runs/{run['id']}/calls/a1/decision",
        data={"csrf": csrf, "decision": "approve", "args": '{"target": "mine"}'},
    )
    assert res.status_code == 403, res.text
    assert (await store.get_run(run["id"])).call("a1").decision is None


async def test_edited_arguments_under_a_seal_run_as_edited(
    sealed: httpx.AsyncClient, store: Store, registry: Any
) -> None:
    res = await sealed.post(
        "/api/runs", json={"agent": "twin", "prompt": "go"}, headers=bearer("alice")
    )
    run_id = res.json()["run"]["id"]
    await sealed.post("/login", data={"token": TOKENS["alice"], "next": "/"})
    from tests.support.service import csrf_of

    csrf = csrf_of((await sealed.get("/")).text)
    res = await sealed.post(
        f"/runs/{run_id}/calls/c1/decision",
        data={"csrf": csrf, "decision": "approve", "args": '{"target": "canary"}'},
    )
    assert res.status_code == 303, res.text
    await sealed.post(
        _decision_url(run_id, "c2"), json={"decision": "deny"}, headers=bearer("alice")
    )
    assert await Worker(store, registry, seal_key=SEAL_KEY).run_once()
    done = await store.get_run(run_id)
    assert done.status is RunStatus.COMPLETED, done.outcome
    assert EXECUTED == ["c1"]
    assert done.outcome is not None
    assert "deployed to canary" in str(done.outcome.output)
