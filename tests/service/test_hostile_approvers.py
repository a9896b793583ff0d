"""Approvers who try what they may not (ADR 0061): decide as another, see a tool they may not decide.

Each test failed before its fix: decisions another approver made answered as one's own,
a tool's schema shown to an approver who may not decide it, edits that changed only a
JSON type dropped, a stream that broke after its 200 when the store was away, and hidden
agents named by errors.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from golem.durable.store import CallKind, NewCall, NewRun, RunStatus, Store, StoreBusy, StoreTimeout
from golem.durable.worker import Worker
from golem.errors import StoreError
from golem.service import Approver, AuthConfig, ServiceSettings, create_app
from golem.service.views import path
from tests.support.service import (
    TOKENS,
    StartRun,
    bearer,
    fail_every_call,
    make_auth,
    open_stream,
    sign_in,
)

WAIT = 10.0  # a guard against a hang, not a duration the test asserts


def _url(run_id: str, call_id: str) -> str:
    return "/api" + path("runs", run_id, "calls", call_id, "decision")


# --------------------------------------------------------------------------- decision races


async def test_two_approvers_deciding_one_call_at_once_one_wins_the_other_gets_409(
    client: httpx.AsyncClient, store: Store, start: StartRun
) -> None:
    # Found: the store takes the same decision again from anyone as a no-op, so both
    # approvers got 200 and the loser was told (decided_by aside) that they approved.
    for n in range(5):  # either may win; the loser is told who did
        run = await start("twin", f"p{n}")
        url = _url(run["id"], "c1")
        a, o = await asyncio.gather(
            client.post(url, json={"decision": "approve"}, headers=bearer("alice")),
            client.post(url, json={"decision": "approve"}, headers=bearer("olga")),
        )
        assert sorted((a.status_code, o.status_code)) == [200, 409], (a.text, o.text)
        winner, loser = (a, o) if a.status_code == 200 else (o, a)
        decided_by = winner.json()["decision"]["decided_by"]
        assert (await store.get_run(run["id"])).call("c1").decision.decided_by == decided_by  # type: ignore[union-attr]
        assert loser.json()["error"]["code"] == "decision_conflict"
        assert f"approve by {decided_by}" in loser.json()["error"]["message"]


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
    before = await store.audit(run["id"])
    # the approver's own retry is answered with the recorded decision, as it was
    again = await client.post(
        _url(run["id"], "c1"), json={"decision": "approve"}, headers=bearer("alice")
    )
    assert again.status_code == 200
    assert again.json()["run"]["status"] == "completed"
    # anyone else's is a conflict, the same decision or not
    for who, body in (("olga", {"decision": "approve"}), ("olga", {"decision": "deny"})):
        res = await client.post(_url(run["id"], "c1"), json=body, headers=bearer(who))
        assert res.status_code == 409, res.text
    assert await store.audit(run["id"]) == before


# --------------------------------------------------------------------------- edited arguments


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


async def _save_scale(store: Store, run_id: str, args: str) -> None:
    """A pending run of twin with one call of a tool the agent does not define (no schema)."""
    call = NewCall("s1", CallKind.APPROVAL, "scale", args)
    await store.save_pending(
        NewRun(
            id=run_id,
            agent="twin",
            conversation_id="conv",
            history="[]",
            calls=(call,),
            started_by="alice",
        )
    )


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


# --------------------------------------------------------------------------- the store away


async def test_a_stream_from_a_cursor_while_the_store_is_away_is_a_503(
    app: Starlette, store: Store, start: StartRun
) -> None:
    # Found: with ?cursor= (or Last-Event-ID, as every reconnect sends) the stream read
    # nothing before its 200: the first read then failed inside the response, which
    # Starlette can no longer answer ("response already started"): the connection dropped
    # with a server error in the log.
    await start("twin")
    fail_every_call(store, StoreError("postgresql: the database system is starting up"))
    async with open_stream(app, headers=bearer("alice"), query="cursor=0") as stream:
        assert stream.status == 503
        assert stream.headers["retry-after"] == "1"


@pytest.mark.parametrize(
    "error",
    [
        StoreError("postgresql: server closed the connection"),
        StoreBusy("cannot connect to PostgreSQL …: no free connection slot"),
        StoreTimeout(60, commit_sent=False),
    ],
    ids=["lost", "busy", "timeout"],
)
async def test_a_stream_whose_store_goes_away_ends_cleanly(
    registry: Any, store: Store, start: StartRun, error: StoreError
) -> None:
    # Before, a read that failed mid-stream raised out of the app after its 200 (an
    # error in the server's log, the connection cut); now the stream ends, and the
    # client reconnects after `retry:` from its Last-Event-ID.
    app = create_app(ServiceSettings(registry, store, auth=make_auth(), stream_heartbeat=0.05))
    await start("twin")
    sent: list[bytes] = []
    gone = asyncio.Event()

    async def receive() -> dict[str, Any]:
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message.get("body", b""))
        if b"event: change" in message.get("body", b""):
            fail_every_call(store, error)  # busy: found in the third chaos round (ADR 0068)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": "/api/events",
        "raw_path": b"/api/events",
        "root_path": "",
        "query_string": b"cursor=0",
        "headers": [(b"authorization", f"Bearer {TOKENS['alice']}".encode())],
        "client": ("127.0.0.1", 50000),
        "server": ("golem.test", 80),
        "state": {},
    }
    try:  # ends by itself, the client still connected, without raising
        await asyncio.wait_for(app(scope, receive, send), WAIT)
    finally:
        gone.set()
    assert any(b"event: change" in body for body in sent)
    assert app.state.golem.open_streams == {}


# --------------------------------------------------------------------------- hidden agents


async def test_errors_do_not_name_agents_the_caller_may_not_see(
    client: httpx.AsyncClient, start: StartRun
) -> None:
    # Found: olga (twin and echo only) learned the agent of any run ID she held from the
    # 403 ("may not see runs of agent "mixed""), and which agent names exist from starts
    # (403 for a hidden agent, 422 for an unknown one): the names ADR 0050 took out of the
    # OpenAPI document.
    # (ADR 0069: these are now the 404 of an unknown run; before, 403 without the name)
    run = await start("mixed")
    res = await client.get("/api" + path("runs", run["id"]), headers=bearer("olga"))
    assert res.status_code == 404
    assert "mixed" not in res.text
    res = await client.post(
        _url(run["id"], "a1"), json={"decision": "approve"}, headers=bearer("olga")
    )
    assert res.status_code == 404
    assert "mixed" not in res.text
    csrf = await sign_in(client, "olga")
    page = await client.get(path("runs", run["id"]))
    assert page.status_code == 404
    assert "mixed" not in page.text
    res = await client.post(
        path("runs", run["id"], "decisions"), data={"csrf": csrf, "decision": "deny"}
    )
    assert res.status_code == 404
    assert "mixed" not in res.text
    hidden = await client.post(
        "/api/runs", json={"agent": "mixed", "prompt": "p"}, headers=bearer("olga")
    )
    unknown = await client.post(
        "/api/runs", json={"agent": "nobody", "prompt": "p"}, headers=bearer("olga")
    )
    assert hidden.status_code == unknown.status_code == 422
    assert hidden.json()["error"]["code"] == unknown.json()["error"]["code"] == "unknown_agent"
    assert hidden.text.replace("mixed", "X") == unknown.text.replace("nobody", "X")


async def test_an_approver_who_may_see_but_not_start_still_gets_403(
    client: httpx.AsyncClient,
) -> None:
    res = await client.post(
        "/api/runs", json={"agent": "twin", "prompt": "p"}, headers=bearer("vic")
    )
    assert res.status_code == 403
    assert TOKENS["vic"] not in res.text


# --------------------------------------------------------------------------- Unicode


@pytest.mark.parametrize(
    "identity", ["ali\u202ece", "al\u200bice", "alice\x1b[2K", "alice\nbob", "\u2066alice"]
)
def test_an_identity_with_hidden_characters_is_refused(identity: str) -> None:
    # Found: an identity is recorded as decided_by and shown in the audit log, its CSV and
    # the webhooks; a bidi override or zero-width character let it read as another's.
    with pytest.raises(ValueError, match="invisible"):
        Approver(identity)


@pytest.mark.parametrize(
    ("one", "two"),
    [("alice", "Alice"), ("zo\u00eb", "zoe\u0308"), ("\uff41lice", "alice")],
)
def test_identities_that_differ_only_in_case_or_unicode_form_are_refused(
    one: str, two: str
) -> None:
    with pytest.raises(ValueError, match="differ only"):
        AuthConfig(tokens={"t1": Approver(one), "t2": Approver(two)}, secret=b"s" * 32)
    # one identity behind two tokens stays allowed
    AuthConfig(tokens={"t1": Approver(one), "t2": Approver(one)}, secret=b"s" * 32)


async def test_call_ids_that_differ_only_in_unicode_form_are_decided_apart(
    client: httpx.AsyncClient, store: Store
) -> None:
    # Nothing between the form and the store normalizes: each card decides its own call.
    composed, decomposed = "caf\u00e9", "cafe\u0301"
    calls = tuple(
        NewCall(i, CallKind.APPROVAL, "deploy", '{"target": "x"}') for i in (composed, decomposed)
    )
    await store.save_pending(
        NewRun(id="nfc", agent="twin", conversation_id="c", history="[]", calls=calls)
    )
    csrf = await sign_in(client)
    page = await client.get(path("runs", "nfc"))
    action = path("runs", "nfc", "calls", decomposed, "decision")
    assert f'action="{action}"' in page.text
    res = await client.post(action, data={"csrf": csrf, "decision": "deny"})
    assert res.status_code == 303
    run = await store.get_run("nfc")
    assert run.call(decomposed).decision is not None
    assert run.call(composed).decision is None
    res = await client.post(
        _url("nfc", composed), json={"decision": "approve"}, headers=bearer("alice")
    )
    assert res.status_code == 200
    assert (await store.get_run("nfc")).call(composed).decision.kind.value == "approve"  # type: ignore[union-attr]


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
