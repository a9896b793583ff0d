"""Who may see, start and decide what: every route for every caller, a hidden run answered
as an unknown one, a tool an approver may not decide, agents named only to those who see them."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import httpx
from starlette.applications import Starlette

from golem import new_id
from golem.durable.store import Store
from golem.durable.worker import start_run
from golem.service.views import path
from tests.support.service import (
    StartRun,
    bearer,
    make_auth,
    open_stream,
    same,
    sign_in,
)

_CALLERS = ["nobody", "alice", "olga", "tess", "vic", "session:olga", "session:tess", "session:vic"]


def _route_table(app: Starlette) -> list[tuple[str, str]]:
    """(method, path template) of every route of the app, from its own route table."""
    from starlette.routing import Route

    out = []
    for route in app.routes:
        if isinstance(route, Route) and route.methods:
            out += [(m, route.path) for m in sorted(route.methods)]
    return out


def _request_for(
    method: str, template: str, run_id: str, call_id: str
) -> tuple[str, dict[str, Any]]:
    """A URL and body for a route: a plausible body, so checks past parsing are reached."""
    url = template.replace("{run_id}", quote(run_id, safe="")).replace(
        "{call_id:golem_any}", quote(call_id, safe="")
    )
    if method != "POST":
        return url, {}
    if template.startswith("/api/"):
        body: dict[str, Any] = (
            {"decision": "approve"}
            if template.endswith("/decision")
            else {"agent": "mixed", "prompt": "p"}
        )
        return url, {"json": body}
    form = {"decision": "approve", "action": "cancel", "note": "n", "agent": "mixed", "prompt": "p"}
    return url, {"data": form}


async def _stream_start(app: Starlette, c: httpx.AsyncClient, headers: dict[str, str]) -> None:
    """Open the event stream as the client's caller: a named refusal, or a hello."""
    cookie = "; ".join(f"{k}={v}" for k, v in c.cookies.items())
    async with open_stream(app, headers=headers | ({"Cookie": cookie} if cookie else {})) as s:
        if s.status == 200:
            await s.next("hello")
    assert s.status in (200, 401), s.text


async def test_every_route_for_every_caller_and_run_is_a_named_answer_that_leaks_nothing(
    app: Starlette, registry: Any, store: Store
) -> None:
    # Every method of every route in the app's table (a new route is covered unedited), for
    # every kind of caller, on a visible, a hidden and an unknown run: no 5xx, hidden answers
    # as unknown, and nothing in the store was done by someone not allowed to do it.
    auth = make_auth()
    approvers = {a.identity: a for a in auth.tokens.values()}
    routes = _route_table(app)
    assert len(routes) > 20, routes
    transport = httpx.ASGITransport(app=app)
    for caller in _CALLERS:
        async with httpx.AsyncClient(transport=transport, base_url="http://golem.test") as c:
            headers: dict[str, str] = {}
            csrf = ""
            if caller.startswith("session:"):
                csrf = await sign_in(c, caller.split(":")[1])
            elif caller != "nobody":
                headers = bearer(caller)
            visible = await start_run(store, registry, "twin", "t", started_by="alice")
            hidden = await start_run(store, registry, "mixed", "m", started_by="alice")
            unknown = new_id()
            limited = caller.endswith("olga")  # olga may not see "mixed"
            for method, template in routes:
                answers = {}
                for kind, run_id, call_id in (
                    ("visible", visible.id, "c1"),
                    ("hidden", hidden.id, "a1"),
                    ("unknown", unknown, "a1"),
                ):
                    url, kw = _request_for(method, template, run_id, call_id)
                    if "data" in kw:
                        kw["data"] = {**kw["data"], "csrf": csrf}
                    if (method, template) == ("GET", "/api/events"):  # endless: read its start
                        await _stream_start(app, c, headers)
                        break
                    res = await c.request(method, url, headers=headers, **kw)
                    assert res.status_code < 500, (caller, method, url, res.text)
                    answers[kind] = res
                    if "{run_id}" not in template:
                        break
                if "{run_id}" in template and limited:
                    same(answers["hidden"], answers["unknown"], hidden.id, unknown)
    # nothing was done by someone not allowed to do it
    for run in await store.list_runs(limit=1000):
        assert approvers[run.started_by].may_start(run.agent), run.id
        for call in run.calls:
            if call.decision is not None and call.decision.decided_by in approvers:
                who = approvers[call.decision.decided_by]
                assert who.may_decide(run.agent, call.tool_name), (run.agent, call)
        for entry in await store.audit(run.id):
            if entry.actor in approvers:
                assert approvers[entry.actor].may_see(run.agent), entry


async def test_a_hidden_run_answers_as_an_unknown_one_beyond_its_own_routes(
    client: httpx.AsyncClient, start: StartRun, store: Store
) -> None:
    # Found: olga (agents twin and echo) got 403 for a run of "mixed" and 404 for an ID no
    # run has: an oracle of which run IDs exist. HEAD, a call no run has, edited arguments
    # and the audit views filtered by run answer alike too (the routes: the test above).
    hidden = (await start("mixed"))["id"]
    unknown = hidden[:-4] + ("1111" if hidden.endswith("0000") else "0000")
    csrf = await sign_in(client, "olga")
    decide = path("runs", "RUN", "calls", "a1", "decision")
    for method, url, kw in [
        ("HEAD", "/api" + path("runs", "RUN"), {"headers": bearer("olga")}),
        ("POST", "/api" + path("runs", "RUN", "calls", "zz", "decision"),
         {"json": {"decision": "deny"}, "headers": bearer("olga")}),
        ("POST", decide, {"data": {"csrf": csrf, "decision": "approve", "args": '{"target": "x"}'}}),
        *(("GET", f"/audit?{fmt}run=RUN", {}) for fmt in ("", "format=csv&", "format=json&")),
        ("GET", "/api/audit?run=RUN", {"headers": bearer("olga")}),
    ]:  # fmt: skip
        answers = [
            await client.request(method, url.replace("RUN", quote(i, safe="")), **kw)
            for i in (hidden, unknown)
        ]
        assert answers[0].status_code in (200, 404), (method, url, answers[0].text)
        same(*answers, hidden, unknown)
    assert (await store.get_run(hidden)).call("a1").decision is None
    # and a start of an agent she may not see answers as one of no agent at all
    starts = [
        await client.post("/api/runs", json={"agent": a, "prompt": "p"}, headers=bearer("olga"))
        for a in ("mixed", "nobody")
    ]
    assert starts[0].status_code == starts[1].status_code == 422
    assert starts[0].text.replace("mixed", "X") == starts[1].text.replace("nobody", "X")


async def test_an_approver_who_may_not_decide_a_tool_gets_403_before_its_schema(
    client: httpx.AsyncClient, start: StartRun, store: Store
) -> None:
    # Found: tess (lookup only) sending edited arguments for a deploy call got 422 with
    # what did not fit deploy's schema, where every other decision of hers gets 403.
    run = await start("twin")
    csrf = await sign_in(client, "tess")
    for args in ('{"nope": 1}', "not json", '{"target": "x"}'):
        res = await client.post(
            path("runs", run["id"], "calls", "c1", "decision"),
            data={"csrf": csrf, "decision": "approve", "args": args},
        )
        assert res.status_code == 403, (args, res.status_code)
        assert "target" not in res.text.split("<main", 1)[-1]
    assert (await store.get_run(run["id"])).call("c1").decision is None


def _agent_enums(doc: dict[str, Any]) -> list[Any]:
    schemas = doc["components"]["schemas"]
    return [
        schemas[name]["properties"]["agent"].get("enum") for name in ("StartRunBody", "StartForm")
    ]


async def test_the_document_names_agents_only_to_those_who_may_see_them(
    client: httpx.AsyncClient,
) -> None:
    # Found: GET /api/openapi.json (no token) listed every registered agent, and an
    # approver limited to some agents learnt the names of the others.
    doc = (await client.get("/api/openapi.json")).json()
    assert _agent_enums(doc) == [None, None]
    assert "mixed" not in json.dumps(doc)
    wrong = (await client.get("/api/openapi.json", headers={"Authorization": "Bearer x"})).json()
    assert _agent_enums(wrong) == [None, None]
    olga = (await client.get("/api/openapi.json", headers=bearer("olga"))).json()
    assert _agent_enums(olga) == [["echo", "twin"]] * 2
    alice = (await client.get("/api/openapi.json", headers=bearer("alice"))).json()
    assert _agent_enums(alice) == [["broken", "echo", "mixed", "twin"]] * 2
