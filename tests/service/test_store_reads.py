"""How many store calls the service makes: event streams, audit views and the notifier read
the runs' agent and status along with the audit log, not run by run; a keyed start reads
its run once."""

from __future__ import annotations

from collections import Counter
from typing import Any

import httpx
import pytest

from golem.durable.store import Decision, Store
from golem.durable.worker import start_run
from golem.service import ServiceSettings, create_app
from golem.service.notify import Notifier, Webhook
from golem.service.positions import read_position
from tests.support.service import bearer, make_auth, open_stream, sign_in


class Counting:
    """A store that counts the calls made to each of its methods."""

    def __init__(self, inner: Store) -> None:
        self._inner = inner
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return attr(*args, **kwargs)

        return counted


async def _history(store: Store, registry: Any, runs: int = 6) -> list[str]:
    """`runs` started runs of three agents, half of them decided: a log to replay."""
    ids = []
    for n in range(runs):
        agent = ("twin", "mixed", "echo")[n % 3]
        run = await start_run(store, registry, agent, f"p{n}", started_by="alice")
        ids.append(run.id)
        if agent == "twin" and n % 2 == 0:
            await store.decide(run.id, "c1", Decision.approve(), decided_by="alice")
    return ids


async def test_a_stream_from_cursor_zero_reads_no_run(store: Store, registry: Any) -> None:
    # Found: the stream read every entry's run (get_run) to learn its agent and status,
    # so replaying a long log from cursor=0 cost one run read per entry.
    await _history(store, registry)
    # the stream sends nothing for changes olga may not see (ADR 0073): read up to her last
    last = max(e.id for e in await store.changes_since(0, 1000) if e.agent in {"twin", "echo"})
    counting = Counting(store)
    settings = ServiceSettings(
        registry,
        counting,  # type: ignore[arg-type]
        auth=make_auth(),
        stream_poll_interval=0.02,
    )
    app = create_app(settings)
    async with open_stream(app, headers=bearer("olga"), query="cursor=0") as stream:
        seen: list[dict[str, Any]] = []
        while True:
            ev = await stream.next()
            if ev.event == "change":
                seen.append(ev.json())
                # olga does not see every agent: her event IDs are sealed (ADR 0077)
                secret = app.state.golem.auth.secret
                if read_position(secret, ev.id or "", full_view=False) >= last:  # type: ignore[operator]
                    break
    assert seen, "olga saw no change"
    assert {c["agent"] for c in seen} <= {"twin", "echo"}  # mixed is not hers
    assert all(c["status"] for c in seen)
    assert counting.calls["get_run"] == 0, counting.calls


async def test_the_stream_still_names_a_runs_current_status_and_parent(
    store: Store, registry: Any
) -> None:
    (run_id, *_) = await _history(store, registry, runs=1)  # twin, c1 approved
    await store.decide(run_id, "c2", Decision.deny("no"), decided_by="alice")
    app = create_app(ServiceSettings(registry, store, auth=make_auth(), stream_poll_interval=0.02))
    last = await store.last_change_id()
    async with open_stream(app, headers=bearer("alice"), query="cursor=0") as stream:
        while True:
            ev = await stream.next()
            if ev.event == "change":
                assert ev.json()["status"] == "ready"  # as the run is now
                assert ev.json()["parent_run_id"] is None
                if int(ev.id or 0) >= last:  # the hello's ID is sealed (ADR 0073)
                    break


@pytest.mark.parametrize("url", ["/api/audit?limit=500", "/audit", "/audit?format=csv"])
async def test_the_audit_views_read_no_run(store: Store, registry: Any, url: str) -> None:
    await _history(store, registry)
    counting = Counting(store)
    app = create_app(
        ServiceSettings(registry, counting, auth=make_auth())  # type: ignore[arg-type]
    )
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://golem.test") as c:
        if url.startswith("/api"):
            res = await c.get(url, headers=bearer("olga"))
        else:
            await sign_in(c, "olga")
            counting.calls.clear()
            res = await c.get(url)
    assert res.status_code == 200
    assert "twin" in res.text
    assert counting.calls["get_run"] == 0, counting.calls


async def test_the_notifier_reads_only_the_runs_it_notifies(store: Store, registry: Any) -> None:
    # Found: the notifier read the run of every created or ended entry, for every agent,
    # before finding that no webhook wanted it or that it had moved on.
    await _history(store, registry)
    counting = Counting(store)
    sent: list[httpx.Request] = []
    transport = httpx.MockTransport(lambda r: sent.append(r) or httpx.Response(200))
    notifier = Notifier(
        counting,  # type: ignore[arg-type]
        [Webhook("https://hooks.example/echo", agents=frozenset({"echo"}))],
        public_url="http://golem.test",
        transport=transport,
    )
    await notifier.step(0)
    await notifier.drain()
    await notifier.close()
    ended = [d for d in notifier.deliveries if d.event == "run.ended"]
    assert len(ended) == 2 == len(sent)  # the two echo runs, which answered at once
    assert counting.calls["get_run"] == len(ended), counting.calls


async def test_a_keyed_start_reads_its_run_once(store: Store, registry: Any) -> None:
    # Found: a start with an Idempotency-Key read its run twice (the service's own lookup
    # for the replay flag, then start_run's), on the first start and on every repeat.
    counting = Counting(store)
    app = create_app(
        ServiceSettings(registry, counting, auth=make_auth())  # type: ignore[arg-type]
    )
    transport = httpx.ASGITransport(app=app)
    body = {"agent": "twin", "prompt": "ship it"}
    headers = {**bearer("alice"), "Idempotency-Key": "k-1"}
    async with httpx.AsyncClient(transport=transport, base_url="http://golem.test") as c:
        first = await c.post("/api/runs", json=body, headers=headers)
        assert first.status_code == 201
        assert "Idempotent-Replayed" not in first.headers
        assert counting.calls["get_run"] == 1, counting.calls
        counting.calls.clear()
        again = await c.post("/api/runs", json=body, headers=headers)
        assert again.status_code == 200
        assert again.headers["Idempotent-Replayed"] == "true"
        assert again.json()["run"]["id"] == first.json()["run"]["id"]
        assert counting.calls["get_run"] == 1, counting.calls
        assert counting.calls["save_pending"] == 0
        counting.calls.clear()
        other = await c.post("/api/runs", json={**body, "prompt": "other"}, headers=headers)
        assert other.status_code == 409
        assert other.json()["error"]["code"] == "idempotency_key_reused"
        assert counting.calls["get_run"] == 1, counting.calls
        counting.calls.clear()
        plain = await c.post("/api/runs", json=body, headers=bearer("alice"))
        assert plain.status_code == 201
        assert counting.calls["get_run"] == 0, counting.calls


async def test_a_run_that_cannot_be_read_is_a_named_answer_not_a_500(
    store: Store, registry: Any, tmp_path: Any
) -> None:
    """GET of a run whose stored row cannot be read raised `CorruptRecord` out of the handler
    (500). Now an approver who sees every agent gets 409 `run_unreadable` naming the fault
    (the operator's cue to repair it, ADR 0072); one limited to some agents gets the answer of
    a run they may not see, since the run's agent cannot be read either."""
    import contextlib
    import sqlite3

    run = await start_run(store, registry, "twin", "go", started_by="alice")
    with contextlib.closing(sqlite3.connect(tmp_path / "golem.db")) as db:
        db.execute("UPDATE golem_calls SET kind = 'weird' WHERE run_id = ?", (run.id,))
        db.commit()
    app = create_app(ServiceSettings(registry, store, auth=make_auth()))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://golem.test") as client:
        res = await client.get(f"/api/runs/{run.id}", headers=bearer("alice"))
        assert res.status_code == 409, res.text
        error = res.json()["error"]
        assert error["code"] == "run_unreadable"
        assert "weird" in error["message"]
        hidden = await client.get(f"/api/runs/{run.id}", headers=bearer("olga"))
        unknown = await client.get("/api/runs/no-such-run", headers=bearer("olga"))
        assert hidden.status_code == unknown.status_code == 404
        assert hidden.json()["error"]["code"] == unknown.json()["error"]["code"]
        decided = await client.post(
            f"/api/runs/{run.id}/calls/c1/decision",
            json={"decision": "approve"},
            headers=bearer("alice"),
        )
        assert decided.status_code == 409
        await sign_in(client, "alice")
        page = await client.get(f"/runs/{run.id}")
        assert page.status_code == 409
        assert "weird" in page.text
