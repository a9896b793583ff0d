"""IDs at the store's boundary: the same named error on every backend (issue 29)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from golem.durable.store import (
    CallNotFound,
    Decision,
    LeaseLost,
    Outcome,
    RunNotFound,
    RunStatus,
    Store,
)
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
    run = await store.save_pending(make_run(approval("c1"), id=run_id))
    return run.id


@pytest.mark.parametrize("op", RUN_OPS, ids=list(RUN_OPS))
@pytest.mark.parametrize("bad", [123, None, b"123", ["123"]], ids=["int", "none", "bytes", "list"])
async def test_a_run_id_that_is_not_a_str_is_a_type_error_and_changes_nothing(
    store: Store, op: str, bad: object
) -> None:
    await _saved(store, "123")  # an integer 123 must not reach the run "123"
    with pytest.raises(TypeError, match="run_id must be a str"):
        await RUN_OPS[op](store, bad)
    run = await store.get_run("123")
    assert (run.status, run.calls[0].decision) == (RunStatus.PENDING, None)


@pytest.mark.parametrize("op", RUN_OPS, ids=list(RUN_OPS))
@pytest.mark.parametrize("bad", ["12\x003", "12\udc803"], ids=["nul", "surrogate"])
async def test_a_run_id_no_database_holds_is_not_found(store: Store, op: str, bad: str) -> None:
    await _saved(store)
    with pytest.raises(RunNotFound):
        await RUN_OPS[op](store, bad)


@pytest.mark.parametrize("bad", [5, None], ids=["int", "none"])
async def test_a_call_id_that_is_not_a_str_is_a_type_error(store: Store, bad: object) -> None:
    run_id = await _saved(store)
    with pytest.raises(TypeError, match="call_id must be a str"):
        await store.decide(run_id, bad, Decision.approve(), decided_by="bob")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="confirm_calls must be a str"):
        await store.retry_interrupted(run_id, resolved_by="o", note="x", confirm_calls=[bad])  # type: ignore[list-item]
    assert (await store.get_run(run_id)).status is RunStatus.PENDING


@pytest.mark.parametrize("bad", ["c\x001", "c\udc801"], ids=["nul", "surrogate"])
async def test_a_call_id_no_database_holds_is_call_not_found(store: Store, bad: str) -> None:
    run_id = await _saved(store)
    with pytest.raises(CallNotFound):
        await store.decide(run_id, bad, Decision.approve(), decided_by="bob")
    with pytest.raises(RunNotFound):  # the run is looked for first, as for any call ID
        await store.decide("nope", bad, Decision.approve(), decided_by="bob")


async def test_worker_ids_and_filters_are_checked_alike(store: Store) -> None:
    run_id = await _saved(store)
    await store.decide(run_id, "c1", Decision.approve(), decided_by="bob")
    with pytest.raises(TypeError, match="worker_id must be a str"):
        await store.claim_ready(7, 10)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="worker_id"):
        await store.claim_ready("w\x00", 10)
    with pytest.raises(TypeError, match="agents must be a str"):
        await store.claim_ready("w", 10, agents=[7])  # type: ignore[list-item]
    assert await store.claim_ready("w", 10, agents=["a\x00"]) is None
    claimed = await store.claim_ready("w", 10)
    assert claimed is not None
    with pytest.raises(TypeError, match="worker_id must be a str"):
        await store.renew_lease(run_id, 7, 10)  # type: ignore[arg-type]
    with pytest.raises(LeaseLost):
        await store.renew_lease(run_id, "w\x00", 10)
    with pytest.raises(TypeError, match="lease_owner must be a str"):
        await store.list_runs_page(lease_owner=5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="conversation_id must be a str"):
        await store.list_runs(conversation_id=5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="agents must be a str"):
        await store.get_run(run_id, agents=[5])  # type: ignore[list-item]
    assert (await store.list_runs_page(lease_owner="w\x00")).items == []
    assert await store.list_runs(conversation_id="c\udc80") == []
    assert (await store.list_pending_calls(tool_name="t\x00")).items == []
    with pytest.raises(RunNotFound):
        await store.get_run(run_id, agents=["a\x00"])
