"""Bodies the recordings do not hold: errors and answers where a stream was expected, and
text with a lone surrogate escape.

- A streamed request answered with `application/json` (a proxy's error object with status
  200, or a server that ignored `stream: true`): the Anthropic and Responses adapters read
  it whole. Both used to report "stream ended before the response completed" and lose the
  error, or the answer.
- A non-streamed Anthropic body that is an error object is classified by its type.
- A lone surrogate escape (`"\\ud83d"`, half an emoji) is read as U+FFFD: strict JSON
  parsers refuse it, and the whole answer was lost to a `ResponseFormatError`.
"""

from __future__ import annotations

import pytest

from golem.errors import ResponseFormatError
from golem.model import ModelResponse
from tests.support.adapters import MODELS, send

LONE = "half \\ud83d of an emoji, \\ude00 and a whole \\ud83d\\ude00"


def _text_body(api: str, text_json: str) -> str:
    """A plain answer of `api` whose text is the JSON string literal body `text_json`."""
    t = f'"{text_json}"'
    if api == "openai-chat":
        return (
            '{"choices":[{"index":0,"message":{"role":"assistant","content":' + t + "},"
            '"finish_reason":"stop"}]}'
        )
    if api == "openai-responses":
        return (
            '{"id":"r","status":"completed","output":[{"type":"message","content":'
            '[{"type":"output_text","text":' + t + "}]}]}"
        )
    if api == "anthropic":
        return '{"content":[{"type":"text","text":' + t + '}],"stop_reason":"end_turn"}'
    return '{"candidates":[{"content":{"parts":[{"text":' + t + '}]},"finishReason":"STOP"}]}'


@pytest.mark.parametrize("api", list(MODELS))
async def test_a_lone_surrogate_escape_becomes_a_replacement_character(api: str) -> None:
    items = await send(api, _text_body(api, LONE), stream=False, ctype="application/json")
    final = items[-1]
    assert isinstance(final, ModelResponse)
    assert final.message.content == "half \ufffd of an emoji, \ufffd and a whole 😀"
    final.message.content.encode("utf-8")  # sendable back: no surrogate left


@pytest.mark.parametrize(
    "body", ['{"t": "\\ud800", "n": NaN}', '{"t": "\\ud800"', '["\\ud800"]', "\\ud800"]
)
async def test_other_bad_json_with_a_surrogate_is_still_a_format_error(body: str) -> None:
    with pytest.raises(ResponseFormatError):
        await send("anthropic", body, stream=False, ctype="application/json")
