"""Helpers the Go interop tests share: Go's view of a history, and Go's rewriting of args."""

from __future__ import annotations

import base64
from dataclasses import replace
from typing import Any

from golem import Approval, DeferredRequests, DeferredResults, Message
from tests.support.gojson import go_compact as go_compact  # re-exported
from tests.support.ledger import make_agent

Views = list[dict[str, Any]]


def golem_view(history: list[Message]) -> Views:
    """Go's view of `history` as golem holds it, but for the args (compared separately):
    the fields Go has (no seal, citations, server-tool blocks or part text)."""
    return [
        {
            "role": m.role,
            "content": m.content,
            "parts": [
                {
                    "kind": p.kind,
                    **({"url": p.url} if p.url else {}),
                    **({"data": base64.b64encode(p.data).decode()} if p.data else {}),
                    **({"mediaType": p.media_type} if p.media_type else {}),
                }
                for p in m.parts
            ],
            "toolCalls": [
                {"id": c.id, "name": c.name, "signature": c.signature} for c in m.tool_calls
            ],
            "toolCallId": m.tool_call_id,
            "toolName": m.tool_name,
            "failed": m.failed,
            "thinking": [
                {
                    k: v
                    for k, v in (
                        ("text", t.text),
                        ("signature", t.signature),
                        ("redacted", t.redacted),
                    )
                    if v
                }
                for t in m.thinking
            ],
            "runId": m.run_id,
            "conversationId": m.conversation_id,
        }
        for m in history
    ]


def without_args(view: Views) -> Views:
    """The view with the args of its tool calls left out."""
    return [
        {**m, "toolCalls": [{k: v for k, v in c.items() if k != "args"} for c in m["toolCalls"]]}
        for m in view
    ]


def with_args(history: list[Message], call_id: str, args: str) -> list[Message]:
    """`history` with the args of its paused call `call_id` replaced."""
    out = list(history)
    i = next(i for i, m in enumerate(out) if m.tool_calls)
    calls = [replace(c, args=args) if c.id == call_id else c for c in out[i].tool_calls]
    out[i] = replace(out[i], tool_calls=calls)
    return out


SPACED = '{"to": "<bob> & co", "amount": 10}'  # as a model wrote it
RESOLVE = DeferredResults(approvals={"c1": Approval(True)}, external={"c2": "1.1"})


async def paused_keyless() -> tuple[Any, Any, Any, list[Message], DeferredRequests]:
    """A keyless ledger run paused on SPACED args: agent, model, ledger, history, pending."""
    agent, model, ledger = make_agent(seal_key=None)
    paused = await agent.run("pay bob", conversation_id="conv-1")
    assert paused.pending is not None
    ledger.executions.clear()
    history = with_args(paused.messages, "c1", SPACED)
    pending = replace(
        paused.pending, approvals=[replace(p, args=SPACED) for p in paused.pending.approvals]
    )
    return agent, model, ledger, history, pending
