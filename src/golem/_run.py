"""One run around the loop: `new_state`, `open_run` (instructions, repaired history,
prompt), then `run_loop`, inside `run_traced` when traced or with agent tools."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import pydantic

from golem._cancel import cancel_requests
from golem._ids import new_id
from golem._loop import Policy, RunState, run_loop
from golem.agent_tool import SUB_RUN, copy_result, run_scope, surface
from golem.errors import Stage
from golem.events import EventHandler
from golem.history import History, as_history, conversation_of, pair_results, validate_history
from golem.messages import Message, Part, new_message, stamped
from golem.result import Result, RunError
from golem.tool import ModelRetry, RunContext, Tool, describe_validation
from golem.toolset import Toolset, enter_all, resolve_tools

if TYPE_CHECKING:
    from golem.integrations.otel import RunTracer

__all__ = [
    "History",
    "Prompt",
    "decode_output",
    "new_state",
    "observers_of",
    "open_run",
    "prepare",
    "run_blocking",
    "run_traced",
    "toolsets_entered",
]

T = TypeVar("T")
Prompt = str | Sequence[str | Part]


def prompt_message(prompt: Prompt) -> Message | None:
    """The user message of `prompt` (text, or text and parts); `ValueError` for a bad item."""
    if isinstance(prompt, str):
        return new_message("user", prompt)
    texts: list[str] = []
    parts: list[Part] = []
    for i, item in enumerate(prompt):
        if isinstance(item, str):
            texts.append(item)
        elif isinstance(item, Part):
            problem = item.problem()
            if problem:
                raise ValueError(f"golem: prompt part {i}: {problem}")
            parts.append(item)
        else:
            raise ValueError(
                f"golem: prompt item {i} must be a str or a Part, got {type(item).__name__}"
            )
    return new_message("user", "\n".join(texts), parts)


def observers_of(policy: Policy, on_event: EventHandler | None) -> tuple[EventHandler, ...]:
    """The agent's event handler, then the run's."""
    return (*policy.observers, on_event) if on_event is not None else policy.observers


def new_state(
    policy: Policy,
    deps: Any,
    run_id: str | None,
    conversation_id: str,
    on_event: EventHandler | None,
) -> RunState:
    """A fresh `RunState` of a run under `policy`."""
    return RunState(
        messages=[],
        deps=deps,
        run_id=run_id or new_id(),
        conversation_id=conversation_id,
        observers=observers_of(policy, on_event),
        cancels=cancel_requests(),
    )


async def open_run(
    policy: Policy, state: RunState, body: list[Message], user: Message | None, fresh: bool
) -> None:
    """Start the evidence: the instructions, the repaired history without its system
    messages, then the prompt (when it says something, or `fresh` opens an empty history)."""
    ins = policy.instructions
    if ins is None or isinstance(ins, str):
        text = ins or ""
    else:
        value = ins(RunContext(state.deps, state.run_id, state.conversation_id))
        text = str(await value if inspect.isawaitable(value) else value)
    if text:
        state.messages.append(new_message("system", text))
    state.messages.extend(pair_results([m for m in body if m.role != "system"]))
    if user is not None and (user.content or user.parts or fresh):
        state.messages.append(stamped(user, state.run_id, state.conversation_id))


async def prepare(
    policy: Policy,
    prompt: Prompt,
    deps: Any,
    hist: History | None,
    run_id: str | None,
    conversation_id: str | None,
    on_event: EventHandler | None,
) -> RunState:
    """The state of a fresh run on `prompt` after `hist` (validated; pending calls close)."""
    supplied = as_history(hist)
    validate_history(supplied)
    user = prompt_message(prompt)
    conversation = conversation_id or conversation_of(supplied) or new_id()
    state = new_state(policy, deps, run_id, conversation, on_event)
    spent = SUB_RUN.get()
    if spent is not None:  # an agent tool's sub-run: its parent counts it
        SUB_RUN.set(None)
        spent.append(state)
    await open_run(policy, state, supplied, user, not supplied)
    return state


def toolsets_entered(
    tools: Mapping[str, Tool], toolsets: Sequence[Toolset]
) -> contextlib.AbstractAsyncContextManager[Mapping[str, Tool]]:
    """Enter `toolsets` for one run; yields every tool the run starts with."""
    if not toolsets:
        return contextlib.nullcontext(tools)
    return _entered(tools, toolsets)


@contextlib.asynccontextmanager
async def _entered(
    tools: Mapping[str, Tool], toolsets: Sequence[Toolset]
) -> AsyncIterator[Mapping[str, Tool]]:
    async with contextlib.AsyncExitStack() as stack:
        try:
            await enter_all(stack, toolsets)
            entered = await resolve_tools(tools, toolsets)
        except Exception as exc:
            raise RunError(Stage.TOOL, exc, None) from exc
        yield entered


def plain(policy: Policy) -> bool:
    """True when a run needs neither spans nor sub-agent scoping (the fast path)."""
    return (
        policy.tracer_provider is None
        and "golem.integrations.otel" not in sys.modules
        and not policy.nested
    )


def new_tracer(policy: Policy, trace_context: str = "") -> RunTracer | None:
    """The run's tracer when tracing is on (`golem.integrations.otel`), else None."""
    if policy.tracer_provider is None and "golem.integrations.otel" not in sys.modules:
        return None  # never imported: tracing is off
    from golem.integrations.otel import run_tracer

    return run_tracer(policy.agent, policy.tracer_provider, trace_context)


async def run_traced(
    policy: Policy,
    state: RunState,
    *,
    trace_context: str = "",
    before: Callable[[], Awaitable[None]] | None = None,
    operation: str = "run",
    opened: RunTracer | None = None,
) -> Result[Any]:
    """`run_loop` on `state` (after `before`) inside the run's span when traced (`opened`:
    a span a nested resume opened), collecting sub-agent pauses when it has agent tools."""
    tracer = opened
    if tracer is not None:
        tracer.bind(state)
    else:
        tracer = new_tracer(policy, trace_context)
        if tracer is not None:
            tracer.start(state, operation=operation)
    if tracer is not None:
        state.tracer = tracer
        state.observers = (tracer.on_event, *state.observers)
    try:
        with run_scope(state) if policy.nested else contextlib.nullcontext() as scope:
            if before is not None:
                await before()
            result = await run_loop(policy, state, stream=state.sink is not None)
        if scope is not None:
            result = surface(result, scope)
    except BaseException as exc:
        if tracer is not None:
            tracer.fail(exc)
        raise
    if tracer is None:
        return result
    return copy_result(result, trace_context=tracer.finish(result))


def run_blocking(model: object, coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` on a fresh event loop, then close what the model opened on that loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        coro.close()
        raise RuntimeError(
            "golem: the *_sync methods cannot run inside an event loop; await the async method instead"
        )

    async def main() -> T:
        try:
            return await coro
        finally:
            close = getattr(model, "aclose", None)
            if callable(close):
                await close()  # provider adapters close the HTTP client they created themselves

    return asyncio.run(main())


def _unfence(text: str) -> str:
    """The JSON inside a Markdown code fence (```json ... ```), or the text unchanged."""
    stripped = text.strip()
    if stripped.startswith("```") and stripped.endswith("```") and "\n" in stripped:
        return stripped[stripped.index("\n") + 1 : -3]
    return text


def decode_output(adapter: pydantic.TypeAdapter[Any], text: str) -> Any:
    """The output `adapter` validates from `text` (fenced JSON too), else `ModelRetry`."""
    try:
        return adapter.validate_json(_unfence(text))
    except pydantic.ValidationError as exc:
        retry = ModelRetry(describe_validation(exc, "output"))
        retry.__cause__ = exc
        raise retry from exc
