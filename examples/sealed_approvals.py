"""Sealed approvals, offline: an approval binds exactly the call the approver saw.

The agent has a seal key. Its run pauses on a transfer; the paused history travels as
JSON through a client that cannot be trusted. A tampered copy (the amount raised, the
recipient swapped) is rejected before anything runs; `sanitize_history` with the key
keeps the genuine pending call open; the approver lowers the amount (edit on approval)
and the transfer runs with the edited arguments, which the model is told about.
Run it with `python examples/sealed_approvals.py`.
"""

from __future__ import annotations

import asyncio
import json
import secrets

from golem import (
    Agent,
    Approval,
    DeferredResults,
    PausedRun,
    SealError,
    dumps_history,
    loads_history,
    sanitize_history,
)
from golem.messages import Message, ToolCall
from golem.testing import ScriptedModel
from golem.tool import DeferKind, Deferred, call_approved

SEAL_KEY = secrets.token_bytes(32)  # in production: from your secret store, the same everywhere
SENT: list[tuple[str, int]] = []


def build_agent(model: ScriptedModel) -> Agent[None, str]:
    agent: Agent[None, str] = Agent(model, seal_key=SEAL_KEY)

    @agent.tool_plain
    def transfer(to: str, amount: int) -> str:
        """Send money.

        Args:
            to: The recipient.
            amount: Euros to send.
        """
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, f"send {amount} EUR to {to}?")
        SENT.append((to, amount))
        return f"sent {amount} EUR to {to}"

    return agent


async def main() -> None:
    model = ScriptedModel(
        Message(
            role="assistant",
            tool_calls=[ToolCall("call-1", "transfer", '{"to":"bob","amount":500}')],
        ),
        "Done: Bob got his money.",
    )
    agent = build_agent(model)
    paused = await agent.run("Pay Bob for the bike.")
    assert paused.pending is not None
    pending = paused.pending.approvals[0]
    print("== paused")
    print(f"pending   {pending.call_id} {pending.tool_name} {pending.args}")
    print(f"seal      {pending.seal[:16]}…  (kind {pending.kind.value})")

    stored = dumps_history(paused.messages)  # what the client holds
    # what your server keeps, the client cannot change: the conversation and the pending calls
    conversation, pending_calls = paused.conversation_id, paused.pending

    print("\n== a tampered copy comes back")
    tampered = json.loads(stored)
    for message in tampered:
        for call in message.get("toolCalls", []):
            call["args"] = {"to": "mallory", "amount": 50000}
    try:
        await agent.run_with_deferred_results(
            PausedRun(loads_history(json.dumps(tampered)), pending_calls, conversation),
            DeferredResults(approvals={"call-1": True}),
        )
    except SealError as err:
        print(f"rejected  {err.problem}: nothing ran (sent so far: {SENT})")

    print("\n== the genuine copy, sanitized with the key")
    history, report = sanitize_history(loads_history(stored), seal_key=SEAL_KEY)
    print(f"kept open {report.kept_open}, rejected {[r.call_id for r in report.rejected]}")

    print("\n== approved with an edit: 200 instead of 500")
    done = await agent.run_with_deferred_results(
        PausedRun(history, pending_calls, conversation),  # with a seal key: required
        DeferredResults(approvals={"call-1": Approval(True, args={"to": "bob", "amount": 200})}),
    )
    result = next(m for m in done.messages if m.role == "tool")
    print(f"sent      {SENT}")
    print(f"the model reads:\n  {result.content.replace(chr(10), chr(10) + '  ')}")
    print(f"answer    {done.output}")


if __name__ == "__main__":
    asyncio.run(main())
