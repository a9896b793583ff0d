"""Helpers the service tests share: the approvers, signing in, reading pages, the change
stream, and a real server."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from html.parser import HTMLParser
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.types import ASGIApp

from golem.durable.store import CallKind, Decision, NewCall, NewRun, RunRecord, Store, utc_now
from golem.service import Approver, AuthConfig

TOKENS = {
    "alice": "tok-alice",  # may do everything
    "olga": "tok-olga",  # agents twin + echo only
    "tess": "tok-tess",  # tool lookup only
    "vic": "tok-vic",  # may not start runs
}


def make_auth() -> AuthConfig:
    """The approvers every service test uses."""
    return AuthConfig(
        tokens={
            TOKENS["alice"]: Approver("alice"),
            TOKENS["olga"]: Approver("olga", agents=frozenset({"twin", "echo"})),
            TOKENS["tess"]: Approver("tess", tools=frozenset({"lookup"})),
            TOKENS["vic"]: Approver("vic", can_start=False),
        },
        secret=b"test-secret-that-is-32-bytes-long",
    )


def bearer(who: str) -> dict[str, str]:
    """The Authorization header of a test approver."""
    return {"Authorization": f"Bearer {TOKENS[who]}"}


@contextmanager
def serve(app: ASGIApp, *, startup_timeout: float = 20.0) -> Iterator[str]:
    """Run `app` with uvicorn on 127.0.0.1 in a thread until the block ends; yield its URL."""
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=0,
        log_level="warning",
        lifespan="on",
        ws="none",
        http="h11",
        timeout_graceful_shutdown=1,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="uvicorn-test", daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


StartRun = Callable[..., Awaitable[dict[str, Any]]]
"""The `start` fixture: start a run through the API and return its JSON."""

WAIT = 10.0  # a guard against a hung stream, not a duration the test asserts


async def sign_in(client: httpx.AsyncClient, who: str = "alice") -> str:
    """Sign in through the form; return the CSRF token of the session."""
    res = await client.post("/login", data={"token": TOKENS[who], "next": "/"})
    assert res.status_code == 303, res.text
    page = await client.get("/")
    assert page.status_code == 200
    return csrf_of(page.text)


def csrf_of(html: str) -> str:
    """The CSRF token of a page's forms."""
    match = re.search(r'name="csrf" value="([^"]+)"', html)
    assert match, "no CSRF field on the page"
    return match.group(1)


class Inventory(HTMLParser):
    """Collects what the accessibility and CSP checks look at."""

    def __init__(self) -> None:
        super().__init__()
        self.controls: list[dict[str, str | None]] = []
        self.label_for: set[str] = set()
        self.ids: list[str] = []
        self.scripts: list[dict[str, str | None]] = []
        self.inline_styles = 0
        self.handlers: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if a.get("id"):
            self.ids.append(a["id"] or "")
        if tag in ("input", "textarea", "select") and a.get("type") != "hidden":
            self.controls.append(a)
        if tag == "label" and a.get("for"):
            self.label_for.add(a["for"] or "")
        if tag == "script":
            self.scripts.append(a)
        if "style" in a:
            self.inline_styles += 1
        self.handlers += [k for k in a if k.startswith("on")]


def inventory(html: str) -> Inventory:
    """The controls, labels, ids, scripts and handlers of a page."""
    inv = Inventory()
    inv.feed(html)
    return inv


async def save_run(
    store: Store,
    run_id: str,
    *calls: NewCall | tuple[str, str, str],
    agent: str = "twin",
    history: str = "[]",
    started_by: str = "alice",
    **more: Any,
) -> RunRecord:
    """Save a pending run straight through the store, as a worker or script might; a call
    given as (call ID, tool, args) is an approval."""
    made = tuple(
        c if isinstance(c, NewCall) else NewCall(c[0], CallKind.APPROVAL, c[1], c[2]) for c in calls
    )
    new = NewRun(id=run_id, agent=agent, conversation_id=more.pop("conversation_id", "c-" + run_id),
                 history=history, calls=made, started_by=started_by, **more)  # fmt: skip
    return await store.save_pending(new)


async def interrupt(store: Store, run_id: str) -> None:
    """Approve every call of a pending run, claim it, and let its lease run out."""
    run = await store.get_run(run_id)
    for c in run.calls:
        await store.decide(run_id, c.call_id, Decision.approve(), decided_by="seed")
    claimed = await store.claim_ready("w-dead", 30)
    assert claimed is not None
    await store.sweep_interrupted(now=utc_now() + timedelta(minutes=5))  # the lease ran out


@dataclass
class Event:
    """One server-sent event."""

    event: str = "message"
    data: str = ""
    id: str | None = None
    comment: str = ""

    def json(self) -> Any:
        return json.loads(self.data)


def parse(block: str) -> Event:
    """The event a block of server-sent-event lines stands for."""
    ev = Event()
    for line in block.split("\n"):
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "":
            ev.comment = value
        elif name == "event":
            ev.event = value
        elif name == "data":
            ev.data = value
        elif name == "id":
            ev.id = value
    return ev


@dataclass
class Stream:
    """An open response of the app: its status, headers and the events sent so far."""

    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    events: asyncio.Queue[Event] = field(default_factory=asyncio.Queue)
    buffer: str = ""
    text: str = ""
    """Every byte of the body sent so far."""
    task: asyncio.Task[None] | None = None
    """The app serving it (done once the stream ended by itself)."""
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when the app's answer is over (the client may still be connected)."""

    async def next(self, event: str | None = None) -> Event:
        """The next event (of the given type, skipping others)."""
        while True:
            ev = await asyncio.wait_for(self.events.get(), WAIT)
            if event is None or ev.event == event:
                return ev

    def received(self) -> list[Event]:
        """The events that arrived and were not read yet."""
        out = []
        while not self.events.empty():
            out.append(self.events.get_nowait())
        return out


def scope_of(
    method: str, path: str, *, query: bytes = b"", headers: dict[str, str] | None = None
) -> dict[str, Any]:
    """The ASGI scope of a request from 127.0.0.1 to golem.test, for driving an app directly."""
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": query,
        "headers": [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()],
        "client": ("127.0.0.1", 50000),
        "server": ("golem.test", 80),
        "state": {},
    }


async def call_raw(
    app: ASGIApp, scope: dict[str, Any], body: list[bytes] | None = None
) -> tuple[int, bytes]:
    """The status and body of the app's answer to `scope`: no body, or the chunks of
    `body`, after which the client stops sending but stays connected."""
    chunks = list(body or [b""])
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if chunks:
            chunk = chunks.pop(0)
            more = body is not None
            return {"type": "http.request", "body": chunk, "more_body": more}
        await asyncio.sleep(3600)  # a client that stopped sending
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await asyncio.wait_for(app(scope, receive, send), WAIT)
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


@asynccontextmanager
async def open_stream(
    app: Starlette, *, headers: dict[str, str] | None = None, query: str = ""
) -> AsyncIterator[Stream]:
    """Open `GET /api/events` on the ASGI app; disconnect when the block ends."""
    stream = Stream()
    started = asyncio.Event()
    gone = asyncio.Event()

    async def receive() -> dict[str, Any]:
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            stream.status = message["status"]
            stream.headers = {k.decode(): v.decode() for k, v in message["headers"]}
            started.set()
        elif message["type"] == "http.response.body":
            chunk = message.get("body", b"").decode()
            stream.text += chunk
            stream.buffer += chunk
            while "\n\n" in stream.buffer:
                block, stream.buffer = stream.buffer.split("\n\n", 1)
                await stream.events.put(parse(block))

    scope = scope_of("GET", "/api/events", query=query.encode(), headers=headers)
    task = stream.task = asyncio.create_task(app(scope, receive, send))
    task.add_done_callback(lambda _: stream.ended.set())
    await asyncio.wait_for(started.wait(), WAIT)
    try:
        yield stream
    finally:
        gone.set()
        await asyncio.wait_for(task, WAIT)  # the stream ends when the client goes


def fail_every_call(store: Store, error: Exception) -> None:
    """From now on every public coroutine method of `store` raises `error`."""

    async def failing(*args: Any, **kwargs: Any) -> Any:
        raise error

    for name in dir(Store):  # the protocol's operations
        if not name.startswith("_") and name != "close" and callable(getattr(store, name)):
            setattr(store, name, failing)


_SEALED = re.compile(r"cursor=s[A-Za-z0-9_-]{48}")


def same(hidden: httpx.Response, unknown: httpx.Response, hidden_id: str, unknown_id: str) -> None:
    """The two answers are one: status, headers (but the date) and body, the IDs aside."""
    assert hidden.status_code == unknown.status_code, (hidden.text, unknown.text)

    def headers(res: httpx.Response, run_id: str) -> dict[str, str]:
        out = {k: v for k, v in res.headers.items() if k not in ("date", "content-length")}
        return {k: v.replace(run_id, "ID") for k, v in out.items()}

    assert headers(hidden, hidden_id) == headers(unknown, unknown_id)

    def text(res: httpx.Response, run_id: str) -> str:
        # a page's stream cursor is sealed with a fresh nonce on every load (ADR 0073)
        return _SEALED.sub("cursor=SEALED", res.text.replace(run_id, "ID"))

    assert text(hidden, hidden_id) == text(unknown, unknown_id)
