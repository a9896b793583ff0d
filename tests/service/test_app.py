"""`create_app`: argument checks, a store opened from a URL, the in-process worker."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from golem.service import ServiceSettings, create_app
from tests.support.service import bearer, make_auth


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        *(
            ({name: value}, name)
            for name, value in [
                ("worker_poll_interval", 0),
                ("lease_seconds", -1),
                ("lease_seconds", float("inf")),
                ("worker_poll_interval", 1e12),
                ("stream_poll_interval", float("nan")),
                ("max_body_bytes", 0),
                ("stream_poll_interval", 0),
                ("stream_heartbeat", 0),
                ("default_expires_in", 0),
                ("worker_concurrency", 0),
                ("body_timeout", 0),
                ("max_streams_per_identity", 0),
                ("login_attempts_per_minute", 0),
                ("token_failures_per_minute", -5),
                ("undo_seconds", 61),
            ]
        ),
        ({"seal_key": b"short"}, "32"),
    ],
)
def test_bad_settings_are_rejected_when_built(
    registry: Any, kwargs: dict[str, Any], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        ServiceSettings(registry, "sqlite:///x.db", auth=make_auth(), **kwargs)


def test_settings_are_frozen_and_keep_their_webhooks(registry: Any) -> None:
    settings = ServiceSettings(registry, "sqlite:///x.db", auth=make_auth(), webhooks=[])
    assert settings.webhooks == ()
    with pytest.raises(AttributeError):
        settings.undo_seconds = 0  # type: ignore[misc]


def test_a_store_url_is_opened_for_the_app_lifetime(registry: Any, tmp_path: Path) -> None:
    app = create_app(ServiceSettings(registry, f"sqlite:///{tmp_path / 'g.db'}", auth=make_auth()))
    outside = TestClient(app)
    res = outside.get("/api/health")
    assert res.status_code == 503
    assert res.json() == {"status": "starting"}
    assert (
        outside.get("/api/runs", headers=bearer("alice")).json()["error"]["code"] == "unavailable"
    )
    with TestClient(app) as client:
        assert client.get("/api/health").json()["status"] == "ok"
        res = client.post(
            "/api/runs", json={"agent": "echo", "prompt": "hi"}, headers=bearer("alice")
        )
        assert res.status_code == 201
    assert app.state.golem.store is None  # closed on shutdown
    with TestClient(app) as client:  # the data outlives the app
        runs = client.get("/api/runs", headers=bearer("alice")).json()["runs"]
        assert [r["outcome"]["output"] for r in runs] == ["echo: hi"]


def test_default_expiry_applies_to_started_runs(registry: Any, tmp_path: Path) -> None:
    app = create_app(
        ServiceSettings(
            registry, f"sqlite:///{tmp_path / 'g.db'}", auth=make_auth(), default_expires_in=600
        )
    )
    with TestClient(app) as client:
        run = client.post(
            "/api/runs", json={"agent": "twin", "prompt": "go"}, headers=bearer("alice")
        ).json()["run"]
        assert run["expires_at"] is not None
        assert run["calls"][0]["deadline"] == run["expires_at"]


def test_the_in_process_worker_resumes_approved_runs(registry: Any, tmp_path: Path) -> None:
    app = create_app(
        ServiceSettings(
            registry,
            f"sqlite:///{tmp_path / 'g.db'}",
            auth=make_auth(),
            run_worker=True,
            worker_poll_interval=0.02,
            worker_id="inproc",
        )
    )
    with TestClient(app) as client:
        run = client.post(
            "/api/runs", json={"agent": "mixed", "prompt": "go"}, headers=bearer("alice")
        ).json()["run"]
        path = f"/api/runs/{run['id']}/calls"
        client.post(f"{path}/a1/decision", json={"decision": "approve"}, headers=bearer("alice"))
        client.post(
            f"{path}/x1/decision",
            json={"decision": "external", "result": "v42"},
            headers=bearer("alice"),
        )
        for _ in range(500):  # wait for the worker (bounded; no duration is asserted)
            shown = client.get(f"/api/runs/{run['id']}", headers=bearer("alice")).json()["run"]
            if shown["status"] == "completed":
                break
            time.sleep(0.02)
        assert shown["status"] == "completed"
        assert shown["outcome"]["output"] == "done: deployed to go | v42"
        assert shown["lease_owner"] == "inproc"
        assert [a["actor"] for a in shown["audit"]][-2:] == ["worker:inproc", "worker:inproc"]


def test_the_in_process_worker_resumes_worker_concurrency_runs_at_once(tmp_path: Path) -> None:
    """Three approved runs whose tool waits on a barrier of three: they can only finish
    when the in-process worker has all three resumes in flight (`worker_concurrency=3`)."""
    from golem import Agent, Message, ToolCall
    from golem.durable.worker import AgentEntry
    from golem.testing import FunctionModel
    from golem.tool import DeferKind, Deferred, call_approved

    barrier: asyncio.Barrier | None = None

    def model(request: Any) -> Message:
        if request.messages[-1].role == "user":
            return Message(role="assistant", tool_calls=[ToolCall("c1", "act", "{}")])
        return Message(role="assistant", content="done")

    agent: Agent[None, str] = Agent(FunctionModel(model))

    @agent.tool_plain
    async def act() -> str:
        """Act once approved, together with two other runs."""
        nonlocal barrier
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, "act?")
        barrier = barrier or asyncio.Barrier(3)
        await asyncio.wait_for(barrier.wait(), 60)  # a guard against a hang, not a duration
        return "acted"

    app = create_app(
        ServiceSettings(
            {"trio": AgentEntry(agent)},
            f"sqlite:///{tmp_path / 'g.db'}",
            auth=make_auth(),
            run_worker=True,
            worker_poll_interval=0.02,
            worker_concurrency=3,
        )
    )
    with TestClient(app) as client:
        ids = []
        for _ in range(3):
            run = client.post(
                "/api/runs", json={"agent": "trio", "prompt": "go"}, headers=bearer("alice")
            ).json()["run"]
            ids.append(run["id"])
        for run_id in ids:
            res = client.post(
                f"/api/runs/{run_id}/calls/c1/decision",
                json={"decision": "approve"},
                headers=bearer("alice"),
            )
            assert res.status_code == 200, res.text
        statuses: list[str] = []
        for _ in range(4000):  # wait for the worker (bounded; no duration is asserted)
            statuses = [
                client.get(f"/api/runs/{i}", headers=bearer("alice")).json()["run"]["status"]
                for i in ids
            ]
            if all(s in ("completed", "failed") for s in statuses):
                break
            time.sleep(0.02)
        assert statuses == ["completed"] * 3
