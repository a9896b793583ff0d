"""The store's transactions, written once over a small synchronous connection port.

`SQLStore` implements every `Store` method as **one transaction run to completion**: the
async method hands a plain function to the backend (`_submit`), which opens the
transaction, runs the function, appends the audit entries and commits (or rolls back on
any error) before the result reaches the caller. SQLite does this on a database thread, so
no statement runs on the event loop; PostgreSQL runs the function in a greenlet on the
loop, every socket wait awaited (ADR 0039). Either way the event loop never waits on the
database, and cancelling the awaiting task at any point cannot leave a transaction open or
a lock held: the transaction either finishes (applied) or has not started (not applied),
whoever is still waiting for it.

The SQL uses `?` placeholders and runs on SQLite and PostgreSQL alike. A backend supplies
only what differs: opening and ending transactions, timestamps, row-locking clauses
(`FOR UPDATE`, `FOR UPDATE SKIP LOCKED`; empty on SQLite, where the write transaction
already holds the database) and how audit IDs are assigned (`_flush_audit`).

Statements whose result is not needed go through `Conn.run`, and queries whose rows are
needed only after the commit through `Conn.later`; PostgreSQL queues both in a pipeline, so a
transaction costs one network round trip per `fetch` plus one for the commit. A unique
violation can be mapped to an exception per statement (`run(..., conflict=...)`), so an
insert need not read anything back to detect a duplicate.

Histories live in `golem_histories`, out of the hot `golem_runs` row: decisions, claims'
lock and lease renewals never read or rewrite them.
"""

from __future__ import annotations

from golem.durable.store._audit import AuditOps
from golem.durable.store._decisions import DecisionOps
from golem.durable.store._leases import LeaseOps
from golem.durable.store._recovery import RecoveryOps
from golem.durable.store._runs import RunOps
from golem.durable.store._tx import Conn, Later, Stats, Tx

__all__ = ["Conn", "Later", "SQLStore", "Stats", "Tx"]


class SQLStore(RunOps, DecisionOps, LeaseOps, RecoveryOps, AuditOps):
    """Every `Store` method over a backend's transactions (see the module docstring)."""
