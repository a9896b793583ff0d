"""The Agent: a model, tools and policy, and the ways to run them."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from types import TracebackType
from typing import Any, Concatenate, Generic, ParamSpec, Protocol, TypedDict, Unpack, overload

import pydantic
from typing_extensions import TypeVar

from golem._loop import Policy, run_loop
from golem._run import (
    History,
    Prompt,
    decode_output,
    plain,
    prepare,
    run_blocking,
    run_traced,
    toolsets_entered,
)
from golem.agent_tool import AgentTool, agent_tool, has_agent_tools
from golem.deferred import PausedRun
from golem.errors import Overloaded, RateLimited
from golem.events import EventHandler, RunEvent
from golem.limits import UsageLimits
from golem.model import Delta, Model, ToolChoice, ToolSpec, check_tool_choice
from golem.result import Result
from golem.resume import Resolutions, ResumeProgress, ResumeRequest, precheck, resume_agent
from golem.seal import SealKey, SealKeys, as_seal_keys
from golem.tool import ClearedApproval, RunContext, Tool
from golem.toolset import Toolset
from golem.usage import Price, Usage

__all__ = ["Agent", "RunStream", "default_backoff"]

DepsT = TypeVar("DepsT", default=None)
OutputT = TypeVar("OutputT", default=str)
F = TypeVar("F", bound=Callable[..., Any])
P = ParamSpec("P")
R = TypeVar("R")

Instructions = str | Callable[[RunContext[Any]], str] | Callable[[RunContext[Any]], Awaitable[str]]
Paused = History | PausedRun  # what a resume starts from


class _ToolOptions(TypedDict, total=False):
    """The options of `Agent.tool` and `Agent.tool_plain` (those of `Tool`)."""

    name: str | None
    description: str | None
    max_retries: int | None
    timeout: float | None
    sequential: bool
    idempotent: bool
    run_in_thread: bool


class _ToolDecorator(Protocol[DepsT]):
    """What `@agent.tool(...)` returns: registers a function taking `RunContext[Deps]`."""

    def __call__(
        self, fn: Callable[Concatenate[RunContext[DepsT], P], R], /
    ) -> Callable[Concatenate[RunContext[DepsT], P], R]: ...


def default_backoff(attempt: int) -> float:
    """Seconds to wait after failed attempt `attempt` (1-based): 0.5 s doubling, capped at 30 s."""
    return float(min(30.0, 0.5 * 2 ** (attempt - 1)))


class Agent(Generic[DepsT, OutputT]):
    """An LLM agent: a model, the tools it may call, and the policy of its runs.

    `model` is a `Model` or a "provider:model" string; the options are listed in
    docs/guides/getting-started.md. Raises `TypeError` for another model, `ValueError` for
    duplicate tool names, out-of-range options or a cost limit without `price`."""

    def __init__(
        self,
        model: Model | str,
        *,
        output_type: type[OutputT] = str,  # type: ignore[assignment]
        deps_type: type[DepsT] | None = None,
        instructions: Instructions | None = None,
        tools: Iterable[Tool[DepsT] | Callable[..., Any]] = (),
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
        max_retry_wait: float | None = 600.0,
        name: str = "",
        tool_choice: ToolChoice = "auto",
        toolsets: Iterable[Toolset] = (),
        seal_key: SealKey | None = None,
        tracer_provider: Any = None,
    ) -> None:
        if isinstance(model, str):
            from golem.providers import infer_model

            model = infer_model(model)
        elif not callable(getattr(model, "generate", None)):
            raise TypeError(
                "Agent needs a model: a golem.model.Model (an object with "
                '`async generate(request)`) or a "provider:model" string such as '
                f'"openai:gpt-4.1"; got {type(model).__name__} (for tests: '
                "golem.testing.ScriptedModel)"
            )
        _check_options(tool_timeout, tool_retries, output_retries, max_iterations, max_attempts, max_retry_wait, usage_limits, price)  # fmt: skip
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
        self.max_retry_wait = max_retry_wait
        self.name = name
        self.seal_keys: SealKeys | None = None if seal_key is None else as_seal_keys(seal_key)
        """Seals pending calls when a run pauses; verifies them on resume (None: no seals)."""
        self.tool_choice = check_tool_choice(tool_choice)
        """Sent on every model request: "auto", "required", "none" or a tool name."""
        if tracer_provider is not None:
            import golem.integrations.otel  # noqa: F401 - fails now, with the install command, without the extra
        self.tracer_provider = tracer_provider
        self._run_policy: Policy | None = None
        self._policy_tools = 0
        self.tools: dict[str, Tool] = {}
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

    def __setattr__(self, name: str, value: Any) -> None:
        # assigning a public attribute drops the Policy built for its runs (`_policy`)
        object.__setattr__(self, name, value)
        if name[0] != "_":
            object.__setattr__(self, "_run_policy", None)

    # ----------------------------------------------------------------- tools

    def _register(self, tool: Tool) -> None:
        if tool.name in self.tools:
            raise ValueError(f'duplicate tool name "{tool.name}"')
        self.tools[tool.name] = tool
        self._specs = None
        self._run_policy = None

    @overload
    def tool(
        self, fn: Callable[Concatenate[RunContext[DepsT], P], R], /
    ) -> Callable[Concatenate[RunContext[DepsT], P], R]: ...

    @overload
    def tool(self, **options: Unpack[_ToolOptions]) -> _ToolDecorator[DepsT]: ...

    def tool(self, fn: Callable[..., Any] | None = None, **options: Unpack[_ToolOptions]) -> Any:
        """Register a function taking `ctx: RunContext[Deps]` first as a tool (bare,
        `@agent.tool`, or with the options of `Tool`); returns the function unchanged."""
        return self._decorate(fn, False, options)

    @overload
    def tool_plain(self, fn: F, /) -> F: ...

    @overload
    def tool_plain(self, **options: Unpack[_ToolOptions]) -> Callable[[F], F]: ...

    def tool_plain(
        self, fn: F | None = None, **options: Unpack[_ToolOptions]
    ) -> F | Callable[[F], F]:
        """Register a function without `RunContext` as a tool (bare or with options); returns
        it unchanged. `TypeError` when its first parameter is a `RunContext`."""
        return self._decorate(fn, True, options)  # type: ignore[no-any-return]

    def _decorate(self, fn: Callable[..., Any] | None, plain: bool, options: _ToolOptions) -> Any:
        def register(f: Callable[..., Any]) -> Callable[..., Any]:
            tool = Tool.from_function(f, **options)
            if plain and tool._wants_ctx:
                raise TypeError(
                    f'tool "{tool.name}" takes a RunContext: register it with @agent.tool, '
                    "not @agent.tool_plain"
                )
            self._register(tool)
            return f

        return register(fn) if fn is not None else register

    def add_toolset(self, toolset: Toolset) -> None:
        """Add a source of tools (an MCP server...) to every later run (`TypeError` if not
        a `golem.toolset.Toolset`)."""
        if not isinstance(toolset, Toolset):
            raise TypeError(
                f"a toolset needs list_tools() and async with, got {type(toolset).__name__}"
            )
        self.toolsets.append(toolset)

    def _toolsets_entered(self) -> contextlib.AbstractAsyncContextManager[Mapping[str, Tool]]:
        return toolsets_entered(self.tools, self.toolsets)

    def as_tool(
        self,
        name: str | None = None,
        description: str | None = None,
        *,
        deps: Callable[[Any], Any] | None = None,
        timeout: float | None = None,
    ) -> AgentTool:
        """This agent as a tool of another (`golem.agent_tool`): its pauses surface namespaced
        `<call id>/<sub call id>`; `ValueError` without a name or with "/" in it."""
        return agent_tool(self, name, description, deps=deps, timeout=timeout)

    def _policy(self, tools: Mapping[str, Tool]) -> Policy:
        """What one run follows with `tools`; without toolsets one `Policy` serves every run
        until the configuration changes (`__setattr__`, `_register` drop it)."""
        own = tools is self.tools and not self.toolsets
        cached = self._run_policy
        if own and cached is not None and self._policy_tools == len(tools):
            return cached
        policy = self._build_policy(tools)
        if own:
            self._run_policy, self._policy_tools = policy, len(tools)
        return policy

    def _build_policy(self, tools: Mapping[str, Tool]) -> Policy:
        specs = self._specs
        if specs is None:
            specs = self._specs = [
                ToolSpec(t.name, t.description, t.schema) for t in self.tools.values()
            ]
        return Policy(
            model=self.model,
            tools=tools,
            specs=specs,
            output_schema=self._output_schema,
            decode=self._decode,
            cost=self._cost,
            backoff=self._backoff,
            max_iterations=self.max_iterations,
            max_attempts=self.max_attempts,
            output_retries=self.output_retries,
            tool_retries=self.tool_retries,
            tool_timeout=self.tool_timeout,
            parallel_tool_calls=self.parallel_tool_calls,
            usage_limits=self.usage_limits,
            seal_keys=self.seal_keys,
            tool_choice=self.tool_choice,
            own_tools=self.tools if self.toolsets else None,
            toolsets=tuple(self.toolsets),
            instructions=self.instructions,
            observers=() if self.event_handler is None else (self.event_handler,),
            nested=has_agent_tools(tools),
            tracer_provider=self.tracer_provider,
            agent=self,
        )

    # ----------------------------------------------------------------- policy helpers

    def _decode(self, text: str) -> Any:
        return text if self._adapter is None else decode_output(self._adapter, text)

    def _cost(self, usage: Usage) -> float:
        return float(self.price(usage)) if self.price is not None else 0.0

    def _backoff(self, attempt: int, exc: BaseException) -> float | None:
        wait = self.retry_backoff(attempt)
        if isinstance(exc, RateLimited | Overloaded) and exc.retry_after is not None:
            limit = self.max_retry_wait
            if limit is not None and exc.retry_after > limit:
                return None  # the provider asks for longer than the agent waits
            wait = max(wait, exc.retry_after)
        return wait

    @overload
    async def run(
        self: Agent[None, OutputT],
        prompt: Prompt = "",
        *,
        deps: None = None,
        history: History | None = None,
        run_id: str | None = None,
        conversation_id: str | None = None,
        on_event: EventHandler | None = None,
    ) -> Result[OutputT]: ...

    @overload
    async def run(
        self,
        prompt: Prompt = "",
        *,
        deps: DepsT,
        history: History | None = None,
        run_id: str | None = None,
        conversation_id: str | None = None,
        on_event: EventHandler | None = None,
    ) -> Result[OutputT]: ...

    async def run(
        self,
        prompt: Prompt = "",
        *,
        deps: Any = None,
        history: History | None = None,
        run_id: str | None = None,
        conversation_id: str | None = None,
        on_event: EventHandler | None = None,
    ) -> Result[OutputT]:
        """Run the agent on `prompt`, optionally continuing `history`; a deferred call pauses
        the run (`result.pending`). Raises `RunError`, or `ValueError` for a malformed history."""
        with ClearedApproval():
            async with self._toolsets_entered() as tools:
                policy = self._policy(tools)
                state = await prepare(
                    policy, prompt, deps, history, run_id, conversation_id, on_event
                )
                if plain(policy):
                    return await run_loop(policy, state)
                return await run_traced(policy, state)

    @overload
    def run_sync(
        self: Agent[None, OutputT],
        prompt: Prompt = "",
        *,
        deps: None = None,
        history: History | None = None,
        run_id: str | None = None,
        conversation_id: str | None = None,
        on_event: EventHandler | None = None,
    ) -> Result[OutputT]: ...

    @overload
    def run_sync(
        self,
        prompt: Prompt = "",
        *,
        deps: DepsT,
        history: History | None = None,
        run_id: str | None = None,
        conversation_id: str | None = None,
        on_event: EventHandler | None = None,
    ) -> Result[OutputT]: ...

    def run_sync(
        self,
        prompt: Prompt = "",
        *,
        deps: Any = None,
        history: History | None = None,
        run_id: str | None = None,
        conversation_id: str | None = None,
        on_event: EventHandler | None = None,
    ) -> Result[OutputT]:
        """`run` for synchronous code (starts an event loop; not callable from one)."""
        return run_blocking(
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

    @overload
    def run_stream(
        self: Agent[None, OutputT],
        prompt: Prompt = "",
        *,
        deps: None = None,
        history: History | None = None,
        run_id: str | None = None,
        conversation_id: str | None = None,
        on_event: EventHandler | None = None,
    ) -> RunStream[OutputT]: ...

    @overload
    def run_stream(
        self,
        prompt: Prompt = "",
        *,
        deps: DepsT,
        history: History | None = None,
        run_id: str | None = None,
        conversation_id: str | None = None,
        on_event: EventHandler | None = None,
    ) -> RunStream[OutputT]: ...

    def run_stream(
        self,
        prompt: Prompt = "",
        *,
        deps: Any = None,
        history: History | None = None,
        run_id: str | None = None,
        conversation_id: str | None = None,
        on_event: EventHandler | None = None,
    ) -> RunStream[OutputT]:
        """Stream a run: `async with agent.run_stream(p) as stream: async for item in stream`
        yields `Delta`s and `RunEvent`s; then `stream.result` is what `run` returns.
        `TypeError` up front when the model cannot stream."""
        self._check_streaming()

        async def start(sink: Callable[[Delta | RunEvent], None]) -> Result[OutputT]:
            with ClearedApproval():
                async with self._toolsets_entered() as tools:
                    policy = self._policy(tools)
                    state = await prepare(
                        policy, prompt, deps, history, run_id, conversation_id, on_event
                    )
                    state.sink = sink
                    if plain(policy):
                        return await run_loop(policy, state, stream=True)
                    return await run_traced(policy, state)

        return RunStream(start)

    def _check_streaming(self) -> None:
        if not callable(getattr(self.model, "generate_stream", None)):
            raise TypeError(f"golem: model {type(self.model).__name__} does not support streaming")

    @overload
    async def run_with_deferred_results(
        self: Agent[None, OutputT],
        history: Paused,
        results: Resolutions,
        prompt: Prompt = "",
        *,
        deps: None = None,
        run_id: str | None = None,
        on_event: EventHandler | None = None,
        progress: ResumeProgress | None = None,
    ) -> Result[OutputT]: ...

    @overload
    async def run_with_deferred_results(
        self,
        history: Paused,
        results: Resolutions,
        prompt: Prompt = "",
        *,
        deps: DepsT,
        run_id: str | None = None,
        on_event: EventHandler | None = None,
        progress: ResumeProgress | None = None,
    ) -> Result[OutputT]: ...

    async def run_with_deferred_results(
        self,
        history: Paused,
        results: Resolutions,
        prompt: Prompt = "",
        *,
        deps: Any = None,
        run_id: str | None = None,
        on_event: EventHandler | None = None,
        progress: ResumeProgress | None = None,
    ) -> Result[OutputT]:
        """Resume a paused run (a `PausedRun` or a plain history) with a resolution for every
        pending call, then `prompt`, and go on (docs/guides/deferred-tools.md). Raises
        `ResumeError` before anything runs, `TypeError` for `results`, `RunError` after."""
        request = ResumeRequest.of(
            history, results, prompt, deps=deps, run_id=run_id, on_event=on_event, progress=progress
        )
        return await resume_agent(self, request)

    @overload
    def run_with_deferred_results_sync(
        self: Agent[None, OutputT],
        history: Paused,
        results: Resolutions,
        prompt: Prompt = "",
        *,
        deps: None = None,
        run_id: str | None = None,
        on_event: EventHandler | None = None,
        progress: ResumeProgress | None = None,
    ) -> Result[OutputT]: ...

    @overload
    def run_with_deferred_results_sync(
        self,
        history: Paused,
        results: Resolutions,
        prompt: Prompt = "",
        *,
        deps: DepsT,
        run_id: str | None = None,
        on_event: EventHandler | None = None,
        progress: ResumeProgress | None = None,
    ) -> Result[OutputT]: ...

    def run_with_deferred_results_sync(
        self,
        history: Paused,
        results: Resolutions,
        prompt: Prompt = "",
        *,
        deps: Any = None,
        run_id: str | None = None,
        on_event: EventHandler | None = None,
        progress: ResumeProgress | None = None,
    ) -> Result[OutputT]:
        """`run_with_deferred_results` for synchronous code."""
        return run_blocking(
            self.model,
            self.run_with_deferred_results(
                history,
                results,
                prompt,
                deps=deps,
                run_id=run_id,
                on_event=on_event,
                progress=progress,
            ),
        )

    @overload
    def run_stream_with_deferred_results(
        self: Agent[None, OutputT],
        history: Paused,
        results: Resolutions,
        prompt: Prompt = "",
        *,
        deps: None = None,
        run_id: str | None = None,
        on_event: EventHandler | None = None,
        progress: ResumeProgress | None = None,
    ) -> RunStream[OutputT]: ...

    @overload
    def run_stream_with_deferred_results(
        self,
        history: Paused,
        results: Resolutions,
        prompt: Prompt = "",
        *,
        deps: DepsT,
        run_id: str | None = None,
        on_event: EventHandler | None = None,
        progress: ResumeProgress | None = None,
    ) -> RunStream[OutputT]: ...

    def run_stream_with_deferred_results(
        self,
        history: Paused,
        results: Resolutions,
        prompt: Prompt = "",
        *,
        deps: Any = None,
        run_id: str | None = None,
        on_event: EventHandler | None = None,
        progress: ResumeProgress | None = None,
    ) -> RunStream[OutputT]:
        """Stream a resume: the approved re-runs' events, then the resumed run's deltas and
        events; `stream.result` is what `run_with_deferred_results` returns. It is checked
        up front (`TypeError`, `ResumeError`), or at its start with toolsets or sub-agents."""
        self._check_streaming()
        request = ResumeRequest.of(
            history, results, prompt, deps=deps, run_id=run_id, on_event=on_event, progress=progress
        )
        plan = precheck(self, request)

        async def start(sink: Callable[[Delta | RunEvent], None]) -> Result[OutputT]:
            request.sink = sink
            return await resume_agent(self, request, plan)

        return RunStream(start)


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


def _check_options(
    tool_timeout: float | None,
    tool_retries: int,
    output_retries: int,
    max_iterations: int,
    max_attempts: int,
    max_retry_wait: float | None,
    usage_limits: UsageLimits | None,
    price: Price | None,
) -> None:
    """Refuse an agent's out-of-range options (`ValueError`, naming the option)."""
    if tool_timeout is not None and tool_timeout <= 0:
        raise ValueError(f"tool_timeout must be positive seconds, got {tool_timeout}")
    least = {"tool_retries": 0, "output_retries": 0, "max_iterations": 1, "max_attempts": 1}
    values = (tool_retries, output_retries, max_iterations, max_attempts)
    for (label, low), value in zip(least.items(), values, strict=True):
        if value < low:
            bound = "must not be negative" if low == 0 else "must be at least 1"
            raise ValueError(f"{label} {bound}, got {value}")
    if max_retry_wait is not None and not max_retry_wait >= 0:
        raise ValueError(f"max_retry_wait must be seconds >= 0 or None, got {max_retry_wait}")
    if usage_limits is not None and usage_limits.cost is not None and price is None:
        raise ValueError(
            "a cost limit needs a price: pass price=... (a function from Usage to money)"
        )
