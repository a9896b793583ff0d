"""golem: LLM agents whose tool calls can pause the run (`raise Deferred(...)`), to be
resumed later, in any process, with `agent.run_with_deferred_results`."""

from golem._ids import new_id
from golem.agent import Agent, RunStream
from golem.deferred import Approval, DeferredRequests, DeferredResults, PausedRun, PendingToolCall
from golem.errors import (
    GolemError,
    HistoryError,
    ProviderError,
    ResumeError,
    RunPaused,
    SealError,
    Stage,
    ToolError,
    ToolTimeout,
    UsageLimitExceeded,
)
from golem.events import EventKind, RunEvent
from golem.history import (
    HistoryRepair,
    RejectedCall,
    SanitizeReport,
    UnsafePart,
    normalize_history,
    sanitize_history,
)
from golem.limits import UsageLimits
from golem.messages import (
    Citation,
    Message,
    Part,
    ServerToolBlock,
    ThinkingBlock,
    ToolCall,
    dumps_history,
    loads_history,
)
from golem.result import PartialResult, Result, RunError
from golem.resume import ResumeProgress
from golem.seal import SealKeys
from golem.tool import (
    Canceled,
    DeferKind,
    Deferred,
    Failed,
    ModelRetry,
    RunContext,
    Tool,
    ToolResult,
    approved_call,
    call_approved,
)
from golem.usage import Usage

__version__ = "0.1.0"

__all__ = [
    "Agent",
    "Approval",
    "Canceled",
    "Citation",
    "DeferKind",
    "Deferred",
    "DeferredRequests",
    "DeferredResults",
    "EventKind",
    "Failed",
    "GolemError",
    "HistoryError",
    "HistoryRepair",
    "Message",
    "ModelRetry",
    "Part",
    "PartialResult",
    "PausedRun",
    "PendingToolCall",
    "ProviderError",
    "RejectedCall",
    "Result",
    "ResumeError",
    "ResumeProgress",
    "RunContext",
    "RunError",
    "RunEvent",
    "RunPaused",
    "RunStream",
    "SanitizeReport",
    "SealError",
    "SealKeys",
    "ServerToolBlock",
    "Stage",
    "ThinkingBlock",
    "Tool",
    "ToolCall",
    "ToolError",
    "ToolResult",
    "ToolTimeout",
    "UnsafePart",
    "Usage",
    "UsageLimitExceeded",
    "UsageLimits",
    "__version__",
    "approved_call",
    "call_approved",
    "dumps_history",
    "loads_history",
    "new_id",
    "normalize_history",
    "sanitize_history",
]
