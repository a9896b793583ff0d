"""Hostile IDs and page cursors at the store's boundary: the same named error on every backend,
never a bare one, and nothing changed (issue 29, ADR 0065, ADR 0070)."""

from __future__ import annotations

import base64
import json
import unicodedata
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from golem.durable.store import (
    CallNotFound,
    Decision,
    InvalidCursor,
    LeaseLost,
    Outcome,
    RunNotFound,
    RunStatus,
    Store,
    StoreError,
)
from golem.durable.store.sqlite import SQLiteStore
from golem.service import Approver, AuthConfig, ServiceSettings, create_app
from tests.support.agents import build_registry
from tests.support.durable.backends import backend_for
from tests.support.durable.runs import approval, make_run

Op = Callable[[Store, Any], Awaitable[object]]

RUN_OPS: dict[str, Op] = {
    "get_run": lambda s, r: s.get_run(r),
    "decide": lambda s, r: s.decide(r, "c1", Decision.approve(), decided_by="bob"),
    "renew_lease": lambda s, r: s.renew_lease(r, "w", 10),
    "finish": lambda s, r: s.finish(r, "w", Outcome.completed("ok")),
    "retry_interrupted": lambda s, r: s.retry_interrupted(r, resolved_by="ops", note="x"),
    "cancel_interrupted": lambda s, r: s.cancel_interrupted(r, resolved_by="ops", note="x"),
    "audit": lambda s, r: s.audit(r),
}


async def _saved(store: Store, run_id: str = "123") -> str:
    return (await store.save_pending(make_run(approval("c1"), id=run_id))).id


@pytest.mark.parametrize("op", RUN_OPS)
@pytest.mark.parametrize(
    ("bad", "error"),
    [(123, TypeError), (None, TypeError), (b"123", TypeError), (["123"], TypeError),
     ("12\x003", RunNotFound), ("12\udc803", RunNotFound)],
    ids=["int", "none", "bytes", "list", "nul", "surrogate"],
)  # fmt: skip
async def test_a_run_id_is_a_str_some_row_can_hold(
    store: Store, op: str, bad: object, error: type[Exception]
) -> None:
    await _saved(store, "123")  # an integer 123 must not reach the run "123"
    with pytest.raises(error, match="run_id must be a str" if error is TypeError else None):
        await RUN_OPS[op](store, bad)
    run = await store.get_run("123")
    assert (run.status, run.calls[0].decision) == (RunStatus.PENDING, None)


@pytest.mark.parametrize("bad", [5, None, "c\x001", "c\udc801"], ids=["int", "none", "nul", "sur"])
async def test_a_call_id_is_a_str_some_row_can_hold(store: Store, bad: Any) -> None:
    run_id = await _saved(store)
    if isinstance(bad, str):
        with pytest.raises(CallNotFound):
            await store.decide(run_id, bad, Decision.approve(), decided_by="bob")
        with pytest.raises(RunNotFound):  # the run is looked for first, as for any call ID
            await store.decide("nope", bad, Decision.approve(), decided_by="bob")
    else:
        with pytest.raises(TypeError, match="call_id must be a str"):
            await store.decide(run_id, bad, Decision.approve(), decided_by="bob")
        with pytest.raises(TypeError, match="confirm_calls must be a str"):
            await store.retry_interrupted(run_id, resolved_by="o", note="x", confirm_calls=[bad])
    assert (await store.get_run(run_id)).status is RunStatus.PENDING


FORMS = [("c\u00e9", "ce\u0301"), ("ce\u0301", "c\u00e9"), ("\u212b", "\u00c5"), ("\ufb01", "fi")]


@pytest.mark.parametrize(("stored", "decided"), FORMS, ids=["nfc-nfd", "nfd-nfc", "angstrom", "fi"])
async def test_call_ids_are_matched_exactly_not_by_unicode_form(
    store: Store, stored: str, decided: str
) -> None:
    assert unicodedata.normalize("NFKC", stored) == unicodedata.normalize("NFKC", decided)
    run = await store.save_pending(make_run(approval(stored)))
    with pytest.raises(CallNotFound):
        await store.decide(run.id, decided, Decision.approve(), decided_by="mallory")
    got = await store.get_run(run.id)
    assert [(c.call_id, c.decision) for c in got.calls] == [(stored, None)]
    await store.decide(run.id, stored, Decision.approve(), decided_by="bob")
    assert (await store.get_run(run.id)).status is RunStatus.READY


async def test_worker_ids_and_filters_are_checked_alike(store: Store) -> None:
    run_id = await _saved(store)
    await store.decide(run_id, "c1", Decision.approve(), decided_by="bob")
    for call, match in [
        (lambda: store.claim_ready(7, 10), "worker_id must be a str"),
        (lambda: store.claim_ready("w", 10, agents=[7]), "agents must be a str"),
        (lambda: store.list_runs_page(lease_owner=5), "lease_owner must be a str"),
        (lambda: store.list_runs(conversation_id=5), "conversation_id must be a str"),
        (lambda: store.get_run(run_id, agents=[5]), "agents must be a str"),
    ]:
        with pytest.raises(TypeError, match=match):
            await call()  # type: ignore[no-untyped-call]
    with pytest.raises(ValueError, match="worker_id"):
        await store.claim_ready("w\x00", 10)
    assert await store.claim_ready("w", 10, agents=["a\x00"]) is None
    assert await store.claim_ready("w", 10) is not None
    with pytest.raises(TypeError, match="worker_id must be a str"):
        await store.renew_lease(run_id, 7, 10)  # type: ignore[arg-type]
    with pytest.raises(LeaseLost):
        await store.renew_lease(run_id, "w\x00", 10)
    assert (await store.list_runs_page(lease_owner="w\x00")).items == []
    assert await store.list_runs(conversation_id="c\udc80") == []
    assert (await store.list_pending_calls(tool_name="t\x00")).items == []
    with pytest.raises(RunNotFound):
        await store.get_run(run_id, agents=["a\x00"])


# ------------------------------------------------------------------------------ page cursors


def cursor(value: Any) -> str:
    return raw_cursor(json.dumps(value))


def raw_cursor(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


WHEN = "2030-01-01T12:00:00+00:00"
HOSTILE = {
    "deep": raw_cursor("[" * 100_000),  # was RecursionError
    "position past 64 bits": cursor([WHEN, "x", 10**30]),  # was OverflowError
    "date that does not parse": cursor(["not-a-date", "x"]),
    "naive date": cursor(["2030-01-01T12:00:00", "x"]),
    "lone surrogate": cursor([WHEN, "\ud800"]),
    "NUL": cursor([WHEN, "a\x00b"]),
    "year 0 after its offset": cursor(["0001-01-01T00:00:00+23:59", "x"]),
    "bool position": cursor([WHEN, "x", True]),
    "negative position": cursor([WHEN, "x", -1]),
    "not base64": "!!!",
    "empty": "",
    "huge": "A" * 1_000_000,
}


async def _pages(store: Store, after: str) -> None:
    """Every paged listing answers `after` with a page or a short `InvalidCursor`."""
    for op in (
        lambda: store.list_runs_page(after=after),
        lambda: store.list_runs_page(after=after, newest_first=True),
        lambda: store.list_pending_calls(after=after),
    ):
        refused: InvalidCursor | None = None
        try:
            await op()
        except InvalidCursor as exc:
            refused = exc
        assert refused is None or (isinstance(refused, ValueError) and len(str(refused)) < 200)


@pytest.mark.parametrize("after", list(HOSTILE.values()), ids=list(HOSTILE))
async def test_a_hostile_cursor_is_an_invalid_cursor_or_a_page(store: Store, after: str) -> None:
    await store.save_pending(make_run(approval("c1")))
    await _pages(store, after)


async def test_the_cursors_a_store_returns_still_page(store: Store) -> None:
    runs = [await store.save_pending(make_run(approval("c1"), approval("c2"))) for _ in range(3)]
    seen: list[str] = []
    calls: list[tuple[str, str]] = []
    after = None
    while True:
        page = await store.list_runs_page(limit=1, after=after)
        seen += [r.id for r in page.items]
        if (after := page.next_cursor) is None:
            break
    while True:
        cpage = await store.list_pending_calls(limit=2, after=after)
        calls += [(c.run_id, c.call_id) for c in cpage.items]
        if (after := cpage.next_cursor) is None:
            break
    assert sorted(seen) == sorted(r.id for r in runs)
    assert len(set(calls)) == 6


@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(after=cursor([WHEN, "x"]))
@given(
    after=st.text(max_size=40)
    | st.recursive(
        st.none()
        | st.booleans()
        | st.integers(min_value=-(2**70), max_value=2**70)
        | st.floats()
        | st.text(max_size=30)
        | st.datetimes(timezones=st.none() | st.timezones()).map(lambda d: d.isoformat()),
        lambda inner: st.lists(inner, max_size=3),
        max_leaves=5,
    ).map(lambda v: cursor(v) if not isinstance(v, float) or v == v else cursor(None))
)
async def test_any_cursor_text_is_an_invalid_cursor_or_a_page(
    tmp_path_factory: pytest.TempPathFactory, after: str
) -> None:
    with backend_for("sqlite", tmp_path_factory.mktemp("cursor")) as backend:
        store = await backend.open()
        try:
            await _pages(store, after)
        except StoreError as exc:  # pragma: no cover - what the property forbids
            pytest.fail(f"{type(exc).__name__}: {exc}")
        finally:
            await store.close()


async def test_the_service_answers_a_hostile_cursor_with_422(tmp_path: Any) -> None:
    store = await SQLiteStore.open(tmp_path / "golem.db")
    auth = AuthConfig(
        tokens={"tok": Approver("alice")}, secret=b"test-secret-that-is-32-bytes-long"
    )
    app = create_app(ServiceSettings(build_registry(), store, auth=auth))
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://golem.test"
        ) as client:
            for after in (raw_cursor("[" * 5000), HOSTILE["position past 64 bits"],
                          HOSTILE["lone surrogate"], HOSTILE["NUL"]):  # fmt: skip
                answer = await client.get(
                    "/api/calls", params={"after": after}, headers={"Authorization": "Bearer tok"}
                )
                assert answer.status_code == 422, (after[:40], answer.text[:200])
    finally:
        await store.close()
