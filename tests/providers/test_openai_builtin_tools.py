"""OpenAI citations and built-in tool items: kept as typed data, sent back where the API
allows it (ADR 0028). Responses API items and annotations; Chat Completions url_citations."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from golem import Citation, ServerToolBlock, dumps_history, loads_history
from golem.messages import Message, ThinkingBlock
from golem.model import ModelRequest, ModelResponse
from golem.providers.openai import OpenAIResponsesModel
from tests.support.adapters import body_of, parsed, streamed
from tests.support.recordings import available, load, replay_transport

recorded = pytest.mark.skipif(not available(), reason="shared recordings not present")
API = "openai-responses"
_dump = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode

SEARCH = {
    "type": "web_search_call",
    "id": "ws_1",
    "status": "completed",
    "action": {"type": "search", "query": "golem"},
}
COMPACTION = {"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAA"}
URL_CITATION = {
    "type": "url_citation",
    "start_index": 13,
    "end_index": 31,
    "url": "https://example.com/golem",
    "title": "Golem",
}
OUTPUT: list[dict[str, Any]] = [
    {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "enc1"},
    SEARCH,
    {"type": "reasoning", "id": "rs_2", "summary": [], "encrypted_content": "enc2"},
    {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "completed",
        "content": [
            {
                "type": "output_text",
                "text": "A golem is ([example.com](x)) clay.",
                "annotations": [URL_CITATION],
            },
            {"type": "output_text", "text": " More.", "annotations": []},
        ],
    },
]
BODY: dict[str, Any] = {"status": "completed", "model": "gpt-5", "output": OUTPUT}


def test_items_and_annotations_are_typed() -> None:
    message = parsed(API, BODY).message
    assert message.content == "A golem is ([example.com](x)) clay. More."
    assert message.citations == [
        Citation(start=13, end=31, url="https://example.com/golem", title="Golem",
                 provider="openai-responses", raw=_dump(URL_CITATION))
    ]
    assert message.server_tools == [
        ServerToolBlock(provider="openai-responses", type="web_search_call", id="ws_1",
                        name="web_search", raw=_dump(SEARCH), at=0, thinking_before=1)
    ]
    assert message.server_tools[0].data()["action"]["query"] == "golem"


def test_text_after_a_builtin_item_is_one_run_and_separated_from_the_text_before() -> None:
    texts = [{"type": "output_text", "text": t} for t in ("First part,", " second part.")]
    output = [
        {"type": "message", "content": [{"type": "output_text", "text": "Searching."}]},
        SEARCH,
        {"type": "message", "content": texts},
    ]
    message = parsed(API, {**BODY, "output": output}).message
    assert message.content == "Searching.\n\nFirst part, second part."
    assert message.server_tools[0].at == len("Searching.")


def _input(message: Message, *, store: bool) -> list[dict[str, Any]]:
    request = ModelRequest(messages=[Message(role="user", content="q"), message])
    items: list[dict[str, Any]] = body_of(API, request, "gpt-5", store=store)["input"][1:]
    return items


def test_with_store_the_items_go_back_in_their_order() -> None:
    message = parsed(API, BODY).message
    assert _input(message, store=True) == [
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "enc1"},
        SEARCH,
        {"type": "reasoning", "id": "rs_2", "summary": [], "encrypted_content": "enc2"},
        {"role": "assistant", "content": "A golem is ([example.com](x)) clay. More."},
    ]


def test_stateless_requests_keep_items_out_except_compaction() -> None:
    output = [COMPACTION, *OUTPUT]
    message = parsed(API, {**BODY, "output": output}).message
    assert [b.type for b in message.server_tools] == ["compaction", "web_search_call"]
    assert _input(message, store=False) == [
        COMPACTION,  # carries its content encrypted, like reasoning
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "enc1"},
        {"type": "reasoning", "id": "rs_2", "summary": [], "encrypted_content": "enc2"},
        {"role": "assistant", "content": "A golem is ([example.com](x)) clay. More."},
    ]


def test_text_split_by_an_item_goes_back_as_two_messages() -> None:
    output = [
        {"type": "message", "content": [{"type": "output_text", "text": "Searching."}]},
        SEARCH,
        {"type": "message", "content": [{"type": "output_text", "text": "Found it."}]},
    ]
    message = parsed(API, {**BODY, "output": output}).message
    assert _input(message, store=True) == [
        {"role": "assistant", "content": "Searching."},
        SEARCH,
        {"role": "assistant", "content": "Found it."},
    ]
    assert _input(message, store=False) == [
        {"role": "assistant", "content": "Searching.\n\nFound it."}
    ]


def test_a_saved_history_sends_the_same_body_and_other_providers_get_only_text() -> None:
    message = parsed(API, BODY).message
    history = [Message(role="user", content="q"), message]
    loaded = loads_history(dumps_history(history))
    assert loaded == history
    assert body_of(API, ModelRequest(messages=loaded), store=True) == body_of(
        API, ModelRequest(messages=history), store=True
    )
    request = ModelRequest(messages=loaded)
    for body in (body_of("anthropic", request, model="claude-x"), body_of("gemini", request)):
        text = json.dumps(body)
        assert "ws_1" not in text
        assert "A golem is ([example.com](x)) clay. More." in text


def test_file_citations_point_at_an_index() -> None:
    annotation = {"type": "file_citation", "file_id": "file-1", "filename": "notes.txt", "index": 5}
    output = [
        {
            "type": "message",
            "content": [{"type": "output_text", "text": "Paris.", "annotations": [annotation]}],
        }
    ]
    message = parsed(API, {**BODY, "output": output}).message
    assert message.citations == [
        Citation(
            start=5, end=5, title="notes.txt", provider="openai-responses", raw=_dump(annotation)
        )
    ]


@recorded
def test_recorded_web_search_annotations_are_citations() -> None:
    it = load(API, "test_openai_responses_model_builtin_tools_web_search.yaml")[0]
    message = parsed(API, it.json).message
    assert [b.type for b in message.server_tools].count("web_search_call") >= 1
    assert len(message.citations) == 3
    first = message.citations[0]
    assert message.content[first.start : first.end].startswith("([reuters.com](https://www.reuters")
    assert first.url.startswith("https://www.reuters.com/world/middle-east/un-overwhelmingly")
    assert first.title == (
        "UN overwhelmingly endorses two-state solution declaration that condemns Hamas"
    )


@recorded
def test_recorded_streamed_annotations_equal_the_final_response() -> None:
    it = load(API, "test_openai_include_raw_annotations_streaming.yaml")[0]
    items = streamed(API, it.body)
    final = items[-1]
    assert isinstance(final, ModelResponse)
    message = final.message
    assert "".join(d.content for d in items[:-1] if not isinstance(d, ModelResponse)) == (
        message.content
    )
    (citation,) = message.citations
    assert citation.url == "https://www.britannica.com/place/Mount-Columbia?utm_source=openai"
    assert citation.title == "Mount Columbia | mountain, Alberta, Canada | Britannica"
    assert message.content[citation.start : citation.end] == (
        "([britannica.com](https://www.britannica.com/place/Mount-Columbia?utm_source=openai))"
    )
    assert [b.type for b in message.server_tools] == ["web_search_call", "web_search_call"]
    assert message.server_tools[0].data()["action"]["type"] == "search"


@recorded
@pytest.mark.parametrize(
    "cassette",
    [
        "test_openai_responses_model_web_search_tool.yaml",
        "test_openai_responses_model_mcp_server_tool.yaml",
        "test_openai_responses_thinking_with_code_execution_tool.yaml",
        "test_openai_responses_code_execution_return_image.yaml",
    ],
)
async def test_recorded_second_turn_sends_the_items_back_in_recorded_order(cassette: str) -> None:
    first, second = load(API, cassette)[:2]
    seen: list[httpx.Request] = []
    async with httpx.AsyncClient(transport=replay_transport([first, second], seen)) as client:
        model = OpenAIResponsesModel("gpt-5", api_key="k", http_client=client, store=True)
        prompt = Message(role="user", content=second.request_body["input"][0]["content"])
        answer = await model.generate(ModelRequest(messages=[prompt]))
        history = loads_history(dumps_history([prompt, answer.message]))
        follow_up = Message(role="user", content=second.request_body["input"][-1]["content"])
        await model.generate(ModelRequest(messages=[*history, follow_up]))
    sent = json.loads(seen[1].content)["input"]
    recorded_input = second.request_body["input"]

    def order(items: list[dict[str, Any]]) -> list[tuple[str, str]]:
        return [
            (i.get("type", "message"), i.get("id", ""))
            for i in items
            if i.get("type") not in (None, "message")
        ]

    assert order(sent) == order(recorded_input)
    kept = {b.id: b.data() for b in answer.message.server_tools}
    for item in sent:
        if item.get("id") in kept:
            assert item == kept[item["id"]]  # verbatim, as the response gave it


CHAT_ANNOTATION = {
    "type": "url_citation",
    "url_citation": {
        "start_index": 6,
        "end_index": 13,
        "url": "https://example.com/w",
        "title": "Weather",
    },
}


def test_chat_url_citations_are_kept_streamed_and_plain_alike() -> None:
    body = {
        "model": "gpt-4o-search-preview",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {
                    "role": "assistant",
                    "content": "Sunny (w.com).",
                    "annotations": [CHAT_ANNOTATION],
                },
            }
        ],
    }
    plain = parsed("openai-chat", body)
    assert plain.message.citations == [
        Citation(
            start=6,
            end=13,
            url="https://example.com/w",
            title="Weather",
            provider="openai",
            raw=_dump(CHAT_ANNOTATION),
        )
    ]
    chunks = [
        {"model": body["model"], "choices": [{"index": 0, "delta": {"content": "Sunny "}}]},
        {"model": body["model"], "choices": [{"index": 0, "delta": {"content": "(w.com)."}}]},
        {
            "model": body["model"],
            "choices": [
                {"index": 0, "delta": {"annotations": [CHAT_ANNOTATION]}, "finish_reason": "stop"}
            ],
        },
    ]
    text = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    final = streamed("openai-chat", text)[-1]
    assert isinstance(final, ModelResponse)
    assert final.message == plain.message


def test_reasoning_signature_helper_matches_the_items() -> None:
    message = parsed(API, BODY).message
    assert message.thinking[0] == ThinkingBlock(signature="openai-responses/rs_1/enc1")


_words = st.text(alphabet="abc xyz.", min_size=1, max_size=8).filter(lambda t: t.strip() == t != "")


@st.composite
def _outputs(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Output items: stretches of reasoning (where no message came just before), message
    items, then a built-in tool item."""
    items: list[dict[str, Any]] = []
    for n in range(draw(st.integers(0, 3)) + 1):
        if not items or items[-1]["type"] != "message":  # ADR 0028: reasoning leads a stretch
            for k in range(draw(st.integers(0, 1))):
                items.append(
                    {
                        "type": "reasoning",
                        "id": f"rs_{n}{k}",
                        "summary": [],
                        "encrypted_content": "e",
                    }
                )
        for text in draw(st.lists(_words, max_size=2)):
            items.append({"type": "message", "content": [{"type": "output_text", "text": text}]})
        if draw(st.booleans()):
            items.append({**SEARCH, "id": f"ws_{n}"})
    return items


def _expected(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for item in items:
        if item["type"] != "message":
            out.append(item)
        elif out and out[-1].get("role") == "assistant":
            out[-1] = {
                "role": "assistant",
                "content": out[-1]["content"] + item["content"][0]["text"],
            }
        else:
            out.append({"role": "assistant", "content": item["content"][0]["text"]})
    return out


@settings(deadline=None)
@given(_outputs())
def test_any_interleaving_goes_back_as_it_came(items: list[dict[str, Any]]) -> None:
    message = parsed(API, {**BODY, "output": items}).message
    (loaded,) = loads_history(dumps_history([message]))
    assert _input(loaded, store=True) == _expected(items)
