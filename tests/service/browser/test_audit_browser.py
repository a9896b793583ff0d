"""The audit view in a real browser: paging back with "Older entries" and forward to the
newest, light and dark, desktop and phone (ADR 0077). Screenshots go to
`GOLEM_SCREENSHOTS` when it names a folder (for looking at them)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from golem.durable.store import CallKind, Decision, NewCall, NewRun, open_store
from golem.service import Approver, AuthConfig, ServiceSettings, create_app
from tests.support.browser import run_async, signed_in
from tests.support.service import serve

pytestmark = pytest.mark.browser

TOKEN = "audit-browser-token"
SHOTS = os.environ.get("GOLEM_SCREENSHOTS", "")


async def _seed(url: str) -> None:
    store = await open_store(url)
    try:
        for n in range(14):
            agent = ("billing", "ops")[n % 2]
            run_id = f"run-{n:02d}-{agent}"
            await store.save_pending(
                NewRun(
                    id=run_id,
                    agent=agent,
                    conversation_id=run_id,
                    history="[]",
                    calls=(NewCall("c1", CallKind.APPROVAL, "pay", '{"amount": 10}'),),
                    started_by="alice@example.com",
                )
            )
            if n % 4 == 0:
                await store.decide(
                    run_id, "c1", Decision.deny("not this month"), decided_by="zoë@example.com"
                )
    finally:
        await store.close()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    url = f"sqlite:///{tmp_path / 'audit.db'}"
    run_async(_seed(url))
    auth = AuthConfig(tokens={TOKEN: Approver("bob@example.com", agents=frozenset({"billing"}))})
    app = create_app(ServiceSettings({}, url, auth=auth))
    with serve(app) as base:
        yield base


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize(("width", "height"), [(1280, 900), (390, 844)])
def test_the_audit_view_pages_back_and_forward(
    browser: Any, served: str, scheme: str, width: int, height: int
) -> None:
    viewport = {"width": width, "height": height}
    page = signed_in(browser, served, TOKEN, viewport=viewport, color_scheme=scheme)
    try:
        page.goto(served + "/audit?limit=5")
        rows = page.locator("#audit-rows tr")
        assert rows.count() == 5
        first = rows.all_inner_texts()
        older = page.get_by_role("link", name="Older entries")
        older.scroll_into_view_if_needed()
        box = older.bounding_box()
        assert box is not None
        assert box["height"] >= 44  # a thumb's target on a phone
        assert box["x"] + box["width"] <= width  # on screen, no sideways scroll
        if SHOTS:
            page.screenshot(path=f"{SHOTS}/audit-{scheme}-{width}.png", full_page=True)
        older.click()
        page.wait_for_url("**before=*")
        assert "limit=5" in page.url
        second = page.locator("#audit-rows tr").all_inner_texts()
        assert len(second) == 5
        assert not set(first) & set(second)
        assert "ops" not in " ".join(first + second)  # bob sees billing only
        if SHOTS:
            page.screenshot(path=f"{SHOTS}/audit-{scheme}-{width}-older.png", full_page=True)
        page.get_by_role("link", name="Newest entries").click()
        page.wait_for_url(served + "/audit?limit=5")
        assert page.locator("#audit-rows tr").all_inner_texts() == first
    finally:
        page.context.close()
