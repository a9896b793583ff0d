"""`GuardedEvents`, the ASGI app behind `GET /api/events`: the stream behind its cursor
check (422), `max_streams_per_identity` (429) and credential re-checks (`event: end`)."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from golem.service.auth import Credential
from golem.service.credentials import SESSION_COOKIE, token_credential
from golem.service.errors import ApiError
from golem.service.positions import start_cursor
from golem.service.state import ServiceState

# Internals of `golem.service.create_app`; nothing here is public API.
__all__: list[str] = []

_END = b'event: end\ndata: {"reason":"your session or stream token has ended: sign in again"}\n\n'


Events = Callable[[Request, Credential], Awaitable[Response]]


_HEAD_HEADERS = {  # HEAD answers the headers only: a streamed HEAD would hold a slot forever
    "Content-Type": "text/event-stream; charset=utf-8",
    "Cache-Control": "no-store",
    "X-Accel-Buffering": "no",
}


class GuardedEvents:
    """`GET /api/events` (`events`) with a cursor check, a per-identity limit and
    credential re-checks."""

    def __init__(self, events: Events) -> None:
        self.events = events

    def _credential(
        self, request: Request, state: ServiceState
    ) -> tuple[Credential, Callable[[], bool], float] | None:
        """The caller as `stream.events` will see it, a validity check, and its expiry."""
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
            exp = auth.expiry(value) or 0.0
            return cred, lambda: auth.verify_session(value) is not None, exp
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        try:
            await self._open(request, scope, receive, send)
        except ApiError as exc:
            await exc.response()(scope, receive, send)

    async def _open(self, request: Request, scope: Scope, receive: Receive, send: Send) -> None:
        state: ServiceState = request.app.state.golem
        found = self._credential(request, state)
        if found is None:
            raise ApiError(
                401,
                "unauthenticated",
                "send 'Authorization: Bearer <token>', a ?stream_token= from "
                "POST /api/stream-token, or the inbox session cookie",
            )
        # after the credential: a stranger gets 401 whatever the cursor
        start_cursor(request, full_view=found[0].approver.agents is None)
        if request.method == "HEAD":  # the stream's headers only: no stream is opened
            await Response(status_code=200, headers=_HEAD_HEADERS)(scope, receive, send)
            return
        cred, valid, exp = found
        identity = cred.approver.identity
        limit, counts = state.settings.max_streams_per_identity, state.open_streams
        if counts.get(identity, 0) >= limit:
            raise ApiError(
                429,
                "too_many_streams",
                f"{identity} already has {limit} open event streams; close one",
            )
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
            waiting: set[asyncio.Future[Any]] = {pending, stop}
            try:
                done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
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

        watcher = asyncio.create_task(watch())
        inner = Request(scope, guarded_receive)
        try:
            response = await self.events(inner, cred)
            serving = asyncio.ensure_future(response(scope, guarded_receive, guarded_send))
            await asyncio.wait({serving, watcher}, return_when=asyncio.FIRST_COMPLETED)
            if not serving.done():  # the credential ended: say so, then stop the stream
                if started and not finished:
                    await guarded_send(
                        {"type": "http.response.body", "body": _END, "more_body": True}
                    )
                ended.set()
                try:
                    await asyncio.wait_for(asyncio.shield(serving), timeout=max(2.0, recheck))
                except TimeoutError:
                    serving.cancel()
                if started and not finished:
                    await guarded_send(
                        {"type": "http.response.body", "body": b"", "more_body": False}
                    )
            if serving.done() and not serving.cancelled():
                serving.result()
        finally:
            watcher.cancel()
            if pending is not None:
                pending.cancel()
