"""What a run returns: the output plus its evidence; `Result.output` raises `RunPaused`
on a paused result (docs/adr/0022-result-output-typing.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, NoReturn, TypeVar

from golem.deferred import DeferredRequests, PausedRun
from golem.errors import GolemError, RunPaused, Stage
from golem.messages import Message
from golem.usage import Usage

__all__ = ["PartialResult", "Result", "RunError"]

OutputT = TypeVar("OutputT")
_set = object.__setattr__

RESULT_FIELDS = (
    "messages",
    "usage",
    "finish_reason",
    "requests",
    "tool_calls",
    "cost",
    "run_id",
    "conversation_id",
    "pending",
    "trace_context",
)


class Result(Generic[OutputT]):
    """The outcome of a run that succeeded: completed (`output`) or paused (`pending`), with
    `messages` to feed back as `history`, `usage`, counters, `cost`, identity and the
    `trace_context` (W3C traceparent) to link a resume."""

    __slots__ = ("_output", *RESULT_FIELDS)

    _output: OutputT | None
    messages: list[Message]
    usage: Usage
    finish_reason: str
    requests: int
    tool_calls: int
    cost: float
    run_id: str
    conversation_id: str
    pending: DeferredRequests | None
    trace_context: str

    def __init__(
        self,
        output: OutputT | None,
        messages: list[Message],
        usage: Usage | None = None,
        finish_reason: str = "",
        requests: int = 0,
        tool_calls: int = 0,
        cost: float = 0.0,
        run_id: str = "",
        conversation_id: str = "",
        pending: DeferredRequests | None = None,
        trace_context: str = "",
    ) -> None:
        """`output` is the decoded final output of a completed run; pass None with `pending`."""
        if pending is not None and output is not None:
            raise ValueError("a paused result (pending set) has no output; pass output=None")
        # one store per slot, unrolled: built twice per pause/resume cycle
        _set(self, "messages", messages)
        _set(self, "usage", usage or Usage())
        _set(self, "finish_reason", finish_reason)
        _set(self, "requests", requests)
        _set(self, "tool_calls", tool_calls)
        _set(self, "cost", cost)
        _set(self, "run_id", run_id)
        _set(self, "conversation_id", conversation_id)
        _set(self, "pending", pending)
        _set(self, "trace_context", trace_context)
        _set(self, "_output", output)

    @property
    def output(self) -> OutputT:
        """The decoded final output of a completed run (`RunPaused` on a paused one)."""
        if self.pending is not None:
            raise RunPaused(_paused_message(self.pending))
        return self._output  # type: ignore[return-value]  # None only when OutputT allows None

    @property
    def is_paused(self) -> bool:
        """True when the run paused on deferred tool calls (`pending` is set, no `output`)."""
        return self.pending is not None

    @property
    def paused_run(self) -> PausedRun | None:
        """The paused run as one value to keep and resume from (None when completed)."""
        if self.pending is None:
            return None
        return PausedRun(
            list(self.messages), self.pending, self.conversation_id, self.run_id, self.trace_context
        )

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError(f"Result is immutable: cannot set {name!r}")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError(f"Result is immutable: cannot delete {name!r}")

    def _values(self) -> tuple[Any, ...]:
        return (self._output, *(getattr(self, name) for name in RESULT_FIELDS))

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, Result)
        return self._values() == other._values()

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (self.__class__, self._values())  # pickle and copy rebuild through __init__

    __hash__ = None  # type: ignore[assignment]  # holds lists, as the dataclass it was

    def __repr__(self) -> str:
        head = "pending" if self.pending is not None else "output"
        first = repr(self.pending if self.pending is not None else self._output)
        rest = ", ".join(
            f"{name}={getattr(self, name)!r}" for name in RESULT_FIELDS if name != "pending"
        )
        return f"Result({head}={first}, {rest})"


def _paused_message(pending: DeferredRequests) -> str:
    calls = ", ".join(f'"{c.tool_name}" (call "{c.call_id}")' for c in pending.calls)
    return (
        f"golem: the run paused on deferred tool calls and has no output: {calls}. "
        "Check result.is_paused before reading result.output; resume with "
        "agent.run_with_deferred_results(result.messages, DeferredResults(...))"
    )


@dataclass(frozen=True, slots=True)
class PartialResult:
    """The evidence a failed run gathered before it failed (see `RunError.partial`)."""

    messages: list[Message]
    usage: Usage = field(default_factory=Usage)
    finish_reason: str = ""
    requests: int = 0
    tool_calls: int = 0
    cost: float = 0.0
    run_id: str = ""
    conversation_id: str = ""
    pending: DeferredRequests | None = None
    """Set when a resume's approved re-run failed (ADR 0071): the calls `messages` still
    waits on — the failing call and those not yet resolved — so the caller goes on with
    `run_with_deferred_results(messages, <the same resolutions>)`. `reason` is empty (a
    history keeps no reasons; the paused run's `Result.pending` has them). None for every
    other failure: the partial is evidence to run on (`Agent.run(history=messages)`, which
    closes any call left unanswered)."""

    @property
    def is_paused(self) -> bool:
        """Whether `messages` still waits on pending calls (`pending` is set)."""
        return self.pending is not None


class RunError(GolemError):
    """A run failed at `stage`; the underlying exception is `__cause__` and `partial` the
    evidence gathered before the failure (or None)."""

    def __init__(
        self, stage: Stage, cause: BaseException, partial: PartialResult | None = None
    ) -> None:
        super().__init__(f"golem: {stage.value} stage: {cause}")
        self.stage = stage
        self.partial = partial
        self.__cause__ = cause
