"""The JSON API: every route, every error status, and that a refused request changes nothing."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from golem.durable.store import Store
from golem.durable.worker import Worker
from golem.service import ServiceSettings, create_app
from tests.support.agents import EXECUTED
from tests.support.service import StartRun, bearer, make_auth


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


# --------------------------------------------------------------------------- health, docs


async def test_health_reports_the_store(client: httpx.AsyncClient) -> None:
    res = await client.get("/api/health")
    assert res.status_code == 200
    assert res.json()["status"] == "ok"
    assert res.json()["schema_version"] >= 1


async def test_health_is_503_when_the_store_fails(registry: Any) -> None:
    class Broken:
        async def schema_version(self) -> int:
            raise OSError("disk gone")

    app = create_app(
        ServiceSettings(registry, Broken(), auth=make_auth())  # type: ignore[arg-type]
    )
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        res = await c.get("/api/health")
    assert res.status_code == 503
    assert res.json() == {"status": "unavailable", "error": "OSError"}


async def test_openapi_document_is_served(client: httpx.AsyncClient) -> None:
    res = await client.get("/api/openapi.json")
    assert res.status_code == 200
    assert res.json()["openapi"] == "3.1.0"


async def test_unknown_api_route_and_wrong_method_answer_json(client: httpx.AsyncClient) -> None:
    error_of(await client.get("/api/nothing", headers=bearer("alice")), 404, "not_found")
    error_of(await client.delete("/api/runs", headers=bearer("alice")), 405, "method_not_allowed")


async def test_an_unexpected_failure_is_a_json_500(
    registry: Any, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def explode(**kw: Any) -> Any:
        raise RuntimeError("the disk is on fire")

    monkeypatch.setattr(store, "list_runs", explode)
    app = create_app(ServiceSettings(registry, store, auth=make_auth()))
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        res = await c.get("/api/runs", headers=bearer("alice"))
    error_of(res, 500, "internal_error")
    assert "fire" not in res.text  # the cause goes to the log, not to the caller


# --------------------------------------------------------------------------- agents


async def test_agents_lists_what_the_caller_may_see(client: httpx.AsyncClient) -> None:
    res = await client.get("/api/agents", headers=bearer("alice"))
    assert [a["name"] for a in res.json()["agents"]] == ["broken", "echo", "mixed", "twin"]
    res = await client.get("/api/agents", headers=bearer("olga"))
    assert [a["name"] for a in res.json()["agents"]] == ["echo", "twin"]
    res = await client.get("/api/agents", headers=bearer("vic"))
    assert {a["can_start"] for a in res.json()["agents"]} == {False}
    assert res.json()["agents"][0]["description"] == "always fails"


# --------------------------------------------------------------------------- starting runs


async def test_start_saves_a_pending_run(client: httpx.AsyncClient, store: Store) -> None:
    res = await client.post(
        "/api/runs",
        json={"agent": "twin", "prompt": "ship it", "deps_ref": {"tenant": 7}, "expires_in": 600},
        headers=bearer("alice"),
    )
    assert res.status_code == 201
    run = res.json()["run"]
    assert res.headers["location"] == f"/api/runs/{run['id']}"
    assert run["status"] == "pending"
    assert run["started_by"] == "alice"
    assert run["deps_ref"] == {"tenant": 7}
    assert run["expires_at"] is not None
    assert [(c["call_id"], c["tool_name"], c["kind"]) for c in run["calls"]] == [
        ("c1", "deploy", "approval"),
        ("c2", "deploy", "approval"),
    ]
    assert run["calls"][0]["args"] == '{"target": "staging"}'
    assert run["calls"][0]["reason"] == "deploys to staging"
    assert run["calls"][0]["decision"] is None
    assert (await store.get_run(run["id"])).started_by == "alice"


async def test_start_saves_completed_and_failed_runs(start: StartRun) -> None:
    done = await start("echo", "hello")
    assert done["status"] == "completed"
    assert done["outcome"]["output"] == "echo: hello"
    failed = await start("broken", "hello")
    assert failed["status"] == "failed"
    assert "the model is down" in failed["outcome"]["error"]


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b"{not json", 400, "malformed_json"),
        (b"\xff\xfe", 400, "malformed_json"),
        (b"[1, 2]", 422, "invalid_request"),
        (b'{"agent": "twin"}', 422, "invalid_request"),
        (b'{"agent": "twin", "prompt": ""}', 422, "invalid_request"),
        (b'{"agent": "twin", "prompt": 5}', 422, "invalid_request"),
        (b'{"agent": "twin", "prompt": "x", "extra": 1}', 422, "invalid_request"),
        (b'{"agent": "twin", "prompt": "x", "expires_in": -1}', 422, "invalid_request"),
        (b'{"agent": "nobody", "prompt": "x"}', 422, "unknown_agent"),
    ],
)
async def test_start_rejects_bad_bodies(
    client: httpx.AsyncClient, store: Store, body: bytes, status: int, code: str
) -> None:
    res = await client.post("/api/runs", content=body, headers=bearer("alice"))
    error_of(res, status, code)
    assert await store.list_runs() == []


async def test_start_validation_errors_name_the_fields(client: httpx.AsyncClient) -> None:
    res = await client.post("/api/runs", json={"agent": "twin"}, headers=bearer("alice"))
    details = res.json()["error"]["details"]
    assert details[0]["loc"] == ["prompt"]
    assert "prompt" in res.json()["error"]["message"]


@pytest.mark.parametrize(
    ("who", "agent", "status", "code"),
    [
        (None, "twin", 401, "unauthenticated"),
        ("vic", "twin", 403, "forbidden"),
        ("olga", "mixed", 422, "unknown_agent"),  # as if it did not exist (no name oracle)
    ],
)
async def test_start_needs_a_token_and_the_right_to_start(
    client: httpx.AsyncClient, store: Store, who: str | None, agent: str, status: int, code: str
) -> None:
    headers = bearer(who) if who else {}
    res = await client.post("/api/runs", json={"agent": agent, "prompt": "x"}, headers=headers)
    error_of(res, status, code)
    if status == 401:
        assert res.headers["www-authenticate"].startswith("Bearer")
    assert await store.list_runs() == []


async def test_oversized_bodies_get_413_and_change_nothing(
    client: httpx.AsyncClient, store: Store, start: StartRun
) -> None:
    huge = {"agent": "twin", "prompt": "x" * 5000}
    error_of(
        await client.post("/api/runs", json=huge, headers=bearer("alice")), 413, "payload_too_large"
    )
    run = await start()
    before = await snapshot(store, run["id"])
    path = f"/api/runs/{run['id']}/calls/c1/decision"
    body = {"decision": "deny", "reason": "r" * 5000}
    error_of(await client.post(path, json=body, headers=bearer("alice")), 413, "payload_too_large")
    assert await snapshot(store, run["id"]) == before
    assert len(await store.list_runs()) == 1


async def test_bodies_without_a_content_length_are_limited_too(
    client: httpx.AsyncClient, store: Store
) -> None:
    async def chunks() -> Any:
        for _ in range(10):
            yield b"x" * 1000

    res = await client.post("/api/runs", content=chunks(), headers=bearer("alice"))
    error_of(res, 413, "payload_too_large")
    assert await store.list_runs() == []


# --------------------------------------------------------------------------- listing


async def test_list_runs_filters(client: httpx.AsyncClient, start: StartRun) -> None:
    twin = await start("twin")
    mixed = await start("mixed", "m")
    done = await start("echo", "e")

    async def ids(query: str, who: str = "alice") -> list[str]:
        res = await client.get(f"/api/runs{query}", headers=bearer(who))
        assert res.status_code == 200, res.text
        return [r["id"] for r in res.json()["runs"]]

    assert await ids("") == [done["id"], mixed["id"], twin["id"]]
    assert await ids("?status=pending") == [mixed["id"], twin["id"]]
    assert await ids("?status=completed") == [done["id"]]
    assert await ids("?agent=mixed") == [mixed["id"]]
    assert await ids("?tool=lookup") == [mixed["id"]]
    assert await ids("?limit=1") == [done["id"]]
    assert await ids("?limit=1&offset=1") == [mixed["id"]]
    assert await ids("", who="olga") == [done["id"], twin["id"]]
    assert await ids("?agent=mixed", who="olga") == []


@pytest.mark.parametrize(
    "query", ["?status=bogus", "?limit=0", "?limit=501", "?limit=x", "?offset=-1"]
)
async def test_list_runs_rejects_bad_filters(client: httpx.AsyncClient, query: str) -> None:
    error_of(await client.get(f"/api/runs{query}", headers=bearer("alice")), 422, "invalid_request")


async def test_list_runs_needs_a_token(client: httpx.AsyncClient) -> None:
    error_of(await client.get("/api/runs"), 401, "unauthenticated")
    error_of(
        await client.get("/api/runs", headers={"Authorization": "Bearer wrong"}),
        401,
        "unauthenticated",
    )
    error_of(
        await client.get("/api/runs", headers={"Authorization": "Basic dG9rLWFsaWNl"}),
        401,
        "unauthenticated",
    )


async def test_list_calls_shows_what_the_caller_may_decide(
    client: httpx.AsyncClient, start: StartRun
) -> None:
    twin = await start("twin")
    mixed = await start("mixed", "m")
    await start("echo", "e")

    async def calls(query: str, who: str = "alice") -> list[tuple[str, str]]:
        res = await client.get(f"/api/calls{query}", headers=bearer(who))
        assert res.status_code == 200, res.text
        return [(c["run_id"], c["call_id"]) for c in res.json()["calls"]]

    everything = [(twin["id"], "c1"), (twin["id"], "c2"), (mixed["id"], "a1"), (mixed["id"], "x1")]
    assert await calls("") == everything
    assert await calls("?agent=mixed") == everything[2:]
    assert await calls("?tool=lookup") == [(mixed["id"], "x1")]
    assert await calls("?kind=external") == [(mixed["id"], "x1")]
    assert await calls("?kind=approval&agent=twin") == everything[:2]
    assert await calls("", who="olga") == everything[:2]
    assert await calls("", who="tess") == [(mixed["id"], "x1")]
    error_of(
        await client.get("/api/calls?kind=maybe", headers=bearer("alice")), 422, "invalid_request"
    )
    error_of(await client.get("/api/calls"), 401, "unauthenticated")


async def test_decided_calls_leave_the_pending_list(
    client: httpx.AsyncClient, start: StartRun
) -> None:
    twin = await start("twin")
    await client.post(
        f"/api/runs/{twin['id']}/calls/c1/decision",
        json={"decision": "approve"},
        headers=bearer("alice"),
    )
    res = await client.get("/api/calls", headers=bearer("alice"))
    assert [c["call_id"] for c in res.json()["calls"]] == ["c2"]


# --------------------------------------------------------------------------- showing


async def test_show_run_has_conversation_and_audit(
    client: httpx.AsyncClient, start: StartRun
) -> None:
    run = await start("mixed", "hello")
    res = await client.get(f"/api/runs/{run['id']}", headers=bearer("alice"))
    assert res.status_code == 200
    shown = res.json()["run"]
    assert shown["id"] == run["id"]
    assert [m["role"] for m in shown["messages"]] == ["user", "assistant"]
    assert shown["messages"][0]["content"] == "hello"
    assert [t["id"] for t in shown["messages"][1]["toolCalls"]] == ["a1", "x1"]
    assert [(a["action"], a["actor"]) for a in shown["audit"]] == [("created", "alice")]


async def test_show_run_errors(client: httpx.AsyncClient, start: StartRun) -> None:
    run = await start("mixed")
    error_of(await client.get("/api/runs/nope", headers=bearer("alice")), 404, "run_not_found")
    # a run of an agent olga may not see is one she cannot tell from no run (ADR 0069)
    error_of(
        await client.get(f"/api/runs/{run['id']}", headers=bearer("olga")), 404, "run_not_found"
    )
    error_of(await client.get(f"/api/runs/{run['id']}"), 401, "unauthenticated")


# --------------------------------------------------------------------------- deciding


async def decide(
    client: httpx.AsyncClient, run_id: str, call_id: str, body: Any, who: str = "alice"
) -> httpx.Response:
    path = f"/api/runs/{run_id}/calls/{call_id}/decision"
    if isinstance(body, bytes):
        return await client.post(path, content=body, headers=bearer(who))
    return await client.post(path, json=body, headers=bearer(who))


async def test_decisions_record_the_identity_and_make_the_run_ready(
    client: httpx.AsyncClient, store: Store, start: StartRun
) -> None:
    run = await start("twin")
    res = await decide(client, run["id"], "c1", {"decision": "approve"})
    assert res.status_code == 200
    assert res.json()["decision"]["decision"] == "approve"
    assert res.json()["decision"]["decided_by"] == "alice"
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
    audit = await store.audit(run["id"])
    assert [(e.action.value, e.actor) for e in audit][1:] == [
        ("decided", "alice"),
        ("decided", "olga"),
        ("ready", "olga"),
    ]


async def test_external_results_are_recorded_verbatim(
    client: httpx.AsyncClient, store: Store, start: StartRun
) -> None:
    run = await start("mixed")
    res = await decide(
        client, run["id"], "x1", {"decision": "external", "result": "  42\n"}, "tess"
    )
    assert res.status_code == 200
    assert res.json()["decision"]["result"] == "  42\n"
    assert (await store.get_run(run["id"])).call("x1").decision.text == "  42\n"  # type: ignore[union-attr]


async def test_the_same_decision_again_is_a_no_op(
    client: httpx.AsyncClient, store: Store, start: StartRun
) -> None:
    run = await start("twin")
    first = await decide(client, run["id"], "c1", {"decision": "approve"})
    before = await snapshot(store, run["id"])
    again = await decide(client, run["id"], "c1", {"decision": "approve"})
    assert again.status_code == 200
    assert again.json()["decision"] == first.json()["decision"]
    assert await snapshot(store, run["id"]) == before
    # the same decision by another approver is no repeat: they did not decide it (409)
    other = await decide(client, run["id"], "c1", {"decision": "approve"}, "olga")
    error_of(other, 409, "decision_conflict")
    assert "approve by alice" in other.json()["error"]["message"]
    assert await snapshot(store, run["id"]) == before


async def test_a_conflicting_decision_is_409(
    client: httpx.AsyncClient, store: Store, start: StartRun
) -> None:
    run = await start("twin")
    await decide(client, run["id"], "c1", {"decision": "approve"})
    before = await snapshot(store, run["id"])
    message = error_of(
        await decide(client, run["id"], "c1", {"decision": "deny"}), 409, "decision_conflict"
    )
    assert "c1" in message
    assert await snapshot(store, run["id"]) == before


async def test_deciding_a_ready_or_resumed_run_is_409(
    client: httpx.AsyncClient, store: Store, start: StartRun, registry: Any
) -> None:
    run = await start("mixed")
    await decide(client, run["id"], "a1", {"decision": "approve"})
    await decide(client, run["id"], "x1", {"decision": "external", "result": "v"})
    before = await snapshot(store, run["id"])
    error_of(await decide(client, run["id"], "a1", {"decision": "deny"}), 409, "run_not_pending")
    assert await snapshot(store, run["id"]) == before
    assert await Worker(store, registry).run_once()
    assert (await store.get_run(run["id"])).status.value == "completed"
    before = await snapshot(store, run["id"])
    error_of(await decide(client, run["id"], "x1", {"decision": "deny"}), 409, "run_not_pending")
    assert await snapshot(store, run["id"]) == before


async def test_deciding_an_expired_call_is_409(
    client: httpx.AsyncClient, store: Store, start: StartRun
) -> None:
    run = await start("twin", expires_in=0.001)
    await asyncio.sleep(0.01)  # past the deadline; no sweep has run
    message = error_of(
        await decide(client, run["id"], "c1", {"decision": "approve"}), 409, "call_expired"
    )
    assert "expired" in message
    saved = await store.get_run(run["id"])
    assert saved.call("c1").decision is not None
    assert saved.call("c1").decision.reason == "expired"  # type: ignore[union-attr]
    assert saved.call("c1").decision.decided_by == "system:expiry"  # type: ignore[union-attr]


async def test_deciding_after_the_expiry_sweep_is_409(
    client: httpx.AsyncClient, store: Store, start: StartRun
) -> None:
    run = await start("twin", expires_in=0.001)
    await asyncio.sleep(0.01)
    assert await store.sweep_expired() == [run["id"]]
    before = await snapshot(store, run["id"])
    res = await decide(client, run["id"], "c2", {"decision": "approve"})
    assert res.status_code == 409
    assert res.json()["error"]["code"] in {"run_not_pending", "call_expired"}
    assert await snapshot(store, run["id"]) == before


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b"{", 400, "malformed_json"),
        (b'"approve"', 422, "invalid_request"),
        ({"decision": "maybe"}, 422, "invalid_request"),
        ({}, 422, "invalid_request"),
        ({"decision": "approve", "reason": "why not"}, 422, "invalid_request"),
        ({"decision": "deny", "result": "x"}, 422, "invalid_request"),
        ({"decision": "external"}, 422, "invalid_request"),
        ({"decision": "deny", "reason": 5}, 422, "invalid_request"),
        ({"decision": "approve", "by": "mallory"}, 422, "invalid_request"),
        ({"decision": "external", "result": "x"}, 422, "invalid_decision"),
    ],
)
async def test_bad_decision_bodies_change_nothing(
    client: httpx.AsyncClient, store: Store, start: StartRun, body: Any, status: int, code: str
) -> None:
    run = await start("twin")
    before = await snapshot(store, run["id"])
    error_of(await decide(client, run["id"], "c1", body), status, code)
    assert await snapshot(store, run["id"]) == before


async def test_approving_an_external_call_is_422(
    client: httpx.AsyncClient, store: Store, start: StartRun
) -> None:
    run = await start("mixed")
    before = await snapshot(store, run["id"])
    error_of(
        await decide(client, run["id"], "x1", {"decision": "approve"}), 422, "invalid_decision"
    )
    assert await snapshot(store, run["id"]) == before


@pytest.mark.parametrize(
    ("run_key", "call_id", "who", "status", "code"),
    [
        ("missing", "c1", "alice", 404, "run_not_found"),
        ("twin", "nope", "alice", 404, "call_not_found"),
        ("mixed", "a1", "olga", 404, "run_not_found"),  # agent not allowed: no such run
        ("mixed", "a1", "tess", 403, "forbidden"),  # tool not allowed
        ("twin", "c1", None, 401, "unauthenticated"),
    ],
)
async def test_decision_lookup_and_permission_errors(
    client: httpx.AsyncClient,
    store: Store,
    start: StartRun,
    run_key: str,
    call_id: str,
    who: str | None,
    status: int,
    code: str,
) -> None:
    runs = {"twin": await start("twin"), "mixed": await start("mixed")}
    run_id = runs[run_key]["id"] if run_key in runs else "missing-run"
    before = {k: await snapshot(store, r["id"]) for k, r in runs.items()}
    path = f"/api/runs/{run_id}/calls/{call_id}/decision"
    res = await client.post(path, json={"decision": "approve"}, headers=bearer(who) if who else {})
    error_of(res, status, code)
    assert {k: await snapshot(store, r["id"]) for k, r in runs.items()} == before


async def test_a_tool_restricted_approver_decides_only_its_tool(
    client: httpx.AsyncClient, store: Store, start: StartRun
) -> None:
    run = await start("mixed")
    assert (await decide(client, run["id"], "x1", {"decision": "deny"}, "tess")).status_code == 200
    error_of(await decide(client, run["id"], "a1", {"decision": "deny"}, "tess"), 403, "forbidden")
    assert (await store.get_run(run["id"])).call("a1").decision is None


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
    res = await client.get(f"/api/runs/{run['id']}", headers=bearer("alice"))
    final = res.json()["run"]
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


# --------------------------------------------------------------------------- stream tokens


async def test_stream_token_is_issued_to_a_bearer(
    client: httpx.AsyncClient, app: Starlette
) -> None:
    res = await client.post("/api/stream-token", headers=bearer("olga"))
    assert res.status_code == 200
    token = res.json()["stream_token"]
    cred = app.state.golem.auth.verify_stream_token(token)
    assert cred is not None
    assert cred.approver.identity == "olga"
    assert res.json()["expires_at"].endswith("+00:00")
    error_of(await client.post("/api/stream-token"), 401, "unauthenticated")
