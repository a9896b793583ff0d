"""The worker: claim ready runs under leases, resume each once, save the outcome."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from golem._ids import new_id
from golem._tracing import worker_op
from golem.durable._clock import elapsed
from golem.durable.store import (
    ChangeFeed,
    ClaimedRun,
    LeaseLost,
    Outcome,
    RunRecord,
    RunStatus,
    Store,
)
from golem.durable.store.records import check_seconds
from golem.durable.worker._checks import (
    as_held,
    check_calls,
    check_seals,
    deferred_results,
    refused_calls,
    stored_calls,
)
from golem.durable.worker._registry import AgentRegistry, deps_of, registered
from golem.durable.worker._start import (
    clock_of,
    duplicate_calls,
    error_text,
    jsonable,
    new_run_from_result,
    partial_history,
)
from golem.errors import StoreError
from golem.messages import dumps_history
from golem.resume import ResumeProgress
from golem.seal import SealKey, SealKeys, as_seal_keys

log = logging.getLogger("golem.durable.worker")

_CONFIRM_READS = 4


class _FailureSpell:
    """Sweeps and claims failing poll after poll (a read-only, busy or unreachable database):
    logged once with the traceback, then once a minute, and its end once."""

    def __init__(self, worker_id: str) -> None:
        self.worker_id = worker_id
        self.since: float | None = None
        self.last_logged, self.last_problem, self.count = 0.0, "", 0

    def failed(self, exc: Exception) -> None:
        now, problem = time.monotonic(), f"{type(exc).__name__}: {exc}"
        self.count += 1
        if self.since is None or problem != self.last_problem:
            what = "worker %s: sweeping or claiming failed; retrying every poll"
            log.error(what, self.worker_id, exc_info=exc)
            self.since = self.since if self.since is not None else now
            self.last_logged, self.last_problem = now, problem
        elif now - self.last_logged >= 60.0:
            what = "worker %s: sweeping or claiming still fails (%d times in %.0f s): %s"
            log.error(what, self.worker_id, self.count, now - self.since, problem)
            self.last_logged = now

    def ended(self) -> None:
        if self.since is not None:
            what = "worker %s: sweeping and claiming work again after %d failure(s) in %.1f s"
            log.warning(what, self.worker_id, self.count, time.monotonic() - self.since)
            self.since, self.last_problem, self.count = None, "", 0


@dataclass(frozen=True, slots=True)
class SweepReport:
    """What one sweep changed."""

    expired: list[str] = field(default_factory=list)
    interrupted: list[str] = field(default_factory=list)


class Worker:
    """Claims ready runs of the registry's agents from a store and resumes each one once.

    `lease_seconds`: a claim's lease, renewed every third of it and proved before an approved
    call re-runs; `sweep_interval`: seconds between the expiry and interrupted sweeps (0: every
    call); `seal_key`: pending calls must carry valid seals and pauses are saved sealed;
    `concurrency`: runs `run_forever` resumes at once (ADR 0032). `ValueError` for a bad value."""

    def __init__(
        self,
        store: Store,
        registry: AgentRegistry,
        *,
        worker_id: str | None = None,
        lease_seconds: float = 60.0,
        sweep_interval: float = 5.0,
        seal_key: SealKey | None = None,
        concurrency: int = 1,
    ) -> None:
        lease_seconds = check_seconds("lease_seconds", lease_seconds)
        sweep_interval = check_seconds("sweep_interval", sweep_interval, zero=True)
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(
                f"concurrency must be an integer >= 1 (runs resumed at once), got {concurrency!r}"
            )
        self.store = store
        self.registry = registry
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{new_id()[-8:]}"
        self.lease_seconds = float(lease_seconds)
        self.sweep_interval = float(sweep_interval)
        self.seal_keys: SealKeys | None = None if seal_key is None else as_seal_keys(seal_key)
        self.concurrency = concurrency
        self._last_sweep: float | None = None
        self._clock = clock_of(store)
        self._unsure_claims: dict[datetime, set[str]] = {}

    @property
    def actor(self) -> str:
        """The identity this worker records in the audit log: `worker:<worker_id>`."""
        return f"worker:{self.worker_id}"

    async def sweep(self, now: datetime | None = None) -> SweepReport:
        """Run both sweeps now: deny overdue calls "expired", mark lapsed leases interrupted."""
        self._last_sweep = time.monotonic()
        expired = await self.store.sweep_expired(now)
        interrupted = await self.store.sweep_interrupted(now)
        for run_id in interrupted:
            log.warning("run %s interrupted: its worker's lease ran out mid-resume", run_id)
        return SweepReport(expired=expired, interrupted=interrupted)

    async def _maybe_sweep(self) -> None:
        if self._last_sweep is None or time.monotonic() - self._last_sweep >= self.sweep_interval:
            await self.sweep()

    async def run_once(self) -> bool:
        """Sweep when due, claim one ready run (or one a lost claim took) and resume it; False
        when none was ready."""
        await self._maybe_sweep()
        claimed = await self._recover_claims() or await self._claim(1)
        if not claimed:
            return False
        for c in claimed:
            log.info("worker %s claimed run %s (agent %s)", self.worker_id, c.run.id, c.run.agent)
            await self._resume(c)
        return True

    async def run_forever(
        self, poll_interval: float = 1.0, stop_event: asyncio.Event | None = None
    ) -> None:
        """Resume ready runs, up to `concurrency` at once, until `stop_event` is set.

        Waits on the store's change feed (at most `poll_interval` seconds) when nothing is ready;
        store errors are logged and retried. Stopping drains the in-flight resumes; cancelling
        cancels them, leaving their runs to the interrupted sweep (ADR 0011)."""
        check_seconds("poll_interval", poll_interval)
        stop = stop_event or asyncio.Event()
        feed = _feed_of(self.store)
        stopping = asyncio.ensure_future(stop.wait())
        running: dict[asyncio.Task[None], str] = {}  # in-flight resume -> its run ID
        spell = _FailureSpell(self.worker_id)
        try:
            while not stop.is_set():
                mark = feed.ready_mark() if feed is not None else 0
                try:
                    await self._maybe_sweep()
                    for c in await self._recover_claims():  # started before anything can fail
                        running[self._start(c, running)] = c.run.id
                    free = self.concurrency - len(running)
                    claimed = await self._claim(free) if free else []
                except Exception as exc:
                    spell.failed(exc)
                    await asyncio.wait([stopping], timeout=poll_interval)
                    continue
                spell.ended()
                for c in claimed:
                    running[self._start(c, running)] = c.run.id
                if len(running) >= self.concurrency:  # every slot busy: wait for one
                    await asyncio.wait(
                        [stopping, *running],
                        timeout=poll_interval,  # sweeps stay due while slots are busy
                        return_when=asyncio.FIRST_COMPLETED,
                    )
                    for t in [t for t in running if t.done()]:
                        running.pop(t, None)
                    continue
                if claimed and len(claimed) == free:
                    continue  # filled every slot asked for: more may be ready
                if feed is None:
                    await asyncio.wait([stopping], timeout=poll_interval)
                    continue
                woken = asyncio.ensure_future(feed.wait_ready(mark, poll_interval))
                try:
                    await asyncio.wait([stopping, woken], return_when=asyncio.FIRST_COMPLETED)
                finally:
                    woken.cancel()
            await self._drain(running)
        finally:
            stopping.cancel()
            await self._abandon(running)

    async def _drain(self, running: dict[asyncio.Task[None], str]) -> None:
        """Stopped: claim nothing more and let the in-flight resumes finish (the runs of
        a claim whose answer was lost included)."""
        if self._unsure_claims:
            try:
                for c in await self._recover_claims():
                    running[self._start(c, running)] = c.run.id
            except Exception:
                log.exception(
                    "worker %s stopping: the runs of a claim whose answer was lost could "
                    "not be looked up; they are marked interrupted once their lease runs out",
                    self.worker_id,
                )
        if running:
            what = "worker %s stopping: waiting for %d in-flight resume(s)"
            log.info(what, self.worker_id, len(running))
            await asyncio.wait(list(running))

    async def _abandon(self, running: dict[asyncio.Task[None], str]) -> None:
        """Cancelled (or failed): cancel the resumes still running; their runs are left
        to the interrupted sweep once their leases run out."""
        abandoned = [t for t in running if not t.done()]
        for task in abandoned:
            task.cancel()
            what = (
                "worker %s cancelled mid-resume: run %s stays running until its lease runs "
                "out, then a sweep marks it interrupted"
            )
            log.warning(what, self.worker_id, running[task])
        if abandoned:
            await asyncio.wait(abandoned)

    async def _claim(self, slots: int) -> list[ClaimedRun]:
        """Claim up to `slots` ready runs at a time chosen here, remembered when the claim raises."""
        agents = list(self.registry)
        at = self._clock()
        try:
            if slots == 1:
                one = await self.store.claim_ready(
                    self.worker_id, self.lease_seconds, now=at, agents=agents
                )
                return [] if one is None else [one]
            return await self.store.claim_ready_many(
                self.worker_id, self.lease_seconds, limit=slots, now=at, agents=agents
            )
        except StoreError:
            self._unsure_claims.setdefault(at, set())
            raise

    async def _recover_claims(self) -> list[ClaimedRun]:
        """The runs taken by this worker's claims that raised (their answer may have been lost
        after the COMMIT): each is resumed once, while its lease lasts (ADR 0045)."""
        if not self._unsure_claims:
            return []
        lease = timedelta(seconds=self.lease_seconds)
        now = self._clock()
        unsure = {at: taken for at, taken in self._unsure_claims.items() if at + lease > now}
        self._unsure_claims = unsure
        list_page = getattr(self.store, "list_runs_page", None)
        if not unsure or list_page is None:
            self._unsure_claims = {}
            return []
        found: list[ClaimedRun] = []
        after: str | None = None
        while True:
            page = await list_page(
                status=RunStatus.RUNNING,
                agent=list(self.registry),
                lease_owner=self.worker_id,
                after=after,
                limit=100,
            )
            for run in page.items:
                taken = unsure.get(run.updated_at)
                if (
                    taken is not None
                    and run.id not in taken
                    and run.lease_owner == self.worker_id
                    and run.lease_expires_at is not None
                ):
                    taken.add(run.id)
                    found.append(ClaimedRun(run, self.worker_id, run.lease_expires_at))
            if page.next_cursor is None:
                break
            after = page.next_cursor
        for c in found:
            what = "worker %s: run %s was claimed by a claim whose answer was lost; resuming it"
            log.warning(what, self.worker_id, c.run.id)
        return found

    def _start(
        self, claimed: ClaimedRun, running: dict[asyncio.Task[None], str]
    ) -> asyncio.Task[None]:
        """Resume `claimed` in its own task, which leaves `running` when it ends."""
        log.info(
            "worker %s claimed run %s (agent %s)", self.worker_id, claimed.run.id, claimed.run.agent
        )
        task = asyncio.ensure_future(self._resume(claimed))

        def done(t: asyncio.Task[None]) -> None:
            running.pop(t, None)
            if not t.cancelled() and (exc := t.exception()) is not None:
                what = "worker %s: resuming run %s failed"
                log.error(what, self.worker_id, claimed.run.id, exc_info=exc)

        task.add_done_callback(done)
        return task

    @worker_op("resume")
    async def _resume(self, claimed: ClaimedRun) -> None:
        run = claimed.run
        lease = _Lease(self, run.id, claimed)
        resume = asyncio.ensure_future(self._outcome(claimed, lease))
        # The heartbeat task starts only once a third of the lease has passed: most resumes
        # finish before that, and then no task is created for it.
        heartbeat: list[asyncio.Task[None]] = []
        beat = asyncio.get_running_loop().call_later(
            self.lease_seconds / 3,
            lambda: heartbeat.append(asyncio.ensure_future(self._heartbeat(lease, resume))),
        )
        try:
            outcome = await resume
        except asyncio.CancelledError:
            if lease.lost is not None:
                log.error("run %s abandoned: %s", run.id, lease.lost)
                return
            raise
        except LeaseLost as exc:  # proven lost before an approved call: nothing more ran
            log.error("run %s abandoned: %s", run.id, exc)
            return
        finally:
            beat.cancel()
            for task in heartbeat:
                task.cancel()
                await asyncio.wait([task])  # never raises the heartbeat's own cancellation
        if lease.lost is not None:
            log.error("run %s abandoned: %s", run.id, lease.lost)
            return
        entry = self.registry.get(run.agent)
        refused = {} if entry is None else refused_calls(run, entry.agent)
        if refused:  # recorded with the outcome: "approved" then reads as "executed" no more
            outcome = replace(outcome, refused=refused)
        await self._finish(lease, outcome)

    @worker_op("finish")
    async def _finish(self, lease: _Lease, outcome: Outcome) -> None:
        """Save the outcome, retrying store errors while the lease lasts; a retry that finds the
        run finished reads it to tell "saved by a lost attempt" from "lease lost" (ADR 0045)."""
        run_id, attempts = lease.run_id, 0

        async def save() -> None:
            nonlocal attempts
            attempts += 1
            await self.store.finish(run_id, self.worker_id, outcome)

        try:
            await lease.retry("saving the outcome", save)
        except LeaseLost as exc:
            saved = await self._already_saved(run_id, outcome) if attempts > 1 else False
            if saved is None:
                log.error(
                    "run %s: its outcome (%s) may have been saved by an earlier attempt "
                    "whose answer was lost; the run could not be read to confirm it, so "
                    "look it up (if still running, the sweep marks it interrupted)",
                    run_id,
                    outcome.status.value,
                )
                return
            if not saved:  # else an earlier attempt committed but its answer was lost
                log.error("run %s: lease lost before its outcome could be saved: %s", run_id, exc)
                return
        except StoreError:
            log.error("run %s: saving the outcome failed until the lease ran out", run_id)
            raise
        if outcome.status is RunStatus.FAILED:
            log.warning("worker %s: run %s failed: %s", self.worker_id, run_id, outcome.error)
        else:
            log.info("worker %s: run %s %s", self.worker_id, run_id, outcome.status.value)

    async def _already_saved(self, run_id: str, outcome: Outcome) -> bool | None:
        """Whether the run holds `outcome`'s status under this worker's lease (an earlier
        finish committed); None when the run could not be read (a few tries)."""
        delay = 0.05
        for attempt in range(_CONFIRM_READS):
            try:
                run = await self.store.get_run(run_id)
            except StoreError as exc:
                log.warning("run %s: reading it to confirm its outcome failed (%s)", run_id, exc)
                if attempt + 1 < _CONFIRM_READS:
                    await asyncio.sleep(delay)
                    delay *= 2
                continue
            return run.status is outcome.status and run.lease_owner == self.worker_id
        return None

    async def _heartbeat(self, lease: _Lease, resume: asyncio.Future[Outcome]) -> None:
        """Renew the lease now and every third of its length; cancel the resume if it is lost."""
        while True:
            try:
                await lease.renew()
            except LeaseLost:
                resume.cancel()
                return
            except Exception:  # a transient store failure: try again next beat
                log.exception("run %s: renewing the lease failed", lease.run_id)
            await asyncio.sleep(self.lease_seconds / 3)

    async def _outcome(self, claimed: ClaimedRun, lease: _Lease) -> Outcome:
        run = claimed.run
        try:
            entry = registered(self.registry, run.agent)
            deps = await deps_of(entry, run.deps_ref)
            agent = entry.agent
            log.info("worker %s resuming run %s", self.worker_id, run.id)
            paused = run.paused_run()
            ids = [c.call_id for c in run.calls]
            latest, nested = stored_calls(paused.messages, ids, run.conversation_id)
            check_calls(run, latest)  # what runs is what the approvers saw
            if self.seal_keys is not None:
                check_seals(run, latest, self.seal_keys, nested, paused.messages)
            result = await agent.run_with_deferred_results(
                as_held(paused, latest),  # sealed to its conversation, checked, trace-linked
                deferred_results(claimed, agent),
                deps=deps,
                run_id=run.id,
                # fencing: prove the lease before each re-run
                progress=ResumeProgress(before_approved=lease.prove),
            )
        except LeaseLost:
            raise
        except Exception as exc:
            if lease.lost is not None:
                raise lease.lost from exc
            return Outcome.failed(error_text(exc), partial_history(exc))
        if result.pending is not None:
            next_run = new_run_from_result(
                result,
                run.agent,
                deps_ref=run.deps_ref,
                started_by=self.actor,
                expires_at=_inherit_expiry(run, self._clock()),
                parent_run_id=run.id,
                seal_key=self.seal_keys,
            )
            if next_run.id == run.id:  # the resume ran under the stored run's ID
                next_run = replace(next_run, id=new_id())
            problem = duplicate_calls(next_run)
            if problem is not None:
                return Outcome.failed(problem, next_run.history)
            return Outcome.paused(next_run)
        return Outcome.completed(jsonable(result.output), dumps_history(result.messages))


class _Lease:
    """The worker's view of one lease: a local deadline on the elapsed-time clock (never
    stepped, counting through a suspend), renewed in the store."""

    def __init__(self, worker: Worker, run_id: str, claimed: ClaimedRun) -> None:
        self.worker = worker
        self.run_id = run_id
        remaining = (claimed.lease_expires_at - worker._clock()).total_seconds()
        # the local deadline starts before the claim returned: never later than the store's
        self.deadline = elapsed() + min(remaining, worker.lease_seconds)
        self.lost: LeaseLost | None = None

    def remaining(self) -> float:
        """Seconds left on the lease by the local clock (negative once it ran out)."""
        return self.deadline - elapsed()

    async def renew(self) -> None:
        """Extend the lease in the store; record and raise `LeaseLost` when it is gone."""
        if self.lost is not None:
            raise self.lost
        asked = elapsed()
        try:
            await self.worker.store.renew_lease(
                self.run_id, self.worker.worker_id, self.worker.lease_seconds
            )
        except LeaseLost as exc:
            self.lost = exc
            raise
        self.deadline = asked + self.worker.lease_seconds

    async def prove(self, call: Any = None) -> None:
        """Before an approved call re-runs: raise `LeaseLost` unless the lease is held, renewing
        when less than half is left (a `StoreError` is retried while the local deadline lasts)."""
        if self.lost is not None:
            raise self.lost
        if self.remaining() < self.worker.lease_seconds / 2:
            await self.retry("renewing the lease before an approved call", self.renew)

    async def retry(self, what: str, step: Callable[[], Awaitable[None]]) -> None:
        """`step()`, retried with backoff on a `StoreError` (not `LeaseLost`) while the local
        deadline lasts."""
        delay = 0.05
        while True:
            try:
                return await step()
            except LeaseLost:
                raise
            except StoreError as exc:
                if self.remaining() <= delay:
                    raise
                log.warning("run %s: %s failed (%s); retrying", self.run_id, what, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)


def _feed_of(store: Store) -> ChangeFeed | None:
    """The store's change feed, or None for a store without one (then the worker polls)."""
    change_feed = getattr(store, "change_feed", None)
    if change_feed is None:
        return None
    try:
        feed: ChangeFeed = change_feed(ready_only=True)
    except TypeError:  # a custom store whose change_feed takes no options
        feed = change_feed()
    return feed


def _inherit_expiry(run: RunRecord, now: datetime) -> datetime | None:
    """A pause produced by a resume gets as long to be decided as its parent had."""
    if run.expires_at is None:
        return None
    return now + (run.expires_at - run.created_at)
