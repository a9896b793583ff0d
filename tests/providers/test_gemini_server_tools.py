"""Gemini grounding citations and server-side tool parts: kept as typed data, tool parts sent
back where they sat (ADR 0028)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from golem import Citation, ServerToolBlock, dumps_history, loads_history
from golem.messages import Message
from golem.model import ModelRequest, ModelResponse
from golem.providers.gemini import GeminiModel
from tests.support import recordings as _recordings
from tests.support.adapters import body_of, parsed, streamed
from tests.support.recordings import load, replay_transport

recorded = pytest.mark.skipif(not _recordings.available(), reason="recordings not present")
_dump = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode

CODE = {"executableCode": {"language": "PYTHON", "code": "print(2 + 2)"}}
RESULT = {"codeExecutionResult": {"outcome": "OUTCOME_OK", "output": "4\n"}}
GROUNDING: dict[str, Any] = {
    "webSearchQueries": ["golem clay"],
    "groundingChunks": [{"web": {"uri": "https://example.com/g", "title": "Golem"}}],
    "groundingSupports": [{"segment": {"startIndex": 9, "endIndex": 26, "text": "Ein Golem ist Ton"},
                           "groundingChunkIndices": [0]}],
}


def _body(parts: list[dict[str, Any]], **candidate: Any) -> dict[str, Any]:
    candidate = {"content": {"role": "model", "parts": parts}, "finishReason": "STOP", **candidate}
    return {"candidates": [candidate], "modelVersion": "gemini-2.5-flash"}


def test_code_execution_parts_are_blocks_and_text_runs_stay_apart() -> None:
    body = _body([{"text": "Let me compute."}, CODE, RESULT, {"text": "It is 4."}])
    message = parsed("gemini", body).message
    assert message.content == "Let me compute.\n\nIt is 4."
    assert message.server_tools == [
        ServerToolBlock(provider="gemini", type=next(iter(part)), name="code_execution",
                        raw=_dump(part), at=len("Let me compute."))
        for part in (CODE, RESULT)
    ]
    assert message.server_tools[1].data()["codeExecutionResult"]["output"] == "4\n"


def test_a_stream_gives_the_same_message_and_its_deltas_the_same_text() -> None:
    body = _body([{"text": "Let me compute."}, CODE, RESULT, {"text": "It is 4."}])
    chunks = [_body([p]) for p in body["candidates"][0]["content"]["parts"]]
    for chunk in chunks[:-1]:
        del chunk["candidates"][0]["finishReason"]
    text = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks)
    deltas, response = _split(streamed("gemini", text))
    assert response.message == parsed("gemini", body).message
    assert "".join(d.content for d in deltas) == response.message.content


def test_the_parts_go_back_where_they_sat_and_metadata_stays_home() -> None:
    body = _body(
        [{"text": "Let me compute."}, CODE, RESULT, {"text": "It is 4."}],
        groundingMetadata=GROUNDING,
    )
    message = parsed("gemini", body).message
    assert [b.type for b in message.server_tools] == [
        "executableCode",
        "codeExecutionResult",
        "groundingMetadata",
    ]
    request = ModelRequest(messages=[Message(role="user", content="2+2?"), message])
    assert body_of("gemini", request)["contents"][1] == {
        "role": "model",
        "parts": [{"text": "Let me compute."}, CODE, RESULT, {"text": "It is 4."}],
    }


def test_grounding_supports_become_citations_with_str_indexes() -> None:
    content = "Über 1: Ein Golem ist Ton."  # "Ü" is two bytes: byte 9 is str index 8
    body = _body([{"text": content}], groundingMetadata=GROUNDING)
    message = parsed("gemini", body).message
    start = content.index("Ein Golem ist Ton")
    assert message.citations == [
        Citation(
            start=start,
            end=start + len("Ein Golem ist Ton"),
            url="https://example.com/g",
            title="Golem",
            provider="gemini",
            raw=_dump(
                {
                    "support": GROUNDING["groundingSupports"][0],
                    "chunk": GROUNDING["groundingChunks"][0],
                }
            ),
        )
    ]
    (block,) = message.server_tools
    assert block.type == "groundingMetadata"
    assert block.data()["webSearchQueries"] == ["golem clay"]


def test_a_saved_history_sends_the_same_body_and_other_providers_get_only_text() -> None:
    body = _body([{"text": "Let me compute."}, CODE, RESULT, {"text": "It is 4."}])
    history = [Message(role="user", content="2+2?"), parsed("gemini", body).message]
    loaded = loads_history(dumps_history(history))
    assert loaded == history
    assert body_of("gemini", ModelRequest(messages=loaded)) == body_of("gemini",
        ModelRequest(messages=history)
    )
    request = ModelRequest(messages=loaded)
    for other in (
        body_of("anthropic", request, model="c"),
        body_of("openai-chat", request, model="g"),
    ):
        text = json.dumps(other)
        assert "print(2 + 2)" not in text
        assert "Let me compute.\\n\\nIt is 4." in text


@recorded
def test_recorded_web_search_grounding_counts_bytes() -> None:
    it = load("gemini", "test_google_native_tool_only_web_search_completes.yaml")[0]
    message = parsed("gemini", it.json).message
    assert [c.title for c in message.citations] == [
        "Current time information in San Francisco, CA, US.",
        "Weather information for San Francisco, CA, US",
    ]
    for c in message.citations:
        # the segment starts at byte 171; "°" (two bytes) appears four times before it
        assert (c.start, c.end) == (167, 229)
        assert message.content[c.start : c.end] == (
            "There is a 19% chance of rain, and the humidity is around 94%."
        )
    (block,) = message.server_tools
    assert block.data()["searchEntryPoint"]["renderedContent"].startswith("<style>")


@recorded
def test_recorded_file_search_stream_keeps_the_code_and_the_passages() -> None:
    it = load("gemini", "test_google_model_file_search_tool_stream.yaml")[3]
    _deltas, response = _split(streamed("gemini", it.body))
    message = response.message
    assert [(b.type, b.name, b.at) for b in message.server_tools] == [
        ("executableCode", "code_execution", 0),
        ("groundingMetadata", "", len(message.content)),
    ]
    assert [message.content[c.start : c.end] for c in message.citations] == [
        "The capital of France is Paris",
        "The city is well-known for its famous landmarks, including the Eiffel Tower",
    ]
    assert message.citations[0].cited_text == (
        "Paris is the capital of France. The Eiffel Tower is a famous landmark in Paris."
    )


def _standard_b64(value: Any) -> Any:
    """Recorded requests (written by another client) spell signatures in URL-safe base64."""
    if isinstance(value, dict):
        return {
            k: v.replace("-", "+").replace("_", "/")
            if k == "thoughtSignature"
            else _standard_b64(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_standard_b64(v) for v in value]
    return value


@recorded
async def test_recorded_gemini_3_server_tool_parts_go_back_on_the_next_turn() -> None:
    its = load("gemini", "test_google_model_file_search_grounding_gemini_3[True].yaml")
    first, second = its[3], its[4]
    seen: list[httpx.Request] = []
    async with httpx.AsyncClient(transport=replay_transport([first, second], seen)) as client:
        model = GeminiModel("gemini-3-flash-preview", api_key="k", http_client=client)
        prompt = Message(role="user", content="What is the capital of France?")
        answer = None
        async for item in model.generate_stream(ModelRequest(messages=[prompt])):
            answer = item
        assert isinstance(answer, ModelResponse)  # the last item is the response
        message = answer.message
        assert [(b.type, b.name, b.id) for b in message.server_tools] == [
            ("toolCall", "file_search", "tju3qkc9"),
            ("toolResponse", "file_search", "tju3qkc9"),
            ("groundingMetadata", "", ""),
        ]
        history = loads_history(dumps_history([prompt, message]))
        follow_up = Message(role="user", content="What famous landmark is it known for?")
        await model.generate(ModelRequest(messages=[*history, follow_up]))
    sent = json.loads(seen[1].content)["contents"]
    expected = _standard_b64(second.request_body["contents"])
    assert [c["role"] for c in sent] == [c["role"] for c in expected]
    # the other client re-spelled the tool parts (snake_case, retrieved passages added);
    # golem sends them as Gemini sent them: same parts, order, IDs, text and signatures
    model_parts, expected_parts = sent[1]["parts"], expected[1]["parts"]
    assert [sorted(p) for p in model_parts] == [sorted(p) for p in expected_parts]
    assert [p["thoughtSignature"] for p in model_parts] == [
        p["thoughtSignature"] for p in expected_parts
    ]
    assert [p.get("text") for p in model_parts] == [p.get("text") for p in expected_parts]
    assert model_parts[0]["toolCall"] == {"toolType": "FILE_SEARCH", "id": "tju3qkc9"}
    assert model_parts[1]["toolResponse"] == {"toolType": "FILE_SEARCH", "id": "tju3qkc9"}
    assert [sent[0], sent[2]] == [expected[0], expected[2]]


def _split(items: list[Any]) -> tuple[list[Any], Any]:
    return items[:-1], items[-1]
