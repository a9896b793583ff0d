"""Tools from MCP servers, with approval policies (extra `[mcp]`, on the official `mcp` SDK).

```python
from golem import Agent
from golem.integrations.mcp import MCPServer

files = MCPServer.stdio("python", ["files_server.py"], prefix="files")
agent = Agent("openai:gpt-4.1", toolsets=[files])
```

An `MCPServer` is a `Toolset`: its tools (`<prefix>_<tool>`) are listed before every model
turn and called like the agent's own. `isError` answers and argument errors go back to the
model (`ModelRetry`); an unreachable server fails the run (`ToolError`). A call pauses for
approval per `requires_approval`, by default unless hinted read-only (docs/adr/0020).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import inspect
import json
import os
import random
import re
import sys
import unicodedata
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from dataclasses import KW_ONLY, dataclass
from types import TracebackType
from typing import Any, Self, TextIO, TypeAlias, TypedDict, Unpack

from golem.errors import GolemError, ToolError
from golem.messages import Part
from golem.tool import (
    DeferKind,
    Deferred,
    ModelRetry,
    RunContext,
    Tool,
    ToolResult,
    call_approved,
)

try:
    import httpx2
    import mcp_types
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.exceptions import MCPError
    from opentelemetry import context as otel_context  # a dependency of the SDK's
    from opentelemetry import trace
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "golem.integrations.mcp needs the MCP SDK: pip install 'golem-agents[mcp]'"
    ) from exc

__all__ = [
    "ApprovalPolicy",
    "MCPCall",
    "MCPServer",
    "MCPServerError",
    "ServerOptions",
    "ToolHints",
    "default_decision",
]

_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]+")
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")
"""A tool name as the MCP specification recommends (SEP-986)."""
_ARGUMENT_ERRORS = (mcp_types.INVALID_PARAMS, mcp_types.METHOD_NOT_FOUND)
_HINTS = ("read_only", "destructive", "idempotent", "open_world")


class MCPServerError(GolemError):
    """An MCP server could not be reached, list its tools or answer a call (raised when the
    run starts, or the `__cause__` of a call's `ToolError`)."""

    def __init__(self, server: str, message: str) -> None:
        super().__init__(f"MCP server {server}: {message}")
        self.server = server


@dataclass(frozen=True, slots=True)
class ToolHints:
    """The behaviour hints an MCP server declares for a tool (None: not hinted):
    `readOnlyHint`, `destructiveHint`, `idempotentHint` and `openWorldHint`."""

    _: KW_ONLY
    read_only: bool | None = None
    destructive: bool | None = None
    idempotent: bool | None = None
    open_world: bool | None = None


@dataclass(frozen=True, slots=True)
class MCPCall:
    """One call of an MCP tool, as an approval policy sees it: its name as the model calls
    it (`<prefix>_<mcp_name>`) and on the server, its decoded arguments, the server's hints
    and the run's context."""

    _: KW_ONLY
    tool_name: str
    mcp_name: str
    args: Mapping[str, Any]
    hints: ToolHints
    ctx: RunContext[Any]


ApprovalDecision: TypeAlias = bool | str
ApprovalPolicy: TypeAlias = (
    bool
    | Mapping[str, bool | str]
    | Callable[[MCPCall], ApprovalDecision | Awaitable[ApprovalDecision]]
    | None
)
"""`True`/`False` for every tool; a mapping of tool name (with or without the prefix) to
`True`/`False`/a reason (others follow the default; a look-alike of an entry needs
approval); a sync or async function of the `MCPCall`; or None: `default_decision`."""


def _normalized(name: str) -> str:
    """`name` NFKC-normalized, case-folded, without whitespace or invisible characters."""
    folded = unicodedata.normalize("NFKC", name).casefold()
    return "".join(c for c in folded if not c.isspace() and unicodedata.category(c)[0] not in "CZ")


def default_decision(call: MCPCall) -> ApprovalDecision:
    """The default policy: approval unless the tool is hinted read-only and not destructive,
    and its server name is plain (SEP-986: a look-alike name earns no trust)."""
    if _PLAIN_NAME.fullmatch(call.mcp_name) is None:
        return (
            f"MCP tool {call.mcp_name!r} has a name outside the MCP tool-name characters "
            "(A-Z, a-z, 0-9, _, -, .)"
        )
    if call.hints.destructive:
        return f'MCP tool "{call.mcp_name}" is marked destructive'
    if not call.hints.read_only:
        return f'MCP tool "{call.mcp_name}" is not marked read-only'
    return False


class ServerOptions(TypedDict, total=False):
    """The options `MCPServer.stdio` and `MCPServer.http` pass on to `MCPServer`."""

    prefix: str | None
    requires_approval: ApprovalPolicy
    timeout: float | None
    max_retries: int
    connect_timeout: float


class MCPServer:
    """An MCP server whose tools an agent can call (a `golem.toolset.Toolset`), built with
    `MCPServer.stdio(...)` or `MCPServer.http(...)`; connected on entry, closed by the last
    exit, reopened when it died.

    Args:
        connect: Opens the transport (the read and write streams); see `stdio` and `http`.
        label: How errors and reprs name the server ("stdio:python", a URL...).
        prefix: Tool names are `<prefix>_<tool>`; None: the server's name; "": none.
            Keep it stable: paused histories hold the names.
        requires_approval: The approval policy (see `ApprovalPolicy`).
        timeout: Seconds a call may take; None uses the agent's `tool_timeout`.
        max_retries: Correction budget per tool per run for calls the server rejects.
        connect_timeout: Seconds to connect and list the tools before failing.

    Raises:
        ValueError: a prefix with characters other than letters, digits, `_` and `-`,
            a timeout that is not positive, or negative `max_retries`.
    """

    def __init__(
        self,
        connect: Callable[[], AbstractAsyncContextManager[Any]],
        *,
        label: str,
        prefix: str | None = None,
        requires_approval: ApprovalPolicy = None,
        timeout: float | None = None,
        max_retries: int = 1,
        connect_timeout: float = 30.0,
    ) -> None:
        if prefix is not None and prefix != _NAME_CHARS.sub("", prefix):
            raise ValueError(f"prefix must use only letters, digits, '_' and '-', got {prefix!r}")
        if timeout is not None and timeout <= 0:
            raise ValueError(f"timeout must be positive seconds, got {timeout}")
        if max_retries < 0:
            raise ValueError(f"max_retries must not be negative, got {max_retries}")
        if connect_timeout <= 0:
            raise ValueError(f"connect_timeout must be positive seconds, got {connect_timeout}")
        _check_policy(requires_approval)
        self._connect = connect
        self.label = label
        self.prefix = prefix
        self.requires_approval = requires_approval
        self.timeout = timeout
        self.max_retries = max_retries
        self.connect_timeout = connect_timeout
        self._entered = 0
        self._client: Client | None = None
        self._holder: asyncio.Task[None] | None = None
        self._closing: asyncio.Event | None = None
        self._lock: asyncio.Lock | None = None
        self._lock_loop: asyncio.AbstractEventLoop | None = None
        self._tools: list[Tool] | None = None
        self._generation = 0
        self._listed_for: Client | None = None
        self._unknown_warned: set[str] = set()

    @classmethod
    def stdio(
        cls,
        command: str,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        errlog: TextIO | None = None,
        **options: Unpack[ServerOptions],
    ) -> MCPServer:
        """A server started as a subprocess (`command args...`), over stdio; `env` is added
        to the SDK's minimal environment, `errlog` takes its stderr; `options` as `MCPServer`."""
        params = StdioServerParameters(
            command=command, args=list(args), env=dict(env) if env is not None else None, cwd=cwd
        )

        def connect() -> AbstractAsyncContextManager[Any]:
            return stdio_client(params, errlog=errlog if errlog is not None else sys.stderr)

        return cls(
            connect, label=("stdio:" + " ".join([os.path.basename(command), *args]))[:80], **options
        )

    @classmethod
    def http(
        cls,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        **options: Unpack[ServerOptions],
    ) -> MCPServer:
        """A server at `url` over streamable HTTP, sent `headers` with every request;
        `options` as `MCPServer`."""
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"url must be an http:// or https:// URL, got {url!r}")
        fixed = dict(headers or {})

        @asynccontextmanager
        async def connect() -> AsyncIterator[Any]:
            timeout_cfg = httpx2.Timeout(30.0, read=300.0)
            async with (
                httpx2.AsyncClient(headers=fixed, timeout=timeout_cfg) as http,
                streamable_http_client(url, http_client=http) as streams,
            ):
                yield streams

        return cls(connect, label=url, **options)

    def __repr__(self) -> str:
        return f"MCPServer({self.label!r}, prefix={self.prefix!r})"

    async def __aenter__(self) -> Self:
        self._entered += 1
        try:
            await self._ensure_connected()
        except BaseException:
            self._entered -= 1
            if self._entered == 0:
                await self._disconnect()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._entered -= 1
        if self._entered == 0:
            await self._disconnect()

    def _loop_lock(self) -> asyncio.Lock:
        """The connection lock of the running event loop (`run_sync` starts a new loop)."""
        loop = asyncio.get_running_loop()
        if self._lock is None or self._lock_loop is not loop:
            self._lock, self._lock_loop = asyncio.Lock(), loop
        return self._lock

    async def _ensure_connected(self) -> Client:
        if self._entered == 0:
            raise RuntimeError(
                f"{self!r} is not connected: use `async with server:` (an agent enters its "
                "toolsets for each run)"
            )
        async with self._loop_lock():
            client = self._client
            if client is not None and self._holder is not None and not self._holder.done():
                return client
            await self._disconnect()
            return await self._open()

    async def _open(self) -> Client:
        ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        closing = asyncio.Event()
        self._closing = closing
        # a task of its own: the SDK's task groups must be left by the task that entered them
        self._holder = asyncio.create_task(self._hold(ready, closing), name=f"mcp {self.label}")
        try:
            async with asyncio.timeout(self.connect_timeout):
                client = await asyncio.shield(ready)
        except TimeoutError:
            await self._disconnect()
            raise MCPServerError(
                self.label, f"did not connect within {self.connect_timeout:g}s"
            ) from None
        except BaseException:
            await self._disconnect()
            raise
        self._client = client
        return client

    async def _hold(self, ready: asyncio.Future[Client], closing: asyncio.Event) -> None:
        try:
            with _traced_only_under_a_span():  # the handshake and the listen stream
                async with Client(self._connect(), message_handler=self._on_message) as client:
                    listening = asyncio.create_task(self._listen(client))
                    ready.set_result(client)
                    try:
                        await closing.wait()
                    finally:
                        listening.cancel()
                        await asyncio.gather(listening, return_exceptions=True)
        except BaseException as exc:
            if not ready.done():
                error = MCPServerError(self.label, f"failed to connect: {exc}")
                error.__cause__ = exc
                ready.set_exception(error)
            if not isinstance(exc, Exception):
                raise

    async def _disconnect(self) -> None:
        holder, closing = self._holder, self._closing
        self._holder = self._closing = None
        self._client = None
        self._tools = None
        if holder is None:
            return
        if closing is not None:
            closing.set()
        try:
            async with asyncio.timeout(10):
                await asyncio.shield(holder)
        except TimeoutError:
            holder.cancel()
            await asyncio.gather(holder, return_exceptions=True)

    async def _drop(self, client: Client) -> None:
        """Forget a connection that closed under us; the next entry or call reconnects."""
        async with self._loop_lock():
            if self._client is client:
                await self._disconnect()

    def _tools_changed(self) -> None:
        self._tools = None
        self._generation += 1

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            self._tools_changed()

    async def _listen(self, client: Client) -> None:
        """On 2026-era connections, list changes arrive on a `subscriptions/listen` stream."""
        caps = client.server_capabilities.tools
        if caps is None or not caps.list_changed:
            return
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                async for _event in subscription:
                    self._tools_changed()
        except Exception:  # an older protocol, or the stream dropped: relist per entry only
            return

    async def list_tools(self) -> Sequence[Tool]:
        """The server's tools as golem `Tool`s (listed again after `tools/list_changed`);
        `MCPServerError` when it cannot be reached or fails to list them."""
        client = await self._ensure_connected()
        tools = self._tools
        if tools is not None and self._listed_for is client:
            return tools
        self._tools = None
        generation = self._generation
        listed: list[mcp_types.Tool] = []
        cursor: str | None = None
        try:
            with _traced_only_under_a_span():
                async with asyncio.timeout(self.connect_timeout):
                    while True:
                        page = await client.list_tools(cursor=cursor, cache_mode="refresh")
                        listed.extend(page.tools)
                        cursor = page.next_cursor
                        if not cursor:
                            break
        except (MCPError, TimeoutError) as exc:
            if isinstance(exc, MCPError) and exc.code == mcp_types.CONNECTION_CLOSED:
                await self._drop(client)
            raise MCPServerError(self.label, f"failed to list its tools: {exc}") from exc
        prefix = self.prefix
        if prefix is None:
            info = client.server_info
            prefix = _NAME_CHARS.sub("_", info.name if info is not None else "") or "mcp"
        tools = [self._tool(t, prefix) for t in listed]
        self._warn_unknown_policy_names(listed, tools)
        if generation == self._generation:  # else a change arrived meanwhile: list again next turn
            self._tools, self._listed_for = tools, client
        return tools

    def _warn_unknown_policy_names(
        self, listed: Sequence[mcp_types.Tool], tools: Sequence[Tool]
    ) -> None:
        """Warn once per `requires_approval` name the server does not list."""
        policy = self.requires_approval
        if not isinstance(policy, Mapping):
            return
        names = {t.name for t in listed} | {t.name for t in tools}
        unknown = sorted(k for k in policy if k not in names and k not in self._unknown_warned)
        if not unknown:
            return
        self._unknown_warned.update(unknown)
        warnings.warn(
            f"MCP server {self.label}: requires_approval names {unknown}, which the server does "
            f"not list (it lists {sorted(t.name for t in listed)}); those entries decide nothing "
            "(a tool named like one of them needs approval), the tools follow the default policy",
            UserWarning,
            stacklevel=2,
        )

    def _tool(self, spec: mcp_types.Tool, prefix: str) -> Tool:
        server_name = spec.name
        name = f"{prefix}_{server_name}" if prefix else server_name
        hints = ToolHints(  # `readOnlyHint`... of the server's annotations (None: not hinted)
            **{k: getattr(spec.annotations, f"{k}_hint", None) for k in _HINTS}
        )

        async def call(ctx: RunContext[Any], args: dict[str, Any]) -> ToolResult:
            if not call_approved():
                reason = await self._decide(
                    MCPCall(tool_name=name, mcp_name=server_name, args=args, hints=hints, ctx=ctx)
                )
                if reason is not None:
                    raise Deferred(DeferKind.APPROVAL, reason)
            return await self._call(ctx, server_name, args)

        return Tool(
            name,
            spec.description or spec.title or "",
            dict(spec.input_schema),
            call,
            max_retries=self.max_retries,
            timeout=self.timeout,
        )

    async def _decide(self, call: MCPCall) -> str | None:
        """None when the call may run now, else the reason it needs approval."""
        policy = self.requires_approval
        decision: ApprovalDecision
        if policy is None:
            decision = default_decision(call)
        elif isinstance(policy, bool):
            decision = policy
        elif isinstance(policy, Mapping):
            found = policy.get(call.mcp_name, policy.get(call.tool_name))
            decision = _near_miss(policy, call) if found is None else found
        else:
            value = policy(call)
            decision = await value if inspect.isawaitable(value) else value
            if not isinstance(decision, bool | str):
                raise TypeError(
                    f"requires_approval must return a bool or a reason string, got "
                    f"{type(decision).__name__}"
                )
        if decision is False or decision == "":
            return None
        if decision is True:
            return f'MCP tool "{call.mcp_name}" needs approval'
        return str(decision)

    async def _call(self, ctx: RunContext[Any], tool_name: str, args: dict[str, Any]) -> ToolResult:
        client = await self._ensure_connected()
        try:
            with _traced_only_under_a_span():
                result = await client.call_tool(tool_name, args)
        except MCPError as exc:
            if exc.code in _ARGUMENT_ERRORS:
                raise ModelRetry(exc.message) from exc
            if exc.code == mcp_types.CONNECTION_CLOSED:
                await self._drop(client)
            cause = MCPServerError(self.label, f"failed the call: {exc}")
            cause.__cause__ = exc
            raise ToolError(ctx.tool_name, ctx.call_id, str(cause)) from cause
        text, parts = _convert(result.content)
        if result.is_error:
            raise ModelRetry(text or f'MCP tool "{tool_name}" reported an error')
        if not text and result.structured_content is not None:
            text = json.dumps(result.structured_content, ensure_ascii=False)
        return ToolResult(text, parts)


@contextmanager
def _traced_only_under_a_span() -> Iterator[None]:
    """The SDK's request spans under the current span, and none (an unsampled parent) when
    no span is current, so a connection outside a run leaves no root trace per request."""
    if trace.get_current_span().get_span_context().is_valid or isinstance(
        trace.get_tracer_provider(), trace.ProxyTracerProvider | trace.NoOpTracerProvider
    ):
        yield  # under the current span; or no provider is set: no span, no traceparent sent
        return
    unsampled = trace.SpanContext(
        trace_id=random.getrandbits(128) or 1,
        span_id=random.getrandbits(64) or 1,
        is_remote=False,
        trace_flags=trace.TraceFlags(trace.TraceFlags.DEFAULT),
    )
    token = otel_context.attach(trace.set_span_in_context(trace.NonRecordingSpan(unsampled)))
    try:
        yield
    finally:
        otel_context.detach(token)


def _check_policy(policy: ApprovalPolicy) -> None:
    if policy is None or isinstance(policy, bool) or callable(policy):
        return
    if isinstance(policy, Mapping):
        seen: dict[str, str] = {}
        for key, value in policy.items():
            if not isinstance(key, str) or not isinstance(value, bool | str):
                raise ValueError(
                    "requires_approval mapping must map tool names to True, False or a reason, "
                    f"got {key!r}: {value!r}"
                )
            if _PLAIN_NAME.fullmatch(key) is None:
                raise ValueError(
                    f"requires_approval names {key!r}, which is not a plain MCP tool name "
                    "(1 to 128 of A-Z, a-z, 0-9, _, -, .)"
                )
            other = seen.setdefault(_normalized(key), key)
            if other != key:
                raise ValueError(
                    f"requires_approval names {other!r} and {key!r}, which differ only in case "
                    "or look-alike characters"
                )
        return
    raise ValueError(
        "requires_approval must be True, False, a mapping of tool names or a function, "
        f"got {type(policy).__name__}"
    )


def _near_miss(policy: Mapping[str, bool | str], call: MCPCall) -> ApprovalDecision:
    """Approval for a tool whose normalized name matches a mapping entry, else the default."""
    names = {_normalized(call.mcp_name), _normalized(call.tool_name)}
    for key in policy:
        if _normalized(key) in names:
            return (
                f"MCP tool {call.mcp_name!r} is named like the requires_approval entry "
                f"{key!r} but not exactly"
            )
    return default_decision(call)


def _convert(content: Sequence[Any]) -> tuple[str, list[Part]]:
    """MCP content blocks as the text and parts of a golem tool result."""
    texts: list[str] = []
    parts: list[Part] = []
    for block in content:
        if isinstance(block, mcp_types.TextContent):
            texts.append(block.text)
        elif isinstance(block, mcp_types.ImageContent | mcp_types.AudioContent):
            kind = "image" if isinstance(block, mcp_types.ImageContent) else "audio"
            data = _b64(block.data)
            if data is None:
                texts.append(f"[{kind} with invalid base64 data]")
            else:
                parts.append(Part(kind, data=data, media_type=block.mime_type))
        elif isinstance(block, mcp_types.EmbeddedResource):
            res = block.resource
            if isinstance(res, mcp_types.TextResourceContents):
                texts.append(res.text)
            else:
                data = _b64(res.blob)
                if data is None or not res.mime_type:
                    texts.append(f"[resource {res.uri}]")
                else:
                    head, slash, _ = res.mime_type.partition("/")
                    kind = head if slash and head in ("image", "audio", "video") else "document"
                    parts.append(Part(kind, data=data, media_type=res.mime_type))
        elif isinstance(block, mcp_types.ResourceLink):
            texts.append(f"[resource {block.name}: {block.uri}]")
    return "\n".join(texts), parts


def _b64(data: str) -> bytes | None:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None
