"""Starting a run is safe to send again: `Idempotency-Key` on the API, a per-form key in the inbox.

A start whose answer was lost (a timeout, a 503, a dropped connection after the commit) can
be repeated with the same key: one run is started, and the repeat answers with it (200,
`Idempotent-Replayed: true`) without running the agent again.
"""

from __future__ import annotations

import asyncio
import re

import httpx
import pytest

from golem.durable.store import Store
from tests.support.service import bearer, sign_in


async def runs_of(store: Store, who: str) -> list[str]:
    return [r.id for r in await store.list_runs(limit=500) if r.started_by == who]


async def test_a_repeated_start_with_the_same_key_starts_one_run(
    client: httpx.AsyncClient, store: Store
) -> None:
    body = {"agent": "twin", "prompt": "ship it"}
    key = {"Idempotency-Key": "order-7 ✓".encode()}  # any bytes a client sends
    first = await client.post("/api/runs", json=body, headers={**bearer("alice"), **key})
    assert first.status_code == 201, first.text
    assert "Idempotent-Replayed" not in first.headers
    again = await client.post("/api/runs", json=body, headers={**bearer("alice"), **key})
    assert again.status_code == 200, again.text
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json()["run"]["id"] == first.json()["run"]["id"]
    assert again.headers["Location"] == first.headers["Location"]
    assert await runs_of(store, "alice") == [first.json()["run"]["id"]]


async def test_concurrent_starts_with_one_key_save_one_run(
    client: httpx.AsyncClient, store: Store
) -> None:
    body = {"agent": "twin", "prompt": "ship it"}
    headers = {**bearer("alice"), "Idempotency-Key": "k-concurrent"}
    answers = await asyncio.gather(
        *(client.post("/api/runs", json=body, headers=headers) for _ in range(4))
    )
    # one start saved the run (201); every other answered with it (200, replayed), the
    # ones that lost the race to save included
    assert sorted(a.status_code for a in answers) == [200, 200, 200, 201]
    assert all(
        a.headers.get("Idempotent-Replayed") == "true" for a in answers if a.status_code == 200
    )
    assert len({a.json()["run"]["id"] for a in answers}) == 1
    assert len(await runs_of(store, "alice")) == 1


async def test_a_key_is_the_callers_own(client: httpx.AsyncClient, store: Store) -> None:
    body = {"agent": "twin", "prompt": "ship it"}
    a = await client.post(
        "/api/runs", json=body, headers={**bearer("alice"), "Idempotency-Key": "same"}
    )
    o = await client.post(
        "/api/runs", json=body, headers={**bearer("olga"), "Idempotency-Key": "same"}
    )
    assert (a.status_code, o.status_code) == (201, 201)
    assert a.json()["run"]["id"] != o.json()["run"]["id"]


@pytest.mark.parametrize(
    "other", [{"agent": "echo", "prompt": "ship it"}, {"agent": "twin", "prompt": "another"}]
)
async def test_a_key_reused_for_another_start_is_refused(
    client: httpx.AsyncClient, store: Store, other: dict[str, str]
) -> None:
    headers = {**bearer("alice"), "Idempotency-Key": "k-reused"}
    first = await client.post(
        "/api/runs", json={"agent": "twin", "prompt": "ship it"}, headers=headers
    )
    assert first.status_code == 201
    res = await client.post("/api/runs", json=other, headers=headers)
    assert res.status_code == 409
    assert res.json()["error"]["code"] == "idempotency_key_reused"
    assert await runs_of(store, "alice") == [first.json()["run"]["id"]]


@pytest.mark.parametrize("key", ["", "x" * 201])
async def test_an_empty_or_overlong_key_is_refused(
    client: httpx.AsyncClient, store: Store, key: str
) -> None:
    res = await client.post(
        "/api/runs",
        json={"agent": "twin", "prompt": "ship it"},
        headers={**bearer("alice"), "Idempotency-Key": key},
    )
    assert res.status_code == 422
    assert "Idempotency-Key" in res.json()["error"]["message"]
    assert await runs_of(store, "alice") == []


async def test_the_inbox_start_form_sent_twice_starts_one_run(
    client: httpx.AsyncClient, store: Store
) -> None:
    csrf = await sign_in(client)
    page = (await client.get("/")).text
    match = re.search(r'name="idempotency_key" value="([0-9a-f]{32})"', page)
    assert match, "the start form carries no idempotency key"
    form = {"csrf": csrf, "agent": "twin", "prompt": "go", "idempotency_key": match.group(1)}
    first = await client.post("/runs", data=form)
    again = await client.post("/runs", data=form)
    assert first.status_code == again.status_code == 303
    assert first.headers["location"] == again.headers["location"]
    assert len(await runs_of(store, "alice")) == 1
    # the same form, edited and sent again, is another start
    edited = await client.post("/runs", data={**form, "prompt": "go again"})
    assert edited.status_code == 303
    assert edited.headers["location"] != first.headers["location"]
    assert len(await runs_of(store, "alice")) == 2
    fresh = (await client.get("/")).text
    assert match.group(1) not in fresh  # each page draws a new key
