"""What the browser tests share: the wait, async work off Playwright's thread, signing in."""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any

WAIT_MS = 15_000  # a guard against a hung page, not a duration the test asserts


def run_async(coro: Any) -> Any:
    """Run a coroutine to completion in its own thread (Playwright owns this thread's loop)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def signed_in(browser: Any, base: str, token: str, **context: Any) -> Any:
    """A page of a new browser context (`context`: its options), signed in to the inbox at
    `base` with `token`; close it with `page.context.close()`."""
    page = browser.new_context(**context).new_page()
    page.set_default_timeout(WAIT_MS)
    page.goto(base + "/login")
    page.fill("#token", token)
    page.click("#sign-in")
    page.wait_for_url(base + "/")
    return page
