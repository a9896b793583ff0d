"""What an OpenAI Responses answer holds beside text, calls and reasoning, kept (issue 29):
each message item's `phase` (commentary or final answer, which a later request must send back),
the response's `moderation` results, and the images an `image_generation_call` made (as image
parts, like a Gemini image model's; the item itself stays a `ServerToolBlock`)."""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import pytest

from golem import dumps_history, loads_history
from golem.messages import Message
from golem.model import ModelRequest, ModelResponse
from golem.providers.openai import OpenAIResponsesModel
from tests.support.adapters import DONE, send
from tests.support.recordings import Interaction, all_interactions

IMAGES = [
    pytest.param(it, id=f"{it.cassette}-{it.index}")
    for it in all_interactions("openai-responses")
    if it.status == 200 and not it.is_stream and '"image_generation_call"' in it.body
]
PHASED = [
    pytest.param(it, id=f"{it.cassette}-{it.index}")
    for it in all_interactions("openai-responses")
    if it.status == 200 and not it.is_stream and '"phase"' in it.body
]


async def _message(body: dict[str, Any] | str, *, stream: bool = False) -> Message:
    """The message an answer of `body` (a response object) becomes, streamed or not."""
    raw = body if isinstance(body, str) else json.dumps(body)
    if stream:  # the terminal event of a stream carries the whole response
        event = json.dumps({"type": "response.completed", "response": json.loads(raw)})
        final = (await send("openai-responses", [f"data: {event}\n\n".encode()], stream=True))[-1]
    else:
        final = (await send("openai-responses", raw, stream=False))[-1]
    assert isinstance(final, ModelResponse)
    return final.message


async def _resent(message: Message, *, store: bool) -> list[dict[str, Any]]:
    """The input items the next request sends for `message` (after a history round trip)."""
    (kept,) = loads_history(dumps_history([message]))
    sent: list[dict[str, Any]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return httpx.Response(200, json=DONE["openai-responses"])

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        model = OpenAIResponsesModel("gpt-5", api_key="k", store=store, http_client=client)
        await model.generate(
            ModelRequest([Message("user", "draw"), kept, Message("user", "again")])
        )
    items: list[dict[str, Any]] = sent[0]["input"]
    return items


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("interaction", IMAGES)
async def test_a_generated_image_is_an_image_part(interaction: Interaction, stream: bool) -> None:
    calls = [
        i
        for i in interaction.json["output"]
        if i.get("type") == "image_generation_call" and i.get("result")
    ]
    message = await _message(interaction.body, stream=stream)
    assert [(p.kind, p.data, p.media_type) for p in message.parts] == [
        ("image", base64.b64decode(c["result"]), f"image/{c.get('output_format') or 'png'}")
        for c in calls
    ]
    assert [b.type for b in message.server_tools].count("image_generation_call") == len(calls)


@pytest.mark.parametrize("store", [False, True])
@pytest.mark.parametrize("interaction", IMAGES[:1])
async def test_a_generated_image_goes_back_once(interaction: Interaction, store: bool) -> None:
    message = await _message(interaction.body)
    items = await _resent(message, store=store)
    text = json.dumps(items)
    result = next(
        i["result"] for i in interaction.json["output"] if i["type"] == "image_generation_call"
    )
    assert text.count(result) == 1  # the stored item by ID, or the picture for the model to see


BODY: dict[str, Any] = {
    "id": "resp_1",
    "object": "response",
    "status": "completed",
    "model": "gpt-5.4",
    "output": [
        {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "phase": "commentary",
            "content": [{"type": "output_text", "text": "Looking it up.", "annotations": []}],
        },
        {"type": "web_search_call", "id": "ws_1", "status": "completed"},
        {
            "type": "message",
            "id": "msg_2",
            "role": "assistant",
            "phase": "final_answer",
            "content": [{"type": "output_text", "text": "Paris.", "annotations": []}],
        },
    ],
}


@pytest.mark.parametrize("interaction", PHASED)
async def test_the_phase_of_a_recorded_answer_is_sent_back(interaction: Interaction) -> None:
    phases = [i["phase"] for i in interaction.json["output"] if i.get("phase")]
    items = await _resent(await _message(interaction.body), store=False)
    assert [i["phase"] for i in items if i.get("role") == "assistant"] == phases


@pytest.mark.parametrize("store", [False, True])
@pytest.mark.parametrize("stream", [False, True])
async def test_each_text_run_goes_back_with_its_phase(stream: bool, store: bool) -> None:
    message = await _message(BODY, stream=stream)
    assert message.content == "Looking it up.\n\nParis."
    sent = [
        (i["content"], i.get("phase"))
        for i in await _resent(message, store=store)
        if i.get("role") == "assistant"
    ]
    assert sent == [("Looking it up.", "commentary"), ("Paris.", "final_answer")]


MODERATION = {"id": "modr_1", "model": "omni-moderation-latest", "results": [{"flagged": False}]}


@pytest.mark.parametrize("store", [False, True])
@pytest.mark.parametrize("stream", [False, True])
async def test_moderation_results_are_kept_and_never_sent_back(stream: bool, store: bool) -> None:
    message = await _message({**BODY, "moderation": MODERATION}, stream=stream)
    (block,) = [b for b in message.server_tools if b.type == "moderation"]
    assert block.data() == MODERATION
    assert "modr_1" not in json.dumps(await _resent(message, store=store))


async def test_no_moderation_keeps_nothing() -> None:
    message = await _message({**BODY, "moderation": None})
    assert "moderation" not in [b.type for b in message.server_tools]
