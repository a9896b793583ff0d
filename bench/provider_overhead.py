"""The provider adapters' own cost: request building, response parsing, stream parsing.

    python bench/provider_overhead.py

No network: each adapter talks to an `httpx.MockTransport` that answers instantly with
a recorded response body (from ../shared/recordings, or the OpenAI stream fixture under
tests/providers/openai_fixtures). Printed per adapter: µs per non-streamed request
(build the body, encode, httpx round trip through the mock, decode, map), µs per
streamed request, and µs per streamed chunk (what a stream costs beyond a plain
request, spread over its chunks). Regressions show as larger figures.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))

import httpx
from _timing import measure, report

from golem.messages import Message, ToolCall
from golem.model import Model, ModelRequest, ToolSpec

try:
    from tests.providers import _recordings
except ImportError:  # pyyaml missing (it comes with the [dev] extra)
    _recordings = None  # type: ignore[assignment]

REQUEST = ModelRequest(
    messages=[
        Message(role="system", content="You tidy the workspace."),
        Message(role="user", content="Clean up old logs."),
        Message(role="assistant", tool_calls=[ToolCall("call_1", "list_files", '{"dir": "logs"}')]),
        Message(role="tool", content="a.log b.log", tool_call_id="call_1", tool_name="list_files"),
    ],
    tools=[
        ToolSpec(
            "list_files",
            "List files in a directory.",
            {"type": "object", "properties": {"dir": {"type": "string"}}, "required": ["dir"]},
        ),
        ToolSpec(
            "delete_file",
            "Delete a file.",
            {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        ),
    ],
)


def recorded(api: str, cassette: str, *, stream: bool) -> str:
    assert _recordings is not None
    for it in _recordings.load(api, cassette):
        if it.status == 200 and it.is_stream == stream:
            return it.body
    raise LookupError(f"no {'streamed' if stream else 'plain'} 200 response in {api}/{cassette}")


def chunks(body: str) -> int:
    return max(1, sum(1 for line in body.splitlines() if line.startswith("data:")))


def transport(body: str, content_type: str) -> httpx.AsyncClient:
    payload = body.encode()

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": content_type}, content=payload)

    return httpx.AsyncClient(transport=httpx.MockTransport(handler))


def bench(name: str, make: Callable[[httpx.AsyncClient], Model], plain: str, streamed: str) -> None:
    plain_model = make(transport(plain, "application/json"))
    stream_model = make(transport(streamed, "text/event-stream"))

    async def one() -> Any:
        return await plain_model.generate(REQUEST)

    async def one_stream() -> Any:
        async for _ in stream_model.generate_stream(REQUEST):  # type: ignore[attr-defined]
            pass

    per_request = measure(one, per_round=300)
    per_stream = measure(one_stream, per_round=200)
    n = chunks(streamed)
    report(f"{name}: request (build + mock round trip + parse)", per_request)
    report(f"{name}: streamed request ({n} chunks)", per_stream)
    # the fixed cost of a request is in both; what the stream adds is spread over its chunks
    report(
        f"{name}: per streamed chunk (beyond a plain request)",
        max(0.0, per_stream - per_request) / n,
    )


def main() -> None:
    if _recordings is None or not _recordings.available():
        print("recordings or pyyaml not available (pip install -e '.[dev]'); skipped")
        return
    client = transport('{"ok": true}', "application/json")

    async def bare() -> Any:
        return (await client.post("https://example.invalid/x", content=b"{}")).json()

    report("baseline: httpx mock round trip alone (included below)", measure(bare, per_round=300))
    from golem.providers.anthropic import AnthropicModel
    from golem.providers.gemini import GeminiModel
    from golem.providers.openai import OpenAIChatModel

    openai_stream = (ROOT / "tests/providers/openai_fixtures/stream_tool_calls.sse").read_text()
    bench(
        "openai",
        lambda c: OpenAIChatModel("gpt-4.1", api_key="k", http_client=c),
        recorded(
            "openai-chat", "test_document_as_binary_content_input_with_tool.yaml", stream=False
        ),
        openai_stream,
    )
    bench(
        "anthropic",
        lambda c: AnthropicModel("claude-sonnet-4-5", api_key="k", http_client=c),
        recorded("anthropic", "test_anthropic_tool_output.yaml", stream=False),
        recorded("anthropic", "test_anthropic_model_thinking_part_stream.yaml", stream=True),
    )
    bench(
        "gemini",
        lambda c: GeminiModel("gemini-2.5-flash", api_key="k", http_client=c),
        recorded("gemini", "test_google_tool_output.yaml", stream=False),
        recorded("gemini", "test_google_model_file_search_tool_stream.yaml", stream=True),
    )


if __name__ == "__main__":
    main()
