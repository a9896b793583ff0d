"""Histories produced by the other adapters, from their recorded responses, sent to Anthropic.

The OpenAI and Gemini adapters parse their own recordings through their public model
classes; each resulting assistant message (with a result for each of its tool calls) must
map to a request the Messages API accepts: no foreign signature sent as thinking, tool IDs
in the allowed alphabet, every `tool_use` answered by a `tool_result` with the same ID.
"""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest

from golem.messages import Message, dumps_history, loads_history
from golem.model import Model, ModelRequest, ModelResponse
from golem.providers.gemini import GeminiModel
from golem.providers.openai import OpenAIChatModel
from tests.support.adapters import body_of
from tests.support.anthropic import interaction_id
from tests.support.recordings import (
    Interaction,
    all_interactions,
    available,
    needs_recordings,
    replay_transport,
)

pytestmark = needs_recordings

ID = re.compile(r"[A-Za-z0-9_-]+")


def _plain_ok(api: str, host: str) -> list[Interaction]:
    if not available():
        return []
    return [
        it
        for it in all_interactions(api)
        if it.status == 200 and not it.is_stream and it.uri.startswith(host)
    ]


OPENAI = [
    it
    for it in _plain_ok("openai-chat", "https://api.openai.com/v1/chat/completions")
    if it.json.get("choices")
]
GEMINI = [
    it
    for it in _plain_ok("gemini", "https://generativelanguage.googleapis.com/")
    if "generateContent" in it.uri
]


def _model(api: str, client: httpx.AsyncClient) -> Model:
    if api == "openai-chat":
        return OpenAIChatModel("gpt-test", api_key="k", http_client=client)
    return GeminiModel("gemini-test", api_key="k", http_client=client)


async def _foreign_response(api: str, it: Interaction) -> ModelResponse:
    async with httpx.AsyncClient(transport=replay_transport([it])) as client:
        return await _model(api, client).generate(
            ModelRequest(messages=[Message(role="user", content="hi")])
        )


def _check(body: dict[str, Any], message: Message) -> None:
    json.dumps(body)
    blocks = [b for m in body["messages"] if m["role"] == "assistant" for b in m["content"]]
    assert not [b for b in blocks if b["type"] in ("thinking", "redacted_thinking")]
    uses = [b["id"] for b in blocks if b["type"] == "tool_use"]
    assert len(uses) == len(message.tool_calls)
    assert all(ID.fullmatch(u) for u in uses)
    results = [
        b["tool_use_id"]
        for m in body["messages"]
        if m["role"] == "user"
        for b in m["content"]
        if b["type"] == "tool_result"
    ]
    assert results == uses
    for m in body["messages"]:
        assert m["content"], "the API rejects empty content"


@pytest.mark.parametrize(
    ("api", "it"),
    [("openai-chat", it) for it in OPENAI] + [("gemini", it) for it in GEMINI],
    ids=lambda v: v if isinstance(v, str) else interaction_id(v),
)
async def test_foreign_history_maps_to_a_valid_anthropic_request(api: str, it: Interaction) -> None:
    response = await _foreign_response(api, it)
    history = [
        Message(role="system", content="Be helpful."),
        Message(role="user", content="hi"),
        response.message,
        *[
            Message(role="tool", tool_call_id=c.id, tool_name=c.name, content="done")
            for c in response.message.tool_calls
        ],
        Message(role="user", content="thanks"),
    ]
    restored = loads_history(dumps_history(history))
    body = body_of("anthropic", ModelRequest(messages=restored), model="claude-x")
    _check(body, response.message)


def test_the_cross_suite_sees_signatures_and_tool_calls() -> None:
    gemini_signed = [it for it in GEMINI if "thoughtSignature" in it.body]
    assert len(gemini_signed) >= 10
    assert any("tool_calls" in it.body for it in OPENAI)
