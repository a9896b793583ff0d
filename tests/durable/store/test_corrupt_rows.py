"""A stored row no golem wrote: reading that run is a `CorruptRecord` naming it, and every other
run stays readable — listed, paged, claimed, swept and in the change feed (ADR 0070)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from golem.durable.store import CorruptRecord, Decision, Store
from golem.errors import GolemError, StoreError
from tests.support.durable.backends import BACKENDS, Backend, backend_for
from tests.support.durable.runs import approval, make_run
from tests.support.store import corrupt

# (table, column, SQL value, backends it can be written on: PostgreSQL columns are typed)
CASES = [
    ("golem_runs", "status", "'bogus'", ("sqlite", "postgres")),
    ("golem_runs", "deps_ref", "'{not json'", ("sqlite", "postgres")),
    ("golem_runs", "attempt", "'abc'", ("sqlite",)),
    ("golem_runs", "created_at", "'yesterday'", ("sqlite",)),
    ("golem_runs", "expires_at", "'x'", ("sqlite",)),
    ("golem_calls", "kind", "'weird'", ("sqlite", "postgres")),
    ("golem_calls", "position", "'p'", ("sqlite",)),
    ("golem_calls", "deadline", "'never'", ("sqlite",)),
    ("golem_calls", "decision", "'maybe'", ("sqlite", "postgres")),
    ("golem_calls", "decided_at", "'x'", ("sqlite",)),
    ("golem_audit", "action", "'explode'", ("sqlite", "postgres")),
    ("golem_audit", "detail", "'{bad'", ("sqlite", "postgres")),
    ("golem_audit", "at", "'zz'", ("sqlite",)),
]


async def _named(op: Any) -> Any:
    """The op's value, or the named error it raised (a bare one fails the test)."""
    try:
        return await op
    except GolemError as exc:
        return exc


async def _check(store: Store, backend: Backend, table: str, column: str, value: str) -> None:
    good, bad, other = (make_run(approval("c1")) for _ in range(3))
    for run in (good, bad, other):
        await store.save_pending(run)
    for run in (bad, other):  # ready: a worker would claim them
        await store.decide(run.id, "c1", Decision.approve(), decided_by="bob")
    corrupt(backend, table, column, value, bad.id)

    # the bad run: a named error (CorruptRecord names it) or, for a column it does not need, fine
    got = await _named(store.get_run(bad.id))
    if isinstance(got, GolemError):
        assert isinstance(got, CorruptRecord)
        assert got.run_id == bad.id
        assert bad.id in str(got)
    for op in (
        store.audit(bad.id),
        store.decide(bad.id, "c1", Decision.deny("no"), decided_by="eve"),
        store.sweep_expired(),
    ):
        got = await _named(op)
        assert not isinstance(got, GolemError) or isinstance(got, StoreError)

    # every other run: readable, listed, paged, fed, claimed
    for run in (good, other):
        assert (await store.get_run(run.id)).id == run.id
        assert await store.audit(run.id)
    listed = {r.id for r in await store.list_runs()}
    assert {good.id, other.id} <= listed
    paged: set[str] = set()
    after = None
    for _ in range(10):
        page = await store.list_runs_page(limit=1, after=after)
        paged |= {r.id for r in page.items}
        after = page.next_cursor
        if after is None:
            break
    assert {good.id, other.id} <= paged
    pending = await store.list_pending_calls()
    assert good.id in {c.run_id for c in pending.items}
    fed = {e.run_id for e in await store.changes_since(0, limit=1000)}
    assert {good.id, other.id} <= fed
    claimed: set[str] = set()
    for _ in range(3):  # a claimed corrupt run is left out (its lease runs out); others come
        claim = await store.claim_ready("w1", lease_seconds=60)
        if claim is not None:
            claimed.add(claim.run.id)
    assert other.id in claimed


@pytest.mark.parametrize("backend_kind", BACKENDS)
@pytest.mark.parametrize(
    ("table", "column", "value", "kinds"), CASES, ids=[f"{t}.{c}" for t, c, _, _ in CASES]
)
async def test_a_corrupt_row_is_named_and_leaves_the_other_runs_readable(
    backend_kind: str,
    table: str,
    column: str,
    value: str,
    kinds: tuple[str, ...],
    tmp_path: Any,
) -> None:
    if backend_kind not in kinds:
        pytest.skip(f"{column} is typed on {backend_kind}")
    with backend_for(backend_kind, tmp_path) as backend:
        store = await backend.open()
        try:
            await _check(store, backend, table, column, value)
        finally:
            await store.close()


_TEXT_COLUMNS = [
    ("golem_runs", "status"),
    ("golem_runs", "deps_ref"),
    ("golem_calls", "kind"),
    ("golem_calls", "decision"),
    ("golem_calls", "deadline"),
    ("golem_audit", "action"),
    ("golem_audit", "detail"),
    ("golem_audit", "at"),
]


@settings(
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    where=st.sampled_from(_TEXT_COLUMNS),
    text=st.text(max_size=12)
    | st.sampled_from(["[" * 5000, "1e999999", "9" * 5000, "null", '"x"']),
)
async def test_any_text_in_a_column_is_named_or_read(
    tmp_path_factory: pytest.TempPathFactory, where: tuple[str, str], text: str
) -> None:
    table, column = where
    quoted = "'" + text.replace("\x00", "").replace("'", "''") + "'"
    with backend_for("sqlite", tmp_path_factory.mktemp("corrupt")) as backend:
        store = await backend.open()
        try:
            await _check(store, backend, table, column, quoted)
        finally:
            await store.close()


@pytest.mark.parametrize("backend_kind", BACKENDS)
async def test_a_deps_ref_nested_past_jsons_stack_is_refused_before_saving(
    backend_kind: str, tmp_path: Any
) -> None:
    """It was a bare RecursionError out of save_pending; now the ValueError every deps_ref that
    is not JSON gets, and nothing is saved."""
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    with backend_for(backend_kind, tmp_path) as backend:
        store = await backend.open()
        try:
            run = make_run(approval("c1"), deps_ref=deep)
            with pytest.raises(ValueError, match="deps_ref is not JSON-serializable"):
                await store.save_pending(run)
            assert await store.list_runs() == []
        finally:
            await store.close()
