"""A full deferred-tools cycle against a local server that speaks Chat Completions.

The agent calls a gated tool, the run pauses, the history goes through JSON, a new Agent (new
model instance) resumes with an approval, the tool runs approved, and the model answers.
The server checks nothing; the test inspects what it received.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from golem.agent import Agent
from golem.deferred import Approval, DeferredResults, PendingToolCall
from golem.messages import dumps_history, loads_history
from golem.model import Delta, ModelRequest
from golem.providers.openai import OpenAIChatModel
from golem.providers.openai._wire import build_request_body
from golem.tool import DeferKind, Deferred, call_approved
from tests.support.local_server import Headers, local_server

from .openai_fixtures import chunk, sse

DELETE_ARGS = '{"path": "/tmp/report.txt"}'
STORED_DELETE_ARGS = DELETE_ARGS  # the history JSON keeps argument bytes exact (ADR 0015)
LIST_ARGS = '{"directory":"/tmp"}'
USAGE = {
    "prompt_tokens": 120,
    "completion_tokens": 30,
    "total_tokens": 150,
    "prompt_tokens_details": {"cached_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 0},
}


def _answer(body: dict[str, Any]) -> dict[str, Any]:
    """What the fake model says: first two tool calls, then (after tool results) a final text."""
    last = body["messages"][-1]
    if last["role"] == "tool":
        message: dict[str, Any] = {"role": "assistant", "content": "Deleted /tmp/report.txt."}
        finish = "stop"
    else:
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_list_1",
                    "type": "function",
                    "function": {"name": "list_files", "arguments": LIST_ARGS},
                },
                {
                    "id": "call_delete_2",
                    "type": "function",
                    "function": {"name": "delete_file", "arguments": DELETE_ARGS},
                },
            ],
        }
        finish = "tool_calls"
    return {
        "id": "chatcmpl-local",
        "object": "chat.completion",
        "created": 1746400000,
        "model": "local-model",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": USAGE,
    }


def _as_stream(answer: dict[str, Any]) -> str:
    msg = answer["choices"][0]["message"]
    events: list[dict[str, Any] | str] = [
        chunk({"role": "assistant", "content": ""}, model="local-model")
    ]
    if msg.get("content"):
        for word in msg["content"].split(" "):
            events.append(chunk({"content": word + " "}, model="local-model"))
    for i, tc in enumerate(msg.get("tool_calls") or []):
        head = {
            "index": i,
            "id": tc["id"],
            "type": "function",
            "function": {"name": tc["function"]["name"]},
        }
        events.append(chunk({"tool_calls": [head]}, model="local-model"))
        args = tc["function"]["arguments"]
        for piece in (args[:5], args[5:]):
            events.append(
                chunk(
                    {"tool_calls": [{"index": i, "function": {"arguments": piece}}]},
                    model="local-model",
                )
            )
    events.append(chunk({}, answer["choices"][0]["finish_reason"], model="local-model"))
    events.append(chunk(model="local-model", usage=USAGE, choices=False))
    events.append("[DONE]")
    return sse(events)


class _Server:
    """A local HTTP server that answers `POST /v1/chat/completions` as `_answer` says."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.url = ""
        self._serving = local_server(self._respond)

    def _respond(self, path: str, headers: Headers, raw: bytes) -> tuple[int, str, bytes]:
        body = json.loads(raw)
        self.bodies.append(body)
        self.headers.append({k.lower(): v for k, v in headers.items()})
        if path != "/v1/chat/completions":
            return 404, "application/json", b'{"error": {"code": 404}}'
        answer = _answer(body)
        if body.get("stream"):
            return 200, "text/event-stream", _as_stream(answer).encode()
        return 200, "application/json", json.dumps(answer).encode()

    def __enter__(self) -> _Server:
        self.url = self._serving.__enter__() + "/v1"
        return self

    def __exit__(self, *exc: object) -> None:
        self._serving.__exit__(None, None, None)


@pytest.fixture
def server() -> Iterator[_Server]:
    with _Server() as s:
        yield s


def _agent(url: str, ran: list[tuple[str, bool]]) -> tuple[Agent[None, str], OpenAIChatModel]:
    model = OpenAIChatModel("local-model", base_url=url)

    def list_files(directory: str) -> str:
        """List the files of a directory."""
        ran.append(("list_files", call_approved()))
        return "report.txt"

    def delete_file(path: str) -> str:
        """Delete a file (needs approval)."""
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, f"delete {path}?")
        ran.append(("delete_file", True))
        return f"deleted {path}"

    agent: Agent[None, str] = Agent(
        model, instructions="You manage files.", tools=[list_files, delete_file]
    )
    return agent, model


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
async def test_pause_json_resume_on_a_new_agent(server: _Server, stream: bool) -> None:
    ran: list[tuple[str, bool]] = []
    agent, model = _agent(server.url, ran)
    if stream:
        deltas: list[Delta] = []
        async with agent.run_stream("Clean up /tmp") as s:
            async for item in s:
                if isinstance(item, Delta):
                    deltas.append(item)
        paused = s.result
        assert [tc.name for d in deltas for tc in d.tool_calls if tc.name] == [
            "list_files",
            "delete_file",
        ]
    else:
        paused = await agent.run("Clean up /tmp")
    await model.aclose()

    assert paused.is_paused
    assert paused.pending is not None
    assert paused.pending.approvals == [
        PendingToolCall("call_delete_2", "delete_file", DELETE_ARGS, "delete /tmp/report.txt?")
    ]
    assert ran == [("list_files", False)]
    assert paused.usage.input_tokens == 120
    first = server.bodies[0]
    assert first["stream"] is stream
    assert first["messages"] == [
        {"role": "system", "content": "You manage files."},
        {"role": "user", "content": "Clean up /tmp"},
    ]
    assert [t["function"]["name"] for t in first["tools"]] == ["list_files", "delete_file"]
    assert "authorization" not in server.headers[0]

    # The paused history is plain JSON; the adapter can send it after the round trip.
    stored = dumps_history(paused.messages)
    history = loads_history(stored)
    assert dumps_history(history) == stored
    resend = build_request_body(ModelRequest(history), model.options)
    # History JSON embeds arguments as a JSON value, so they come back compacted.
    assert resend["messages"][2]["tool_calls"][1]["function"]["arguments"] == STORED_DELETE_ARGS

    ran.clear()
    agent2, model2 = _agent(server.url, ran)
    async with model2:
        done = await agent2.run_with_deferred_results(
            stored, DeferredResults(approvals={"call_delete_2": Approval(True)})
        )
    assert done.pending is None
    assert done.output == "Deleted /tmp/report.txt."
    assert ran == [("delete_file", True)]
    assert done.conversation_id == paused.conversation_id

    resumed = server.bodies[-1]
    assert resumed["stream"] is False
    assert resumed["messages"] == [
        {"role": "system", "content": "You manage files."},
        {"role": "user", "content": "Clean up /tmp"},
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": "call_list_1",
                    "type": "function",
                    "function": {"name": "list_files", "arguments": LIST_ARGS},
                },
                {
                    "id": "call_delete_2",
                    "type": "function",
                    "function": {"name": "delete_file", "arguments": STORED_DELETE_ARGS},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_list_1", "content": "report.txt"},
        {"role": "tool", "tool_call_id": "call_delete_2", "content": "deleted /tmp/report.txt"},
    ]
    assert len(server.bodies) == 2


async def test_denial_reaches_the_model_as_a_tool_message(server: _Server) -> None:
    ran: list[tuple[str, bool]] = []
    agent, model = _agent(server.url, ran)
    async with model:
        paused = await agent.run("Clean up /tmp")
        done = await agent.run_with_deferred_results(
            dumps_history(paused.messages),
            DeferredResults(approvals={"call_delete_2": Approval(False, "keep the report")}),
        )
    assert done.output == "Deleted /tmp/report.txt."
    assert ran == [("list_files", False)]
    last = server.bodies[-1]["messages"][-1]
    assert last["role"] == "tool"
    assert last["tool_call_id"] == "call_delete_2"
    assert "denied: keep the report" in last["content"]
