"""The adapter's request bodies, compared field by field with recorded Anthropic requests."""

from __future__ import annotations

import json

import httpx
import pytest

from golem.errors import BadRequest
from golem.messages import Message
from golem.model import ModelRequest, ToolSpec
from tests.support.anthropic import (
    ADAPTER_KEYS,
    Inexpressible,
    golem_request,
    interaction_id,
    message_interactions,
    model_on,
    normalize_recorded,
)
from tests.support.recordings import (
    Interaction,
    available,
    load,
    needs_recordings,
    replay_transport,
)

pytestmark = needs_recordings


def _expressible() -> list[Interaction]:
    out = []
    for it in message_interactions() if available() else []:
        try:
            golem_request(normalize_recorded(it.request_body))
        except Inexpressible:
            continue
        out.append(it)
    return out


EXPRESSIBLE = _expressible()


def test_enough_recorded_conversations_are_compared() -> None:
    assert len(EXPRESSIBLE) >= 50
    names = {it.cassette for it in EXPRESSIBLE}
    for needed in (
        "test_multiple_parallel_tool_calls.yaml",  # tools, tool results, system
        "test_anthropic_model_thinking_part.yaml",  # thinking replayed with its signature
        "test_image_url_input.yaml",  # image url
        "test_image_url_input_force_download.yaml",  # inline image
        "test_document_url_input.yaml",  # document url
        "test_text_document_as_binary_content_input.yaml",  # text document
        "test_anthropic_native_output_decimal_strict.yaml",  # structured output
        "test_model_sees_multiple_images[anthropic].yaml",  # parts inside a tool result
        "test_anthropic_sampling_settings_reach_the_wire.yaml",  # temperature + extra_body
        "test_request_stream_fallback_for_high_max_tokens.yaml",  # stream: true
    ):
        assert needed in names


@pytest.mark.parametrize("it", EXPRESSIBLE, ids=interaction_id)
async def test_request_body_matches_recording(it: Interaction) -> None:
    recorded = normalize_recorded(it.request_body)
    request, kwargs = golem_request(recorded)
    seen: list[httpx.Request] = []
    async with model_on(replay_transport([it], seen), **kwargs) as model:
        if it.status != 200:
            with pytest.raises(BadRequest):
                await model.generate(request)
        elif recorded.get("stream"):
            _ = [item async for item in model.generate_stream(request)]
        else:
            await model.generate(request)
    (sent,) = seen
    body = json.loads(sent.content)
    set_by_adapter = {k: v for k, v in body.items() if k in ADAPTER_KEYS}
    assert set_by_adapter == {k: v for k, v in recorded.items() if k in ADAPTER_KEYS}
    assert body == recorded  # extra_body supplies the rest
    assert sent.method == "POST"
    assert sent.url == "https://api.anthropic.com/v1/messages"
    assert sent.headers["x-api-key"] == "test-key"
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert sent.headers["content-type"] == "application/json"


async def test_prompted_output_puts_the_schema_in_the_system_prompt() -> None:
    it = load("anthropic", "test_anthropic_prompted_output.yaml")[0]
    recorded = it.request_body
    schema = {
        "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
        "required": ["city", "country"],
        "title": "CityLocation",
        "type": "object",
    }
    request = ModelRequest(
        messages=[Message(role="user", content=recorded["messages"][0]["content"][0]["text"])],
        tools=[ToolSpec("get_user_country", "", recorded["tools"][0]["input_schema"])],
        output_schema=schema,
    )
    async with model_on(
        replay_transport([it]), model="claude-sonnet-4-5", output_mode="prompted"
    ) as model:
        body = model.request_body(request)
    # pydantic-ai appends a trailing blank line after the instructions; golem does not.
    assert body["system"] == recorded["system"].rstrip("\n")
    assert "output_config" not in body
    assert {k: v for k, v in body.items() if k != "system"} == {
        k: v for k, v in recorded.items() if k != "system"
    }


async def test_native_output_transforms_the_schema_like_the_recording() -> None:
    """The recorded schema is what pydantic-ai sent for a Decimal field; golem gets the same."""
    it = load("anthropic", "test_anthropic_native_output_decimal_strict.yaml")[0]
    pattern = r"^(?!^[-+.]*$)[+-]?0*\d*\.?\d*$"
    schema = {
        "properties": {
            "amount": {"anyOf": [{"type": "number"}, {"type": "string", "pattern": pattern}]}
        },
        "required": ["amount"],
        "type": "object",
    }
    request = ModelRequest(
        messages=[Message(role="user", content="Return exactly this payment amount: 12.34")],
        output_schema=schema,
    )
    async with model_on(replay_transport([it]), model="claude-sonnet-4-5") as model:
        assert model.request_body(request) == it.request_body
