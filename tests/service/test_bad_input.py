"""Bad input never gets a 500: each attack gets a 4xx (or a failed run) and changes nothing.

Every test runs on SQLite and on PostgreSQL (when `GOLEM_TEST_POSTGRES_DSN` is set), because
the two fail differently (PostgreSQL refuses NUL bytes, SQLite 64-bit overflow, ...).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from golem.durable.store import Store
from golem.durable.worker import AgentEntry
from golem.service import ServiceSettings, create_app
from tests.store.backends import BACKENDS, Backend, backend_for
from tests.support.agents import build_registry
from tests.support.service import bearer, make_auth


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    with backend_for(request.param, tmp_path) as b:
        yield b


@pytest.fixture
async def any_store(backend: Backend) -> AsyncIterator[Store]:
    s = await backend.open()
    try:
        yield s
    finally:
        await s.close()


def _failing_factory(ref: Any) -> Any:
    raise KeyError("tenant")


@pytest.fixture
async def http(any_store: Store) -> AsyncIterator[httpx.AsyncClient]:
    registry = build_registry()
    entry = registry["echo"]
    registry["picky"] = AgentEntry(entry.agent, deps_factory=_failing_factory)
    app = create_app(ServiceSettings(registry, any_store, auth=make_auth(), max_body_bytes=1 << 20))
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://golem.test") as c:
        yield c


async def _runs(http: httpx.AsyncClient) -> list[dict[str, Any]]:
    res = await http.get("/api/runs", headers=bearer("alice"))
    assert res.status_code == 200, res.text
    runs: list[dict[str, Any]] = res.json()["runs"]
    return runs


async def _start_raw(http: httpx.AsyncClient, body: str) -> httpx.Response:
    return await http.post(
        "/api/runs",
        content=body.encode("utf-8", "surrogatepass"),
        headers={**bearer("alice"), "Content-Type": "application/json"},
    )


@pytest.mark.parametrize(
    "deps",
    ["NaN", "Infinity", "-Infinity", '{"x": [1, NaN]}'],
)
async def test_non_finite_deps_ref_is_refused_at_the_door(
    http: httpx.AsyncClient, deps: str
) -> None:
    res = await _start_raw(http, '{"agent": "echo", "prompt": "hi", "deps_ref": ' + deps + "}")
    assert res.status_code == 400
    assert res.json()["error"]["code"] == "malformed_json"
    assert "NaN" in res.json()["error"]["message"] or "Infinity" in res.json()["error"]["message"]
    assert await _runs(http) == []


@pytest.mark.parametrize("value", ["Infinity", "1e300", "1e12", "-1", "0"])
async def test_expires_in_out_of_range_is_refused(http: httpx.AsyncClient, value: str) -> None:
    res = await _start_raw(http, '{"agent": "twin", "prompt": "hi", "expires_in": ' + value + "}")
    assert 400 <= res.status_code < 500, res.text
    assert await _runs(http) == []


async def test_deeply_nested_deps_ref_is_refused(http: httpx.AsyncClient) -> None:
    deep = "[" * 50_000 + "]" * 50_000
    res = await _start_raw(http, '{"agent": "echo", "prompt": "hi", "deps_ref": ' + deep + "}")
    assert res.status_code == 400
    assert "nested" in res.json()["error"]["message"]
    assert await _runs(http) == []


async def test_moderately_nested_deps_ref_over_the_limit_is_refused(
    http: httpx.AsyncClient,
) -> None:
    deep = "[" * 200 + "]" * 200
    res = await _start_raw(http, '{"agent": "echo", "prompt": "hi", "deps_ref": ' + deep + "}")
    assert res.status_code == 422
    assert await _runs(http) == []


async def test_a_5000_digit_integer_is_refused(http: httpx.AsyncClient) -> None:
    res = await _start_raw(
        http, '{"agent": "echo", "prompt": "hi", "deps_ref": ' + "9" * 5000 + "}"
    )
    assert res.status_code == 400
    assert await _runs(http) == []


@pytest.mark.parametrize("text", ["\\ud800", "a\\udfffb", "nul\\u0000byte"])
async def test_lone_surrogates_and_nul_bytes_are_refused_everywhere(
    http: httpx.AsyncClient, text: str
) -> None:
    res = await _start_raw(http, '{"agent": "echo", "prompt": "' + text + '"}')
    assert res.status_code == 422, res.text
    res = await _start_raw(
        http, '{"agent": "echo", "prompt": "p", "deps_ref": {"k": "' + text + '"}}'
    )
    assert res.status_code == 422, res.text
    res = await _start_raw(
        http, '{"agent": "echo", "prompt": "p", "deps_ref": {"' + text + '": 1}}'
    )
    assert res.status_code == 422, res.text
    assert await _runs(http) == []
    run = (await _start_raw(http, '{"agent": "mixed", "prompt": "p"}')).json()["run"]
    for call, body in (
        ("a1", '{"decision": "deny", "reason": "' + text + '"}'),
        ("x1", '{"decision": "external", "result": "' + text + '"}'),
    ):
        res = await http.post(
            f"/api/runs/{run['id']}/calls/{call}/decision",
            content=body,
            headers={**bearer("alice"), "Content-Type": "application/json"},
        )
        assert res.status_code == 422, res.text
    shown = (await http.get(f"/api/runs/{run['id']}", headers=bearer("alice"))).json()["run"]
    assert [c["decision"] for c in shown["calls"]] == [None, None]


async def test_nul_bytes_in_paths_and_queries_are_refused(http: httpx.AsyncClient) -> None:
    run = (await _start_raw(http, '{"agent": "twin", "prompt": "p"}')).json()["run"]
    for url in (
        "/api/runs?agent=a%00b",
        "/api/runs?tool=%00",
        "/api/calls?agent=%00",
        f"/api/runs/{run['id']}%00",
    ):
        res = await http.get(url, headers=bearer("alice"))
        assert res.status_code == 400, (url, res.text)
    res = await http.post(
        f"/api/runs/{run['id']}/calls/c1%00/decision",
        json={"decision": "approve"},
        headers=bearer("alice"),
    )
    assert res.status_code == 400
    assert len(await _runs(http)) == 1


@pytest.mark.parametrize("cursor", [str(2**70), str(2**63), "1e3", "-1", "x"])
async def test_event_stream_cursor_out_of_range_is_refused(
    http: httpx.AsyncClient, cursor: str
) -> None:
    res = await http.get(f"/api/events?cursor={cursor}", headers=bearer("alice"))
    assert res.status_code == 422, res.text
    res = await http.get("/api/events", headers={**bearer("alice"), "Last-Event-ID": cursor})
    assert res.status_code == 422, res.text


async def test_a_deps_factory_that_raises_is_a_4xx_and_saves_nothing(
    http: httpx.AsyncClient,
) -> None:
    res = await _start_raw(http, '{"agent": "picky", "prompt": "hi", "deps_ref": {"t": 1}}')
    assert res.status_code == 422, res.text
    assert res.json()["error"]["code"] == "invalid_deps"
    assert "KeyError" in res.json()["error"]["message"]
    assert await _runs(http) == []


async def test_a_call_id_with_a_slash_is_decidable(
    any_store: Store, http: httpx.AsyncClient
) -> None:
    from golem.durable.store import CallKind, NewCall, NewRun

    await any_store.save_pending(
        NewRun(
            id="run-slash",
            agent="twin",
            conversation_id="conv",
            history="[]",
            calls=(NewCall("tools/deploy:1", CallKind.APPROVAL, "deploy", '{"target": "x"}'),),
            started_by="alice",
        )
    )
    res = await http.post(
        "/api/runs/run-slash/calls/tools%2Fdeploy%3A1/decision",
        json={"decision": "deny", "reason": "no"},
        headers=bearer("alice"),
    )
    assert res.status_code == 200, res.text
    assert res.json()["decision"]["reason"] == "no"


async def test_inbox_forms_refuse_nul_bytes_and_bad_deps(http: httpx.AsyncClient) -> None:
    from tests.support.service import TOKENS, csrf_of

    await http.post("/login", data={"token": TOKENS["alice"], "next": "/"})
    csrf = csrf_of((await http.get("/")).text)
    for fields in (
        {"agent": "echo", "prompt": "a\x00b"},
        {"agent": "echo", "prompt": "p", "deps_ref": "NaN"},
        {"agent": "echo", "prompt": "p", "deps_ref": "[" * 50_000},
        {"agent": "echo", "prompt": "p", "deps_ref": "[" * 100 + "]" * 100},
    ):
        res = await http.post("/runs", data={"csrf": csrf, **fields})
        assert res.status_code == 422, (fields, res.text[:200])
        assert "text/html" in res.headers["content-type"]
    assert await _runs(http) == []


async def test_a_nan_saved_by_a_python_caller_does_not_break_listings(
    any_store: Store, http: httpx.AsyncClient
) -> None:
    from golem.durable.worker import start_run

    try:
        await start_run(
            any_store, build_registry(), "twin", "p", deps_ref=[float("nan")], started_by="py"
        )
    except Exception:  # PostgreSQL's jsonb (or a store with allow_nan=False) refuses it
        pytest.skip("this store does not keep NaN")
    runs = await _runs(http)
    assert runs[0]["deps_ref"] == [None]
    calls = await http.get("/api/calls", headers=bearer("alice"))
    assert calls.status_code == 200


@pytest.mark.parametrize(
    ("path", "allowed"),
    [
        ("/api/runs", "GET, HEAD, POST"),
        ("/api/health", "GET, HEAD"),
        ("/api/runs/r1/calls/c1/decision", "POST"),
        ("/runs", "GET, HEAD, POST"),
        ("/login", "GET, HEAD, POST"),
    ],
)
async def test_a_wrong_method_gets_405_with_every_allowed_method(
    client: httpx.AsyncClient, path: str, allowed: str
) -> None:
    # RFC 9110: a 405 names the methods the resource supports, including when two routes
    # share the path (GET /api/runs and POST /api/runs).
    for method in ("PUT", "DELETE", "TRACE"):
        res = await client.request(method, path, headers=bearer("alice"))
        assert res.status_code == 405, (method, path)
        assert res.headers["allow"] == allowed, (method, path)


@pytest.mark.parametrize("value", ["5e-324", "1e-7", "0.0000005"])
async def test_an_expires_in_under_a_microsecond_expires_at_once(
    http: httpx.AsyncClient, value: str
) -> None:
    # Valid per the schema (> 0), but a timedelta of 5e-324 s is zero, which the store
    # refused; the service answered 422 "invalid_deps" (found by the OpenAPI fuzz).
    res = await _start_raw(http, '{"agent": "twin", "prompt": "hi", "expires_in": ' + value + "}")
    assert res.status_code == 201, res.text
    assert res.json()["run"]["expires_at"] is not None


async def test_a_malformed_cursor_is_refused_even_when_last_event_id_wins(
    http: httpx.AsyncClient,
) -> None:
    # The header wins, but a malformed ?cursor= is still malformed input (found by the
    # OpenAPI fuzz: Last-Event-ID: 24 with ?cursor=true opened the stream).
    headers = {**bearer("alice"), "Last-Event-ID": "24"}
    res = await http.get("/api/events?cursor=true", headers=headers)
    assert res.status_code == 422, res.text
