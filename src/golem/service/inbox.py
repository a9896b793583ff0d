"""The web inbox: server-rendered HTML pages and their form actions.

Pages: `/login`, `/` (pending calls the signed-in approver may decide), `/runs` (recent
runs) and `/runs/{run_id}` (a run's calls, conversation and audit trail). Every action is a
plain form POST guarded by the session's CSRF token, answered with a 303 redirect, so the
inbox works without JavaScript; `static/inbox.js` adds live updates and shortcuts.

Everything shown comes from the store and is escaped by the templates (Jinja2 autoescape):
arguments, reasons and messages are model output and never trusted as markup.

Each page links the change stream (`GET /api/events`, `golem.service.stream`) from the
audit cursor read before the page's data, so the script's live updates miss nothing.
"""

from __future__ import annotations

import hashlib
import json
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, parse_qsl, quote, urlencode, urlsplit, urlunsplit

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from golem.messages import loads_history
from golem.service.api import (
    ApiError,
    ServiceState,
    check_json_value,
    check_text,
    decide_call,
    load_run,
    parse_json,
    pending_calls,
    require_store,
    start_for,
    visible_runs,
)
from golem.service.auth import Credential
from golem.store import (
    AuditEntry,
    CallKind,
    Decision,
    PendingCallRecord,
    RunRecord,
    RunStatus,
    utc_now,
)

__all__ = [
    "SESSION_COOKIE",
    "call_view",
    "decide_form",
    "inbox_page",
    "login",
    "login_page",
    "logout",
    "render_error",
    "run_page",
    "run_view",
    "runs_page",
    "same_origin",
    "session",
    "start_form",
]

SESSION_COOKIE = "golem_session"
_HERE = Path(__file__).parent
STATIC_DIR = _HERE / "static"

_env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(_HERE / "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def _static_version(name: str) -> str:
    return hashlib.sha256((STATIC_DIR / name).read_bytes()).hexdigest()[:12]


_STATIC_VERSIONS = {
    name: _static_version(name) for name in ("inbox.css", "inbox.js", "favicon.svg")
}
_env.globals["static_url"] = lambda name: f"/static/{name}?v={_STATIC_VERSIONS[name]}"

_NOTICES = {
    "approve": "Approved. A worker resumes the run once every call is decided.",
    "deny": "Denied. The model is told not to run the call.",
    "external": "Result submitted.",
    "signed-out": "Signed out.",
}


# --------------------------------------------------------------------------- formatting


def _span(seconds: float) -> str:
    s = abs(seconds)
    if s < 45:
        return "a few seconds"
    minutes = round(s / 60)
    if minutes < 60:
        return f"{minutes} min"
    hours = round(s / 3600)
    if hours < 24:
        return f"{hours} h"
    return f"{round(s / 86400)} d"


def _ago(at: datetime, now: datetime) -> str:
    seconds = (now - at).total_seconds()
    return "just now" if seconds < 45 else f"{_span(seconds)} ago"


def _until(at: datetime, now: datetime) -> str:
    seconds = (at - now).total_seconds()
    return "now (expired)" if seconds <= 0 else f"in {_span(seconds)}"


def _iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat()


def _stamp(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _pretty_json(raw: str) -> str:
    """Indented JSON for display; text that is not JSON is shown as it is."""
    try:
        value = json.loads(raw)
    except (ValueError, TypeError):
        return raw
    return json.dumps(value, indent=2, ensure_ascii=False)


def _short(run_id: str) -> str:
    return run_id[-12:] if len(run_id) > 12 else run_id


def _digest(*parts: object) -> str:
    text = json.dumps(parts, default=str, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _path(*segments: str) -> str:
    return "/" + "/".join(quote(s, safe="") for s in segments)


def _safe_next(value: str | None, default: str = "/") -> str:
    """A local path to return to: an absolute path on this site, never another origin."""
    if not value or not value.startswith("/") or value.startswith("//") or "\\" in value:
        return default
    if any(ord(ch) < 32 for ch in value):
        return default
    return value


def _with_notice(path: str, notice: str) -> str:
    """`path` with its `notice` query parameter set to `notice` (other parameters kept)."""
    parts = urlsplit(path)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "notice"]
    query.append(("notice", notice))
    return urlunsplit(("", "", parts.path, urlencode(query), ""))


# --------------------------------------------------------------------------- views


def call_view(
    run: RunRecord, c: PendingCallRecord, cred: Credential, now: datetime
) -> dict[str, Any]:
    """What a call card shows (every string escaped by the template)."""
    decision = None
    if c.decision is not None:
        d = c.decision
        decision = {
            "kind": d.kind.value,
            "label": {"approve": "Approved", "deny": "Denied", "external": "Answered"}[
                d.kind.value
            ],
            "by": d.decided_by,
            "at_iso": _iso(d.decided_at),
            "at_text": _ago(d.decided_at, now),
            "reason": d.reason,
            "text": d.text,
        }
    deadline = c.deadline
    return {
        "dom_id": "call-" + _digest(run.id, c.call_id),
        "version": _digest(run.status.value, decision),
        "run_id": run.id,
        "run_href": _path("runs", run.id),
        "run_short": _short(run.id),
        "call_id": c.call_id,
        "agent": run.agent,
        "kind": c.kind.value,
        "tool_name": c.tool_name,
        "reason": c.reason,
        "args_pretty": _pretty_json(c.args),
        "created_iso": _iso(run.created_at),
        "age": _ago(run.created_at, now),
        "deadline_iso": _iso(deadline) if deadline else "",
        "expires": _until(deadline, now) if deadline else "",
        "soon": bool(deadline and (deadline - now).total_seconds() < 300),
        "decision": decision,
        "can_decide": run.status is RunStatus.PENDING
        and cred.approver.may_decide(run.agent, c.tool_name),
        "action": _path("runs", run.id, "calls", c.call_id, "decision"),
    }


def _message_views(history: str) -> list[dict[str, Any]]:
    try:
        messages = loads_history(history)
    except ValueError:
        return [{"role": "system", "title": "unreadable history", "content": history}]
    views: list[dict[str, Any]] = []
    for m in messages:
        title = {"system": "System", "user": "User", "assistant": "Assistant"}.get(m.role, "")
        if m.role == "tool":
            title = f"Tool result · {m.tool_name}" + (" · failed" if m.failed else "")
        view = {
            "role": m.role,
            "title": title,
            "content": m.content,
            "failed": m.failed,
            "parts": [f"{p.kind}: {p.url or p.media_type or 'inline data'}" for p in m.parts],
            "thinking": "\n\n".join(t.text or "(redacted)" for t in m.thinking),
            "tool_calls": [
                {"id": t.id, "name": t.name, "args": _pretty_json(t.args)} for t in m.tool_calls
            ],
        }
        view["version"] = _digest(view)
        views.append(view)
    return views


def _output_text(run: RunRecord) -> str:
    output = run.outcome.output if run.outcome is not None else None
    if isinstance(output, str):
        return output
    return json.dumps(output, indent=2, ensure_ascii=False)


def run_view(run: RunRecord, now: datetime) -> dict[str, Any]:
    """What the run page's header, facts and outcome show."""
    return {
        "id": run.id,
        "short": _short(run.id),
        "status": run.status.value,
        "version": _digest(run.status.value, run.child_run_id, len(run.undecided)),
        "agent": run.agent,
        "conversation_id": run.conversation_id,
        "started_by": run.started_by,
        "created_iso": _iso(run.created_at),
        "created_text": f"{_stamp(run.created_at)} ({_ago(run.created_at, now)})",
        "expires_iso": _iso(run.expires_at) if run.expires_at else "",
        "expires_text": f"{_stamp(run.expires_at)} ({_until(run.expires_at, now)})"
        if run.expires_at
        else "",
        "deps_ref": None if run.deps_ref is None else json.dumps(run.deps_ref),
        "parent_run_id": run.parent_run_id,
        "parent_href": _path("runs", run.parent_run_id) if run.parent_run_id else "",
        "child_run_id": run.child_run_id,
        "child_href": _path("runs", run.child_run_id) if run.child_run_id else "",
        "child_short": _short(run.child_run_id or ""),
        "lease_owner": run.lease_owner or "",
        "undecided": len(run.undecided),
        "output_text": _output_text(run),
        "error": run.outcome.error if run.outcome is not None else "",
    }


def _audit_view(e: AuditEntry) -> dict[str, Any]:
    detail = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in e.detail.items())
    return {
        "id": e.id,
        "at_iso": _iso(e.at),
        "at_text": _stamp(e.at),
        "actor": e.actor,
        "action": e.action.value,
        "detail": detail,
    }


# --------------------------------------------------------------------------- sessions


def _state(request: Request) -> ServiceState:
    state: ServiceState = request.app.state.golem
    return state


def session(request: Request) -> tuple[Credential, str] | None:
    """The signed-in approver and the raw session value, or None."""
    value = request.cookies.get(SESSION_COOKIE)
    cred = _state(request).auth.verify_session(value)
    return None if cred is None or value is None else (cred, value)


def _login_redirect(request: Request) -> Response:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse("/login?" + urlencode({"next": target}), status_code=303)


def _render(
    request: Request,
    template: str,
    context: dict[str, Any],
    *,
    status: int = 200,
    who: tuple[Credential, str] | None = None,
    pending: int = 0,
    cursor: int = 0,
) -> HTMLResponse:
    base: dict[str, Any] = {
        "page": "",
        "live": who is not None,
        "identity": who[0].approver.identity if who else "",
        "csrf": _state(request).auth.csrf_token(who[1]) if who else "",
        "pending_count": pending,
        "notice": _NOTICES.get(request.query_params.get("notice", ""), ""),
        "error": "",
        "run_id": "",
        "stream_url": f"/api/events?cursor={cursor}",
    }
    base.update(context)
    html = _env.get_template(template).render(base)
    return HTMLResponse(html, status_code=status, headers={"Cache-Control": "no-store"})


def render_error(request: Request, status: int, heading: str, message: str) -> HTMLResponse:
    """An HTML error page (used for failed form actions and unknown pages)."""
    try:
        who = session(request)
    except AttributeError:  # the app state is not set up (should not happen)
        who = None
    return _render(
        request,
        "error.html",
        {"status": status, "heading": heading, "error": message},
        status=status,
        who=who,
    )


async def _form(request: Request) -> dict[str, str]:
    """The urlencoded form fields (first value of each), after checking the content type."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype != "application/x-www-form-urlencoded":
        raise ApiError(415, "unsupported_media_type", "send the form urlencoded")
    raw = await request.body()
    try:
        fields = parse_qs(raw.decode("utf-8"), keep_blank_values=True, strict_parsing=False)
    except UnicodeDecodeError:
        raise ApiError(400, "malformed_form", "the form is not UTF-8") from None
    form = {k: v[0] for k, v in fields.items()}
    for name, value in form.items():
        check_text(value, f"the {name} field")
    return form


def same_origin(request: Request) -> bool:
    """Whether a browser POST came from this site (`Sec-Fetch-Site`, else `Origin`).

    A request without either header (an old browser, curl) passes; every current browser
    sends at least one on a cross-site form POST, which is what login CSRF needs.
    """
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        # Authoritative where present. Origin is not: under the pages' no-referrer policy
        # Chromium sends `Origin: null` on same-origin form posts.
        return site in ("same-origin", "none")
    origin = request.headers.get("origin")
    if origin is None:
        return True
    host = request.headers.get("host", "")
    return origin != "null" and urlsplit(origin).netloc.lower() == host.lower()


def _cross_site() -> ApiError:
    return ApiError(403, "cross_site", "this form was sent from another site: refused")


def _checked(request: Request, form: dict[str, str]) -> tuple[Credential, str]:
    if not same_origin(request):
        raise _cross_site()
    who = session(request)
    if who is None:
        raise ApiError(401, "unauthenticated", "your session has ended: sign in again")
    if not _state(request).auth.check_csrf(who[1], form.get("csrf", "")):
        raise ApiError(403, "csrf", "the form is stale or was not sent by this inbox: reload")
    return who


# --------------------------------------------------------------------------- pages


async def login_page(request: Request) -> Response:
    """The sign-in form (a token; `#token=...` in the URL is filled in by the script)."""
    nxt = _safe_next(request.query_params.get("next"))
    if session(request) is not None:
        return RedirectResponse(nxt, status_code=303)
    return _render(request, "login.html", {"page": "login", "next": nxt})


async def login(request: Request) -> Response:
    """Check the token, set the signed session cookie, go back to where the user was.

    Refused (403) when the form was posted from another site (login CSRF), and limited
    per client address (429 with `Retry-After`).
    """
    if not same_origin(request):
        raise _cross_site()
    state = _state(request)
    address = request.client.host if request.client else "unknown"
    wait = state.login_limiter.check(address)
    if wait > 0:
        seconds = max(1, math.ceil(wait))
        refused = render_error(
            request, 429, "Too many attempts", f"Too many sign-in attempts: wait {seconds} s."
        )
        refused.headers["Retry-After"] = str(seconds)
        return refused
    form = await _form(request)
    nxt = _safe_next(form.get("next"))
    auth = state.auth
    cred = auth.authenticate(form.get("token", "").strip())
    if cred is None:
        return _render(
            request,
            "login.html",
            {"page": "login", "next": nxt, "error": "That token is not valid."},
            status=401,
        )
    response = RedirectResponse(nxt, status_code=303)
    response.set_cookie(
        SESSION_COOKIE,
        auth.issue_session(cred),
        max_age=int(auth.session_seconds),
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )
    return response


async def logout(request: Request) -> Response:
    """End the session server-side (CSRF-checked): the cookie's value stops working."""
    _, value = _checked(request, await _form(request))
    _state(request).auth.revoke_session(value)
    response = RedirectResponse("/login?notice=signed-out", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


async def _pending_count(request: Request, cred: Credential) -> int:
    return len(await pending_calls(_state(request), cred))


async def inbox_page(request: Request) -> Response:
    """Pending calls the approver may decide, oldest first, with decision forms."""
    who = session(request)
    if who is None:
        return _login_redirect(request)
    cursor = await require_store(_state(request)).last_change_id()  # before reading
    cred = who[0]
    state = _state(request)
    q = request.query_params
    kind_text = q.get("kind", "")
    kind = CallKind(kind_text) if kind_text in ("approval", "external") else None
    filters = {"agent": q.get("agent", ""), "tool": q.get("tool", ""), "kind": kind_text}
    found = await pending_calls(
        state, cred, agent=filters["agent"] or None, tool=filters["tool"] or None, kind=kind
    )
    now = utc_now()
    visible = [n for n in sorted(state.registry) if cred.approver.may_see(n)]
    startable = [
        {"name": n, "description": state.registry[n].description}
        for n in visible
        if cred.approver.may_start(n)
    ]
    interrupted = await visible_runs(
        state, cred, status=RunStatus.INTERRUPTED, agent=None, tool=None, limit=100
    )
    nxt = _safe_next(request.url.path + (f"?{request.url.query}" if request.url.query else ""))
    return _render(
        request,
        "inbox.html",
        {
            "page": "inbox",
            "calls": [call_view(r, c, cred, now) for r, c in found],
            "filters": filters,
            "agent_names": visible,
            "startable": startable,
            "open_start": not found,
            "interrupted": len(interrupted),
            "start_prompt": "",
            "next": nxt,
        },
        who=who,
        pending=await _pending_count(request, cred),
        cursor=cursor,
    )


async def runs_page(request: Request) -> Response:
    """Recent runs the approver may see, filtered by status and agent."""
    who = session(request)
    if who is None:
        return _login_redirect(request)
    cursor = await require_store(_state(request)).last_change_id()  # before reading
    cred = who[0]
    state = _state(request)
    q = request.query_params
    status_text = q.get("status", "")
    status = RunStatus(status_text) if status_text in set(RunStatus) else None
    agent = q.get("agent", "")
    runs = await visible_runs(state, cred, status=status, agent=agent or None, tool=None, limit=200)
    now = utc_now()
    rows = [
        {
            "id": r.id,
            "href": _path("runs", r.id),
            "dom_id": "run-" + _digest(r.id),
            "version": _digest(r.status.value, len(r.undecided)),
            "short": _short(r.id),
            "status": r.status.value,
            "undecided": len(r.undecided) if r.status is RunStatus.PENDING else 0,
            "agent": r.agent,
            "created_iso": _iso(r.created_at),
            "age": _ago(r.created_at, now),
            "started_by": r.started_by,
        }
        for r in runs
    ]
    return _render(
        request,
        "runs.html",
        {
            "page": "runs",
            "runs": rows,
            "statuses": [s.value for s in RunStatus],
            "agent_names": [n for n in sorted(state.registry) if cred.approver.may_see(n)],
            "filters": {"status": status_text, "agent": agent},
        },
        who=who,
        pending=await _pending_count(request, cred),
        cursor=cursor,
    )


async def run_page(request: Request) -> Response:
    """One run: status and outcome, its calls, the conversation and the audit trail."""
    who = session(request)
    if who is None:
        return _login_redirect(request)
    cursor = await require_store(_state(request)).last_change_id()  # before reading
    cred = who[0]
    state = _state(request)
    try:
        run = await load_run(state, cred, request.path_params["run_id"])
    except ApiError as exc:
        return render_error(request, exc.status, "Run not available", exc.message)
    audit = await require_store(state).audit(run.id)
    now = utc_now()
    return _render(
        request,
        "run.html",
        {
            "page": "run",
            "run_id": run.id,
            "run": run_view(run, now),
            "calls": [call_view(run, c, cred, now) for c in run.calls],
            "messages": _message_views(run.conversation),
            "audit": [_audit_view(e) for e in audit],
            "next": _path("runs", run.id),
        },
        who=who,
        pending=await _pending_count(request, cred),
        cursor=cursor,
    )


# --------------------------------------------------------------------------- actions


async def decide_form(request: Request) -> Response:
    """Record a decision from an inbox form, then go back (303) to the page it came from."""
    form = await _form(request)
    cred, _ = _checked(request, form)
    run_id, call_id = request.path_params["run_id"], request.path_params["call_id"]
    kind = form.get("decision", "")
    if kind == "approve":
        decision = Decision.approve()
    elif kind == "deny":
        decision = Decision.deny(form.get("reason", "").strip())
    elif kind == "external":
        decision = Decision.external(form.get("result", ""))
    else:
        raise ApiError(422, "invalid_request", "decision must be approve, deny or external")
    await decide_call(_state(request), cred, run_id, call_id, decision)
    nxt = _safe_next(form.get("next"), _path("runs", run_id))
    return RedirectResponse(_with_notice(nxt, kind), status_code=303)


async def start_form(request: Request) -> Response:
    """Start a run from the inbox form, then show it (303 to its page)."""
    form = await _form(request)
    cred, _ = _checked(request, form)
    deps_text = form.get("deps_ref", "").strip()
    try:
        deps_ref = parse_json(deps_text) if deps_text else None
    except ApiError as exc:
        raise ApiError(422, "invalid_request", f"the deps reference: {exc.message}") from None
    check_json_value(deps_ref, "the deps reference")
    prompt = form.get("prompt", "").strip()
    if not prompt:
        raise ApiError(422, "invalid_request", "a prompt is required")
    run = await start_for(_state(request), cred, form.get("agent", ""), prompt, deps_ref)
    return RedirectResponse(_path("runs", run.id), status_code=303)
