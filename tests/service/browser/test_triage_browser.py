"""Triage in a real browser: order and grouping, approve-all, undo, keyboard, live arrival,
session expiry keeping typed text, the 409 page, attacks — and axe-core on every page type.

axe-core comes from npm into a test-only folder: `npm install --prefix .axe axe-core@4`
(or set `GOLEM_AXE_JS` to its `axe.min.js`). Skipped without it unless `CI` is set.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

from golem.durable.store import Decision, open_store
from golem.service import Approver, AuthConfig, ServiceSettings, create_app
from tests.support.agents import build_registry
from tests.support.browser import WAIT_MS, run_async, signed_in
from tests.support.inbox_queue import QUEUE, seed
from tests.support.service import serve

pytestmark = pytest.mark.browser

TOKEN = "triage-browser-token"
OTHER = "triage-other-token"
ROOT = Path(__file__).resolve().parents[3]
AXE = Path(os.environ.get("GOLEM_AXE_JS", ROOT / ".axe/node_modules/axe-core/axe.min.js"))


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, str]]:
    url = f"sqlite:///{tmp_path / 'triage.db'}"
    run_async(seed(url))
    auth = AuthConfig(
        tokens={TOKEN: Approver("alice@example.com"), OTHER: Approver("bob@example.com")}
    )
    app = create_app(
        ServiceSettings(build_registry(), url, auth=auth, stream_poll_interval=0.05, undo_seconds=2)
    )
    with serve(app) as base:
        yield base, url


def _page(browser: Any, base: str, *, width: int = 1280, height: int = 900) -> Any:
    return signed_in(browser, base, TOKEN, viewport={"width": width, "height": height})


def _titles(page: Any) -> list[str]:
    return [t.strip() for t in page.locator(".group-title").all_inner_texts()]


def test_triage_order_grouping_and_tab_title(browser: Any, served: tuple[str, str]) -> None:
    base, _ = served
    page = _page(browser, base)
    assert _titles(page) == [q[1] for q in QUEUE if q[4] is not None] + [
        q[1] for q in QUEUE if q[4] is None
    ]
    assert page.locator("#soon-h").inner_text().lower() == "expiring soon"
    assert page.title().startswith("(4) Inbox")
    assert "⟨U+202E RLO⟩" in page.inner_text("#pending")  # the bidi trick is visible
    more = page.locator(".long summary").first
    assert "Show all 34 lines" in more.inner_text()
    more.click()
    assert page.locator(".long[open] > pre.val").first.is_visible()
    assert "replica setting 29" in page.locator(".long[open]").first.inner_text()
    page.context.close()


def test_approve_all_and_undo(browser: Any, served: tuple[str, str]) -> None:
    base, url = served
    page = _page(browser, base)
    # The undo window is 2 s of the page's clock. Paused here, so the Undo below lands in it
    # however long a loaded machine stalls this process; run_for() then lets it pass.
    now = datetime.now(UTC)
    page.clock.install(time=now - timedelta(minutes=1))
    page.clock.pause_at(now)
    group = page.locator(".run-group").first
    group.get_by_role("button", name=re.compile("Approve all 2")).click()
    assert group.is_hidden()
    page.locator("#toast-undo").click()  # within the undo window
    assert page.locator(".run-group").first.is_visible()
    assert "Undone" in page.inner_text("#toast-text")
    page.locator(".run-group").first.get_by_role("button", name=re.compile("Approve all 2")).click()
    page.clock.run_for(2000)  # the undo window passes: the decisions are sent
    page.locator("#toast-text", has_text=re.compile(r"^Decided all 2 calls.*\.$")).wait_for()

    async def decided() -> list[str]:
        store = await open_store(url)
        try:
            run = await store.get_run("run-0")
            return [c.decision.kind.value for c in run.calls if c.decision]
        finally:
            await store.close()

    assert run_async(decided()) == ["approve", "approve"]
    page.context.close()


def test_keyboard_acts_on_the_focused_card_only_and_help_is_a_dialog(
    browser: Any, served: tuple[str, str]
) -> None:
    base, _ = served
    page = _page(browser, base)
    page.keyboard.press("Escape")
    page.keyboard.press("d")  # no card focused: nothing happens
    assert page.evaluate("document.activeElement.tagName") == "BODY"
    page.keyboard.press("?")
    assert page.locator("#help").is_visible()
    assert page.evaluate("document.querySelector('#help').open")
    page.keyboard.press("Escape")
    assert not page.locator("#help").is_visible()
    page.keyboard.press("j")
    page.keyboard.press("j")
    second = page.evaluate("document.activeElement.id")
    page.keyboard.press("d")
    assert page.evaluate("document.activeElement.closest('[data-call]').id") == second
    page.keyboard.type("not today")
    page.keyboard.press("Enter")  # denies the focused card; focus moves to the next one
    focused = page.evaluate("document.activeElement.closest('[data-call]')?.id")
    assert focused not in (None, second)
    outline = page.evaluate(
        "getComputedStyle(document.activeElement).outlineStyle + ' '"
        " + getComputedStyle(document.activeElement).outlineWidth"
    )
    assert outline == "solid 3px"
    page.context.close()


def test_new_work_arrives_at_the_top_with_a_highlight(
    browser: Any, served: tuple[str, str]
) -> None:
    base, _ = served
    page = _page(browser, base)
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        http.post("/api/runs", json={"agent": "twin", "prompt": "Brand new request"})
    page.locator(".run-group.is-new").wait_for()
    waiting = page.locator("#waiting-list .group-title").all_inner_texts()
    assert waiting[0] == "Brand new request"
    expect(page).to_have_title(re.compile(r"^\(6\)"), timeout=WAIT_MS)
    page.context.close()


def test_an_expired_session_keeps_the_typed_reason(browser: Any, served: tuple[str, str]) -> None:
    base, _ = served
    page = _page(browser, base)
    card = page.locator("[data-call]").nth(2)
    card_id = card.get_attribute("id")
    card.locator("[data-deny]").fill("needs a change ticket first")
    page.context.clear_cookies()  # the session ends while the reason is typed
    card.locator("[data-deny]").press("Enter")
    page.wait_for_url(re.compile(r"/login\?next="))
    page.fill("#token", TOKEN)
    page.click("#sign-in")
    page.wait_for_url(re.compile(r"/#call-"))
    assert page.evaluate("location.hash") == f"#{card_id}"
    assert page.locator(f"#{card_id} [data-deny]").input_value() == "needs a change ticket first"
    page.context.close()


def test_a_conflict_page_links_the_run_and_names_who_decided(
    browser: Any, served: tuple[str, str]
) -> None:
    base, url = served
    page = _page(browser, base)
    action = "/runs/run-2/calls/call-2-0/decision"
    csrf = page.locator(f"form[action='{action}'] input[name=csrf]").first.input_value()

    async def bob_denies() -> None:
        store = await open_store(url)
        try:
            await store.decide("run-2", "call-2-0", Decision.deny("no"), decided_by="bob")
        finally:
            await store.close()

    run_async(bob_denies())
    page.locator("#pending [data-call]").nth(3).wait_for(state="detached")  # live update
    with page.expect_navigation():  # a stale tab's Approve, posted after bob decided
        page.evaluate(
            """([action, csrf]) => {
                const f = document.createElement("form");
                f.method = "post"; f.action = action;
                for (const [k, v] of [["csrf", csrf], ["decision", "approve"]]) {
                    const i = document.createElement("input");
                    i.type = "hidden"; i.name = k; i.value = v; f.append(i);
                }
                document.body.append(f); f.submit();
            }""",
            [action, csrf],
        )
    assert "bob" in page.inner_text("main")
    assert page.get_by_role("link", name="Open run run-2").get_attribute("href") == "/runs/run-2"
    page.context.close()


def test_login_csrf_from_another_site_fails(browser: Any, served: tuple[str, str]) -> None:
    base, _ = served
    context = browser.new_context()
    page = context.new_page()
    attacker = (
        "<form id=f method=post action='" + base + "/login'>"
        "<input name=token value='" + OTHER + "'></form><script>f.submit()</script>"
    )
    page.route(
        "http://attacker.test/", lambda r: r.fulfill(body=attacker, content_type="text/html")
    )
    page.goto("http://attacker.test/")
    page.wait_for_url(base + "/login")
    assert "another site" in page.inner_text("main")
    assert not any(c["name"] == "golem_session" for c in context.cookies())
    # and the 500s are 4xx in a browser too
    res = page.request.post(
        base + "/api/runs",
        data=json.dumps({"agent": "twin", "prompt": "x", "deps_ref": 1e999}).replace(
            "inf", "1e999"
        ),
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )
    assert 400 <= res.status < 500
    context.close()


PAGES = ["/login", "/", "/runs", "/runs/run-0", "/audit", "/audit?limit=2", "/runs/missing"]


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize(("width", "height"), [(1440, 900), (390, 844)])
def test_axe_finds_no_serious_or_critical_violations(
    browser: Any, served: tuple[str, str], scheme: str, width: int, height: int
) -> None:
    if not AXE.exists():
        if os.environ.get("CI"):
            pytest.fail(f"CI is set but {AXE} is missing (npm install --prefix .axe axe-core@4)")
        pytest.skip(f"{AXE} is missing: npm install --prefix .axe axe-core@4")
    base, _ = served
    context = browser.new_context(
        viewport={"width": width, "height": height}, color_scheme=scheme, bypass_csp=True
    )
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    source = AXE.read_text()
    problems: dict[str, list[str]] = {}
    for path in PAGES:
        if path != "/login" and "golem_session" not in {c["name"] for c in context.cookies()}:
            page.goto(base + "/login")
            page.fill("#token", TOKEN)
            page.click("#sign-in")
            page.wait_for_url(base + "/")
        page.goto(base + path)
        page.wait_for_load_state()
        page.evaluate(source)
        result = page.evaluate(
            "axe.run(document, {resultTypes: ['violations']}).then(r => r.violations"
            ".filter(v => v.impact === 'serious' || v.impact === 'critical')"
            ".map(v => v.id + ': ' + v.nodes.map(n => n.target.join(' ')).join(', ')))"
        )
        if result:
            problems[path] = result
    context.close()
    assert problems == {}


def test_edit_and_approve_shows_a_live_diff(browser: Any, served: tuple[str, str]) -> None:
    base, _ = served
    page = _page(browser, base)
    card = page.locator("[data-call]").nth(1)  # deploy to canary
    card.locator(".edit summary").click()
    box = card.locator("textarea[name=args]")
    box.fill(box.input_value().replace("canary", "staging"))
    diff = card.locator("[data-diff]")
    assert '-   "target": "canary"' in diff.inner_text()
    assert '+   "target": "staging"' in diff.inner_text()
    assert card.locator("[data-diff] .d-add").count() == 1
    page.context.close()


def test_webhook_deliveries_are_visible_to_operators(browser: Any, tmp_path: Path) -> None:
    from golem.service.notify import Webhook
    from tests.support.notify import Receiver

    receiver = Receiver([500])
    try:
        url = f"sqlite:///{tmp_path / 'hooks.db'}"
        app = create_app(
            ServiceSettings(
                build_registry(),
                url,
                auth=AuthConfig(tokens={TOKEN: Approver("alice@example.com")}),
                webhooks=[Webhook(receiver.url + "/golem", secret=b"s")],
            )
        )
        with serve(app) as base:
            with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {TOKEN}"}) as h:
                h.post("/api/runs", json={"agent": "twin", "prompt": "notify me"})
            run_async(receiver.wait_for(2))  # the first attempt fails, the retry is delivered
            page = _page(browser, base)
            page.goto(base + "/notifications")
            page.locator("td", has_text="delivered").wait_for()
            text = page.inner_text("main")
            assert "run.paused" in text
            assert "500" in text  # the failed attempt is logged too
            page.context.close()
    finally:
        receiver.close()
