"""The JSON API: every route, every error status, and that a refused request changes nothing."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from pathlib import Path
from typing import Any

import httpx
import pytest

from golem.durable.store import Store
from golem.durable.worker import Worker, start_run
from golem.service import ServiceSettings, create_app
from tests.support.agents import EXECUTED
from tests.support.service import TOKENS, StartRun, bearer, make_auth, sign_in


async def snapshot(store: Store, run_id: str) -> tuple[Any, ...]:
    """Everything a refused request must leave as it was."""
    run = await store.get_run(run_id)
    return (
        run.status,
        tuple((c.call_id, c.decision) for c in run.calls),
        len(await store.audit(run_id)),
        await store.last_change_id(),
    )


def error_of(res: httpx.Response, status: int, code: str) -> str:
    assert res.status_code == status, res.text
    assert res.headers["content-type"].startswith("application/json")
    body = res.json()
    assert set(body) == {"error"}
    assert body["error"]["code"] == code
    message: str = body["error"]["message"]
    assert message
    return message


async def decide(
    client: httpx.AsyncClient, run_id: str, call_id: str, body: Any, who: str | None = "alice"
) -> httpx.Response:
    url = f"/api/runs/{run_id}/calls/{call_id}/decision"
    headers = bearer(who) if who else {}
    if isinstance(body, bytes):
        return await client.post(url, content=body, headers=headers)
    return await client.post(url, json=body, headers=headers)


def app_client(app: Any) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    return httpx.AsyncClient(transport=transport, base_url="http://t")


# --------------------------------------------------------------------------- health, errors


async def test_health_documents_and_unknown_routes(client: httpx.AsyncClient) -> None:
    res = await client.get("/api/health")
    assert res.status_code == 200
    assert res.json()["status"] == "ok"
    assert res.json()["schema_version"] >= 1
    assert (await client.get("/api/openapi.json")).json()["openapi"] == "3.1.0"
    error_of(await client.get("/api/nothing", headers=bearer("alice")), 404, "not_found")
    error_of(await client.delete("/api/runs", headers=bearer("alice")), 405, "method_not_allowed")
    page = await client.get("/nowhere", headers={"Accept": "text/html"})
    assert page.status_code == 404
    assert page.headers["content-type"].startswith("text/html")
    assert "no such page" in page.text


async def test_health_is_503_when_the_store_fails(registry: Any) -> None:
    class Broken:
        async def schema_version(self) -> int:
            raise OSError("disk gone")

    async with app_client(create_app(ServiceSettings(registry, Broken(), auth=make_auth()))) as c:  # type: ignore[arg-type]
        res = await c.get("/api/health")
    assert res.status_code == 503
    assert res.json() == {"status": "unavailable", "error": "OSError"}


async def test_an_unexpected_failure_is_a_500_json_or_html_without_its_cause(
    registry: Any, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def explode(**kw: Any) -> Any:
        raise RuntimeError("the disk is on fire")

    async with app_client(create_app(ServiceSettings(registry, store, auth=make_auth()))) as c:
        await sign_in(c)
        monkeypatch.setattr(store, "list_runs", explode)
        res = await c.get("/api/runs", headers=bearer("alice"))
        error_of(res, 500, "internal_error")
        assert "fire" not in res.text  # the cause goes to the log, not to the caller
        page = await c.get("/runs", headers={"Accept": "text/html"})
    assert page.status_code == 500
    assert page.headers["content-type"].startswith("text/html")
    assert "fire" not in page.text


async def test_a_run_that_cannot_be_read_is_a_named_answer_not_a_500(
    client: httpx.AsyncClient, store: Store, registry: Any, tmp_path: Path
) -> None:
    """An approver who sees every agent gets 409 `run_unreadable` naming the fault (ADR 0072);
    one limited to some agents the answer of a run they may not see."""
    run = await start_run(store, registry, "twin", "go", started_by="alice")
    with contextlib.closing(sqlite3.connect(tmp_path / "golem.db")) as db:
        db.execute("UPDATE golem_calls SET kind = 'weird' WHERE run_id = ?", (run.id,))
        db.commit()
    assert "weird" in error_of(
        await client.get(f"/api/runs/{run.id}", headers=bearer("alice")), 409, "run_unreadable"
    )
    hidden = await client.get(f"/api/runs/{run.id}", headers=bearer("olga"))
    unknown = await client.get("/api/runs/no-such-run", headers=bearer("olga"))
    assert hidden.status_code == unknown.status_code == 404
    assert hidden.json()["error"]["code"] == unknown.json()["error"]["code"]
    assert (await decide(client, run.id, "c1", {"decision": "approve"})).status_code == 409
    await sign_in(client, "alice")
    page = await client.get(f"/runs/{run.id}")
    assert page.status_code == 409
    assert "weird" in page.text


# --------------------------------------------------------------------------- agents, starts


async def test_agents_lists_what_the_caller_may_see(client: httpx.AsyncClient) -> None:
    async def names(who: str) -> list[str]:
        return [
            a["name"]
            for a in (await client.get("/api/agents", headers=bearer(who))).json()["agents"]
        ]

    assert await names("alice") == ["broken", "echo", "mixed", "twin"]
    assert await names("olga") == ["echo", "twin"]
    res = await client.get("/api/agents", headers=bearer("vic"))
    assert {a["can_start"] for a in res.json()["agents"]} == {False}
    assert res.json()["agents"][0]["description"] == "always fails"


async def test_start_saves_a_pending_completed_or_failed_run(
    client: httpx.AsyncClient, store: Store, start: StartRun
) -> None:
    res = await client.post(
        "/api/runs",
        json={"agent": "twin", "prompt": "ship it", "deps_ref": {"tenant": 7}, "expires_in": 600},
        headers=bearer("alice"),
    )
    assert res.status_code == 201
    run = res.json()["run"]
    assert res.headers["location"] == f"/api/runs/{run['id']}"
    assert (run["status"], run["started_by"], run["deps_ref"]) == (
        "pending",
        "alice",
        {"tenant": 7},
    )
    assert run["expires_at"] is not None
    assert [(c["call_id"], c["tool_name"], c["kind"]) for c in run["calls"]] == [
        ("c1", "deploy", "approval"),
        ("c2", "deploy", "approval"),
    ]
    first = run["calls"][0]
    assert (first["args"], first["reason"], first["decision"]) == (
        '{"target": "staging"}',
        "deploys to staging",
        None,
    )
    assert (await store.get_run(run["id"])).started_by == "alice"
    done = await start("echo", "hello")
    assert (done["status"], done["outcome"]["output"]) == ("completed", "echo: hello")
    failed = await start("broken", "hello")
    assert failed["status"] == "failed"
    assert "the model is down" in failed["outcome"]["error"]


@pytest.mark.parametrize(
    ("body", "who", "status", "code"),
    [
        (b"{not json", "alice", 400, "malformed_json"),
        (b"\xff\xfe", "alice", 400, "malformed_json"),
        (b"[1, 2]", "alice", 422, "invalid_request"),
        (b'{"agent": "twin"}', "alice", 422, "invalid_request"),
        (b'{"agent": "twin", "prompt": ""}', "alice", 422, "invalid_request"),
        (b'{"agent": "twin", "prompt": 5}', "alice", 422, "invalid_request"),
        (b'{"agent": "twin", "prompt": "x", "extra": 1}', "alice", 422, "invalid_request"),
        (b'{"agent": "twin", "prompt": "x", "expires_in": -1}', "alice", 422, "invalid_request"),
        (b'{"agent": "nobody", "prompt": "x"}', "alice", 422, "unknown_agent"),
        (b'{"agent": "twin", "prompt": "x"}', None, 401, "unauthenticated"),
        (b'{"agent": "twin", "prompt": "x"}', "vic", 403, "forbidden"),
        (b'{"agent": "mixed", "prompt": "x"}', "olga", 422, "unknown_agent"),  # no name oracle
        (b'{"agent": "twin", "prompt": "' + b"x" * 5000 + b'"}', "alice", 413, "payload_too_large"),
    ],
)
async def test_a_refused_start_is_named_and_saves_nothing(
    client: httpx.AsyncClient, store: Store, body: bytes, who: str | None, status: int, code: str
) -> None:
    headers = bearer(who) if who else {}
    res = await client.post("/api/runs", content=body, headers=headers)
    message = error_of(res, status, code)
    if status == 401:
        assert res.headers["www-authenticate"].startswith("Bearer")
    if body == b'{"agent": "twin"}':
        assert res.json()["error"]["details"][0]["loc"] == ["prompt"]
        assert "prompt" in message
    if who == "vic":
        assert TOKENS["vic"] not in res.text
    assert await store.list_runs() == []


async def test_bodies_without_a_content_length_are_limited_too(
    client: httpx.AsyncClient, store: Store
) -> None:
    async def chunks() -> Any:
        for _ in range(10):
            yield b"x" * 1000

    res = await client.post("/api/runs", content=chunks(), headers=bearer("alice"))
    error_of(res, 413, "payload_too_large")
    assert await store.list_runs() == []


# --------------------------------------------------------------------------- listing, showing


async def test_list_runs_and_calls_filter_to_what_the_caller_may_see(
    client: httpx.AsyncClient, start: StartRun
) -> None:
    twin, mixed, done = await start("twin"), await start("mixed", "m"), await start("echo", "e")

    async def runs(query: str, who: str = "alice") -> list[str]:
        res = await client.get(f"/api/runs{query}", headers=bearer(who))
        assert res.status_code == 200, res.text
        return [r["id"] for r in res.json()["runs"]]

    async def calls(query: str, who: str = "alice") -> list[tuple[str, str]]:
        res = await client.get(f"/api/calls{query}", headers=bearer(who))
        assert res.status_code == 200, res.text
        return [(c["run_id"], c["call_id"]) for c in res.json()["calls"]]

    assert await runs("") == [done["id"], mixed["id"], twin["id"]]
    assert await runs("?status=pending") == [mixed["id"], twin["id"]]
    assert await runs("?status=completed") == [done["id"]]
    assert await runs("?agent=mixed") == [mixed["id"]]
    assert await runs("?tool=lookup") == [mixed["id"]]
    assert await runs("?limit=1") == [done["id"]]
    assert await runs("?limit=1&offset=1") == [mixed["id"]]
    assert await runs("", who="olga") == [done["id"], twin["id"]]
    assert await runs("?agent=mixed", who="olga") == []
    every = [(twin["id"], "c1"), (twin["id"], "c2"), (mixed["id"], "a1"), (mixed["id"], "x1")]
    assert await calls("") == every
    assert await calls("?agent=mixed") == every[2:]
    assert await calls("?tool=lookup") == [(mixed["id"], "x1")]
    assert await calls("?kind=external") == [(mixed["id"], "x1")]
    assert await calls("?kind=approval&agent=twin") == every[:2]
    assert await calls("", who="olga") == every[:2]
    assert await calls("", who="tess") == [(mixed["id"], "x1")]
    await decide(client, twin["id"], "c1", {"decision": "approve"})
    assert await calls("?agent=twin") == every[1:2]  # decided calls leave the list


@pytest.mark.parametrize(
    ("url", "headers", "status", "code"),
    [
        *(
            (f"/api/runs{q}", bearer("alice"), 422, "invalid_request")
            for q in ("?status=bogus", "?limit=0", "?limit=501", "?limit=x", "?offset=-1")
        ),
        ("/api/calls?kind=maybe", bearer("alice"), 422, "invalid_request"),
        ("/api/runs", {}, 401, "unauthenticated"),
        ("/api/calls", {}, 401, "unauthenticated"),
        ("/api/runs", {"Authorization": "Bearer wrong"}, 401, "unauthenticated"),
        ("/api/runs", {"Authorization": "Basic dG9rLWFsaWNl"}, 401, "unauthenticated"),
        ("/api/runs/nope", bearer("alice"), 404, "run_not_found"),
    ],
)
async def test_a_refused_listing_is_named(
    client: httpx.AsyncClient, url: str, headers: dict[str, str], status: int, code: str
) -> None:
    error_of(await client.get(url, headers=headers), status, code)


async def test_deep_offsets_page_newest_first_over_one_or_several_agents(
    client: httpx.AsyncClient, store: Store, start: StartRun
) -> None:
    for agent in ("echo", "twin", "echo", "mixed", "twin", "echo", "twin"):
        await start(agent)
    stored = await store.list_runs(limit=50)
    for who, seen in (("alice", None), ("olga", ("echo", "twin"))):
        every = [r.id for r in stored if seen is None or r.agent in seen]
        for offset, limit in ((0, 3), (2, 3), (3, 2), (4, 10), (6, 1), (9, 2)):
            res = await client.get(f"/api/runs?limit={limit}&offset={offset}", headers=bearer(who))
            assert res.status_code == 200
            assert [r["id"] for r in res.json()["runs"]] == every[offset : offset + limit]


async def test_show_run_has_conversation_and_audit(
    client: httpx.AsyncClient, start: StartRun
) -> None:
    run = await start("mixed", "hello")
    res = await client.get(f"/api/runs/{run['id']}", headers=bearer("alice"))
    shown = res.json()["run"]
    assert shown["id"] == run["id"]
    assert [m["role"] for m in shown["messages"]] == ["user", "assistant"]
    assert shown["messages"][0]["content"] == "hello"
    assert [t["id"] for t in shown["messages"][1]["toolCalls"]] == ["a1", "x1"]
    assert [(a["action"], a["actor"]) for a in shown["audit"]] == [("created", "alice")]
    # a run of an agent olga may not see is one she cannot tell from no run (ADR 0069)
    res = await client.get(f"/api/runs/{run['id']}", headers=bearer("olga"))
    error_of(res, 404, "run_not_found")
    assert "mixed" not in res.text
    error_of(await client.get(f"/api/runs/{run['id']}"), 401, "unauthenticated")


# --------------------------------------------------------------------------- deciding


async def test_decisions_record_the_identity_and_make_the_run_ready(
    client: httpx.AsyncClient, store: Store, start: StartRun
) -> None:
    run = await start("twin")
    res = await decide(client, run["id"], "c1", {"decision": "approve"})
    assert res.status_code == 200
    assert (res.json()["decision"]["decision"], res.json()["decision"]["decided_by"]) == (
        "approve",
        "alice",
    )
    assert res.json()["run"]["status"] == "pending"
    res = await decide(client, run["id"], "c2", {"decision": "deny", "reason": "not today"}, "olga")
    assert res.json()["decision"] == {
        **res.json()["decision"],
        "decision": "deny",
        "reason": "not today",
        "decided_by": "olga",
    }
    assert res.json()["run"]["status"] == "ready"
    saved = await store.get_run(run["id"])
    assert [c.decision.decided_by for c in saved.calls if c.decision] == ["alice", "olga"]
    assert [(e.action.value, e.actor) for e in await store.audit(run["id"])][1:] == [
        ("decided", "alice"),
        ("decided", "olga"),
        ("ready", "olga"),
    ]


async def test_external_results_are_recorded_verbatim_by_a_tool_restricted_approver(
    client: httpx.AsyncClient, store: Store, start: StartRun
) -> None:
    run = await start("mixed")
    res = await decide(
        client, run["id"], "x1", {"decision": "external", "result": "  42\n"}, "tess"
    )
    assert res.status_code == 200
    assert res.json()["decision"]["result"] == "  42\n"
    assert (await store.get_run(run["id"])).call("x1").decision.text == "  42\n"  # type: ignore[union-attr]
    error_of(await decide(client, run["id"], "a1", {"decision": "deny"}, "tess"), 403, "forbidden")
    assert (await store.get_run(run["id"])).call("a1").decision is None


async def test_the_same_decision_again_is_a_no_op_and_another_is_409(
    client: httpx.AsyncClient, store: Store, start: StartRun
) -> None:
    run = await start("twin")
    first = await decide(client, run["id"], "c1", {"decision": "approve"})
    before = await snapshot(store, run["id"])
    again = await decide(client, run["id"], "c1", {"decision": "approve"})
    assert again.status_code == 200
    assert again.json()["decision"] == first.json()["decision"]
    # the same decision by another approver is no repeat: they did not decide it
    other = await decide(client, run["id"], "c1", {"decision": "approve"}, "olga")
    assert "approve by alice" in error_of(other, 409, "decision_conflict")
    conflict = await decide(client, run["id"], "c1", {"decision": "deny"})
    assert "c1" in error_of(conflict, 409, "decision_conflict")
    assert await snapshot(store, run["id"]) == before


async def test_deciding_a_ready_or_resumed_run_is_409(
    client: httpx.AsyncClient, store: Store, start: StartRun, registry: Any
) -> None:
    run = await start("mixed")
    await decide(client, run["id"], "a1", {"decision": "approve"})
    await decide(client, run["id"], "x1", {"decision": "external", "result": "v"})
    for resume in (False, True):
        if resume:
            assert await Worker(store, registry).run_once()
            assert (await store.get_run(run["id"])).status.value == "completed"
        before = await snapshot(store, run["id"])
        res = await decide(client, run["id"], "x1" if resume else "a1", {"decision": "deny"})
        error_of(res, 409, "run_not_pending")
        assert await snapshot(store, run["id"]) == before


async def test_deciding_an_expired_call_is_409_before_and_after_the_sweep(
    client: httpx.AsyncClient, store: Store, start: StartRun, registry: Any
) -> None:
    run = await start("twin", expires_in=0.001)
    await asyncio.sleep(0.01)  # past the deadline; no sweep has run
    message = error_of(
        await decide(client, run["id"], "c1", {"decision": "approve"}), 409, "call_expired"
    )
    assert "expired" in message
    decision = (await store.get_run(run["id"])).call("c1").decision
    assert decision is not None
    assert (decision.kind.value, decision.reason, decision.decided_by) == (
        "deny",
        "expired",
        "system:expiry",
    )
    executed = len(EXECUTED)
    await Worker(store, registry).run_once()
    assert len(EXECUTED) == executed  # nothing runs
    other = await start("twin", expires_in=0.001)
    await asyncio.sleep(0.01)
    assert await store.sweep_expired() == [other["id"]]
    before = await snapshot(store, other["id"])
    res = await decide(client, other["id"], "c2", {"decision": "approve"})
    assert res.status_code == 409
    assert res.json()["error"]["code"] in {"run_not_pending", "call_expired"}
    assert await snapshot(store, other["id"]) == before


@pytest.mark.parametrize(
    ("call", "body", "status", "code"),
    [
        ("c1", b"{", 400, "malformed_json"),
        ("c1", b'"approve"', 422, "invalid_request"),
        ("c1", {"decision": "maybe"}, 422, "invalid_request"),
        ("c1", {}, 422, "invalid_request"),
        ("c1", {"decision": "approve", "reason": "why not"}, 422, "invalid_request"),
        ("c1", {"decision": "deny", "result": "x"}, 422, "invalid_request"),
        ("c1", {"decision": "external"}, 422, "invalid_request"),
        ("c1", {"decision": "deny", "reason": 5}, 422, "invalid_request"),
        ("c1", {"decision": "approve", "by": "mallory"}, 422, "invalid_request"),
        ("c1", {"decision": "external", "result": "x"}, 422, "invalid_decision"),
        ("c1", {"decision": "deny", "reason": "r" * 5000}, 413, "payload_too_large"),
        ("x1", {"decision": "approve"}, 422, "invalid_decision"),
    ],
)
async def test_bad_decision_bodies_change_nothing(
    client: httpx.AsyncClient, store: Store, start: StartRun, call: str, body: Any, status: int,
    code: str,
) -> None:  # fmt: skip
    run = await start("mixed" if call == "x1" else "twin")
    before = await snapshot(store, run["id"])
    error_of(await decide(client, run["id"], call, body), status, code)
    assert await snapshot(store, run["id"]) == before


@pytest.mark.parametrize(
    ("run_key", "call_id", "who", "status", "code"),
    [
        ("missing", "c1", "alice", 404, "run_not_found"),
        ("twin", "nope", "alice", 404, "call_not_found"),
        ("twin", "a1", "alice", 404, "call_not_found"),  # another run's call ID
        ("mixed", "a1", "olga", 404, "run_not_found"),  # agent not allowed: no such run
        ("mixed", "zz", "olga", 404, "run_not_found"),
        ("mixed", "a1", "tess", 403, "forbidden"),  # the run is hers to see, the tool is not
        ("twin", "c1", None, 401, "unauthenticated"),
    ],
)
async def test_decision_lookup_and_permission_errors(
    client: httpx.AsyncClient, store: Store, start: StartRun, run_key: str, call_id: str,
    who: str | None, status: int, code: str,
) -> None:  # fmt: skip
    runs = {"twin": await start("twin"), "mixed": await start("mixed")}
    run_id = runs[run_key]["id"] if run_key in runs else "missing-run"
    before = {k: await snapshot(store, r["id"]) for k, r in runs.items()}
    res = await decide(client, run_id, call_id, {"decision": "approve"}, who)
    error_of(res, status, code)
    assert "mixed" not in res.text or who != "olga"
    assert {k: await snapshot(store, r["id"]) for k, r in runs.items()} == before


async def test_a_decision_reaches_only_the_call_of_the_run_it_names(
    client: httpx.AsyncClient, store: Store, start: StartRun
) -> None:
    one, two = await start("twin"), await start("twin")  # both have calls c1 and c2
    assert (await decide(client, one["id"], "c1", {"decision": "approve"})).status_code == 200
    assert (await store.get_run(two["id"])).call("c1").decision is None


async def test_approve_then_resume_executes_once(
    client: httpx.AsyncClient, store: Store, start: StartRun, registry: Any
) -> None:
    run = await start("twin")
    await decide(client, run["id"], "c1", {"decision": "approve"})
    await decide(client, run["id"], "c2", {"decision": "deny", "reason": "prod is frozen"})
    before = len(EXECUTED)
    worker = Worker(store, registry)
    assert await worker.run_once()
    assert not await worker.run_once()
    assert EXECUTED[before:] == ["c1"]
    final = (await client.get(f"/api/runs/{run['id']}", headers=bearer("alice"))).json()["run"]
    assert final["status"] == "completed"
    assert final["outcome"]["output"].startswith("deployed to staging; Your tool call was denied")
    assert [a["action"] for a in final["audit"]] == [
        "created",
        "decided",
        "decided",
        "ready",
        "claimed",
        "completed",
    ]


async def test_a_stream_token_is_issued_to_a_bearer_and_opens_the_stream(
    client: httpx.AsyncClient,
) -> None:
    res = await client.post("/api/stream-token", headers=bearer("olga"))
    assert res.status_code == 200
    assert res.json()["expires_at"].endswith("+00:00")
    token = res.json()["stream_token"]
    head = await client.head("/api/events", params={"stream_token": token})
    assert head.status_code == 200
    error_of(await client.post("/api/stream-token"), 401, "unauthenticated")
