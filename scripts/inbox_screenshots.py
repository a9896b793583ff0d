"""Regenerate the inbox screenshots under docs/images/ (1440×900 and 390×844, light and dark).

    .venv/bin/python scripts/inbox_screenshots.py

Needs Debian's chromium (/usr/bin/chromium) and Playwright. Seeds a realistic queue (three
agents, runs with deadlines, long arguments, a bidi trick) into a temporary store, serves
the inbox with uvicorn and takes each screenshot with Playwright.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from tests.service._server import serve  # noqa: E402
from tests.service.agents import build_registry  # noqa: E402

from golem.service import Approver, AuthConfig, create_app  # noqa: E402
from golem.store import CallKind, NewCall, NewRun, open_store, utc_now  # noqa: E402

TOKEN = "screenshot-token"
OUT = ROOT / "docs" / "images"
SIZES = {"desktop": (1440, 900), "phone": (390, 844)}

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


def main() -> None:
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/shots.db"
        asyncio.run(seed(url))
        auth = AuthConfig(tokens={TOKEN: Approver("alice@example.com")})
        app = create_app(build_registry(), url, auth=auth)
        OUT.mkdir(parents=True, exist_ok=True)
        with serve(app) as base, sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
            for name, (w, h) in SIZES.items():
                for scheme in ("light", "dark"):
                    ctx = browser.new_context(
                        viewport={"width": w, "height": h}, color_scheme=scheme
                    )
                    page = ctx.new_page()
                    page.goto(base + "/login")
                    page.fill("#token", TOKEN)
                    page.click("#sign-in")
                    page.wait_for_load_state()
                    if not page.query_selector(".run-group"):
                        print(page.url, page.inner_text("main")[:500])
                        raise SystemExit(1)
                    path = OUT / f"inbox-{name}-{scheme}.png"
                    page.screenshot(path=str(path))
                    print(path.relative_to(ROOT))
                    ctx.close()
            browser.close()


if __name__ == "__main__":
    main()
