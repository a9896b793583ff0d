"""The statements PostgreSQL runs instead of the shared ones (ADR 0038, 0044)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from golem.durable.store._base import C_CALL_COLS, Later, Tx, to_json
from golem.durable.store._decisions import FITS, decided_detail
from golem.durable.store._pg_wire import NotPlain, PgConn
from golem.durable.store._sql import SQLStore
from golem.durable.store.records import AuditAction, DecisionRecord
from golem.errors import StoreError


class PgStatements(SQLStore):
    """The hooks of `SQLStore` PostgreSQL answers with statements of its own."""

    channel: str
    ready_channel: str

    _lock_clause = " FOR UPDATE"
    _skip_locked_clause = " FOR UPDATE SKIP LOCKED"
    # A page of calls walks the pending runs in index order and stops at the page's end,
    # whatever the statistics say (missing after a bulk load, stale while autovacuum lags):
    # each run's calls come from a fenced lateral subquery (OFFSET 0: never a join of every
    # pending call, nor a per-run scan of the open-deadline index), and the transaction rules
    # out the plans that read everything and sort (ADR 0044).
    _runs_with_calls = (
        "golem_runs r CROSS JOIN LATERAL "
        "(SELECT * FROM golem_calls c WHERE c.run_id = r.id OFFSET 0) c"
    )
    _contains = "strpos"
    _page_plan = (
        "SELECT set_config('enable_hashjoin', 'off', true), "
        "set_config('enable_mergejoin', 'off', true), "
        "set_config('enable_bitmapscan', 'off', true), "
        "set_config('enable_seqscan', 'off', true), "
        "set_config('enable_sort', 'off', true)"
    )

    def _flush_audit(self, tx: Tx) -> None:
        rows = self._audit_params(tx)
        n = len(rows)
        notice = (self.ready_channel, " ready") if tx.ready else (self.channel, "")
        values = ", ".join(f"({i}, ?, ?::timestamptz, ?, ?, ?)" for i in range(1, n + 1))
        tx.run(
            "WITH s AS (UPDATE golem_audit_seq SET last_id = last_id + ? WHERE singleton = 1 "
            "RETURNING last_id), i AS (INSERT INTO golem_audit "
            f"(id, run_id, at, actor, action, detail, agent) SELECT s.last_id - {n} + v.n, "
            "v.run_id, v.at, v.actor, v.action, v.detail, "
            f"(SELECT r.agent FROM golem_runs r WHERE r.id = v.run_id) FROM s, (VALUES {values}) "
            "AS v(n, run_id, at, actor, action, detail)) "
            "SELECT pg_notify(?, s.last_id::text || ?) FROM s",
            (n, *(v for row in rows for v in row), *notice),
        )

    def _claimed(
        self, tx: Tx, rows: Later, worker_id: str, at: datetime, detail: dict[str, Any]
    ) -> Later:
        # The claimed runs are known only to the server until the commit: both statements
        # find them as the rows this transaction wrote (`xmin`), so the claim is one round
        # trip, and an empty claim takes no audit lock and notifies nobody.
        mine = (
            "SELECT id, created_at, agent FROM golem_runs WHERE status = 'running' "
            "AND updated_at = ? "
            "AND lease_owner = ? AND xmin = pg_current_xact_id()::xid"
        )
        when, actor = self._to_db(at), f"worker:{worker_id}"
        tx.run(
            f"WITH c AS MATERIALIZED ({mine}), n AS (SELECT count(*) AS n FROM c), "
            "s AS (UPDATE golem_audit_seq SET last_id = last_id + n.n FROM n "
            "WHERE singleton = 1 AND n.n > 0 RETURNING last_id, n.n), "
            "i AS (INSERT INTO golem_audit (id, run_id, at, actor, action, detail, agent) "
            # numbered in creation order, ties by ID in byte order, as Python sorts the rows
            "SELECT s.last_id - s.n + row_number() OVER "
            '(ORDER BY c.created_at, c.id COLLATE "C"), c.id, '
            "?::timestamptz, ?, ?, ?, c.agent FROM s, c) "
            "SELECT pg_notify(?, s.last_id::text) FROM s",
            (
                when,
                worker_id,
                when,
                actor,
                AuditAction.CLAIMED.value,
                to_json(detail),
                self.channel,
            ),
        )
        return tx.later(
            f"SELECT h.history, {C_CALL_COLS}, h.run_id FROM golem_histories h "
            "LEFT JOIN golem_calls c ON c.run_id = h.run_id "
            f"WHERE h.run_id IN (SELECT id FROM ({mine}) AS r) ORDER BY h.run_id, c.position",
            (when, worker_id),
        )

    async def _decide_plain(self, record: Callable[[], DecisionRecord]) -> DecisionRecord | None:
        def plain(tx: Tx) -> DecisionRecord:
            d = record()
            self._record_if_plain(tx, d, FITS[d.kind], decided_detail(d, None))
            return d

        try:
            return await self._submit(True, plain)
        except NotPlain:
            return None  # rolled back: `decide` runs its full transaction

    def _record_if_plain(
        self, tx: Tx, d: DecisionRecord, call_kinds: tuple[str, ...], detail: dict[str, Any]
    ) -> None:
        # Four statements in one pipeline, nothing read until the commit. Locking the run
        # first, alone, makes every later statement see each decision committed before
        # (READ COMMITTED takes a snapshot per statement): two approvers deciding a run's
        # two calls at once take turns, and the second one sees the run become ready.
        when = self._to_db(d.decided_at)
        tx.run(
            "SELECT 1 FROM golem_runs WHERE id = ? AND status = 'pending' FOR UPDATE", (d.run_id,)
        )
        kinds = ", ".join("?" for _ in call_kinds)
        decision = (d.kind.value, d.reason, d.text, d.decided_by, when, d.run_id, d.call_id)
        tx.run(
            "UPDATE golem_calls SET decision = ?, decision_reason = ?, decision_text = ?, "
            "decided_by = ?, decided_at = ?, decision_args = NULL "
            "WHERE run_id = ? AND call_id = ? AND decision IS NULL "
            f"AND kind IN ({kinds}) AND (deadline IS NULL OR deadline > ?) "
            "AND EXISTS (SELECT 1 FROM golem_runs WHERE id = ? AND status = 'pending')",
            (*decision, *call_kinds, when, d.run_id),
        )
        conn = tx.conn
        assert isinstance(conn, PgConn)
        conn.guard(
            "SELECT 1 / (SELECT count(*) FROM golem_calls "
            "WHERE run_id = ? AND call_id = ? AND xmin = pg_current_xact_id()::xid)",
            (d.run_id, d.call_id),
            NotPlain(),
        )
        # the run's new status, its audit entries (DECIDED, then READY when no call is left
        # undecided) and the notice, as `decide`'s full transaction writes them
        tx.run(
            "WITH u AS (UPDATE golem_runs SET status = CASE WHEN EXISTS (SELECT 1 FROM "
            "golem_calls WHERE run_id = ? AND decision IS NULL) THEN 'pending' ELSE 'ready' "
            "END, updated_at = ? WHERE id = ? RETURNING status = 'ready' AS ready, agent), "
            "n AS (SELECT u.ready, CASE WHEN u.ready THEN 2 ELSE 1 END AS n FROM u), "
            "s AS (UPDATE golem_audit_seq SET last_id = last_id + n.n FROM n "
            "WHERE singleton = 1 RETURNING last_id, n.n, n.ready), "
            "i AS (INSERT INTO golem_audit (id, run_id, at, actor, action, detail, agent) "
            "SELECT s.last_id - s.n + v.k, ?, ?::timestamptz, ?, v.action, v.detail, u.agent "
            "FROM s, u, (VALUES (1, ?, ?), (2, ?, '{}')) AS v(k, action, detail) "
            "WHERE v.k <= s.n) "
            "SELECT pg_notify(CASE WHEN s.ready THEN ? ELSE ? END, "
            "s.last_id::text || CASE WHEN s.ready THEN ' ready' ELSE '' END) FROM s",
            (
                *(d.run_id, when, d.run_id, d.run_id, when, d.decided_by),
                *(AuditAction.DECIDED.value, to_json(detail), AuditAction.READY.value),
                *(self.ready_channel, self.channel),
            ),
        )

    async def _probe(self) -> int:
        return await self._submit(False, self._last_change_id)

    def _to_db(self, value: datetime) -> datetime:
        return value.astimezone(UTC)

    def _from_db(self, value: Any) -> datetime:
        if not isinstance(value, datetime):
            raise StoreError(f"postgresql returned {value!r} where a timestamp was expected")
        return value.astimezone(UTC)
