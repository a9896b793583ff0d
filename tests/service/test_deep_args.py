"""A pending call whose model-made arguments nest past `json`'s stack (a model can emit them;
the Go golem keeps up to 10,000 levels): the inbox shows it, the API lists it and decides it,
with edited arguments too — no 500 (ADR 0070)."""

from __future__ import annotations

import httpx

from golem import Message, ToolCall, dumps_history
from golem.durable.store import CallKind, NewCall, NewRun, Store
from tests.support.service import bearer, sign_in

DEEP_ARGS = '{"target":' + "[" * 3000 + "]" * 3000 + "}"


async def _deep_run(store: Store) -> str:
    history = dumps_history(
        [
            Message("user", "deploy"),
            Message("assistant", tool_calls=[ToolCall("c1", "deploy", DEEP_ARGS)]),
        ]
    )
    run = NewRun(
        id="deep-run",
        agent="twin",
        conversation_id="conv-deep",
        history=history,
        calls=(NewCall("c1", CallKind.APPROVAL, "deploy", args=DEEP_ARGS),),
        started_by="alice",
    )
    await store.save_pending(run)
    return run.id


async def test_a_call_with_deeply_nested_args_is_shown_listed_and_decided(
    client: httpx.AsyncClient, store: Store
) -> None:
    run_id = await _deep_run(store)
    headers = bearer("alice")
    assert (await client.get("/api/calls", headers=headers)).status_code == 200
    assert (await client.get(f"/api/runs/{run_id}", headers=headers)).status_code == 200
    await sign_in(client)
    page = await client.get(f"/runs/{run_id}")  # was a RecursionError: a 500
    assert page.status_code == 200
    edited = await client.post(
        f"/api/runs/{run_id}/calls/c1/decision",
        json={"decision": "approve", "args": {"target": "web-1"}},
        headers=headers,
    )  # was a RecursionError comparing with the original args: a 500
    assert edited.status_code in (200, 201, 422), edited.text[:300]
