"""Regenerate the inbox screenshots under docs/images/ (1440×900 and 390×844, light and dark).

    .venv/bin/python scripts/inbox_screenshots.py

Needs Debian's chromium (/usr/bin/chromium) and Playwright. Seeds a realistic queue (three
agents, runs with deadlines, long arguments, a bidi trick) into a temporary store, serves
the inbox with uvicorn and takes each screenshot with Playwright.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from tests.support.agents import build_registry  # noqa: E402
from tests.support.inbox_queue import seed  # noqa: E402
from tests.support.service import serve  # noqa: E402

from golem.service import Approver, AuthConfig, ServiceSettings, create_app  # noqa: E402

TOKEN = "screenshot-token"
OUT = ROOT / "docs" / "images"
SIZES = {"desktop": (1440, 900), "phone": (390, 844)}


def main() -> None:
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/shots.db"
        asyncio.run(seed(url))
        auth = AuthConfig(tokens={TOKEN: Approver("alice@example.com")})
        app = create_app(ServiceSettings(build_registry(), url, auth=auth))
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
