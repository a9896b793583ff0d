"""Citations and server-tool blocks in the history JSON (ADR 0028).

They are additive keys on a message (`citations`, `serverTools`) that the Go golem ignores on
read; their `raw` provider objects are embedded verbatim, like tool-call args, so a history
round-trips byte for byte and a provider gets back exactly what it sent.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from golem import Citation, ServerToolBlock, dumps_history, loads_history
from golem.messages import Message

PROPERTY = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])

SEARCH_USE = ServerToolBlock(
    provider="anthropic",
    type="server_tool_use",
    id="srvtoolu_01",
    name="web_search",
    raw='{"type":"server_tool_use","id":"srvtoolu_01","name":"web_search","input":{"query":"x"}}',
    at=12,
    thinking_before=1,
)
CITATION = Citation(
    start=0,
    end=5,
    url="https://example.com/a",
    title="A page",
    cited_text="quoted",
    provider="anthropic",
    raw='{"type":"web_search_result_location","encrypted_index":"Eo8B"}',
)


def test_the_keys_are_camel_case_and_raw_is_an_embedded_value() -> None:
    message = Message(
        role="assistant", content="Hello world!", citations=[CITATION], server_tools=[SEARCH_USE]
    )
    document = json.loads(dumps_history([message]))[0]
    assert document["citations"] == [
        {
            "end": 5,
            "url": "https://example.com/a",
            "title": "A page",
            "citedText": "quoted",
            "provider": "anthropic",
            "raw": {"type": "web_search_result_location", "encrypted_index": "Eo8B"},
        }
    ]
    assert document["serverTools"] == [
        {
            "provider": "anthropic",
            "type": "server_tool_use",
            "id": "srvtoolu_01",
            "name": "web_search",
            "raw": {
                "type": "server_tool_use",
                "id": "srvtoolu_01",
                "name": "web_search",
                "input": {"query": "x"},
            },
            "at": 12,
            "thinkingBefore": 1,
        }
    ]
    assert f'"raw":{SEARCH_USE.raw}' in dumps_history([message])  # the very bytes


def test_empty_lists_are_omitted_so_older_histories_are_unchanged() -> None:
    assert dumps_history([Message(role="assistant", content="x")]) == (
        '[{"role":"assistant","content":"x"}]'
    )


def test_raw_that_is_not_json_is_written_as_a_string_and_loads_back() -> None:
    block = ServerToolBlock(provider="gemini", type="x", raw="not json {")
    text = dumps_history([Message(role="assistant", server_tools=[block])])
    assert '"raw":"not json {"' in text
    assert loads_history(text)[0].server_tools == [block]


def test_a_go_golem_ignores_the_keys_and_golem_reads_a_go_history_without_them() -> None:
    go_written = '[{"role":"assistant","content":"hi","thinking":[{"text":"t","signature":"s"}]}]'
    (message,) = loads_history(go_written)
    assert message.citations == []
    assert message.server_tools == []


def test_null_and_missing_members_take_defaults() -> None:
    text = (
        '[{"role":"assistant","citations":[{"start":null,"raw":null}],'
        '"serverTools":[{"provider":"openai-responses","type":"web_search_call"}]}]'
    )
    (message,) = loads_history(text)
    assert message.citations == [Citation()]
    assert message.server_tools == [ServerToolBlock("openai-responses", "web_search_call")]


@pytest.mark.parametrize(
    ("document", "where"),
    [
        ('[{"role":"assistant","citations":[{"start":"3"}]}]', "citations"),
        ('[{"role":"assistant","serverTools":[{"at":1.5}]}]', "serverTools"),
        ('[{"role":"assistant","serverTools":{}}]', "serverTools"),
    ],
)
def test_wrong_shapes_are_value_errors_naming_the_field(document: str, where: str) -> None:
    with pytest.raises(ValueError, match=rf"^history message 0: {where}"):
        loads_history(document)


def test_a_lone_surrogate_is_named() -> None:
    message = Message(role="assistant", citations=[Citation(title="\ud800")])
    with pytest.raises(ValueError, match=r"history message 0: citations\[0\].title holds a lone surrogate"):
        dumps_history([message])
    block = ServerToolBlock(provider="x", type="y", raw='"\ud800"')
    with pytest.raises(ValueError, match=r"server_tools\[0\].raw holds a lone surrogate"):
        dumps_history([Message(role="assistant", server_tools=[block])])


def test_data_parses_raw() -> None:
    assert SEARCH_USE.data()["input"] == {"query": "x"}
    with pytest.raises(ValueError):
        ServerToolBlock(provider="x", type="y", raw="{").data()


_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)
_json_value = st.recursive(
    st.none() | st.booleans() | st.integers() | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=8,
)
_raw = st.one_of(
    _json_value.map(lambda v: json.dumps(v, separators=(",", ":"))),
    _json_value.map(lambda v: json.dumps(v, indent=1)),  # whitespace inside is kept
    _text,  # not JSON at all: written as a string
)
_ints = st.integers(min_value=-(2**63), max_value=2**63 - 1)
citations = st.builds(
    Citation,
    start=_ints,
    end=_ints,
    url=_text,
    title=_text,
    cited_text=_text,
    provider=_text,
    raw=_raw,
)
blocks = st.builds(
    ServerToolBlock,
    provider=_text,
    type=_text,
    id=_text,
    name=_text,
    raw=_raw,
    at=_ints,
    thinking_before=_ints,
)
messages = st.builds(
    Message,
    role=st.just("assistant"),
    content=_text,
    citations=st.lists(citations, max_size=3),
    server_tools=st.lists(blocks, max_size=3),
)


@PROPERTY
@given(st.lists(messages, max_size=3))
def test_histories_with_citations_and_blocks_round_trip_byte_stably(
    history: list[Message],
) -> None:
    text = dumps_history(history)
    loaded = loads_history(text)
    assert loaded == history
    assert dumps_history(loaded) == text
