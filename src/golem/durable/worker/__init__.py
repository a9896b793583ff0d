"""Start runs into a store, and resume ready runs from it — each at most once (ADR 0011).

```python
registry = {"ops": AgentEntry(agent, deps_factory=lambda ref: Deps(**ref))}
record = await start_run(store, registry, "ops", "clean up /tmp", started_by="alice")
await Worker(store, registry).run_forever()
```"""

from __future__ import annotations

from golem.durable.worker._checks import RETRY_REFUSAL, StoredCallMismatch
from golem.durable.worker._loop import SweepReport, Worker
from golem.durable.worker._registry import AgentEntry, AgentRegistry, load_registry
from golem.durable.worker._start import new_run_from_result, start_run

__all__ = [
    "RETRY_REFUSAL",
    "AgentEntry",
    "AgentRegistry",
    "StoredCallMismatch",
    "SweepReport",
    "Worker",
    "load_registry",
    "new_run_from_result",
    "start_run",
]
