"""Tools: what the model can call (`Tool`), and the signals a tool raises to steer the run
(`Deferred`, `Canceled`, `Failed`, `ModelRetry`); `call_approved()` inside an approved re-run."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import hashlib
import inspect
import json
import re
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any, Generic, cast, get_args, get_origin, get_type_hints

import pydantic
import pydantic_core
from pydantic.fields import FieldInfo
from typing_extensions import TypeVar

from golem.errors import ToolTimeout
from golem.messages import Part

__all__ = [
    "Canceled",
    "DeferKind",
    "Deferred",
    "Failed",
    "InvalidArguments",
    "ModelRetry",
    "RunContext",
    "Tool",
    "ToolResult",
    "approved_call",
    "call_approved",
    "idempotency_key",
]

DepsT = TypeVar("DepsT")


@dataclass(frozen=True, slots=True)
class RunContext(Generic[DepsT]):
    """What a tool (or dynamic instructions) knows about the run it serves."""

    deps: DepsT
    """The run's dependencies, passed unchanged to every tool of the run."""
    run_id: str = ""
    """ID of the current run."""
    conversation_id: str = ""
    """ID of the conversation."""
    call_id: str = ""
    """ID of the tool call being executed (empty outside a tool), as the model gave it; for an
    idempotency key use `idempotency_key`, which is also unique across conversations."""
    tool_name: str = ""
    """Name of the tool being executed (empty outside a tool)."""

    @property
    def idempotency_key(self) -> str:
        """A key for the call being executed, the same on every attempt at it (deferring pass,
        approved re-run, retried re-run); empty outside a tool."""
        return idempotency_key(self.conversation_id, self.call_id) if self.call_id else ""


def idempotency_key(conversation_id: str, call_id: str) -> str:
    """The idempotency key of call `call_id` in `conversation_id`: a SHA-256 hex digest of
    the two IDs (length-prefixed), stable across processes and versions."""
    h = hashlib.sha256(b"golem-idempotency-v1")
    for text in (conversation_id, call_id):
        data = text.encode("utf-8", "surrogatepass")
        h.update(len(data).to_bytes(8, "big"))
        h.update(data)
    return h.hexdigest()


@dataclass(frozen=True, slots=True)
class ToolResult:
    """A tool's result: text for the model, plus optional parts (images, documents...)."""

    text: str
    parts: Sequence[Part] = ()


# --------------------------------------------------------------------------- signals


class DeferKind(StrEnum):
    """How a deferred call will be resolved."""

    APPROVAL = "approval"
    """A human approves (the tool then re-runs with `call_approved()` true) or denies."""
    EXTERNAL = "external"
    """The application supplies the call's result text later."""


_DEFER_KINDS = {k.value: k for k in DeferKind}


class Deferred(Exception):
    """Raised by a tool to pause the run: `kind` "approval" or "external", `reason` shown to
    whoever resolves it; `ValueError` for another kind."""

    def __init__(self, kind: DeferKind | str, reason: str = "") -> None:
        found = _DEFER_KINDS.get(kind) if isinstance(kind, str) else None
        if found is None:
            raise ValueError(
                f'Deferred kind must be DeferKind.APPROVAL ("approval") or '
                f'DeferKind.EXTERNAL ("external"), got {kind!r}'
            )
        super().__init__(f"tool deferred ({found.value}): {reason}")
        self.kind: DeferKind = found
        self.reason = reason


class Canceled(Exception):
    """Raised by a tool to stop the whole run deliberately (stage `canceled`)."""

    def __init__(self, reason: str = "") -> None:
        super().__init__(f"tool canceled the run: {reason}")
        self.reason = reason


class Failed(Exception):
    """Raised by a tool to record a definitive failure as its result; the run continues."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"tool failed: {reason}")
        self.reason = reason


class ModelRetry(Exception):
    """Raised to ask the model to correct itself (a tool call, or the final output)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidArguments(ModelRetry):
    """The model's arguments failed validation; the tool did not run. The loop sends it back
    to the model (not spending the retry budget); on an approved re-run it fails the resume."""


_SignalT = TypeVar("_SignalT", bound=BaseException)


def find_signal(exc: BaseException, kind: type[_SignalT]) -> _SignalT | None:
    """The first exception of type `kind` in `exc`'s chain (`__cause__`, else an unsuppressed
    `__context__`) and groups (member by member, depth first), or None."""
    seen: set[int] = set()
    stack: list[BaseException] = [exc]
    while stack:
        cur = stack.pop()
        if id(cur) in seen:
            continue
        if isinstance(cur, kind):
            return cur
        seen.add(id(cur))
        nxt = cur.__cause__
        if nxt is None and not cur.__suppress_context__:
            nxt = cur.__context__
        if nxt is not None:
            stack.append(nxt)
        if isinstance(cur, BaseExceptionGroup):
            stack.extend(reversed(cur.exceptions))
    return None


# --------------------------------------------------------------------------- approved marker

_APPROVED: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "golem_call_approved", default=False
)


def call_approved() -> bool:
    """True only inside the approved re-run of a deferred call (a contextvar)."""
    return _APPROVED.get()


@contextmanager
def approved_call() -> Iterator[None]:
    """Mark the enclosed code as the approved re-run of a deferred call."""
    token = _APPROVED.set(True)
    try:
        yield
    finally:
        _APPROVED.reset(token)


class ApprovedScope:
    """`approved_call()` as a class (cheaper) for the approved re-runs of a resume."""

    __slots__ = ("_token",)

    def __enter__(self) -> None:
        self._token = _APPROVED.set(True)

    def __exit__(self, *exc: object) -> None:
        _APPROVED.reset(self._token)


class ClearedApproval:
    """An agent run starts outside any approval (the marker does not leak in)."""

    __slots__ = ("_token",)

    def __enter__(self) -> None:
        self._token = _APPROVED.set(False) if _APPROVED.get() else None

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _APPROVED.reset(self._token)


# --------------------------------------------------------------------------- Tool

Exec = Callable[[RunContext[Any], dict[str, Any]], Any]

ToolDepsT = TypeVar("ToolDepsT", default=Any)


class Tool(Generic[ToolDepsT]):
    """A tool the model can call: `name`, `description`, JSON `schema`, `exec(ctx, args)`
    (sync or async) and options (docs/guides/tools-and-dependencies.md). `ValueError` for an
    empty name, a non-dict schema, negative `max_retries` or a non-positive `timeout`."""

    __slots__ = (
        "_validator",
        "_wants_ctx",
        "description",
        "exec",
        "idempotent",
        "is_async",
        "max_retries",
        "name",
        "run_in_thread",
        "schema",
        "sequential",
        "timeout",
    )

    def __init__(
        self,
        name: str,
        description: str,
        schema: dict[str, Any],
        exec: Callable[[RunContext[ToolDepsT], dict[str, Any]], Any],
        *,
        max_retries: int | None = None,
        timeout: float | None = None,
        sequential: bool = False,
        idempotent: bool = False,
        run_in_thread: bool = True,
    ) -> None:
        if not name:
            raise ValueError("tool name must not be empty")
        if not isinstance(schema, dict):
            raise ValueError(
                f'tool "{name}": schema must be a JSON-schema dict, got {type(schema).__name__}'
            )
        if not callable(exec):
            raise ValueError(f'tool "{name}": exec must be callable')
        if max_retries is not None and max_retries < 0:
            raise ValueError(f'tool "{name}": max_retries must not be negative, got {max_retries}')
        if timeout is not None and timeout <= 0:
            raise ValueError(f'tool "{name}": timeout must be positive seconds, got {timeout}')
        self.name = name
        self.description = description
        self.schema = schema
        self.exec = exec
        self.max_retries = max_retries
        self.timeout = timeout
        self.sequential = sequential
        self.idempotent = idempotent
        self.run_in_thread = run_in_thread
        self.is_async = _is_async_callable(exec)
        self._validator: type[pydantic.BaseModel] | None = None
        self._wants_ctx = True

    def __repr__(self) -> str:
        return f"Tool(name={self.name!r})"

    @classmethod
    def from_function(
        cls,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        max_retries: int | None = None,
        timeout: float | None = None,
        sequential: bool = False,
        idempotent: bool = False,
        run_in_thread: bool = True,
    ) -> Tool[Any]:
        """Build a tool from a function's signature, hints and docstring; a first
        `ctx: RunContext` parameter is passed the context, the rest the model supplies."""
        tool_name = name or fn.__name__
        doc_summary, param_docs = _parse_docstring(inspect.getdoc(fn) or "")
        sig = inspect.signature(fn)
        try:
            hints = get_type_hints(fn, include_extras=True)
        except Exception:  # unresolvable forward references: fall back to raw annotations
            hints = {}
        params = list(sig.parameters.values())
        wants_ctx = bool(params) and _is_ctx_param(params[0], hints)
        if wants_ctx:
            params = params[1:]
        fields = _arg_fields(tool_name, params, hints, param_docs)
        model = pydantic.create_model(
            f"{tool_name}_args", __config__=pydantic.ConfigDict(extra="forbid"), **fields
        )
        schema = model.model_json_schema()
        _strip_titles(schema)
        target = fn

        if _is_async_callable(fn):

            async def exec_async(ctx: RunContext[Any], args: dict[str, Any]) -> Any:
                return await target(ctx, **args) if wants_ctx else await target(**args)

            exec_fn: Exec = exec_async
        else:

            def exec_sync(ctx: RunContext[Any], args: dict[str, Any]) -> Any:
                return target(ctx, **args) if wants_ctx else target(**args)

            exec_fn = exec_sync
        tool = cls(
            tool_name,
            description if description is not None else doc_summary,
            schema,
            exec_fn,
            max_retries=max_retries,
            timeout=timeout,
            sequential=sequential,
            idempotent=idempotent,
            run_in_thread=run_in_thread,
        )
        tool._validator = cast("type[pydantic.BaseModel]", model)
        tool._wants_ctx = wants_ctx
        return tool

    def decode_args(self, args: str) -> dict[str, Any]:
        """Decode and validate the model's raw argument text (`InvalidArguments`)."""
        text = args.strip() or "{}"
        if self._validator is not None:
            try:
                obj = self._validator.model_validate_json(text)
            except pydantic.ValidationError as exc:
                raise InvalidArguments(describe_validation(exc)) from exc
            return dict(obj.__dict__)
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise InvalidArguments(f"the arguments are not valid JSON: {exc}") from exc
        except RecursionError:
            raise InvalidArguments("the arguments are not valid JSON: nested too deeply") from None
        if not isinstance(value, dict):
            raise InvalidArguments(
                f"the arguments must be a JSON object, got {type(value).__name__}"
            )
        return value

    def validate_args(self, args: str) -> dict[str, Any]:
        """Decode `args` and check them against the tool's schema without running it (pydantic
        for function tools, the schema's top level for raw ones); `InvalidArguments` otherwise."""
        value = self.decode_args(args)
        if self._validator is None:
            problem = _schema_problem(self.schema, value)
            if problem:
                raise InvalidArguments(f"invalid arguments: {problem}")
        return value

    async def invoke(self, ctx: RunContext[Any], args: str) -> ToolResult:
        """Decode `args` and run the tool once (sync tools in a worker thread unless
        `run_in_thread=False`); signals propagate, an invalid result part raises `ValueError`."""
        decoded = self.decode_args(args)
        if self.is_async:
            value = await cast("Awaitable[Any]", self.exec(ctx, decoded))
        elif self.run_in_thread:
            value = await _in_thread(self.exec, ctx, decoded)
        else:  # a copy, as `to_thread` runs it in: what the tool sets stays with the call
            value = contextvars.copy_context().run(self.exec, ctx, decoded)
        result = _to_tool_result(value)
        for j, part in enumerate(result.parts):
            problem = part.problem()
            if problem:
                raise ValueError(f"tool produced an invalid part {j}: {problem}")
        return result

    async def run(self, ctx: RunContext[Any], args: str, timeout: float | None) -> ToolResult:
        """`invoke` under a timeout in seconds (None: none); a call ending past its deadline
        raises `ToolTimeout` (an async tool is cancelled, a sync one runs to completion)."""
        if timeout is None:
            return await self.invoke(ctx, args)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        scope: asyncio.Timeout | None = None
        try:
            if self.is_async:
                async with asyncio.timeout_at(deadline) as scope:
                    result = await self.invoke(ctx, args)
            else:
                result = await self.invoke(ctx, args)
        except Exception as exc:
            # the scope's own verdict first: a loop may fire a timer a little before its
            # clock reads the deadline (uvloop's clock counts whole milliseconds)
            if (scope is not None and scope.expired()) or loop.time() >= deadline:
                raise self._overran(ctx, timeout) from exc
            raise
        if loop.time() >= deadline:
            raise self._overran(ctx, timeout)
        return result

    def _overran(self, ctx: RunContext[Any], timeout: float) -> ToolTimeout:
        return ToolTimeout(self.name, ctx.call_id, f"tool overran its {timeout:g}s timeout")


def _arg_fields(
    tool_name: str,
    params: Sequence[inspect.Parameter],
    hints: dict[str, Any],
    param_docs: dict[str, str],
) -> dict[str, Any]:
    """The pydantic fields of a function tool's arguments (its docstring's descriptions)."""
    fields: dict[str, Any] = {}
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise ValueError(f'tool "{tool_name}": *args and **kwargs are not supported')
        if p.kind is p.POSITIONAL_ONLY:
            raise ValueError(f'tool "{tool_name}": positional-only parameters are not supported')
        annotation = hints.get(p.name, p.annotation)
        if annotation is inspect.Parameter.empty:
            annotation = Any
        default = ... if p.default is inspect.Parameter.empty else p.default
        doc = param_docs.get(p.name)
        if isinstance(default, FieldInfo):  # `x: int = Field(gt=0)`
            if doc is not None and default.description is None:
                default = FieldInfo.merge_field_infos(default, description=doc)
            fields[p.name] = (annotation, default)
        elif doc is not None:
            fields[p.name] = (annotation, pydantic.Field(default, description=doc))
        else:
            fields[p.name] = (annotation, pydantic.Field(default))
    return fields


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
    "null": (type(None),),
}


def _schema_problem(schema: dict[str, Any], value: dict[str, Any]) -> str | None:
    props = schema.get("properties")
    props = props if isinstance(props, dict) else {}
    for name in schema.get("required", ()):
        if name not in value:
            return f"{name}: Field required"
    if schema.get("additionalProperties") is False:
        extra = sorted(set(value) - set(props))
        if extra:
            return f"{extra[0]}: Extra inputs are not permitted"
    for name, item in value.items():
        spec = props.get(name)
        wanted = spec.get("type") if isinstance(spec, dict) else None
        names = [wanted] if isinstance(wanted, str) else wanted if isinstance(wanted, list) else []
        types = tuple(t for n in names for t in _JSON_TYPES.get(n, (object,)))
        if not types:
            continue
        is_bool = isinstance(item, bool)
        if not isinstance(item, types) or (is_bool and bool not in types and object not in types):
            return f"{name}: expected {' or '.join(names)}, got {type(item).__name__}"
    return None


async def _in_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)` in a worker thread (caller's contextvars); cancellation waits for it."""
    loop = asyncio.get_running_loop()
    call = functools.partial(contextvars.copy_context().run, fn, *args)
    future = loop.run_in_executor(None, call)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError as cancelled:
        while not future.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait((future,))
        if not future.cancelled() and future.exception() is None:
            # the tool finished: an approved re-run's progress keeps its result (ADR 0071)
            setattr(cancelled, _FINISHED, future.result())
        raise


_FINISHED = "_golem_finished"


def finished_result(cancelled: BaseException) -> ToolResult | None:
    """The result of the sync tool whose thread returned while cancellation waited."""
    if not hasattr(cancelled, _FINISHED):
        return None
    try:
        result = _to_tool_result(getattr(cancelled, _FINISHED))
    except Exception:  # a value no call could have returned: the call did not complete
        return None
    if any(part.problem() for part in result.parts):
        return None
    return result


def _to_tool_result(value: Any) -> ToolResult:
    """Normalize what a tool returned into a `ToolResult`."""
    if isinstance(value, str):
        return ToolResult(value)
    if isinstance(value, ToolResult):
        return value
    if value is None:
        return ToolResult("")
    return ToolResult(pydantic_core.to_json(value).decode())


def _is_async_callable(fn: Any) -> bool:
    while isinstance(fn, functools.partial):
        fn = fn.func
    if inspect.iscoroutinefunction(fn):
        return True
    call = None if inspect.isroutine(fn) else getattr(type(fn), "__call__", None)  # noqa: B004
    return call is not None and inspect.iscoroutinefunction(call)


def _is_ctx_param(p: inspect.Parameter, hints: dict[str, Any]) -> bool:
    annotation = hints.get(p.name, p.annotation)
    if get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    if annotation is RunContext or get_origin(annotation) is RunContext:
        return True
    if isinstance(annotation, str):
        return annotation.startswith("RunContext")
    return annotation is inspect.Parameter.empty and p.name in ("ctx", "context")


def _strip_titles(schema: Any) -> None:
    if isinstance(schema, dict):
        schema.pop("title", None)
        for key, value in schema.items():
            if key == "properties" and isinstance(value, dict):
                for prop in value.values():
                    _strip_titles(prop)
            elif isinstance(value, dict | list):
                _strip_titles(value)
    elif isinstance(schema, list):
        for item in schema:
            _strip_titles(item)


def describe_validation(exc: pydantic.ValidationError, what: str = "arguments") -> str:
    """`exc`'s problems as one line: "invalid <what>: <location>: <message>; ..."."""
    problems = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(x) for x in err["loc"]) or what
        problems.append(f"{loc}: {err['msg']}")
    return f"invalid {what}: " + "; ".join(problems)


_SECTION = re.compile(
    r"^(Args|Arguments|Parameters|Returns|Return|Raises|Yields|Examples?|Notes?):\s*$"
)
_GOOGLE_PARAM = re.compile(r"^\s*(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_SPHINX_PARAM = re.compile(r"^\s*:param\s+(?:[^:]*\s)?(\w+)\s*:\s*(.*)$")


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Split a Google- or Sphinx-style docstring into description and per-parameter texts."""
    summary: list[str] = []
    params: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    params_indent = 0
    for line in doc.splitlines():
        sphinx = _SPHINX_PARAM.match(line)
        if sphinx:
            current = sphinx.group(1)
            params[current] = sphinx.group(2).strip()
            section = "sphinx"
            continue
        if line.strip().startswith(":"):
            section, current = "sphinx", None
            continue
        head = _SECTION.match(line.strip())
        if head:
            section, current = head.group(1), None
            continue
        if section is None:
            summary.append(line)
        elif section in ("Args", "Arguments", "Parameters"):
            m = _GOOGLE_PARAM.match(line)
            indent = len(line) - len(line.lstrip())
            if m and (current is None or indent <= params_indent):
                current = m.group(1).lstrip("*")
                params[current] = m.group(2).strip()
                params_indent = indent
            elif current is not None and line.strip():
                params[current] = (params[current] + " " + line.strip()).strip()
        elif section == "sphinx" and current is not None and line.strip():
            params[current] = (params[current] + " " + line.strip()).strip()
    return "\n".join(summary).strip(), params
