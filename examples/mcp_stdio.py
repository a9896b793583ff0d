"""Tools from a local MCP server (stdio), with an approval pause and a resume.

Run: python examples/mcp_stdio.py  (offline: the script starts itself as the MCP server)
Needs: pip install 'golem-agents[mcp]'
"""

from __future__ import annotations

import sys

from golem import Agent, Approval, DeferredResults, dumps_history, loads_history
from golem.messages import Message, ToolCall
from golem.testing import ScriptedModel

FILES = {"a.log": "old logs", "notes.txt": "buy milk"}


def serve() -> None:
    """The MCP server: two tools, one hinted read-only, one hinted destructive."""
    # the SDK's server class; golem's client of a server has the same name (main() below)
    from mcp.server.mcpserver import MCPServer as SDKServer
    from mcp.types import ToolAnnotations

    app = SDKServer("files", log_level="WARNING")

    @app.tool(annotations=ToolAnnotations(readOnlyHint=True))
    def list_files() -> str:
        """List the files."""
        return ", ".join(sorted(FILES))

    @app.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True))
    def delete_file(path: str) -> str:
        """Delete a file."""
        print(f"[server] deleting {path}", file=sys.stderr)
        return f"deleted {path}"

    app.run()  # stdio


def main() -> None:
    from golem.integrations.mcp import MCPServer

    def files_server() -> MCPServer:
        # the same server definition in both "processes"; the prefix keeps names stable
        return MCPServer.stdio(sys.executable, [__file__, "--serve"], prefix="files")

    model = ScriptedModel(
        Message(role="assistant", tool_calls=[ToolCall("call-1", "files_list_files", "{}")]),
        Message(
            role="assistant",
            tool_calls=[ToolCall("call-2", "files_delete_file", '{"path": "a.log"}')],
        ),
    )
    agent = Agent(model, toolsets=[files_server()])
    paused = agent.run_sync("clean up the logs")
    print("tools:  ", [m.content for m in paused.messages if m.role == "tool"])
    assert paused.pending is not None
    for call in paused.pending.approvals:
        print("pending:", call.call_id, call.tool_name, call.args, "-", call.reason)

    stored = dumps_history(paused.messages)  # keep it anywhere; resume in any process

    resumer = Agent(ScriptedModel("Deleted a.log; notes.txt stays."), toolsets=[files_server()])
    done = resumer.run_with_deferred_results_sync(
        loads_history(stored), DeferredResults(approvals={"call-2": Approval(True)})
    )
    print("re-run: ", [m.content for m in done.messages if m.tool_call_id == "call-2"])
    print("answer: ", done.output)


if __name__ == "__main__":
    if "--serve" in sys.argv:
        serve()
    else:
        main()
