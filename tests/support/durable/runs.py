"""Builders for the runs the store tests save."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from golem import new_id
from golem.durable.store import CallKind, NewCall, NewRun

__all__ = ["T0", "approval", "external", "later", "make_run"]

T0 = datetime(2030, 1, 1, 12, 0, 0, tzinfo=UTC)
"""A fixed instant far in the future of any wall clock the tests run at."""


def later(seconds: float, base: datetime = T0) -> datetime:
    """`base` plus `seconds`."""
    return base + timedelta(seconds=seconds)


def approval(call_id: str, tool: str = "delete_file", **kw: Any) -> NewCall:
    """A pending approval call."""
    kw.setdefault("args", '{"path": "/tmp/x"}')
    return NewCall(call_id, CallKind.APPROVAL, tool, **kw)


def external(call_id: str, tool: str = "lookup", **kw: Any) -> NewCall:
    """A pending external-result call."""
    return NewCall(call_id, CallKind.EXTERNAL, tool, **kw)


def make_run(*calls: NewCall, **kw: Any) -> NewRun:
    """A new run (fresh ID and conversation unless given) with `calls`."""
    kw.setdefault("id", new_id())
    kw.setdefault("agent", "ops")
    kw.setdefault("conversation_id", new_id())
    kw.setdefault("history", '[{"role":"user","content":"hi"}]')
    kw.setdefault("started_by", "alice")
    return NewRun(calls=calls or (approval("c1"),), **kw)
