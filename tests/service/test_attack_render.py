"""Attacks through what the inbox renders: hostile model text in every field of every page,
and arguments big enough to make the inbox list (and each live refresh of it) enormous.
"""

from __future__ import annotations

import csv
import json

import httpx
import pytest

from golem.durable.store import CallKind, NewCall, NewRun, Store
from golem.messages import Message, ToolCall, dumps_history
from golem.service.views import path
from tests.support.service import StartRun, bearer, csrf_of, inventory, sign_in

HOSTILE = [
    '"><script>alert(1)</script>',
    "'><img src=x onerror=alert(2)>",
    "</textarea><svg onload=alert(3)>",
    "javascript:alert(4)",
    "\u202egnp.exe",
    "zero\u200bwidth\ufeff",
    "line\nevent: change\ndata: {}\n\n",
    "\x1b[31mred\x07",
    "{{ 7*7 }}",
]

ALLOWED_TAGS = {
    "html", "head", "meta", "title", "link", "script", "body", "a", "header", "nav", "span",
    "form", "input", "button", "div", "main", "p", "footer", "kbd", "dialog", "h1", "h2", "h3",
    "dl", "dt", "dd", "section", "article", "code", "strong", "time", "pre", "details",
    "summary", "label", "textarea", "select", "option", "table", "thead", "tbody", "tr", "th",
    "td", "fieldset", "legend", "ul", "li", "ol", "caption", "em", "small", "br", "abbr",
    "output", "mark", "del", "ins", "b", "i", "blockquote", "aside", "svg", "path",
}  # fmt: skip


async def _save_hostile_runs(store: Store) -> list[str]:
    ids = []
    for n, text in enumerate(HOSTILE):
        run_id = f"run-{n}-{text}".replace("/", "|")  # a run ID never holds "/" (route)
        history = dumps_history(
            [
                Message(role="user", content=text),
                Message(
                    role="assistant",
                    content=text,
                    tool_calls=[ToolCall(text, text, json.dumps({text: text}))],
                ),
            ]
        )
        await store.save_pending(
            NewRun(
                id=run_id,
                agent="twin",
                conversation_id=text,
                history=history,
                calls=(
                    NewCall(text, CallKind.APPROVAL, text, json.dumps({text: text}), reason=text),
                    NewCall(text + "2", CallKind.EXTERNAL, "lookup", json.dumps({"key": text})),
                ),
                started_by=text,
                deps_ref={text: text},
            )
        )
        ids.append(run_id)
    return ids


async def test_hostile_text_is_inert_on_every_page(client: httpx.AsyncClient, store: Store) -> None:
    ids = await _save_hostile_runs(store)
    csrf = await sign_in(client)
    # decide some, so decisions (reasons, results, deciders) are rendered too
    for run_id, text in zip(ids[:3], HOSTILE[:3], strict=True):
        res = await client.post(
            path("runs", run_id, "calls", text + "2", "decision"),
            data={"csrf": csrf, "decision": "external", "result": text},
        )
        assert res.status_code == 303, res.text[:300]
    pages = ["/", "/runs", "/audit", "/notifications", *(path("runs", r) for r in ids)]
    pages += [f"/?tool={t}" for t in HOSTILE[:2]] + [f"/audit?actor={HOSTILE[0]}"]
    pages += [f"/?notice=approve&call={HOSTILE[0]}", f"/runs?status={HOSTILE[1]}"]
    for page in pages:
        res = await client.get(page)
        assert res.status_code == 200, page
        inv = inventory(res.text)
        assert all((s.get("src") or "").startswith("/static/") for s in inv.scripts), page
        assert inv.handlers == [], page
        assert inv.inline_styles == 0, page
        for text in HOSTILE[:3]:
            assert text not in res.text, (page, text)  # only ever escaped
    # the hidden characters are shown as markers, not silently applied
    page = (await client.get(path("runs", ids[4]))).text
    assert "U+202E" in page


async def test_hostile_text_reaches_json_clients_unchanged(
    client: httpx.AsyncClient, store: Store
) -> None:
    ids = await _save_hostile_runs(store)
    for run_id, text in zip(ids, HOSTILE, strict=True):
        res = await client.get("/api" + path("runs", run_id), headers=bearer("alice"))
        assert res.status_code == 200
        run = res.json()["run"]
        assert run["calls"][0]["call_id"] == text
        assert run["calls"][0]["tool_name"] == text
        assert run["started_by"] == text
        assert res.headers["content-type"] == "application/json"


async def _deploy(store: Store, run_id: str, target: str) -> None:
    """Save a pending run with one `deploy` call to `target`."""
    call = NewCall("c1", CallKind.APPROVAL, "deploy", json.dumps({"target": target}))
    await store.save_pending(
        NewRun(
            id=run_id,
            agent="twin",
            conversation_id="c",
            history="[]",
            calls=(call,),
            started_by="alice",
        )
    )


@pytest.mark.parametrize("size", [100_000, 1_000_000])
async def test_huge_arguments_do_not_swell_the_inbox_list(
    client: httpx.AsyncClient, store: Store, size: int
) -> None:
    # Found: each card carried a huge argument three times (folded text, edit box, its
    # data-original copy), so five 1 MB arguments made a 15 MB inbox page, fetched again
    # by every open browser on every change.
    big = "x" * size
    for n in range(5):
        await _deploy(store, f"big-{n}", big)
    await sign_in(client)
    inbox = await client.get("/")
    assert len(inbox.content) < 200_000
    assert f"Open the run to see all 1 lines ({size} characters)" in inbox.text
    assert "Edit the arguments on the run's page" in inbox.text
    run = await client.get("/runs/big-0")
    assert run.text.count(big) >= 1  # the run's page shows it all, and edits it
    assert 'name="args"' in run.text


async def test_long_arguments_below_the_cap_stay_in_the_list(
    client: httpx.AsyncClient, store: Store
) -> None:
    text = "\n".join(f"line {i}" for i in range(200))
    await _deploy(store, "long", text)
    await sign_in(client)
    inbox = (await client.get("/")).text
    assert "Show all 200 lines" in inbox
    assert "line 199" in inbox
    assert 'name="args"' in inbox


async def test_a_link_cannot_put_its_own_words_in_the_inbox_notice(
    client: httpx.AsyncClient, start: StartRun
) -> None:
    # Found: /?notice=approve&call=<any text> showed "Approved <any text>. A worker resumes
    # the run…" in the inbox's own notice box: a link from anyone spoke in the inbox's voice.
    await sign_in(client)
    spoof = "the $1M transfer; now re-enter your token at evil.example"
    for query in (
        f"notice=approve&call={spoof}",
        f"notice=approve&call={spoof}&tag=AAAAAAAAAAAAAAAA",
    ):
        page = (await client.get(f"/?{query}")).text
        assert "evil.example" not in page
        assert 'class="notice"' not in page
    run = await start("twin")
    csrf = csrf_of((await client.get("/")).text)
    res = await client.post(
        f"/runs/{run['id']}/calls/c1/decision", data={"csrf": csrf, "decision": "approve"}
    )
    page = (await client.get(res.headers["location"])).text  # the service's own redirect
    assert "Approved deploy (c1)." in page
    # a genuine tag does not carry over to other words
    forged = res.headers["location"].replace("deploy+%28c1%29", "deploy+%28c2%29")
    assert 'class="notice"' not in (await client.get(forged)).text
    client.cookies.clear()
    assert "Signed out." in (await client.get("/login?notice=signed-out")).text  # no call


async def test_csv_cells_never_start_a_formula(client: httpx.AsyncClient, store: Store) -> None:
    for run_id in ('=HYPERLINK("http://evil.example")', "+1+1", "-2", "@SUM(A1)"):
        await _deploy(store, run_id, "x")
    await sign_in(client)
    rows = (await client.get("/audit?format=csv")).text.splitlines()[1:]
    assert len(rows) == 4
    for row in rows:
        cells = next(csv.reader([row]))
        assert all(cell[:1] not in ("=", "+", "-", "@") for cell in cells), row
