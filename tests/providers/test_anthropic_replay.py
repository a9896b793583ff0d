"""Recorded Anthropic traffic replayed through the adapter's HTTP path (httpx.MockTransport)."""

from __future__ import annotations

from typing import Any

import pytest

from golem.errors import BadRequest, ProviderError
from golem.messages import Message, ThinkingBlock, ToolCall
from golem.model import Delta, ModelResponse
from golem.providers.anthropic import parse_response
from golem.providers.anthropic._stream import parse_stream, sse_events
from golem.usage import Usage
from tests.support.adapters import REQUEST
from tests.support.anthropic import interaction_id, message_interactions, model_on
from tests.support.recordings import (
    Interaction,
    all_interactions,
    available,
    load,
    needs_recordings,
    replay_transport,
)

pytestmark = needs_recordings

INTERACTIONS = message_interactions() if available() else []
OK = [it for it in INTERACTIONS if it.status == 200]
FAILED = [
    it
    for it in (all_interactions("anthropic") if available() else [])
    if it.uri.startswith("https://api.anthropic.com/") and it.status != 200
]


async def _replay(it: Interaction) -> ModelResponse:
    """The response the adapter builds for a recorded exchange, streamed or not."""
    async with model_on(replay_transport([it])) as model:
        if not it.is_stream:
            return await model.generate(REQUEST)
        items = [item async for item in model.generate_stream(REQUEST)]
    assert all(isinstance(d, Delta) for d in items[:-1])
    final = items[-1]
    assert isinstance(final, ModelResponse)
    return final


def test_the_suite_covers_plain_and_streamed_recordings() -> None:
    assert len(OK) >= 90
    assert sum(it.is_stream for it in OK) >= 6
    assert {it.status for it in FAILED} == {400, 404}


@pytest.mark.parametrize("it", OK, ids=interaction_id)
async def test_every_recorded_response_parses(it: Interaction) -> None:
    response = await _replay(it)
    body = it.json if not it.is_stream else None
    assert response.message.role == "assistant"
    assert response.finish_reason in ("stop", "tool_call")
    assert response.usage.input_tokens > 0
    assert response.usage.output_tokens > 0
    assert response.model_name.startswith("claude-")
    if body is not None:
        tool_uses = [b for b in body["content"] if b["type"] == "tool_use"]
        assert [c.id for c in response.message.tool_calls] == [b["id"] for b in tool_uses]
        assert response.message.content == _expected_text(body["content"])
        assert response.finish_reason == ("tool_call" if tool_uses else "stop")


def _expected_text(blocks: list[dict[str, Any]]) -> str:
    """Adjacent text blocks joined as they are; text runs split by other blocks (server tools,
    tool calls) joined by a blank line."""
    runs: list[str] = []
    current: list[str] | None = None
    for b in blocks:
        if b["type"] == "text":
            if current is None:
                current = []
                runs.append("")
            current.append(b["text"])
            runs[-1] = "".join(current)
        elif b["type"] not in ("thinking", "redacted_thinking", "tool_use"):
            current = None
    return "\n\n".join(runs)


@pytest.mark.parametrize("it", FAILED, ids=interaction_id)
async def test_recorded_errors_map_to_bad_request(it: Interaction) -> None:
    with pytest.raises(BadRequest) as caught:
        await _replay(it)
    assert caught.value.status_code == it.status
    assert caught.value.retryable is False
    assert it.json["error"]["message"] in str(caught.value)
    assert isinstance(caught.value, ProviderError)


async def test_parallel_tool_calls_exact() -> None:
    first = load("anthropic", "test_multiple_parallel_tool_calls.yaml")[0]
    response = await _replay(first)
    assert response == ModelResponse(
        message=Message(
            role="assistant",
            content=(
                "I'll help you find out who is the youngest by retrieving information about "
                "each family member. I'll retrieve their entity information to compare their ages."
            ),
            tool_calls=[
                ToolCall(
                    "toolu_0167cfEnoQaPviGdVXA95zcu", "retrieve_entity_info", '{"name": "Alice"}'
                ),
                ToolCall(
                    "toolu_01EEe2V5HD1Ac4rKiUR4HD2T", "retrieve_entity_info", '{"name": "Bob"}'
                ),
                ToolCall(
                    "toolu_01XFyAjstT3966qvRynZyVPo", "retrieve_entity_info", '{"name": "Charlie"}'
                ),
                ToolCall(
                    "toolu_013mnQZbgtK2oe3Mo3XKJsx3", "retrieve_entity_info", '{"name": "Daisy"}'
                ),
            ],
        ),
        usage=Usage(input_tokens=423, output_tokens=202),
        finish_reason="tool_call",
        model_name="claude-haiku-4-5-20251001",
    )


async def test_thinking_block_with_signature_exact() -> None:
    it = load("anthropic", "test_anthropic_model_thinking_part.yaml")[0]
    response = await _replay(it)
    block = it.json["content"][0]
    assert response.message.thinking == [
        ThinkingBlock(text=block["thinking"], signature=block["signature"])
    ]
    assert response.message.content.startswith("Here's how to cross the street safely:")
    assert response.usage == Usage(input_tokens=43, output_tokens=321)


async def test_cache_read_and_write_count_as_input() -> None:
    it = load("anthropic", "test_anthropic_cache_real_api.yaml")[1]
    response = await _replay(it)
    # input_tokens 3 + cache_read 1111 + cache_creation 418
    assert response.usage == Usage(
        input_tokens=1532, output_tokens=33, cache_read_tokens=1111, cache_write_tokens=418
    )


async def test_thinking_tokens_are_reasoning_tokens() -> None:
    it = load("anthropic", "test_anthropic_opus_5_features.yaml")[0]
    response = await _replay(it)
    assert response.usage == Usage(input_tokens=13, output_tokens=44, reasoning_tokens=33)
    assert response.message.content == "2 + 2 = 4"
    assert len(response.message.thinking) == 1


async def test_server_tool_blocks_are_not_calls_and_keep_text_runs_apart() -> None:
    it = load("anthropic", "test_anthropic_server_tool_receive_history_from_another_provider.yaml")[
        1
    ]
    response = await _replay(it)
    assert response.message.tool_calls == []
    assert response.message.content == (
        "Let me calculate that for you!\n\n**37,170 \u00d7 12,390 = 460,536,300**"
    )
    assert response.finish_reason == "stop"


async def test_mcp_and_advisor_blocks_are_skipped() -> None:
    mcp = await _replay(load("anthropic", "test_anthropic_mcp_servers.yaml")[0])
    assert mcp.message.tool_calls == []
    assert mcp.message.content.startswith("**Pydantic AI** is a Python agent framework")
    advisor = await _replay(load("anthropic", "test_anthropic_advisor_tool.yaml")[0])
    assert advisor.message.tool_calls == []
    assert advisor.message.thinking[0].text == ""
    assert advisor.message.thinking[0].signature.startswith("EsECCokBCA8Y")


async def test_streamed_thinking_exact() -> None:
    it = load("anthropic", "test_anthropic_model_thinking_part_stream.yaml")[0]
    items = parse_stream(sse_events(it.body.splitlines()))
    final = items[-1]
    assert isinstance(final, ModelResponse)
    deltas = [d for d in items[:-1] if isinstance(d, Delta)]
    thinking_text = "".join(t.text for d in deltas for t in d.thinking)
    signature = "".join(t.signature for d in deltas for t in d.thinking)
    assert thinking_text.startswith("This is a straightforward question about pedestrian safety.")
    assert final.message.thinking == [ThinkingBlock(text=thinking_text, signature=signature)]
    assert signature.startswith("EvMCCkYICxgCKkCHP2cSuEdcJK")
    assert final.message.content == "".join(d.content for d in deltas)
    assert final.message.content.startswith(
        "Here are the basic steps for safely crossing the street"
    )
    # message_delta's usage replaces message_start's (output_tokens 1 → final count)
    assert final.usage == Usage(input_tokens=43, output_tokens=282)
    assert final.finish_reason == "stop"
    assert final.model_name == "claude-sonnet-4-20250514"
    # every thinking fragment precedes every text fragment
    kinds = ["thinking" if d.thinking else "text" for d in deltas]
    assert kinds == sorted(kinds, key=lambda k: k != "thinking")


async def test_streamed_server_tool_arguments_are_not_tool_calls() -> None:
    it = load("anthropic", "test_anthropic_web_fetch_tool_stream.yaml")[0]
    items = parse_stream(sse_events(it.body.splitlines()))
    assert not any(isinstance(d, Delta) and d.tool_calls for d in items)
    final = items[-1]
    assert isinstance(final, ModelResponse)
    assert final.message.tool_calls == []
    assert final.usage == Usage(input_tokens=7244, output_tokens=153)
    assert final.message.content.startswith("Pydantic AI is a Python agent framework")


async def test_non_streamed_parse_matches_the_replayed_body() -> None:
    it = load("anthropic", "test_anthropic_tool_output.yaml")[1]
    assert await _replay(it) == parse_response(it.json)
