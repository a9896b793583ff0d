"""Hostile text on every inbox page, in a real browser (ADR 0069's third attack round).

A run is saved straight through the store, as a worker or script might, with markup,
script, bidi overrides, zero-width characters and 20,000-character strings in every field
the service shows: run and call IDs, tool names, arguments, reasons, the prompt, the
model's answer, identities, decisions and the webhook delivery log. Every page, light and
dark, desktop and phone, must run no script of the data's, raise no error, trip no CSP
report (nothing injected even tried to run) and scroll sideways no wider than the screen.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from golem.durable.store import CallKind, Decision, NewCall, NewRun
from golem.durable.store.sqlite import SQLiteStore
from golem.messages import Message, ToolCall, dumps_history
from golem.service import Approver, AuthConfig, ServiceSettings, create_app
from golem.service.notify import Webhook
from tests.support.agents import build_registry
from tests.support.browser import WAIT_MS, run_async, signed_in
from tests.support.service import serve

pytestmark = pytest.mark.browser

XSS = '"><script>window.__xss=1</script><img src=x onerror="window.__xss=2">'
BIDI = "deploy \u202eexe.\u200bgpj\u2066"
HUGE = "A" * 20_000
TOKEN = "hostile-browser-token"
IDENTITY = f"<b>eve</b>{XSS}@example.com"
"""An identity may hold markup (only hidden characters are refused)."""

RUN_ID = f"run {XSS[:40]} \u202e/ü"
"""A run ID with markup, a bidi override, a slash and a non-ASCII letter."""

SCREENS = {"desktop": (1280, 900), "phone": (390, 844)}


def _history(prompt: str, calls: list[ToolCall]) -> str:
    return dumps_history(
        [
            Message(role="user", content=prompt),
            Message(role="assistant", content=f"Sure {XSS} {BIDI} {HUGE}", tool_calls=calls),
        ]
    )


async def _seed(db: Path) -> None:
    calls = [
        NewCall(
            f"c1{XSS}",
            CallKind.APPROVAL,
            "deploy",
            json.dumps({"target": XSS, "note": BIDI, "blob": HUGE, "nested": {XSS: [HUGE]}}),
            reason=f"{XSS} {BIDI} {HUGE}",
        ),
        NewCall(
            "c2\u200b",
            CallKind.EXTERNAL,
            f"tool{XSS}{HUGE[:300]}",
            json.dumps({"key": BIDI}),
            reason=BIDI,
        ),
        NewCall("c3", CallKind.APPROVAL, "deploy", json.dumps({"target": "x"}), reason="r"),
    ]
    tool_calls = [ToolCall(c.call_id, c.tool_name, c.args) for c in calls]
    store = await SQLiteStore.open(db)
    try:
        for run_id, agent in ((RUN_ID, "twin"), (f"{RUN_ID}-2", "mixed")):
            await store.save_pending(
                NewRun(
                    id=run_id,
                    agent=agent,
                    conversation_id=f"conv{XSS}",
                    history=_history(f"Please {XSS} {BIDI} {HUGE}", tool_calls),
                    calls=tuple(calls),
                    started_by=IDENTITY,
                    deps_ref={XSS: HUGE},
                )
            )
        await store.decide(
            f"{RUN_ID}-2",
            "c3",
            Decision.deny(f"no {XSS} {BIDI} {HUGE}"),
            decided_by=IDENTITY,
        )
    finally:
        await store.close()


@pytest.fixture
def base(tmp_path: Path) -> Iterator[str]:
    db = tmp_path / "hostile.db"
    run_async(_seed(db))
    app = create_app(
        ServiceSettings(
            build_registry(),
            f"sqlite:///{db}",
            auth=AuthConfig(tokens={TOKEN: Approver(IDENTITY)}),
            # a webhook no one answers: the delivery log shows the runs' IDs and errors
            webhooks=[Webhook("http://127.0.0.1:9/hook")],
            stream_poll_interval=0.05,
        )
    )
    with serve(app) as url:
        yield url


_RAW_HIDDEN = r"""() => {
  const hidden = /[\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]/;
  const found = [];
  const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walk.nextNode(); n; n = walk.nextNode()) {
    if (n.parentElement.closest("textarea, script, style")) continue;
    if (hidden.test(n.textContent)) found.push(n.parentElement.tagName + ": " + n.textContent.slice(0, 60));
  }
  if (hidden.test(document.title)) found.push("title: " + document.title);
  document.querySelectorAll("[data-label]").forEach((e) => {
    if (hidden.test(e.dataset.label)) found.push("data-label: " + e.dataset.label.slice(0, 60));
  });
  return found;
}"""
"""Text a person reads (text nodes, the title, the toasts' labels) that holds a bidi
control or zero-width character as itself rather than as the inbox's marker."""


def _console(message: Any, problems: list[str]) -> None:
    """Note a CSP report (something tried to run) or a script error; the 404 page's own
    "failed to load" line is expected."""
    text = message.text
    if "Content Security Policy" in text or (
        message.type == "error" and "404" not in text and "favicon" not in text
    ):
        problems.append(f"console: {text}")


def _pages(base: str) -> dict[str, str]:
    run = quote(RUN_ID, safe="")
    return {
        "inbox": f"{base}/",
        "runs": f"{base}/runs",
        "run": f"{base}/runs/{run}",
        "run-decided": f"{base}/runs/{run}-2",
        "audit": f"{base}/audit?actor={quote(XSS)}",
        "audit-all": f"{base}/audit",
        "notifications": f"{base}/notifications",
        "missing": f"{base}/runs/{quote(XSS, safe='')}",
    }


def test_hostile_text_runs_no_script_and_breaks_no_layout(
    browser: Any, base: str, tmp_path: Path
) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=base, headers=auth) as http:
        # a run started now is notified (to a webhook no one answers): the delivery log
        # then shows a run, its agent and the errors
        res = http.post("/api/runs", json={"agent": "mixed", "prompt": f"{XSS} {BIDI}"})
        assert res.status_code == 201, res.text
        deadline = time.monotonic() + WAIT_MS / 1000
        while not http.get("/api/notifications").json()["deliveries"]:
            assert time.monotonic() < deadline, "no delivery was logged"
            time.sleep(0.05)
    shots = tmp_path / "shots"
    shots.mkdir()
    for scheme in ("light", "dark"):
        for screen, (width, height) in SCREENS.items():
            viewport = {"width": width, "height": height}
            page = signed_in(browser, base, TOKEN, viewport=viewport, color_scheme=scheme)
            try:
                problems: list[str] = []
                page.on("pageerror", lambda exc, p=problems: p.append(f"error: {exc}"))
                page.on("dialog", lambda d, p=problems: p.append(f"dialog: {d.message}"))
                page.on("console", lambda m, p=problems: _console(m, p))
                for name, url in _pages(base).items():
                    page.goto(url)
                    assert page.evaluate("window.__xss") is None, (name, scheme, screen)
                    assert page.locator("script:not([src])").count() == 0, name
                    assert page.locator("img[src='x']").count() == 0, name
                    wide = page.evaluate(
                        "Math.max(document.documentElement.scrollWidth, document.body.scrollWidth)"
                    )
                    raw = page.evaluate(_RAW_HIDDEN)
                    if raw:
                        problems.append(f"{name}: hidden characters shown raw: {raw}")
                    page.screenshot(path=str(shots / f"{name}-{scheme}-{screen}.png"))
                    if wide > width:
                        problems.append(f"{name}: {wide} px wide on a {width} px screen")
                assert problems == [], (scheme, screen, problems)
            finally:
                page.context.close()


def test_the_csp_blocks_script_injected_into_a_page(browser: Any, base: str) -> None:
    # held: were markup ever to reach a page unescaped, the service's own headers stop it.
    # The page is fetched from the server and handed to the browser with an inline
    # script, an inline handler and a javascript: URL added, its headers unchanged.
    injected = (
        "<script>window.__xss = 1</script>"
        '<img src="/static/favicon.svg" onload="window.__xss = 2">'
        '<a id="js" href="javascript:window.__xss = 3">x</a>'
    )
    context = browser.new_context()
    try:
        page = context.new_page()
        page.set_default_timeout(WAIT_MS)
        reports: list[str] = []
        page.on(
            "console",
            lambda m: reports.append(m.text) if "Content Security Policy" in m.text else None,
        )

        def inject(route: Any) -> None:
            res = route.fetch()
            body = res.text().replace("</main>", injected + "</main>")
            route.fulfill(response=res, body=body)

        page.route(f"{base}/login", inject)
        page.goto(f"{base}/login")
        assert page.locator("#js").count() == 1  # the markup is there
        page.click("#js")
        assert page.evaluate("window.__xss") is None
        assert reports, "the CSP refused nothing"
    finally:
        context.close()
