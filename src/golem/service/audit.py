"""The audit view across runs (`/audit`, its CSV and JSON downloads, `GET /api/audit`) and
the webhook delivery log: newest first, filtered by the store (`Store.audit_page`), paged
by sealed cursors; entry references for callers who do not see every agent (ADR 0077)."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from golem.durable.store import AuditAction, AuditEntry, AuditPage
from golem.service import schemas
from golem.service.api import audit_model
from golem.service.auth import Credential
from golem.service.credentials import with_bearer
from golem.service.errors import ApiError, read_query, respond
from golem.service.openapi import CSV, HTML, REDIRECT, ArrayOf, operation, page
from golem.service.pages import SignedIn, render_error, signed_in
from golem.service.positions import entry_id, read_position, seal_cursor, shown_to
from golem.service.settings import ServiceState, require_store
from golem.service.views import audit_view, path, short

# The handlers behind `golem.service.create_app`; nothing here is public API.
__all__: list[str] = []

SCAN = 5000  # entries a filtered page looks at beyond its own before it stops


@dataclass(frozen=True, slots=True)
class _AuditPage:
    """One page of the audit view."""

    rows: list[AuditEntry]
    """The entries (with their agent), newest first."""
    next_cursor: str | None
    secret: bytes | None
    """What the caller's entry IDs are sealed under (None: shown as audit IDs)."""


async def _audit_page(state: ServiceState, cred: Credential, q: schemas.AuditQuery) -> _AuditPage:
    """The newest entries the caller may see that match `q`, below `q.before`: 400
    `invalid_cursor` for one that is not a cursor or entry reference this service sent (or,
    in full view, an audit ID)."""
    store = require_store(state)
    full_view, before = cred.approver.agents is None, None
    if q.before is not None:
        before = read_position(state.auth.secret, q.before, full_view=full_view)
        if before is None:
            why = "is not a next_cursor or entry id this service sent (or it changed)"
            if not full_view and q.before.isascii() and q.before.isdigit():
                why = "is an audit ID, which only an approver who sees every agent may pass"
            raise ApiError(400, "invalid_cursor", f"'before' {why}")
    allowed = cred.approver.agents
    agents: frozenset[str] | None = allowed
    if q.agent:
        agents = frozenset({q.agent}) & (allowed if allowed is not None else {q.agent})
    filters: dict[str, Any] = {
        "agents": agents,
        "action": q.action,
        "run_contains": q.run or None,
        "actor_contains": q.actor or None,
        "before": before,
        "limit": q.limit,
    }
    page: AuditPage = await store.audit_page(**filters, scan=SCAN)
    rows = [e for e in page.entries if e.agent is not None]
    nxt = None if page.next_before is None else seal_cursor(state.auth.secret, page.next_before)
    return _AuditPage(rows, nxt, shown_to(cred, state.auth.secret))


def _item(row: AuditEntry, secret: bytes | None) -> dict[str, Any]:
    return audit_model(row, secret).model_dump(mode="json") | {"agent": row.agent}


@operation(
    op_id="listAudit",
    query=schemas.AuditQuery,
    responses={200: schemas.AuditList},
    links={"nextPage": ("listAudit", {"before": "$response.body#/next_cursor"})},
)
@with_bearer
async def api_audit(request: Request, cred: Credential) -> Response:
    """Audit entries across runs the caller may see, filtered; newest first, paged."""
    q = read_query(request, schemas.AuditQuery)
    page = await _audit_page(request.app.state.golem, cred, q)
    return respond(
        schemas.AuditList(
            entries=[schemas.AuditListItem(**_item(r, page.secret)) for r in page.rows],
            next_cursor=page.next_cursor,
        )
    )


@page(
    "auditPage",
    summary="The audit view (HTML), or its rows as ?format=csv / ?format=json downloads; "
    'the next page is linked ("Older entries"; `Link: <…>; rel="next"` on downloads).',
    query=schemas.AuditPageQuery,
    responses={200: (HTML, CSV, ArrayOf(schemas.AuditListItem)), 303: REDIRECT},
    errors=(422,),
    response_headers={
        "Link": 'On a download with more rows: `</audit?…&before=…>; rel="next"`, the next page.'
    },
)
@signed_in(live=False)
async def audit_page(signed: SignedIn) -> Response:
    """The global audit view with filters; `?format=csv|json` downloads the same rows."""
    request = signed.request
    q = read_query(request, schemas.AuditPageQuery)
    try:
        page = await _audit_page(signed.state, signed.cred, q)
    except ApiError as exc:
        if exc.status != 400:
            raise
        return render_error(request, 400, "Not a page of this log", exc.message)
    nxt = None  # the same view's URL (format kept) for the next page
    if page.next_cursor is not None:
        kept = [(k, v) for k, v in request.query_params.multi_items() if k != "before"]
        nxt = "/audit?" + urlencode([*kept, ("before", page.next_cursor)])
    if q.format is not None:  # a download of the same rows
        headers = {"Content-Disposition": f'attachment; filename="golem-audit.{q.format}"'}
        headers.update({} if nxt is None else {"Link": f'<{nxt}>; rel="next"'})
        if q.format == "json":
            body = json.dumps(
                [_item(r, page.secret) for r in page.rows], ensure_ascii=False, indent=1
            )
            return Response(body, media_type="application/json", headers=headers)
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(["id", "at", "run_id", "agent", "actor", "action", "detail"])
        writer.writerows(
            [
                entry_id(e, page.secret),
                e.at.isoformat(),
                _cell(e.run_id),
                _cell(e.agent or ""),
                _cell(e.actor),
                e.action.value,
                _cell(json.dumps(e.detail, ensure_ascii=False)),
            ]
            for e in page.rows
        )
        return Response(out.getvalue(), media_type="text/csv; charset=utf-8", headers=headers)
    return await _render_audit(signed, q, page.rows, page.secret, nxt)


async def _render_audit(
    signed: SignedIn,
    q: schemas.AuditPageQuery,
    rows: list[AuditEntry],
    secret: bytes | None,
    older: str | None,
) -> HTMLResponse:
    """The audit page for `rows`, linking the `older` page."""
    request = signed.request
    query = urlencode({k: v for k, v in request.query_params.items() if k != "format"})
    newest = urlencode({k: v for k, v in request.query_params.items() if k != "before"})
    return await signed.render(
        "audit.html",
        {
            "page": "audit",
            "older": older or "",
            "newest": ("/audit?" + newest if newest else "/audit") if q.before else "",
            "rows": [
                {
                    **audit_view(r, secret),
                    "agent": r.agent,
                    "run_href": path("runs", r.run_id),
                    "run_short": short(r.run_id),
                }
                for r in rows
            ],
            "filters": {
                "actor": q.actor or "",
                "action": q.action.value if q.action else "",
                "agent": q.agent or "",
                "run": q.run or "",
            },
            "actions": ACTIONS,
            "agent_names": signed.agent_names,
            "export_csv": "/audit?" + urlencode([*parse_qsl(query), ("format", "csv")]),
            "export_json": "/audit?" + urlencode([*parse_qsl(query), ("format", "json")]),
        },
    )


def _cell(text: str) -> str:
    """A CSV cell a spreadsheet will not run as a formula (=, +, -, @ at the start)."""
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


ACTIONS = [a.value for a in AuditAction]  # for the filter


def _deliveries(state: ServiceState, cred: Credential) -> list[schemas.DeliveryItem]:
    notifier = state.notifier
    if notifier is None:
        return []
    item = schemas.DeliveryItem.model_validate
    return [item(d, from_attributes=True) for d in notifier.visible(cred.approver.may_see)]


@operation(op_id="listNotifications", responses={200: schemas.DeliveryList})
@with_bearer
async def api_deliveries(request: Request, cred: Credential) -> Response:
    """The webhook delivery log (runs the caller may see), newest first."""
    return respond(schemas.DeliveryList(deliveries=_deliveries(request.app.state.golem, cred)))


@page("notificationsPage")
@signed_in(live=False)
async def deliveries_page(signed: SignedIn) -> Response:
    """The webhook delivery log (HTML)."""
    state = signed.state
    return await signed.render(
        "notifications.html",
        {
            "page": "notifications",
            "configured": state.notifier is not None,
            "hooks": [w.shown_url for w in state.notifier.webhooks] if state.notifier else [],
            "deliveries": _deliveries(state, signed.cred),
        },
    )
