"""Starting a run is safe to send again: `Idempotency-Key` on the API, a per-form key in the inbox.

A start whose answer was lost (a timeout, a 503, a dropped connection after the commit) can
be repeated with the same key: one run is started, and the repeat answers with it (200,
`Idempotent-Replayed: true`) without running the agent again.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import httpx
import pytest

from golem.durable.store import Store
from tests.support.service import bearer, sign_in

BODY = {"agent": "twin", "prompt": "ship it"}


async def runs_of(store: Store, who: str) -> list[str]:
    return [r.id for r in await store.list_runs(limit=500) if r.started_by == who]


async def post(client: httpx.AsyncClient, key: Any, who: str = "alice", **body: str) -> Any:
    headers = {**bearer(who), "Idempotency-Key": key}
    return await client.post("/api/runs", json={**BODY, **body}, headers=headers)


async def test_a_repeated_start_with_the_same_key_starts_one_run(
    client: httpx.AsyncClient, store: Store
) -> None:
    key = "order-7 ✓".encode()  # any bytes a client sends
    first = await post(client, key)
    assert first.status_code == 201, first.text
    assert "Idempotent-Replayed" not in first.headers
    again = await post(client, key)
    assert again.status_code == 200, again.text
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json()["run"]["id"] == first.json()["run"]["id"]
    assert again.headers["Location"] == first.headers["Location"]
    # a key is the caller's own
    olga = await post(client, key, who="olga")
    assert olga.status_code == 201
    assert olga.json()["run"]["id"] != first.json()["run"]["id"]
    assert await runs_of(store, "alice") == [first.json()["run"]["id"]]


async def test_concurrent_starts_with_one_key_save_one_run(
    client: httpx.AsyncClient, store: Store
) -> None:
    answers = await asyncio.gather(*(post(client, "k-concurrent") for _ in range(4)))
    # one start saved the run (201); every other answered with it (200, replayed), the
    # ones that lost the race to save included
    assert sorted(a.status_code for a in answers) == [200, 200, 200, 201]
    assert all(
        a.headers.get("Idempotent-Replayed") == "true" for a in answers if a.status_code == 200
    )
    assert len({a.json()["run"]["id"] for a in answers}) == 1
    assert len(await runs_of(store, "alice")) == 1


@pytest.mark.parametrize(
    ("first", "key", "other", "code"),
    [
        (True, "k-reused", {"agent": "echo"}, 409),
        (True, "k-reused", {"prompt": "another"}, 409),
        (False, "", {}, 422),
        (False, "x" * 201, {}, 422),
    ],
    ids=["other-agent", "other-prompt", "empty", "overlong"],
)
async def test_a_key_reused_for_another_start_or_malformed_is_refused(
    client: httpx.AsyncClient, store: Store, first: bool, key: str, other: Any, code: int
) -> None:
    before = [(await post(client, key)).json()["run"]["id"]] if first else []
    res = await post(client, key, **other)
    assert res.status_code == code
    if code == 409:
        assert res.json()["error"]["code"] == "idempotency_key_reused"
    else:
        assert "Idempotency-Key" in res.json()["error"]["message"]
    assert await runs_of(store, "alice") == before


async def test_the_inbox_start_form_sent_twice_starts_one_run(
    client: httpx.AsyncClient, store: Store
) -> None:
    csrf = await sign_in(client)
    match = re.search(
        r'name="idempotency_key" value="([0-9a-f]{32})"', (await client.get("/")).text
    )
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
    assert match.group(1) not in (await client.get("/")).text  # each page draws a new key
