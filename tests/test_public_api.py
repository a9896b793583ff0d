"""The public names are a contract: every public module's `__all__` is pinned in full (as httpx
pins its exports), sorted, importable and complete, and every public object has one home.

Adding, removing or renaming a public name fails `test_all_is_pinned` until `PUBLIC_ALL` says so:
a visible, reviewed change. A public module is any `golem` module whose dotted path has no
`_`-prefixed part; a new one must be added to `PUBLIC_ALL`.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import types
from pathlib import Path

import pytest

import golem

PUBLIC_ALL = {
    "golem": (
        "Agent Approval Canceled Citation DeferKind Deferred DeferredRequests DeferredResults "
        "EventKind Failed GolemError HistoryError HistoryRepair Message ModelRetry Part PartialResult "
        "PausedRun PendingToolCall ProviderError RejectedCall Result ResumeError ResumeProgress RunContext RunError "
        "RunEvent RunPaused RunStream SanitizeReport SealError SealKeys ServerToolBlock Stage "
        "ThinkingBlock Tool ToolCall ToolError ToolResult ToolTimeout UnsafePart Usage "
        "UsageLimitExceeded UsageLimits __version__ approved_call call_approved dumps_history "
        "loads_history new_id normalize_history sanitize_history"
    ),
    "golem.agent": "Agent RunStream default_backoff",
    "golem.agent_tool": "PAUSED_MARKER AgentTool SubAgent SubAgentPaused forwarder sub_conversation",
    "golem.cli": "",
    "golem.cli.commands": "build_app main",
    "golem.durable": "",
    "golem.integrations": "",
    "golem.deferred": "PAUSED_RUN_VERSION Approval DeferredRequests DeferredResults PausedRun PendingToolCall",
    "golem.cli.demo": "build_agent build_registry check_health open_ticket registry restart_service",
    "golem.errors": (
        "AuthenticationError BadRequest ConversationRequired GolemError HistoryError Overloaded "
        "ProviderConnectionError ProviderError ProviderTimeout RateLimited ResponseFormatError "
        "ResumeError RunPaused SealError Stage StoreError SubAgentConversationMismatch "
        "ToolError ToolTimeout UsageLimitExceeded"
    ),
    "golem.events": "EventHandler EventKind RunEvent",
    "golem.history": (
        "INTERRUPTED_TEXT HistoryRepair RejectedCall SanitizeReport UnsafePart "
        "normalize_history sanitize_history"
    ),
    "golem.integrations.mcp": (
        "ApprovalPolicy MCPCall MCPServer MCPServerError ServerOptions ToolHints default_decision"
    ),
    "golem.messages": (
        "MAX_ARGS_DEPTH MAX_NESTING PART_KINDS ROLES Citation Message Part Role ServerToolBlock "
        "ThinkingBlock ToolCall dumps_history loads_history"
    ),
    "golem.model": (
        "FINISH_REASONS TOOL_CHOICE_MODES Delta FinishReason Model ModelRequest ModelResponse "
        "StreamingModel ThinkingDelta ToolCallDelta ToolChoice ToolSpec check_tool_choice"
    ),
    "golem.integrations.otel": "format_traceparent instrument is_instrumented parse_traceparent uninstrument",
    "golem.providers": (
        "MAX_ERROR_BODY MAX_RETRY_AFTER MAX_TOKEN_COUNT OLLAMA_BASE_URL FallbackModel infer_model"
    ),
    "golem.providers.anthropic": "AnthropicModel OutputMode",
    "golem.providers.gemini": "DEFAULT_BASE_URL GeminiModel",
    "golem.providers.openai": "DEFAULT_BASE_URL OpenAIChatModel OpenAIResponsesModel",
    "golem.limits": "UsageLimits",
    "golem.records": "SubAgentCall seal_sub_agent_calls sub_agent_calls",
    "golem.resume": "BeforeApproved ResumeProgress",
    "golem.result": "PartialResult Result RunError",
    "golem.seal": "SealKey SealKeys seal_call seal_pending verify_call",
    "golem.service": "Approver AuthConfig Credential ServiceSettings create_app",
    "golem.service.api": "",
    "golem.service.app": "ROUTES create_app",
    "golem.service.audit": "",
    "golem.service.auth": "Approver AuthConfig Credential",
    "golem.service.credentials": "",
    "golem.service.errors": "",
    "golem.service.inbox": "",
    "golem.service.middleware": "",
    "golem.service.notify": "Delivery Notifier Webhook sign",
    "golem.service.openapi": "CSV HTML REDIRECT SSE ArrayOf Operation openapi_document operation",
    "golem.service.pages": "",
    "golem.service.positions": "",
    "golem.service.runs": "",
    "golem.service.schemas": (
        "MAX_EXPIRES_IN MAX_LIST_LIMIT AgentInfo AgentList AuditItem AuditList "
        "AuditListItem AuditPageQuery AuditQuery BulkDecisionForm Call CallList CallsQuery DecisionBody DecisionForm "
        "DecisionOut DecisionResult DeliveryAttempt DeliveryItem DeliveryList ErrorBody "
        "ErrorDetail ErrorInfo EventsQuery Health LoginForm LogoutForm OpenApiDocument Outcome "
        "ResolveForm Run RunDetail RunDetailEnvelope RunEnvelope RunList RunsQuery StartForm "
        "StartRunBody StreamToken WhoAmI"
    ),
    "golem.service.settings": "ServiceSettings",
    "golem.service.stream": "",
    "golem.service.views": "Presentation Presenter",
    "golem.durable.store": (
        "EXPIRY_ACTOR EXPIRY_REASON MAX_RUN_ID MAX_SECONDS AuditAction AuditEntry AuditPage "
        "CallExpired CallKind "
        "CallNotFound ChangeFeed ClaimedRun CorruptRecord Decision DecisionConflict DecisionKind "
        "DecisionRecord InvalidCursor InvalidDecision InvalidRunId LeaseLost NewCall NewRun "
        "Outcome Page PendingCallRecord "
        "RunNotFound RunNotInterrupted RunNotPending RunRecord RunStatus Store StoreBusy "
        "StoreReadOnly StoreTimeout open_store "
        "utc_now"
    ),
    "golem.durable.store.postgres": "PostgresStore",
    "golem.durable.store.records": (
        "EXPIRY_ACTOR EXPIRY_REASON MAX_RUN_ID MAX_SECONDS AuditAction AuditEntry AuditPage "
        "CallExpired CallKind "
        "CallNotFound ClaimedRun CorruptRecord Decision DecisionConflict DecisionKind "
        "DecisionRecord InvalidCursor InvalidDecision InvalidRunId LeaseLost NewCall NewRun "
        "Outcome Page PendingCallRecord "
        "RunNotFound RunNotInterrupted RunNotPending RunRecord RunStatus StoreBusy StoreReadOnly "
        "StoreTimeout"
    ),
    "golem.durable.store.sqlite": "SQLiteStore",
    "golem.testing": ("KEEP_REQUESTS FunctionModel ScriptExhausted ScriptedModel replay_as_deltas"),
    "golem.tool": (
        "Canceled DeferKind Deferred Failed InvalidArguments ModelRetry RunContext Tool "
        "ToolResult approved_call call_approved idempotency_key"
    ),
    "golem.toolset": "Toolset",
    "golem.usage": "Price Usage",
    "golem.durable.worker": (
        "RETRY_REFUSAL AgentEntry AgentRegistry StoredCallMismatch SweepReport Worker "
        "load_registry new_run_from_result start_run"
    ),
}

PUBLIC_MODULES = sorted(PUBLIC_ALL)

EXTRA_HOMES: dict[str, str] = {
    # A class or function listed outside the package it is defined in, with the reason (none).
}

FRONT_DOORS = {
    # A package's front door lists names of its own submodules (one object, two spellings of
    # its import path); no other module lists a name another public module lists for the same
    # object.
    "golem": "golem.",
    "golem.durable.store": "golem.durable.store.",
    "golem.service": "golem.service.",
}

SAME_SPELLING: dict[str, str] = {
    # A name two public modules list for different objects, with the reason it must.
    "DEFAULT_BASE_URL": "each adapter's own endpoint (Gemini, OpenAI)",
    "Outcome": "golem.durable.store's outcome enum and the service's JSON shape of it",
}

UNEXPORTED: dict[str, str] = {
    # A class or function with a public-looking name that is neither in its module's `__all__`
    # nor imported by another golem module, with the reason it keeps its name (none).
}


def test_every_public_module_is_pinned() -> None:
    found = {"golem"} | {
        m.name
        for m in pkgutil.walk_packages(golem.__path__, "golem.")
        if not any(part.startswith("_") for part in m.name.split("."))
    }
    assert found == set(PUBLIC_ALL), "add new public modules to PUBLIC_ALL (or make them private)"


def _isort_key(name: str) -> tuple[int, str]:
    """ruff RUF022 order: SCREAMING_CASE constants, then CamelCase, then the rest."""
    if name.isupper() and len(name) > 1:
        return (0, name)
    if name[:1].isupper():
        return (1, name)
    return (2, name)


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_all_is_pinned_sorted_unique_and_importable(module: str) -> None:
    mod = importlib.import_module(module)
    names = list(mod.__all__)
    assert sorted(names) == sorted(PUBLIC_ALL[module].split())
    assert names in (sorted(names), sorted(names, key=_isort_key))  # plainly, or as RUF022 sorts
    assert len(set(names)) == len(names)
    for name in names:
        assert hasattr(mod, name), f"{module}.__all__ names {name!r}, which does not exist"


def test_every_public_object_has_one_home() -> None:
    """A class or function is listed where it is defined, or by a front door: the `__init__` of a
    package it lives in (`golem.durable.store` for `golem.durable.store.records`). Other double listings are the
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


def _imported_from_elsewhere() -> set[str]:
    """`module.name` for every name a golem module takes from another golem module, by
    `from module import name` or as `alias.name` after `from golem import module`."""
    src = Path(golem.__file__).parent
    found = set()
    for path in src.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        modules: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("golem"):
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    found.add(full)
                    modules[alias.asname or alias.name] = full
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname and alias.name.startswith("golem."):
                        modules[alias.asname] = alias.name
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in modules
            ):
                found.add(f"{modules[node.value.id]}.{node.attr}")
    return found


def test_all_is_complete() -> None:
    """A class or function a public module defines under a public-looking name is either public
    (in `__all__`) or an internal shared with other golem modules (imported by one of them);
    a helper only its own module uses has an `_` name."""
    shared = _imported_from_elsewhere()
    unlisted = set()
    for module in PUBLIC_MODULES[1:]:
        mod = importlib.import_module(module)
        for name, value in vars(mod).items():
            if (
                not name.startswith("_")
                and isinstance(value, type | types.FunctionType)
                and getattr(value, "__module__", None) == module
                and name not in mod.__all__
                and f"{module}.{name}" not in shared
            ):
                unlisted.add(f"{module}.{name}")
    assert unlisted == set(UNEXPORTED), "export these, or give them an _ name"


def test_every_name_has_one_home() -> None:
    """No object is listed by two public modules, except by the front door of the package it
    lives in; a spelling two modules list for different objects is a named `SAME_SPELLING`."""
    homes: dict[int, set[str]] = {}
    spellings: dict[str, set[int]] = {}
    for module in PUBLIC_MODULES:
        mod = importlib.import_module(module)
        for name in mod.__all__:
            key = id(getattr(mod, name))
            homes.setdefault(key, set()).add(f"{module}.{name}")
            spellings.setdefault(name, set()).add(key)
    twice = set()
    for listings in homes.values():
        modules = {listing.rsplit(".", 1)[0] for listing in listings}
        own = {
            m
            for m in modules
            if not (m in FRONT_DOORS and any(o.startswith(FRONT_DOORS[m]) for o in modules))
        }
        if len(own) > 1:
            twice.add(", ".join(sorted(listings)))
    assert not twice, f"listed by two homes: {sorted(twice)}"
    reused = {name for name, keys in spellings.items() if len(keys) > 1}
    assert reused == set(SAME_SPELLING), "a public name means two things"  # the root's too


def test_store_reexports_every_record_name() -> None:
    """`from golem.durable.store import X` works for every record, enum and error of `golem.durable.store.records`."""
    import golem.durable.store
    import golem.durable.store.records

    missing = set(golem.durable.store.records.__all__) - set(golem.durable.store.__all__)
    assert not missing, f"golem.durable.store.__all__ lacks {sorted(missing)}"
    for name in golem.durable.store.records.__all__:
        assert getattr(golem.durable.store, name) is getattr(golem.durable.store.records, name), (
            name
        )
