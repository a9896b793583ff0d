"""The global audit view: every decision and state change across runs, filtered and exported.

`GET /audit` (inbox page), `GET /audit?format=csv|json` (the same rows as a download) and
`GET /api/audit` (bearer) read the newest `AUDIT_SCAN` entries of the store's audit log,
keep those of runs the caller may see, filter them by actor, action, agent and run, and
list them newest first.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from golem.service import schemas
from golem.service.api import ServiceState, audit_model, bearer, read_query, require_store, respond
from golem.service.auth import Credential
from golem.service.openapi import CSV, HTML, REDIRECT, ArrayOf, operation
from golem.store import AuditAction, AuditEntry, RunNotFound

# The handlers behind `golem.service.create_app`; nothing here is public API.
__all__: list[str] = []

AUDIT_SCAN = 5000
"""How many of the newest audit entries the view reads before filtering."""


@dataclass(frozen=True, slots=True)
class _AuditRow:
    """An audit entry with its run's agent."""

    entry: AuditEntry
    """The entry."""
    agent: str
    """The agent of the entry's run."""


async def _audit_rows(
    state: ServiceState, cred: Credential, q: schemas.AuditQuery
) -> list[_AuditRow]:
    """The newest entries the caller may see that match `q`, newest first, at most `q.limit`."""
    store = require_store(state)
    last = await store.last_change_id()
    cursor = max(0, last - AUDIT_SCAN)
    entries: list[AuditEntry] = []
    while cursor < last:
        batch = await store.changes_since(cursor, limit=1000)
        if not batch:
            break
        entries += batch
        cursor = batch[-1].id
    agents: dict[str, str | None] = {}
    rows: list[_AuditRow] = []
    actor = (q.actor or "").casefold()
    for e in reversed(entries):
        if q.action is not None and e.action is not q.action:
            continue
        if actor and actor not in e.actor.casefold():
            continue
        if q.run and q.run not in e.run_id:
            continue
        if e.run_id not in agents:
            try:
                agents[e.run_id] = (await store.get_run(e.run_id)).agent
            except RunNotFound:
                agents[e.run_id] = None
        agent = agents[e.run_id]
        if agent is None or not cred.approver.may_see(agent):
            continue
        if q.agent and agent != q.agent:
            continue
        rows.append(_AuditRow(e, agent))
        if len(rows) >= q.limit:
            break
    return rows


def _item(row: _AuditRow) -> dict[str, Any]:
    out = audit_model(row.entry).model_dump(mode="json")
    out["agent"] = row.agent
    return out


@operation(
    op_id="listAudit",
    summary="Audit entries across runs the caller may see, filtered; newest first.",
    query=schemas.AuditQuery,
    responses={200: schemas.AuditList},
    errors=(401, 422, 429),
)
async def api_audit(request: Request) -> Response:
    """Audit entries across runs the caller may see, filtered; newest first."""
    cred = bearer(request)
    q = read_query(request, schemas.AuditQuery)
    rows = await _audit_rows(request.app.state.golem, cred, q)
    return respond(schemas.AuditList(entries=[schemas.AuditListItem(**_item(r)) for r in rows]))


@operation(
    op_id="auditPage",
    summary="The audit view (HTML), or its rows as ?format=csv / ?format=json downloads.",
    query=schemas.AuditPageQuery,
    responses={200: (HTML, CSV, ArrayOf(schemas.AuditListItem)), 303: REDIRECT},
    errors=(422,),
    security=("session",),
    tag="inbox",
)
async def audit_page(request: Request) -> Response:
    """The global audit view with filters; `?format=csv|json` downloads the same rows."""
    from golem.service import inbox

    who = inbox.session(request)
    if who is None:
        return inbox.login_redirect(request)
    state: ServiceState = request.app.state.golem
    q = read_query(request, schemas.AuditPageQuery)
    rows = await _audit_rows(state, who[0], q)
    fmt = q.format
    if fmt == "json":
        body = json.dumps([_item(r) for r in rows], ensure_ascii=False, indent=1)
        return Response(
            body,
            media_type="application/json",
            headers={"Content-Disposition": 'attachment; filename="golem-audit.json"'},
        )
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(["id", "at", "run_id", "agent", "actor", "action", "detail"])
        for r in rows:
            e = r.entry
            writer.writerow(
                [
                    e.id,
                    e.at.isoformat(),
                    _cell(e.run_id),
                    _cell(r.agent),
                    _cell(e.actor),
                    e.action.value,
                    _cell(json.dumps(e.detail, ensure_ascii=False)),
                ]
            )
        return Response(
            out.getvalue(),
            media_type="text/csv; charset=utf-8",
            headers={"Content-Disposition": 'attachment; filename="golem-audit.csv"'},
        )
    return await inbox.render_audit(request, who, q, rows)


def _cell(text: str) -> str:
    """A CSV cell a spreadsheet will not run as a formula (=, +, -, @ at the start)."""
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


ACTIONS = [a.value for a in AuditAction]
"""Every audit action, for the filter."""


def _deliveries(state: ServiceState, cred: Credential) -> list[schemas.DeliveryItem]:
    notifier = state.notifier
    if notifier is None:
        return []
    return [
        schemas.DeliveryItem(
            id=d.id,
            event=d.event,
            run_id=d.run_id,
            agent=d.agent,
            url=d.url,
            created_at=d.created_at,
            state=d.state,
            attempts=[schemas.DeliveryAttempt(**a) for a in d.attempts],
        )
        for d in notifier.visible(cred.approver.may_see)
    ]


@operation(
    op_id="listNotifications",
    summary="The webhook delivery log (runs the caller may see), newest first.",
    responses={200: schemas.DeliveryList},
    errors=(401, 429),
)
async def api_deliveries(request: Request) -> Response:
    """The webhook delivery log (runs the caller may see), newest first."""
    cred = bearer(request)
    return respond(schemas.DeliveryList(deliveries=_deliveries(request.app.state.golem, cred)))


@operation(
    op_id="notificationsPage",
    summary="The webhook delivery log (HTML).",
    responses={200: HTML, 303: REDIRECT},
    security=("session",),
    tag="inbox",
)
async def deliveries_page(request: Request) -> Response:
    """The webhook delivery log: each notification, where it went and every attempt."""
    from golem.service import inbox

    who = inbox.session(request)
    if who is None:
        return inbox.login_redirect(request)
    state: ServiceState = request.app.state.golem
    return await inbox.render_page(
        request,
        who,
        "notifications.html",
        {
            "page": "notifications",
            "configured": state.notifier is not None,
            "hooks": [w.shown_url for w in state.notifier.webhooks] if state.notifier else [],
            "deliveries": _deliveries(state, who[0]),
        },
    )
