"""Start runs into a store, and resume ready runs from it — each at most once.

An application names its agents in a registry (`name -> AgentEntry`). `start_run` runs an
agent once in-process and saves what happened: a pause becomes a pending run, a final answer a
completed run, an error a failed run. A `Worker` claims ready runs (every pending call decided)
under a lease, resumes them with `Agent.run_with_deferred_results`, and saves the outcome; it
also runs the expiry and interrupted sweeps periodically.

```python
registry = {"ops": AgentEntry(agent, deps_factory=lambda ref: Deps(**ref))}
store = await open_store("sqlite:///golem.db")
record = await start_run(store, registry, "ops", "clean up /tmp", started_by="alice")
...  # people decide through the service or `store.decide(...)`
await Worker(store, registry).run_forever()
```

The at-most-once guarantee (`docs/adr/0011-at-most-once-resume.md`): a run is claimed by one
worker once; if that worker dies, its lease runs out and the run is marked `interrupted`, never
resumed again automatically. Tools with side effects pass `ctx.idempotency_key` (unique per
conversation and call) to what they change.
"""

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
