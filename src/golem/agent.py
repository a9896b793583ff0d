"""The Agent: a model, tools and policy, and the ways to run them."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import sys
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Iterable,
    Mapping,
    Sequence,
)
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, overload

import pydantic
from typing_extensions import TypeVar

from golem import deferred
from golem._ids import new_id
from golem._loop import RunState, run_loop
from golem.agent_tool import (
    AgentTool,
    agent_tool,
    copy_result,
    has_agent_tools,
    paused_records,
    run_scope,
    surface,
)
from golem.agent_tool import resume as resume_nested
from golem.deferred import DeferredResults
from golem.errors import Overloaded, RateLimited, RunError, Stage
from golem.events import EventHandler, RunEvent
from golem.history import normalize_history, validate_history
from golem.messages import Message, Part, ToolCall, loads_history
from golem.model import Delta, Model, ToolChoice, ToolSpec, check_tool_choice
from golem.result import Result
from golem.tool import ModelRetry, RunContext, Tool
from golem.toolset import Toolset, enter_all, resolve_tools
from golem.usage import Price, Usage, UsageLimits

if TYPE_CHECKING:
    from golem.otel import RunTracer

__all__ = ["Agent", "RunStream", "default_backoff"]

DepsT = TypeVar("DepsT", default=None)
OutputT = TypeVar("OutputT", default=str)
F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

Instructions = str | Callable[[RunContext[Any]], str] | Callable[[RunContext[Any]], Awaitable[str]]
Prompt = str | Sequence[str | Part]
History = Sequence[Message] | str


def default_backoff(attempt: int) -> float:
    """Seconds to wait after failed attempt `attempt` (1-based): 0.5 s doubling, capped at 30 s."""
    return float(min(30.0, 0.5 * 2 ** (attempt - 1)))


class Agent(Generic[DepsT, OutputT]):
    """An LLM agent: a model, the tools it may call, and the policy of its runs.

    Args:
        model: A `golem.model.Model`, or a "provider:model" string (see `infer_model`).
        output_type: `str` for the final text, or any type pydantic can validate
            (the final text is parsed as JSON; a validation failure is correctable
            under `output_retries`).
        deps_type: The type of `deps`, for type checkers only (`Agent[Deps, Out]` works too).
        instructions: The system instructions: a string, or a function of the
            `RunContext` (sync or async) resolved once per run.
        tools: `Tool`s or plain functions (turned into tools from their signature).
        tool_timeout: Default seconds a tool call may take (`None`: unbounded).
        tool_retries: Default correction budget per tool per run for `ModelRetry`.
        output_retries: Correction rounds for a rejected final output.
        max_iterations: Model turns per loop segment (at least 1).
        max_attempts: Attempts per model call, first included; only retryable
            provider errors are retried, with exponential backoff.
        parallel_tool_calls: Run the calls of one response concurrently.
        usage_limits: Bounds on tokens, requests, tool calls and cost.
        price: Turns `Usage` into money; required for a cost limit.
        event_handler: Observer of every run's events (before the run's own).
        retry_backoff: Seconds to wait after failed attempt n (default 0.5 s doubling,
            capped at 30 s); a provider's `Retry-After` wins when longer.
        name: A name for logs and the approval service.
        tool_choice: Whether and which tool the model must call on each turn: "auto",
            "required", "none" or a tool name (checked against the tools at each request).
        toolsets: Sources of more tools, such as `golem.mcp.MCPServer`s: entered for
            each run and listed before every model turn (see `golem.toolset`).
        tracer_provider: An OpenTelemetry `TracerProvider` for this agent's run, model
            and tool spans (see `golem.otel`; needs the `[otel]` extra).

    Raises:
        ValueError: duplicate tool names, negative limits, retries or timeouts,
            `max_iterations` < 1, `max_attempts` < 1, or a cost limit without `price`.
    """

    def __init__(
        self,
        model: Model | str,
        *,
        output_type: type[OutputT] = str,  # type: ignore[assignment]
        deps_type: type[DepsT] | None = None,
        instructions: Instructions | None = None,
        tools: Iterable[Tool | Callable[..., Any]] = (),
        tool_timeout: float | None = None,
        tool_retries: int = 0,
        output_retries: int = 0,
        max_iterations: int = 10,
        max_attempts: int = 1,
        parallel_tool_calls: bool = False,
        usage_limits: UsageLimits | None = None,
        price: Price | None = None,
        event_handler: EventHandler | None = None,
        retry_backoff: Callable[[int], float] | None = None,
        name: str = "",
        tool_choice: ToolChoice = "auto",
        toolsets: Iterable[Toolset] = (),
        tracer_provider: Any = None,
    ) -> None:
        if isinstance(model, str):
            from golem.providers import infer_model

            model = infer_model(model)
        if tool_timeout is not None and tool_timeout <= 0:
            raise ValueError(f"tool_timeout must be positive seconds, got {tool_timeout}")
        for label, value in (("tool_retries", tool_retries), ("output_retries", output_retries)):
            if value < 0:
                raise ValueError(f"{label} must not be negative, got {value}")
        if max_iterations < 1:
            raise ValueError(f"max_iterations must be at least 1, got {max_iterations}")
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {max_attempts}")
        if usage_limits is not None and usage_limits.cost is not None and price is None:
            raise ValueError(
                "a cost limit needs a price: pass price=... (a function from Usage to money)"
            )
        self.model = model
        self.output_type = output_type
        self.instructions = instructions
        self.tool_timeout = tool_timeout
        self.tool_retries = tool_retries
        self.output_retries = output_retries
        self.max_iterations = max_iterations
        self.max_attempts = max_attempts
        self.parallel_tool_calls = parallel_tool_calls
        self.usage_limits = usage_limits
        self.price = price
        self.event_handler = event_handler
        self.retry_backoff = retry_backoff or default_backoff
        self.name = name
        self.tool_choice = check_tool_choice(tool_choice)
        """Sent on every model request: "auto", "required", "none" or a tool name."""
        self.tools: dict[str, Tool] = {}
        if tracer_provider is not None:
            import golem.otel  # noqa: F401 - fails now, with the install command, without the extra
        self.tracer_provider = tracer_provider
        self.toolsets: list[Toolset] = []
        for toolset in toolsets:
            self.add_toolset(toolset)
        self._specs: list[ToolSpec] | None = None
        if output_type is str:
            self._adapter: pydantic.TypeAdapter[Any] | None = None
            self._output_schema: dict[str, Any] | None = None
        else:
            self._adapter = pydantic.TypeAdapter(output_type)
            self._output_schema = self._adapter.json_schema()
        for t in tools:
            self._register(t if isinstance(t, Tool) else Tool.from_function(t))

    def __repr__(self) -> str:
        return f"Agent(model={type(self.model).__name__}, tools={list(self.tools)})"

    # ----------------------------------------------------------------- tools

    def _register(self, tool: Tool) -> None:
        if tool.name in self.tools:
            raise ValueError(f'duplicate tool name "{tool.name}"')
        self.tools[tool.name] = tool
        self._specs = None

    @overload
    def tool(self, fn: F) -> F: ...

    @overload
    def tool(
        self,
        *,
        name: str | None = None,
        description: str | None = None,
        max_retries: int | None = None,
        timeout: float | None = None,
        sequential: bool = False,
    ) -> Callable[[F], F]: ...

    def tool(
        self,
        fn: F | None = None,
        *,
        name: str | None = None,
        description: str | None = None,
        max_retries: int | None = None,
        timeout: float | None = None,
        sequential: bool = False,
    ) -> F | Callable[[F], F]:
        """Register a function as a tool (usable bare, `@agent.tool`, or with options).

        The function may be sync or async; its first parameter may be
        `ctx: RunContext[Deps]`. Returns the function unchanged.
        """

        def register(f: F) -> F:
            self._register(
                Tool.from_function(
                    f,
                    name=name,
                    description=description,
                    max_retries=max_retries,
                    timeout=timeout,
                    sequential=sequential,
                )
            )
            return f

        return register(fn) if fn is not None else register

    def add_toolset(self, toolset: Toolset) -> None:
        """Add a source of tools (an MCP server...) to every later run.

        Raises:
            TypeError: `toolset` is not a `golem.toolset.Toolset`.
        """
        if not isinstance(toolset, Toolset):
            raise TypeError(
                f"a toolset needs list_tools() and async with, got {type(toolset).__name__}"
            )
        self.toolsets.append(toolset)

    def _toolsets_entered(self) -> contextlib.AbstractAsyncContextManager[Mapping[str, Tool]]:
        """Enter the toolsets for one run; yields every tool the run starts with."""
        if not self.toolsets:
            return contextlib.nullcontext(self.tools)
        return self._enter_toolsets()

    @contextlib.asynccontextmanager
    async def _enter_toolsets(self) -> AsyncIterator[Mapping[str, Tool]]:
        async with contextlib.AsyncExitStack() as stack:
            try:
                await enter_all(stack, self.toolsets)
                tools = await resolve_tools(self.tools, self.toolsets)
            except Exception as exc:
                raise RunError(Stage.TOOL, exc, None) from exc
            yield tools

    def _run_tracer(self, state: RunState, trace_context: str = "") -> RunTracer | None:
        """Start the run's span when tracing is on (`golem.otel`), else None."""
        if self.tracer_provider is None and "golem.otel" not in sys.modules:
            return None  # golem.otel never imported: tracing is off, nothing to ask
        from golem.otel import run_tracer

        tracer = run_tracer(self, self.tracer_provider, trace_context)
        if tracer is not None:
            tracer.start(state)
            state.tracer = tracer
            state.observers = (tracer.on_event, *state.observers)
        return tracer

    async def _run_traced(
        self,
        state: RunState,
        *,
        stream: bool = False,
        trace_context: str = "",
        before: Callable[[], Awaitable[None]] | None = None,
    ) -> Result[OutputT]:
        """`run_loop` on `state` (after `before`), inside the run's span when tracing is on
        and collecting sub-agent pauses when the agent has agent tools."""
        tracer = self._run_tracer(state, trace_context)
        nested = has_agent_tools(self.tools)
        if tracer is None and not nested:
            if before is not None:
                await before()
            return await run_loop(self, state, stream=stream)
        try:
            with run_scope(state) if nested else contextlib.nullcontext() as scope:
                if before is not None:
                    await before()
                result = await run_loop(self, state, stream=stream)
            if scope is not None:
                result = surface(result, scope)
        except BaseException as exc:
            if tracer is not None:
                tracer.fail(exc)
            raise
        if tracer is None:
            return result
        return copy_result(result, trace_context=tracer.finish(result))

    def as_tool(
        self,
        name: str | None = None,
        description: str | None = None,
        *,
        deps: Callable[[Any], Any] | None = None,
        timeout: float | None = None,
    ) -> AgentTool:
        """This agent as a tool of another agent (see `golem.agent_tool`).

        The tool takes a `prompt`; the result is this agent's output. When this agent
        pauses, the calling agent pauses with this agent's pending calls, namespaced as
        `<call id>/<sub call id>`.

        Args:
            name: The tool name (default: the agent's `name`).
            description: What the agent does, for the calling model.
            deps: Maps the caller's `deps` to this agent's (default: passed unchanged).
            timeout: Seconds the whole sub-run may take.

        Raises:
            ValueError: no name (neither given nor the agent's), or a name with "/".
        """
        return agent_tool(self, name, description, deps=deps, timeout=timeout)

    def _tool_specs(self) -> list[ToolSpec]:
        if self._specs is None:
            self._specs = [ToolSpec(t.name, t.description, t.schema) for t in self.tools.values()]
        return self._specs

    # ----------------------------------------------------------------- policy helpers

    def _decode(self, text: str) -> Any:
        if self._adapter is None:
            return text
        try:
            return self._adapter.validate_json(_unfence(text))
        except pydantic.ValidationError as exc:
            retry = ModelRetry(_describe_output_error(exc))
            retry.__cause__ = exc
            raise retry from exc

    def _cost(self, usage: Usage) -> float:
        return float(self.price(usage)) if self.price is not None else 0.0

    def _backoff(self, attempt: int, exc: BaseException) -> float:
        wait = self.retry_backoff(attempt)
        if isinstance(exc, RateLimited | Overloaded) and exc.retry_after is not None:
            wait = max(wait, exc.retry_after)
        return wait

    async def _instructions(self, ctx: RunContext[Any]) -> str:
        ins = self.instructions
        if ins is None:
            return ""
        if isinstance(ins, str):
            return ins
        value = ins(ctx)
        if inspect.isawaitable(value):
            value = await value
        return str(value)

    def _observers(self, on_event: EventHandler | None) -> tuple[EventHandler, ...]:
        if self.event_handler is None:
            return (on_event,) if on_event is not None else ()
        return (self.event_handler, on_event) if on_event is not None else (self.event_handler,)

    # ----------------------------------------------------------------- runs

    async def _prepare(
        self,
        prompt: Prompt,
        deps: Any,
        hist: History | None,
        run_id: str | None,
        conversation_id: str | None,
        on_event: EventHandler | None,
    ) -> RunState:
        supplied = _as_history(hist)
        validate_history(supplied)
        user = _prompt_message(prompt)
        state = RunState(
            messages=[],
            deps=deps,
            run_id=run_id or new_id(),
            conversation_id=conversation_id or _conversation_of(supplied) or new_id(),
            observers=self._observers(on_event),
        )
        await self._open(state, [m for m in supplied if m.role != "system"])
        if user is not None and (user.content or user.parts or not supplied):
            state.messages.append(_stamp(user, state))
        return state

    async def _open(self, state: RunState, body: list[Message]) -> None:
        """Start the evidence: this run's instructions, then the repaired history."""
        text = await self._instructions(RunContext(state.deps, state.run_id, state.conversation_id))
        if text:
            state.messages.append(Message(role="system", content=text))
        repaired, _ = normalize_history(body)
        state.messages.extend(repaired)

    async def run(
        self,
        prompt: Prompt = "",
        *,
        deps: DepsT | None = None,
        history: History | None = None,
        run_id: str | None = None,
        conversation_id: str | None = None,
        on_event: EventHandler | None = None,
    ) -> Result[OutputT]:
        """Run the agent on `prompt`, optionally continuing `history`.

        Returns a `Result`; when a tool call deferred, `result.pending` is set and
        `result.output` is None. An empty prompt with a history adds no user message.

        Raises:
            RunError: the run failed; `.stage` says where, `__cause__` why.
            ValueError: the history or prompt is malformed.
        """
        async with self._toolsets_entered():
            state = await self._prepare(prompt, deps, history, run_id, conversation_id, on_event)
            return await self._run_traced(state)

    def run_sync(
        self,
        prompt: Prompt = "",
        *,
        deps: DepsT | None = None,
        history: History | None = None,
        run_id: str | None = None,
        conversation_id: str | None = None,
        on_event: EventHandler | None = None,
    ) -> Result[OutputT]:
        """`run` for synchronous code (starts an event loop; not callable from one)."""
        return _sync(
            self.model,
            self.run(
                prompt,
                deps=deps,
                history=history,
                run_id=run_id,
                conversation_id=conversation_id,
                on_event=on_event,
            ),
        )

    def run_stream(
        self,
        prompt: Prompt = "",
        *,
        deps: DepsT | None = None,
        history: History | None = None,
        run_id: str | None = None,
        conversation_id: str | None = None,
        on_event: EventHandler | None = None,
    ) -> RunStream[OutputT]:
        """Stream a run: `async with agent.run_stream(p) as stream: async for item in stream`.

        Items are `Delta`s and `RunEvent`s in arrival order; afterwards `stream.result`
        holds the `Result` that `run` would have returned.

        Raises:
            TypeError: the model does not support streaming (raised here, up front).
        """
        if not callable(getattr(self.model, "generate_stream", None)):
            raise TypeError(f"golem: model {type(self.model).__name__} does not support streaming")

        async def start(sink: Callable[[Delta | RunEvent], None]) -> Result[OutputT]:
            async with self._toolsets_entered():
                state = await self._prepare(
                    prompt, deps, history, run_id, conversation_id, on_event
                )
                state.sink = sink
                return await self._run_traced(state, stream=True)

        return RunStream(start)

    async def run_with_deferred_results(
        self,
        history: History,
        results: DeferredResults,
        prompt: Prompt = "",
        *,
        deps: DepsT | None = None,
        run_id: str | None = None,
        conversation_id: str | None = None,
        on_event: EventHandler | None = None,
        trace_context: str = "",
    ) -> Result[OutputT]:
        """Resume a paused run from its history with a resolution for every pending call.

        Approved calls re-execute (with `call_approved()` true, the original
        arguments, `deps` and the configured timeout); denied calls get a denial
        message; external results are used verbatim. Resolutions join the history in
        the model's emission order, the optional prompt follows, and the run goes on
        through the ordinary loop — it may pause again. `trace_context` is the paused
        run's `Result.trace_context`: when tracing is on, the resumed run's span links to it.

        Raises:
            ResumeError: before anything runs, when the history has no pending calls,
                a call has no ID, a resolution names an unknown call, a call is resolved
                twice or not at all, or an approved call's tool is not registered.
            RunError: an approved re-run failed (stage `tool`), raised `Canceled`
                (stage `canceled`), or the resumed run failed later.
        """
        async with self._toolsets_entered() as tools:
            if has_agent_tools(tools):
                supplied = _as_history(history)
                if paused_records(supplied):
                    return await self._resume_nested(
                        tools, supplied, results, prompt, deps, run_id, conversation_id, on_event
                    )
            return await self._resume(
                tools,
                history,
                results,
                prompt,
                deps,
                run_id,
                conversation_id,
                on_event,
                trace_context,
            )

    async def _resume_nested(
        self,
        tools: Mapping[str, Tool],
        history: list[Message],
        results: DeferredResults,
        prompt: Prompt,
        deps: Any,
        run_id: str | None,
        conversation_id: str | None,
        on_event: EventHandler | None,
    ) -> Result[OutputT]:
        async def resume_parent(merged: list[Message], own: DeferredResults) -> Result[OutputT]:
            return await self._resume(
                tools, merged, own, prompt, deps, run_id, conversation_id, on_event, ""
            )

        async def continue_parent(merged: list[Message]) -> Result[OutputT]:
            return await self.run(
                prompt,
                deps=deps,
                history=merged,
                run_id=run_id,
                conversation_id=conversation_id,
                on_event=on_event,
            )

        return await resume_nested(
            self,
            history,
            results,
            tools,
            deps=deps,
            resume_parent=resume_parent,
            continue_parent=continue_parent,
        )

    async def _resume(
        self,
        tools: Mapping[str, Tool],
        history: History,
        results: DeferredResults,
        prompt: Prompt,
        deps: Any,
        run_id: str | None,
        conversation_id: str | None,
        on_event: EventHandler | None,
        trace_context: str,
    ) -> Result[OutputT]:
        supplied = _as_history(history)
        validate_history(supplied)
        user = _prompt_message(prompt)
        pending = deferred.pending_calls(supplied)
        deferred.check_results(pending, results, tools)
        state = RunState(
            messages=[],
            deps=deps,
            run_id=run_id or new_id(),
            conversation_id=conversation_id or _conversation_of(supplied) or new_id(),
            observers=self._observers(on_event),
        )
        return await self._run_traced(
            state,
            trace_context=trace_context,
            before=lambda: self._resolve(state, tools, pending, results, supplied, user),
        )

    async def _resolve(
        self,
        state: RunState,
        tools: Mapping[str, Tool],
        pending: list[ToolCall],
        results: DeferredResults,
        supplied: list[Message],
        user: Message | None,
    ) -> None:
        deps = state.deps
        resolutions: dict[str, Message] = {}
        for call in pending:
            approval = results.approvals.get(call.id)
            if approval is None:
                resolutions[call.id] = state.tool_message(call, results.external[call.id])
            elif not approval.approved:
                resolutions[call.id] = state.tool_message(
                    call, deferred.denial_text(approval.reason)
                )
            else:
                tool = tools[call.name]
                ctx = RunContext(deps, state.run_id, state.conversation_id, call.id, call.name)
                timeout = tool.timeout if tool.timeout is not None else self.tool_timeout
                state.tool_calls += 1
                if state.tracer is None:
                    done = await deferred.rerun_approved(tool, call, ctx, timeout)
                else:
                    with state.tracer.rerun_scope(call):
                        done = await deferred.rerun_approved(tool, call, ctx, timeout)
                resolutions[call.id] = state.tool_message(call, done.text, parts=done.parts)
        merged = deferred.merge(supplied, resolutions)
        await self._open(state, [m for m in merged if m.role != "system"])
        if user is not None and (user.content or user.parts):
            state.messages.append(_stamp(user, state))

    def run_with_deferred_results_sync(
        self,
        history: History,
        results: DeferredResults,
        prompt: Prompt = "",
        *,
        deps: DepsT | None = None,
        run_id: str | None = None,
        conversation_id: str | None = None,
        on_event: EventHandler | None = None,
        trace_context: str = "",
    ) -> Result[OutputT]:
        """`run_with_deferred_results` for synchronous code."""
        return _sync(
            self.model,
            self.run_with_deferred_results(
                history,
                results,
                prompt,
                deps=deps,
                run_id=run_id,
                conversation_id=conversation_id,
                on_event=on_event,
                trace_context=trace_context,
            ),
        )


class RunStream(Generic[OutputT]):
    """A streamed run: iterate it for `Delta`s and `RunEvent`s, then read `result`."""

    _DONE = object()

    def __init__(
        self, start: Callable[[Callable[[Delta | RunEvent], None]], Awaitable[Result[OutputT]]]
    ) -> None:
        self._start = start
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._task: asyncio.Task[Result[OutputT]] | None = None
        self._result: Result[OutputT] | None = None

    async def __aenter__(self) -> RunStream[OutputT]:
        self._task = asyncio.create_task(self._drive())
        return self

    async def _drive(self) -> Result[OutputT]:
        try:
            return await self._start(self._queue.put_nowait)
        finally:
            self._queue.put_nowait(self._DONE)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        task = self._task
        if task is None:
            return
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise asyncio.CancelledError
            return
        if task.cancelled():
            return
        error = task.exception()
        if error is not None and exc_type is None and self._result is None:
            raise error

    def __aiter__(self) -> AsyncIterator[Delta | RunEvent]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Delta | RunEvent]:
        if self._task is None:
            raise RuntimeError(
                "iterate a RunStream inside `async with agent.run_stream(...) as stream`"
            )
        while True:
            item = await self._queue.get()
            if item is self._DONE:
                break
            yield item
        self._result = await self._task

    @property
    def result(self) -> Result[OutputT]:
        """The run's `Result`, once iteration has finished."""
        if self._result is None:
            if self._task is not None and self._task.done() and not self._task.cancelled():
                self._result = self._task.result()
            else:
                raise RuntimeError("the stream's result is available after iterating it to the end")
        return self._result


def _sync(model: object, coro: Coroutine[Any, Any, T]) -> T:
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


def _as_history(hist: History | None) -> list[Message]:
    if hist is None:
        return []
    if isinstance(hist, str):
        return loads_history(hist)
    return list(hist)


def _conversation_of(messages: Sequence[Message]) -> str:
    for m in reversed(messages):
        if m.conversation_id:
            return m.conversation_id
    return ""


def _prompt_message(prompt: Prompt) -> Message | None:
    if isinstance(prompt, str):
        return Message(role="user", content=prompt)
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
    return Message(role="user", content="\n".join(texts), parts=parts)


def _stamp(m: Message, state: RunState) -> Message:
    return Message(
        role=m.role,
        content=m.content,
        parts=m.parts,
        run_id=state.run_id,
        conversation_id=state.conversation_id,
    )


def _unfence(text: str) -> str:
    """The JSON inside a Markdown code fence (```json ... ```), or the text unchanged."""
    stripped = text.strip()
    if stripped.startswith("```") and stripped.endswith("```") and "\n" in stripped:
        return stripped[stripped.index("\n") + 1 : -3]
    return text


def _describe_output_error(exc: pydantic.ValidationError) -> str:
    problems = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(x) for x in err["loc"]) or "output"
        problems.append(f"{loc}: {err['msg']}")
    return "invalid output: " + "; ".join(problems)
