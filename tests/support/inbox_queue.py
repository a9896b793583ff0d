"""A realistic queue for browser tests and screenshots: three agents, deadlines, long arguments."""

from __future__ import annotations

import json
from datetime import timedelta

from golem.durable.store import CallKind, NewCall, NewRun, open_store, utc_now

__all__ = ["QUEUE", "seed"]

MANIFEST = "\n".join(
    ["apiVersion: apps/v1", "kind: Deployment", "metadata:", "  name: billing"]
    + [f"  # replica setting {i}" for i in range(30)]
)
QUEUE = [
    (
        "ops",
        "Roll out billing v2.3 to production",
        "I'll deploy the manifest, then restart the workers.",
        [
            ("deploy", {"target": "production", "manifest": MANIFEST}),
            ("deploy", {"target": "canary"}),
        ],
        900,
    ),
    (
        "mail",
        "Tell the customer their refund is on its way",
        "Here is the draft e-mail.",
        [
            (
                "send_email",
                {
                    "to": "dana@example.com",
                    "subject": "Your refund",
                    "body": "Hi Dana,\n\nYour refund of €42.00 was issued today.\n\nBest,\nSupport",
                },
            )
        ],
        None,
    ),
    (
        "ops",
        "Clean up old home directories",
        "Removing the stale directory.",
        [("shell", {"command": "rm -rf /home/\u202egpj.exe"})],
        None,
    ),
]


async def seed(url: str) -> None:
    """Save the queue's runs as pending runs into the store at `url`."""
    store = await open_store(url)
    try:
        for i, (agent, prompt, said, calls, expires) in enumerate(QUEUE):
            deadline = None if expires is None else utc_now() + timedelta(seconds=expires)
            history = json.dumps(
                [{"role": "user", "content": prompt}, {"role": "assistant", "content": said}]
            )
            await store.save_pending(
                NewRun(
                    id=f"run-{i}",
                    agent=agent,
                    conversation_id=f"conv-{i}",
                    history=history,
                    calls=tuple(
                        NewCall(
                            f"call-{i}-{j}",
                            CallKind.APPROVAL,
                            tool,
                            json.dumps(args),
                            deadline=deadline,
                        )
                        for j, (tool, args) in enumerate(calls)
                    ),
                    started_by="olga@example.com",
                )
            )
    finally:
        await store.close()
