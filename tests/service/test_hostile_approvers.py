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

from golem.durable.store import CallKind, NewCall, NewRun, Store, StoreBusy, StoreTimeout
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


# --------------------------------------------------------------------------- edited arguments


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
