"""MCP servers as toolsets (issue 11), against real servers the tests start.

The server is tests/fixtures/mcp_server.py. Most tests share one server process over
streamable HTTP (issue 26: a process per test took minutes); what needs a process of its own
(stdio, a server that dies, a tool list that changes) starts one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from golem import (
    Agent,
    Approval,
    DeferredResults,
    ResumeError,
    RunError,
    Stage,
    ToolCall,
    ToolError,
)
from golem.events import EventKind, RunEvent
from golem.integrations.mcp import MCPCall, MCPServer, MCPServerError, ToolHints, default_decision
from golem.messages import Message, dumps_history
from golem.model import ModelRequest
from golem.testing import FunctionModel, ScriptedModel
from golem.tool import RunContext

pytestmark = pytest.mark.loop

SERVER = str(Path(__file__).parents[1] / "fixtures" / "mcp_server.py")
ROOT = Path(__file__).parents[2]


@dataclass(frozen=True)
class Log:
    """The side effects a server appends to `path`, from byte `start` on (this test's)."""

    path: Path
    start: int = 0

    def lines(self) -> list[str]:
        if not self.path.exists():
            return []
        with open(self.path, "rb") as f:
            f.seek(self.start)
            return f.read().decode("utf-8").splitlines()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def http_server(log: Path, out: Path) -> Iterator[str]:
    """The test server over streamable HTTP on a free port; yields its URL."""
    port = _free_port()
    env = {**os.environ, "MCP_TEST_LOG": str(log)}
    with open(out, "w", encoding="utf-8") as output:
        proc = subprocess.Popen(
            [sys.executable, SERVER, "--http", str(port)], env=env, stdout=output, stderr=output
        )
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=1):
                        break
                except OSError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError("the MCP HTTP test server did not start") from None
                    time.sleep(0.1)
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            proc.terminate()
            proc.wait(timeout=30)


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """One HTTP server process for the module: its URL and side-effect log."""
    folder = tmp_path_factory.mktemp("mcp_shared")
    with http_server(folder / "side_effects.log", folder / "http_server.log") as url:
        yield url, folder / "side_effects.log"


@pytest.fixture
def http_url(shared_server: tuple[str, Path]) -> str:
    return shared_server[0]


@pytest.fixture
def log(shared_server: tuple[str, Path]) -> Log:
    """The shared server's side effects since this test started."""
    path = shared_server[1]
    return Log(path, path.stat().st_size if path.exists() else 0)


Shared = Callable[..., MCPServer]


@pytest.fixture
def shared(http_url: str) -> Shared:
    """`MCPServer`s on the shared server (`prefix="t"` unless given; a header it ignores)."""

    def make(**kw: Any) -> MCPServer:
        return MCPServer.http(http_url, **{"prefix": "t", "headers": {"X-Test": "1"}, **kw})

    return make


@pytest.fixture
def own_log(tmp_path: Path) -> Log:
    """The side effects of a server process this test starts itself."""
    return Log(tmp_path / "side_effects.log")


@pytest.fixture
def errlog(tmp_path: Path) -> Iterator[Any]:
    with open(tmp_path / "server_stderr.log", "w", encoding="utf-8") as f:
        yield f


def stdio(log: Log, errlog: Any, **kw: Any) -> MCPServer:
    """A server process of the test's own, over stdio."""
    return MCPServer.stdio(
        sys.executable, [SERVER], env={"MCP_TEST_LOG": str(log.path)}, errlog=errlog, **kw
    )


def calls(*items: tuple[str, str, dict[str, Any]]) -> Message:
    return Message(
        role="assistant",
        tool_calls=[ToolCall(cid, name, json.dumps(args)) for cid, name, args in items],
    )


def tool_results(messages: list[Message]) -> dict[str | None, str]:
    return {m.tool_call_id: m.content for m in messages if m.role == "tool"}


def approvals(result: Any) -> list[tuple[str, str]]:
    return [(p.call_id, p.reason) for p in result.pending.approvals] if result.pending else []


# --------------------------------------------------------------------------- listing


async def test_lists_the_server_tools_prefixed_with_their_schema(shared: Shared) -> None:
    async with shared() as server:
        tools = {t.name: t for t in await server.list_tools()}
    async with shared(prefix=None) as server:  # the default prefix: the server's name
        named = {t.name for t in await server.list_tools()}
    async with shared(prefix="") as server:
        bare = {t.name for t in await server.list_tools()}
    assert {"t_add", "t_fail", "t_delete_file", "t_write_note", "t_slow", "t_die"} <= set(tools)
    add = tools["t_add"]
    assert add.description == "Add two integers."
    assert add.schema["properties"]["a"]["type"] == "integer"
    assert add.schema["required"] == ["a", "b"]
    assert "testsrv_add" in named
    assert "add" in bare


def test_model_sees_mcp_tools_next_to_the_agents_own(shared: Shared) -> None:
    seen: list[ModelRequest] = []

    def answer(request: ModelRequest) -> str:
        seen.append(request)
        return "ok"

    agent = Agent(FunctionModel(answer), toolsets=[shared()])

    @agent.tool
    def local() -> str:
        """A local tool."""
        return "x"

    assert agent.run_sync("hi").output == "ok"
    names = [spec.name for spec in seen[0].tools]
    assert names[0] == "local"
    assert "t_add" in names


def test_a_name_clash_fails_the_run_before_the_model_is_called(shared: Shared) -> None:
    agent = Agent(ScriptedModel("never"), toolsets=[shared(prefix="")])

    @agent.tool
    def add(a: int, b: int) -> int:
        """Local add."""
        return a + b

    with pytest.raises(RunError) as info:
        agent.run_sync("hi")
    assert info.value.stage == Stage.TOOL
    assert 'duplicate tool name "add"' in str(info.value.__cause__)


def test_tools_list_changed_is_honoured_on_the_next_turn(own_log: Log, errlog: Any) -> None:
    offered: list[list[str]] = []

    def answer(request: ModelRequest) -> Message | str:
        offered.append([spec.name for spec in request.tools])
        if len(offered) == 1:
            return calls(("c1", "t_grow", {}))
        if len(offered) == 2:
            return calls(("c2", "t_fresh", {}))
        return "done"

    agent = Agent(FunctionModel(answer), toolsets=[stdio(own_log, errlog, prefix="t")])
    result = agent.run_sync("grow")
    assert "t_fresh" not in offered[0]
    assert "t_fresh" in offered[1]
    assert [m.content for m in result.messages if m.role == "tool"] == ["grown", "fresh!"]


async def test_listing_outside_async_with_says_how_to_connect() -> None:
    server = MCPServer.stdio(sys.executable, [SERVER], prefix="t")
    with pytest.raises(RuntimeError, match="async with server"):
        await server.list_tools()


# --------------------------------------------------------------------------- calls


def test_a_call_runs_on_the_server_with_events_and_images_become_parts(shared: Shared) -> None:
    events: list[RunEvent] = []
    model = ScriptedModel(
        calls(("c1", "t_add", {"a": 2, "b": 40})), calls(("c2", "t_picture", {})), "42"
    )
    agent = Agent(model, toolsets=[shared()], event_handler=events.append)
    result = agent.run_sync("add")
    assert result.output == "42"
    add, picture = [m for m in result.messages if m.role == "tool"]
    assert (add.tool_call_id, add.tool_name, add.content) == ("c1", "t_add", "42")
    kinds = [(e.kind, e.tool_name) for e in events if e.tool_name == "t_add"]
    assert kinds == [(EventKind.TOOL_START, "t_add"), (EventKind.TOOL_END, "t_add")]
    assert events[-1].kind == EventKind.MODEL_END
    assert next(e for e in events if e.kind == EventKind.TOOL_END).result == "42"
    # image content becomes a part
    assert picture.content == "a red dot"
    assert [(p.kind, p.media_type) for p in picture.parts] == [("image", "image/png")]
    assert picture.parts[0].data is not None
    assert picture.parts[0].data.startswith(b"\x89PNG")


@pytest.mark.parametrize(
    ("first", "rejected"),
    [
        (
            ("c1", "t_fail", {"message": "no such file: a.txt"}),
            "Your tool call was rejected: Error executing tool fail: no such file: a.txt. "
            "Correct the arguments and call the tool again.",
        ),
        (("c1", "t_add", {"a": "not a number", "b": 1}), "Your tool call was rejected: "),
    ],
    ids=["server-error", "invalid-arguments"],
)
def test_a_rejected_call_goes_back_to_the_model_to_correct(
    shared: Shared, first: tuple[str, str, dict[str, Any]], rejected: str
) -> None:
    model = ScriptedModel(calls(first), calls(("c2", "t_add", {"a": 1, "b": 1})), "recovered")
    result = Agent(model, toolsets=[shared(max_retries=1)]).run_sync("go")
    assert result.output == "recovered"
    results = tool_results(result.messages)
    assert results["c1"].startswith(rejected)
    assert results["c2"] == "2"


def test_server_errors_beyond_the_budget_fail_the_run(shared: Shared) -> None:
    model = ScriptedModel(
        calls(("c1", "t_fail", {"message": "bad"})),
        calls(("c2", "t_fail", {"message": "worse"})),
        "never",
    )
    with pytest.raises(RunError) as info:
        Agent(model, toolsets=[shared(max_retries=1)]).run_sync("go")
    assert info.value.stage == Stage.TOOL
    assert isinstance(info.value.__cause__, ToolError)
    assert "tool failed after 2 attempts: Error executing tool fail: worse" in str(
        info.value.__cause__
    )


@pytest.mark.parametrize("where", ["stdio", "http", "agent"])
def test_a_slow_call_times_out(own_log: Log, errlog: Any, shared: Shared, where: str) -> None:
    """The server's own timeout (either transport), or the agent's `tool_timeout`."""
    server = {
        "stdio": lambda: stdio(own_log, errlog, prefix="t", timeout=0.5),
        "http": lambda: shared(timeout=0.5),
        "agent": shared,
    }[where]()
    model = ScriptedModel(calls(("c1", "t_slow", {"seconds": 30})), "never")
    agent = Agent(model, toolsets=[server], tool_timeout=0.5 if where == "agent" else None)
    with pytest.raises(RunError) as info:
        agent.run_sync("wait")
    assert info.value.stage == Stage.TOOL
    assert isinstance(info.value.__cause__, TimeoutError)
    if where != "agent":
        assert "overran its 0.5s timeout" in str(info.value.__cause__)


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_server_that_dies_mid_call_fails_the_run_naming_it(
    own_log: Log, errlog: Any, tmp_path: Path, transport: str
) -> None:
    """Over stdio the next run starts the server again."""
    model = ScriptedModel(calls(("c1", "t_die", {})), calls(("c2", "t_add", {"a": 1, "b": 2})), "3")
    with contextlib.ExitStack() as stack:
        if transport == "stdio":
            server, named = stdio(own_log, errlog, prefix="t"), "Connection closed"
        else:
            named = stack.enter_context(http_server(own_log.path, tmp_path / "http_server.log"))
            server = MCPServer.http(named, prefix="t")
        agent = Agent(model, toolsets=[server])
        with pytest.raises(RunError) as info:
            await agent.run("die")
    assert info.value.stage == Stage.TOOL
    cause = info.value.__cause__
    assert isinstance(cause, ToolError)
    assert (cause.tool_name, cause.call_id) == ("t_die", "c1")
    assert isinstance(cause.__cause__, MCPServerError)
    assert named in str(cause)
    if transport == "stdio":
        assert (await agent.run("again")).output == "3"


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_a_server_that_cannot_be_reached_fails_the_run_naming_it(
    errlog: Any, transport: str
) -> None:
    if transport == "stdio":
        args = ["-c", "import sys; sys.exit(2)"]
        server = MCPServer.stdio(sys.executable, args, errlog=errlog, connect_timeout=20)
        named = "stdio:python -c"
    else:
        named = f"http://127.0.0.1:{_free_port()}/mcp"
        server = MCPServer.http(named, connect_timeout=20)
    with pytest.raises(RunError) as info:
        Agent(ScriptedModel("never"), toolsets=[server]).run_sync("hi")
    assert info.value.stage == Stage.TOOL
    assert isinstance(info.value.__cause__, MCPServerError)
    assert named in str(info.value.__cause__)


async def test_one_connection_serves_several_runs_inside_async_with(shared: Shared) -> None:
    server = shared()
    model = ScriptedModel(
        calls(("c1", "t_write_note", {"text": "a"})),
        "1",
        calls(("c2", "t_write_note", {"text": "b"})),
        "2",
    )
    agent = Agent(model, toolsets=[server])
    async with server:
        holder = server._holder
        await agent.run("one")
        await agent.run("two")
        assert server._holder is holder
    assert server._holder is None


def test_streamed_runs_use_toolsets_too(shared: Shared) -> None:
    agent = Agent(ScriptedModel(calls(("c1", "t_add", {"a": 1, "b": 2})), "3"), toolsets=[shared()])

    async def main() -> str:
        async with agent.run_stream("go") as stream:
            async for _ in stream:
                pass
        return str(stream.result.output)

    assert asyncio.run(main()) == "3"


def test_parallel_calls_share_the_connection_across_event_loops(shared: Shared) -> None:
    server = shared()
    for _ in range(2):  # run_sync: a fresh event loop each time
        model = ScriptedModel(
            calls(
                ("c1", "t_slow", {"seconds": 0.2}),
                ("c2", "t_add", {"a": 1, "b": 2}),
                ("c3", "t_add", {"a": 3, "b": 4}),
            ),
            "done",
        )
        agent = Agent(model, toolsets=[server], parallel_tool_calls=True)
        result = agent.run_sync("go")
        assert [m.content for m in result.messages if m.role == "tool"] == ["done", "3", "7"]


# --------------------------------------------------------------------------- approval


def test_default_policy_follows_annotations(log: Log, shared: Shared) -> None:
    model = ScriptedModel(
        calls(
            ("c1", "t_add", {"a": 1, "b": 2}),
            ("c2", "t_delete_file", {"path": "a.log"}),
            ("c3", "t_write_note", {"text": "hi"}),
            ("c4", "t_d\u0435lete", {"path": "a"}),  # a Cyrillic е: outside the spec's names
        )
    )
    paused = Agent(model, toolsets=[shared()]).run_sync("go")
    assert approvals(paused) == [
        ("c2", 'MCP tool "delete_file" is marked destructive'),
        ("c3", 'MCP tool "write_note" is not marked read-only'),
        ("c4", f"MCP tool 'd\u0435lete' {OUTSIDE}"),
    ]
    assert tool_results(paused.messages)["c1"] == "3"
    assert log.lines() == []


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (False, []),
        (True, ["c1", "c2", "c3"]),
        ({"add": True, "t_delete_file": False}, ["c1", "c3"]),
        ({"write_note": "notes are audited"}, ["c2", "c3"]),
        (lambda call: call.args.get("path") == "secret", []),
    ],
)
def test_configured_policies(shared: Shared, policy: Any, expected: list[str]) -> None:
    model = ScriptedModel(
        calls(
            ("c1", "t_add", {"a": 1, "b": 2}),
            ("c2", "t_delete_file", {"path": "a.log"}),
            ("c3", "t_write_note", {"text": "hi"}),
        ),
        "done",
    )
    result = Agent(model, toolsets=[shared(requires_approval=policy)]).run_sync("go")
    assert [call_id for call_id, _ in approvals(result)] == expected


def test_a_policy_naming_a_tool_the_server_does_not_list_is_warned_about_once(
    shared: Shared,
) -> None:
    """A misspelt name would silently leave its tool on the default policy (for a tool hinted
    read-only: no approval); listing the tools says so."""
    server = shared(requires_approval={"ad": True, "t_add": True})
    model = ScriptedModel(calls(("c1", "t_add", {"a": 1, "b": 2})), calls(("c2", "t_add", {})))
    agent = Agent(model, toolsets=[server])
    with pytest.warns(UserWarning, match=r"requires_approval names \['ad'\], which the server"):
        paused = agent.run_sync("go")
    assert paused.pending is not None  # "t_add" is listed and decides
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        agent.run_sync("again")  # the same name is not warned about twice


def test_a_policy_function_sees_the_call_and_its_reason_is_the_prompt(
    log: Log, shared: Shared
) -> None:
    """`MCPCall.tool_name` is the name the model called (as `PendingToolCall.tool_name` and
    `RunContext.tool_name`); the server's own name is `mcp_name`."""
    seen: list[MCPCall] = []

    async def policy(call: MCPCall) -> bool | str:
        seen.append(call)
        return f"{call.mcp_name} on {call.args['path']} for {call.ctx.deps}"

    model = ScriptedModel(calls(("c1", "t_delete_file", {"path": "a.log"})))
    agent = Agent(model, toolsets=[shared(requires_approval=policy)])
    paused = agent.run_sync("go", deps="alice")
    assert approvals(paused) == [("c1", "delete_file on a.log for alice")]
    assert [p.tool_name for p in paused.pending.approvals] == ["t_delete_file"]  # type: ignore[union-attr]
    (call,) = seen
    assert (call.tool_name, call.ctx.tool_name, call.mcp_name) == (
        "t_delete_file",
        "t_delete_file",
        "delete_file",
    )
    assert (call.ctx.call_id, call.hints.destructive) == ("c1", True)
    assert not hasattr(MCPCall, "name")  # the old field, named the other way round, is gone
    assert log.lines() == []


LIKE = "is named like the requires_approval entry 'delete' but not exactly"
OUTSIDE = "has a name outside the MCP tool-name characters (A-Z, a-z, 0-9, _, -, .)"


@pytest.mark.parametrize(
    ("spoof", "why"),
    [
        ("Delete", LIKE),
        ("d\u0435lete", OUTSIDE),  # a Cyrillic е
        ("delete ", LIKE),
        ("delete\u200b", LIKE),  # a zero-width space
    ],
)
def test_a_look_alike_of_a_policy_entry_needs_approval(
    log: Log, shared: Shared, spoof: str, why: str
) -> None:
    """A server listing look-alikes of `delete`, hinted read-only, next to a policy on
    `delete`: they do not fall to the default, which would trust the server's hint."""
    model = ScriptedModel(
        calls(("c1", "t_delete", {"path": "a"}), ("c2", f"t_{spoof}", {"path": "b"})), "done"
    )
    paused = Agent(model, toolsets=[shared(requires_approval={"delete": True})]).run_sync("go")
    assert approvals(paused) == [
        ("c1", 'MCP tool "delete" needs approval'),
        ("c2", f"MCP tool {spoof!r} {why}"),
    ]
    assert log.lines() == []


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        *(
            (lambda bad=bad: MCPServer.stdio("python", requires_approval=bad), ValueError,
             "requires_approval names")
            for bad in ({"delete ": True}, {"d\u0435lete": True}, {"delete": True, "Delete": False})
        ),
        *(
            (lambda bad=bad: MCPServer.stdio("python", requires_approval=bad), ValueError,
             "requires_approval")
            for bad in ({"add": 1}, {1: True}, 3, "yes")
        ),
        (lambda: MCPServer.stdio("python", prefix="a b"), ValueError, "prefix"),
        (lambda: MCPServer.stdio("python", timeout=0), ValueError, "timeout"),
        (lambda: MCPServer.stdio("python", max_retries=-1), ValueError, "max_retries"),
        (lambda: MCPServer.http("ftp://x"), ValueError, "url"),
        (lambda: Agent(ScriptedModel("x")).add_toolset(object()), TypeError, "toolset"),
    ],
)  # fmt: skip
def test_bad_configuration_is_rejected_up_front(
    make: Callable[[], Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        make()


def test_default_decision_reads_the_hints() -> None:
    ctx: RunContext[None] = RunContext(None)

    def decide(**hints: bool) -> bool | str:
        call = MCPCall(tool_name="t_x", mcp_name="x", args={}, hints=ToolHints(**hints), ctx=ctx)
        return default_decision(call)

    assert decide(read_only=True) is False
    assert decide(read_only=True, destructive=True) == 'MCP tool "x" is marked destructive'
    assert decide() == 'MCP tool "x" is not marked read-only'
    assert decide(read_only=False, destructive=False) == 'MCP tool "x" is not marked read-only'


def test_approved_call_runs_once_on_the_server_denied_never(log: Log, shared: Shared) -> None:
    model = ScriptedModel(
        calls(("c1", "t_delete_file", {"path": "a.log"}), ("c2", "t_delete_file", {"path": "b"})),
        calls(("c3", "t_fail", {"message": "nope"})),
        "done",
    )
    agent = Agent(model, toolsets=[shared()])
    paused = agent.run_sync("go")
    assert log.lines() == []
    done = agent.run_with_deferred_results_sync(
        dumps_history(paused.messages),  # a saved history resumes too
        DeferredResults(approvals={"c1": Approval(True), "c2": Approval(False, "keep b")}),
    )
    assert done.output == "done"
    assert log.lines() == ["deleted a.log"]
    results = tool_results(done.messages)
    assert results["c1"] == "deleted a.log"
    assert results["c2"].startswith("Your tool call was denied: keep b.")
    assert results["c3"].startswith("Your tool call was rejected: Error executing tool fail: nope.")


RESUME_SCRIPT = """
import sys
from golem import Agent, Approval, DeferredResults, loads_history
from golem.integrations.mcp import MCPServer
from golem.testing import ScriptedModel

history, answer, transport, target, prefix = sys.argv[1:6]
if transport == "stdio":
    log, errlog = sys.argv[6:8]
    server = MCPServer.stdio(sys.executable, [target], env={"MCP_TEST_LOG": log},
                             errlog=open(errlog, "a"), prefix=prefix)
else:
    server = MCPServer.http(target, prefix=prefix)
agent = Agent(ScriptedModel(answer), toolsets=[server])
paused = loads_history(open(history, encoding="utf-8").read())
done = agent.run_with_deferred_results_sync(
    paused, DeferredResults(approvals={"c1": Approval(True)}))
print(done.output)
print([m.content for m in done.messages if m.role == "tool"])
"""


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_approval_pauses_and_resumes_in_another_process(
    own_log: Log, log: Log, errlog: Any, tmp_path: Path, http_url: str, transport: str
) -> None:
    """The paused history is saved; a fresh interpreter with the same server approves it."""
    if transport == "stdio":
        server = stdio(own_log, errlog, prefix="t")
        effects, argv = own_log, ["stdio", SERVER, "t", str(own_log.path), errlog.name]
    else:
        server, effects, argv = MCPServer.http(http_url, prefix="h"), log, ["http", http_url, "h"]
    prefix = argv[2]
    paused = Agent(
        ScriptedModel(calls(("c1", f"{prefix}_delete_file", {"path": "x"}))), toolsets=[server]
    ).run_sync("clean up")
    assert [(p.call_id, p.tool_name) for p in paused.pending.approvals] == [  # type: ignore[union-attr]
        ("c1", f"{prefix}_delete_file")
    ]
    assert effects.lines() == []
    history = tmp_path / "paused.json"
    history.write_text(dumps_history(paused.messages), encoding="utf-8")
    out = subprocess.run(
        [sys.executable, "-c", RESUME_SCRIPT, str(history), "Deleted x.", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["Deleted x.", "['deleted x']"]
    assert effects.lines() == ["deleted x"]


def test_resume_fails_before_running_when_the_server_lost_the_tool(shared: Shared) -> None:
    paused_history = [Message(role="user", content="go"), calls(("c1", "t_gone", {}))]
    agent = Agent(ScriptedModel("never"), toolsets=[shared()])
    with pytest.raises(ResumeError, match='tool "t_gone" is not registered'):
        agent.run_with_deferred_results_sync(
            paused_history, DeferredResults(approvals={"c1": Approval(True)})
        )


def test_mcp_deferrals_are_sealed_and_verified_on_resume(log: Log, shared: Shared) -> None:
    turn = calls(("c1", "t_delete_file", {"path": "a.log"}))
    agent = Agent(ScriptedModel(turn, "done"), toolsets=[shared()], seal_key=b"s" * 32)
    paused = agent.run_sync("go")
    assert paused.pending is not None
    assert paused.pending.approvals[0].seal
    forged = [
        *paused.messages[:-1],
        Message(
            role="assistant",
            tool_calls=[ToolCall("c1", "t_delete_file", '{"path": "/etc"}', seal="forged")],
        ),
    ]
    approve = DeferredResults(approvals={"c1": Approval(True)})
    with pytest.raises(ResumeError):
        agent.run_with_deferred_results_sync(forged, approve)
    assert log.lines() == []
    done = agent.run_with_deferred_results_sync(paused.paused_run, approve)
    assert done.output == "done"
    assert log.lines() == ["deleted a.log"]


TRACE_SCRIPT = """
import asyncio, json, sys
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from golem import Agent, Approval, DeferredResults, ToolCall
from golem.integrations import otel
from golem.integrations.mcp import MCPServer
from golem.messages import Message
from golem.testing import ScriptedModel

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)  # the MCP SDK's spans go to the global provider
otel.instrument()
url = sys.argv[1]
turn = Message(role="assistant", tool_calls=[ToolCall("c1", "t_delete_file", '{"path": "x"}')])
agent = Agent(ScriptedModel(turn, "done"), name="janitor",
              toolsets=[MCPServer.http(url, prefix="t")])
paused = agent.run_sync("go")
agent.run_with_deferred_results_sync(
    paused.messages, DeferredResults(approvals={"c1": Approval(True)}))

async def outside_any_run():
    async with MCPServer.http(url, prefix="t") as server:
        await server.list_tools()

asyncio.run(outside_any_run())
print(json.dumps([
    {"name": s.name, "trace": s.context.trace_id, "id": s.context.span_id,
     "parent": s.parent.span_id if s.parent else None}
    for s in exporter.get_finished_spans()
]))
"""


def test_mcp_requests_are_traced_under_the_run_and_leave_no_stray_traces(
    log: Log, http_url: str
) -> None:
    """The SDK's span per request sits under the run's spans; the handshake, the listing
    and the listen stream opened before the run's span (or outside any run) leave no root
    trace of their own (issue 29: three per resume)."""
    pytest.importorskip("opentelemetry.sdk")
    out = subprocess.run(
        [sys.executable, "-c", TRACE_SCRIPT, http_url],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    spans = json.loads(out.stdout)
    by_id = {s["id"]: s for s in spans}
    roots = [s["name"] for s in spans if s["parent"] is None]
    assert roots == ["invoke_agent janitor", "invoke_agent janitor"]
    assert {s["trace"] for s in spans} == {s["trace"] for s in spans if s["parent"] is None}
    (call,) = [s for s in spans if s["name"].startswith("MCP send tools/call")]
    # under the approved re-run's execute_tool span, current while the tool runs
    assert by_id[call["parent"]]["name"] == "execute_tool t_delete_file"
    assert log.lines() == ["deleted x"]
