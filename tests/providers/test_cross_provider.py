"""A run paused on one provider resumes on another: nothing provider-specific leaks into history.

Each model talks to an `httpx.MockTransport` that answers in its provider's wire format and
records the request bodies, so the test sees exactly what the resuming provider was sent.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from golem import Agent, Approval, DeferredResults, dumps_history, loads_history
from golem.model import Model
from golem.providers.anthropic import AnthropicModel
from golem.providers.gemini import GeminiModel
from golem.providers.openai import OpenAIChatModel
from golem.tool import DeferKind, Deferred, call_approved

FINAL_TEXT = "Deleted a.txt."


def anthropic_reply(tool_turn: bool) -> dict[str, Any]:
    if tool_turn:
        content: list[dict[str, Any]] = [
            {"type": "thinking", "thinking": "Delete it.", "signature": "c2lnbmF0dXJl"},
            {
                "type": "tool_use",
                "id": "toolu_01Del",
                "name": "delete_file",
                "input": {"path": "a.txt"},
            },
        ]
        stop = "tool_use"
    else:
        content, stop = [{"type": "text", "text": FINAL_TEXT}], "end_turn"
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }


def openai_reply(tool_turn: bool) -> dict[str, Any]:
    if tool_turn:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_abc",
                    "type": "function",
                    "function": {"name": "delete_file", "arguments": '{"path": "a.txt"}'},
                }
            ],
        }
        finish = "tool_calls"
    else:
        message, finish = {"role": "assistant", "content": FINAL_TEXT}, "stop"
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-x",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def gemini_reply(tool_turn: bool) -> dict[str, Any]:
    if tool_turn:
        parts: list[dict[str, Any]] = [
            {
                "functionCall": {"name": "delete_file", "args": {"path": "a.txt"}},
                "thoughtSignature": "Z2VtaW5pLXNpZw==",
            }
        ]
    else:
        parts = [{"text": FINAL_TEXT}]
    return {
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP"}],
        "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5},
        "responseId": "resp1",
    }


REPLIES: dict[str, Callable[[bool], dict[str, Any]]] = {
    "anthropic": anthropic_reply,
    "openai": openai_reply,
    "gemini": gemini_reply,
}


def make_model(provider: str, tool_turn: bool, seen: list[dict[str, Any]]) -> Model:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return httpx.Response(200, json=REPLIES[provider](tool_turn))

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    if provider == "anthropic":
        return AnthropicModel("claude-x", api_key="k", http_client=client)
    if provider == "openai":
        return OpenAIChatModel("gpt-x", api_key="k", http_client=client)
    return GeminiModel("gemini-2.5-flash", api_key="k", http_client=client)


def agent_on(model: Model, executed: list[str]) -> Agent[None, str]:
    agent: Agent[None, str] = Agent(model)

    @agent.tool
    def delete_file(path: str) -> str:
        """Delete a file."""
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, "deletes need sign-off")
        executed.append(path)
        return f"deleted {path}"

    return agent


def tool_result_sent(provider: str, body: dict[str, Any]) -> str:
    """The text of the tool result the resuming provider received."""
    if provider == "openai":
        return next(m["content"] for m in body["messages"] if m["role"] == "tool")
    if provider == "anthropic":
        blocks = [
            b for m in body["messages"] if isinstance(m["content"], list) for b in m["content"]
        ]
        result = next(b for b in blocks if b["type"] == "tool_result")
        content = result["content"]
        return content if isinstance(content, str) else content[0]["text"]
    parts = [p for c in body["contents"] for p in c["parts"]]
    response = next(p["functionResponse"] for p in parts if "functionResponse" in p)
    return str(response["response"].get("output", response["response"]))


PAIRS = [(a, b) for a in REPLIES for b in REPLIES if a != b]


@pytest.mark.parametrize(("paused_on", "resumed_on"), PAIRS)
async def test_pause_on_one_provider_resume_on_another(paused_on: str, resumed_on: str) -> None:
    executed: list[str] = []
    first_seen: list[dict[str, Any]] = []
    paused = await agent_on(make_model(paused_on, True, first_seen), executed).run("clean up")
    assert paused.pending is not None
    assert [p.tool_name for p in paused.pending.approvals] == ["delete_file"]
    assert executed == []

    stored = dumps_history(paused.messages)
    seen: list[dict[str, Any]] = []
    resumed = await agent_on(
        make_model(resumed_on, False, seen), executed
    ).run_with_deferred_results(
        loads_history(stored),
        DeferredResults(approvals={paused.pending.approvals[0].call_id: Approval(True)}),
    )

    assert resumed.output == FINAL_TEXT
    assert executed == ["a.txt"]
    assert len(seen) == 1
    assert tool_result_sent(resumed_on, seen[0]) == "deleted a.txt"
    wire = json.dumps(seen[0])
    for signature in ("c2lnbmF0dXJl", "Z2VtaW5pLXNpZw=="):  # reasoning signatures stay home
        assert signature not in wire
