"""`SQLStore`: every `Store` method as one transaction over the driver port (ADR 0079)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any, Self

from golem._tracing import store_op
from golem.durable.store._base import (
    AUDIT_COLS,
    AUDIT_COLS_A,
    C_CALL_COLS,
    OUTCOME_ACTION,
    ROW_FAULTS,
    RUNS_JOIN_CALLS,
    Conn,
    Later,
    Stats,
    Tx,
    decode_cursor,
    encode_cursor,
    held,
    left_out,
    outcome_detail,
    texts,
)
from golem.durable.store._decisions import DecisionOps
from golem.durable.store._leases import LeaseOps
from golem.durable.store.records import (
    AuditAction,
    AuditEntry,
    AuditPage,
    CorruptRecord,
    NewRun,
    Outcome,
    Page,
    PendingCallRecord,
    RunNotFound,
    RunRecord,
    RunStatus,
)

__all__ = ["Conn", "Later", "SQLStore", "Stats", "Tx"]


_MAX_ID = 2**63 - 1
_AGENT_ARMS = 32
_FILTER_BATCH = 500


class SQLStore(DecisionOps, LeaseOps):
    """Every `Store` method as one transaction over the driver port: saves, reads and the
    audit log here, decisions and leases in their mixins."""

    async def schema_version(self) -> int:
        """Return the schema version of the opened database."""

        def tx_fn(tx: Tx) -> int:
            return int(tx.fetch("SELECT MAX(version) FROM golem_schema_version")[0][0] or 0)

        return await self._submit(False, tx_fn)

    @classmethod
    async def open(cls, *args: Any, **options: Any) -> Self:
        """The store made with `__init__`'s arguments, its schema created or migrated now
        (closed again on failure)."""
        store = cls(*args, **options)
        try:
            await store.schema_version()
        except BaseException:
            await store.close()
            raise
        return store

    @store_op("save_pending")
    async def save_pending(self, run: NewRun) -> RunRecord:
        """Save a paused run as PENDING (see `Store.save_pending`)."""
        if not run.calls:
            raise ValueError(f'save_pending: run "{run.id}" has no pending calls')
        return await self._save(run, None)

    @store_op("save_finished")
    async def save_finished(self, run: NewRun, outcome: Outcome) -> RunRecord:
        """Save a run that ended without pausing (see `Store.save_finished`)."""
        if outcome.status not in (RunStatus.COMPLETED, RunStatus.FAILED):
            raise ValueError(
                f"save_finished: outcome must be completed or failed, got {outcome.status.value}"
            )
        if run.calls:
            raise ValueError(f'save_finished: run "{run.id}" has pending calls; use save_pending')
        return await self._save(run, outcome)

    async def _save(self, run: NewRun, outcome: Outcome | None) -> RunRecord:
        """One transaction: insert `run`, PENDING or as `outcome` ended it (then audited)."""
        checked = self._check_new(run)

        def tx_fn(tx: Tx) -> RunRecord:
            now = self.clock()
            status = RunStatus.PENDING if outcome is None else outcome.status
            record = self._insert_run(tx, run, status, now, outcome, checked)
            if outcome is not None:
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

    @store_op("audit")
    async def audit(self, run_id: str) -> list[AuditEntry]:
        """Return the run's audit entries in order (see `Store.audit`)."""
        if not held("run_id", run_id):
            raise RunNotFound(run_id)

        def tx_fn(tx: Tx) -> list[tuple[Any, ...]]:
            if not self._exists(tx, run_id):
                raise RunNotFound(run_id)
            return tx.fetch(
                f"SELECT {AUDIT_COLS} FROM golem_audit WHERE run_id = ? ORDER BY id", (run_id,)
            )

        return [self._audit_entry(r) for r in await self._submit(False, tx_fn)]

    async def changes_since(self, cursor: int = 0, limit: int = 100) -> list[AuditEntry]:
        """Return audit entries after `cursor` (see `Store.changes_since`)."""
        if limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")

        def tx_fn(tx: Tx) -> list[tuple[Any, ...]]:
            # each entry with its run's agent, status and parent (one primary-key lookup), so
            # that views filtering by agent or status need not read every run
            return tx.fetch(
                "SELECT a.id, a.run_id, a.at, a.actor, a.action, a.detail, r.agent, r.status, "
                "r.parent_run_id "
                "FROM golem_audit a LEFT JOIN golem_runs r ON r.id = a.run_id "
                "WHERE a.id > ? ORDER BY a.id LIMIT ?",
                (cursor, limit),
            )

        entries = []
        for r in await self._submit(False, tx_fn):
            try:
                entries.append(self._audit_entry(r))
            except CorruptRecord as exc:  # the feed goes on past it
                left_out(exc)
        return entries

    @store_op("audit_page")
    async def audit_page(
        self,
        *,
        agents: Collection[str] | None = None,
        action: AuditAction | None = None,
        run_contains: str | None = None,
        actor_contains: str | None = None,
        before: int | None = None,
        limit: int = 100,
        scan: int = 5000,
    ) -> AuditPage:
        """Return one page of matching audit entries, newest first (see `Store.audit_page`)."""
        if limit < 1 or scan < 1:
            raise ValueError(f"limit and scan must be >= 1, got {limit} and {scan}")
        if before is not None and not 0 <= before <= _MAX_ID:
            raise ValueError(f"before must be between 0 and {_MAX_ID}, got {before!r}")
        names = None if agents is None else sorted(set(texts("agents", agents)))
        if names == []:
            return AuditPage([], None)  # no stored agent holds such text
        kind = None if action is None else AuditAction(action).value
        fold = actor_contains.casefold() if actor_contains else None
        part = run_contains or None
        filtered = kind is not None or fold is not None or part is not None
        queries = _audit_walks(names)
        plan = self._page_plan

        def tx_fn(tx: Tx, cursor: int, size: int) -> list[tuple[Any, ...]]:
            if plan:  # each agent's entries walked in index order, statistics or not
                tx.run(plan)
            rows: list[tuple[Any, ...]] = []
            for sql, group in queries:
                args: list[Any] = []
                for name in group:
                    args += [cursor, size] if name is None else [name, cursor, size]
                rows += tx.fetch(sql, args if len(group) == 1 else [*args, size])
            if len(queries) > 1:  # groups of agents: the newest of all of them
                rows.sort(key=lambda r: int(r[0]), reverse=True)
                del rows[size:]
            return rows

        # the filters are matched here, alike on every backend, on the row's plain columns
        # (a row's detail is decoded only when it is shown); a page looks at `limit` + 1
        # entries, or with filters at most `scan` beyond the page's own
        entries: list[AuditEntry] = []
        cursor = _MAX_ID if before is None else before
        budget = limit + 1 + (scan if filtered else 0)
        while budget > 0:
            size = min(budget, max(limit + 1, _FILTER_BATCH) if filtered else budget)
            rows = await self._submit(False, tx_fn, cursor, size)
            budget -= len(rows)
            for r in rows:
                cursor = int(r[0])
                if kind is not None and r[4] != kind:
                    continue
                if part is not None and part not in str(r[1]):
                    continue
                if fold is not None and fold not in str(r[3]).casefold():
                    continue
                if len(entries) == limit:  # one more matches: there is a next page
                    return AuditPage(entries, entries[-1].id)
                try:
                    entries.append(self._audit_entry(r))
                except CorruptRecord as exc:
                    left_out(exc)
            if len(rows) < size:  # the walk reached the start of the log
                return AuditPage(entries, None)
        return AuditPage(entries, cursor)  # looked at `scan` entries: go on from the last

    def _last_change_id(self, tx: Tx) -> int:
        return int(tx.fetch("SELECT last_id FROM golem_audit_seq WHERE singleton = 1")[0][0])

    async def _probe(self) -> int:
        return await self._submit(False, self._last_change_id)

    async def last_change_id(self) -> int:
        """Return the newest audit entry's ID, 0 when none (see `Store.last_change_id`)."""
        newest = await self._submit(False, self._last_change_id)
        self._feed.publish(newest, ready=False)
        return newest


def _audit_walks(names: list[str] | None) -> list[tuple[str, list[str | None]]]:
    """The statements of an audit page's walk, each with the agent of each of its walks
    (None: every agent's entries): one index walk per agent, merged by ID, so a batch reads
    at most its size per agent; more than `_AGENT_ARMS` agents take one statement per group."""
    cols = f"SELECT {AUDIT_COLS_A}, a.agent FROM golem_audit a WHERE "
    walk = "a.id < ? ORDER BY a.id DESC LIMIT ?"
    if names is None:
        return [(f"{cols}a.agent IS NOT NULL AND {walk}", [None])]
    queries: list[tuple[str, list[str | None]]] = []
    for at in range(0, len(names), _AGENT_ARMS):
        group = names[at : at + _AGENT_ARMS]
        if len(group) == 1:
            sql = f"{cols}a.agent = ? AND {walk}"
        else:
            arms = " UNION ALL ".join(
                f"SELECT * FROM ({cols}a.agent = ? AND {walk}) AS p{i}" for i in range(len(group))
            )
            sql = f"SELECT * FROM ({arms}) AS m ORDER BY id DESC LIMIT ?"
        queries.append((sql, list(group)))
    return queries
