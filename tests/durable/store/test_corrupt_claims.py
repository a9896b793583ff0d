"""A claimed run whose stored record cannot be read is set aside, not re-claimed (ADR 0072)."""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from golem.durable.store import AuditAction, CorruptRecord, Decision, RunStatus, Store
from tests.support.durable.backends import BACKENDS, Backend, backend_for
from tests.support.durable.runs import approval, later, make_run
from tests.support.store import corrupt

pytestmark = pytest.mark.version

LEASE = 30.0


def _status(backend: Backend, run_id: str) -> str:
    """The run's stored status, read behind the store's back."""
    sql = "SELECT status FROM golem_runs WHERE id = %s"
    if backend.kind == "sqlite":
        assert backend.path is not None
        with contextlib.closing(sqlite3.connect(backend.path)) as db:
            return str(db.execute(sql.replace("%s", "?"), (run_id,)).fetchone()[0])
    import psycopg

    assert backend.dsn is not None
    with psycopg.connect(backend.dsn, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{backend.schema}"')
        row = conn.execute(sql.encode(), (run_id,)).fetchone()  # type: ignore[call-overload]
        assert row is not None
        return str(row[0])


async def _ready(store: Store, **kw: Any) -> str:
    run = make_run(approval("c1"), **kw)
    await store.save_pending(run)
    await store.decide(run.id, "c1", Decision.approve(), decided_by="bob")
    return run.id


def _about(caplog: pytest.LogCaptureFixture, run_id: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if run_id in r.getMessage()]


@pytest.mark.parametrize("backend_kind", BACKENDS)
async def test_a_claimed_run_that_cannot_be_read_is_claimed_once_and_kept_for_the_operator(
    backend_kind: str, tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="golem")
    with backend_for(backend_kind, tmp_path) as backend:
        store = await backend.open()
        try:
            bad = await _ready(store)
            good = await _ready(store)
            corrupt(backend, "golem_calls", "kind", "'weird'", bad)

            claimed = await store.claim_ready_many("w1", LEASE, limit=5, now=later(0))
            assert [c.run.id for c in claimed] == [good]  # the other run is unaffected
            assert _status(backend, bad) == "interrupted"
            logged = _about(caplog, bad)
            assert len(logged) == 1, logged
            assert "marked interrupted" in logged[0]

            # N leases later, with sweeps between: never claimed or logged again
            for i in range(1, 5):
                assert await store.sweep_interrupted(later(i * 100)) in ([], [good])
                assert await store.claim_ready("w2", LEASE, now=later(i * 100 + 1)) is None
            assert len(_about(caplog, bad)) == 1
            audit = await store.audit(bad)
            actions = [e.action for e in audit]
            assert actions.count(AuditAction.CLAIMED) == 1
            assert actions[-1] is AuditAction.INTERRUPTED
            assert "weird" in audit[-1].detail["unreadable"]
            assert audit[-1].detail["worker_id"] == "w1"

            # the row is kept: reading it names the fault; nothing re-queues it unrepaired
            with pytest.raises(CorruptRecord):
                await store.get_run(bad)
            with pytest.raises(CorruptRecord):
                await store.retry_interrupted(
                    bad, resolved_by="ops", note="try", confirm_calls=["c1"]
                )
            assert _status(backend, bad) == "interrupted"

            # repaired, it shows why it was set aside, and the operator re-queues it
            corrupt(backend, "golem_calls", "kind", "'approval'", bad)
            run = await store.get_run(bad)
            assert run.status is RunStatus.INTERRUPTED
            assert run.outcome is not None
            assert "cannot be read" in run.outcome.error
            assert "no call ran" in run.outcome.error
            retried = await store.retry_interrupted(
                bad, resolved_by="ops", note="fixed the call kind", confirm_calls=["c1"]
            )
            assert retried.status is RunStatus.READY
            assert retried.attempt == 2
            again = await store.claim_ready("w3", LEASE, now=later(1000))
            assert again is not None
            assert again.run.id == bad
        finally:
            await store.close()


@pytest.mark.parametrize("backend_kind", BACKENDS)
async def test_a_fault_of_the_reader_only_never_sets_a_run_aside(
    backend_kind: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deeply nested deps_ref golem wrote raises RecursionError only in a reader whose
    stack is deep: that run is left to its lease (as before), never marked interrupted."""
    with backend_for(backend_kind, tmp_path) as backend:
        store = await backend.open()
        try:
            run_id = await _ready(store, deps_ref={"a": ["too deep here"]})
            decode = msgspec.json.decode

            def too_deep(text: Any, *args: Any, **kwargs: Any) -> Any:
                if "too deep here" in (text if isinstance(text, str) else str(text)):
                    raise RecursionError("maximum recursion depth exceeded")
                return decode(text, *args, **kwargs)

            monkeypatch.setattr(msgspec.json, "decode", too_deep)
            assert await store.claim_ready("w1", LEASE, now=later(0)) is None
            assert _status(backend, run_id) == "running"
            monkeypatch.undo()
            actions = [e.action for e in await store.audit(run_id)]
            assert AuditAction.INTERRUPTED not in actions
        finally:
            await store.close()


@pytest.mark.parametrize("backend_kind", BACKENDS)
@pytest.mark.parametrize(
    ("deps_ref", "set_aside"),
    [("[" * 3000 + "]" * 3000, False), ("[" * 3000, True), ("[" * 20_000 + "]" * 20_000, True)],
    ids=["deep-valid", "deep-unclosed", "past-any-reader"],
)
async def test_a_deps_ref_too_deep_to_parse_is_set_aside_only_when_it_is_not_json(
    backend_kind: str, tmp_path: Any, deps_ref: str, set_aside: bool
) -> None:
    """Valid JSON 3,000 deep is what a reader with a deeper stack (or a raised recursion
    limit) reads — Python 3.13's `json` reads it, 3.11's raises RecursionError — so the run
    is claimed where this Python reads it and left to its lease where it does not, never set
    aside; text that is not JSON, or nests past 10,000, no reader reads."""
    try:  # as the store reads JSON: msgspec, then the standard library's parser
        try:
            msgspec.json.decode(deps_ref)
        except (msgspec.DecodeError, ValueError):
            json.loads(deps_ref)
        readable = True
    except (RecursionError, ValueError):
        readable = False
    with backend_for(backend_kind, tmp_path) as backend:
        store = await backend.open()
        try:
            run_id = await _ready(store)
            corrupt(backend, "golem_runs", "deps_ref", f"'{deps_ref}'", run_id)
            claimed = await store.claim_ready("w1", LEASE, now=later(0))
            if readable:
                assert not set_aside
                assert claimed is not None
                assert claimed.run.id == run_id
            else:
                assert claimed is None
            assert _status(backend, run_id) == ("interrupted" if set_aside else "running")
        finally:
            await store.close()


@pytest.mark.parametrize("backend_kind", BACKENDS)
async def test_a_large_run_is_claimed_as_usual(backend_kind: str, tmp_path: Any) -> None:
    deep: Any = "x"
    for _ in range(200):
        deep = [deep]
    history = '[{"role":"user","content":"' + "y" * 3_000_000 + '"}]'
    with backend_for(backend_kind, tmp_path) as backend:
        store = await backend.open()
        try:
            run_id = await _ready(store, history=history, deps_ref={"deep": deep})
            claimed = await store.claim_ready("w1", LEASE, now=later(0))
            assert claimed is not None
            assert claimed.run.id == run_id
            assert len(claimed.run.history) == len(history)
        finally:
            await store.close()


_COLUMNS = [
    ("golem_runs", "deps_ref"),
    ("golem_runs", "attempt"),
    ("golem_runs", "created_at"),
    ("golem_runs", "expires_at"),
    ("golem_runs", "conversation_id"),
    ("golem_calls", "kind"),
    ("golem_calls", "position"),
    ("golem_calls", "deadline"),
    ("golem_calls", "decision"),
    ("golem_calls", "decided_at"),
    ("golem_calls", "args"),
]


@settings(
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    where=st.sampled_from(_COLUMNS),
    text=st.text(max_size=12) | st.sampled_from(["[" * 5000, "1e999999", "9" * 5000, "null"]),
    expiries=st.integers(1, 4),
)
async def test_no_run_is_claimed_twice_and_an_unreadable_one_is_set_aside(
    tmp_path_factory: pytest.TempPathFactory, where: tuple[str, str], text: str, expiries: int
) -> None:
    """Whatever one column of a ready run holds: across lease expiries and sweeps the run is
    claimed exactly once; it is handed to the worker when it reads, else set aside
    (interrupted, the fault in its audit entry)."""
    table, column = where
    quoted = "'" + text.replace("\x00", "").replace("'", "''") + "'"
    with backend_for("sqlite", tmp_path_factory.mktemp("claims")) as backend:
        store = await backend.open()
        try:
            run_id = await _ready(store)
            corrupt(backend, table, column, quoted, run_id)
            readable = True
            try:
                await store.get_run(run_id)
            except CorruptRecord:
                readable = False
            got = await store.claim_ready("w1", LEASE, now=later(0))
            assert (got is not None) is readable
            for i in range(1, expiries + 1):
                await store.sweep_interrupted(later(i * 100))
                assert await store.claim_ready("w2", LEASE, now=later(i * 100 + 1)) is None
            assert _status(backend, run_id) == "interrupted"
            audit = await store.audit(run_id)
            assert [e.action for e in audit].count(AuditAction.CLAIMED) == 1
            interrupted = [e for e in audit if e.action is AuditAction.INTERRUPTED]
            assert len(interrupted) == 1
            assert ("unreadable" in interrupted[0].detail) is not readable
        finally:
            await store.close()


def test_the_operator_sees_why_and_re_queues_it_from_the_terminal(tmp_path: Any) -> None:
    """`golem show` names the fault of a set-aside run; once the row is repaired it shows
    the run interrupted with the reason, and `golem resolve --retry` makes it ready."""
    import asyncio

    from typer.testing import CliRunner

    from golem.cli.commands import build_app

    with backend_for("sqlite", tmp_path) as backend:
        db = f"sqlite:///{backend.path}"

        async def claim_corrupt() -> str:
            store = await backend.open()
            try:
                run_id = await _ready(store)
                corrupt(backend, "golem_calls", "kind", "'weird'", run_id)
                assert await store.claim_ready("w1", LEASE) is None
                return run_id
            finally:
                await store.close()

        run_id = asyncio.run(claim_corrupt())
        runner = CliRunner()
        env = {"GOLEM_DB": db, "COLUMNS": "300"}
        out = runner.invoke(build_app(), ["show", run_id], env=env, catch_exceptions=False)
        assert out.exit_code == 1
        assert "cannot be read" in out.output
        assert "weird" in out.output
        out = runner.invoke(
            build_app(),
            ["resolve", run_id, "--retry", "--confirm", "c1", "--note", "unrepaired"],
            env=env,
            catch_exceptions=False,
        )
        assert out.exit_code == 1  # a named error; nothing changed
        assert _status(backend, run_id) == "interrupted"

        corrupt(backend, "golem_calls", "kind", "'approval'", run_id)
        out = runner.invoke(build_app(), ["show", run_id], env=env, catch_exceptions=False)
        assert out.exit_code == 0, out.output
        assert "interrupted" in out.output
        assert "no call ran" in out.output
        out = runner.invoke(
            build_app(),
            ["resolve", run_id, "--retry", "--confirm", "c1", "--note", "fixed the kind"],
            env=env,
            catch_exceptions=False,
        )
        assert out.exit_code == 0, out.output
        assert f"run {run_id} is ready for attempt 2" in out.output
        assert _status(backend, run_id) == "ready"
