"""The third attack round on the service (ADR 0069): what rounds one and two (ADR 0050,
0061) did not try.

Each test failed before its fix unless it says it held.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from golem import new_id
from golem.service import Approver, AuthConfig, create_app
from golem.service._confusables import skeleton
from golem.service.api import _bad_text
from golem.service.views import path
from golem.store import CallKind, NewCall, NewRun, Store
from golem.store.sqlite import SQLiteStore
from tests.service.conftest import StartRun, bearer, make_auth
from tests.service.test_inbox import sign_in

# --------------------------------------------------------------------------- existence

_RUN = "RUN"
"""Where a test URL names the run."""


def _same(hidden: httpx.Response, unknown: httpx.Response, hidden_id: str, unknown_id: str) -> None:
    """The two answers are one: status, headers (but the date) and body, the IDs aside."""
    assert hidden.status_code == unknown.status_code, (hidden.text, unknown.text)

    def headers(res: httpx.Response, run_id: str) -> dict[str, str]:
        out = {k: v for k, v in res.headers.items() if k not in ("date", "content-length")}
        return {k: v.replace(run_id, "ID") for k, v in out.items()}

    assert headers(hidden, hidden_id) == headers(unknown, unknown_id)
    assert hidden.text.replace(hidden_id, "ID") == unknown.text.replace(unknown_id, "ID")


async def test_a_run_the_caller_may_not_see_answers_as_an_unknown_run_everywhere(
    client: httpx.AsyncClient, start: StartRun, store: Store
) -> None:
    # Found: olga (agents twin and echo) got 403 "may not see this run" for a run of
    # "mixed" and 404 for an ID no run has, on the API and in the inbox: an oracle of which
    # run IDs exist. Now one answer, by one code path (load_run).
    run = await start("mixed")
    hidden = run["id"]
    unknown = hidden[:-4] + "0000" if not hidden.endswith("0000") else hidden[:-4] + "1111"
    assert len(unknown) == len(hidden)
    for method, url, kwargs in [
        ("GET", "/api" + path("runs", "RUN"), {}),
        ("HEAD", "/api" + path("runs", "RUN"), {}),
        (
            "POST",
            "/api" + path("runs", "RUN", "calls", "a1", "decision"),
            {"json": {"decision": "approve"}},
        ),
        (
            "POST",
            "/api" + path("runs", "RUN", "calls", "zz", "decision"),
            {"json": {"decision": "deny"}},
        ),
    ]:
        answers = [
            await client.request(
                method, url.replace(_RUN, quote(i, safe="")), headers=bearer("olga"), **kwargs
            )
            for i in (hidden, unknown)
        ]
        assert answers[0].status_code == 404, (method, url, answers[0].text)
        _same(*answers, hidden, unknown)
    csrf = await sign_in(client, "olga")
    for method, url, data in [
        ("GET", path("runs", "RUN"), None),
        ("POST", path("runs", "RUN", "decisions"), {"csrf": csrf, "decision": "deny"}),
        ("POST", path("runs", "RUN", "resolve"), {"csrf": csrf, "action": "cancel", "note": "n"}),
        (
            "POST",
            path("runs", "RUN", "calls", "a1", "decision"),
            {"csrf": csrf, "decision": "approve"},
        ),
        (
            "POST",
            path("runs", "RUN", "calls", "a1", "decision"),
            {"csrf": csrf, "decision": "approve", "args": '{"target": "x"}'},
        ),
        ("GET", "/audit?run=RUN", None),
        ("GET", "/audit?format=csv&run=RUN", None),
        ("GET", "/audit?format=json&run=RUN", None),
    ]:
        answers = [
            await client.request(method, url.replace(_RUN, quote(i, safe="")), data=data)
            for i in (hidden, unknown)
        ]
        assert answers[0].status_code in (200, 404), (method, url, answers[0].text)
        _same(*answers, hidden, unknown)
    answers = [
        await client.get("/api/audit", params={"run": i}, headers=bearer("olga"))
        for i in (hidden, unknown)
    ]
    _same(*answers, hidden, unknown)
    assert (await store.get_run(hidden)).call("a1").decision is None


async def test_a_run_an_approver_may_see_still_answers_403_for_a_tool_it_may_not_decide(
    client: httpx.AsyncClient, start: StartRun
) -> None:
    # held: the run is visible to tess (all agents, tool lookup only); only its deploy call
    # is not hers to decide, and saying so tells her nothing she may not see
    run = await start("mixed")
    res = await client.post(
        "/api" + path("runs", run["id"], "calls", "a1", "decision"),
        json={"decision": "approve"},
        headers=bearer("tess"),
    )
    assert res.status_code == 403
    assert res.json()["error"]["code"] == "forbidden"


# --------------------------------------------------------------------------- identities

_LOOKALIKES = {"a": "\u0430", "e": "\u0435", "o": "\u043e", "p": "\u0440", "c": "\u0441"}
"""Latin letters and a Cyrillic letter that looks the same."""


@pytest.mark.parametrize(
    ("one", "two"),
    [
        ("alice", "\u0430lice"),  # Cyrillic a
        ("paypal", "\u0440aypal"),  # Cyrillic er
        ("bob", "b\u03bfb"),  # Greek omicron
        ("alice", "\U0001d41alice"),  # mathematical bold a
        ("Ian", "lan"),  # capital I, small L
        ("carol", "caro1"),
        ("alice@corp.example", "alice@c\u043erp.example"),
    ],
)
def test_cross_script_lookalike_identities_are_refused(one: str, two: str) -> None:
    # Found: NFKC + casefold (ADR 0061) let "alice" and a Cyrillic "аlice" both approve;
    # the audit log, its CSV and the webhooks showed them as one person.
    with pytest.raises(ValueError, match="look alike") as raised:
        AuthConfig(tokens={"t1": Approver(one), "t2": Approver(two)}, secret=b"s" * 32)
    assert ascii(two) in str(raised.value)  # escaped: the message shows the difference


@pytest.mark.parametrize(
    ("one", "two"),
    [("ivan", "\u0438\u0432\u0430\u043d"), ("alice", "bob"), ("\u7530\u4e2d", "tanaka")],
)
def test_identities_that_do_not_look_alike_are_kept(one: str, two: str) -> None:
    AuthConfig(tokens={"t1": Approver(one), "t2": Approver(two)}, secret=b"s" * 32)


@settings(max_examples=200, deadline=None)
@given(
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=12).filter(
        lambda s: any(c in _LOOKALIKES for c in s)
    ),
    st.data(),
)
def test_any_identity_with_a_letter_swapped_for_its_lookalike_is_refused(
    name: str, data: st.DataObject
) -> None:
    at = data.draw(st.sampled_from([i for i, c in enumerate(name) if c in _LOOKALIKES]))
    twin = name[:at] + _LOOKALIKES[name[at]] + name[at + 1 :]
    with pytest.raises(ValueError, match="look alike"):
        AuthConfig(tokens={"t1": Approver(name), "t2": Approver(twin)}, secret=b"s" * 32)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=20))
def test_a_skeleton_is_its_own_skeleton(text: str) -> None:
    assert skeleton(skeleton(text)) == skeleton(text)


# --------------------------------------------------------------------------- call IDs

_CALL_TEXT = st.text(alphabet="/%?#. \\+&=é\u0301\ufffd\u212bÅ\u00c5a", min_size=1, max_size=6)
"""Call IDs of escapes, separators and several Unicode forms of one letter."""


def _api_decision(run_id: str, call_id: str) -> str:
    return "/api" + path("runs", run_id, "calls", call_id, "decision")


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    ids=st.lists(
        st.one_of(_CALL_TEXT, st.text(min_size=1, max_size=8)), min_size=1, max_size=4, unique=True
    ),
    probe=st.one_of(_CALL_TEXT, st.text(min_size=1, max_size=8)),
)
@example(ids=["caf\u00e9", "cafe\u0301"], probe="caf\u00e9")
@example(ids=["\u00c5"], probe="\u212b")  # Angstrom sign, NFC is Å
@example(ids=["x\ufffd"], probe="x\ufffd")
@example(ids=["a/b", "a%2Fb"], probe="a")
async def test_a_decision_names_exactly_one_pending_call(
    tmp_path: Path, registry: Any, ids: list[str], probe: str
) -> None:
    # A decision decides the call whose ID it names, byte for byte, and no other; an ID
    # no call has (another Unicode form of one included) is a named 404 and decides
    # nothing.
    ids = [i for i in ids if "\x00" not in i and i not in (".", "..")]
    assume(ids and all(_bad_text(i) is None for i in ids) and _bad_text(probe) is None)
    assume(probe not in (".", "..") and "\x00" not in probe)
    store = await SQLiteStore.open(tmp_path / f"{new_id()}.db")
    try:
        calls = tuple(NewCall(i, CallKind.APPROVAL, "deploy", '{"target": "x"}') for i in ids)
        await store.save_pending(
            NewRun(id="r", agent="twin", conversation_id="c", history="[]", calls=calls)
        )
        app = create_app(registry, store, auth=make_auth(), undo_seconds=0)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://golem.test") as c:
            res = await c.post(
                _api_decision("r", probe), json={"decision": "deny"}, headers=bearer("alice")
            )
            decided = {x.call_id for x in (await store.get_run("r")).calls if x.decision}
            if probe in ids:
                assert res.status_code == 200, res.text
                assert decided == {probe}
            else:
                assert res.status_code == 404, res.text
                assert res.json()["error"]["code"] == "call_not_found"
                assert decided == set()
            for i in ids:
                if i in decided:
                    continue
                res = await c.post(
                    _api_decision("r", i), json={"decision": "approve"}, headers=bearer("alice")
                )
                assert res.status_code == 200, (i, res.text)
                assert res.json()["decision"]["decision"] == "approve"
                decided.add(i)
                now = {x.call_id for x in (await store.get_run("r")).calls if x.decision}
                assert now == decided
    finally:
        await store.close()


@pytest.mark.parametrize("escape", ["%FF", "%C0%80", "%ED%A0%80", "%EF%BF"])
async def test_an_escape_that_is_not_utf8_names_no_call_and_no_run(
    client: httpx.AsyncClient, store: Store, escape: str
) -> None:
    # Found: servers decode a bad escape to U+FFFD, so /calls/x%FF decided the call
    # "x\ufffd", which the URL did not name (and so did every other bad byte).
    calls = (NewCall("x\ufffd", CallKind.APPROVAL, "deploy", '{"target": "x"}'),)
    await store.save_pending(
        NewRun(id="r\ufffd", agent="twin", conversation_id="c", history="[]", calls=calls)
    )
    for url in (
        f"/api/runs/r%EF%BF%BD/calls/x{escape}/decision",
        f"/api/runs/r{escape}/calls/x%EF%BF%BD/decision",
    ):
        res = await client.post(url, json={"decision": "approve"}, headers=bearer("alice"))
        assert res.status_code == 400, res.text
        assert res.json()["error"]["code"] == "invalid_url"
    res = await client.get(f"/api/runs/r{escape}", headers=bearer("alice"))
    assert res.status_code == 400
    res = await client.get(f"/api/runs?agent=tw{escape}", headers=bearer("alice"))
    assert res.json()["error"]["code"] == "invalid_url"
    csrf = await sign_in(client)
    page = await client.get(f"/runs/r{escape}")
    assert page.status_code == 400
    assert page.headers["content-type"].startswith("text/html")
    res = await client.post(
        f"/runs/r%EF%BF%BD/calls/x{escape}/decision", data={"csrf": csrf, "decision": "deny"}
    )
    assert res.status_code == 400
    assert (await store.get_run("r\ufffd")).call("x\ufffd").decision is None
    res = await client.post(  # the right escape decides it
        "/api/runs/r%EF%BF%BD/calls/x%EF%BF%BD/decision",
        json={"decision": "approve"},
        headers=bearer("alice"),
    )
    assert res.status_code == 200, res.text


async def test_a_form_whose_escapes_are_not_utf8_is_refused(
    client: httpx.AsyncClient, start: StartRun, store: Store
) -> None:
    # Found: parse_qs decoded %FF in a form field to U+FFFD (a reason, a confirmed call
    # ID): now 400 malformed_form, as for a body that is not UTF-8.
    run = await start("twin")
    csrf = await sign_in(client)
    res = await client.post(
        path("runs", run["id"], "calls", "c1", "decision"),
        content=f"csrf={csrf}&decision=deny&reason=no%FF".encode(),
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert res.status_code == 400, res.text[:300]
    assert "not UTF-8" in res.text
    assert (await store.get_run(run["id"])).call("c1").decision is None
