"""The demo agent's restart tool shows the practice the guides teach: its idempotency key is
`ctx.idempotency_key` (stable across attempts, unique across conversations), not the call ID."""

from __future__ import annotations

from golem import Approval, DeferredResults
from golem.cli.demo import DEMO_PROMPT, build_agent
from golem.tool import idempotency_key


def test_the_restart_reports_the_calls_idempotency_key() -> None:
    agent = build_agent()
    paused = agent.run_sync(DEMO_PROMPT)
    assert paused.pending is not None
    (call,) = paused.pending.approvals
    done = agent.run_with_deferred_results_sync(
        paused.messages, DeferredResults(approvals={call.call_id: Approval(True)})
    )
    key = idempotency_key(done.conversation_id, call.call_id)
    restart = next(m for m in done.messages if m.role == "tool" and m.tool_call_id == call.call_id)
    assert restart.content.startswith("restarted web: 4 of 4 instances healthy")
    assert f"(idempotency key {key[:16]})" in restart.content
    assert call.call_id not in restart.content
