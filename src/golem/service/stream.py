"""`GET /api/events`: server-sent events of the audit-log changes the caller may see.

`event: hello` first (a sealed start cursor), then `event: change` per entry (`id:` resumes
via `Last-Event-ID`); changes the caller may not see leave no trace, keep-alives follow a
fixed schedule (ADR 0073). Between batches it sleeps on the store's `ChangeFeed`. The
stream sits behind its cursor check (422), `max_streams_per_identity` (429) and re-checks
of its credential (`event: end` once it ends).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Message, Receive, Scope, Send

from golem.durable.store import AuditEntry, ChangeFeed, RunNotFound, RunStatus, Store
from golem.errors import StoreError
from golem.service.api import audit_json
from golem.service.auth import Credential
from golem.service.credentials import SESSION_COOKIE, token_credential
from golem.service.errors import ApiError, unreachable
from golem.service.openapi import SSE, Operation
from golem.service.positions import seal_cursor, start_cursor
from golem.service.schemas import EventsQuery
from golem.service.settings import ServiceState, require_store

# The handlers behind `golem.service.create_app`; nothing here is public API.
__all__: list[str] = []

log = logging.getLogger("golem.service")

_BATCH = 200  # audit entries read per query
_now = time.monotonic  # the keep-alive clock
_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
_END = b'event: end\ndata: {"reason":"your session or stream token has ended: sign in again"}\n\n'


def _sse(event: str | None, data: Any, event_id: int | str | None = None) -> str:
    """One server-sent event; its JSON is ASCII-only, so no character (U+2028 …) can end
    the `data:` line."""
    lines = [] if event_id is None else [f"id: {event_id}"]
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


async def _follow(
    request: Request,
    state: ServiceState,
    cred: Credential,
    cursor: int,
    batch: list[AuditEntry] | None,
) -> AsyncIterator[str]:
    """The stream's text after `cursor` (first batch `batch`) until the client leaves or
    the store cannot be reached."""
    store = require_store(state)
    change_feed = getattr(store, "change_feed", None)
    feed: ChangeFeed | None = None if change_feed is None else change_feed()
    runs: dict[str, _RunFacts | None] = {}
    secret, heartbeat = state.auth.secret, state.settings.stream_heartbeat
    full_view = cred.approver.agents is None
    start = seal_cursor(secret, cursor)
    yield "retry: 2000\n\n"
    yield _sse("hello", {"cursor": start, "identity": cred.approver.identity}, start)
    beat = _now() + heartbeat  # the next keep-alive, on a fixed schedule
    try:
        while True:
            if batch is None:
                batch = await store.changes_since(cursor, limit=_BATCH)
            for entry in batch:
                cursor = entry.id
                run = await _run_facts(store, entry, runs)
                if run is None or not cred.approver.may_see(run.agent):
                    continue  # no line at all: the stream shows nothing of what it leaves out
                data = audit_json(entry, None if full_view else secret)
                data.update(
                    agent=run.agent, status=run.status.value, parent_run_id=run.parent_run_id
                )
                # a caller who does not see every agent is never told an audit ID (ADR 0077)
                yield _sse("change", data, entry.id if full_view else seal_cursor(secret, entry.id))
            runs.clear()
            now = _now()
            if now >= beat:  # due, busy or idle: a long run of hidden entries sends it too
                yield ": keep-alive\n\n"
                while beat <= now:
                    beat += heartbeat
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
    except StoreError as exc:
        if not unreachable(exc):
            raise
        log.warning("event stream ended: the store cannot be reached: %s", exc)


async def _events(request: Request, cred: Credential) -> Response:
    """`cred`'s change stream from `Last-Event-ID`, else `?cursor=`, else the newest change
    (422 for a bad cursor)."""
    state: ServiceState = request.app.state.golem
    store = require_store(state)
    start = start_cursor(request, full_view=cred.approver.agents is None)
    cursor = await store.last_change_id() if start is None else start
    # the first batch is read before answering: a store that cannot be reached is a 503,
    # not a stream that breaks after its 200
    first = await store.changes_since(cursor, limit=_BATCH)
    stream = _follow(request, state, cred, cursor, first)
    return StreamingResponse(stream, media_type="text/event-stream", headers=_HEADERS)


def _credential(
    request: Request, state: ServiceState
) -> tuple[Credential, Callable[[], bool], float] | None:
    """The caller (bearer token, stream token or session), a validity check, its expiry."""
    auth = state.auth
    cred = token_credential(request)
    if cred is not None:
        return cred, lambda: True, math.inf
    token = request.query_params.get("stream_token")
    cred = auth.verify_stream_token(token)
    if cred is not None:
        exp = auth.expiry(token, stream=True) or 0.0
        return cred, lambda: auth.verify_stream_token(token) is not None, exp
    value = request.cookies.get(SESSION_COOKIE)
    cred = auth.verify_session(value)
    if cred is not None:
        return cred, lambda: auth.verify_session(value) is not None, auth.expiry(value) or 0.0
    return None


class GuardedEvents:
    """The ASGI app of `GET /api/events`: `_events` behind a cursor check, a per-identity
    limit and credential re-checks."""

    __openapi__ = Operation(
        op_id="streamChanges",
        summary="Server-sent events (`event: change`) for every audit entry the caller may see.",
        query=EventsQuery,
        headers={"Last-Event-ID": "Set by EventSource on reconnect; wins over ?cursor="},
        responses={200: SSE},
        security=("bearer", "streamToken", "session"),
    )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self._open(Request(scope, receive), scope, receive, send)
        except ApiError as exc:
            await exc.response()(scope, receive, send)

    async def _open(self, request: Request, scope: Scope, receive: Receive, send: Send) -> None:
        state: ServiceState = request.app.state.golem
        found = _credential(request, state)
        if found is None:
            raise ApiError(
                401,
                "unauthenticated",
                "send 'Authorization: Bearer <token>', a ?stream_token= from "
                "POST /api/stream-token, or the inbox session cookie",
            )
        # after the credential: a stranger gets 401 whatever the cursor
        start_cursor(request, full_view=found[0].approver.agents is None)
        if request.method == "HEAD":  # headers only: a streamed HEAD would hold a slot forever
            headers = {"Content-Type": "text/event-stream; charset=utf-8", **_HEADERS}
            await Response(status_code=200, headers=headers)(scope, receive, send)
            return
        cred, valid, exp = found
        identity = cred.approver.identity
        limit, counts = state.settings.max_streams_per_identity, state.open_streams
        if counts.get(identity, 0) >= limit:
            message = f"{identity} already has {limit} open event streams; close one"
            raise ApiError(429, "too_many_streams", message)
        counts[identity] = counts.get(identity, 0) + 1
        try:
            await self._serve(cred, scope, receive, send, valid, exp, state.stream_recheck)
        finally:
            counts[identity] -= 1
            if counts[identity] <= 0:
                del counts[identity]

    async def _serve(
        self,
        cred: Credential,
        scope: Scope,
        receive: Receive,
        send: Send,
        valid: Callable[[], bool],
        exp: float,
        recheck: float,
    ) -> None:
        ended = asyncio.Event()
        started = finished = False

        async def watch() -> None:
            while True:
                left = exp - time.time()
                if left <= 0 or not valid():
                    return
                await asyncio.sleep(min(recheck, left))

        pending: asyncio.Future[Message] | None = None  # one receive at a time, reused

        async def guarded_receive() -> Message:
            nonlocal pending
            if ended.is_set():
                return {"type": "http.disconnect"}
            if pending is None:
                pending = asyncio.ensure_future(receive())
            stop: asyncio.Future[Any] = asyncio.ensure_future(ended.wait())
            try:
                done, _ = await asyncio.wait({pending, stop}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stop.cancel()
            if pending in done:
                message, pending = pending.result(), None
                return message
            return {"type": "http.disconnect"}

        async def guarded_send(message: Message) -> None:
            nonlocal started, finished
            if finished:
                return
            if message["type"] == "http.response.start":
                started = True
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                finished = True
            await send(message)

        async def close(body: bytes, more: bool) -> None:
            if started and not finished:
                await guarded_send({"type": "http.response.body", "body": body, "more_body": more})

        watcher = asyncio.create_task(watch())
        try:
            response = await _events(Request(scope, guarded_receive), cred)
            serving = asyncio.ensure_future(response(scope, guarded_receive, guarded_send))
            await asyncio.wait({serving, watcher}, return_when=asyncio.FIRST_COMPLETED)
            if not serving.done():  # the credential ended: say so, then stop the stream
                await close(_END, True)
                ended.set()
                try:
                    await asyncio.wait_for(asyncio.shield(serving), timeout=max(2.0, recheck))
                except TimeoutError:
                    serving.cancel()
                await close(b"", False)
            if serving.done() and not serving.cancelled():
                serving.result()
        finally:
            watcher.cancel()
            if pending is not None:
                pending.cancel()
