"""Attacks on decisions: races, decisions aimed at the wrong call or too late, forged and
replayed seals, and edited arguments the tool does not take.

The side-effect counter is `tests.support.agents.EXECUTED` (one entry per approved
`deploy` that ran): whatever is sent, an approved call runs at most once and a refused or
tampered one never.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from golem.durable.store import RunStatus, Store
from golem.durable.worker import Worker
from golem.service import ServiceSettings, create_app
from golem.service.views import path
from tests.support.agents import EXECUTED
from tests.support.service import (
    TOKENS,
    StartRun,
    bearer,
    make_auth,
    save_run,
    sign_in,
)

pytestmark = pytest.mark.version


SEAL_KEY = b"k" * 32


WAIT = 30.0  # a guard against a hang, never a duration the test asserts


@pytest.fixture(autouse=True)
def _fresh_counter() -> None:
    EXECUTED.clear()


def _decision_url(run_id: str, call_id: str) -> str:
    return f"/api/runs/{run_id}/calls/{call_id}/decision"


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
    column, value, old, new = {
        "edited args": (
            "args",
            '{"target": "evil"}',
            '{"target": "staging"}',
            '{"target": "evil"}',
        ),
        # c2's genuine seal moved onto c1
        "replayed seal": ("seal", seals["c2"], str(seals["c1"]), str(seals["c2"])),
        "stripped seal": ("seal", None, f'"seal":"{seals["c1"]}"', '"seal":null'),
    }[attack]
    sql = f"UPDATE golem_calls SET {column} = ? WHERE run_id = ? AND call_id = 'c1'"
    _tamper(db, run_id, sql, (value, run_id), old, new)
    await Worker(store, registry, seal_key=SEAL_KEY).run_once()
    after = await store.get_run(run_id)
    assert after.status is RunStatus.FAILED, after.status
    assert EXECUTED == []  # neither the tampered call nor its untouched sibling ran


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


async def _save_scale(store: Store, run_id: str, args: str) -> None:
    """A pending run of twin with one call of a tool the agent does not define (no schema)."""
    await save_run(store, run_id, ("s1", "scale", args))


async def test_an_edit_that_changes_only_a_json_type_is_kept(
    client: httpx.AsyncClient, store: Store
) -> None:
    # Found: edited arguments were compared to the model's with Python's ==, for which
    # true == 1, false == 0, 1.0 == 1 and -0.0 == 0: such an edit was recorded as a plain
    # approval, and the tool ran with the model's arguments.
    csrf = await sign_in(client)
    cases = [
        ('{"replicas": 1}', '{"replicas": true}'),
        ('{"replicas": false}', '{"replicas": 0}'),
        ('{"replicas": 1}', '{"replicas": 1.0}'),
        ('{"replicas": 0}', '{"replicas": -0.0}'),
    ]
    for n, (original, edited) in enumerate(cases):
        run_id = f"scale-{n}"
        await _save_scale(store, run_id, original)
        res = await client.post(
            path("runs", run_id, "calls", "s1", "decision"),
            data={"csrf": csrf, "decision": "approve", "args": edited},
        )
        assert res.status_code == 303, res.text
        decision = (await store.get_run(run_id)).call("s1").decision
        assert decision is not None
        assert decision.args is not None, (original, edited)
        assert json.dumps(json.loads(decision.args)) == json.dumps(json.loads(edited))
    # unchanged (key order and spacing aside) is still a plain approval
    await _save_scale(store, "scale-same", '{"a": 1, "b": [true]}')
    res = await client.post(
        path("runs", "scale-same", "calls", "s1", "decision"),
        data={"csrf": csrf, "decision": "approve", "args": '{ "b": [true],"a":1 }'},
    )
    assert res.status_code == 303
    decision = (await store.get_run("scale-same")).call("s1").decision
    assert decision is not None
    assert decision.args is None
