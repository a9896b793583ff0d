"""The demo agent behind `golem demo`: an on-call assistant on a scripted model, offline.

The model is a `golem.testing.FunctionModel` (a scripted answer computed from the
request, so any number of runs can share it, concurrently): for a prompt it checks the
service's health and asks to restart it in one batch; the restart tool defers for
approval; once resumed, it reports what the tools returned. A prompt that mentions a
ticket makes it call `open_ticket`, which waits for an external result (the ticket ID).

```python
from golem.cli.demo import registry          # {"ops": AgentEntry(...)}
# golem serve --app golem.cli.demo:registry
```
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from golem._ids import new_id
from golem.agent import Agent
from golem.durable.worker import AgentEntry, AgentRegistry
from golem.messages import Message, ToolCall
from golem.model import ModelRequest
from golem.testing import FunctionModel
from golem.tool import DeferKind, Deferred, RunContext, call_approved

__all__ = [
    "build_agent",
    "build_registry",
    "check_health",
    "open_ticket",
    "registry",
    "restart_service",
]

SERVICES = ("web", "api", "search", "billing", "worker")
"""Service names the demo model recognizes in a prompt (default "web")."""

DEMO_PROMPT = "The web frontend is throwing 502s. Please restart it."
"""The prompt `golem demo` starts its first run with."""


def _call_id() -> str:
    return "call_" + new_id().replace("-", "")[-16:]


def _service_in(text: str) -> str:
    words = re.findall(r"[a-z0-9_-]+", text.lower())
    return next((w for w in words if w in SERVICES), "web")


def _demo_model(request: ModelRequest) -> Message | str:
    """Answer like a careful on-call assistant would, from the conversation so far."""
    messages = request.messages
    last = messages[-1]
    if last.role == "user":
        service = _service_in(last.content)
        if "ticket" in last.content.lower():
            summary = f"{service}: {last.content.strip()[:120]}"
            return Message(
                role="assistant",
                content="I'll file a ticket for this.",
                tool_calls=[ToolCall(_call_id(), "open_ticket", json.dumps({"summary": summary}))],
            )
        return Message(
            role="assistant",
            content=f"Let me check {service} and restart it if it is unhealthy.",
            tool_calls=[
                ToolCall(_call_id(), "check_health", json.dumps({"service": service})),
                ToolCall(
                    _call_id(),
                    "restart_service",
                    json.dumps({"service": service, "reason": "failing health checks"}),
                ),
            ],
        )
    start = max(i for i, m in enumerate(messages) if m.role == "assistant")
    results = [m for m in messages[start + 1 :] if m.role == "tool"]
    lines = "\n".join(f"- {m.tool_name}: {m.content}" for m in results)
    return f"Here is what happened:\n{lines}"


async def check_health(service: str) -> str:
    """Report the health of a service's instances.

    Args:
        service: The service name, e.g. "web".
    """
    return f"{service}: 3 of 4 instances fail their health check (HTTP 502)"


async def restart_service(ctx: RunContext[None], service: str, reason: str) -> str:
    """Restart every instance of a service. Needs a human's approval.

    Args:
        service: The service to restart.
        reason: Why it should be restarted.
    """
    if not call_approved():
        raise Deferred(
            DeferKind.APPROVAL,
            f"restarting {service} drops its in-flight requests ({reason})",
        )
    # The same on every attempt at this call, and unique across conversations (a model's call
    # IDs are not): a real tool passes it to the orchestrator so a retried restart is a no-op.
    key = ctx.idempotency_key
    return f"restarted {service}: 4 of 4 instances healthy (idempotency key {key[:16]})"


async def open_ticket(summary: str) -> str:
    """File a ticket in the issue tracker; a human files it and pastes its ID.

    Args:
        summary: One line describing the problem.
    """
    raise Deferred(DeferKind.EXTERNAL, "file the ticket in the tracker and paste its ID here")


def build_agent() -> Agent[None, str]:
    """A new demo agent (its model keeps no state between runs)."""
    return Agent(
        FunctionModel(_demo_model),
        instructions="You are an on-call assistant. Restarts need a human's approval.",
        tools=[check_health, restart_service, open_ticket],
        name="ops",
    )


def build_registry() -> AgentRegistry:
    """The demo registry: one agent, "ops"."""
    return {
        "ops": AgentEntry(
            build_agent(),
            description="on-call assistant (scripted model): checks and restarts services",
        )
    }


registry: AgentRegistry = build_registry()
"""The demo registry, for `golem serve --app golem.cli.demo:registry`."""


# --------------------------------------------------------------------------- golem demo


@contextlib.contextmanager
def demo_db(db: str | None) -> Iterator[str]:
    """`db`, or a SQLite store in a temporary directory removed afterwards."""
    if db:
        yield db
        return
    with tempfile.TemporaryDirectory(prefix="golem-demo-") as tmp:
        yield f"sqlite:///{Path(tmp) / 'demo.db'}"


def free_port(host: str) -> int:
    """A port on `host` that is free now."""
    with socket.socket() as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


def serve(
    url: str, host: str, port: int, registry: AgentRegistry, run_id: str, console: Any
) -> None:
    """Serve the demo on `url`'s store with a one-process token, printing its sign-in link."""
    import uvicorn
    from rich.panel import Panel

    from golem.service import Approver, AuthConfig, ServiceSettings, create_app

    token = secrets.token_urlsafe(18)
    app = create_app(
        ServiceSettings(
            registry,
            url,
            auth=AuthConfig(tokens={token: Approver("demo")}),
            run_worker=True,
            worker_poll_interval=0.2,
            stream_poll_interval=0.3,
        )
    )
    link = f"http://{host}:{port}/login#token={token}"
    console.print(
        Panel(
            f"Open [bold]{link}[/]\n\n"
            f"Run {run_id} paused: the agent asks to restart a service.\n"
            "Approve it in the inbox and watch the final answer arrive on the run's page.\n"
            "Start more runs from the inbox (mention a ticket to see an external call).\n"
            "The token works for this process only. Ctrl-C stops.",
            title="golem demo",
            expand=False,
        ),
        soft_wrap=False,
    )
    uvicorn.run(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=2)


async def run_once(url: str, console: Any) -> int:
    """Start → pause → approve over HTTP → worker resumes → final answer; 0 when completed."""
    import httpx
    from rich.panel import Panel

    from golem.durable.store import open_store
    from golem.durable.worker import Worker
    from golem.service import Approver, AuthConfig, ServiceSettings, create_app

    registry = build_registry()
    token = secrets.token_urlsafe(18)
    store = await open_store(url)
    try:
        app = create_app(
            ServiceSettings(registry, store, auth=AuthConfig(tokens={token: Approver("demo")}))
        )
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url="http://golem.cli.demo",
            headers={"Authorization": f"Bearer {token}"},
        ) as http:
            console.print(f"1. POST /api/runs  agent=ops  prompt={DEMO_PROMPT!r}")
            res = await http.post("/api/runs", json={"agent": "ops", "prompt": DEMO_PROMPT})
            run = res.json()["run"]
            console.print(f"   {res.status_code}: run {run['id']} is {run['status']}")
            calls = (await http.get("/api/calls")).json()["calls"]
            for c in calls:
                console.print(
                    f"2. GET /api/calls  → {c['tool_name']}({c['args']}) waits for "
                    f"{c['kind']}: {c['reason']}",
                    markup=False,
                )
            for c in calls:
                path = f"/api/runs/{c['run_id']}/calls/{c['call_id']}/decision"
                res = await http.post(path, json={"decision": "approve"})
                body = res.json()
                console.print(
                    f"3. POST {path}  approve → {res.status_code}, decided by "
                    f"{body['decision']['decided_by']}; run is {body['run']['status']}",
                    markup=False,
                )
            resumed = await Worker(store, registry, worker_id="demo-worker").run_once()
            console.print(f"4. worker demo-worker resumed the run: {resumed}")
            final = (await http.get(f"/api/runs/{run['id']}")).json()["run"]
            console.print(f"5. GET /api/runs/{run['id']}  → {final['status']}")
            if final["outcome"] and final["outcome"]["output"] is not None:
                console.print(
                    Panel(str(final["outcome"]["output"]), title="final answer"),
                    markup=False,
                    soft_wrap=False,
                )
            console.print(
                "   audit: " + " → ".join(f"{a['action']} ({a['actor']})" for a in final["audit"]),
                markup=False,
            )
            return 0 if final["status"] == "completed" else 1
    finally:
        await store.close()
