"""`SQLStore`: every `Store` method as one transaction over the driver port (ADR 0079)."""

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
