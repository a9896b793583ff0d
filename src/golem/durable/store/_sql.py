"""`SQLStore`: every `Store` method as one transaction, written once for SQLite and PostgreSQL.

Each method hands a plain function to its backend (`_submit`), which runs it in one
transaction to its end — commit, or rollback on any error — whoever still awaits it. The
methods live in one module per concept (`_runs`, `_decisions`, `_leases`, `_recovery`,
`_audit`) over the driver port of `_tx`; why it is built so: ADR 0079.
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
