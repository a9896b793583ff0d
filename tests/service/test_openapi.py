"""The OpenAPI document: generated from the routes and models, valid 3.1, complete."""

from __future__ import annotations

import re
from typing import Any

import pytest
from starlette.routing import Route

from golem import __version__
from golem.service import schemas
from golem.service.app import ROUTES
from golem.service.openapi import Operation, openapi_document

METHODS = {"get", "post", "put", "patch", "delete"}


def document() -> dict[str, Any]:
    return openapi_document(ROUTES, __version__)


def test_the_document_is_valid_openapi_3_1() -> None:
    validator = pytest.importorskip("openapi_spec_validator")
    validator.validate(document())


def test_every_route_is_described_and_nothing_else() -> None:
    routes = {
        (re.sub(r":\w+}", "}", r.path), m.lower())
        for r in ROUTES
        if isinstance(r, Route)
        for m in (r.methods or ())
        if m != "HEAD"
    }
    described = {
        (path, method)
        for path, item in document()["paths"].items()
        for method in item
        if method in METHODS
    }
    assert described == routes


def test_every_handler_has_an_operation_and_a_route_without_one_is_refused() -> None:
    for r in ROUTES:
        if isinstance(r, Route):
            assert isinstance(getattr(r.endpoint, "__openapi__", None), Operation), r.path

    async def bare(request: Any) -> Any: ...

    with pytest.raises(ValueError, match="/bare has no Operation"):
        openapi_document([Route("/bare", bare)], "0")


def test_refs_resolve_and_path_parameters_are_declared() -> None:
    doc = document()
    schemas_ = doc["components"]["schemas"]

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if ref is not None:
                assert ref.startswith("#/components/schemas/")
                assert ref.rsplit("/", 1)[1] in schemas_, ref
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(doc)
    op_ids = []
    for path, item in doc["paths"].items():
        wanted = set(re.findall(r"{(\w+)}", path))
        for method, op in item.items():
            declared = {p["name"] for p in op.get("parameters", []) if p["in"] == "path"}
            assert declared == wanted, (path, method)
            assert op["responses"], (path, method)
            op_ids.append(op["operationId"])
    assert len(op_ids) == len(set(op_ids))


def test_body_schemas_are_the_models_that_validate_requests() -> None:
    doc = document()
    comp = doc["components"]["schemas"]
    start = doc["paths"]["/api/runs"]["post"]
    ref = start["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    body = comp[ref.rsplit("/", 1)[1]]
    assert body == comp[ref.rsplit("/", 1)[1]]
    assert set(body["properties"]) == set(schemas.StartRunBody.model_fields)
    assert body["additionalProperties"] is False
    expires = body["properties"]["expires_in"]["anyOf"][0]
    assert expires["exclusiveMinimum"] == 0
    assert expires["maximum"] == schemas.MAX_EXPIRES_IN
    ok = start["responses"]["201"]["content"]["application/json"]["schema"]["$ref"]
    run = comp[comp[ok.rsplit("/", 1)[1]]["properties"]["run"]["$ref"].rsplit("/", 1)[1]]
    assert set(run["properties"]) == set(schemas.Run.model_fields)


def test_query_parameters_come_from_the_query_models() -> None:
    doc = document()
    params = {p["name"]: p for p in doc["paths"]["/api/runs"]["get"]["parameters"]}
    assert set(params) == set(schemas.RunsQuery.model_fields)
    limit, empty = params["limit"]["schema"]["anyOf"]
    assert limit["maximum"] == schemas.MAX_LIST_LIMIT
    assert empty == {"type": "string", "maxLength": 0}  # `?limit=` counts as absent
    assert "Empty counts as absent." in params["limit"]["description"]
    events = {p["name"] for p in doc["paths"]["/api/events"]["get"]["parameters"]}
    assert events == {"cursor", "stream_token", "Last-Event-ID"}


def test_every_api_error_status_is_documented_with_the_error_schema() -> None:
    doc = document()
    decide = doc["paths"]["/api/runs/{run_id}/calls/{call_id}/decision"]["post"]["responses"]
    errors = {"400", "401", "403", "404", "408", "409", "413", "422", "503"}
    assert set(decide) == errors | {"200", "429"}
    for status in errors:
        schema = decide[status]["content"]["application/json"]["schema"]
        assert schema == {"$ref": "#/components/schemas/ErrorBody"}
    start = doc["paths"]["/api/runs"]["post"]["responses"]
    assert set(start) == errors - {"404"} | {"200", "201", "429"}
    for path, item in doc["paths"].items():  # 400 for a NUL in any URL
        for method, op in item.items():
            assert "400" in op["responses"], (path, method)


def test_the_start_bodies_name_the_registered_agents() -> None:
    doc = openapi_document(ROUTES, __version__, agents=["twin", "echo"])
    comp = doc["components"]["schemas"]
    assert comp["StartRunBody"]["properties"]["agent"]["enum"] == ["echo", "twin"]
    assert comp["StartForm"]["properties"]["agent"]["enum"] == ["echo", "twin"]
    assert "enum" not in document()["components"]["schemas"]["StartRunBody"]["properties"]["agent"]


def test_a_decision_body_says_which_fields_go_with_which_decision() -> None:
    body = document()["components"]["schemas"]["DecisionBody"]
    shapes = {s["properties"]["decision"]["const"]: s for s in body["oneOf"]}
    assert set(shapes) == {"approve", "deny", "external"}
    assert shapes["external"]["required"] == ["result"]
    assert shapes["deny"]["properties"]["result"] == {"type": "null"}
    assert shapes["approve"]["properties"]["reason"] == {"type": "null"}


def test_the_event_stream_describes_its_events_and_cursor_header() -> None:
    op = document()["paths"]["/api/events"]["get"]
    event = op["responses"]["200"]["content"]["text/event-stream"]["schema"]
    assert event["properties"]["event"]["enum"] == ["hello", "change", "end"]
    header = next(p for p in op["parameters"] if p["name"] == "Last-Event-ID")
    # an audit ID, the sealed cursor of an event (ADR 0073) or an entry reference (ADR 0077)
    assert header["schema"]["pattern"] == ("^([0-9]{0,18}|s[A-Za-z0-9_-]{48}|e[A-Za-z0-9_-]{32})$")


def test_pages_that_redirect_to_sign_in_take_no_credential_too() -> None:
    paths = document()["paths"]
    assert paths["/"]["get"]["security"] == [{"session": []}, {}]
    assert paths["/logout"]["post"]["security"] == [{"session": []}]
    assert paths["/api/runs"]["get"]["security"] == [{"bearer": []}]


def test_links_lead_from_a_started_run_and_the_pending_calls_to_their_decisions() -> None:
    paths = document()["paths"]
    started = paths["/api/runs"]["post"]["responses"]["201"]["links"]
    assert started["decideFirstCall"] == {
        "operationId": "decideCall",
        "parameters": {
            "run_id": "$response.body#/run/id",
            "call_id": "$response.body#/run/calls/0/call_id",
        },
    }
    pending = paths["/api/calls"]["get"]["responses"]["200"]["links"]
    assert pending["nextPage"]["parameters"] == {"after": "$response.body#/next_cursor"}
    decided = paths["/api/runs/{run_id}/calls/{call_id}/decision"]["post"]["responses"]["200"]
    assert decided["links"]["showRun"]["operationId"] == "showRun"


def test_forms_are_documented_as_the_inbox_reads_them() -> None:
    comp = document()["components"]["schemas"]
    for name in ("LoginForm", "LogoutForm", "DecisionForm", "BulkDecisionForm", "StartForm"):
        assert "additionalProperties" not in comp[name], name  # other fields are ignored
    assert comp["StartForm"]["properties"]["prompt"]["pattern"] == r"\S"  # not blank
    assert comp["ResolveForm"]["properties"]["note"]["pattern"] == r"\S"
    assert {"args", "after"} <= set(comp["DecisionForm"]["properties"])


def test_the_audit_listing_links_its_next_page_and_the_page_its_downloads() -> None:
    paths = document()["paths"]
    op = paths["/audit"]["get"]
    assert set(op["responses"]["200"]["content"]) == {"text/html", "text/csv", "application/json"}
    rows = op["responses"]["200"]["content"]["application/json"]["schema"]
    assert rows == {"type": "array", "items": {"$ref": "#/components/schemas/AuditListItem"}}
    fmt = next(p for p in op["parameters"] if p["name"] == "format")
    assert fmt["schema"]["anyOf"][0]["anyOf"][0] == {"enum": ["csv", "json"], "type": "string"}
    assert "Link" in op["responses"]["200"]["headers"]
    api = paths["/api/audit"]["get"]
    assert api["responses"]["200"]["links"]["nextPage"] == {
        "operationId": "listAudit",
        "parameters": {"before": "$response.body#/next_cursor"},
    }
    assert "invalid_cursor" in api["responses"]["400"]["description"]
    assert "before" in {p["name"] for p in api["parameters"]}
