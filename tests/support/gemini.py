"""Helpers shared by the Gemini adapter tests: recorded bodies, body comparison, fake streams."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable
from typing import Any

import httpx

from golem.providers.gemini import GeminiModel
from tests.support.recordings import Interaction, load

API = "gemini"

# Names the google-genai SDK (which recorded the cassettes) writes in snake_case; the API
# accepts both spellings, the adapter writes camelCase.
_SNAKE_FIELDS = {
    "parameters_json_schema": "parametersJsonSchema",
    "include_thoughts": "includeThoughts",
    "thinking_budget": "thinkingBudget",
    "inline_data": "inlineData",
    "file_data": "fileData",
    "mime_type": "mimeType",
    "file_uri": "fileUri",
    "function_call": "functionCall",
    "function_response": "functionResponse",
    "thought_signature": "thoughtSignature",
}
_SCHEMA_KEYS = ("parametersJsonSchema", "responseJsonSchema", "args")


def is_generate(it: Interaction) -> bool:
    """Whether an interaction is a Gemini `generateContent` / `streamGenerateContent` call."""
    path = it.uri.split("?", 1)[0]
    return "/v1beta/models/" in path and path.endswith(
        (":generateContent", ":streamGenerateContent")
    )


def recorded(name: str, index: int) -> Interaction:
    """One interaction of a Gemini cassette (`name` without `.yaml`)."""
    return load(API, f"{name}.yaml")[index]


def recorded_generate(name: str) -> list[Interaction]:
    """The generateContent interactions of a cassette, in order."""
    return [it for it in load(API, f"{name}.yaml") if is_generate(it)]


def normalize(value: Any, key: str = "") -> Any:
    """Recorded request body in the adapter's spelling.

    snake_case proto field names become camelCase (never inside schemas or arguments),
    and base64 (thought signatures, inline data; the SDK writes the URL-safe alphabet)
    becomes the decoded bytes so both alphabets compare equal.
    """
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            name = _SNAKE_FIELDS.get(k, k)
            if name in _SCHEMA_KEYS:
                out[name] = v
            elif name == "thoughtSignature" or (name == "data" and key == "inlineData"):
                out[name] = _b64(v)
            else:
                out[name] = normalize(v, name)
        return out
    if isinstance(value, list):
        return [normalize(v, key) for v in value]
    return value


def _b64(text: str) -> bytes:
    padded = text + "=" * (-len(text) % 4)
    return base64.b64decode(padded.replace("-", "+").replace("_", "/"))


def assert_subset(mine: Any, recorded_value: Any, path: str = "body") -> None:
    """Every field the adapter set must be present in the recording with the same value."""
    if isinstance(mine, dict):
        assert isinstance(recorded_value, dict), f"{path}: recorded {recorded_value!r}"
        for k, v in mine.items():
            assert k in recorded_value, f"{path}.{k} is set by the adapter but not recorded"
            assert_subset(v, recorded_value[k], f"{path}.{k}")
    elif isinstance(mine, list):
        assert isinstance(recorded_value, list), f"{path}: recorded {recorded_value!r}"
        assert len(mine) == len(recorded_value), (
            f"{path}: {len(mine)} items, recorded {len(recorded_value)}"
        )
        for i, (a, b) in enumerate(zip(mine, recorded_value, strict=True)):
            assert_subset(a, b, f"{path}[{i}]")
    else:
        assert mine == recorded_value, f"{path}: {mine!r} != recorded {recorded_value!r}"


def rename_tool_output_key(body: dict[str, Any]) -> dict[str, Any]:
    """Pydantic AI wraps tool output as `{"return_value": ...}`; the adapter follows the
    Gemini API reference and writes `{"output": ...}`. Everything else must match."""
    for content in body.get("contents", []):
        for part in content.get("parts", []):
            response = part.get("functionResponse", {}).get("response")
            if isinstance(response, dict) and "return_value" in response:
                response["output"] = response.pop("return_value")
    return body


def sse_body(chunks: Iterable[dict[str, Any]]) -> bytes:
    """A `streamGenerateContent?alt=sse` body for the given response objects."""
    return "".join(f"data: {json.dumps(c)}\r\n\r\n" for c in chunks).encode()


def model_with(
    handler: Callable[[httpx.Request], httpx.Response], **kw: Any
) -> tuple[GeminiModel, httpx.AsyncClient]:
    """A model whose requests go to `handler` (an httpx MockTransport)."""
    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    kw.setdefault("api_key", "test-key")
    return GeminiModel(kw.pop("model", "gemini-2.5-flash"), http_client=client, **kw), client
