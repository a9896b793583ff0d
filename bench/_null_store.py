"""A store that keeps one run in memory and does nothing else: golem's own cost of a cycle.

`start_run` saves into it and `Worker.run_once` claims from it as from a real store, but
saving, deciding, claiming and finishing cost a few object constructions, not SQL. What a
bench measures on it is the agent side of a durable cycle: running to the pause, dumping
and loading the history, the worker's checks (stored calls, seals), the resume, the dump of
the outcome. Every saved pending call is claimed as approved.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from golem.durable.store import (
    ClaimedRun,
    DecisionKind,
    DecisionRecord,
    NewRun,
    Outcome,
    PendingCallRecord,
    RunRecord,
    RunStatus,
    utc_now,
)


def claimed_record(run: NewRun, worker_id: str = "w") -> RunRecord:
    """`run` as a worker holds it after every call was approved and the run claimed."""
    now = utc_now()
    calls = tuple(
        PendingCallRecord(
            run.id,
            c.call_id,
            i,
            c.kind,
            c.tool_name,
            c.args,
            c.reason,
            None,
            DecisionRecord(run.id, c.call_id, DecisionKind.APPROVE, "", "", "bench", now),
            seal=c.seal,
        )
        for i, c in enumerate(run.calls)
    )
    return RunRecord(
        run.id,
        run.agent,
        run.conversation_id,
        RunStatus.RUNNING,
        run.history,
        calls,
        run.deps_ref,
        run.started_by,
        now,
        now,
        None,
        None,
        None,
        worker_id,
        now + timedelta(minutes=10),
        None,
    )


class NullStore:
    """Holds the last saved pending run (or a given one) until a worker claims it."""

    def __init__(self, ready: RunRecord | None = None) -> None:
        self.ready = ready
        """The run the next `claim_ready` returns (then None)."""
        self.outcome: Outcome | None = None
        """The last outcome a worker saved."""

    async def save_pending(self, run: NewRun) -> RunRecord:
        self.ready = claimed_record(run)
        return self.ready

    async def save_finished(self, run: NewRun, outcome: Outcome) -> RunRecord:
        raise RuntimeError(f"the bench run did not pause: {outcome.status.value} {outcome.error}")

    async def claim_ready(
        self, worker_id: str, lease_seconds: float, **_: Any
    ) -> ClaimedRun | None:
        run, self.ready = self.ready, None
        if run is None:
            return None
        assert run.lease_expires_at is not None
        return ClaimedRun(run, worker_id, run.lease_expires_at)

    async def finish(self, run_id: str, worker_id: str, outcome: Outcome) -> None:
        if outcome.status is RunStatus.FAILED:
            raise RuntimeError(f"the bench resume failed: {outcome.error}")
        self.outcome = outcome

    async def renew_lease(self, run_id: str, worker_id: str, lease_seconds: float) -> None:
        pass

    async def sweep_expired(self, now: Any = None) -> list[str]:
        return []

    async def sweep_interrupted(self, now: Any = None) -> list[str]:
        return []
