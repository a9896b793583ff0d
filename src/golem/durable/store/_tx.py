"""The driver port: `Conn` (`fetch`, `execute`, `run`, `later`, `require_run_changed`)
and `Tx`, the transaction function's view (ADR 0079)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from golem.durable.store._schema import SchemaConn
from golem.durable.store.records import AuditAction

__all__ = ["AuditRow", "Conn", "Later", "Stats", "Tx", "utc_now"]


def utc_now() -> datetime:
    """The current time as a timezone-aware UTC datetime."""
    return datetime.now(UTC)


class Later:
    """The rows of a statement sent without waiting; reading them inside the transaction waits."""

    __slots__ = ("_rows", "_wait")

    def __init__(
        self, rows: list[tuple[Any, ...]] | None = None, wait: Callable[[], object] | None = None
    ) -> None:
        self._rows = rows
        self._wait = wait

    def set(self, rows: list[tuple[Any, ...]] | None) -> None:
        """Record the rows (None: the statement produced none); never wait again."""
        self._rows = rows
        self._wait = None  # the connection may serve another transaction by now

    @property
    def rows(self) -> list[tuple[Any, ...]]:
        if self._rows is None and self._wait is not None:
            self._wait()
        if self._rows is None:
            raise RuntimeError("the statement's rows never arrived (its transaction failed)")
        return self._rows


class Conn(SchemaConn, Protocol):
    """One open transaction of a backend (`?` placeholders), used by one transaction at a time."""

    def run(self, sql: str, params: Sequence[Any] = (), conflict: Exception | None = None) -> None:
        """Run a statement whose result is not needed (may be deferred to the commit).

        With `conflict`, a unique-constraint violation by this statement raises `conflict`.
        """
        ...

    def later(self, sql: str, params: Sequence[Any] = ()) -> Later:
        """Run a query whose rows are needed only after the commit (may be deferred)."""
        ...

    def require_run_changed(self, rows: Later, run_id: str, error: Exception) -> None:
        """Fail the transaction with `error` unless the `UPDATE golem_runs … RETURNING`
        behind `rows` changed the run `run_id` (may be checked only at the commit)."""
        ...


AuditRow = tuple[str, datetime, str, AuditAction, dict[str, Any]]


class Tx:
    """A transaction plus the audit entries it appends just before commit."""

    __slots__ = ("conn", "entries", "last_id", "ready")

    def __init__(self, conn: Conn) -> None:
        self.conn = conn
        self.entries: list[AuditRow] = []
        self.last_id = 0
        self.ready = False

    def fetch(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self.conn.fetch(sql, params)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        return self.conn.execute(sql, params)

    def run(self, sql: str, params: Sequence[Any] = (), conflict: Exception | None = None) -> None:
        self.conn.run(sql, params, conflict)

    def later(self, sql: str, params: Sequence[Any] = ()) -> Later:
        return self.conn.later(sql, params)

    def require_run_changed(self, rows: Later, run_id: str, error: Exception) -> None:
        self.conn.require_run_changed(rows, run_id, error)

    def audit(
        self,
        run_id: str,
        at: datetime,
        actor: str,
        action: AuditAction,
        detail: dict[str, Any] | None = None,
    ) -> None:
        self.entries.append((run_id, at, actor, action, detail or {}))
        if action is AuditAction.READY:
            self.ready = True


@dataclass(slots=True)
class Stats:
    """Counters of what the store sent to its database (for benchmarks and tests)."""

    transactions: int = 0
    commits: int = 0
    statements: int = 0
    round_trips: int = 0
    retried_batches: int = 0
