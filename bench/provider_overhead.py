"""The provider adapters' own cost, beside the official SDKs parsing the same bytes.

    python bench/provider_overhead.py          # pip install -e '.[dev,bench]' for the SDK columns

No network: every client (golem's adapters and the SDKs: `openai`, `anthropic`,
`google-genai`) talks to an `httpx.MockTransport` that answers instantly with a recorded
body (from ../shared/recordings, or the OpenAI stream fixtures under
tests/providers/openai_fixtures). A column whose SDK is not installed is skipped.

Printed per adapter:
- µs per non-streamed request (build, encode, mock round trip, decode, map);
- µs per streamed request of the recorded stream;
- µs per streamed chunk: the marginal cost of one more chunk. The recorded stream's
  delta events are repeated (x1 and x21) and the difference in time is divided by the
  difference in chunks, so the fixed cost of a request (building it, the round trip, the
  final response) cancels out — for golem and for the SDK alike. The SDKs iterate their
  raw event stream (`create(stream=True)`), building their typed chunk objects but no
  accumulated message: golem's figure also includes the final `ModelResponse`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Callable
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
    from tests.support import recordings as _recordings
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
REPEAT = 21
"""The long stream repeats each delta event this many times."""


def recorded(api: str, cassette: str, *, stream: bool) -> str:
    assert _recordings is not None
    for it in _recordings.load(api, cassette):
        if it.status == 200 and it.is_stream == stream:
            return it.body
    raise LookupError(f"no {'streamed' if stream else 'plain'} 200 response in {api}/{cassette}")


def chunks(body: str) -> int:
    return max(1, sum(1 for line in body.splitlines() if line.startswith("data:")))


def amplify(body: str, is_delta: Callable[[dict[str, Any]], bool], times: int) -> str:
    """`body` with each SSE event whose JSON data `is_delta` repeated `times` times."""
    out: list[str] = []
    for block in body.replace("\r\n", "\n").split("\n\n"):
        if not block.strip():
            continue
        data = "\n".join(
            line[5:].lstrip() for line in block.splitlines() if line.startswith("data:")
        )
        try:
            repeat = is_delta(json.loads(data)) if data and data != "[DONE]" else False
        except ValueError:
            repeat = False
        out.extend([block] * (times if repeat else 1))
    return "\n\n".join(out) + "\n\n"


def openai_delta(event: dict[str, Any]) -> bool:
    choices = event.get("choices") or []
    return (
        bool(choices)
        and not choices[0].get("finish_reason")
        and "role" not in choices[0].get("delta", {})
    )


def anthropic_delta(event: dict[str, Any]) -> bool:
    return event.get("type") == "content_block_delta"


def gemini_delta(event: dict[str, Any]) -> bool:
    candidates = event.get("candidates") or []
    return bool(candidates) and not candidates[0].get("finishReason")


def client_for(body: str, content_type: str) -> httpx.AsyncClient:
    payload = body.encode()

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": content_type}, content=payload)

    return httpx.AsyncClient(transport=httpx.MockTransport(handler))


def sdk_client_for(body: str) -> Any:
    """An async client of the SDKs' HTTP library (httpx2 in current SDKs, else httpx)."""
    try:
        import httpx2
    except ImportError:
        return client_for(body, "text/event-stream")
    payload = body.encode()

    def handler(request: Any) -> Any:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=payload)

    return httpx2.AsyncClient(transport=httpx2.MockTransport(handler))


Consume = Callable[[Any], Awaitable[object]]
"""One full streamed request with a client whose transport answers with the stream."""


def per_chunk(
    consume: Consume, body: str, is_delta: Callable[[dict[str, Any]], bool], *, sdk: bool = False
) -> float:
    """µs per additional chunk (see the module docstring)."""
    short, long = amplify(body, is_delta, 1), amplify(body, is_delta, REPEAT)
    extra = chunks(long) - chunks(short)
    if sdk:
        short_client, long_client = sdk_client_for(short), sdk_client_for(long)
    else:
        short_client = client_for(short, "text/event-stream")
        long_client = client_for(long, "text/event-stream")
    t_short = measure(lambda: consume(short_client), per_round=150)
    t_long = measure(lambda: consume(long_client), per_round=40)
    return max(0.0, t_long - t_short) / extra


def golem_stream(make: Callable[[httpx.AsyncClient], Model]) -> Consume:
    async def consume(client: httpx.AsyncClient) -> object:
        async for _ in make(client).generate_stream(REQUEST):  # type: ignore[attr-defined]
            pass
        return None

    return consume


_SDKS: dict[tuple[int, int], tuple[Any, Any]] = {}


def built(client: Any, make: Callable[[], Any]) -> Any:
    """One SDK client per HTTP client (and consumer): building it is setup, not parsing."""
    key = (id(client), id(make.__code__))
    entry = _SDKS.get(key)
    if entry is None or entry[0] is not client:
        entry = _SDKS[key] = (client, make())
    return entry[1]


def iterate(open_stream: Callable[[Any], Awaitable[Any]]) -> Consume:
    """Iterate an SDK's stream: its typed chunk objects."""

    async def consume(client: Any) -> object:
        async for _ in await open_stream(client):
            pass
        return None

    return consume


def decode(open_stream: Callable[[Any], Awaitable[Any]]) -> Consume:
    """Only the SDK's SSE decoder and `json` on each event: no objects built."""

    async def consume(client: Any) -> object:
        stream = await open_stream(client)
        async for sse in stream._iter_events():
            if sse.data != "[DONE]":
                sse.json()
        return None

    return consume


def sdk_columns() -> tuple[dict[str, Consume], dict[str, Consume]]:
    """Consumers per provider whose SDK is installed: its raw event iteration (typed chunk
    objects), and its decoding layer alone (its SSE decoder and `json`, no objects)."""
    out: dict[str, Consume] = {}
    floor: dict[str, Consume] = {}
    try:
        import openai
    except ImportError:
        pass
    else:

        async def openai_stream(client: Any) -> Any:
            sdk = built(
                client, lambda: openai.AsyncOpenAI(api_key="k", http_client=client, max_retries=0)
            )
            return await sdk.chat.completions.create(
                model="gpt-4.1", messages=[{"role": "user", "content": "hi"}], stream=True
            )

        out["openai"], floor["openai"] = iterate(openai_stream), decode(openai_stream)
    try:
        import anthropic
    except ImportError:
        pass
    else:

        async def anthropic_stream(client: Any) -> Any:
            sdk = built(
                client,
                lambda: anthropic.AsyncAnthropic(api_key="k", http_client=client, max_retries=0),
            )
            return await sdk.messages.create(
                model="claude-sonnet-4-5",
                max_tokens=1024,
                messages=[{"role": "user", "content": "hi"}],
                stream=True,
            )

        out["anthropic"], floor["anthropic"] = iterate(anthropic_stream), decode(anthropic_stream)
    try:
        from google import genai
        from google.genai import types
    except ImportError:
        pass
    else:

        async def gemini_stream(client: Any) -> Any:
            sdk = built(
                client,
                lambda: genai.Client(
                    api_key="k", http_options=types.HttpOptions(httpx_async_client=client)
                ),
            )
            return await sdk.aio.models.generate_content_stream(
                model="gemini-2.5-flash", contents="hi"
            )

        out["gemini"] = iterate(gemini_stream)
    return out, floor


def main() -> None:
    if _recordings is None or not _recordings.available():
        print("recordings or pyyaml not available (pip install -e '.[dev]'); skipped")
        return
    client = client_for('{"ok": true}', "application/json")

    async def bare() -> Any:
        return (await client.post("https://example.invalid/x", content=b"{}")).json()

    report("baseline: httpx mock round trip alone (included below)", measure(bare, per_round=300))
    from golem.providers.anthropic import AnthropicModel
    from golem.providers.gemini import GeminiModel
    from golem.providers.openai import OpenAIChatModel

    cases: list[tuple[str, Callable[[httpx.AsyncClient], Model], str, str, Any]] = [
        (
            "openai",
            lambda c: OpenAIChatModel("gpt-4.1", api_key="k", http_client=c),
            recorded(
                "openai-chat", "test_document_as_binary_content_input_with_tool.yaml", stream=False
            ),
            (ROOT / "tests/providers/openai_fixtures/stream_text.sse").read_text(),
            openai_delta,
        ),
        (
            "anthropic",
            lambda c: AnthropicModel("claude-sonnet-4-5", api_key="k", http_client=c),
            recorded("anthropic", "test_anthropic_tool_output.yaml", stream=False),
            recorded("anthropic", "test_anthropic_model_thinking_part_stream.yaml", stream=True),
            anthropic_delta,
        ),
        (
            "gemini",
            lambda c: GeminiModel("gemini-2.5-flash", api_key="k", http_client=c),
            recorded("gemini", "test_google_tool_output.yaml", stream=False),
            recorded("gemini", "test_google_model_thinking_part_iter.yaml", stream=True),
            gemini_delta,
        ),
    ]
    sdks, floors = sdk_columns()
    for name, make, plain, streamed, is_delta in cases:
        plain_client = client_for(plain, "application/json")
        plain_model = make(plain_client)

        async def one(model: Model = plain_model) -> Any:
            return await model.generate(REQUEST)

        stream_client = client_for(streamed, "text/event-stream")
        report(f"{name}: request (build + mock round trip + parse)", measure(one, per_round=300))
        report(
            f"{name}: streamed request ({chunks(streamed)} chunks)",
            measure(lambda c=stream_client, m=make: golem_stream(m)(c), per_round=150),
        )
        ours = per_chunk(golem_stream(make), streamed, is_delta)
        report(f"{name}: per streamed chunk, golem", ours)
        sdk = sdks.get(name)
        if sdk is None:
            print(f"{name}: per streamed chunk, official SDK            (not installed: skipped)")
            continue
        theirs = per_chunk(sdk, streamed, is_delta, sdk=True)
        report(f"{name}: per streamed chunk, official SDK", theirs)
        ratio = ours / theirs if theirs else float("inf")
        print(f"{name}: golem / SDK per chunk{'':<33} {ratio:>10.2f} ×")
        decode = floors.get(name)
        if decode is not None:
            bare = per_chunk(decode, streamed, is_delta, sdk=True)
            report(f"{name}: per chunk, the SDK's SSE decoder + json alone", bare)
            print(
                f"{name}: golem / SDK decoder alone{'':<29} {ours / bare if bare else 0:>10.2f} ×"
            )


if __name__ == "__main__":
    main()
