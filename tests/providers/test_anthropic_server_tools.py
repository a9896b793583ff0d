"""Anthropic citations and server-tool blocks: kept as typed data, sent back verbatim (ADR 0028)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from golem import Agent, Citation, ServerToolBlock, dumps_history, loads_history
from golem.messages import Message, ThinkingBlock, ToolCall
from golem.model import ModelRequest, ModelResponse
from tests.support.adapters import body_of, parsed, streamed
from tests.support.anthropic import SEARCH_RESULT, model_on, synthesize_stream
from tests.support.recordings import available, load, replay_transport

recorded = pytest.mark.skipif(not available(), reason="shared recordings not present")

_dump = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode

CITATION = {
    "type": "web_search_result_location",
    "cited_text": "A golem is an animated being.",
    "url": "https://example.com/golem",
    "title": "Golem",
    "encrypted_index": "EncIdx==",
}
DOCUMENT_CITATION = {
    "type": "char_location",
    "cited_text": "clay",
    "document_index": 0,
    "document_title": "Notes",
    "start_char_index": 0,
    "end_char_index": 4,
}
BODY: dict[str, Any] = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-x",
    "content": [
        {"type": "thinking", "thinking": "Search first.", "signature": "sig1"},
        {"type": "text", "text": "Let me search."},
        {
            "type": "server_tool_use",
            "id": "srvtoolu_1",
            "name": "web_search",
            "input": {"query": "golem"},
        },
        SEARCH_RESULT,
        {"type": "text", "text": "In folklore, "},
        {"type": "text", "text": "a golem is made of clay", "citations": [CITATION]},
        {"type": "text", "text": " and "},
        {"type": "text", "text": "comes alive", "citations": [DOCUMENT_CITATION]},
        {"type": "text", "text": "."},
    ],
    "stop_reason": "end_turn",
    "usage": {"input_tokens": 10, "output_tokens": 5},
}
CONTENT = "Let me search.\n\nIn folklore, a golem is made of clay and comes alive."


def _sent(message: Message) -> list[dict[str, Any]]:
    """The content blocks the adapter sends for `message` after a user turn."""
    request = ModelRequest(messages=[Message(role="user", content="hi"), message])
    content: list[dict[str, Any]] = body_of("anthropic", request)["messages"][1]["content"]
    return content


def test_blocks_and_citations_are_typed_and_text_runs_stay_apart() -> None:
    message = parsed("anthropic", BODY).message
    assert message.content == CONTENT
    cited = CONTENT.index("a golem")
    alive = CONTENT.index("comes alive")
    assert message.citations == [
        Citation(start=cited, end=cited + len("a golem is made of clay"),
                 url="https://example.com/golem", title="Golem",
                 cited_text="A golem is an animated being.", provider="anthropic",
                 raw=_dump(CITATION)),
        Citation(start=alive, end=alive + len("comes alive"), title="Notes", cited_text="clay",
                 provider="anthropic", raw=_dump(DOCUMENT_CITATION)),
    ]
    assert message.server_tools == [
        ServerToolBlock(provider="anthropic", type=block["type"], id="srvtoolu_1",
                        name="web_search", raw=_dump(block), at=len("Let me search."),
                        thinking_before=1)
        for block in (BODY["content"][2], SEARCH_RESULT)
    ]
    assert message.server_tools[1].data()["content"][0]["encrypted_content"] == "EncA=="
    assert message.tool_calls == []


def test_a_streamed_response_equals_the_plain_one() -> None:
    events = [(e["type"], json.dumps(e)) for e in synthesize_stream(BODY, size=4)]
    assert any('"citations_delta"' in data for _, data in events)
    final = streamed("anthropic", events)[-1]
    assert final == parsed("anthropic", BODY)


def test_the_next_turn_sends_the_blocks_back_where_they_sat() -> None:
    message = parsed("anthropic", BODY).message
    request = ModelRequest(
        messages=[
            Message(role="user", content="golem?"),
            message,
            Message(role="user", content="and?"),
        ]
    )
    content = body_of("anthropic", request, "claude-x")["messages"][1]["content"]
    assert content == [
        {"type": "thinking", "thinking": "Search first.", "signature": "sig1"},
        {"type": "text", "text": "Let me search."},
        BODY["content"][2],
        SEARCH_RESULT,
        {"type": "text", "text": "In folklore, "},
        # a self-contained web-search citation goes back on its text...
        {"type": "text", "text": "a golem is made of clay", "citations": [CITATION]},
        # ...a document citation, which points into the request by index, does not
        {"type": "text", "text": " and comes alive."},
    ]


def test_a_saved_history_sends_the_same_body() -> None:
    message = parsed("anthropic", BODY).message
    history = [Message(role="user", content="golem?"), message]
    loaded = loads_history(dumps_history(history))
    assert loaded == history
    assert body_of("anthropic", ModelRequest(messages=loaded), "m") == body_of("anthropic",
        ModelRequest(messages=history), "m"
    )


def test_whitespace_between_citations_joins_the_block_before() -> None:
    cited = {"type": "text", "text": "One.", "citations": [CITATION]}
    body = {
        **BODY,
        "content": [
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}},
            SEARCH_RESULT,
            cited,
            {"type": "text", "text": " "},
            {**cited, "text": "Two."},
        ],
    }
    message = parsed("anthropic", body).message
    assert message.content == "One. Two."
    content = _sent(message)
    assert content[2:] == [
        {"type": "text", "text": "One. ", "citations": [CITATION]},
        {"type": "text", "text": "Two.", "citations": [CITATION]},
    ]


def test_other_providers_never_receive_the_blocks() -> None:
    message = parsed("anthropic", BODY).message
    request = ModelRequest(messages=[Message(role="user", content="golem?"), message])
    bodies = [
        body_of("openai-chat", request, model="gpt-x"),
        body_of("openai-responses", request, model="gpt-x"),
        body_of("gemini", request),
    ]
    for body in bodies:
        text = json.dumps(body)
        assert "srvtoolu_1" not in text
        assert "EncIdx" not in text
        assert "In folklore, a golem is made of clay and comes alive." in text


def test_a_client_tool_call_after_server_blocks_comes_last() -> None:
    body = {
        **BODY,
        "content": [
            {"type": "text", "text": "Searching."},
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}},
            SEARCH_RESULT,
            {"type": "text", "text": "Now saving."},
            {"type": "tool_use", "id": "toolu_1", "name": "save", "input": {"x": 1}},
        ],
        "stop_reason": "tool_use",
    }
    message = parsed("anthropic", body).message
    assert message.tool_calls == [ToolCall("toolu_1", "save", '{"x": 1}')]
    content = _sent(message)
    assert [b["type"] for b in content] == [
        "text",
        "server_tool_use",
        "web_search_tool_result",
        "text",
        "tool_use",
    ]
    assert content[3] == {"type": "text", "text": "Now saving."}


def test_a_signature_only_thinking_block_beside_server_blocks_is_replayed() -> None:
    message = Message(
        role="assistant",
        content="4",
        thinking=[ThinkingBlock(signature="sigA")],
        server_tools=[
            ServerToolBlock(
                provider="anthropic",
                type="server_tool_use",
                id="srvtoolu_9",
                name="advisor",
                raw='{"type":"server_tool_use","id":"srvtoolu_9","name":"advisor","input":{}}',
                thinking_before=1,
            )
        ],
    )
    content = _sent(message)
    assert content[0] == {"type": "thinking", "thinking": "", "signature": "sigA"}


@recorded
def test_recorded_web_search_stream_keeps_citations_and_search_results() -> None:
    it = load("anthropic", "test_anthropic_web_search_tool_stream.yaml")[0]
    final = streamed("anthropic", it.body)[-1]
    assert isinstance(final, ModelResponse)
    message = final.message
    assert message.content.startswith(
        "Let me search for more specific breaking news stories to get clearer headlines.\n\n"
        "Based on the search results"
    )
    assert [(b.type, b.id, b.name, b.at) for b in message.server_tools] == [
        ("server_tool_use", "srvtoolu_01NcU4XNwyxWK6a9tcJZ8wGY", "web_search", 0),
        ("web_search_tool_result", "srvtoolu_01NcU4XNwyxWK6a9tcJZ8wGY", "web_search", 0),
        ("server_tool_use", "srvtoolu_01WiP3ZfXZXSykVQEL78XJ4T", "web_search", 79),
        ("web_search_tool_result", "srvtoolu_01WiP3ZfXZXSykVQEL78XJ4T", "web_search", 79),
    ]
    assert message.server_tools[0].data()["input"] == {"query": "top world news today"}
    results = message.server_tools[1].data()["content"]
    assert results[0]["url"] == "https://www.cnn.com/world"
    assert results[0]["encrypted_content"].startswith("EtweCioIBhgC")
    assert len(message.citations) == 9
    first = message.citations[0]
    assert message.content[first.start : first.end].startswith(
        "European leaders held a high-stakes meeting Wednesday"
    )
    assert first.url == "https://www.npr.org/sections/news/"
    assert first.title == "News: U.S. and World News Headlines : NPR"
    assert json.loads(first.raw)["encrypted_index"].startswith("EpABCioIBhgC")
    assert all(c.start < c.end <= len(message.content) for c in message.citations)
    # the next turn gets the searches (encrypted results included) and the cited text back
    request = ModelRequest(messages=[Message(role="user", content="news?"), message])
    sent = body_of("anthropic", request)["messages"][1]["content"]
    assert [b for b in sent if b["type"] != "text"] == [
        json.loads(b.raw) for b in message.server_tools
    ]
    assert sum(len(b.get("citations", ())) for b in sent) == 9
    assert "".join(b["text"] for b in sent if b["type"] == "text") == message.content.replace(
        "\n\n", "", 1
    )


def _without_null_citations(value: Any) -> Any:
    """Recorded requests (written by another client) spell absent citations `null`."""
    if isinstance(value, dict):
        return {
            k: _without_null_citations(v)
            for k, v in value.items()
            if not (k == "citations" and v is None)
        }
    if isinstance(value, list):
        return [_without_null_citations(v) for v in value]
    return value


@recorded
@pytest.mark.parametrize(
    ("cassette", "extra_body"),
    [
        (
            "test_anthropic_advisor_tool_message_replay.yaml",
            {
                "tools": [
                    {
                        "type": "advisor_20260301",
                        "name": "advisor",
                        "model": "claude-opus-4-8",
                        "max_tokens": 1024,
                    }
                ]
            },
        ),
        ("test_anthropic_mcp_servers.yaml", None),
    ],
)
async def test_recorded_second_turn_sends_the_server_blocks_back(
    cassette: str, extra_body: dict[str, Any] | None
) -> None:
    first, second = load("anthropic", cassette)[:2]
    seen: list[httpx.Request] = []
    async with model_on(replay_transport([first, second], seen), extra_body=extra_body) as model:
        prompt = Message(
            role="user", content=first.request_body["messages"][0]["content"][0]["text"]
        )
        answer = await model.generate(ModelRequest(messages=[prompt]))
        assert answer.message.server_tools  # kept, not dropped
        history = loads_history(dumps_history([prompt, answer.message]))
        follow_up = second.request_body["messages"][2]["content"][0]["text"]
        await model.generate(
            ModelRequest(messages=[*history, Message(role="user", content=follow_up)])
        )
    sent = json.loads(seen[1].content)["messages"]
    assert sent == _without_null_citations(second.request_body["messages"])


async def test_an_agent_run_keeps_the_blocks_and_the_next_run_sends_them() -> None:
    follow_up = {**BODY, "content": [{"type": "text", "text": "Yes."}]}
    bodies = [BODY, follow_up]
    seen: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return httpx.Response(200, json=bodies[len(seen) - 1])

    async with model_on(httpx.MockTransport(handler)) as model:
        agent: Agent[None, str] = Agent(model)
        first = await agent.run("What is a golem?")
        answer = first.messages[-1]
        assert answer.content == CONTENT
        assert [b.type for b in answer.server_tools] == [
            "server_tool_use",
            "web_search_tool_result",
        ]
        assert len(answer.citations) == 2
        saved = loads_history(dumps_history(first.messages))
        await agent.run("Sure?", history=saved)
    assert [b["type"] for b in seen[1]["messages"][1]["content"]] == [
        "thinking",
        "text",
        "server_tool_use",
        "web_search_tool_result",
        "text",
        "text",
        "text",
    ]


_words = st.text(alphabet="abc xyz.", min_size=1, max_size=8).filter(lambda t: t.strip() == t != "")


@st.composite
def _turns(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Content blocks as Anthropic sends them: stretches of thinking (where no text came
    just before), text runs (several adjacent blocks), then a server tool's call and result."""
    blocks: list[dict[str, Any]] = []
    for n in range(draw(st.integers(0, 3)) + 1):
        if not blocks or blocks[-1]["type"] != "text":  # ADR 0028: thinking leads a stretch
            for k in range(draw(st.integers(0, 1))):
                thought = {"type": "thinking", "thinking": f"t{n}{k}", "signature": f"s{n}{k}"}
                blocks.append(thought)
        blocks.extend({"type": "text", "text": t} for t in draw(st.lists(_words, max_size=2)))
        if draw(st.booleans()):
            use_id = f"srvtoolu_{n}"
            blocks.append(
                {"type": "server_tool_use", "id": use_id, "name": "web_search", "input": {"q": n}}
            )
            blocks.append({**SEARCH_RESULT, "tool_use_id": use_id})
    return blocks


def _merged(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Adjacent text blocks as one (the message keeps one text per run)."""
    out: list[dict[str, Any]] = []
    for b in blocks:
        if b["type"] == "text" and out and out[-1]["type"] == "text":
            out[-1] = {"type": "text", "text": out[-1]["text"] + b["text"]}
        else:
            out.append(dict(b))
    return out


@settings(deadline=None)
@given(_turns())
def test_any_interleaving_goes_back_as_it_came(blocks: list[dict[str, Any]]) -> None:
    body = {**BODY, "content": blocks}
    message = parsed("anthropic", body).message
    history = loads_history(dumps_history([Message(role="user", content="q"), message]))
    sent = body_of("anthropic", ModelRequest(messages=history), "m")["messages"][1:]
    assert sent == ([{"role": "assistant", "content": _merged(blocks)}] if blocks else [])
    events = [(e["type"], json.dumps(e)) for e in synthesize_stream(body, size=3)]
    assert streamed("anthropic", events)[-1] == parsed("anthropic", body)
