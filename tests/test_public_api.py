"""The public names are a contract: every public module's `__all__` is pinned in full (as httpx
pins its exports), sorted, importable and complete, and every public object has one home.

Adding, removing or renaming a public name fails `test_all_is_pinned` until `PUBLIC_ALL` says so:
a visible, reviewed change. A public module is any `golem` module whose dotted path has no
`_`-prefixed part; a new one must be added to `PUBLIC_ALL`.
"""

from __future__ import annotations

import importlib
import pkgutil
import types

import pytest

import golem

PUBLIC_ALL = {
    "golem": (
        "Agent Approval Canceled Citation DeferKind Deferred DeferredRequests DeferredResults EventKind "
        "Failed GolemError HistoryRepair Message ModelRetry Part PartialResult PendingToolCall "
        "ProviderError RejectedCall Result ResumeError RunContext RunError RunEvent RunPaused "
        "RunStream SanitizeReport SealError SealKeys ServerToolBlock Stage ThinkingBlock Tool ToolCall "
        "ToolError ToolResult ToolTimeout UnsafePart Usage UsageLimitExceeded UsageLimits "
        "__version__ approved_call call_approved dumps_history loads_history new_id "
        "normalize_history sanitize_history"
    ),
    "golem.agent": "Agent RunStream default_backoff",
    "golem.agent_tool": (
        "PAUSED_MARKER AgentTool SubAgentPaused agent_tool copy_result forwarder has_agent_tools "
        "paused_records resume run_scope surface"
    ),
    "golem.cli": (
        "INSTALL_HINT answer approve build_app demo deny main pending resolve serve show worker"
    ),
    "golem.deferred": (
        "Approval BeforeApproved DeferredRequests DeferredResults PendingToolCall ResumePlan "
        "as_results check_results check_resume denial_text edited_text merge pause "
        "pending_calls requests_from rerun_approved resume"
    ),
    "golem.demo": (
        "DEMO_PROMPT SERVICES build_agent build_registry check_health open_ticket registry "
        "restart_service"
    ),
    "golem.errors": (
        "AuthenticationError BadRequest GolemError Overloaded ProviderConnectionError "
        "ProviderError ProviderTimeout RateLimited ResponseFormatError ResumeError RunError "
        "RunPaused SealError Stage StoreError ToolError ToolTimeout UsageLimitExceeded"
    ),
    "golem.events": "EventHandler EventKind RunEvent dispatch",
    "golem.history": (
        "INTERRUPTED_TEXT HistoryRepair RejectedCall SanitizeReport UnsafePart "
        "normalize_history sanitize_history validate_history"
    ),
    "golem.mcp": (
        "ApprovalPolicy MCPCall MCPServer MCPServerError ServerOptions ToolHints "
        "default_decision"
    ),
    "golem.messages": (
        "MAX_ARGS_DEPTH PART_KINDS ROLES Citation Message Part Role ServerToolBlock ThinkingBlock "
        "ToolCall dumps_history loads_history"
    ),
    "golem.model": (
        "FINISH_REASONS TOOL_CHOICE_MODES Delta FinishReason Model ModelRequest ModelResponse "
        "StreamingModel ThinkingDelta ToolCallDelta ToolChoice ToolSpec check_tool_choice"
    ),
    "golem.otel": (
        "RunTracer format_traceparent instrument is_instrumented parse_traceparent run_tracer "
        "uninstrument"
    ),
    "golem.providers": "OLLAMA_BASE_URL FallbackModel infer_model",
    "golem.providers.anthropic": (
        "AnthropicModel OutputMode StreamParser build_request_body parse_response parse_stream "
        "sse_events"
    ),
    "golem.providers.gemini": (
        "DEFAULT_BASE_URL GeminiModel StreamParser build_request_body parse_response "
        "parse_stream sse_events"
    ),
    "golem.providers.openai": "DEFAULT_BASE_URL OpenAIChatModel OpenAIResponsesModel",
    "golem.result": "PartialResult Result",
    "golem.seal": "SealKey SealKeys as_seal_keys seal_call seal_pending verify_call",
    "golem.service": "Approver AuthConfig Credential create_app",
    "golem.service.api": (
        "MAX_JSON_DEPTH ApiError PendingPage ServiceState agents audit_json audit_model bearer "
        "call_json call_model check_json_value check_text decide decide_call decision_json "
        "decision_model edited_approval health list_calls list_runs load_run not_found "
        "oldest_runs parse_json pending_calls pending_page read_json read_query require_store "
        "respond run_detail_json run_detail_model run_json run_model schema_problems show_run "
        "start start_for store_error stream_token to_decision visible_runs whoami"
    ),
    "golem.service.app": "ROUTES BodyLimit RefuseNul SecurityHeaders TraceRequests create_app",
    "golem.service.audit": (
        "AUDIT_SCAN AuditRow api_audit api_deliveries audit_page audit_rows deliveries_page"
    ),
    "golem.service.auth": (
        "MIN_SECRET_BYTES Approver AuthConfig Credential LoginLimiter token_digest"
    ),
    "golem.service.inbox": (
        "PAGE_RUNS SESSION_COOKIE decide_form decide_run_form inbox_page login login_page "
        "login_redirect logout render_audit render_error render_page resolve_form run_page "
        "runs_page same_origin session start_form"
    ),
    "golem.service.limits": "MAX_CURSOR GuardedEvents parse_cursor",
    "golem.service.notify": "Delivery Notifier Webhook payload sign slack_message",
    "golem.service.openapi": "HTML REDIRECT SSE Operation openapi_document operation",
    "golem.service.schemas": (
        "MAX_EXPIRES_IN MAX_LIST_LIMIT AgentInfo AgentList AuditItem AuditList AuditListItem "
        "AuditQuery BulkDecisionForm Call CallList CallsQuery DecisionBody DecisionForm "
        "DecisionOut DecisionResult DeliveryAttempt DeliveryItem DeliveryList ErrorBody "
        "ErrorDetail ErrorInfo EventsQuery Health LoginForm LogoutForm OpenApiDocument Outcome "
        "ResolveForm Run RunDetail RunDetailEnvelope RunEnvelope RunList RunsQuery StartForm "
        "StartRunBody StreamToken WhoAmI"
    ),
    "golem.service.stream": "events",
    "golem.service.views": (
        "LONG_CHARS LONG_LINES PREVIEW_LINES SOON_SECONDS Presentation Presenter ago arg_fields "
        "args_diff audit_view call_view context_of digest editable_json first_line group_views "
        "iso link_next message_views outcome_line output_text path presentation_view "
        "pretty_json reveal_html run_view short span stamp until"
    ),
    "golem.store": (
        "EXPIRY_ACTOR EXPIRY_REASON AuditAction AuditEntry CallExpired CallKind CallNotFound "
        "ChangeFeed ClaimedRun Decision DecisionConflict DecisionKind DecisionRecord "
        "InvalidDecision LeaseLost NewCall NewRun Outcome Page PendingCallRecord RunNotFound "
        "RunNotInterrupted RunNotPending RunRecord RunStatus Store StoreError open_store "
        "utc_now"
    ),
    "golem.store.postgres": "PostgresStore",
    "golem.store.records": (
        "EXPIRY_ACTOR EXPIRY_REASON AuditAction AuditEntry CallExpired CallKind CallNotFound "
        "ClaimedRun Decision DecisionConflict DecisionKind DecisionRecord InvalidDecision "
        "LeaseLost NewCall NewRun Outcome Page PendingCallRecord RunNotFound RunNotInterrupted "
        "RunNotPending RunRecord RunStatus"
    ),
    "golem.store.sqlite": "SQLiteStore",
    "golem.testing": (
        "KEEP_REQUESTS FunctionModel ScriptExhausted ScriptedModel replay_as_deltas"
    ),
    "golem.tool": (
        "Canceled DeferKind Deferred Failed InvalidArguments ModelRetry RunContext Tool "
        "ToolResult approved_call call_approved find_signal idempotency_key to_tool_result"
    ),
    "golem.toolset": "Toolset enter_all resolve_tools",
    "golem.usage": "Price Usage UsageLimits",
    "golem.worker": (
        "RETRY_REFUSAL AgentEntry AgentRegistry StoredCallMismatch SweepReport Worker "
        "load_registry new_run_from_result start_run"
    ),
}

PUBLIC_MODULES = sorted(PUBLIC_ALL)

EXTRA_HOMES = {
    # A front door re-exports from its own package's modules (golem, golem.store, golem.service);
    # anything else listed in two modules is an exception named here, with the reason.
    "golem.store.StoreError": "the store's errors are importable from golem.store, their root too",
    "golem.providers.anthropic.sse_events": "two adapters list the shared SSE parser (to drop)",
    "golem.providers.gemini.sse_events": "two adapters list the shared SSE parser (to drop)",
}

ISSUE_12_ROOT_NAMES = {
    "Deferred",
    "DeferKind",
    "call_approved",
    "approved_call",
    "ModelRetry",
    "Canceled",
    "Failed",
}


def test_every_public_module_is_pinned() -> None:
    found = {"golem"} | {
        m.name
        for m in pkgutil.walk_packages(golem.__path__, "golem.")
        if not any(part.startswith("_") for part in m.name.split("."))
    }
    assert found == set(PUBLIC_ALL), "add new public modules to PUBLIC_ALL (or make them private)"


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_all_is_pinned(module: str) -> None:
    names = importlib.import_module(module).__all__
    assert sorted(names) == sorted(PUBLIC_ALL[module].split())


def test_the_signals_a_tool_raises_are_exported_from_the_root() -> None:
    import golem.tool

    for name in ISSUE_12_ROOT_NAMES:
        assert getattr(golem, name) is getattr(golem.tool, name)


def test_issue_import_lines_work() -> None:
    ns: dict[str, object] = {}
    exec(
        "from golem import Agent, RunContext, Result, Usage, UsageLimits, UsageLimitExceeded\n"
        "from golem import RunError, Stage, PartialResult, ToolError, RunEvent, EventKind, new_id\n"
        "from golem import normalize_history, HistoryRepair, dumps_history, loads_history\n"
        "from golem import Deferred, DeferKind, call_approved, approved_call\n"
        "from golem import ModelRetry, Canceled, Failed, RunPaused\n"
        "from golem.messages import Message, ToolCall, Part, ThinkingBlock\n"
        "from golem.tool import Tool, ToolResult, Canceled, Failed, ModelRetry\n"
        "from golem.model import Model, StreamingModel, ModelRequest, ModelResponse, ToolSpec, Delta\n"
        "from golem.testing import ScriptedModel, FunctionModel\n",
        ns,
    )
    for name, value in ns.items():
        if name in golem.__all__:
            assert value is getattr(golem, name)


def test_every_public_object_has_one_home() -> None:
    """A class or function is listed where it is defined, or by a front door: the `__init__` of a
    package it lives in (`golem.store` for `golem.store.records`). Other double listings are the
    named exceptions in `EXTRA_HOMES`."""
    extra = set()
    for module in PUBLIC_MODULES[1:]:
        mod = importlib.import_module(module)
        for name in mod.__all__:
            value = getattr(mod, name)
            if not isinstance(value, type | types.FunctionType):
                continue
            home = value.__module__
            if module != home and not home.startswith(module + "."):
                extra.add(f"{module}.{name}")
    assert extra == set(EXTRA_HOMES)


def _isort_key(name: str) -> tuple[int, str]:
    """ruff RUF022 order: SCREAMING_CASE constants, then CamelCase, then the rest."""
    if name.isupper() and len(name) > 1:
        return (0, name)
    if name[:1].isupper():
        return (1, name)
    return (2, name)


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_all_is_sorted_and_unique(module: str) -> None:
    """Sorted plainly, or in the isort-style order ruff's RUF022 enforces."""
    names = list(importlib.import_module(module).__all__)
    assert names in (sorted(names), sorted(names, key=_isort_key))
    assert len(set(names)) == len(names)


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_every_name_in_all_is_importable(module: str) -> None:
    mod = importlib.import_module(module)
    for name in mod.__all__:
        assert hasattr(mod, name), f"{module}.__all__ names {name!r}, which does not exist"


@pytest.mark.parametrize("module", PUBLIC_MODULES[1:])
def test_all_is_complete(module: str) -> None:
    """Every public class or function defined in a module is listed in its `__all__`."""
    mod = importlib.import_module(module)
    defined = {
        name
        for name, value in vars(mod).items()
        if not name.startswith("_")
        and isinstance(value, type | types.FunctionType)
        and getattr(value, "__module__", None) == module
    }
    missing = defined - set(mod.__all__)
    assert not missing, f"{module} defines public {sorted(missing)} not listed in __all__"


SHADOWS: dict[str, str] = {
    # A public name that means something else than the root's name of the same spelling, with
    # the reason it must (none today).
}


def test_root_all_names_resolve_to_their_home_module_objects() -> None:
    """A name exported at the root is the same object wherever else it is listed (one meaning),
    except the named `SHADOWS`."""
    shadows = set()
    for module in PUBLIC_MODULES[1:]:
        mod = importlib.import_module(module)
        for name in mod.__all__:
            if name in golem.__all__ and getattr(golem, name) is not getattr(mod, name):
                shadows.add(f"{module}.{name}")
    assert shadows == set(SHADOWS)


def test_store_reexports_every_record_name() -> None:
    """`from golem.store import X` works for every record, enum and error of `golem.store.records`."""
    import golem.store
    import golem.store.records

    missing = set(golem.store.records.__all__) - set(golem.store.__all__)
    assert not missing, f"golem.store.__all__ lacks {sorted(missing)}"
    for name in golem.store.records.__all__:
        assert getattr(golem.store, name) is getattr(golem.store.records, name), name


def test_the_deferral_surface_is_importable_from_the_root() -> None:
    from golem import (
        Canceled,
        DeferKind,
        Deferred,
        Failed,
        ModelRetry,
        SealError,
        SealKeys,
        approved_call,
        call_approved,
        errors,
        seal,
        tool,
    )

    assert (Deferred, DeferKind, call_approved, approved_call) == (
        tool.Deferred,
        tool.DeferKind,
        tool.call_approved,
        tool.approved_call,
    )
    assert (ModelRetry, Canceled, Failed) == (tool.ModelRetry, tool.Canceled, tool.Failed)
    assert SealError is errors.SealError
    assert SealKeys is seal.SealKeys


def test_stage_values_are_the_wire_strings() -> None:
    from golem import Stage

    assert {s.value for s in Stage} == {"model", "decode", "tool", "loop", "usage", "canceled"}
    assert Stage.MODEL == "model"
    assert Stage.CANCELED == "canceled"


def test_event_kind_values_cover_the_core_kinds() -> None:
    from golem import EventKind

    values = {k.value for k in EventKind}
    assert {
        "model_start",
        "model_end",
        "tool_start",
        "tool_end",
        "canceled",
        "output_rejected",
    } <= values
