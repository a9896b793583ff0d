"""Saving runs and reading them: one transaction per save, get and listing."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any, Self

from golem._tracing import store_op
from golem.durable.store._base import SQLBase
from golem.durable.store._inputs import decode_cursor, encode_cursor, held, texts
from golem.durable.store._rows import (
    C_CALL_COLS,
    OUTCOME_ACTION,
    ROW_FAULTS,
    RUNS_JOIN_CALLS,
    left_out,
    outcome_detail,
)
from golem.durable.store._tx import Tx
from golem.durable.store.records import (
    CorruptRecord,
    NewRun,
    Outcome,
    Page,
    PendingCallRecord,
    RunNotFound,
    RunRecord,
    RunStatus,
)

__all__ = ["RunOps"]


class RunOps(SQLBase):
    """Saving runs and reading them: one transaction per save, get and listing."""

    async def schema_version(self) -> int:
        """Return the schema version of the opened database."""

        def tx_fn(tx: Tx) -> int:
            return int(tx.fetch("SELECT MAX(version) FROM golem_schema_version")[0][0] or 0)

        return await self._submit(False, tx_fn)

    async def _open_now(self) -> Self:
        """This store with its schema created or migrated now (closed again on failure)."""
        try:
            await self.schema_version()
        except BaseException:
            await self.close()
            raise
        return self

    @store_op("save_pending")
    async def save_pending(self, run: NewRun) -> RunRecord:
        """Save a paused run as PENDING (see `Store.save_pending`)."""
        if not run.calls:
            raise ValueError(f'save_pending: run "{run.id}" has no pending calls')
        checked = self._check_new(run)

        def tx_fn(tx: Tx) -> RunRecord:
            return self._insert_run(tx, run, RunStatus.PENDING, self.clock(), None, checked)

        return await self._submit(True, tx_fn)

    @store_op("save_finished")
    async def save_finished(self, run: NewRun, outcome: Outcome) -> RunRecord:
        """Save a run that ended without pausing (see `Store.save_finished`)."""
        if outcome.status not in (RunStatus.COMPLETED, RunStatus.FAILED):
            raise ValueError(
                f"save_finished: outcome must be completed or failed, got {outcome.status.value}"
            )
        if run.calls:
            raise ValueError(f'save_finished: run "{run.id}" has pending calls; use save_pending')
        checked = self._check_new(run)

        def tx_fn(tx: Tx) -> RunRecord:
            now = self.clock()
            record = self._insert_run(tx, run, outcome.status, now, outcome, checked)
            actor, action = run.started_by or "unknown", OUTCOME_ACTION[outcome.status]
            tx.audit(run.id, now, actor, action, outcome_detail(outcome))
            return record

        return await self._submit(True, tx_fn)

    @store_op("get_run")
    async def get_run(self, run_id: str, *, agents: Collection[str] | None = None) -> RunRecord:
        """Return the run (see `Store.get_run`)."""
        if not held("run_id", run_id):
            raise RunNotFound(run_id)
        if agents is not None:
            agents = texts("agents", [agents] if isinstance(agents, str) else agents)
        return await self._submit(False, self._load_run, run_id, agents)

    def _filters(
        self,
        status: RunStatus | Sequence[RunStatus] | None,
        agent: str | Sequence[str] | None,
        conversation_id: str | None,
        tool_name: str | None,
        lease_owner: str | None = None,
    ) -> tuple[list[str], list[Any]] | None:
        """WHERE clauses over `golem_runs r`; None when the filters match nothing."""
        where: list[str] = []
        params: list[Any] = []
        if status is not None:
            statuses = [status] if isinstance(status, str) else list(status)
            if not statuses:
                return None
            where.append(f"r.status IN ({', '.join('?' for _ in statuses)})")
            params.extend(RunStatus(s).value for s in statuses)
        if agent is not None:
            agents = texts("agent", [agent] if isinstance(agent, str) else agent)
            if not agents:
                return None
            where.append(f"r.agent IN ({', '.join('?' for _ in agents)})")
            params.extend(agents)
        for column, name, value in (
            ("r.conversation_id = ?", "conversation_id", conversation_id),
            (
                "EXISTS (SELECT 1 FROM golem_calls t WHERE t.run_id = r.id AND t.tool_name = ?)",
                "tool_name",
                tool_name,
            ),
            ("r.lease_owner = ?", "lease_owner", lease_owner),
        ):
            if value is not None:
                if not held(name, value):
                    return None  # no row holds such text
                where.append(column)
                params.append(value)
        return where, params

    @store_op("list_runs")
    async def list_runs(
        self,
        *,
        status: RunStatus | Sequence[RunStatus] | None = None,
        agent: str | None = None,
        conversation_id: str | None = None,
        tool_name: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[RunRecord]:
        """Return matching runs, newest first (see `Store.list_runs`)."""
        if limit < 0 or offset < 0:
            raise ValueError(f"limit and offset must be >= 0, got {limit} and {offset}")
        filters = self._filters(status, agent, conversation_id, tool_name)
        if filters is None:
            return []
        where, params = filters
        sql = self._select_runs(
            " AND ".join(where) or "1 = 1", "ORDER BY r.created_at DESC, r.id DESC LIMIT ? OFFSET ?"
        )

        def tx_fn(tx: Tx) -> list[RunRecord]:
            return self._load_runs(tx, tx.fetch(sql, [*params, limit, offset]), leave_out=True)

        return await self._submit(False, tx_fn)

    @store_op("list_runs_page")
    async def list_runs_page(
        self,
        *,
        status: RunStatus | Sequence[RunStatus] | None = None,
        agent: str | Sequence[str] | None = None,
        conversation_id: str | None = None,
        tool_name: str | None = None,
        after: str | None = None,
        limit: int = 50,
        newest_first: bool = False,
        lease_owner: str | None = None,
    ) -> Page[RunRecord]:
        """Return one keyset page of matching runs (see `Store.list_runs_page`)."""
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        filters = self._filters(status, agent, conversation_id, tool_name, lease_owner)
        if filters is None:
            return Page([], None)
        where, params = filters
        op, order = ("<", "DESC") if newest_first else (">", "ASC")
        if after is not None:
            created, run_id = decode_cursor(after, (str, str))
            where.append(f"(r.created_at, r.id) {op} (?, ?)")
            params += (self._to_db(created), run_id)
        sql = self._select_runs(
            " AND ".join(where) or "1 = 1", f"ORDER BY r.created_at {order}, r.id {order} LIMIT ?"
        )

        def tx_fn(tx: Tx) -> tuple[list[RunRecord], Any, Any, int]:
            rows = tx.fetch(sql, [*params, limit])
            last = rows[-1] if rows else (None,) * 7
            return self._load_runs(tx, rows, leave_out=True), last[6], last[0], len(rows)

        runs, last_created, last_id, read = await self._submit(False, tx_fn)
        cursor = None
        if read == limit:  # from the last row read, left out or not
            cursor = self._page_cursor(runs, last_created, last_id)
        return Page(runs, cursor)

    def _page_cursor(self, runs: list[RunRecord], created: Any, run_id: Any) -> str | None:
        try:
            return encode_cursor(self._from_db(created).isoformat(), str(run_id))
        except ROW_FAULTS:  # the last row's date does not parse: the last readable run's
            return encode_cursor(runs[-1].created_at.isoformat(), runs[-1].id) if runs else None

    @store_op("list_pending_calls")
    async def list_pending_calls(
        self,
        *,
        agent: str | Sequence[str] | None = None,
        tool_name: str | None = None,
        after: str | None = None,
        limit: int = 50,
    ) -> Page[PendingCallRecord]:
        """Return one keyset page of undecided calls of PENDING runs, oldest run first."""
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        filters = self._filters(None, agent, None, None)
        if filters is None:
            return Page([], None)
        where, params = filters
        where += ["r.status = 'pending'", "c.decision IS NULL"]
        if tool_name is not None:
            if not held("tool_name", tool_name):
                return Page([], None)
            where.append("c.tool_name = ?")
            params.append(tool_name)
        if after is not None:
            created, run_id, position = decode_cursor(after, (str, str, int))
            at = self._to_db(created)
            # the first comparison lets the run index seek; the second is the exact cursor
            where.append("(r.created_at, r.id) >= (?, ?)")
            where.append("(r.created_at, r.id, c.position) > (?, ?, ?)")
            params += (at, run_id, at, run_id, position)
        # by tool: the planner may start from the tool's index (a rare tool would make the
        # walk in run order read every pending run); else: the walk, planned as such
        walk = tool_name is None
        source = self._runs_with_calls if walk else RUNS_JOIN_CALLS
        sql = (
            f"SELECT {C_CALL_COLS}, r.created_at FROM {source} WHERE "
            + " AND ".join(where)
            + " ORDER BY r.created_at, r.id, c.position LIMIT ?"
        )
        plan = self._page_plan if walk else ""

        def tx_fn(tx: Tx) -> list[tuple[Any, ...]]:
            if plan:
                tx.run(plan)
            return tx.fetch(sql, [*params, limit])

        rows = await self._submit(False, tx_fn)
        items = []
        for r in rows:
            try:
                items.append(self._call_record(r))
            except CorruptRecord as exc:
                left_out(exc)
        cursor = None
        if len(rows) == limit:
            for last in reversed(rows):  # the last row whose position and date read
                try:
                    at = self._from_db(last[16]).isoformat()
                    cursor = encode_cursor(at, last[0], int(last[2]))
                except ROW_FAULTS:
                    continue
                break
        return Page(items, cursor)
