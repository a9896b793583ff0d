"""The inbox's page machinery: templates, notices, sign-in redirects and checked forms."""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, parse_qsl, quote, urlencode, urlsplit, urlunsplit

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from golem._display import reveal
from golem.service import schemas
from golem.service.auth import Credential
from golem.service.credentials import session
from golem.service.errors import ApiError, check_text
from golem.service.positions import seal_cursor
from golem.service.runs import PendingPage, pending_page
from golem.service.settings import ServiceState, require_store, state_of
from golem.service.views import path, reveal_html

# Internals of `golem.service.create_app`; nothing here is public API.
__all__: list[str] = []

PAGE_RUNS = 100  # pending runs per inbox page
_HERE = Path(__file__).parent
STATIC_DIR = _HERE / "static"
_env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(_HERE / "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


_STATIC_VERSIONS = {
    name: hashlib.sha256((STATIC_DIR / name).read_bytes()).hexdigest()[:12]
    for name in ("inbox.css", "inbox.js", "favicon.svg")
}
_env.globals["static_url"] = lambda name: f"/static/{name}?v={_STATIC_VERSIONS[name]}"
_env.globals["run_path"] = lambda run_id: path("runs", run_id)
_env.filters["reveal"] = reveal_html
_env.filters["reveal_text"] = reveal  # for <title>, which holds text, not markup


_NOTICES = {
    "approve": "Approved {call}. A worker resumes the run once every call is decided.",
    "deny": "Denied {call}. The model is told not to run the call.",
    "external": "Result for {call} submitted.",
    "signed-out": "Signed out.",
    "approve-all": "Approved every call of the run.",
    "deny-all": "Denied every call of the run.",
}


def safe_next(value: str | None, default: str = "/") -> str:
    """A local path to return to: an absolute path on this site, never another origin."""
    if not value or not value.startswith("/") or value.startswith("//") or "\\" in value:
        return default
    return default if any(ord(ch) < 32 for ch in value) else value


def _notice_tag(secret: bytes, notice: str, call: str) -> str:
    """The MAC that lets a page believe a notice's call name came from this service."""
    mac = hmac.new(secret, f"notice.{notice}.{call}".encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac[:12]).decode("ascii")


def with_notice(
    request: Request, path: str, notice: str, call: str = "", fragment: str = ""
) -> str:
    """`path` with its `notice` (and `call`, and the call's tag) query parameters set, other
    parameters kept."""
    parts = urlsplit(path)
    query = [
        (k, v)
        for k, v in parse_qsl(parts.query, keep_blank_values=True)
        if k not in ("notice", "call", "tag")
    ]
    query.append(("notice", notice))
    if call:
        query.append(("call", call))
        query.append(("tag", _notice_tag(state_of(request).auth.secret, notice, call)))
    return urlunsplit(("", "", parts.path, urlencode(query), fragment))


def _notice(request: Request) -> str:
    """The notice a redirect asked for; one naming a call only with the service's tag (or
    any link could put its words in the inbox's voice)."""
    q = request.query_params
    notice, call = q.get("notice", ""), q.get("call", "")
    template = _NOTICES.get(notice, "")
    if call:
        tag = _notice_tag(state_of(request).auth.secret, notice, call)
        if not hmac.compare_digest(tag.encode(), q.get("tag", "").encode("utf-8", "replace")):
            return ""
    return template.replace("{call}", call[:200] or "the call")


_SUB_DELIMS = ":@!$&'()*+,;=~"  # kept unescaped in a path (RFC 3986 `pchar`)


def _login_redirect(request: Request) -> Response:
    """303 to the sign-in page, coming back to this page afterwards: its path and query as
    sent, escapes kept (`/runs/a%2Fb`, not `/runs/a/b`)."""
    raw = request.scope.get("raw_path")
    if raw:
        here = quote(raw.split(b"?", 1)[0].decode("utf-8", "replace"), safe="/%" + _SUB_DELIMS)
    else:  # no raw path: the decoded one, escaped again
        here = quote(request.url.path, safe="/" + _SUB_DELIMS)
    here += f"?{request.url.query}" if request.url.query else ""
    return RedirectResponse("/login?" + urlencode({"next": here}), status_code=303)


def render(
    request: Request,
    template: str,
    context: dict[str, Any],
    *,
    status: int = 200,
    who: tuple[Credential, str] | None = None,
    pending: str = "0",
    cursor: int = 0,
) -> HTMLResponse:
    base: dict[str, Any] = {
        "page": "",
        "live": who is not None,
        "identity": who[0].approver.identity if who else "",
        "csrf": state_of(request).auth.csrf_token(who[1]) if who else "",
        "pending_count": pending,
        "notice": _notice(request),
        "undo": state_of(request).settings.undo_seconds if who else 0,
        "error": "",
        "run_id": "",
        # sealed (ADR 0073): the log's newest ID would tell how many changes, hidden ones
        # included, happened between two page loads
        "stream_url": f"/api/events?cursor={seal_cursor(state_of(request).auth.secret, cursor)}",
    }
    base.update(context)
    html = _env.get_template(template).render(base)
    return HTMLResponse(html, status_code=status, headers={"Cache-Control": "no-store"})


@dataclass(frozen=True)
class SignedIn:
    """A page request from a signed-in approver (what `signed_in` hands its handler)."""

    request: Request
    cred: Credential
    session: str
    """The raw session value (the CSRF token derives from it)."""
    state: ServiceState
    cursor: int
    """Where the page's live updates start (0: none)."""

    @property
    def agent_names(self) -> list[str]:
        """The registered agents the approver may see, sorted."""
        return [n for n in sorted(self.state.registry) if self.cred.approver.may_see(n)]

    async def render(
        self, template: str, context: dict[str, Any], *, pending: str | None = None
    ) -> HTMLResponse:
        """The page; the header counts the approver's pending calls unless `pending` says."""
        if pending is None:
            pending = count_text(await pending_page(self.state, self.cred, limit=PAGE_RUNS))
        who = (self.cred, self.session)
        return render(self.request, template, context, who=who, pending=pending, cursor=self.cursor)


PageHandler = Callable[[SignedIn], Awaitable[Response]]
Endpoint = Callable[[Request], Awaitable[Response]]


def signed_in(*, live: bool = True) -> Callable[[PageHandler], Endpoint]:
    """Make `handler(page: SignedIn)` a page endpoint: without a session, 303 to the sign-in
    page; with `live`, the audit cursor is read before the page reads anything."""

    def wrap(handler: PageHandler) -> Endpoint:
        @functools.wraps(handler)
        async def endpoint(request: Request) -> Response:
            who = session(request)
            if who is None:
                return _login_redirect(request)
            state = state_of(request)
            cursor = await require_store(state).last_change_id() if live else 0
            return await handler(SignedIn(request, who[0], who[1], state, cursor))

        return endpoint

    return wrap


def render_error(request: Request, status: int, heading: str, message: str) -> HTMLResponse:
    """An HTML error page (used for failed form actions and unknown pages)."""
    try:
        who = session(request)
    except AttributeError:  # the app state is not set up (should not happen)
        who = None
    return render(
        request,
        "error.html",
        {"status": status, "heading": heading, "error": message},
        status=status,
        who=who,
    )


async def read_form(request: Request) -> dict[str, str]:
    """The urlencoded form fields (first value of each), after checking the content type."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype != "application/x-www-form-urlencoded":
        raise ApiError(415, "unsupported_media_type", "send the form urlencoded")
    raw = await request.body()
    try:
        # strict: an escape that is not UTF-8 (`%FF`) is refused, not read as U+FFFD
        fields = parse_qs(raw.decode("utf-8"), keep_blank_values=True, errors="strict")
    except UnicodeDecodeError:
        raise ApiError(400, "malformed_form", "the form is not UTF-8") from None
    twice = next((k for k, v in fields.items() if len(v) > 1 and k in _SINGLE), None)
    if twice is not None:  # which one counts? parsers (and proxies, and logs) disagree
        raise ApiError(400, "malformed_form", f"the form names the {twice} field twice")
    form = {k: v[0] for k, v in fields.items()}
    for name, value in form.items():
        check_text(value, f"the {name} field")
    return form


_SINGLE = frozenset(
    name
    for model in (
        schemas.LoginForm,
        schemas.LogoutForm,
        schemas.DecisionForm,
        schemas.BulkDecisionForm,
        schemas.ResolveForm,
        schemas.StartForm,
    )
    for name, info in model.model_fields.items()
    if info.annotation != list[str]
)
"""The form fields the inbox reads one value of (400 when sent twice)."""


def same_origin(request: Request) -> bool:
    """Whether a browser POST came from this site: `Sec-Fetch-Site` decides alone; else an
    `Origin` of another host is refused (`null`, sent under no-referrer, and none pass)."""
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        return site in ("same-origin", "none")
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        return True
    host = request.headers.get("host", "")
    return urlsplit(origin).netloc.lower() == host.lower()


def cross_site() -> ApiError:
    return ApiError(403, "cross_site", "this form was sent from another site: refused")


async def checked_form(request: Request) -> tuple[Credential, str, dict[str, str]]:
    """The approver, session value and form of a CSRF-checked action (origin and session
    checked before the body is read)."""
    if not same_origin(request):
        raise cross_site()
    who = session(request)
    if who is None:
        raise ApiError(401, "unauthenticated", "your session has ended: sign in again")
    form = await read_form(request)
    if not state_of(request).auth.check_csrf(who[1], form.get("csrf", "")):
        raise ApiError(403, "csrf", "the form is stale or was not sent by this inbox: reload")
    return who[0], who[1], form


def count_text(page: PendingPage) -> str:
    """The header's count: the calls on the first page, "+" when more runs wait."""
    return f"{len(page.calls)}+" if page.next_cursor else str(len(page.calls))
