"""The OpenAPI 3.1 document, generated from the route table (each handler's `Operation`,
attached with `@operation(...)`) and the pydantic models of `golem.service.schemas`."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema
from starlette.routing import BaseRoute, Route

from golem.service.schemas import ErrorBody

__all__ = [
    "CSV",
    "HTML",
    "REDIRECT",
    "SSE",
    "ArrayOf",
    "Operation",
    "openapi_document",
    "operation",
]

# response markers: an HTML page, 303 See Other, a server-sent event stream, a CSV download
HTML = "text/html"
REDIRECT = "redirect"
SSE = "text/event-stream"
CSV = "text/csv"


@dataclass(frozen=True)
class ArrayOf:
    """A response spec: a JSON array of `model`."""

    model: type[BaseModel]


OneResponse = type[BaseModel] | ArrayOf | str
ResponseSpec = OneResponse | tuple[OneResponse, ...]
"""A response model, an `ArrayOf` one, one of the markers `HTML`, `REDIRECT`, `SSE`, `CSV`,
or a tuple of them: one of several media types (chosen by the request's query)."""

_ERRORS = {
    400: "Malformed JSON, a NUL character in the URL, nesting too deep, or a page cursor "
    "this service did not send (`invalid_cursor`).",
    401: "No or unknown bearer token (or the session has ended).",
    403: "The approver may not do this (or, for forms, a wrong CSRF token or another site).",
    404: "No such run or call.",
    408: "The request body took longer than the service's body timeout to arrive.",
    409: "The call was already decided differently, expired, or the run is no longer pending "
    "(starting a run: the Idempotency-Key was used for another start).",
    413: "The body is too large.",
    415: "The form is not urlencoded.",
    422: "A field or query parameter is missing or invalid (no string may hold NUL or a lone "
    "surrogate).",
    429: "Too many attempts or open streams; see Retry-After.",
    503: "The store is not open yet, or cannot be reached just now (see Retry-After).",
}

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Operation:
    """What the OpenAPI document says about one handler. Its errors are `errors` and what
    its shape implies: 401 and 429 with a bearer token, 408, 413 and 422 with a JSON body,
    422 with a query, 401, 403, 408, 413 and 415 with a form."""

    op_id: str
    summary: str
    responses: Mapping[int, ResponseSpec]
    """Success status → model or marker."""
    errors: tuple[int, ...] = ()
    body: type[BaseModel] | None = None
    """The JSON request body."""
    form: type[BaseModel] | None = None
    """The urlencoded form body (inbox actions)."""
    query: type[BaseModel] | None = None
    security: tuple[str, ...] = ("bearer",)
    """Accepted security schemes (empty: public)."""
    tag: Literal["api", "inbox"] = "api"
    headers: Mapping[str, str] = field(default_factory=dict)
    """Request headers it reads: name → description."""
    links: Mapping[str, tuple[str, Mapping[str, str]]] = field(default_factory=dict)
    """OpenAPI links of its success responses: name → (operationId, parameter → expression)."""
    response_headers: Mapping[str, str] = field(default_factory=dict)
    """Headers its 200 answer may carry: name → description."""

    def statuses(self) -> set[int]:
        """Every error status (any URL may hold a NUL: 400; a credential reads the store: 503)."""
        implied = {400, *self.errors} | ({503} if self.security else set())
        if "bearer" in self.security and self.tag == "api":
            implied |= {401, 429}
        if self.body is not None:
            implied |= {408, 413, 422}
        if self.query is not None:
            implied.add(422)
        if self.form is not None:
            implied |= {401, 403, 408, 413, 415}
        return implied - set(self.responses)


def operation(**kwargs: Any) -> Callable[[F], F]:
    """Attach an `Operation(**kwargs)` to a handler (read by `openapi_document`); the
    summary is the handler's docstring unless given."""

    def attach(handler: F) -> F:
        summary = kwargs.pop("summary", None) or " ".join((handler.__doc__ or "").split())
        handler.__openapi__ = Operation(summary=summary, **kwargs)  # type: ignore[attr-defined]
        return handler

    return attach


def page(op_id: str, **kwargs: Any) -> Callable[[F], F]:
    """`operation` of an inbox page: HTML, or 303 to sign in."""
    defaults = {"responses": {200: HTML, 303: REDIRECT}, "security": ("session",), "tag": "inbox"}
    return operation(op_id=op_id, **{**defaults, **kwargs})


def form_action(op_id: str, form: type[BaseModel], *errors: int, **kwargs: Any) -> Callable[[F], F]:
    """`operation` of an inbox form action: 303 when done."""
    defaults = {"responses": {303: REDIRECT}, "security": ("session",), "tag": "inbox"}
    return operation(op_id=op_id, form=form, errors=errors, **{**defaults, **kwargs})


Mode = Literal["validation", "serialization"]
_Ref = Callable[..., dict[str, str]]  # `ref(model, mode)`: the `$ref` of a model's schema
_Described = list[tuple[str, list[str], str, Operation]]  # (path, parameters, method, op)
_REFS = "#/components/schemas/{model}"
_STRING = {"schema": {"type": "string"}}
_EMPTY = {"type": "string", "maxLength": 0}  # `?status=`: read as absent
_FORM = "application/x-www-form-urlencoded"

_SSE_EVENT = {
    "type": "object",
    "description": "One server-sent event: `event: hello` first (the caller, and the start "
    "cursor, sealed: opaque, different on every stream), then `event: change` per audit "
    "entry the caller may see (`id` = its audit ID for an approver who sees every agent, "
    "else a sealed cursor; ADR 0077), `event: end` when the credential ends; "
    "`retry` alone at the start. Nothing is sent for changes the caller may not see.",
    "properties": {
        "event": {"enum": ["hello", "change", "end"]},
        "data": {"type": "string", "contentMediaType": "application/json"},
        "id": {"type": "string", "pattern": "^([0-9]+|s[A-Za-z0-9_-]{48})$"},
        "retry": {"type": "integer"},
    },
}

_MARKERS: dict[str, dict[str, Any]] = {
    HTML: {"description": "An HTML page.", "content": {HTML: _STRING}},
    CSV: {"description": "A CSV download.", "content": {CSV: _STRING}},
    REDIRECT: {
        "description": "See Other: go to `Location`.",
        "headers": {"Location": {**_STRING, "description": "Where to go."}},
    },
    SSE: {
        "description": "An endless text/event-stream; each event's `id` is a cursor to "
        "resume from.",
        "content": {SSE: {"schema": _SSE_EVENT}},
    },
}

_HEADER_SCHEMAS: dict[str, dict[str, Any]] = {
    # An audit cursor (0 … 2**63-1; up to 18 digits is always in range; only 0 for an
    # approver who does not see every agent), a sealed one (ADR 0073) or an entry reference
    # (ADR 0077); empty means none.
    "Last-Event-ID": {
        "type": "string",
        "pattern": "^([0-9]{0,18}|s[A-Za-z0-9_-]{48}|e[A-Za-z0-9_-]{32})$",
    },
    "Idempotency-Key": {"type": "string", "minLength": 1, "maxLength": 200},
}


def _models(ops: Iterable[Operation]) -> list[tuple[type[BaseModel], Mode]]:
    seen: dict[tuple[type[BaseModel], Mode], None] = {(ErrorBody, "serialization"): None}
    for op in ops:
        seen.update({(m, "validation"): None for m in (op.body, op.form) if m is not None})
        for spec in op.responses.values():
            for one in spec if isinstance(spec, tuple) else (spec,):
                model = one.model if isinstance(one, ArrayOf) else one
                if isinstance(model, type):
                    seen[(model, "serialization")] = None
    return list(seen)


def _query_params(model: type[BaseModel], schemas: dict[str, Any]) -> list[dict[str, Any]]:
    schema = model.model_json_schema(ref_template=_REFS)
    for name, sub in schema.pop("$defs", {}).items():
        schemas.setdefault(name, sub)
    required = set(schema.get("required", []))
    out = []
    for name, prop in schema["properties"].items():
        description = prop.pop("description", "")
        prop.pop("title", None)
        if name not in required:  # `?status=` is no filter at all, as a form sends it
            prop = {"anyOf": [prop, _EMPTY]}
            description = f"{description} Empty counts as absent.".strip()
        out.append(
            {"name": name, "in": "query", "required": name in required}
            | {"description": description, "schema": prop}
        )
    return out


def _response(spec: ResponseSpec, ref: _Ref) -> dict[str, Any]:
    if isinstance(spec, tuple):
        parts = [_response(one, ref) for one in spec]
        return {
            "description": " Or: ".join(p["description"] for p in parts),
            "content": {k: v for p in parts for k, v in p["content"].items()},
        }
    if isinstance(spec, str):
        return copy.deepcopy(_MARKERS[spec])
    if isinstance(spec, ArrayOf):
        schema = {"type": "array", "items": ref(spec.model)}
        return {
            "description": f"A JSON array of {spec.model.__name__}.",
            "content": {"application/json": {"schema": schema}},
        }
    return {
        "description": (spec.__doc__ or spec.__name__).strip().splitlines()[0],
        "content": {"application/json": {"schema": ref(spec)}},
    }


def openapi_document(
    routes: Iterable[BaseRoute], version: str, *, agents: Sequence[str] | None = None
) -> dict[str, Any]:
    """The OpenAPI 3.1 document of `routes`; the `agent` field of a start lists `agents`.
    `ValueError` for a route without an `Operation`."""
    described = _described(routes)
    keys, top = models_json_schema(_models(op for *_, op in described), ref_template=_REFS)
    schemas: dict[str, Any] = dict(top.get("$defs", {}))

    def ref(model: type[BaseModel], mode: Mode = "serialization") -> dict[str, str]:
        return dict(keys[(model, mode)])

    for *_, spec in described if agents is not None else ():
        for model in (spec.body, spec.form):
            if model is not None and "agent" in model.model_fields:
                name = ref(model, "validation")["$ref"].rsplit("/", 1)[1]
                schemas[name]["properties"]["agent"]["enum"] = sorted(agents or ())
    paths: dict[str, dict[str, Any]] = {}
    for path, names, method, spec in described:
        paths.setdefault(path, {})[method] = _operation(spec, names, ref, schemas)
    return {
        "openapi": "3.1.0",
        "info": {"title": "golem approval service", "version": version, **_INFO},
        "servers": [{"url": "/"}],
        "tags": _TAGS,
        "security": [{"bearer": []}],
        "paths": paths,
        "components": {"schemas": schemas, "securitySchemes": _SECURITY_SCHEMES},
    }


def _described(routes: Iterable[BaseRoute]) -> _Described:
    """Every method of every `Route` with its `Operation` (HEAD left out)."""
    described: _Described = []
    for route in routes:
        if not isinstance(route, Route):
            continue
        spec = getattr(route.endpoint, "__openapi__", None)
        if not isinstance(spec, Operation):
            raise ValueError(f"route {route.path} has no Operation: add @operation(...)")
        path, names = re.sub(r"{(\w+):\w+}", r"{\1}", route.path), re.findall(r"{(\w+)", route.path)
        for method in sorted(route.methods or ()):
            if method != "HEAD":
                described.append((path, names, method.lower(), spec))
    return described


def _operation(
    spec: Operation, names: list[str], ref: _Ref, schemas: dict[str, Any]
) -> dict[str, Any]:
    """The OpenAPI operation object of one route's method."""
    # a page (not a form) also takes no credential: 303 to `/login`
    security: list[dict[str, list[str]]] = [{name: []} for name in spec.security]
    if security and spec.tag == "inbox" and spec.form is None:
        security.append({})
    op: dict[str, Any] = {
        "operationId": spec.op_id,
        "summary": spec.summary,
        "tags": [spec.tag],
        "security": security,
        "responses": _responses(spec, ref),
    }
    params: list[dict[str, Any]] = [
        {"name": n, "in": "path", "required": True, "description": _SEGMENT, "schema": _ID}
        for n in names
    ]
    params += _query_params(spec.query, schemas) if spec.query is not None else []
    params += [
        {"name": h, "in": "header", "description": d}
        | {"schema": _HEADER_SCHEMAS.get(h, {"type": "string"})}
        for h, d in spec.headers.items()
    ]
    if params:
        op["parameters"] = params
    for model, media in ((spec.body, "application/json"), (spec.form, _FORM)):
        if model is not None:
            content = {media: {"schema": ref(model, "validation")}}
            op["requestBody"] = {"required": True, "content": content}
    return op


_SEGMENT = "Any text, percent-encoded as one path segment (`/` as `%2F`)."
_ID = {"type": "string", "minLength": 1}


def _responses(spec: Operation, ref: _Ref) -> dict[str, Any]:
    """An operation's answers: its own, their links and headers, then its errors."""
    responses: dict[str, Any] = {str(s): _response(r, ref) for s, r in spec.responses.items()}
    links = {
        name: {"operationId": target, "parameters": dict(params)}
        for name, (target, params) in spec.links.items()
    }
    for status in spec.responses if links else ():  # on every success (201, a repeat's 200)
        if 200 <= status < 300:
            responses[str(status)]["links"] = copy.deepcopy(links)
    if spec.response_headers:
        responses["200"]["headers"] = {
            name: {"description": d, **_STRING} for name, d in spec.response_headers.items()
        }
    for status in sorted(spec.statuses()):
        json_body = spec.tag == "api" or status in (408, 413)
        content = {"application/json": {"schema": ref(ErrorBody)}} if json_body else {HTML: _STRING}
        responses[str(status)] = {"description": _ERRORS[status], "content": content}
    return responses


_INFO = {
    "description": "Start agent runs, decide their paused tool calls, follow changes. "
    'Errors answer {"error": {"code", "message"}} and change nothing.',
}

_TAGS = [
    {"name": "api", "description": "The JSON API (bearer tokens)."},
    {"name": "inbox", "description": "The web inbox (session cookie, forms)."},
]

_SECURITY_SCHEMES = {
    "bearer": {
        "type": "http",
        "scheme": "bearer",
        "description": "An approver token (GOLEM_APPROVERS).",
    },
    "streamToken": {
        "type": "apiKey",
        "in": "query",
        "name": "stream_token",
        "description": "From POST /api/stream-token; only for /api/events.",
    },
    "session": {
        "type": "apiKey",
        "in": "cookie",
        "name": "golem_session",
        "description": "The inbox session (POST /login); forms also need its CSRF token.",
    },
}
