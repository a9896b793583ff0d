"""Gemini answers the recordings do not hold, shaped as the API reference documents them.

Each one used to come back as an empty answer that passed for a real one: a 200 body that
is an `{"error": ...}` object, a body with no candidate and no blocked prompt, and a
candidate that finished with `MALFORMED_FUNCTION_CALL` (the model's call was unreadable).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from golem.errors import BadRequest, Overloaded, ResponseFormatError
from golem.model import ModelResponse
from tests.support.adapters import final, send


async def _answer(body: Any, *, stream: bool = False) -> ModelResponse:
    text = json.dumps(body)
    return final(await send("gemini", f"data: {text}\r\n\r\n" if stream else text, stream=stream))


async def test_an_error_object_in_a_200_body_is_classified() -> None:
    body = {"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}}
    with pytest.raises(Overloaded, match="overloaded"):
        await _answer(body)


@pytest.mark.parametrize(
    "body", [{}, {"usageMetadata": {"promptTokenCount": 3}}, {"candidates": []}]
)
async def test_a_body_without_a_candidate_is_a_format_error(body: dict[str, Any]) -> None:
    with pytest.raises(ResponseFormatError, match="no candidate"):
        await _answer(body)


async def test_a_blocked_prompt_is_still_a_content_filter_answer() -> None:
    body = {"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"}}
    response = await _answer(body)
    assert response.finish_reason == "content_filter"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "reason", ["MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL", "TOO_MANY_TOOL_CALLS"]
)
async def test_an_unreadable_function_call_is_a_retryable_format_error(
    reason: str, stream: bool
) -> None:
    body = {
        "candidates": [
            {
                "finishReason": reason,
                "finishMessage": "Malformed function call: print(x",
                "index": 0,
            }
        ],
        "usageMetadata": {"promptTokenCount": 2595, "totalTokenCount": 2595},
    }
    with pytest.raises(ResponseFormatError, match=reason) as caught:
        await _answer(body, stream=stream)
    assert caught.value.retryable
    assert "print(x" in str(caught.value)


async def test_a_missing_thought_signature_blames_the_request() -> None:
    body = {"candidates": [{"finishReason": "MISSING_THOUGHT_SIGNATURE", "index": 0}]}
    with pytest.raises(BadRequest, match="MISSING_THOUGHT_SIGNATURE") as caught:
        await _answer(body)
    assert not caught.value.retryable


async def test_a_call_that_came_through_is_kept_whatever_the_finish_reason() -> None:
    part = {"functionCall": {"name": "f", "args": {"n": 1}}}
    body = {
        "candidates": [{"content": {"parts": [part]}, "finishReason": "TOO_MANY_TOOL_CALLS"}],
    }
    response = await _answer(body)
    assert [c.name for c in response.message.tool_calls] == ["f"]
    assert response.finish_reason == "other"


@pytest.mark.parametrize("reason", ["SAFETY", "RECITATION", "PROHIBITED_CONTENT", "SPII"])
async def test_a_filtered_candidate_without_content_is_a_content_filter_answer(
    reason: str,
) -> None:
    response = await _answer({"candidates": [{"finishReason": reason, "index": 0}]}, stream=True)
    assert response.finish_reason == "content_filter"
    assert response.message.content == ""
