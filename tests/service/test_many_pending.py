"""10,000 pending runs: the first inbox page holds the oldest calls, and paging reaches the rest."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from golem.durable.store import Store
from golem.durable.store.sqlite import SQLiteStore
from golem.service.pages import PAGE_RUNS
from golem.service.schemas import MAX_LIST_LIMIT
from tests.support.service import bearer, save_run, sign_in

N = 10_000


async def _seed(tmp_path: Path) -> Path:
    """Save N pending runs through the store, oldest first (IDs sort like their age)."""
    path = tmp_path / "many.db"
    store = await SQLiteStore.open(path)
    try:
        for i in range(N):
            history = f'[{{"role": "user", "content": "request {i:05d}"}}]'
            await save_run(store, f"run-{i:05d}", ("c1", "deploy", "{}"), history=history)
    finally:
        await store.close()
    return path


async def test_the_first_page_of_10000_pending_runs_holds_the_oldest(
    tmp_path: Path, registry: object
) -> None:
    from golem.service import ServiceSettings, create_app
    from tests.support.service import make_auth

    path = await _seed(tmp_path)
    store: Store = await SQLiteStore.open(path)
    try:
        app = create_app(
            ServiceSettings(registry, store, auth=make_auth())  # type: ignore[arg-type]
        )
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            calls = (await client.get("/api/calls", headers=bearer("alice"))).json()["calls"]
            assert len(calls) == MAX_LIST_LIMIT
            assert calls[0]["run_id"] == "run-00000"  # the oldest, first
            assert calls[-1]["run_id"] == f"run-{MAX_LIST_LIMIT - 1:05d}"
            await sign_in(client)
            page = (await client.get("/")).text
            titles = re.findall(r'class="group-title">([^<]+)<', page)
            assert titles[:3] == ["request 00000", "request 00001", "request 00002"]
            assert len(titles) == PAGE_RUNS
            assert f"({PAGE_RUNS}+) Inbox" in page
            link = re.search(r'<a href="([^"]+)">Newer runs', page)
            assert link is not None
            second = (await client.get(link.group(1).replace("&amp;", "&"))).text
            titles = re.findall(r'class="group-title">([^<]+)<', second)
            assert titles[0] == f"request {PAGE_RUNS:05d}"
            seen, after = [], ""
            while after is not None:  # the API pages reach every run once, in age order
                url = "/api/calls?limit=500" + (f"&after={after}" if after else "")
                body = (await client.get(url, headers=bearer("alice"))).json()
                seen += [c["run_id"] for c in body["calls"]]
                after = body["next_cursor"]
            assert seen == [f"run-{i:05d}" for i in range(N)]
            bad = await client.get("/api/calls?after=garbage", headers=bearer("alice"))
            assert bad.status_code == 422
    finally:
        await store.close()
