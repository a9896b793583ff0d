"""Shared setup of the browser tests: one headless Chromium for the session, which each
module drives through Playwright over the DevTools protocol (Playwright's sync API cannot
stay open while the async tests of other modules run their event loops)."""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
]


@pytest.fixture(scope="session")
def chromium() -> Iterator[str]:
    """Debian's chromium, started once per session; its DevTools websocket URL."""
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI"):
            pytest.fail(f"CI is set but {CHROMIUM} is missing (apt-get install chromium)")
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)")
    with tempfile.TemporaryDirectory() as profile:
        log = Path(profile) / "stderr.log"
        with open(log, "w") as err:
            proc = subprocess.Popen(
                [CHROMIUM, *ARGS, f"--user-data-dir={profile}/data", "about:blank"], stderr=err
            )
        try:
            deadline = time.monotonic() + 60
            while not (found := re.search(r"DevTools listening on (ws://\S+)", log.read_text())):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"chromium did not start: {log.read_text()[-500:]}")
                time.sleep(0.05)
            yield found.group(1)
        finally:
            proc.terminate()
            proc.wait(timeout=30)


@pytest.fixture(scope="module")
def browser(chromium: str) -> Iterator[Any]:
    """The session's Chromium, driven by Playwright for this module."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        yield p.chromium.connect_over_cdp(chromium)
