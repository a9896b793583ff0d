"""Webhook notifications: a run paused (`run.paused`), a call is about to expire
(`call.expiring`), a run ended (`run.ended`).

`ServiceSettings(webhooks=[Webhook(url, secret=..., agents={"ops"})])`. The notifier follows
the audit log and the deadlines and POSTs JSON (`format="json"`) or a Slack message, signed
with `X-Golem-Signature: sha256=<HMAC of "<X-Golem-Timestamp>.<body>">`, retrying failures;
every attempt is kept in the delivery log (`/notifications`, `GET /api/notifications`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import KW_ONLY, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal
from urllib.parse import quote, urlsplit, urlunsplit

import httpx

from golem._display import reveal
from golem._ids import new_id
from golem.durable.store import (
    AuditAction,
    CorruptRecord,
    RunNotFound,
    RunRecord,
    RunStatus,
    Store,
    utc_now,
)
from golem.service.views import context_of, first_line

__all__ = ["Delivery", "Notifier", "Webhook", "sign"]

log = logging.getLogger("golem.service.notify")

Event = Literal["run.paused", "call.expiring", "run.ended"]
EVENTS: frozenset[str] = frozenset({"run.paused", "call.expiring", "run.ended"})


@dataclass(frozen=True)
class Webhook:
    """Where to POST notifications (`url`), signed with `secret` (None: unsigned), for runs
    of `agents` (None: all), which `events`, as `"json"` or `"slack"`; `ValueError` for a
    URL that is not http(s), an unknown event or format."""

    url: str
    _: KW_ONLY
    secret: bytes | None = field(default=None, repr=False)
    agents: frozenset[str] | None = None
    events: frozenset[str] = EVENTS
    format: Literal["json", "slack"] = "json"

    def __post_init__(self) -> None:
        try:
            parts = urlsplit(self.url)
            parts.port  # noqa: B018 - raises ValueError for a port that is not a number 0-65535
        except ValueError:
            parts = urlsplit("")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"webhook URL must be http(s)://host/..., got {self.url!r}")
        unknown = set(self.events) - EVENTS
        if unknown:
            raise ValueError(f"unknown webhook events {sorted(unknown)}; known: {sorted(EVENTS)}")
        if self.format not in ("json", "slack"):
            raise ValueError(f'webhook format must be "json" or "slack", got {self.format!r}')
        if self.agents is not None and not isinstance(self.agents, frozenset):
            object.__setattr__(self, "agents", frozenset(self.agents))
        if not isinstance(self.events, frozenset):
            object.__setattr__(self, "events", frozenset(self.events))

    @classmethod
    def parse(cls, spec: str, *, secret: bytes | None = None) -> Webhook:
        """`URL` or `AGENT=URL`, `slack+` before the URL for Slack (`golem serve --notify`)."""
        agents: frozenset[str] | None = None
        name, sep, rest = spec.partition("=")
        if sep and "://" not in name:
            agents, spec = frozenset({name}), rest
        fmt: Literal["json", "slack"] = "json"
        if spec.startswith("slack+"):
            fmt, spec = "slack", spec.removeprefix("slack+")
        return cls(spec, secret=secret, agents=agents, format=fmt)

    @property
    def shown_url(self) -> str:
        """The URL without user info, query or path past its first segment (secrets)."""
        parts = urlsplit(self.url)
        host = (parts.hostname or "") + (f":{parts.port}" if parts.port else "")
        first, _, rest = parts.path.lstrip("/").partition("/")
        path = "/" + first + ("/…" if rest else "")
        return urlunsplit((parts.scheme, host, path, "", ""))

    def wants(self, event: str, agent: str) -> bool:
        """Whether this webhook takes `event` for runs of `agent`."""
        return event in self.events and (self.agents is None or agent in self.agents)


@dataclass
class Delivery:
    """One notification to one webhook, with every attempt's result."""

    id: str
    event: str
    run_id: str
    agent: str
    url: str
    created_at: datetime
    attempts: list[dict[str, Any]] = field(default_factory=list)
    """Each attempt: at, status (HTTP status or None), error."""
    state: Literal["pending", "delivered", "failed"] = "pending"


_ENDED = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.INTERRUPTED})
_EVENT_OF: dict[AuditAction, Event] = {
    AuditAction.CREATED: "run.paused",
    AuditAction.COMPLETED: "run.ended",
    AuditAction.FAILED: "run.ended",
    AuditAction.INTERRUPTED: "run.ended",
}


def _fits(event: Event, status: RunStatus) -> bool:
    """Whether a run now `status` is still worth `event` (a pause still pending, an end)."""
    return status is RunStatus.PENDING if event == "run.paused" else status in _ENDED


def sign(secret: bytes, timestamp: str, body: bytes) -> str:
    """The `X-Golem-Signature` value: `sha256=` + HMAC-SHA256 of `timestamp.body`."""
    mac = hmac.new(secret, timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return "sha256=" + mac


def _payload(
    event: str, run: RunRecord, link: str, *, call_id: str | None = None
) -> dict[str, Any]:
    """The JSON body of a notification (`format="json"`)."""
    calls = [
        {
            "call_id": c.call_id,
            "tool_name": c.tool_name,
            "kind": c.kind.value,
            "deadline": None if c.deadline is None else c.deadline.astimezone(UTC).isoformat(),
        }
        for c in run.undecided
        if call_id is None or c.call_id == call_id
    ]
    out: dict[str, Any] = {
        "event": event,
        "run_id": run.id,
        "agent": run.agent,
        "status": run.status.value,
        "title": first_line(context_of(run.conversation)[0]),
        "started_by": run.started_by,
        "url": link,
        "calls": calls,
        "sent_at": utc_now().isoformat(),
    }
    if event == "run.ended":
        outcome = run.outcome
        out["outcome"] = outcome and {"status": outcome.status.value, "error": outcome.error}
    return out


def _mrkdwn(text: str) -> str:
    """`text` for Slack mrkdwn: `&<>` escaped, hidden characters shown as markers."""
    return reveal(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _slack_message(body: dict[str, Any]) -> dict[str, Any]:
    """A Slack incoming-webhook message for a `payload` (text escaped for mrkdwn)."""
    title = _mrkdwn(body["title"] or body["run_id"])
    head = {
        "run.paused": f"{len(body['calls'])} call(s) wait for a decision",
        "call.expiring": "A call is about to expire",
    }.get(body["event"], f"Run {body['status']}")
    tools = ", ".join(_mrkdwn(c["tool_name"]) for c in body["calls"])
    lines = [f"*{head}* · {_mrkdwn(body['agent'])}", f"<{body['url']}|{title}>"]
    if tools:
        lines.append(f"Tools: {tools}")
    return {
        "text": f"{head}: {title}",
        "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": "\n".join(lines)}}],
    }


class Notifier:
    """Follows the audit log and deadlines; delivers webhook notifications, retried after
    each of `retry_delays` seconds; `public_url` is the inbox's base URL for deep links."""

    def __init__(
        self,
        store: Store,
        webhooks: Sequence[Webhook],
        *,
        public_url: str,
        expiring_within: float = 900.0,
        retry_delays: Sequence[float] = (1.0, 5.0, 30.0, 120.0),
        poll_interval: float = 1.0,
        timeout: float = 10.0,
        log_size: int = 500,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.store = store
        self.webhooks = list(webhooks)
        self.public_url = public_url.rstrip("/")
        self.expiring_within = expiring_within
        self.retry_delays = list(retry_delays)
        self.poll_interval = poll_interval
        self.deliveries: deque[Delivery] = deque(maxlen=log_size)
        self._warned: set[tuple[str, str]] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._client = httpx.AsyncClient(timeout=timeout, transport=transport)

    def link(self, run_id: str) -> str:
        """The deep link to a run's page in the inbox."""
        return f"{self.public_url}/runs/{quote(run_id, safe='')}"

    async def run(self, stop: asyncio.Event) -> None:
        """Follow the store until `stop` is set, then wait for deliveries in flight."""
        cursor = await self.store.last_change_id()
        while not stop.is_set():
            try:
                cursor = await self.step(cursor)
            except Exception:  # a store hiccup must not end notifications for good
                log.exception("notifier: reading the store failed; retrying")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.poll_interval)
        await self.close()

    async def step(self, cursor: int, now: datetime | None = None) -> int:
        """Notify for audit entries after `cursor` and for deadlines; return the new cursor."""
        while True:
            batch = await self.store.changes_since(cursor, limit=200)
            for entry in batch:
                cursor = entry.id
                event = _EVENT_OF.get(entry.action)
                if event is None:
                    continue
                # as `changes_since` read the run: surely not notified?
                if entry.run_status is not None and not _fits(event, entry.run_status):
                    continue
                if entry.agent is not None and not any(
                    w.wants(event, entry.agent) for w in self.webhooks
                ):
                    continue
                try:  # the payload: the run with its calls (read only for a notification)
                    run = await self.store.get_run(entry.run_id)
                except RunNotFound:
                    continue
                except CorruptRecord as exc:  # no payload to send; later changes still go
                    log.error("notifier: %s; no %s notification for it", exc, event)
                    continue
                if not _fits(event, run.status):
                    continue
                self.notify(event, run)
            if len(batch) < 200:
                break
        await self._check_deadlines(now or utc_now())
        return cursor

    async def _check_deadlines(self, now: datetime) -> None:
        if not any("call.expiring" in w.events for w in self.webhooks):
            return
        soon = now + timedelta(seconds=self.expiring_within)
        runs = await self.store.list_runs(status=RunStatus.PENDING, limit=1000)
        for run in runs:
            for c in run.undecided:
                key = (run.id, c.call_id)
                if c.deadline is None or key in self._warned or not now < c.deadline <= soon:
                    continue
                self._warned.add(key)
                self.notify("call.expiring", run, call_id=c.call_id)

    def notify(self, event: Event, run: RunRecord, *, call_id: str | None = None) -> list[Delivery]:
        """Queue `event` for `run` to every webhook that wants it; return the deliveries."""
        body = _payload(event, run, self.link(run.id), call_id=call_id)
        made = []
        for hook in self.webhooks:
            if not hook.wants(event, run.agent):
                continue
            d = Delivery(new_id(), event, run.id, run.agent, hook.shown_url, utc_now())
            self.deliveries.appendleft(d)
            made.append(d)
            task = asyncio.get_running_loop().create_task(self._deliver(hook, d, body))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return made

    async def _deliver(self, hook: Webhook, d: Delivery, body: dict[str, Any]) -> None:
        data = json.dumps(
            _slack_message(body) if hook.format == "slack" else body,
            ensure_ascii=False,
            separators=(",", ":"),
        ).encode()
        for attempt in range(len(self.retry_delays) + 1):
            stamp = str(int(time.time()))
            headers = {
                "Content-Type": "application/json",
                "User-Agent": "golem-webhook",
                "X-Golem-Event": d.event,
                "X-Golem-Delivery": d.id,
                "X-Golem-Timestamp": stamp,
            }
            if hook.secret is not None:
                headers["X-Golem-Signature"] = sign(hook.secret, stamp, data)
            status: int | None = None
            error = ""
            try:
                res = await self._client.post(hook.url, content=data, headers=headers)
                status = res.status_code
                if not 200 <= status < 300:
                    error = f"HTTP {status}"
            except httpx.HTTPError as exc:
                error = f"{type(exc).__name__}: {exc}"[:300]
            d.attempts.append({"at": utc_now().isoformat(), "status": status, "error": error})
            if not error:
                d.state = "delivered"
                return
            if attempt < len(self.retry_delays):
                await asyncio.sleep(self.retry_delays[attempt])
        d.state = "failed"
        log.warning(
            "webhook %s: %s for run %s failed after %d attempts",
            hook.shown_url,
            d.event,
            d.run_id,
            len(d.attempts),
        )

    def visible(self, may_see: Any) -> Iterable[Delivery]:
        """The delivery log (newest first) for runs whose agent `may_see(agent)` accepts."""
        return (d for d in self.deliveries if may_see(d.agent))

    async def drain(self) -> None:
        """Wait until every delivery in flight has finished (delivered or failed)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self, grace: float = 5.0) -> None:
        """Give deliveries in flight `grace` seconds, cancel the rest, close the HTTP client."""
        if self._tasks:
            _, late = await asyncio.wait(list(self._tasks), timeout=grace)
            for task in late:  # waiting out a long retry delay: given up at shutdown
                task.cancel()
        await self._client.aclose()
