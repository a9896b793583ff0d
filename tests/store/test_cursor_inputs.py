"""Page cursors from outside (`?after=` of the service): any text is a page or an
`InvalidCursor` (a `StoreError`, still a `ValueError`), never a bare error (ADR 0070).

Before, a cursor that decoded to deeply nested JSON raised `RecursionError`, one whose position
was past 64 bits `OverflowError`, and one with a date that does not parse, a lone surrogate or
a naive date a bare `ValueError` with the parser's words (the service's `?after=` checks kept
most of them from the store; a direct caller of the store got them all).
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from golem.durable.store import InvalidCursor, Store, StoreError
from tests.store.backends import BACKENDS, backend_for
from tests.store.runs import approval, make_run


def cursor(value: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


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
        if refused is not None:
            assert isinstance(refused, ValueError)
            assert len(str(refused)) < 200


@pytest.mark.parametrize("backend_kind", BACKENDS)
@pytest.mark.parametrize("after", list(HOSTILE.values()), ids=list(HOSTILE))
async def test_a_hostile_cursor_is_an_invalid_cursor_or_a_page(
    backend_kind: str, after: str, tmp_path: Any
) -> None:
    with backend_for(backend_kind, tmp_path) as backend:
        store = await backend.open()
        try:
            await store.save_pending(make_run(approval("c1")))
            await _pages(store, after)
        finally:
            await store.close()


@pytest.mark.parametrize("backend_kind", BACKENDS)
async def test_the_cursors_a_store_returns_still_page(backend_kind: str, tmp_path: Any) -> None:
    with backend_for(backend_kind, tmp_path) as backend:
        store = await backend.open()
        try:
            runs = [make_run(approval("c1"), approval("c2")) for _ in range(3)]
            for run in runs:
                await store.save_pending(run)
            seen, after = [], None
            for _ in range(10):
                page = await store.list_runs_page(limit=1, after=after)
                seen += [r.id for r in page.items]
                if page.next_cursor is None:
                    break
                after = page.next_cursor
            assert sorted(seen) == sorted(r.id for r in runs)
            calls, after = [], None
            for _ in range(10):
                cpage = await store.list_pending_calls(limit=2, after=after)
                calls += [(c.run_id, c.call_id) for c in cpage.items]
                if cpage.next_cursor is None:
                    break
                after = cpage.next_cursor
            assert len(calls) == 6
        finally:
            await store.close()


@settings(
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
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
            try:
                await _pages(store, after)
            except StoreError as exc:  # pragma: no cover - what the property forbids
                pytest.fail(f"{type(exc).__name__}: {exc}")
        finally:
            await store.close()


async def test_the_service_answers_a_hostile_cursor_with_422(tmp_path: Any) -> None:
    """Through `?after=`: a client error. (The service's own checks already kept the deep and
    out-of-range cursors from the store; a NUL in the ID was a 200 with an empty page.)"""
    import httpx

    from golem.durable.store.sqlite import SQLiteStore
    from golem.service import ServiceSettings, create_app
    from tests.support.agents import build_registry
    from tests.support.service import bearer, make_auth

    store = await SQLiteStore.open(tmp_path / "golem.db")
    try:
        app = create_app(ServiceSettings(build_registry(), store, auth=make_auth()))
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://golem.test") as client:
            for after in (
                raw_cursor("[" * 5000),
                HOSTILE["position past 64 bits"],
                HOSTILE["lone surrogate"],
                HOSTILE["NUL"],
            ):
                answer = await client.get(
                    "/api/calls", params={"after": after}, headers=bearer("alice")
                )
                assert answer.status_code == 422, (after[:40], answer.text[:200])
    finally:
        await store.close()
