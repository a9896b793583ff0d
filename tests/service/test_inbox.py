"""The web inbox: sign-in, a triage list grouped by run and ordered by urgency, run and audit
pages, forms (CSRF, edits, resolving interrupted runs), escaping, accessibility basics."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from typing import Any

import httpx
import pytest

from golem.durable.store import CallKind, Decision, NewCall, NewRun, Store, utc_now
from golem.service import ServiceSettings, create_app
from golem.service.views import Presentation
from tests.support.service import TOKENS, StartRun, interrupt, inventory, make_auth, sign_in

EVIL = '<img src=x onerror="alert(1)"><script>alert(2)</script>'


async def _save(
    store: Store, run_id: str, prompt: str, deadline_in: float | None, args: dict[str, object]
) -> None:
    """A pending run of twin with two deploy calls, `a` (with `args`) and `b`."""
    deadline = None if deadline_in is None else utc_now() + timedelta(seconds=deadline_in)
    said = [
        {"role": "user", "content": prompt},
        {"role": "assistant", "content": "I will deploy now."},
    ]
    await store.save_pending(
        NewRun(
            id=run_id,
            agent="twin",
            conversation_id="c-" + run_id,
            history=json.dumps(said),
            calls=(
                NewCall("a", CallKind.APPROVAL, "deploy", json.dumps(args), deadline=deadline),
                NewCall("b", CallKind.APPROVAL, "deploy", "{}", deadline=deadline),
            ),
            started_by="olga",
        )
    )


# --------------------------------------------------------------------------- sign-in


async def test_sign_in_and_out(client: httpx.AsyncClient) -> None:
    for path in ("/", "/runs", "/runs/x", "/?agent=twin"):
        res = await client.get(path)
        assert res.status_code == 303
        assert res.headers["location"].startswith("/login?next=")
    page = await client.get("/login?next=/runs")
    assert 'value="/runs"' in page.text
    wrong = await client.post("/login", data={"token": "nope"})
    assert wrong.status_code == 401
    assert "not valid" in wrong.text
    assert "set-cookie" not in wrong.headers
    assert (await client.post("/login", json={"token": TOKENS["alice"]})).status_code == 415
    res = await client.post("/login", data={"token": TOKENS["alice"], "next": "/runs"})
    assert (res.status_code, res.headers["location"]) == (303, "/runs")
    assert TOKENS["alice"] not in res.headers["set-cookie"]
    assert (await client.get("/login")).status_code == 303  # already signed in
    csrf = await sign_in(client)
    assert (await client.post("/logout", data={"csrf": "forged"})).status_code == 403
    assert (await client.get("/")).status_code == 200
    res = await client.post("/logout", data={"csrf": csrf})
    assert (res.status_code, res.headers["location"]) == (303, "/login?notice=signed-out")
    assert (await client.get("/")).status_code == 303


# --------------------------------------------------------------------------- the list


async def test_the_inbox_lists_pending_calls_with_escaped_model_text(
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
    for shown in ("deploy", "lookup", "approval", "external", "Approve", "Submit result", "Deny"):
        assert shown in html, shown
    assert "no expiry" in html
    assert f'href="/runs/{run["id"]}"' in html
    assert re.search(r'id="pending-count"[^>]*>\s*2\s*<', html)
    inv = inventory(html)
    assert inv.handlers == []
    assert inv.inline_styles == 0
    assert all(s.get("src", "").startswith("/static/") for s in inv.scripts)  # type: ignore[union-attr]


async def test_the_inbox_filters_and_shows_what_the_approver_may_decide(
    client: httpx.AsyncClient, start: StartRun
) -> None:
    await start("twin", expires_in=3600)
    await start("mixed", "m")
    await sign_in(client)
    html = (await client.get("/?agent=twin")).text
    assert html.count("data-call") == 2
    assert "in 1 h" in html
    assert (await client.get("/?kind=external")).text.count("data-call") == 1
    assert (await client.get("/?tool=lookup")).text.count("data-call") == 1
    assert (await client.get("/?tool=PLO")).text.count('class="group-title"') == 2  # any case
    for empty in ("/?tool=nothing-like-this", "/?agent=echo"):
        assert "No pending call matches these filters" in (await client.get(empty)).text
    await sign_in(client, "tess")
    html = (await client.get("/")).text
    assert html.count("data-call") == 1
    assert "lookup" in html


async def test_groups_by_run_with_expiring_soon_first_then_oldest(
    client: httpx.AsyncClient, store: Store
) -> None:
    await _save(store, "r-old", "Old request", None, {"target": "x"})
    await _save(store, "r-new", "New request", None, {"target": "y"})
    await _save(store, "r-urgent", "Urgent request", 600, {"target": "z"})
    await sign_in(client)
    page = (await client.get("/")).text
    titles = re.findall(r'class="group-title">([^<]+)<', page)
    assert titles == ["Urgent request", "Old request", "New request"]
    assert page.index("Expiring soon") < page.index("Urgent request")
    assert page.index("Waiting, oldest first") < page.index("Old request")
    assert "I will deploy now." in page  # the assistant's last words, on the group
    assert re.search(r"<title>\(6\) Inbox", page)


async def test_arguments_show_field_by_field_and_hidden_characters(
    client: httpx.AsyncClient, store: Store
) -> None:
    body = "\n".join(f"line {i}" for i in range(40))
    await _save(store, "r1", "Mail", None, {"path": "/home/\u202egpj.exe", "body": body})
    await sign_in(client)
    page = (await client.get("/")).text
    assert "<dt>path</dt>" in page
    assert "\u202e" not in page
    assert "⟨U+202E RLO⟩" in page
    assert 'class="hidden-char"' in page
    assert "line 39" in page  # fully reachable
    assert "Show all 40 lines" in page  # with a visible cue
    assert "\\n" not in page.split("<dt>body</dt>")[1][:300]  # as text, not a JSON string


async def test_a_presenter_gives_a_title_summary_and_diff(
    registry: Any, store: Store, start: StartRun
) -> None:
    def deploy(args: dict[str, object]) -> Presentation:
        return Presentation(
            title=f"Deploy to {args['target']}",
            summary="Rolls out v2.3 \u202e",
            before="replicas: 2\nimage: v2.2",
            after="replicas: 2\nimage: v2.3",
        )

    def broken(args: dict[str, object]) -> Presentation:
        raise RuntimeError("presenter bug")

    presenters = {"deploy": deploy, "lookup": broken}
    app = create_app(ServiceSettings(registry, store, auth=make_auth(), presenters=presenters))
    await start("mixed", prompt="prod")
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        await sign_in(client)
        page = (await client.get("/")).text
    assert '<span class="p-title">Deploy to prod</span>' in page
    assert 'Rolls out v2.3 <span class="hidden-char"' in page
    assert 'class="d-del">- image: v2.2' in page
    assert 'class="d-add">+ image: v2.3' in page
    assert "<dt>key</dt>" in page  # the failing presenter falls back to the fields


# --------------------------------------------------------------------------- other pages


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


async def test_the_run_page_shows_conversation_and_audit_or_an_html_404(
    client: httpx.AsyncClient, start: StartRun
) -> None:
    run = await start("mixed", EVIL)
    await sign_in(client)
    html = (await client.get(f"/runs/{run['id']}")).text
    assert "<img" not in html
    assert "<script>alert" not in html
    assert "Working on: &lt;img" in html
    assert "Audit trail" in html
    assert ">created<" in html
    assert f'data-run="{run["id"]}"' in html
    assert "2 calls still wait for a decision" in html
    await sign_in(client, "olga")
    for url in ("/runs/nope", f"/runs/{run['id']}"):  # hidden: as if no such run (ADR 0069)
        res = await client.get(url)
        assert res.status_code == 404
        assert res.headers["content-type"].startswith("text/html")
        assert "not found" in res.text


async def test_the_runs_page_shows_title_outcome_who_started_and_who_decided(
    client: httpx.AsyncClient, store: Store, start: StartRun
) -> None:
    pending = await start("twin", prompt="Ship the release\nwith details")
    await store.decide(pending["id"], "c1", Decision.approve(), decided_by="zoe")
    done = await start("echo", prompt="say hi")
    await sign_in(client)
    page = (await client.get("/runs")).text
    assert pending["id"][-12:] in page
    assert "Ship the release" in page
    assert "with details" not in page  # the first line is the title
    assert "echo: say hi" in page  # the outcome
    assert ">alice<" in page  # started by
    assert ">zoe<" in page  # decided by
    assert "1 to decide" in page
    only_done = (await client.get("/runs?status=completed")).text
    assert done["id"][-12:] in only_done
    assert pending["id"][-12:] not in only_done


async def test_the_audit_view_filters_and_exports(
    client: httpx.AsyncClient, store: Store, start: StartRun
) -> None:
    run = await start("twin")
    await store.decide(run["id"], "c1", Decision.deny("=HYPERLINK(1)"), decided_by="=zoe")
    await start("echo", who="olga")
    await sign_in(client)
    assert (await client.get("/audit?action=decided")).text.count("<tr><td") == 1
    res = await client.get("/audit?actor=ZOE&format=csv")
    assert res.headers["content-type"].startswith("text/csv")
    lines = res.text.strip().splitlines()
    assert lines[0] == "id,at,run_id,agent,actor,action,detail"
    assert len(lines) == 2
    assert ",'=zoe,decided," in lines[1]  # no formula injection into a spreadsheet
    res = await client.get("/audit?agent=echo&format=json")
    assert {e["agent"] for e in res.json()} == {"echo"}
    assert (await client.get("/audit?action=nope")).status_code == 422
    assert (await client.get("/audit?format=xml")).status_code == 422  # documented formats only
    assert (await client.get("/audit?format=")).headers["content-type"].startswith("text/html")


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
    again = await client.post(path, data={"csrf": csrf, "decision": "deny"})
    assert again.status_code == 409
    assert "already decided" in again.text
    res = await client.post(
        f"/runs/{run['id']}/calls/c2/decision",
        data={"csrf": csrf, "decision": "deny", "reason": "  frozen  "},
    )
    assert res.headers["location"].startswith(
        f"/runs/{run['id']}?notice=deny&call=deploy+%28c2%29&tag="
    )
    decisions = [c.decision for c in (await store.get_run(run["id"])).calls]
    assert [(d.kind.value, d.decided_by, d.reason) for d in decisions if d] == [
        ("approve", "olga", ""),
        ("deny", "olga", "frozen"),
    ]
    assert (
        "Denied deploy (c2). The model is told" in (await client.get(res.headers["location"])).text
    )


async def test_external_results_and_approve_all_through_the_forms(
    client: httpx.AsyncClient, store: Store, start: StartRun
) -> None:
    mixed, twin = await start("mixed"), await start("twin")
    csrf = await sign_in(client)
    res = await client.post(
        f"/runs/{mixed['id']}/calls/x1/decision",
        data={"csrf": csrf, "decision": "external", "result": "line 1\nline 2"},
    )
    assert res.status_code == 303
    assert (await store.get_run(mixed["id"])).call("x1").decision.text == "line 1\nline 2"  # type: ignore[union-attr]
    res = await client.post(
        f"/runs/{twin['id']}/decisions", data={"csrf": csrf, "decision": "approve", "next": "/"}
    )
    assert res.status_code == 303
    assert "approve-all" in res.headers["location"]
    after = await store.get_run(twin["id"])
    assert [c.decision.kind.value for c in after.calls if c.decision] == ["approve", "approve"]
    assert after.status.value == "ready"


@pytest.mark.parametrize(
    ("who", "fields", "status"),
    [
        (None, {"decision": "approve"}, 401),  # no session
        ("alice", {"decision": "approve"}, 403),  # no CSRF token
        ("alice", {"decision": "approve", "csrf": "forged"}, 403),
        ("alice", {"decision": "maybe", "csrf": None}, 422),
        ("tess", {"decision": "approve", "csrf": None}, 403),  # not her tool
    ],
)
async def test_refused_forms_change_nothing(
    client: httpx.AsyncClient, store: Store, start: StartRun, who: str | None,
    fields: dict[str, Any], status: int,
) -> None:  # fmt: skip
    run = await start("mixed")
    csrf = await sign_in(client, who) if who else ""
    if who == "tess":
        assert (
            "You may not decide calls of this tool."
            in (await client.get(f"/runs/{run['id']}")).text
        )
    data = {k: (csrf if v is None else v) for k, v in fields.items()}
    res = await client.post(f"/runs/{run['id']}/calls/a1/decision", data=data)
    assert res.status_code == status
    if who:
        assert res.headers["content-type"].startswith("text/html")
    assert (await store.get_run(run["id"])).call("a1").decision is None
    assert len(await store.audit(run["id"])) == 1


async def test_edit_and_approve_records_a_diff(
    client: httpx.AsyncClient, store: Store, start: StartRun
) -> None:
    run = await start("twin")
    csrf = await sign_in(client)
    assert "Edit the arguments, then approve" in (await client.get("/")).text

    async def approve(call: str, args: str) -> httpx.Response:
        url = f"/runs/{run['id']}/calls/{call}/decision"
        return await client.post(url, data={"csrf": csrf, "decision": "approve", "args": args})

    # unchanged arguments: a plain approval
    assert (await approve("c1", '{ "target" : "staging" }')).status_code == 303
    assert (await approve("c2", '{"target": "canary"}')).status_code == 303
    saved = await store.get_run(run["id"])
    assert saved.calls[0].decision.args is None  # type: ignore[union-attr]
    assert '"canary"' in (saved.calls[1].decision.args or "")  # type: ignore[union-attr]
    shown = (await client.get(f"/runs/{run['id']}")).text
    assert "with edited arguments" in shown
    assert 'class="d-del">-   &#34;target&#34;: &#34;production&#34;' in shown


async def test_starting_a_run_from_the_inbox(client: httpx.AsyncClient, store: Store) -> None:
    csrf = await sign_in(client)
    res = await client.post(
        "/runs", data={"csrf": csrf, "agent": "twin", "prompt": "go", "deps_ref": '{"a": 1}'}
    )
    assert res.status_code == 303
    saved = await store.get_run(res.headers["location"].removeprefix("/runs/"))
    assert (saved.started_by, saved.deps_ref) == ("alice", {"a": 1})


@pytest.mark.parametrize(
    ("who", "fields", "status"),
    [
        ("alice", {"agent": "twin", "prompt": "go", "deps_ref": "{bad"}, 422),
        ("alice", {"agent": "twin", "prompt": "  "}, 422),
        ("alice", {"agent": "nobody", "prompt": "go"}, 422),
        ("vic", {"agent": "twin", "prompt": "go"}, 403),  # may not start: no form either
    ],
)
async def test_bad_start_forms_change_nothing(
    client: httpx.AsyncClient, store: Store, who: str, fields: dict[str, str], status: int
) -> None:
    csrf = await sign_in(client, who)
    assert ("Start a run" in (await client.get("/")).text) is (who != "vic")
    assert (await client.post("/runs", data={"csrf": csrf, **fields})).status_code == status
    assert await store.list_runs() == []


# --------------------------------------------------------------------------- interrupted runs


async def test_an_interrupted_run_is_flagged_then_retried_or_cancelled_from_its_page(
    client: httpx.AsyncClient, store: Store, start: StartRun
) -> None:
    run = await start("twin")
    await interrupt(store, run["id"])
    assert (await store.get_run(run["id"])).status.value == "interrupted"
    csrf = await sign_in(client)
    assert "1 interrupted run</a> needs an operator" in (await client.get("/")).text
    page = (await client.get(f"/runs/{run['id']}")).text
    assert "A worker (w-dead) lost its lease" in page
    assert "will not resume it by itself" in page
    action = f"/runs/{run['id']}/resolve"
    assert action in page
    res = await client.post(action, data={"csrf": csrf, "action": "cancel", "note": ""})
    assert res.status_code == 422  # a note is required
    res = await client.post(
        action,
        data={"csrf": csrf, "action": "retry", "note": "c1 never reached the API", "confirm": "c1"},
    )
    assert res.status_code == 303
    assert (await store.get_run(run["id"])).status.value == "ready"
    assert action not in (await client.get(f"/runs/{run['id']}")).text
    again = await client.post(action, data={"csrf": csrf, "action": "cancel", "note": "late"})
    assert again.status_code == 409


async def test_resolve_refuses_to_rerun_a_tool_the_operator_may_not_decide(
    client: httpx.AsyncClient, store: Store, start: StartRun
) -> None:
    """tess may start runs of twin but may not decide `deploy`: confirming an approved
    deploy for a re-run is deciding it again (issue 27), so it is refused and nothing moves."""
    run = await start("twin")
    await interrupt(store, run["id"])
    csrf = await sign_in(client, "tess")
    action = f"/runs/{run['id']}/resolve"
    page = (await client.get(f"/runs/{run['id']}")).text
    assert action in page
    assert 'name="confirm"' not in page  # no deploy to confirm for tess
    res = await client.post(
        action, data={"csrf": csrf, "action": "retry", "note": "checked", "confirm": "c1"}
    )
    assert res.status_code == 403
    assert "deploy" in res.text
    assert (await store.get_run(run["id"])).status.value == "interrupted"
    plain = await client.post(action, data={"csrf": csrf, "action": "retry", "note": "checked"})
    assert plain.status_code == 303  # retrying without re-running anything stays allowed
