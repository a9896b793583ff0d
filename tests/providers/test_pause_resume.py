"""A deferred-tools pause and resume through each adapter against a local HTTP server: the run
pauses on a gated call, the history goes through JSON, a new agent (a new model) resumes it,
on the same API or another one; nothing provider-specific leaks into what another API is sent."""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from typing import Any

import pytest

from golem import Agent, Approval, DeferredResults, dumps_history, loads_history
from golem.errors import AuthenticationError
from golem.model import Delta
from golem.result import RunError
from golem.tool import DeferKind, Deferred, call_approved
from tests.support.adapters import ADAPTERS, text_answer
from tests.support.anthropic import sse as anthropic_sse
from tests.support.anthropic import synthesize_stream
from tests.support.events import answer, streamed_form
from tests.support.local_server import Headers, local_server

ARGS = {"path": "a.txt"}
FINAL = "Deleted a.txt."
SIGNATURES = ("c2lnbmF0dXJl", "Z2VtaW5pLXNpZw==")
"""The reasoning signatures of the tool turns: each stays with the API that wrote it."""

def _tool_turn(api: str) -> dict[str, Any]:
    """`api`'s answer "Deleting." calling `delete_file` (with a thought signature on Anthropic
    and Gemini)."""
    args: Any = json.dumps(ARGS) if api.startswith("openai") else ARGS
    call_id = {"anthropic": "toolu_del", "gemini": None}.get(api, "call_del")
    body = answer(api, "Deleting.", calls=[(call_id, "delete_file", args)], stop="tool_call",
                  usage=(10, 5))
    if api == "anthropic":
        thought = {"type": "thinking", "thinking": "Delete it.", "signature": SIGNATURES[0]}
        body["content"].insert(0, thought)
    if api == "gemini":
        body["candidates"][0]["content"]["parts"][1]["thoughtSignature"] = SIGNATURES[1]
    return body


TOOL_TURN = {api: _tool_turn(api) for api in ADAPTERS}


def streamed(api: str, body: dict[str, Any]) -> bytes:
    """`body` as the event stream of `api`."""
    if api == "anthropic":
        return anthropic_sse(*synthesize_stream(body, size=5)).encode()
    return streamed_form(api, body).encode()


def tool_result_sent(api: str, body: dict[str, Any]) -> str:
    """The tool result the resuming request carries."""
    if api == "openai-chat":
        return str(next(m["content"] for m in body["messages"] if m["role"] == "tool"))
    if api == "openai-responses":
        return str(
            next(i["output"] for i in body["input"] if i.get("type") == "function_call_output")
        )
    if api == "anthropic":
        blocks = [
            b for m in body["messages"] if isinstance(m["content"], list) for b in m["content"]
        ]
        result = next(b for b in blocks if b["type"] == "tool_result")
        return (
            result["content"]
            if isinstance(result["content"], str)
            else result["content"][0]["text"]
        )
    parts = [p for c in body["contents"] for p in c["parts"]]
    response = next(p["functionResponse"]["response"] for p in parts if "functionResponse" in p)
    return str(response.get("output", response))


class Server:
    """A local server answering each API's requests with `replies` in turn (streamed when asked)."""

    def __init__(self, api: str, replies: list[dict[str, Any]], *, keep_alive: bool = False):
        self.api = api
        self.replies = list(replies)
        self.requests: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        self._serving = local_server(self._respond, keep_alive=keep_alive)
        self.url = ""

    def _respond(self, path: str, headers: Headers, raw: bytes) -> tuple[int, str, bytes]:
        body = json.loads(raw)
        self.requests.append((path, dict(headers.items()), body))
        reply = self.replies.pop(0)
        if "error" in reply:
            return reply["error"]["code"], "application/json", json.dumps(reply).encode()
        if body.get("stream") or "alt=sse" in path:
            return 200, "text/event-stream", streamed(self.api, reply)
        return 200, "application/json", json.dumps(reply).encode()

    def model(self, key: str = "k") -> Any:
        base = self.url + ("/v1" if self.api.startswith("openai") else "")
        return ADAPTERS[self.api]("m", api_key=key, base_url=base)


@pytest.fixture
def serve() -> Iterator[Any]:
    servers: list[Server] = []

    def start(api: str, replies: list[dict[str, Any]], **kw: Any) -> Server:
        server = Server(api, replies, **kw)
        server.url = server._serving.__enter__()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server._serving.__exit__(None, None, None)


def _streamed_request(path: str, headers: dict[str, str], body: dict[str, Any]) -> bool:
    return body.get("stream") is True or "alt=sse" in path


def agent_on(model: Any, executed: list[str], **kw: Any) -> Agent[None, str]:
    agent: Agent[None, str] = Agent(model, instructions="You manage files.", **kw)

    @agent.tool
    def delete_file(path: str) -> str:
        """Delete a file (needs approval)."""
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, f"delete {path}?")
        executed.append(path)
        return f"deleted {path}"

    return agent


PAIRS = [(a, b) for a in ADAPTERS for b in ADAPTERS]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize(("paused_on", "resumed_on"), PAIRS)
async def test_a_run_paused_on_one_api_resumes_on_any_from_its_json_history(
    serve: Any, paused_on: str, resumed_on: str, stream: bool
) -> None:
    first = serve(paused_on, [TOOL_TURN[paused_on]])
    executed: list[str] = []
    agent = agent_on(first.model(), executed)
    if stream:
        async with agent.run_stream("Delete a.txt") as run:
            deltas = [item async for item in run if isinstance(item, Delta)]
        paused = run.result
        assert "".join(d.content for d in deltas) == "Deleting."
    else:
        paused = await agent.run("Delete a.txt")
    await agent.model.aclose()  # type: ignore[attr-defined]
    assert paused.pending is not None
    [pending] = paused.pending.approvals
    assert (pending.tool_name, json.loads(pending.args), pending.reason) == (
        "delete_file",
        ARGS,
        "delete a.txt?",
    )
    assert paused.finish_reason == "tool_call"
    assert paused.usage.input_tokens == 10
    assert executed == []
    assert _streamed_request(*first.requests[0]) is stream
    stored = dumps_history(paused.messages)
    if paused_on == "anthropic":  # nothing Anthropic-specific beyond the signature
        assert "anthropic" not in stored.lower()

    second = serve(resumed_on, [text_answer(resumed_on, FINAL)])
    resumer = agent_on(second.model(), executed)
    result = await resumer.run_with_deferred_results(
        loads_history(stored), DeferredResults(approvals={pending.call_id: Approval(True)})
    )
    await resumer.model.aclose()  # type: ignore[attr-defined]
    assert (result.output, result.pending, result.finish_reason) == (FINAL, None, "stop")
    assert executed == ["a.txt"]
    [(path, headers, body)] = second.requests
    assert not _streamed_request(path, headers, body)  # a resume never streams
    assert tool_result_sent(resumed_on, body) == "deleted a.txt"
    wire = json.dumps(body)
    for signature in SIGNATURES:
        assert (signature in wire) is (
            paused_on == resumed_on and signature in json.dumps(TOOL_TURN[paused_on])
        )


@pytest.mark.parametrize("api", list(ADAPTERS))
async def test_a_denied_call_reaches_the_model_as_its_tool_result(serve: Any, api: str) -> None:
    server = serve(api, [TOOL_TURN[api], text_answer(api, FINAL)])
    executed: list[str] = []
    paused = await agent_on(server.model(), executed).run("Delete a.txt")
    assert paused.pending is not None
    call_id = paused.pending.approvals[0].call_id
    await agent_on(server.model(), executed).run_with_deferred_results(
        loads_history(dumps_history(paused.messages)),
        DeferredResults(approvals={call_id: Approval(False, "not today")}),
    )
    assert executed == []
    assert "not today" in tool_result_sent(api, server.requests[1][2])


@pytest.mark.parametrize("api", list(ADAPTERS))
def test_run_sync_again_and_again_on_one_model_leaves_no_connection_open(
    serve: Any, api: str
) -> None:
    """Each run_sync has its own event loop and the model's client for it closes with it: a
    pooled connection left open would be an "unclosed transport" ResourceWarning (an error)."""
    server = serve(api, [text_answer(api, FINAL)] * 3, keep_alive=True)
    agent: Agent[None, str] = Agent(server.model())
    outputs = [agent.run_sync(f"hi {i}").output for i in range(3)]
    del agent
    gc.collect()
    assert outputs == [FINAL] * 3
    assert len(server.requests) == 3


async def test_a_wrong_key_fails_the_run_at_once_and_a_busy_api_is_retried(serve: Any) -> None:
    server = serve("gemini", [{"error": {"code": 401, "status": "UNAUTHENTICATED"}}])
    with pytest.raises(RunError) as info:
        await Agent(server.model("wrong"), max_attempts=3).run("hi")
    assert isinstance(info.value.__cause__, AuthenticationError)
    assert len(server.requests) == 1  # not retryable: one request of three allowed
    retry_info = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "0s"}
    busy = [
        {"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "details": [retry_info]}},
        {"error": {"code": 503, "status": "UNAVAILABLE", "message": "overloaded"}},
        TOOL_TURN["gemini"],
    ]
    server = serve("gemini", busy)
    agent = agent_on(server.model(), [], max_attempts=3, retry_backoff=lambda attempt: 0.0)
    result = await agent.run("Delete a.txt")
    assert result.requests == 3
    assert result.pending is not None
