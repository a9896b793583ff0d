"""The third attack round on the service (ADR 0069): what rounds one and two (ADR 0050,
0061) did not try.

Each test failed before its fix unless it says it held.
"""

from __future__ import annotations

from urllib.parse import quote

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from golem.service import Approver, AuthConfig
from golem.service._confusables import skeleton
from golem.service.views import path
from golem.store import Store
from tests.service.conftest import StartRun, bearer
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
