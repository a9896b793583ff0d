"""Reading the audit log: a run's entries, the change feed's pages, audit pages."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from golem._tracing import store_op
from golem.durable.store._base import SQLBase
from golem.durable.store._inputs import held, texts
from golem.durable.store._rows import AUDIT_COLS, AUDIT_COLS_A, left_out
from golem.durable.store._tx import Tx
from golem.durable.store.records import (
    AuditAction,
    AuditEntry,
    AuditPage,
    CorruptRecord,
    RunNotFound,
)

__all__ = ["AuditOps"]


_MAX_ID = 2**63 - 1

_AGENT_ARMS = 32

_FILTER_BATCH = 500


class AuditOps(SQLBase):
    """Reading the audit log: a run's entries, the change feed's pages, audit pages."""

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
