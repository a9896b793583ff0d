"""OpenAI Responses answers the recordings do not hold, shaped as the API reference says.

A `response` object's `status` is one of completed, incomplete, failed, cancelled, queued
or in_progress. Only the first two are answers; the others came back as an empty answer
with no finish reason, which passed for a real one.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from golem.errors import (
    BadRequest,
    Overloaded,
    ProviderError,
    ProviderTimeout,
    RateLimited,
    ResponseFormatError,
)
from golem.model import ModelResponse
from tests.support.adapters import final, send


async def _answer(body: str, *, stream: bool) -> ModelResponse:
    return final(await send("openai-responses", body, stream=stream))


def _response(status: str, **extra: Any) -> dict[str, Any]:
    return {"id": "resp_1", "object": "response", "status": status, "output": [], **extra}


def _as(kind: str, response: dict[str, Any], stream: bool) -> str:
    if not stream:
        return json.dumps(response)
    return f"event: {kind}\ndata: {json.dumps({'type': kind, 'response': response})}\n\n"


@pytest.mark.parametrize("stream", [False, True])
async def test_a_failed_response_without_an_error_object_is_a_server_error(stream: bool) -> None:
    body = _as("response.failed", _response("failed", error=None), stream)
    with pytest.raises(Overloaded, match="failed") as caught:
        await _answer(body, stream=stream)
    assert caught.value.retryable


@pytest.mark.parametrize("stream", [False, True])
async def test_a_failed_response_is_classified_by_its_error_code(stream: bool) -> None:
    error = {"code": "rate_limit_exceeded", "message": "Rate limit reached"}
    body = _as("response.failed", _response("failed", error=error), stream)
    with pytest.raises(RateLimited, match="Rate limit reached"):
        await _answer(body, stream=stream)


async def test_a_cancelled_response_is_a_provider_error() -> None:
    with pytest.raises(ProviderError, match="cancelled") as caught:
        await _answer(json.dumps(_response("cancelled")), stream=False)
    assert not caught.value.retryable


@pytest.mark.parametrize("status", ["queued", "in_progress"])
async def test_an_unfinished_background_response_is_not_an_answer(status: str) -> None:
    with pytest.raises(ResponseFormatError, match=status):
        await _answer(json.dumps(_response(status)), stream=False)


@pytest.mark.parametrize(
    ("reason", "finish"),
    [("max_output_tokens", "length"), ("content_filter", "content_filter"), ("other", "other")],
)
async def test_an_incomplete_response_is_a_marked_answer(reason: str, finish: str) -> None:
    call = {"type": "function_call", "call_id": "c", "name": "f", "arguments": '{"a": "cut'}
    response = _response("incomplete", incomplete_details={"reason": reason}, output=[call])
    got = await _answer(_as("response.incomplete", response, True), stream=True)
    assert got.finish_reason == finish
    assert got.message.tool_calls[0].args == '{"a": "cut'


async def test_an_error_event_with_the_documented_flat_shape_is_classified() -> None:
    event = {
        "type": "error",
        "code": "server_error",
        "message": "The server had an error",
        "param": None,
        "sequence_number": 3,
    }
    with pytest.raises(Overloaded, match="The server had an error"):
        await _answer(f"event: error\ndata: {json.dumps(event)}\n\n", stream=True)


_CODES = {
    "server_error": Overloaded,
    "rate_limit_exceeded": RateLimited,
    "vector_store_timeout": ProviderTimeout,
    "invalid_prompt": BadRequest,
    "invalid_image": BadRequest,
    "invalid_image_format": BadRequest,
    "invalid_base64_image": BadRequest,
    "invalid_image_url": BadRequest,
    "image_too_large": BadRequest,
    "image_too_small": BadRequest,
    "image_parse_error": BadRequest,
    "image_content_policy_violation": BadRequest,
    "invalid_image_mode": BadRequest,
    "image_file_too_large": BadRequest,
    "unsupported_image_media_type": BadRequest,
    "empty_image_file": BadRequest,
    "failed_to_download_image": BadRequest,
    "image_file_not_found": BadRequest,
}


@pytest.mark.parametrize(("code", "kind"), _CODES.items())
async def test_every_documented_failure_code_is_classified(
    code: str, kind: type[ProviderError]
) -> None:
    # A bad prompt or image was an `Overloaded` (500): retried, then reported as an outage.
    error = {"code": code, "message": f"failed: {code}"}
    body = _as("response.failed", _response("failed", error=error), True)
    with pytest.raises(kind, match=code) as caught:
        await _answer(body, stream=True)
    assert caught.value.retryable == (kind is not BadRequest)
