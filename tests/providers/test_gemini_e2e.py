"""A full deferred-tools cycle through a local HTTP server that speaks the Gemini wire format."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from golem import Agent, dumps_history, loads_history
from golem.deferred import Approval, DeferredResults
from golem.messages import Message
from golem.model import Delta, ModelRequest
from golem.providers.gemini import GeminiModel
from golem.tool import DeferKind, Deferred, call_approved
from tests.support.local_server import Headers, local_server

SIGNATURE = "c2lnbmF0dXJlLW9mLXRoZS1jYWxs"  # base64, opaque to the client
FINAL_TEXT = "Deleted /tmp/report.txt as approved."


@dataclass
class FakeGemini:
    """Answers like generativelanguage.googleapis.com: a tool call first, then text."""

    requests: list[tuple[str, dict[str, str], dict[str, Any]]] = field(default_factory=list)
    failures: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    """Error answers (status, JSON body) to give before the scripted ones."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        last = body["contents"][-1]
        answered = any("functionResponse" in p for p in last["parts"])
        n = len(self.requests)
        if answered:
            parts: list[dict[str, Any]] = [{"text": FINAL_TEXT, "thoughtSignature": "dGV4dC1zaWc="}]
            usage = {"promptTokenCount": 60, "candidatesTokenCount": 9, "totalTokenCount": 69}
        else:
            parts = [
                {
                    "functionCall": {"name": "delete_file", "args": {"path": "/tmp/report.txt"}},
                    "thoughtSignature": SIGNATURE,
                }
            ]
            usage = {
                "promptTokenCount": 40,
                "candidatesTokenCount": 12,
                "thoughtsTokenCount": 30,
                "totalTokenCount": 82,
            }
        return {
            "candidates": [
                {
                    "content": {"role": "model", "parts": parts},
                    "finishReason": "STOP",
                    "index": 0,
                    **({} if answered else {"finishMessage": "Model generated function call(s)."}),
                }
            ],
            "usageMetadata": usage,
            "modelVersion": "gemini-2.5-flash",
            "responseId": f"resp{n}",
        }


@pytest.fixture
def server() -> Iterator[tuple[str, FakeGemini]]:
    fake = FakeGemini()

    def respond(path: str, headers: Headers, raw: bytes) -> tuple[int, str, bytes]:
        body = json.loads(raw)
        with fake.lock:
            answer = fake.answer(body)
            fake.requests.append((path, dict(headers.items()), body))
        if fake.failures:
            status, error = fake.failures.pop(0)
            return status, "application/json", json.dumps(error).encode()
        if headers.get("x-goog-api-key") != "local-key":
            return 401, "application/json", b'{"error": {"code": 401}}'
        if path.endswith(":streamGenerateContent?alt=sse"):
            text = answer["candidates"][0]["content"]["parts"]
            first = {**answer, "candidates": [{"content": {"role": "model", "parts": text}}]}
            last = {
                **answer,
                "candidates": [{"content": {"role": "model", "parts": []}, "finishReason": "STOP"}],
            }
            events = "".join(f"data: {json.dumps(c)}\r\n\r\n" for c in (first, last))
            return 200, "text/event-stream", events.encode()
        if path.endswith(":generateContent"):
            return 200, "application/json; charset=UTF-8", json.dumps(answer).encode()
        return 404, "application/json", b'{"error": {"code": 404}}'

    with local_server(respond) as url:
        yield f"{url}/v1beta", fake


def _agent(
    base_url: str, executed: list[tuple[str, bool]], **kw: Any
) -> tuple[Agent[Any, str], GeminiModel]:
    async def delete_file(path: str) -> str:
        """Delete a file.

        Args:
            path: The file to delete.
        """
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, f"deleting {path} needs a human")
        executed.append((path, call_approved()))
        return f"deleted {path}"

    model = GeminiModel("gemini-2.5-flash", api_key="local-key", base_url=base_url)
    return Agent(model, instructions="You manage files.", tools=[delete_file], **kw), model


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_stream"])
async def test_pause_on_gemini_then_resume_in_a_new_agent(
    server: tuple[str, FakeGemini], streamed: bool
) -> None:
    base_url, fake = server
    executed: list[tuple[str, bool]] = []
    agent, model = _agent(base_url, executed)
    if streamed:
        deltas = []
        async with agent.run_stream("Delete /tmp/report.txt") as stream:
            async for item in stream:
                if isinstance(item, Delta):
                    deltas.append(item)
        paused = stream.result
        assert [tc.name for d in deltas for tc in d.tool_calls] == ["delete_file"]
    else:
        paused = await agent.run("Delete /tmp/report.txt")
    await model.aclose()

    assert paused.is_paused
    assert paused.pending is not None
    [pending] = paused.pending.approvals
    assert pending.tool_name == "delete_file"
    assert pending.call_id == "gemini_resp0_0"  # synthesized: Gemini sent no ID
    assert json.loads(pending.args) == {"path": "/tmp/report.txt"}
    assert executed == []

    saved = dumps_history(paused.messages)
    assert SIGNATURE in saved  # the thought signature survives in the paused history
    history = loads_history(saved)
    assert GeminiModel("gemini-2.5-flash", api_key="k").request_body(
        ModelRequest(messages=history)
    ) == GeminiModel("gemini-2.5-flash", api_key="k").request_body(
        ModelRequest(messages=paused.messages)
    )

    # a new process: a fresh agent and model, only the JSON history in hand
    executed_later: list[tuple[str, bool]] = []
    resumer, model2 = _agent(base_url, executed_later)
    done = await resumer.run_with_deferred_results(
        history, DeferredResults(approvals={pending.call_id: Approval(True)})
    )
    await model2.aclose()

    assert executed_later == [("/tmp/report.txt", True)]
    assert done.pending is None
    assert done.output == FINAL_TEXT
    assert done.finish_reason == "stop"

    assert len(fake.requests) == 2
    path, headers, body = fake.requests[1]
    assert path == "/v1beta/models/gemini-2.5-flash:generateContent"  # resume never streams
    assert headers["x-goog-api-key"] == "local-key"
    assert body["systemInstruction"] == {"role": "user", "parts": [{"text": "You manage files."}]}
    assert body["contents"] == [
        {"role": "user", "parts": [{"text": "Delete /tmp/report.txt"}]},
        {
            "role": "model",
            "parts": [
                {
                    "functionCall": {"name": "delete_file", "args": {"path": "/tmp/report.txt"}},
                    "thoughtSignature": SIGNATURE,
                }
            ],
        },
        {
            "role": "user",
            "parts": [
                {
                    "functionResponse": {
                        "name": "delete_file",
                        "response": {"output": "deleted /tmp/report.txt"},
                    }
                }
            ],
        },
    ]
    declared = body["tools"][0]["functionDeclarations"][0]
    assert declared["name"] == "delete_file"
    assert declared["parametersJsonSchema"]["properties"]["path"]["type"] == "string"
    first_path = fake.requests[0][0]
    assert first_path.endswith(":streamGenerateContent?alt=sse" if streamed else ":generateContent")
    final = done.messages[-1]
    assert final == Message(
        role="assistant",
        content=FINAL_TEXT,
        thinking=final.thinking,
        run_id=final.run_id,
        conversation_id=paused.conversation_id,
    )
    assert [b.signature for b in final.thinking] == ["dGV4dC1zaWc="]


async def test_wrong_key_against_the_local_server(server: tuple[str, FakeGemini]) -> None:
    from golem.errors import AuthenticationError
    from golem.result import RunError

    base_url, fake = server
    model = GeminiModel("gemini-2.5-flash", api_key="wrong", base_url=base_url)
    agent: Agent[Any, str] = Agent(model, max_attempts=3)
    with pytest.raises(RunError) as info:
        await agent.run("hi")
    await model.aclose()
    assert isinstance(info.value.__cause__, AuthenticationError)
    assert len(fake.requests) == 1  # not retryable: max_attempts=3 made one request


async def test_rate_limit_then_success_is_retried_by_the_agent(
    server: tuple[str, FakeGemini],
) -> None:
    base_url, fake = server
    retry_info = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "0s"}
    fake.failures = [
        (429, {"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "details": [retry_info]}}),
        (503, {"error": {"code": 503, "status": "UNAVAILABLE", "message": "overloaded"}}),
    ]
    agent, model = _agent(base_url, [], max_attempts=3, retry_backoff=lambda attempt: 0.0)
    result = await agent.run("Delete /tmp/report.txt")
    await model.aclose()
    assert result.requests == 3  # 429 (RetryInfo 0s), 503, then the answer
    assert len(fake.requests) == 3
    assert result.pending is not None
    assert [c.tool_name for c in result.pending.approvals] == ["delete_file"]


def test_run_sync_twice_works(server: tuple[str, FakeGemini]) -> None:
    base_url, fake = server
    agent, _model = _agent(base_url, [])
    first = agent.run_sync("Delete /tmp/report.txt")  # each run_sync has its own event loop
    second = agent.run_sync("Delete /tmp/report.txt")
    assert first.pending is not None
    assert second.pending is not None
    assert len(fake.requests) == 2


def test_each_event_loop_gets_its_own_client() -> None:
    model = GeminiModel("gemini-2.5-flash", api_key="k")

    async def grab() -> tuple[object, object]:
        return await model._clients.get(), await model._clients.get()

    a1, a2 = asyncio.run(grab())
    b1, _ = asyncio.run(grab())
    assert a1 is a2  # reused within a loop
    assert b1 is not a1  # pooled connections never cross event loops
