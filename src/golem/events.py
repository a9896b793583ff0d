"""Run events, delivered synchronously to the agent's `event_handler`, then the run's
`on_event`; an exception an observer raises is logged and ignored."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from golem.messages import Part
from golem.usage import Usage

__all__ = ["EventHandler", "EventKind", "RunEvent"]

_log = logging.getLogger("golem")


class EventKind(StrEnum):
    """What a `RunEvent` reports."""

    MODEL_START = "model_start"
    """Before each model call attempt (`turn`, `attempt` from 1)."""
    MODEL_END = "model_end"
    """After each attempt (`usage`, or `error` when it failed)."""
    TOOL_START = "tool_start"
    """Before each tool execution (`call_id`, `tool_name`, `args`; `approved` on a resume's
    approved re-run)."""
    TOOL_END = "tool_end"
    """After each tool execution that did not defer (`result`, `parts`, `error`, `approved`)."""
    DEFERRED = "deferred"
    """Instead of `tool_end` for a call that deferred (`call_id`, `tool_name`, `args`,
    `reason`)."""
    CANCELED = "canceled"
    """A tool raised `Canceled`; follows its `tool_end` (`error` is the signal)."""
    OUTPUT_REJECTED = "output_rejected"
    """The final output was rejected; `attempt` is the correction round that follows."""


@dataclass(frozen=True, slots=True)
class RunEvent:
    """One event of a run; fields that do not apply to the kind keep their defaults."""

    kind: EventKind
    turn: int = 0
    """0-based model turn within the current loop segment."""
    attempt: int = 0
    """Model call attempt (from 1), or the output correction round."""
    call_id: str = ""
    tool_name: str = ""
    args: str = ""
    """Raw argument JSON of the tool call."""
    result: str = ""
    """Text result of the tool call."""
    parts: Sequence[Part] = ()
    error: BaseException | None = None
    usage: Usage | None = None
    run_id: str = ""
    conversation_id: str = ""
    reason: str = ""
    """The reason a deferring tool gave (`deferred` events)."""
    approved: bool = False
    """True on the `tool_start`/`tool_end` of an approved call re-run by a resume."""
    agent: str = ""
    """"" for the run's own events. For an event of a sub-agent (`Agent.as_tool`) forwarded
    to the parent's observers: the agent tool it comes from (`janitor`; nested:
    `manager/janitor`)."""
    namespace: str = ""
    """"" for the run's own events. For a forwarded sub-agent event: the parent's call ID the
    sub-agent runs under (`call-1`; nested: `t1/m1`). The event's `call_id` and `tool_name`
    are namespaced like the parent's `Result.pending` (`call-1/j-1`, `janitor/delete_file`);
    `run_id` is the sub-run's."""


EventHandler = Callable[[RunEvent], None]


def dispatch(handlers: Sequence[EventHandler], event: RunEvent) -> None:
    """Deliver `event` to each handler in order; a failing handler never fails the run."""
    for handler in handlers:
        try:
            handler(event)
        except Exception:
            _log.exception("golem: run event observer raised on %s; ignored", event.kind.value)
