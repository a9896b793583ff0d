"""The web inbox: sign-in, pages, forms (CSRF), escaping of model text, accessibility basics."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from golem.durable.store import Store
from tests.support.service import TOKENS, StartRun, interrupt, inventory, sign_in

EVIL = '<img src=x onerror="alert(1)"><script>alert(2)</script>'


# --------------------------------------------------------------------------- sign-in


async def test_pages_redirect_to_login_without_a_session(client: httpx.AsyncClient) -> None:
    for path in ("/", "/runs", "/runs/x", "/?agent=twin"):
        res = await client.get(path)
        assert res.status_code == 303
        assert res.headers["location"].startswith("/login?next=")


async def test_login_sets_a_strict_http_only_cookie(client: httpx.AsyncClient) -> None:
    page = await client.get("/login?next=/runs")
    assert page.status_code == 200
    assert 'value="/runs"' in page.text
    res = await client.post("/login", data={"token": TOKENS["alice"], "next": "/runs"})
    assert res.status_code == 303
    assert res.headers["location"] == "/runs"
    cookie = res.headers["set-cookie"]
    assert cookie.startswith("golem_session=")
    assert "HttpOnly" in cookie
    assert "SameSite=strict" in cookie or "SameSite=Strict" in cookie
    assert TOKENS["alice"] not in cookie
    again = await client.get("/login")
    assert again.status_code == 303  # already signed in


async def test_login_with_a_wrong_token_is_401(client: httpx.AsyncClient) -> None:
    res = await client.post("/login", data={"token": "nope"})
    assert res.status_code == 401
    assert "not valid" in res.text
    assert "set-cookie" not in res.headers


async def test_login_form_must_be_urlencoded(client: httpx.AsyncClient) -> None:
    res = await client.post("/login", json={"token": TOKENS["alice"]})
    assert res.status_code == 415


async def test_logout_needs_the_csrf_token(client: httpx.AsyncClient) -> None:
    csrf = await sign_in(client)
    assert (await client.post("/logout", data={"csrf": "forged"})).status_code == 403
    assert (await client.get("/")).status_code == 200
    res = await client.post("/logout", data={"csrf": csrf})
    assert res.status_code == 303
    assert res.headers["location"] == "/login?notice=signed-out"
    assert (await client.get("/")).status_code == 303


# --------------------------------------------------------------------------- pages


async def test_inbox_lists_pending_calls_with_escaped_model_text(
    client: httpx.AsyncClient, start: StartRun
) -> None:
    run = await start("mixed", EVIL)
    await sign_in(client)
    page = await client.get("/")
    html = page.text
    assert page.headers["cache-control"] == "no-store"
    assert "<img" not in html
    assert "<script>alert" not in html
    assert "&lt;img src=x onerror=" in html
    assert "deploy" in html
    assert "lookup" in html
    assert "approval" in html
    assert "external" in html
    assert f'href="/runs/{run["id"]}"' in html
    assert re.search(r'id="pending-count"[^>]*>\s*2\s*<', html)
    assert "Approve" in html
    assert "Submit result" in html
    assert "Deny" in html
    assert "no expiry" in html
    inv = inventory(html)
    assert inv.handlers == []
    assert inv.inline_styles == 0
    assert all(s.get("src", "").startswith("/static/") for s in inv.scripts)  # type: ignore[union-attr]


async def test_inbox_filters_and_shows_expiry(client: httpx.AsyncClient, start: StartRun) -> None:
    await start("twin", expires_in=3600)
    await start("mixed", "m")
    await sign_in(client)
    html = (await client.get("/?agent=twin")).text
    assert html.count("data-call") == 2
    assert "expires" in html
    assert "in 1 h" in html
    assert (await client.get("/?kind=external")).text.count("data-call") == 1
    assert (await client.get("/?tool=lookup")).text.count("data-call") == 1


async def test_inbox_shows_only_what_the_approver_may_decide(
    client: httpx.AsyncClient, start: StartRun
) -> None:
    await start("mixed", "m")
    await start("twin")
    await sign_in(client, "tess")
    html = (await client.get("/")).text
    assert html.count("data-call") == 1
    assert "lookup" in html


async def test_every_control_has_a_label_and_ids_are_unique(
    client: httpx.AsyncClient, start: StartRun
) -> None:
    run = await start("mixed", "m")
    await start("twin")
    await sign_in(client)
    for path in ("/", "/runs", f"/runs/{run['id']}", "/login"):
        if path == "/login":
            client.cookies.clear()
        inv = inventory((await client.get(path)).text)
        for control in inv.controls:
            assert control.get("id") in inv.label_for, (path, control)
        assert len(inv.ids) == len(set(inv.ids)), path


async def test_run_page_shows_conversation_and_audit(
    client: httpx.AsyncClient, start: StartRun
) -> None:
    run = await start("mixed", EVIL)
    await sign_in(client)
    page = await client.get(f"/runs/{run['id']}")
    assert page.status_code == 200
    html = page.text
    assert "<img" not in html
    assert "<script>alert" not in html
    assert "Working on: &lt;img" in html
    assert "Audit trail" in html
    assert ">created<" in html
    assert f'data-run="{run["id"]}"' in html
    assert "2 calls still wait for a decision" in html


async def test_run_page_errors_are_html(client: httpx.AsyncClient, start: StartRun) -> None:
    run = await start("mixed")
    await sign_in(client, "olga")
    missing = await client.get("/runs/nope")
    assert missing.status_code == 404
    assert missing.headers["content-type"].startswith("text/html")
    hidden = await client.get(f"/runs/{run['id']}")  # as if there were no such run (ADR 0069)
    assert hidden.status_code == 404
    assert hidden.headers["content-type"].startswith("text/html")
    assert "not found" in hidden.text


async def test_runs_page_lists_runs(client: httpx.AsyncClient, start: StartRun) -> None:
    pending = await start("twin")
    done = await start("echo", "hi")
    await sign_in(client)
    html = (await client.get("/runs")).text
    assert pending["id"][-12:] in html
    assert done["id"][-12:] in html
    assert "2 to decide" in html
    only_done = (await client.get("/runs?status=completed")).text
    assert done["id"][-12:] in only_done
    assert pending["id"][-12:] not in only_done


async def test_static_assets_are_served(client: httpx.AsyncClient) -> None:
    css = await client.get("/static/inbox.css")
    assert css.status_code == 200
    assert "prefers-color-scheme" in css.text
    js = await client.get("/static/inbox.js")
    assert js.status_code == 200
    assert "EventSource" in js.text


# --------------------------------------------------------------------------- forms


async def test_deciding_through_the_form_records_the_identity(
    client: httpx.AsyncClient, store: Store, start: StartRun
) -> None:
    run = await start("twin")
    csrf = await sign_in(client, "olga")
    path = f"/runs/{run['id']}/calls/c1/decision"
    res = await client.post(
        path, data={"csrf": csrf, "decision": "approve", "next": "/?agent=twin"}
    )
    assert res.status_code == 303
    assert res.headers["location"].startswith(
        "/?agent=twin&notice=approve&call=deploy+%28c1%29&tag="
    )
    res = await client.post(
        f"/runs/{run['id']}/calls/c2/decision",
        data={"csrf": csrf, "decision": "deny", "reason": "  frozen  "},
    )
    assert res.headers["location"].startswith(
        f"/runs/{run['id']}?notice=deny&call=deploy+%28c2%29&tag="
    )
    saved = await store.get_run(run["id"])
    decisions = [c.decision for c in saved.calls]
    assert [(d.kind.value, d.decided_by, d.reason) for d in decisions if d] == [
        ("approve", "olga", ""),
        ("deny", "olga", "frozen"),
    ]
    page = await client.get(res.headers["location"])
    assert "Denied deploy (c2). The model is told" in page.text


async def test_external_results_through_the_form(
    client: httpx.AsyncClient, store: Store, start: StartRun
) -> None:
    run = await start("mixed")
    csrf = await sign_in(client)
    res = await client.post(
        f"/runs/{run['id']}/calls/x1/decision",
        data={"csrf": csrf, "decision": "external", "result": "line 1\nline 2"},
    )
    assert res.status_code == 303
    call = (await store.get_run(run["id"])).call("x1")
    assert call.decision is not None
    assert call.decision.text == "line 1\nline 2"


@pytest.mark.parametrize(
    ("fields", "status"),
    [
        ({"decision": "approve"}, 403),  # no CSRF token
        ({"decision": "approve", "csrf": "forged"}, 403),
        ({"decision": "maybe", "csrf": None}, 422),
    ],
)
async def test_refused_forms_change_nothing(
    client: httpx.AsyncClient, store: Store, start: StartRun, fields: dict[str, Any], status: int
) -> None:
    run = await start("twin")
    csrf = await sign_in(client)
    data = {k: (csrf if v is None else v) for k, v in fields.items()}
    res = await client.post(f"/runs/{run['id']}/calls/c1/decision", data=data)
    assert res.status_code == status
    assert res.headers["content-type"].startswith("text/html")
    assert (await store.get_run(run["id"])).call("c1").decision is None
    assert len(await store.audit(run["id"])) == 1


async def test_forms_without_a_session_are_401(
    client: httpx.AsyncClient, store: Store, start: StartRun
) -> None:
    run = await start("twin")
    res = await client.post(f"/runs/{run['id']}/calls/c1/decision", data={"decision": "approve"})
    assert res.status_code == 401
    assert (await store.get_run(run["id"])).call("c1").decision is None


async def test_a_conflicting_form_decision_is_a_409_page(
    client: httpx.AsyncClient, store: Store, start: StartRun
) -> None:
    run = await start("twin")
    csrf = await sign_in(client)
    path = f"/runs/{run['id']}/calls/c1/decision"
    await client.post(path, data={"csrf": csrf, "decision": "approve"})
    res = await client.post(path, data={"csrf": csrf, "decision": "deny"})
    assert res.status_code == 409
    assert "already decided" in res.text
    assert (await store.get_run(run["id"])).call("c1").decision.kind.value == "approve"  # type: ignore[union-attr]


async def test_a_tool_restricted_approver_gets_no_form_for_other_tools(
    client: httpx.AsyncClient, store: Store, start: StartRun
) -> None:
    run = await start("mixed")
    csrf = await sign_in(client, "tess")
    html = (await client.get(f"/runs/{run['id']}")).text
    assert "You may not decide calls of this tool." in html
    res = await client.post(
        f"/runs/{run['id']}/calls/a1/decision", data={"csrf": csrf, "decision": "approve"}
    )
    assert res.status_code == 403
    assert (await store.get_run(run["id"])).call("a1").decision is None


async def test_starting_a_run_from_the_inbox(client: httpx.AsyncClient, store: Store) -> None:
    csrf = await sign_in(client)
    res = await client.post(
        "/runs", data={"csrf": csrf, "agent": "twin", "prompt": "go", "deps_ref": '{"a": 1}'}
    )
    assert res.status_code == 303
    run_id = res.headers["location"].removeprefix("/runs/")
    saved = await store.get_run(run_id)
    assert saved.started_by == "alice"
    assert saved.deps_ref == {"a": 1}


@pytest.mark.parametrize(
    ("fields", "status"),
    [
        ({"agent": "twin", "prompt": "go", "deps_ref": "{bad"}, 422),
        ({"agent": "twin", "prompt": "  "}, 422),
        ({"agent": "nobody", "prompt": "go"}, 422),
    ],
)
async def test_bad_start_forms_change_nothing(
    client: httpx.AsyncClient, store: Store, fields: dict[str, str], status: int
) -> None:
    csrf = await sign_in(client)
    res = await client.post("/runs", data={"csrf": csrf, **fields})
    assert res.status_code == status
    assert await store.list_runs() == []


async def test_an_approver_who_may_not_start_sees_no_start_form(
    client: httpx.AsyncClient, store: Store
) -> None:
    csrf = await sign_in(client, "vic")
    assert "Start a run" not in (await client.get("/")).text
    res = await client.post("/runs", data={"csrf": csrf, "agent": "twin", "prompt": "go"})
    assert res.status_code == 403
    assert await store.list_runs() == []


async def test_interrupted_runs_are_flagged_for_an_operator(
    client: httpx.AsyncClient, store: Store, start: StartRun
) -> None:
    run = await start("twin")
    await interrupt(store, run["id"])
    await sign_in(client)
    inbox = (await client.get("/")).text
    assert "1 interrupted run</a> needs an operator" in inbox
    page = (await client.get(f"/runs/{run['id']}")).text
    assert "A worker (w-dead) lost its lease" in page
    assert "will not resume it by itself" in page
