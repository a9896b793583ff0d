"""The durable store of paused runs, decisions, leases and the audit log.

A run paused for approval (or for an external result) is saved as a **pending run**; people
decide on each of its pending calls; when every call is decided the run is **ready**; a worker
claims it under a lease, resumes it exactly once and saves the outcome.

```text
pending ──(every call decided)──▶ ready ──claim_ready──▶ running ──finish──▶ completed
   │  ▲                                                     │          ├──▶ paused ──▶ new pending run
   │  └─ decide / sweep_expired (deny "expired")            │          └──▶ failed
   │                                                        └─(lease ran out, sweep_interrupted)──▶ interrupted
```

`interrupted` is terminal: a worker whose lease ran out may have executed approved calls, so
the run is never claimed again automatically (the at-most-once guarantee; see
`docs/adr/0011-at-most-once-resume.md`). Every state change appends an `AuditEntry`.

Backends: `SQLiteStore` (`golem.durable.store.sqlite`, stdlib `sqlite3`, the default) and
`PostgresStore` (`golem.durable.store.postgres`, psycopg 3, extra `[postgres]`); `open_store(url)`
picks one from a URL. Both implement the `Store` protocol below. All times are timezone-aware
UTC `datetime`s; every method that depends on the clock takes an optional `now` so tests and
callers can be deterministic. Without it, both stores take the time from their `clock()`: on
PostgreSQL the database server's time, so leases mean the same to workers whose own clocks
disagree (`docs/adr/0056-leases-on-the-stores-clock.md`).

The records, enums and errors (`RunRecord`, `RunStatus`, `RunNotFound`, …) are defined in
`golem.durable.store.records` and importable from here; that module's docstring draws the error
tree (every store error subclasses `golem.errors.StoreError`).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Protocol, runtime_checkable

from golem.durable.store._feed import ChangeFeed
from golem.durable.store._tx import utc_now
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


# --------------------------------------------------------------------------- protocol


@runtime_checkable
class Store(Protocol):
    """The durable store of runs, decisions, leases and audit entries.

    Every method is a single transaction: it either applies completely (with its audit
    entries) or not at all. Implementations are safe to use from several processes on one
    database; one instance is used from one event loop. Run, call and worker IDs and text
    filters are `str` (anything else: `TypeError`, before any transaction); an ID no
    database can hold (a NUL, a lone surrogate) is simply not found, on every backend.
    """

    async def schema_version(self) -> int:
        """Return the schema version of the opened database (the latest known after open)."""
        ...

    async def save_pending(self, run: NewRun) -> RunRecord:
        """Save a paused run with its pending calls as PENDING and audit `created`.

        Raises:
            ValueError: `run.calls` is empty, call IDs repeat, or the run ID already exists.
        """
        ...

    async def save_finished(self, run: NewRun, outcome: Outcome) -> RunRecord:
        """Save a run that ended without pausing (COMPLETED or FAILED) so it is visible.

        Audits `created` then the outcome's action.

        Raises:
            ValueError: the outcome is PAUSED, `run.calls` is not empty, or the ID exists.
        """
        ...

    async def get_run(self, run_id: str, *, agents: Collection[str] | None = None) -> RunRecord:
        """Return the run with its calls, decisions and outcome.

        Args:
            run_id: the run.
            agents: only a run of one of these agents (None: of any agent); another
                agent's run is not found, read with the same statements as a missing one,
                so a caller limited to some agents cannot time which other IDs exist.

        Raises:
            RunNotFound: no such run (or, given `agents`, none of theirs).
        """
        ...

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
        """Return runs matching every given filter, newest first.

        `tool_name` keeps runs with at least one pending call of that tool. `status` may be
        one status or several. Offset paging reads every skipped row: for long listings use
        `list_runs_page`.
        """
        ...

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
        """Return one page of matching runs, oldest first (newest first when asked).

        Runs are ordered by creation time, then ID. Pass the returned `next_cursor` as
        `after` for the next page; the query starts at the cursor (keyset paging), so every
        page costs the same however deep it is, and only the page's histories are read.
        `agent` may name several agents (e.g. the ones an approver may see); `lease_owner`
        keeps the runs whose lease that worker holds (a worker finding its own runs).

        Raises:
            ValueError: `limit` < 1, or `after` is not a cursor this store returned.
        """
        ...

    async def list_pending_calls(
        self,
        *,
        agent: str | Sequence[str] | None = None,
        tool_name: str | None = None,
        after: str | None = None,
        limit: int = 50,
    ) -> Page[PendingCallRecord]:
        """Return one page of the calls waiting for a decision, oldest run first.

        The items are the undecided calls of PENDING runs, ordered by their run's creation
        time, run ID and the call's position; keyset-paged like `list_runs_page`. Paging
        to the end returns every call that was waiting when the listing started exactly
        once (calls decided meanwhile drop out; runs created meanwhile come last). On
        PostgreSQL, where runs are saved concurrently, a run whose save was still committing
        when a page was read may sort just before that page's cursor and be seen only by a
        listing started later.

        Raises:
            ValueError: `limit` < 1, or `after` is not a cursor this store returned.
        """
        ...

    async def decide(
        self,
        run_id: str,
        call_id: str,
        decision: Decision,
        *,
        decided_by: str,
        now: datetime | None = None,
    ) -> DecisionRecord:
        """Record `decision` on one pending call; audit `decided` (and `ready`).

        When it was the run's last undecided call the run becomes READY in the same
        transaction. The same decision again (same kind, reason and text, any identity)
        is a no-op that returns the existing record.

        Checks, in this order: the run exists, the call exists, the decision fits the
        call's kind, a repeat of the existing decision (returned as is), the call expired,
        the run is still PENDING, the call is undecided, its deadline has not passed.

        Raises:
            RunNotFound: no such run.
            CallNotFound: the run has no such pending call.
            InvalidDecision: approve on an external call, or external on an approval call.
            CallExpired: the call was denied "expired", or its deadline has passed (the
                expiry denial is then recorded and committed before raising).
            RunNotPending: the run is ready, running or finished and the decision differs
                from the recorded one.
            DecisionConflict: the call of a PENDING run already has a different decision.
            ValueError: `decided_by` is empty or `now` is naive.
        """
        ...

    async def sweep_expired(self, now: datetime | None = None) -> list[str]:
        """Deny every undecided call of a PENDING run past its deadline.

        Each gets reason "expired" by "system:expiry" (audit `expired`); runs left with no
        undecided call become READY. Returns the IDs of the runs that changed.
        """
        ...

    async def claim_ready(
        self,
        worker_id: str,
        lease_seconds: float,
        *,
        now: datetime | None = None,
        agents: Sequence[str] | None = None,
    ) -> ClaimedRun | None:
        """Claim the oldest READY run for `worker_id`, or return None when there is none.

        The run becomes RUNNING with a lease of `lease_seconds`; audit `claimed`. Exactly one
        of several concurrent callers (in any process) gets a given run. With `agents`,
        only runs of those agents are claimed (the others stay READY for other workers).
        """
        ...

    async def claim_ready_many(
        self,
        worker_id: str,
        lease_seconds: float,
        *,
        limit: int,
        now: datetime | None = None,
        agents: Sequence[str] | None = None,
    ) -> list[ClaimedRun]:
        """Claim up to `limit` of the oldest READY runs in one transaction ([] when none is).

        `claim_ready` for a worker with several free slots: each run becomes RUNNING with
        its own lease of `lease_seconds` (renewed, finished or lost independently of the
        others) and gets its own `claimed` audit entry, all committed together. As with
        `claim_ready`, concurrent callers in any process never get the same run (on
        PostgreSQL they skip the rows another claim is holding instead of waiting). The
        list is ordered by the runs' creation time.

        Raises:
            ValueError: `limit` is not an integer >= 1, or `worker_id` is empty.
        """
        ...

    async def renew_lease(
        self, run_id: str, worker_id: str, lease_seconds: float, *, now: datetime | None = None
    ) -> datetime:
        """Extend the lease of a RUNNING run held by `worker_id`; return the new expiry.

        Raises:
            RunNotFound: no such run.
            LeaseLost: the run is not RUNNING, is held by another worker, or the lease ran out.
        """
        ...

    async def finish(
        self, run_id: str, worker_id: str, outcome: Outcome, *, now: datetime | None = None
    ) -> RunRecord:
        """Save the outcome of a resume, only while `worker_id` holds an unexpired lease.

        COMPLETED and FAILED store the outcome; PAUSED also saves `outcome.next_run` as a
        new PENDING run of the same conversation with `parent_run_id=run_id`, linked from
        this run's `child_run_id`. Each of `outcome.refused` that is an approved call of the
        run becomes a denial by `worker:<worker_id>` with its reason (audit `decided`, with
        `approved_by`). Audits the outcome's action. Returns the finished run.

        Raises:
            RunNotFound: no such run.
            LeaseLost: the run is not RUNNING, is held by another worker, or the lease ran out.
            ValueError: the paused outcome's run ID already exists.
        """
        ...

    async def sweep_interrupted(self, now: datetime | None = None) -> list[str]:
        """Mark every RUNNING run whose lease ran out as INTERRUPTED (audit `interrupted`).

        Returns the IDs of the runs marked. Interrupted runs are never claimed again.
        """
        ...

    async def retry_interrupted(
        self,
        run_id: str,
        *,
        resolved_by: str,
        note: str,
        confirm_calls: Sequence[str] = (),
        now: datetime | None = None,
    ) -> RunRecord:
        """Operator recovery: make an INTERRUPTED run READY for another resume attempt.

        The run's `attempt` grows by one. On that attempt a worker re-executes an approved
        call only when its tool declares itself idempotent, or when the call is listed in
        `confirm_calls` (recorded as `rerun_confirmed_by`); other approved calls are
        denied, because the interrupted attempt may already have run them. Audits
        `resolved` (resolution "retry", the note, the confirmed calls) and `ready`.

        Raises:
            RunNotFound: no such run.
            RunNotInterrupted: the run is not INTERRUPTED.
            CallNotFound: a confirmed call is not a call of the run.
            InvalidDecision: a confirmed call was not approved.
            ValueError: `resolved_by` is empty.
        """
        ...

    async def cancel_interrupted(
        self, run_id: str, *, resolved_by: str, note: str, now: datetime | None = None
    ) -> RunRecord:
        """Operator recovery: close an INTERRUPTED run as FAILED, saying who and why.

        Audits `resolved` (resolution "cancel", the note) and `failed`.

        Raises:
            RunNotFound: no such run.
            RunNotInterrupted: the run is not INTERRUPTED.
            ValueError: `resolved_by` is empty.
        """
        ...

    async def audit(self, run_id: str) -> list[AuditEntry]:
        """Return the run's audit entries in the order they happened.

        Raises:
            RunNotFound: no such run.
        """
        ...

    async def changes_since(self, cursor: int = 0, limit: int = 100) -> list[AuditEntry]:
        """Return audit entries with `id > cursor`, oldest first, at most `limit`.

        Entries appear in commit order across processes: a poller that advances `cursor`
        to the last returned ID never misses an entry. The SQL stores fill each entry's
        `agent`, `run_status` and `parent_run_id` as the run is when read (None for a run
        that no longer exists).
        """
        ...

    async def last_change_id(self) -> int:
        """Return the ID of the newest audit entry (0 when the log is empty)."""
        ...

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
        """Return the newest audit entries with `id < before` that match, newest first.

        At most `limit`; pass the page's `next_before` as `before` for the next page (keyset
        paging: every matching entry is reached exactly once, and entries appended meanwhile
        never shift the pages). Entries are kept when their run is of one of `agents`
        (None: any agent; an entry whose run was already gone when it was written, or when
        schema 6 was applied, has no agent and is left out), their action is `action`, their
        run ID contains `run_contains` and their actor contains `actor_contains` ignoring
        case (`str.casefold`). The SQL stores read the agents' entries from an index and
        look at no more than `scan` of them (beside the page's own) per page: a page costs
        the same however long the log is, however many entries of other agents are newer,
        and however rarely the filters match — a page of a rare filter may then be short,
        even empty, with a `next_before` to look further.

        Raises:
            ValueError: `limit` or `scan` < 1, or `before` outside 0 … 2**63-1.
        """
        ...

    def change_feed(self, *, ready_only: bool = False) -> ChangeFeed:
        """The store's change notifications, shared by every waiter in this process.

        Workers wait on it for ready runs and event streams for new audit entries, instead
        of each polling the database (see `ChangeFeed`). Call it on the event loop. A
        caller that only waits for ready runs passes `ready_only=True`, so a store can
        spare it the other notifications (PostgreSQL listens on its ready channel only
        until something asks for every change).
        """
        ...

    async def close(self) -> None:
        """Release connections; the store must not be used afterwards."""
        ...

    async def __aenter__(self) -> Store:
        """Return the store itself."""
        ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close the store."""
        ...


# --------------------------------------------------------------------------- opening


async def open_store(url: str | Path) -> Store:
    """Open (creating or migrating the schema of) the store named by `url`.

    Accepted forms: `sqlite:///relative/or/absolute.db` (`sqlite:////abs/path.db` also
    works), a plain filesystem path (SQLite), `sqlite://:memory:` style URLs are rejected
    because a worker in another process could never see them, and `postgresql://…` /
    `postgres://…` (PostgreSQL; needs the `[postgres]` extra). A PostgreSQL URL may carry
    the store's own options as query parameters beside libpq's: `pool_size`,
    `command_timeout` (seconds, or `none`) and `schema`, as in
    `postgresql://golem@db/golem?pool_size=8&command_timeout=30&sslmode=require`.

    Raises:
        ValueError: the URL scheme is not one of the above, or a store option is invalid.
        StoreError: the database cannot be opened or migrated.
    """
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
