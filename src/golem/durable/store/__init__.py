"""The durable store of paused runs, decisions, leases and the audit log.

```text
pending ──(every call decided)──▶ ready ──claim_ready──▶ running ──finish──▶ completed | paused | failed
   └─ decide / sweep_expired                              └─(lease ran out, sweep_interrupted)──▶ interrupted
```

`interrupted` is terminal: its approved calls may have run, so it is never claimed again
automatically (ADR 0011). Backends: `SQLiteStore` and `PostgresStore`; `open_store(url)` picks
one. Times are aware UTC; a method's optional `now` defaults to the store's `clock()` (ADR 0056).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Protocol, runtime_checkable

from golem.durable.store._base import utc_now
from golem.durable.store._feed import ChangeFeed
from golem.durable.store.records import (
    EXPIRY_ACTOR,
    EXPIRY_REASON,
    MAX_RUN_ID,
    MAX_SECONDS,
    AuditAction,
    AuditEntry,
    AuditPage,
    CallExpired,
    CallKind,
    CallNotFound,
    ClaimedRun,
    CorruptRecord,
    Decision,
    DecisionConflict,
    DecisionKind,
    DecisionRecord,
    InvalidCursor,
    InvalidDecision,
    InvalidRunId,
    LeaseLost,
    NewCall,
    NewRun,
    Outcome,
    Page,
    PendingCallRecord,
    RunNotFound,
    RunNotInterrupted,
    RunNotPending,
    RunRecord,
    RunStatus,
    StoreBusy,
    StoreReadOnly,
    StoreTimeout,
)
from golem.errors import StoreError as StoreError  # importable here; its home is golem.errors

__all__ = [
    "EXPIRY_ACTOR",
    "EXPIRY_REASON",
    "MAX_RUN_ID",
    "MAX_SECONDS",
    "AuditAction",
    "AuditEntry",
    "AuditPage",
    "CallExpired",
    "CallKind",
    "CallNotFound",
    "ChangeFeed",
    "ClaimedRun",
    "CorruptRecord",
    "Decision",
    "DecisionConflict",
    "DecisionKind",
    "DecisionRecord",
    "InvalidCursor",
    "InvalidDecision",
    "InvalidRunId",
    "LeaseLost",
    "NewCall",
    "NewRun",
    "Outcome",
    "Page",
    "PendingCallRecord",
    "RunNotFound",
    "RunNotInterrupted",
    "RunNotPending",
    "RunRecord",
    "RunStatus",
    "Store",
    "StoreBusy",
    "StoreReadOnly",
    "StoreTimeout",
    "open_store",
    "utc_now",
]


@runtime_checkable
class Store(Protocol):
    """The durable store; every method is one transaction (with its audit entries).

    IDs and text filters are `str` (else `TypeError`); an ID no database can hold is not found.
    """

    async def schema_version(self) -> int:
        """The schema version of the opened database."""

    async def save_pending(self, run: NewRun) -> RunRecord:
        """Save a paused run and its calls as PENDING (`ValueError`: no calls, repeats, ID taken)."""

    async def save_finished(self, run: NewRun, outcome: Outcome) -> RunRecord:
        """Save a run that ended without pausing (COMPLETED or FAILED)."""

    async def get_run(self, run_id: str, *, agents: Collection[str] | None = None) -> RunRecord:
        """The run with its calls and outcome; another agent's run is `RunNotFound` like a missing one."""

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
        """Runs matching every filter, newest first (offset paging)."""

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
        """One keyset page of matching runs by creation time, then ID (`after`: a `next_cursor`)."""

    async def list_pending_calls(
        self,
        *,
        agent: str | Sequence[str] | None = None,
        tool_name: str | None = None,
        after: str | None = None,
        limit: int = 50,
    ) -> Page[PendingCallRecord]:
        """One keyset page of the undecided calls of PENDING runs, oldest run first."""

    async def decide(
        self,
        run_id: str,
        call_id: str,
        decision: Decision,
        *,
        decided_by: str,
        now: datetime | None = None,
    ) -> DecisionRecord:
        """Record a decision on one call; the run's last one makes it READY.

        The same decision again is a no-op. Raises `RunNotFound`, `CallNotFound`,
        `InvalidDecision`, `CallExpired` (the expiry denial is committed), `RunNotPending`,
        `DecisionConflict`, in that order.
        """

    async def sweep_expired(self, now: datetime | None = None) -> list[str]:
        """Deny every overdue undecided call "expired"; the IDs of the runs changed."""

    async def claim_ready(
        self,
        worker_id: str,
        lease_seconds: float,
        *,
        now: datetime | None = None,
        agents: Sequence[str] | None = None,
    ) -> ClaimedRun | None:
        """Claim the oldest READY run (of `agents`) under a lease, or None."""

    async def claim_ready_many(
        self,
        worker_id: str,
        lease_seconds: float,
        *,
        limit: int,
        now: datetime | None = None,
        agents: Sequence[str] | None = None,
    ) -> list[ClaimedRun]:
        """Claim up to `limit` of the oldest READY runs in one transaction, each its own lease."""

    async def renew_lease(
        self, run_id: str, worker_id: str, lease_seconds: float, *, now: datetime | None = None
    ) -> datetime:
        """Extend a held lease; its new expiry (`LeaseLost` when not held)."""

    async def finish(
        self, run_id: str, worker_id: str, outcome: Outcome, *, now: datetime | None = None
    ) -> RunRecord:
        """Save a resume's outcome under a held lease (`LeaseLost` else).

        A PAUSED outcome saves `next_run` as a new PENDING child; `outcome.refused` calls
        become denials by `worker:<worker_id>`.
        """

    async def sweep_interrupted(self, now: datetime | None = None) -> list[str]:
        """Mark every RUNNING run whose lease ran out INTERRUPTED; their IDs."""

    async def retry_interrupted(
        self,
        run_id: str,
        *,
        resolved_by: str,
        note: str,
        confirm_calls: Sequence[str] = (),
        now: datetime | None = None,
    ) -> RunRecord:
        """Make an INTERRUPTED run READY for another attempt; only idempotent tools' and
        `confirm_calls`' approved calls run again (`RunNotInterrupted`, `CallNotFound`,
        `InvalidDecision`)."""

    async def cancel_interrupted(
        self, run_id: str, *, resolved_by: str, note: str, now: datetime | None = None
    ) -> RunRecord:
        """Close an INTERRUPTED run as FAILED (`RunNotInterrupted` else)."""

    async def audit(self, run_id: str) -> list[AuditEntry]:
        """The run's audit entries in order (`RunNotFound`)."""

    async def changes_since(self, cursor: int = 0, limit: int = 100) -> list[AuditEntry]:
        """Audit entries with `id > cursor` in commit order, with their run's agent and status."""

    async def last_change_id(self) -> int:
        """The newest audit entry's ID (0: none)."""

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
        """The newest matching entries with `id < before`, looking at most `scan` per page."""

    def change_feed(self, *, ready_only: bool = False) -> ChangeFeed:
        """The store's change notifications, shared in this process (call on the loop)."""

    async def close(self) -> None:
        """Release connections."""

    async def __aenter__(self) -> Store:
        """The store itself."""

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close the store."""


async def open_store(url: str | Path) -> Store:
    """Open (creating or migrating) the store at `url`: `sqlite:///file.db`, a path, or
    `postgresql://…?pool_size=8&command_timeout=30&schema=s` (libpq options beside)."""
    text = str(url)
    if text.startswith(("postgresql://", "postgres://")):
        from golem.durable.store._pg_setup import split_url
        from golem.durable.store.postgres import PostgresStore

        dsn, options = split_url(text)
        return await PostgresStore.open(dsn, **options)
    if text.startswith("sqlite://"):
        path = text.removeprefix("sqlite://")
        if path.startswith("/") and not path.startswith("//"):
            path = path[1:]  # sqlite:///rel.db -> rel.db ; sqlite:////abs.db -> /abs.db
        elif path.startswith("//"):
            path = path[1:]
        if not path or path.startswith(":memory:"):
            raise ValueError(f"open_store: {text!r} names no database file")
        text = path
    elif "://" in text:
        raise ValueError(
            f"open_store: unsupported URL {text!r} (want sqlite:///path.db, a path, "
            "or postgresql://...)"
        )
    from golem.durable.store.sqlite import SQLiteStore

    return await SQLiteStore.open(text)
