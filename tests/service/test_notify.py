"""Webhook notifications, delivered to a local HTTP receiver: signed, retried, logged."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from golem import Message, dumps_history
from golem.durable.store import CallKind, NewCall, NewRun, Store, utc_now
from golem.durable.worker import start_run
from golem.service import ServiceSettings, create_app
from golem.service.notify import Notifier, Webhook, sign
from tests.support.agents import build_registry
from tests.support.notify import Receiver
from tests.support.service import bearer, make_auth, serve

SECRET = b"webhook-secret"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def _notifier(store: Store, *hooks: Webhook) -> Notifier:
    return Notifier(
        store, hooks, public_url="https://inbox.example/", retry_delays=(0.01, 0.02), timeout=5
    )


async def test_a_paused_run_is_posted_signed_with_a_deep_link(
    store: Store, receiver: Receiver
) -> None:
    n = _notifier(store, Webhook(receiver.url + "/hook", secret=SECRET))
    cursor = await store.last_change_id()
    run = await start_run(store, build_registry(), "twin", "Ship it\nnow", started_by="alice")
    await n.step(cursor)
    (got,) = await receiver.wait_for(1)
    body = json.loads(got["body"])
    assert body["event"] == "run.paused"
    assert body["run_id"] == run.id
    assert body["title"] == "Ship it"
    assert body["url"] == f"https://inbox.example/runs/{run.id}"
    assert [c["call_id"] for c in body["calls"]] == ["c1", "c2"]
    headers = {k.lower(): v for k, v in got["headers"].items()}
    assert headers["x-golem-event"] == "run.paused"
    stamp = headers["x-golem-timestamp"]
    expected = hmac.new(SECRET, stamp.encode() + b"." + got["body"], hashlib.sha256).hexdigest()
    assert headers["x-golem-signature"] == "sha256=" + expected == sign(SECRET, stamp, got["body"])
    await n.close()


@pytest.mark.parametrize(
    ("statuses", "state", "attempts"),
    [([500, 503], "delivered", [500, 503, 200]), (None, "failed", [None, None, None])],
    ids=["retried", "unreachable"],
)
async def test_a_failed_delivery_is_retried_and_logged(
    store: Store, statuses: list[int] | None, state: str, attempts: list[int | None]
) -> None:
    receiver = Receiver(statuses) if statuses else None
    try:
        n = _notifier(
            store, Webhook(receiver.url if receiver else "http://127.0.0.1:9/unreachable")
        )
        cursor = await store.last_change_id()
        await start_run(store, build_registry(), "twin", "go", started_by="alice")
        await n.step(cursor)
        if receiver:
            await receiver.wait_for(3)
        await n.drain()
        (d,) = list(n.deliveries)
        assert d.state == state
        assert [a["status"] for a in d.attempts] == attempts
        assert all(a["error"] for a in d.attempts if a["status"] is None)
        await n.close()
    finally:
        if receiver:
            receiver.close()


async def test_ended_runs_expiring_calls_agents_and_events(
    store: Store, receiver: Receiver
) -> None:
    n = _notifier(
        store,
        Webhook(receiver.url + "/ops", agents={"echo"}, events={"run.ended"}),
        Webhook(receiver.url + "/all", events={"call.expiring"}),
    )
    cursor = await store.last_change_id()
    await start_run(store, build_registry(), "echo", "hi", started_by="alice")  # completes
    await start_run(store, build_registry(), "twin", "go", started_by="alice")  # paused: no hook
    await store.save_pending(
        NewRun(
            id="soon",
            agent="twin",
            conversation_id="c",
            history="[]",
            calls=(
                NewCall(
                    "x", CallKind.APPROVAL, "deploy", "{}", deadline=utc_now() + timedelta(days=60)
                ),
                NewCall(
                    "y",
                    CallKind.APPROVAL,
                    "deploy",
                    "{}",
                    deadline=utc_now() + timedelta(seconds=120),
                ),
            ),
        )
    )
    cursor = await n.step(cursor)
    await n.step(cursor)  # a second look does not warn twice
    got = await receiver.wait_for(2)
    await n.drain()
    by_path = {r["path"]: json.loads(r["body"]) for r in got}
    assert set(by_path) == {"/ops", "/all"}
    assert by_path["/ops"]["event"] == "run.ended"
    assert by_path["/ops"]["outcome"]["status"] == "completed"
    assert by_path["/all"]["event"] == "call.expiring"
    assert [c["call_id"] for c in by_path["/all"]["calls"]] == ["y"]
    assert len(receiver.requests) == 2
    await n.close()


async def test_slack_messages_escape_model_text_and_show_hidden_characters(
    store: Store, receiver: Receiver
) -> None:
    # a bidi override or zero-width character read as other words in the channel; the
    # JSON payload keeps the text as it is
    n = _notifier(store, Webhook.parse(f"slack+{receiver.url}/slack"))
    cursor = await store.last_change_id()
    title = "<!channel> & <https://evil|click> to staging\u202e\u200bnoitcudorp"
    calls = (NewCall("c1", CallKind.APPROVAL, "deploy<x>", "{}"),)
    history = dumps_history([Message("user", title)])
    await store.save_pending(
        NewRun(id="r", agent="ops\u2066", conversation_id="c", history=history, calls=calls)
    )
    await n.step(cursor)
    (got,) = await receiver.wait_for(1)
    msg = json.loads(got["body"])
    text = msg["blocks"][0]["text"]["text"] + msg["text"]
    assert "<!channel>" not in text
    assert "&lt;!channel&gt; &amp; &lt;https://evil|click&gt;" in text
    assert "<https://inbox.example/runs/r|" in text
    assert "deploy&lt;x&gt;" in text
    assert not any(ch in text for ch in "\u202e\u200b\u2066")
    for name in ("U+202E RLO", "U+200B ZWSP", "U+2066 LRI"):
        assert name in text
    await n.close()


def test_webhook_specs_and_validation() -> None:
    assert Webhook.parse("https://h.example/x").agents is None
    hook = Webhook.parse("ops=slack+https://hooks.slack.com/services/T/B/SECRET")
    assert hook.agents == frozenset({"ops"})
    assert hook.format == "slack"
    assert "SECRET" not in hook.shown_url
    assert "SECRET" not in repr(Webhook("https://h.example", secret=b"SECRET"))
    with pytest.raises(ValueError, match="http"):
        Webhook("ftp://h.example")
    with pytest.raises(ValueError, match="unknown webhook events"):
        Webhook("https://h.example", events=frozenset({"run.exploded"}))


async def test_the_service_sends_webhooks_and_shows_the_delivery_log(
    tmp_path: Path, receiver: Receiver
) -> None:
    app = create_app(
        ServiceSettings(
            build_registry(),
            f"sqlite:///{tmp_path / 'n.db'}",
            auth=make_auth(),
            webhooks=[Webhook(receiver.url + "/svc", secret=SECRET)],
            public_url="https://inbox.example",
        )
    )

    def use(base: str) -> None:
        with httpx.Client(base_url=base, headers=bearer("alice")) as http:
            run = http.post("/api/runs", json={"agent": "twin", "prompt": "go"}).json()["run"]
            asyncio.run(receiver.wait_for(1))
            log = http.get("/api/notifications").json()["deliveries"]
            assert log[0]["run_id"] == run["id"]
            assert log[0]["event"] == "run.paused"
            assert log[0]["url"] == receiver.url + "/svc"
        with httpx.Client(base_url=base, headers=bearer("olga")) as http:  # twin is hers too
            assert len(http.get("/api/notifications").json()["deliveries"]) == 1

    with serve(app) as base:
        await asyncio.to_thread(use, base)


async def test_a_run_that_cannot_be_read_does_not_stall_notifications(
    store: Store, receiver: Receiver, tmp_path: Path
) -> None:
    """A claim sets an unreadable run aside as interrupted (ADR 0072): its `run.ended` has
    no payload to send. The notifier used to raise `CorruptRecord` from `step` at that entry
    every poll, so no later change was ever notified; now it skips it, once."""
    import contextlib
    import sqlite3

    from golem.durable.store import Decision

    n = _notifier(store, Webhook(receiver.url, events={"run.ended"}))
    cursor = await store.last_change_id()
    bad = NewRun(
        id="bad",
        agent="echo",
        conversation_id="c",
        history="[]",
        calls=(NewCall("x", CallKind.APPROVAL, "deploy", "{}"),),
    )
    await store.save_pending(bad)
    await store.decide("bad", "x", Decision.approve(), decided_by="bob")
    with contextlib.closing(sqlite3.connect(tmp_path / "golem.db")) as db:
        db.execute("UPDATE golem_calls SET kind = 'weird' WHERE run_id = 'bad'")
        db.commit()
    assert await store.claim_ready("w1", 30) is None  # set aside: interrupted
    await start_run(store, build_registry(), "echo", "hi", started_by="alice")  # completes
    cursor = await n.step(cursor)
    (got,) = await receiver.wait_for(1)
    assert json.loads(got["body"])["outcome"]["status"] == "completed"
    assert cursor == await store.last_change_id()
    await n.drain()
    await n.close()
