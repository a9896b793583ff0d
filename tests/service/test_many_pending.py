"""10,000 pending runs: the first inbox page holds the oldest calls, and paging reaches the rest."""

from __future__ import annotations

import re
import sqlite3
from datetime import timedelta
from pathlib import Path

import httpx

from golem.service import api
from golem.store import CallKind, NewCall, NewRun, Store, utc_now
from golem.store.sqlite import SQLiteStore
from tests.service.conftest import bearer
from tests.service.test_inbox import sign_in

N = 10_000


async def _seed(tmp_path: Path) -> Path:
    """Save one run through the store, then copy its rows N times in one SQL transaction."""
    path = tmp_path / "many.db"
    store = await SQLiteStore.open(path)
    start = utc_now() - timedelta(days=30)
    await store.save_pending(
        NewRun(
            id="run-00000",
            agent="twin",
            conversation_id="c-00000",
            history='[{"role": "user", "content": "request 00000"}]',
            calls=(NewCall("c1", CallKind.APPROVAL, "deploy", '{"target": "x"}'),),
        )
    )
    await store.close()
    db = sqlite3.connect(path)
    runs = [r[1] for r in db.execute("PRAGMA table_info(golem_runs)")]
    calls = [r[1] for r in db.execute("PRAGMA table_info(golem_calls)")]
    run_row = db.execute(f"SELECT {', '.join(runs)} FROM golem_runs").fetchone()
    call_row = db.execute(f"SELECT {', '.join(calls)} FROM golem_calls").fetchone()
    created = runs.index("created_at")
    stamp = type(run_row[created])
    with db:
        for i in range(1, N):
            rid = f"run-{i:05d}"
            row = list(run_row)
            row[runs.index("id")] = rid
            row[runs.index("conversation_id")] = f"c-{i:05d}"
            row[runs.index("history")] = f'[{{"role": "user", "content": "request {i:05d}"}}]'
            at = start + timedelta(minutes=i)
            row[created] = stamp(at.isoformat() if stamp is str else at.timestamp() * 1e6 // 1)
            db.execute(
                f"INSERT INTO golem_runs ({', '.join(runs)}) VALUES ({', '.join('?' * len(runs))})",
                row,
            )
            crow = list(call_row)
            crow[calls.index("run_id")] = rid
            db.execute(
                f"INSERT INTO golem_calls ({', '.join(calls)}) "
                f"VALUES ({', '.join('?' * len(calls))})",
                crow,
            )
        # the first run is the oldest of all
        first = start - timedelta(days=1)
        value = first.isoformat() if stamp is str else first.timestamp() * 1e6 // 1
        db.execute("UPDATE golem_runs SET created_at = ? WHERE id = 'run-00000'", (stamp(value),))
    db.close()
    return path


async def test_the_first_page_of_10000_pending_runs_holds_the_oldest(
    tmp_path: Path, registry: object, monkeypatch: object
) -> None:
    from golem.service import create_app
    from tests.service.conftest import make_auth

    path = await _seed(tmp_path)
    store: Store = await SQLiteStore.open(path)
    loaded: list[int] = []
    real = store.list_runs

    async def counting(**kw: object) -> object:
        runs = await real(**kw)  # type: ignore[arg-type]
        loaded.append(len(runs))
        return runs

    store.list_runs = counting  # type: ignore[method-assign]
    try:
        app = create_app(registry, store, auth=make_auth())  # type: ignore[arg-type]
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            calls = (await client.get("/api/calls", headers=bearer("alice"))).json()["calls"]
            assert len(calls) == api.MAX_LIST_LIMIT
            assert calls[0]["run_id"] == "run-00000"  # the oldest, first
            assert calls[-1]["run_id"] == f"run-{api.MAX_LIST_LIMIT - 1:05d}"
            assert sum(loaded) < api.MAX_LIST_LIMIT + 64  # the page, plus one-row probes
            await sign_in(client)
            page = (await client.get("/")).text
            titles = re.findall(r'class="group-title">([^<]+)<', page)
            assert titles[:3] == ["request 00000", "request 00001", "request 00002"]
            assert len(titles) == 500
            assert "(500+) Inbox" in page
            seen, url = 0, "/"
            while url:  # follow "Newer runs" to the end: every run once, in age order
                html = (await client.get(url)).text
                titles = re.findall(r'class="group-title">([^<]+)<', html)
                assert titles[0] == f"request {seen:05d}"
                seen += len(titles)
                found = re.search(r'<a href="([^"]+)">Newer runs', html)
                url = found.group(1).replace("&amp;", "&") if found else ""
            assert seen == N
            res = await client.get("/api/calls?limit=500", headers=bearer("alice"))
            cursor = res.json()["next_cursor"]
            more = await client.get(f"/api/calls?after={cursor}", headers=bearer("alice"))
            assert more.json()["calls"][0]["run_id"] == "run-00500"
            bad = await client.get("/api/calls?after=garbage", headers=bearer("alice"))
            assert bad.status_code == 422
    finally:
        await store.close()
