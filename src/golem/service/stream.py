"""`GET /api/events`: server-sent events of the audit-log changes the caller may see.

`event: hello` first (a sealed start cursor), then `event: change` per entry (`id:` resumes
via `Last-Event-ID`); changes the caller may not see leave no trace, keep-alives follow a
fixed schedule (ADR 0073). Between batches it sleeps on the store's `ChangeFeed`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from golem.durable.store import (
    AuditEntry,
    ChangeFeed,
    RunNotFound,
    RunStatus,
    Store,
)
from golem.errors import StoreError
from golem.service.api import audit_json
from golem.service.auth import Credential
from golem.service.errors import unreachable
from golem.service.positions import seal_cursor, start_cursor
from golem.service.state import ServiceState, require_store

# The handlers behind `golem.service.create_app`; nothing here is public API.
__all__: list[str] = []

log = logging.getLogger("golem.service")

_BATCH = 200  # audit entries read per query
_now = time.monotonic  # the keep-alive clock


def _sse(event: str | None, data: Any, event_id: int | str | None = None) -> str:
    """One server-sent event; its JSON is ASCII-only, so no character (U+2028 …) can end
    the `data:` line."""
    lines = []
    if event_id is not None:
        lines.append(f"id: {event_id}")
    if event is not None:
        lines.append(f"event: {event}")
    lines.append("data: " + json.dumps(data, ensure_ascii=True, separators=(",", ":")))
    return "\n".join(lines) + "\n\n"


@dataclass(frozen=True, slots=True)
class _RunFacts:
    """What a change event says about its run, as the run is now."""

    agent: str
    status: RunStatus
    parent_run_id: str | None


async def _run_facts(
    store: Store, entry: AuditEntry, seen: dict[str, _RunFacts | None]
) -> _RunFacts | None:
    """The entry's run's agent, status and parent (None: no such run), read along by
    `changes_since` or asked for once per run in `seen`."""
    if entry.agent is not None and entry.run_status is not None:
        return _RunFacts(entry.agent, entry.run_status, entry.parent_run_id)
    if entry.run_id not in seen:
        try:
            run = await store.get_run(entry.run_id)
        except RunNotFound:
            seen[entry.run_id] = None
        else:
            seen[entry.run_id] = _RunFacts(run.agent, run.status, run.parent_run_id)
    return seen[entry.run_id]


async def _changes(
    request: Request,
    state: ServiceState,
    cred: Credential,
    cursor: int,
    first: list[AuditEntry],
) -> AsyncIterator[str]:
    """The stream's text after `cursor` (first batch `first`) until the client leaves or
    the store cannot be reached."""
    try:
        async for text in _follow(request, state, cred, cursor, first):
            yield text
    except StoreError as exc:
        if not unreachable(exc):
            raise
        log.warning("event stream ended: the store cannot be reached: %s", exc)


async def _follow(
    request: Request,
    state: ServiceState,
    cred: Credential,
    cursor: int,
    first: list[AuditEntry],
) -> AsyncIterator[str]:
    store = require_store(state)
    change_feed = getattr(store, "change_feed", None)
    feed: ChangeFeed | None = None if change_feed is None else change_feed()
    runs: dict[str, _RunFacts | None] = {}
    secret = state.auth.secret
    full_view = cred.approver.agents is None
    start = seal_cursor(secret, cursor)
    yield "retry: 2000\n\n"
    yield _sse("hello", {"cursor": start, "identity": cred.approver.identity}, start)
    beat = _now() + state.settings.stream_heartbeat  # the next keep-alive, on a fixed schedule
    batch: list[AuditEntry] | None = first
    while True:
        if batch is None:
            batch = await store.changes_since(cursor, limit=_BATCH)
        for entry in batch:
            cursor = entry.id
            run = await _run_facts(store, entry, runs)
            if run is None or not cred.approver.may_see(run.agent):
                continue  # no line at all: the stream shows nothing of what it leaves out
            data = audit_json(entry, None if full_view else secret)
            data.update(agent=run.agent, status=run.status.value, parent_run_id=run.parent_run_id)
            # a caller who does not see every agent is never told an audit ID (ADR 0077)
            yield _sse("change", data, entry.id if full_view else seal_cursor(secret, entry.id))
        runs.clear()
        now = _now()
        if now >= beat:  # due, busy or idle: a long run of hidden entries sends it too
            yield ": keep-alive\n\n"
            while beat <= now:
                beat += state.settings.stream_heartbeat
        if batch:
            batch = None
            continue
        batch = None
        if await request.is_disconnected():
            return
        if feed is None:  # a store without a change feed: poll
            await asyncio.sleep(min(state.settings.stream_poll_interval, max(beat - now, 0.0)))
        else:  # sleep until the log grows past the cursor (or a keep-alive is due)
            await feed.wait_for_change(cursor, timeout=max(beat - _now(), 0.0))


async def events(request: Request, cred: Credential) -> Response:
    """`cred`'s change stream from `Last-Event-ID`, else `?cursor=`, else the newest change
    (422 for a bad cursor)."""
    state: ServiceState = request.app.state.golem
    store = require_store(state)
    start = start_cursor(request, full_view=cred.approver.agents is None)
    cursor = await store.last_change_id() if start is None else start
    # the first batch is read before answering: a store that cannot be reached is a 503,
    # not a stream that breaks after its 200
    first = await store.changes_since(cursor, limit=_BATCH)
    return StreamingResponse(
        _changes(request, state, cred, cursor, first),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )
