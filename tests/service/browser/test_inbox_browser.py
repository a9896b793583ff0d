"""The inbox in a real browser: Debian's chromium driven by Playwright against uvicorn.

Skipped only when /usr/bin/chromium is missing and `CI` is unset (CI installs it).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

from golem.cli.demo import build_registry
from golem.service import Approver, AuthConfig, ServiceSettings, create_app
from tests.support.browser import WAIT_MS, signed_in
from tests.support.service import serve

pytestmark = pytest.mark.browser

TOKEN = "browser-test-token"
TOAST_LOG = """() => {
    window.__toasts = [];
    const text = document.querySelector("#toast-text");
    new MutationObserver(() => window.__toasts.push(text.textContent))
        .observe(text, {childList: true, characterData: true, subtree: true});
}"""
"""Record, in `window.__toasts`, every text the toast shows from now on (however briefly)."""


@pytest.fixture
def base(tmp_path: Path) -> Iterator[str]:
    app = create_app(
        ServiceSettings(
            build_registry(),
            f"sqlite:///{tmp_path / 'inbox.db'}",
            auth=AuthConfig(tokens={TOKEN: Approver("alice@example.com")}),
            run_worker=True,
            worker_poll_interval=0.05,
            stream_poll_interval=0.05,
            undo_seconds=1,
        )
    )
    with serve(app) as url:
        yield url


@pytest.fixture
def open_page(browser: Any, base: str) -> Iterator[Any]:
    """Open a signed-in inbox page of the given size; closed before the server stops."""
    contexts: list[Any] = []

    def open_(width: int, height: int) -> Any:
        context = browser.new_context(viewport={"width": width, "height": height})
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(WAIT_MS)
        problems: list[str] = []
        page.on("pageerror", lambda exc: problems.append(str(exc)))
        page.on("dialog", lambda dialog: problems.append(f"dialog: {dialog.message}"))
        page.problems = problems
        page.goto(f"{base}/login#token={TOKEN}")  # the link names the identity first
        # a locator wait, not wait_for_function: the inbox's CSP forbids the eval that
        # Playwright's string predicates may need
        expect(page.locator("#link-who")).to_contain_text("alice@example.com", timeout=WAIT_MS)
        assert page.url == f"{base}/login"  # not signed in by the link alone
        page.click("#sign-in")
        page.wait_for_url(f"{base}/")
        return page

    yield open_
    for context in contexts:
        context.close()


def test_pause_approve_in_the_inbox_and_see_the_final_answer(
    open_page: Any, base: str, tmp_path: Path
) -> None:
    page = open_page(1280, 900)
    assert "alice@example.com" in page.inner_text("header")
    assert "Nothing is waiting" in page.inner_text("#pending")

    # 1. A run started elsewhere pauses; its call appears in the open inbox (SSE).
    prompt = 'The web frontend is throwing 502s <img src=x onerror="window.__xss=1">'
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        run = http.post("/api/runs", json={"agent": "ops", "prompt": prompt}).json()["run"]
    assert run["status"] == "pending"
    card = page.wait_for_selector("[data-call]")
    assert "restart_service" in card.inner_text()
    assert "service\nweb" in card.inner_text()  # field by field, with labels
    assert "restarting web drops its in-flight requests" in card.inner_text()
    assert page.text_content("#pending-count") == "1"
    page.screenshot(path=str(tmp_path / "inbox.png"), full_page=True)

    # 2. Keyboard only: j focuses the call, a moves to Approve, Enter approves.
    page.keyboard.press("j")
    assert page.evaluate("document.activeElement.hasAttribute('data-call')")
    page.keyboard.press("a")
    assert page.evaluate("document.activeElement.textContent.trim()") == "Approve"
    # The undo window is 1 s: by the time this process reads the toast again (a loaded
    # machine can stall it longer than that) the decision may already be sent and the
    # toast say "Approved …". So the page records every text the toast shows.
    page.evaluate(TOAST_LOG)
    page.keyboard.press("Enter")  # held for the undo window, then sent in the background
    page.locator(
        "#toast-text", has_text=re.compile(r"^Approved restart_service \(.+\)\.$")
    ).wait_for(state="attached")  # the toast hides itself after 5 s; its text stays
    shown = page.evaluate("window.__toasts")  # first held (with Undo), then sent
    assert re.fullmatch(r"Approved restart_service \(.+\) — sending in 1 s", shown[0]), shown
    page.wait_for_selector("#empty")
    assert "Nothing is waiting" in page.inner_text("#pending")

    # 3. The run's page shows the final answer once the worker resumed it.
    page.goto(f"{base}/runs/{run['id']}")
    answer = page.wait_for_selector("#final-answer")
    assert "restarted web: 4 of 4 instances healthy" in answer.inner_text()
    assert page.text_content("#run-status") == "completed"
    conversation = page.inner_text("#messages")
    assert '<img src=x onerror="window.__xss=1">' in conversation  # shown as text
    assert page.evaluate("window.__xss") is None
    audit = page.inner_text("#audit")
    for action in ("created", "decided", "ready", "claimed", "completed"):
        assert action in audit
    page.screenshot(path=str(tmp_path / "run.png"), full_page=True)
    assert page.problems == []


def test_the_run_page_updates_live_on_a_phone(open_page: Any, base: str, tmp_path: Path) -> None:
    page = open_page(390, 844)
    assert page.is_visible("#s-prompt")  # an empty inbox opens the start form
    page.fill("#s-prompt", "open a ticket: search is slow")
    page.click("form[action='/runs'] button[type=submit]")
    page.wait_for_url(re.compile(r"/runs/[\w-]+$"))
    assert page.text_content("#run-status") == "pending"
    assert "open_ticket" in page.inner_text("#calls")
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    page.screenshot(path=str(tmp_path / "phone-run.png"), full_page=True)

    # The external result is submitted from another client; the open page follows.
    run_id = page.url.rsplit("/", 1)[1]
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        call = http.get(f"/api/runs/{run_id}").json()["run"]["calls"][0]
        res = http.post(
            f"/api/runs/{run_id}/calls/{call['call_id']}/decision",
            json={"decision": "external", "result": "SEARCH-1234"},
        )
        assert res.status_code == 200
    answer = page.wait_for_selector("#final-answer")
    assert "open_ticket: SEARCH-1234" in answer.inner_text()
    expect(page.locator("#run-status")).to_have_text("completed", timeout=WAIT_MS)
    assert "Answered" in page.inner_text("#calls")
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    page.screenshot(path=str(tmp_path / "phone-done.png"), full_page=True)
    assert page.problems == []


def test_the_live_stream_comes_back_after_the_store_was_away(browser: Any, tmp_path: Path) -> None:
    # Found (ADR 0061): a stream reconnecting while the store is away now gets 503, and
    # EventSource gives up for good after a non-200: the inbox retries it with backoff.
    from golem.durable.store import Store
    from golem.errors import StoreError
    from tests.support.service import fail_every_call

    app = create_app(
        ServiceSettings(
            build_registry(),
            f"sqlite:///{tmp_path / 'away.db'}",
            auth=AuthConfig(tokens={TOKEN: Approver("alice@example.com")}),
            stream_poll_interval=0.05,
            stream_heartbeat=0.2,
        )
    )
    with serve(app) as base:
        page = signed_in(browser, base, TOKEN)
        try:
            page.wait_for_selector("#live-dot[data-state=open]")
            store = app.state.golem.store
            fail_every_call(store, StoreError("postgresql: the database system is starting up"))
            page.wait_for_selector("#live-dot[data-state=error]")  # refused: 503
            for name in [n for n in vars(store) if n in dir(Store)]:
                delattr(store, name)  # the class's methods again: the store is back
            page.wait_for_selector("#live-dot[data-state=open]")  # retried and back
        finally:
            page.context.close()
