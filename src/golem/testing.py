"""Models for testing agents offline: a scripted queue of answers, or a function."""

from __future__ import annotations

import inspect
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Union

from golem.messages import Message, ThinkingBlock, ToolCall
from golem.model import Delta, ModelRequest, ModelResponse, ThinkingDelta, ToolCallDelta
from golem.usage import Usage

__all__ = ["KEEP_REQUESTS", "FunctionModel", "ScriptExhausted", "ScriptedModel", "replay_as_deltas"]

Outcome = Union[ModelResponse, Message, str, BaseException]  # noqa: UP007 - runtime alias


class ScriptExhausted(RuntimeError):
    """A `ScriptedModel` was called with no queued outcome left."""


def _as_response(value: ModelResponse | Message | str) -> ModelResponse:
    if isinstance(value, ModelResponse):
        return value
    if isinstance(value, Message):
        return ModelResponse(
            message=value, finish_reason="tool_call" if value.tool_calls else "stop"
        )
    if isinstance(value, str):
        return ModelResponse(message=Message(role="assistant", content=value), finish_reason="stop")
    raise TypeError(
        f"a model outcome must be a ModelResponse, Message, str or exception, got {type(value).__name__}"
    )


KEEP_REQUESTS = 100
"""How many recent requests `ScriptedModel` and `FunctionModel` keep by default."""


class _Recorder:
    """Keeps the most recent requests a test model received (see `KEEP_REQUESTS`)."""

    def __init__(self, keep_requests: int | None) -> None:
        if keep_requests is not None and keep_requests < 0:
            raise ValueError(
                f"keep_requests must be a count of requests (0 keeps none) or None (keep all), "
                f"got {keep_requests}"
            )
        self.keep_requests = keep_requests
        self.requests: list[ModelRequest] = []
        """The most recent requests received (at most `keep_requests`), oldest first."""
        self.request_count = 0
        """How many requests the model received in all, including those no longer kept."""

    def _record(self, request: ModelRequest) -> None:
        self.request_count += 1
        keep = self.keep_requests
        if keep == 0:
            return
        # A snapshot of the lists the run goes on appending to. Messages are immutable and
        # golem never mutates their lists or the schemas, so they are shared, not copied.
        self.requests.append(
            ModelRequest(
                list(request.messages),
                list(request.tools),
                request.output_schema,
                tool_choice=request.tool_choice,
            )
        )
        if keep is not None and len(self.requests) > keep:
            del self.requests[: len(self.requests) - keep]


def replay_as_deltas(response: ModelResponse) -> list[Delta]:
    """The deltas a stream of `response` consists of: one per thinking block, one for the
    text, one per tool call (ID, name, full arguments)."""
    deltas: list[Delta] = []
    msg = response.message
    for i, block in enumerate(msg.thinking):
        if block.text:
            deltas.append(Delta(thinking=[ThinkingDelta(i, block.text, block.signature)]))
    if msg.content:
        deltas.append(Delta(content=msg.content))
    for i, call in enumerate(msg.tool_calls):
        deltas.append(
            Delta(tool_calls=[ToolCallDelta(i, call.id, call.name, call.args, call.signature)])
        )
    return deltas


class ScriptedModel(_Recorder):
    """A model answering from a queue (`ModelResponse`, assistant `Message`, final `str` or
    an exception to raise); records `requests` (last `keep_requests`) and `request_count`;
    streams each response as deltas; an exhausted queue raises `ScriptExhausted`."""

    def __init__(self, *outcomes: Outcome, keep_requests: int | None = KEEP_REQUESTS) -> None:
        super().__init__(keep_requests)
        self._queue: deque[Outcome] = deque(outcomes)

    def respond(self, *responses: ModelResponse | Message | str) -> ScriptedModel:
        """Queue responses; returns the model for chaining."""
        self._queue.extend(responses)
        return self

    def fail(self, *errors: BaseException) -> ScriptedModel:
        """Queue errors to raise; returns the model for chaining."""
        self._queue.extend(errors)
        return self

    @property
    def remaining(self) -> int:
        """How many outcomes are still queued."""
        return len(self._queue)

    def _next(self, request: ModelRequest) -> ModelResponse:
        self._record(request)
        if not self._queue:
            raise ScriptExhausted(
                f"ScriptedModel: no queued outcome for request {self.request_count}; "
                "queue one with respond(...) or fail(...)"
            )
        outcome = self._queue.popleft()
        if isinstance(outcome, BaseException):
            raise outcome
        return _as_response(outcome)

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """Answer with the next queued outcome."""
        return self._next(request)

    async def generate_stream(self, request: ModelRequest) -> AsyncIterator[Delta | ModelResponse]:
        """Replay the next queued response as deltas, then yield it."""
        response = self._next(request)
        for delta in replay_as_deltas(response):
            yield delta
        yield response


ModelFn = Callable[
    [ModelRequest], "ModelResponse | Message | str | Awaitable[ModelResponse | Message | str]"
]
StreamFn = Callable[[ModelRequest], AsyncIterator[Any]]


class FunctionModel(_Recorder):
    """A model built from `fn(request)` (sync or async, returning a `ModelResponse`,
    `Message` or `str`); with `stream=`, an async generator of `str`, `Delta`s and an optional
    final `ModelResponse`, it streams too."""

    def __new__(
        cls,
        fn: ModelFn,
        *,
        stream: StreamFn | None = None,
        keep_requests: int | None = KEEP_REQUESTS,
    ) -> FunctionModel:
        if stream is not None and cls is FunctionModel:
            return super().__new__(_StreamingFunctionModel)
        return super().__new__(cls)

    def __init__(
        self,
        fn: ModelFn,
        *,
        stream: StreamFn | None = None,
        keep_requests: int | None = KEEP_REQUESTS,
    ) -> None:
        super().__init__(keep_requests)
        self.fn = fn
        self.stream_fn = stream

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """Call the function and normalize its answer."""
        self._record(request)
        value: Any = self.fn(request)
        if inspect.isawaitable(value):
            value = await value
        return _as_response(value)


class _StreamingFunctionModel(FunctionModel):
    async def generate_stream(self, request: ModelRequest) -> AsyncIterator[Delta | ModelResponse]:
        """Forward the stream function's deltas; assemble the final response from them
        (text, tool calls, thinking) when the function yields none."""
        assert self.stream_fn is not None
        self._record(request)
        text: list[str] = []
        calls: dict[int, list[str]] = {}  # index -> [id, name, args, signature]
        thinking: dict[int, list[str]] = {}  # index -> [text, signature]
        final: ModelResponse | None = None
        async for item in self.stream_fn(request):
            if isinstance(item, ModelResponse):
                final = item
                continue
            delta = Delta(content=item) if isinstance(item, str) else item
            if not isinstance(delta, Delta):
                raise TypeError(
                    f"a stream function yields str, Delta or ModelResponse, got {type(item).__name__}"
                )
            text.append(delta.content)
            for c in delta.tool_calls:
                acc = calls.setdefault(c.index, ["", "", "", ""])
                acc[0] = acc[0] or c.id
                acc[1] = acc[1] or c.name
                acc[2] += c.args_fragment
                acc[3] = acc[3] or c.signature
            for t in delta.thinking:
                block = thinking.setdefault(t.index, ["", ""])
                block[0] += t.text
                block[1] = block[1] or t.signature
            yield delta
        if final is None:
            message = Message(
                role="assistant",
                content="".join(text),
                tool_calls=[ToolCall(*calls[i]) for i in sorted(calls)],
                thinking=[ThinkingBlock(*thinking[i]) for i in sorted(thinking)],
            )
            final = ModelResponse(message, Usage(), "tool_call" if calls else "stop")
        yield final
