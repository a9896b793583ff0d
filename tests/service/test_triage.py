"""The inbox as a triage list: grouped by run, ordered by urgency, readable arguments."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import httpx
import pytest

from golem.durable.store import CallKind, NewCall, NewRun, Store, utc_now
from tests.support.service import StartRun, interrupt, sign_in


def _history(prompt: str, said: str) -> str:
    return json.dumps(
        [
            {"role": "user", "content": prompt},
            {"role": "assistant", "content": said},
        ]
    )


async def _save(
    store: Store, run_id: str, prompt: str, deadline_in: float | None, args: dict[str, object]
) -> None:
    deadline = None if deadline_in is None else utc_now() + timedelta(seconds=deadline_in)
    await store.save_pending(
        NewRun(
            id=run_id,
            agent="twin",
            conversation_id="c-" + run_id,
            history=_history(prompt, "I will deploy now."),
            calls=(
                NewCall("a", CallKind.APPROVAL, "deploy", json.dumps(args), deadline=deadline),
                NewCall("b", CallKind.APPROVAL, "deploy", "{}", deadline=deadline),
            ),
            started_by="olga",
        )
    )


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


async def test_approve_all_decides_every_call_of_the_run(
    client: httpx.AsyncClient, store: Store, start: StartRun
) -> None:
    run = await start("twin")
    csrf = await sign_in(client)
    res = await client.post(
        f"/runs/{run['id']}/decisions", data={"csrf": csrf, "decision": "approve", "next": "/"}
    )
    assert res.status_code == 303
    assert "approve-all" in res.headers["location"]
    after = await store.get_run(run["id"])
    assert [c.decision.kind.value for c in after.calls if c.decision] == ["approve", "approve"]
    assert after.status.value == "ready"


async def test_an_empty_filtered_list_says_the_filter_matched_nothing(
    client: httpx.AsyncClient, start: StartRun
) -> None:
    await start("twin")
    await sign_in(client)
    page = (await client.get("/?tool=nothing-like-this")).text
    assert "No pending call matches these filters" in page
    page = (await client.get("/?agent=echo")).text
    assert "No pending call matches these filters" in page


async def test_the_tool_filter_is_a_case_insensitive_substring(
    client: httpx.AsyncClient, start: StartRun
) -> None:
    await start("twin")
    await sign_in(client)
    page = (await client.get("/?tool=PLO")).text
    assert page.count('class="group-title"') == 1


async def test_runs_show_title_outcome_who_started_and_who_decided(
    client: httpx.AsyncClient, store: Store, start: StartRun
) -> None:
    from golem.durable.store import Decision

    run = await start("twin", prompt="Ship the release\nwith details")
    await store.decide(run["id"], "c1", Decision.approve(), decided_by="zoe")
    await start("echo", prompt="say hi")
    await sign_in(client)
    page = (await client.get("/runs")).text
    assert "Ship the release" in page
    assert "with details" not in page  # the first line is the title
    assert "echo: say hi" in page  # the outcome
    assert ">alice<" in page  # started by
    assert ">zoe<" in page  # decided by


async def test_the_audit_view_filters_and_exports(
    client: httpx.AsyncClient, store: Store, start: StartRun
) -> None:
    from golem.durable.store import Decision

    run = await start("twin")
    await store.decide(run["id"], "c1", Decision.deny("=HYPERLINK(1)"), decided_by="=zoe")
    await start("echo", who="olga")
    await sign_in(client)
    page = (await client.get("/audit?action=decided")).text
    assert page.count("<tr><td") == 1
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


async def test_the_audit_api_hides_runs_the_caller_may_not_see(
    client: httpx.AsyncClient, start: StartRun
) -> None:
    from tests.support.service import bearer

    await start("mixed")
    await start("twin")
    res = await client.get("/api/audit", headers=bearer("olga"))
    assert res.status_code == 200
    assert {e["agent"] for e in res.json()["entries"]} == {"twin"}
    res = await client.get("/api/audit?action=created&limit=1", headers=bearer("alice"))
    assert len(res.json()["entries"]) == 1


async def test_edit_and_approve_checks_the_schema_and_records_a_diff(
    client: httpx.AsyncClient, store: Store, start: StartRun
) -> None:
    import inspect

    from golem.durable.store import Decision

    run = await start("twin")
    csrf = await sign_in(client)
    page = (await client.get("/")).text
    assert "Edit the arguments, then approve" in page
    action = f"/runs/{run['id']}/calls/c1/decision"
    bad = await client.post(
        action, data={"csrf": csrf, "decision": "approve", "args": '{"target": 5}'}
    )
    assert bad.status_code == 422
    assert "must be string" in bad.text
    missing = await client.post(action, data={"csrf": csrf, "decision": "approve", "args": "{}"})
    assert "required" in missing.text
    not_object = await client.post(
        action, data={"csrf": csrf, "decision": "approve", "args": "[1]"}
    )
    assert not_object.status_code == 422
    same = await client.post(
        action, data={"csrf": csrf, "decision": "approve", "args": '{ "target" : "staging" }'}
    )
    assert same.status_code == 303  # unchanged arguments: a plain approval
    action = f"/runs/{run['id']}/calls/c2/decision"
    edited = await client.post(
        action, data={"csrf": csrf, "decision": "approve", "args": '{"target": "canary"}'}
    )
    if "args" not in inspect.signature(Decision.approve).parameters:
        assert edited.status_code == 422
        assert "cannot record edited arguments" in edited.text
        return
    assert edited.status_code == 303
    saved = await store.get_run(run["id"])
    assert saved.calls[1].decision is not None
    assert '"canary"' in (saved.calls[1].decision.args or "")
    shown = (await client.get(f"/runs/{run['id']}")).text
    assert "with edited arguments" in shown
    assert 'class="d-del">-   &#34;target&#34;: &#34;production&#34;' in shown


async def test_an_interrupted_run_is_retried_or_cancelled_from_its_page(
    client: httpx.AsyncClient, store: Store, start: StartRun
) -> None:
    run = await start("twin")
    await interrupt(store, run["id"])
    assert (await store.get_run(run["id"])).status.value == "interrupted"
    csrf = await sign_in(client)
    page = (await client.get(f"/runs/{run['id']}")).text
    action = f"/runs/{run['id']}/resolve"
    if not hasattr(store, "retry_interrupted"):
        assert action not in page  # no actions until the store can resolve
        res = await client.post(action, data={"csrf": csrf, "action": "cancel", "note": "x"})
        assert res.status_code == 422
        return
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


async def test_a_presenter_gives_a_title_summary_and_diff(
    registry: object, store: Store, start: StartRun
) -> None:
    from golem.service import ServiceSettings, create_app
    from golem.service.views import Presentation
    from tests.support.service import make_auth

    def deploy(args: dict[str, object]) -> Presentation:
        return Presentation(
            title=f"Deploy to {args['target']}",
            summary="Rolls out v2.3 \u202e",
            before="replicas: 2\nimage: v2.2",
            after="replicas: 2\nimage: v2.3",
        )

    def broken(args: dict[str, object]) -> Presentation:
        raise RuntimeError("presenter bug")

    app = create_app(
        ServiceSettings(
            registry,  # type: ignore[arg-type]
            store,
            auth=make_auth(),
            presenters={"deploy": deploy, "lookup": broken},
        )
    )
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


async def test_resolve_refuses_to_rerun_a_tool_the_operator_may_not_decide(
    client: httpx.AsyncClient, store: Store, start: StartRun
) -> None:
    """tess may start runs of twin but may not decide `deploy`: confirming an approved
    deploy for a re-run is deciding it again (issue 27), so it is refused and nothing moves."""
    run = await start("twin")
    await interrupt(store, run["id"])
    if not hasattr(store, "retry_interrupted"):
        pytest.skip("this store cannot resolve interrupted runs")
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
