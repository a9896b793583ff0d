"""The web inbox's pages and form actions: `/login`, `/` (pending calls), `/runs`,
`/runs/{run_id}`, and the decide, approve/deny-all, resolve and start forms.

Every action is a form POST answered with a 303 redirect, so the inbox works without
JavaScript; `static/inbox.js` adds live updates. The page machinery is `golem.service.pages`.
"""

from __future__ import annotations

import math
import uuid
from typing import Any
from urllib.parse import parse_qsl, urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from golem.durable.store import (
    CallKind,
    Decision,
    RunStatus,
    utc_now,
)
from golem.errors import StoreError
from golem.service import schemas
from golem.service.auth import Credential
from golem.service.credentials import SESSION_COOKIE, session
from golem.service.errors import ApiError, check_json_value, parse_json, unreachable
from golem.service.openapi import form_action, page
from golem.service.pages import (
    PAGE_RUNS,
    SignedIn,
    checked_form,
    count_text,
    cross_site,
    read_form,
    render,
    render_error,
    safe_next,
    same_origin,
    signed_in,
    with_notice,
)
from golem.service.positions import shown_to
from golem.service.runs import (
    IDEMPOTENCY_KEY_MAX,
    decide_call,
    edited_approval,
    load_run,
    pending_page,
    start_for,
    visible_runs,
)
from golem.service.settings import require_store, state_of
from golem.service.views import (
    ago,
    audit_view,
    call_view,
    context_of,
    digest,
    first_line,
    group_views,
    iso,
    link_next,
    message_views,
    outcome_line,
    path,
    run_view,
    short,
)

# The handlers behind `golem.service.create_app`; nothing here is public API.
__all__: list[str] = []


@page("loginPage", security=())
async def login_page(request: Request) -> Response:
    """The sign-in form (a `#token=` link asks before signing in)."""
    nxt = safe_next(request.query_params.get("next"))
    if session(request) is not None:
        return RedirectResponse(nxt, status_code=303)
    return render(request, "login.html", {"page": "login", "next": nxt})


@form_action("login", schemas.LoginForm, 429, security=())
async def login(request: Request) -> Response:
    """Sign in with a token (same-site forms only; rate limited)."""
    if not same_origin(request):
        raise cross_site()
    state = state_of(request)
    address = request.client.host if request.client else "unknown"
    wait = state.login_limiter.check(address)
    if wait > 0:
        seconds = max(1, math.ceil(wait))
        refused = render_error(
            request, 429, "Too many attempts", f"Too many sign-in attempts: wait {seconds} s."
        )
        refused.headers["Retry-After"] = str(seconds)
        return refused
    form = await read_form(request)
    nxt = safe_next(form.get("next"))
    auth = state.auth
    cred = auth.authenticate(form.get("token", "").strip())
    if cred is None:
        return render(
            request,
            "login.html",
            {"page": "login", "next": nxt, "error": "That token is not valid."},
            status=401,
        )
    response = RedirectResponse(nxt, status_code=303)
    value, seconds = auth.issue_session(cred), int(auth.session_seconds)
    response.set_cookie(SESSION_COOKIE, value, max_age=seconds, **_cookie(request))
    return response


def _cookie(request: Request) -> dict[str, Any]:
    """The session cookie's attributes."""
    secure = request.url.scheme == "https"
    return {"httponly": True, "samesite": "strict", "secure": secure, "path": "/"}


@form_action("logout", schemas.LogoutForm)
async def logout(request: Request) -> Response:
    """Sign out: the session is revoked server-side."""
    _, value, _ = await checked_form(request)
    state_of(request).auth.revoke_session(value)
    response = RedirectResponse("/login?notice=signed-out", status_code=303)
    response.delete_cookie(SESSION_COOKIE, **_cookie(request))
    return response


@page("inboxPage")
@signed_in()
async def inbox_page(page: SignedIn) -> Response:
    """The inbox: pending calls the approver may decide, grouped by run."""
    request, cred, state = page.request, page.cred, page.state
    q = request.query_params
    kind_text = q.get("kind", "")
    kind = CallKind(kind_text) if kind_text in ("approval", "external") else None
    filters = {"agent": q.get("agent", ""), "tool": q.get("tool", ""), "kind": kind_text}
    after = q.get("after") or None
    agent = filters["agent"] or None
    try:
        found_page = await pending_page(
            state, cred, agent=agent, kind=kind, limit=PAGE_RUNS, after=after
        )
    except ApiError:  # a stale or foreign cursor: start from the oldest again
        after = None
        found_page = await pending_page(state, cred, agent=agent, kind=kind, limit=PAGE_RUNS)
    found = found_page.calls
    everything = not any(filters.values()) and after is None
    needle = filters["tool"].strip().casefold()
    if needle:  # the inbox matches tools by substring, ignoring case
        found = [(r, c) for r, c in found if needle in c.tool_name.casefold()]
    now = utc_now()
    soon, rest = group_views(found, cred, now, state.settings.presenters)
    startable = [
        {"name": n, "description": state.registry[n].description}
        for n in page.agent_names
        if cred.approver.may_start(n)
    ]
    interrupted = await visible_runs(
        state, cred, status=RunStatus.INTERRUPTED, agent=None, tool=None, limit=100
    )
    nxt = safe_next(request.url.path + (f"?{request.url.query}" if request.url.query else ""))
    return await page.render(
        "inbox.html",
        {
            "page": "inbox",
            "soon": soon,
            "groups": rest,
            "count": len(found),
            "filtered": any(filters.values()),
            "filters": filters,
            "agent_names": page.agent_names,
            "startable": startable,
            "open_start": not found,
            "interrupted": len(interrupted),
            "start_prompt": "",
            "start_key": uuid.uuid4().hex,
            "next": nxt,
            "next_href": _page_href(request, found_page.next_cursor),
            "prev_href": _page_href(request, "") if after else "",
            "page_runs": PAGE_RUNS,
        },
        pending=count_text(found_page) if everything else None,
    )


def _page_href(request: Request, after: str | None) -> str:
    """This inbox URL starting at cursor `after` ("" for the first page, None for none)."""
    if after is None:
        return ""
    keep = ("notice", "call", "tag", "after")
    query = [(k, v) for k, v in request.query_params.multi_items() if k not in keep]
    if after:
        query.append(("after", after))
    return "/?" + urlencode(query) if query else "/"


@page("runsPage")
@signed_in()
async def runs_page(page: SignedIn) -> Response:
    """Recent runs, filtered by status and agent."""
    request, cred, state = page.request, page.cred, page.state
    q = request.query_params
    status_text = q.get("status", "")
    status = RunStatus(status_text) if status_text in set(RunStatus) else None
    agent = q.get("agent", "")
    runs = await visible_runs(state, cred, status=status, agent=agent or None, tool=None, limit=200)
    now = utc_now()
    rows = [
        {
            "id": r.id,
            "href": path("runs", r.id),
            "dom_id": "run-" + digest(r.id),
            "version": digest(r.status.value, len(r.undecided)),
            "short": short(r.id),
            "status": r.status.value,
            "undecided": len(r.undecided) if r.status is RunStatus.PENDING else 0,
            "agent": r.agent,
            "created_iso": iso(r.created_at),
            "age": ago(r.created_at, now),
            "started_by": r.started_by,
            "title": first_line(context_of(r.conversation)[0], 90) or "—",
            "outcome": outcome_line(r),
            "decided_by": sorted({c.decision.decided_by for c in r.calls if c.decision}),
        }
        for r in runs
    ]
    return await page.render(
        "runs.html",
        {
            "page": "runs",
            "runs": rows,
            "statuses": [s.value for s in RunStatus],
            "agent_names": page.agent_names,
            "filters": {"status": status_text, "agent": agent},
        },
    )


@page("runPage", errors=(404,))
@signed_in()
async def run_page(page: SignedIn) -> Response:
    """One run: its conversation, calls and audit trail."""
    request, cred, state = page.request, page.cred, page.state
    try:
        run = await load_run(state, cred, request.path_params["run_id"])
    except ApiError as exc:
        return render_error(request, exc.status, "Run not available", exc.message)
    audit = await require_store(state).audit(run.id)
    now = utc_now()
    cards = [call_view(run, c, cred, now, state.settings.presenters) for c in run.calls]
    link_next([c for c in cards if c["can_decide"] and not c["decision"]])
    return await page.render(
        "run.html",
        {
            "page": "run",
            "run_id": run.id,
            "run": run_view(run, now),
            "calls": cards,
            "resolve_action": path("runs", run.id, "resolve")
            if run.status is RunStatus.INTERRUPTED and cred.approver.may_start(run.agent)
            else "",
            "approved_calls": [  # re-running a call is deciding it again (issue 27)
                c
                for c in run.calls
                if c.decision is not None
                and c.decision.kind.value == "approve"
                and cred.approver.may_decide(run.agent, c.tool_name)
            ],
            "messages": message_views(run.conversation),
            "audit": [audit_view(e, shown_to(cred, state.auth.secret)) for e in audit],
            "next": path("runs", run.id),
        },
    )


def _decision(form: dict[str, str], *kinds: str) -> Decision:
    """The decision a form asks for, one of `kinds`; 422 for any other."""
    kind = form.get("decision", "")
    if kind not in kinds:
        allowed = ", ".join(kinds[:-1]) + " or " + kinds[-1]
        raise ApiError(422, "invalid_request", f"decision must be {allowed}")
    if kind == "deny":
        return Decision.deny(form.get("reason", "").strip())
    return Decision.external(form.get("result", "")) if kind == "external" else Decision.approve()


@form_action("decideForm", schemas.DecisionForm, 400, 404, 409, 422)
async def decide_form(request: Request) -> Response:
    """Decide a call from the inbox, then go back."""
    cred, _, form = await checked_form(request)
    run_id, call_id = request.path_params["run_id"], request.path_params["call_id"]
    kind = form.get("decision", "")
    if kind == "approve" and "args" in form:
        decision = await edited_approval(state_of(request), cred, run_id, call_id, form["args"])
    else:
        decision = _decision(form, "approve", "deny", "external")
    try:
        _, run = await decide_call(state_of(request), cred, run_id, call_id, decision)
    except ApiError as exc:
        if exc.status != 409:
            raise
        return await _conflict_page(request, cred, run_id, call_id, exc)
    call = run.call(call_id)
    nxt = safe_next(form.get("next"), path("runs", run_id))
    after = form.get("after", "")
    fragment = after if after.startswith("call-") and after[5:].isalnum() else ""
    named = f"{call.tool_name} ({call_id})"
    return RedirectResponse(with_notice(request, nxt, kind, named, fragment), status_code=303)


async def _conflict_page(
    request: Request, cred: Credential, run_id: str, call_id: str, exc: ApiError
) -> Response:
    """409 as a page that links the run and says who decided the call, and how."""
    run = await load_run(state_of(request), cred, run_id)
    call = run.call(call_id)
    d = call.decision
    who = session(request)
    return render(
        request,
        "conflict.html",
        {
            "status": 409,
            "heading": "Already decided or no longer pending",
            "error": exc.message,
            "call": call_view(run, call, cred, utc_now()),
            "decided_by": d.decided_by if d else "",
            "run_href": path("runs", run.id),
            "run_short": short(run.id),
            "run_status": run.status.value,
        },
        status=409,
        who=who,
    )


@form_action("decideRunForm", schemas.BulkDecisionForm, 400, 404, 409, 422)
async def decide_run_form(request: Request) -> Response:
    """Approve all or deny all of a run's undecided calls (that the approver may decide)."""
    cred, _, form = await checked_form(request)
    state = state_of(request)
    run = await load_run(state, cred, request.path_params["run_id"])
    kind = form.get("decision", "")
    calls = [c for c in run.undecided if cred.approver.may_decide(run.agent, c.tool_name)]
    if run.status is not RunStatus.PENDING:  # a form sent again after the run moved on
        raise ApiError(
            409, "run_not_pending", f"the run is {run.status.value}: its calls were decided"
        )
    if not calls:  # decided meanwhile (by someone else, or by this form sent twice)
        raise ApiError(409, "nothing_to_decide", "no call of this run waits for your decision")
    if kind == "approve" and any(c.kind is not CallKind.APPROVAL for c in calls):
        raise ApiError(422, "invalid_request", "approve all needs every call to be an approval")
    decision = _decision(form, "approve", "deny")
    for c in calls:
        await decide_call(state, cred, run.id, c.call_id, decision)
    nxt = safe_next(form.get("next"), path("runs", run.id))
    return RedirectResponse(with_notice(request, nxt, f"{kind}-all"), status_code=303)


@form_action("resolveForm", schemas.ResolveForm, 404, 409, 422)
async def resolve_form(request: Request) -> Response:
    """Retry or cancel an interrupted run, with a note (operator recovery)."""
    cred, _, form = await checked_form(request)
    state = state_of(request)
    run = await load_run(state, cred, request.path_params["run_id"])
    if not cred.approver.may_start(run.agent):
        raise ApiError(403, "forbidden", f"{cred.approver.identity} may not resolve this run")
    body = (await request.body()).decode()  # UTF-8 with UTF-8 escapes: checked by read_form
    confirm = [v for k, v in parse_qsl(body, errors="strict") if k == "confirm"]
    tools = {c.call_id: c.tool_name for c in run.calls}
    for call_id in confirm:  # a confirmed call runs again: deciding it (issue 27)
        tool = tools.get(call_id)
        if tool is not None and not cred.approver.may_decide(run.agent, tool):
            raise ApiError(
                403, "forbidden", f'{cred.approver.identity} may not decide calls of tool "{tool}"'
            )
    note = form.get("note", "").strip()
    if not note:
        raise ApiError(422, "invalid_request", "say what you checked: a note is required")
    store = require_store(state)
    action = form.get("action", "")
    try:
        if action == "retry":
            await store.retry_interrupted(
                run.id, resolved_by=cred.approver.identity, note=note, confirm_calls=confirm
            )
        elif action == "cancel":
            await store.cancel_interrupted(run.id, resolved_by=cred.approver.identity, note=note)
        else:
            raise ApiError(422, "invalid_request", "action must be retry or cancel")
    except StoreError as exc:
        if unreachable(exc):
            raise  # the store cannot be reached: 503 (app.py)
        status = 409 if type(exc).__name__ == "RunNotInterrupted" else 422
        raise ApiError(status, "cannot_resolve", str(exc)) from None
    return RedirectResponse(path("runs", run.id), status_code=303)


@form_action("startForm", schemas.StartForm, 422)
async def start_form(request: Request) -> Response:
    """Start a run from the inbox, then show it."""
    cred, _, form = await checked_form(request)
    deps_text = form.get("deps_ref", "").strip()
    try:
        deps_ref = parse_json(deps_text) if deps_text else None
    except ApiError as exc:
        raise ApiError(422, "invalid_request", f"the deps reference: {exc.message}") from None
    check_json_value(deps_ref, "the deps reference")
    prompt = form.get("prompt", "").strip()
    if not prompt:
        raise ApiError(422, "invalid_request", "a prompt is required")
    key = form.get("idempotency_key") or None
    if key is not None and len(key) > IDEMPOTENCY_KEY_MAX:
        raise ApiError(422, "invalid_request", "the form's idempotency key is too long")
    # a form sent twice (a double click, a reload after a timeout) starts one run
    agent = form.get("agent", "")
    try:
        run, _ = await start_for(state_of(request), cred, agent, prompt, deps_ref, None, key)
    except ApiError as exc:
        if exc.code != "idempotency_key_reused":
            raise
        # the same form edited and sent again (back, change, submit): another start
        run, _ = await start_for(state_of(request), cred, agent, prompt, deps_ref)
    return RedirectResponse(path("runs", run.id), status_code=303)
