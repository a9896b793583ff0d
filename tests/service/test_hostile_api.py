"""Hostile input to the JSON API, one table per kind of input: a named 4xx, never a 500, and
nothing started or decided. Runs on SQLite and on PostgreSQL, which fail differently (NUL
bytes, 64-bit overflow)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from golem import Message, ToolCall, dumps_history
from golem.durable.store import CallKind, NewCall, NewRun, Store
from golem.durable.worker import AgentEntry, start_run
from golem.service import ServiceSettings, create_app
from tests.support.agents import build_registry
from tests.support.durable.backends import BACKENDS, backend_for
from tests.support.service import bearer, call_raw, make_auth, scope_of, sign_in


@pytest.fixture(params=BACKENDS)
async def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    with backend_for(request.param, tmp_path) as backend:
        s = await backend.open()
        try:
            yield s
        finally:
            await s.close()


def _refuse_deps(ref: Any) -> Any:
    raise KeyError("tenant")


@pytest.fixture
async def http(any_store: Store) -> AsyncIterator[httpx.AsyncClient]:
    """The service (1 MiB body limit) with an agent `picky` whose deps factory raises."""
    registry = build_registry()
    registry["picky"] = AgentEntry(registry["echo"].agent, deps_factory=_refuse_deps)
    app = create_app(ServiceSettings(registry, any_store, auth=make_auth(), max_body_bytes=1 << 20))
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://golem.test") as c:
        yield c


JSON = {**bearer("alice"), "Content-Type": "application/json"}


def start(**fields: str) -> bytes:
    """A start body with raw JSON values (`agent` echo and `prompt` p unless given)."""
    values = {"agent": '"echo"', "prompt": '"p"', **fields}
    return ("{" + ", ".join(f'"{k}": {v}' for k, v in values.items()) + "}").encode()


BAD = ["\\ud800", "a\\udfffb", "nul\\u0000byte"]  # lone surrogates, a NUL byte
UTF8 = json.dumps({"agent": "echo", "prompt": "caf\u00e9"}, ensure_ascii=False)

# (id, body, status, error code, a word of the message); the status may be a tuple
STARTS: list[tuple[str, bytes, Any, str | None, str | None]] = [
    *(
        (f"deps-{v}", start(deps_ref=v), 400, "malformed_json", "NaN" if "NaN" in v else "Infinity")
        for v in ("NaN", "Infinity", "-Infinity", '{"x": [1, NaN]}')
    ),
    *((f"expires-{v}", start(expires_in=v), (400, 422), None, None)
      for v in ("Infinity", "1e300", "1e12", "-1", "0", "NaN", "-Infinity", "1e999")),
    ("nested-50000", start(deps_ref="[" * 50_000 + "]" * 50_000), 400, None, "nested"),
    ("nested-200", start(deps_ref="[" * 200 + "]" * 200), 422, None, None),
    ("nested-70", start(deps_ref="[" * 70 + "]" * 70), 422, None, None),
    ("open-100000", b"[" * 100_000, (400, 413, 422), None, None),
    ("digits-5000", start(deps_ref="9" * 5000), 400, "malformed_json", None),
    ("digits-5000.5", start(deps_ref="1" * 5000 + ".5"), 400, "malformed_json", None),
    ("digits-neg-4301", start(deps_ref="-" + "9" * 4301), 400, "malformed_json", None),
    ("long-dup-keys", start(deps_ref=f'{{"{"k" * 9000}": 1, "{"k" * 9000}": 2}}'), 400,
     "malformed_json", "twice"),
    ("dup-key", b'{"agent": "echo", "agent": "twin", "prompt": "p"}', 400, None, "twice"),
    ("dup-nested-key", start(deps_ref='{"a": {"k": 1, "k": 2}}'), 400, None, "twice"),
    *((f"prompt-{t}", start(prompt=f'"{t}"'), 422, None, None) for t in BAD),
    *((f"deps-value-{t}", start(deps_ref=f'{{"k": "{t}"}}'), 422, None, None) for t in BAD),
    *((f"deps-key-{t}", start(deps_ref=f'{{"{t}": 1}}'), 422, None, None) for t in BAD),
    *((f"encoding-{e}", UTF8.encode(e), 400, "malformed_json", "UTF-8")
      for e in ("utf-16", "utf-16-le", "utf-32", "latin-1")),
    ("trailing", b'{"agent": "echo", "prompt": "p"} trailing', 400, None, None),
    ("bom-only", b"\xff\xfe", 400, None, None),
    ("empty", b"", (400, 422), None, None),
    ("null", b"null", (400, 422), None, None),
    ("string", b'"a string"', (400, 422), None, None),
    ("deps-factory-raises", start(agent='"picky"', deps_ref='{"t": 1}'), 422, "invalid_deps",
     "KeyError"),
]  # fmt: skip


@pytest.mark.parametrize(("body", "status", "code", "word"), [c[1:] for c in STARTS],
                         ids=[c[0] for c in STARTS])  # fmt: skip
async def test_a_hostile_start_is_a_named_4xx_and_saves_nothing(
    http: httpx.AsyncClient, any_store: Store, body: bytes, status: Any, code: str | None,
    word: str | None,
) -> None:  # fmt: skip
    res = await http.post("/api/runs", content=body, headers=JSON)
    assert res.status_code in (status if isinstance(status, tuple) else (status,)), res.text[:300]
    error = res.json()["error"]
    assert error["code"] if code is None else error["code"] == code
    assert word is None or word in error["message"], error
    assert len(error["message"]) < 300
    assert "sys." not in error["message"]
    assert await any_store.list_runs() == []


@pytest.mark.parametrize(
    ("body", "expires"),
    [
        (b"\xef\xbb\xbf" + start(), False),  # a UTF-8 byte order mark is read
        (start(deps_ref="7" * 4300), False),  # 4,300 digits is still a number
        *((start(agent='"twin"', expires_in=v), True) for v in ("5e-324", "1e-7", "0.0000005")),
    ],
    ids=["bom", "digits-4300", "expires-5e-324", "expires-1e-7", "expires-5e-7"],
)
async def test_valid_starts_at_the_limits_are_accepted(
    http: httpx.AsyncClient, body: bytes, expires: bool
) -> None:
    # an expires_in under a microsecond was a zero timedelta, which the store refused
    res = await http.post("/api/runs", content=body, headers=JSON)
    assert res.status_code == 201, res.text[:300]
    assert (res.json()["run"]["expires_at"] is not None) is expires


DECISIONS = [
    *((f"reason-{t}", "a1", f'{{"decision": "deny", "reason": "{t}"}}', 422, None) for t in BAD),
    *((f"result-{t}", "x1", f'{{"decision": "external", "result": "{t}"}}', 422, None) for t in BAD),
    ("dup-decision", "a1", '{"decision": "deny", "decision": "approve"}', 400, "twice"),
    ("dup-reason", "a1", '{"decision": "approve", "reason": null, "reason": null}', 400, "twice"),
    ("edited-args", "a1", '{"decision": "approve", "args": {"target": "x"}}', 422, None),
    ("approve-external", "x1", '{"decision": "approve"}', 422, None),
]  # fmt: skip


@pytest.mark.parametrize(("call", "body", "status", "word"), [c[1:] for c in DECISIONS],
                         ids=[c[0] for c in DECISIONS])  # fmt: skip
async def test_a_hostile_decision_is_a_named_4xx_and_decides_nothing(
    http: httpx.AsyncClient, any_store: Store, call: str, body: str, status: int, word: str | None
) -> None:
    # the JSON API takes no edited arguments: edits go through the inbox's form
    run = (await http.post("/api/runs", content=start(agent='"mixed"'), headers=JSON)).json()
    url = f"/api/runs/{run['run']['id']}/calls/{call}/decision"
    res = await http.post(url, content=body, headers=JSON)
    assert res.status_code == status, res.text
    assert word is None or word in res.json()["error"]["message"]
    assert all(c.decision is None for c in (await any_store.list_runs())[0].calls)


URLS = [
    # (id, url, status, error code): NUL bytes, escapes that are not UTF-8, cursors
    *((f"nul-{u}", u, 400, None) for u in
      ("/api/runs?agent=a%00b", "/api/runs?tool=%00", "/api/calls?agent=%00", "/api/runs/r%00")),
    *((f"escape-{e}", f"/api/runs?agent=tw{e}", 400, "invalid_url")
      for e in ("%FF", "%C0%80", "%ED%A0%80", "%EF%BF")),
    ("escape-run", "/api/runs/r%FF", 400, "invalid_url"),
    *((f"cursor-{c}", f"/api/events?cursor={c}", 422, "invalid_request")
      for c in (str(2**70), str(2**63), "1e3", "-1", "x", "abc")),
    # a parameter named twice: Starlette reads the last, a proxy or a log the first
    *((f"twice-{u}", u, 400, "invalid_url") for u in (
        "/api/runs?status=pending&status=failed", "/api/runs?limit=1&limit=500",
        "/api/audit?actor=alice&actor=zoe", "/api/calls?agent=twin&agent=mixed",
        "/api/events?stream_token=a&stream_token=b", "/api/events?cursor=1&cursor=2",
        "/api/runs?status=pending&%73tatus=failed")),
    # one value each, and an empty filter, are read
    ("one-each", "/api/runs?status=pending&limit=5&agent=twin", 200, None),
    ("empty-filter", "/api/runs?status=&limit=5", 200, None),
]  # fmt: skip


@pytest.mark.parametrize(("url", "status", "code"), [c[1:] for c in URLS],
                         ids=[c[0] for c in URLS])  # fmt: skip
async def test_a_hostile_url_is_refused(
    http: httpx.AsyncClient, url: str, status: int, code: str | None
) -> None:
    res = await http.get(url, headers=bearer("alice"))
    assert res.status_code == status, res.text
    assert code is None or res.json()["error"]["code"] == code


@pytest.mark.parametrize("cursor", [str(2**63), "-1", "x"])
async def test_a_hostile_last_event_id_is_refused_and_a_bad_cursor_even_when_it_wins(
    http: httpx.AsyncClient, cursor: str
) -> None:
    res = await http.get("/api/events", headers={**bearer("alice"), "Last-Event-ID": cursor})
    assert res.status_code == 422, res.text
    res = await http.get(
        "/api/events?cursor=true", headers={**bearer("alice"), "Last-Event-ID": "24"}
    )
    assert res.status_code == 422, res.text


@pytest.mark.parametrize(
    "headers",
    [
        [("Authorization", "Bearer tok-olga"), ("Authorization", "Bearer tok-alice")],
        [("Authorization", "Bearer tok-alice"), ("Authorization", "Bearer tok-alice")],
        *(
            [("Authorization", "Bearer tok-alice"), (name, one), (name, two)]
            for name, one, two in (
                ("Last-Event-ID", "1", "9"),
                ("Idempotency-Key", "a", "b"),
                ("Origin", "http://golem.test", "https://evil.example"),
                ("Content-Type", "application/json", "text/plain"),
            )
        ),
    ],
    ids=["two-tokens", "same-token-twice", "last-event-id", "idempotency-key", "origin", "ctype"],
)
async def test_a_header_said_twice_is_refused_before_any_handler(
    http: httpx.AsyncClient, any_store: Store, headers: list[tuple[str, str]]
) -> None:
    # two Authorization headers, olga's then alice's, acted as olga; a proxy reading the
    # last would have logged alice
    for method, url in (("GET", "/api/whoami"), ("POST", "/api/runs")):
        res = await http.request(method, url, headers=headers, content=start())
        assert res.status_code == 400, res.text
        assert res.json()["error"]["code"] == "conflicting_headers"
    assert await any_store.list_runs() == []


async def test_a_nul_byte_in_a_decision_url_or_an_inbox_form_is_refused(
    http: httpx.AsyncClient, any_store: Store
) -> None:
    run = (await http.post("/api/runs", content=start(agent='"twin"'), headers=JSON)).json()
    url = f"/api/runs/{run['run']['id']}/calls/c1%00/decision"
    assert (
        await http.post(url, json={"decision": "approve"}, headers=bearer("alice"))
    ).status_code == 400
    csrf = await sign_in(http)
    for fields in (
        {"agent": "echo", "prompt": "a\x00b"},
        {"agent": "echo", "prompt": "p", "deps_ref": "NaN"},
        {"agent": "echo", "prompt": "p", "deps_ref": "[" * 50_000},
        {"agent": "echo", "prompt": "p", "deps_ref": "[" * 100 + "]" * 100},
    ):
        res = await http.post("/runs", data={"csrf": csrf, **fields})
        assert res.status_code == 422, (fields, res.text[:200])
        assert "text/html" in res.headers["content-type"]
    (only,) = await any_store.list_runs()
    assert all(c.decision is None for c in only.calls)


async def test_a_nan_saved_by_a_python_caller_does_not_break_listings(
    any_store: Store, http: httpx.AsyncClient
) -> None:
    try:
        await start_run(any_store, build_registry(), "twin", "p", deps_ref=[float("nan")])
    except Exception:  # PostgreSQL's jsonb refuses it
        pytest.skip("this store does not keep NaN")
    runs = (await http.get("/api/runs", headers=bearer("alice"))).json()["runs"]
    assert runs[0]["deps_ref"] == [None]
    assert (await http.get("/api/calls", headers=bearer("alice"))).status_code == 200


DEEP_ARGS = '{"target":' + "[" * 3000 + "]" * 3000 + "}"


async def test_a_call_with_arguments_nested_past_json_stack_is_shown_listed_and_decided(
    http: httpx.AsyncClient, any_store: Store
) -> None:
    # a model can emit them (the Go golem keeps 10,000 levels): no RecursionError, no 500
    history = dumps_history(
        [
            Message("user", "deploy"),
            Message("assistant", tool_calls=[ToolCall("c1", "deploy", DEEP_ARGS)]),
        ]
    )
    call = NewCall("c1", CallKind.APPROVAL, "deploy", args=DEEP_ARGS)
    await any_store.save_pending(
        NewRun(id="deep", agent="twin", conversation_id="c", history=history, calls=(call,))
    )
    assert (await http.get("/api/calls", headers=bearer("alice"))).status_code == 200
    assert (await http.get("/api/runs/deep", headers=bearer("alice"))).status_code == 200
    await sign_in(http)
    assert (await http.get("/runs/deep")).status_code == 200
    edited = await http.post(
        "/api/runs/deep/calls/c1/decision",
        json={"decision": "approve", "args": {"target": "web-1"}},
        headers=bearer("alice"),
    )
    assert edited.status_code in (200, 201, 422), edited.text[:300]


@pytest.mark.parametrize(
    ("path", "allowed"),
    [
        ("/api/runs", "GET, HEAD, POST"),
        ("/api/health", "GET, HEAD"),
        ("/api/runs/r1/calls/c1/decision", "POST"),
        ("/runs", "GET, HEAD, POST"),
        ("/login", "GET, HEAD, POST"),
    ],
)
async def test_a_wrong_method_gets_405_with_every_allowed_method(
    http: httpx.AsyncClient, path: str, allowed: str
) -> None:
    # RFC 9110: a 405 names every method of the resource, when two routes share its path too
    for method in ("PUT", "DELETE", "TRACE"):
        res = await http.request(method, path, headers=bearer("alice"))
        assert res.status_code == 405, (method, path)
        assert res.headers["allow"] == allowed, (method, path)


class _NoStore:
    async def schema_version(self) -> int:
        raise OSError("no store here")


async def _status_of(query: str) -> tuple[int, bytes]:
    """GET /api/health?<query> with the query's bytes as sent: the status and the body."""
    app = create_app(ServiceSettings(build_registry(), _NoStore(), auth=make_auth()))  # type: ignore[arg-type]
    return await call_raw(app, scope_of("GET", "/api/health", query=query.encode("latin-1")))


@settings(deadline=None)
@given(
    st.lists(
        st.tuples(
            st.text(alphabet="ab+%20=61&;", max_size=5), st.text(alphabet="ab=%+", max_size=3)
        ),
        max_size=5,
    ).map(lambda pairs: "&".join(f"{k}={v}" if v else k for k, v in pairs))
)
def test_a_parameter_is_refused_as_said_twice_exactly_when_starlette_reads_it_twice(
    query: str,
) -> None:
    names = [k for k, _ in parse_qsl(query, keep_blank_values=True)]
    status, body = asyncio.run(_status_of(query))
    if status == 400 and b"twice" not in body:
        return  # refused for its escapes (a stray %)
    assert (status == 400) == (len(names) != len(set(names))), (query, names, status)
