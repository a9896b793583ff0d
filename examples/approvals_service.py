"""Durable approvals over HTTP, offline: start a run, decide through the API, see it resume.

An agent on a scripted model wants to send an invoice (a tool that defers for approval)
and needs a VAT number (a tool that waits for an external result). The approval service
saves the paused run in SQLite; two approvers decide through the JSON API (Starlette's
TestClient, in-process); the service's in-process worker resumes the run exactly once.

Run it with `python examples/approvals_service.py` (needs the `[server]` extra).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from starlette.testclient import TestClient

from golem import Agent, Message, RunContext, ToolCall
from golem.durable.worker import AgentEntry
from golem.service import Approver, AuthConfig, ServiceSettings, create_app
from golem.testing import ScriptedModel
from golem.tool import DeferKind, Deferred, call_approved

SENT: list[str] = []  # the side effect: invoices actually sent (by call ID)


async def send_invoice(ctx: RunContext[None], customer: str, amount_eur: float) -> str:
    """Send an invoice to a customer. Needs a human's approval.

    Args:
        customer: Who to bill.
        amount_eur: How much, in euros.
    """
    if not call_approved():
        raise Deferred(DeferKind.APPROVAL, f"bills {customer} {amount_eur:.2f} EUR")
    SENT.append(ctx.call_id)  # a real tool would pass ctx.idempotency_key to the billing API
    return f"invoice sent to {customer} (idempotency key {ctx.idempotency_key[:16]})"


async def vat_number(customer: str) -> str:
    """Look up a customer's VAT number; accounting answers.

    Args:
        customer: Whose VAT number.
    """
    raise Deferred(DeferKind.EXTERNAL, "accounting looks it up in the ledger")


def build_registry() -> dict[str, AgentEntry]:
    model = ScriptedModel(
        Message(
            role="assistant",
            content="I'll bill ACME and fetch their VAT number.",
            tool_calls=[
                ToolCall("call_inv", "send_invoice", '{"customer": "ACME", "amount_eur": 1200}'),
                ToolCall("call_vat", "vat_number", '{"customer": "ACME"}'),
            ],
        ),
        "Done: ACME was invoiced 1200.00 EUR (VAT DE123456789).",
    )
    agent = Agent(model, tools=[send_invoice, vat_number], name="billing")
    return {"billing": AgentEntry(agent, description="sends invoices")}


def step(n: int, text: str) -> None:
    print(f"{n}. {text}")


def main() -> None:
    auth = AuthConfig(
        tokens={
            "tok-alice": Approver("alice@example.com"),
            "tok-bob": Approver("bob@example.com", tools=frozenset({"vat_number"})),
        }
    )
    alice = {"Authorization": "Bearer tok-alice"}
    bob = {"Authorization": "Bearer tok-bob"}
    with tempfile.TemporaryDirectory() as tmp:
        app = create_app(
            ServiceSettings(
                build_registry(),
                f"sqlite:///{Path(tmp) / 'approvals.db'}",
                auth=auth,
                run_worker=True,
                worker_poll_interval=0.02,
            )
        )
        with TestClient(app) as http:
            prompt = {"agent": "billing", "prompt": "Bill ACME 1200 EUR."}
            res = http.post("/api/runs", json=prompt, headers=alice)
            run: dict[str, Any] = res.json()["run"]
            step(1, f"POST /api/runs -> {res.status_code}: run is {run['status']}")
            for c in run["calls"]:
                print(f"   {c['call_id']}: {c['tool_name']}{c['args']} [{c['kind']}] {c['reason']}")

            calls = f"/api/runs/{run['id']}/calls"
            res = http.post(f"{calls}/call_inv/decision", json={"decision": "approve"})
            step(2, f"approve without a token -> {res.status_code} {res.json()['error']['code']}")
            res = http.post(f"{calls}/call_inv/decision", json={"decision": "approve"}, headers=bob)
            step(3, f"bob approves the invoice -> {res.status_code} {res.json()['error']['code']}")
            res = http.post(
                f"{calls}/call_vat/decision",
                json={"decision": "external", "result": "DE123456789"},
                headers=bob,
            )
            step(
                4,
                f"bob answers the VAT lookup -> {res.status_code}, run {res.json()['run']['status']}",
            )
            res = http.post(
                f"{calls}/call_inv/decision", json={"decision": "approve"}, headers=alice
            )
            status = res.json()["run"]["status"]
            if status in ("running", "completed"):  # the woken worker may have claimed it already
                status = "ready"
            step(5, f"alice approves the invoice -> {res.status_code}, run {status}")
            res = http.post(f"{calls}/call_inv/decision", json={"decision": "deny"}, headers=alice)
            step(6, f"alice changes her mind -> {res.status_code} {res.json()['error']['code']}")

            for _ in range(500):  # the in-process worker resumes the ready run
                shown = http.get(f"/api/runs/{run['id']}", headers=alice).json()["run"]
                if shown["status"] not in ("ready", "running"):
                    break
                time.sleep(0.02)
            step(7, f"GET /api/runs/{{id}} -> {shown['status']}: {shown['outcome']['output']}")
            print("   audit trail:")
            for entry in shown["audit"]:
                detail = entry["detail"].get("call_id", "")
                print(f"   - {entry['action']:<9} by {entry['actor']} {detail}".rstrip())
    step(8, f"invoices actually sent: {len(SENT)} ({', '.join(SENT)})")


if __name__ == "__main__":
    main()
