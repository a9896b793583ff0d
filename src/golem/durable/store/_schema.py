"""Versioned schema migrations shared by the SQLite and PostgreSQL stores."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from golem.errors import StoreError

__all__ = ["LATEST_VERSION", "MIGRATIONS", "Dialect", "Migration", "SchemaConn", "migrate"]

Dialect = Literal["sqlite", "postgresql"]

_TYPES: dict[Dialect, dict[str, str]] = {
    "sqlite": {"ts": "TEXT", "bigint": "INTEGER"},
    "postgresql": {"ts": "TIMESTAMPTZ", "bigint": "BIGINT"},
}


class SchemaConn(Protocol):
    """The part of a store transaction that migrations use (`?` placeholders)."""

    def fetch(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run a query and return its rows."""
        ...

    def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run a statement and return the number of rows it changed."""
        ...


@dataclass(frozen=True, slots=True)
class Migration:
    """One schema version: what it adds and the statements that add it."""

    version: int
    description: str
    statements: tuple[str, ...]

    def render(self, dialect: Dialect) -> list[str]:
        """Return the statements for `dialect`."""
        return [s.format(**_TYPES[dialect]) for s in self.statements]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "runs, pending calls with decisions, append-only audit log",
        (
            """CREATE TABLE golem_runs (
                id TEXT PRIMARY KEY,
                agent TEXT NOT NULL,
                conversation_id TEXT NOT NULL,
                status TEXT NOT NULL,
                history TEXT NOT NULL,
                deps_ref TEXT NOT NULL,
                started_by TEXT NOT NULL,
                created_at {ts} NOT NULL,
                updated_at {ts} NOT NULL,
                expires_at {ts},
                parent_run_id TEXT,
                child_run_id TEXT,
                lease_owner TEXT,
                lease_expires_at {ts},
                outcome_output TEXT,
                outcome_error TEXT,
                outcome_history TEXT
            )""",
            "CREATE INDEX golem_runs_status ON golem_runs (status, updated_at, id)",
            "CREATE INDEX golem_runs_created ON golem_runs (created_at, id)",
            "CREATE INDEX golem_runs_conversation ON golem_runs (conversation_id, created_at)",
            """CREATE TABLE golem_calls (
                run_id TEXT NOT NULL REFERENCES golem_runs (id),
                call_id TEXT NOT NULL,
                position INTEGER NOT NULL,
                kind TEXT NOT NULL,
                tool_name TEXT NOT NULL,
                args TEXT NOT NULL,
                reason TEXT NOT NULL,
                deadline {ts},
                decision TEXT,
                decision_reason TEXT,
                decision_text TEXT,
                decided_by TEXT,
                decided_at {ts},
                PRIMARY KEY (run_id, call_id)
            )""",
            "CREATE INDEX golem_calls_open_deadline ON golem_calls (deadline) "
            "WHERE decision IS NULL",
            "CREATE INDEX golem_calls_tool ON golem_calls (tool_name, run_id)",
            """CREATE TABLE golem_audit (
                id {bigint} PRIMARY KEY,
                run_id TEXT NOT NULL,
                at {ts} NOT NULL,
                actor TEXT NOT NULL,
                action TEXT NOT NULL,
                detail TEXT NOT NULL
            )""",
            "CREATE INDEX golem_audit_run ON golem_audit (run_id, id)",
            """CREATE TABLE golem_audit_seq (
                singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
                last_id {bigint} NOT NULL
            )""",
            "INSERT INTO golem_audit_seq (singleton, last_id) VALUES (1, 0)",
        ),
    ),
    Migration(
        2,
        "histories move out of the hot runs row; indexes for keyset paging",
        (
            """CREATE TABLE golem_histories (
                run_id TEXT PRIMARY KEY,
                history TEXT NOT NULL,
                outcome_history TEXT
            )""",
            "INSERT INTO golem_histories (run_id, history, outcome_history) "
            "SELECT id, history, outcome_history FROM golem_runs",
            "ALTER TABLE golem_runs DROP COLUMN history",
            "ALTER TABLE golem_runs DROP COLUMN outcome_history",
            "CREATE INDEX golem_runs_status_created ON golem_runs (status, created_at, id)",
            "UPDATE golem_audit_seq SET last_id = "
            "(SELECT COALESCE(MAX(id), 0) FROM golem_audit) WHERE singleton = 1",
        ),
    ),
    Migration(
        3,
        "operator recovery: resume attempts, per-call re-run confirmations",
        (
            "ALTER TABLE golem_runs ADD COLUMN attempt INTEGER NOT NULL DEFAULT 1",
            "ALTER TABLE golem_calls ADD COLUMN rerun_confirmed_by TEXT",
            "ALTER TABLE golem_calls ADD COLUMN decision_args TEXT",
        ),
    ),
    Migration(
        4, "pending calls keep their seal", ("ALTER TABLE golem_calls ADD COLUMN seal TEXT",)
    ),
    Migration(
        5,
        "runs keep the trace context of the span that paused them",
        ("ALTER TABLE golem_runs ADD COLUMN trace_context TEXT",),
    ),
    Migration(
        6,
        "audit entries carry their run's agent, indexed for per-agent audit pages",
        (
            "ALTER TABLE golem_audit ADD COLUMN agent TEXT",
            "UPDATE golem_audit SET agent = "
            "(SELECT r.agent FROM golem_runs r WHERE r.id = golem_audit.run_id)",
            "CREATE INDEX golem_audit_agent ON golem_audit (agent, id)",
        ),
    ),
)

LATEST_VERSION = MIGRATIONS[-1].version

_VERSION_TABLE = """CREATE TABLE IF NOT EXISTS golem_schema_version (
    version INTEGER PRIMARY KEY,
    description TEXT NOT NULL,
    applied_at {ts} NOT NULL
)"""


def migrate(
    conn: SchemaConn, dialect: Dialect, now: Any, migrations: Sequence[Migration] = MIGRATIONS
) -> int:
    """Apply the migrations the database lacks in the caller's exclusive transaction; the
    new version (`StoreError` for a newer database)."""
    conn.execute(_VERSION_TABLE.format(**_TYPES[dialect]))
    rows = conn.fetch("SELECT MAX(version) FROM golem_schema_version")
    current = int(rows[0][0] or 0)
    latest = migrations[-1].version if migrations else 0
    if current > latest:
        raise StoreError(
            f"the database schema is version {current}, newer than this golem knows "
            f"({latest}): upgrade golem-agents"
        )
    for m in migrations:
        if m.version <= current:
            continue
        for statement in m.render(dialect):
            conn.execute(statement)
        conn.execute(
            "INSERT INTO golem_schema_version (version, description, applied_at) VALUES (?, ?, ?)",
            (m.version, m.description, now),
        )
        current = m.version
    return current
