"""Histories exchanged with the Go golem (issue 3, ADR 0015, 0063-0066, 0070, 0071, 0075, 0076).

`tests/fixtures/gohistory/main.go` is Go's message model read and written with `encoding/json`,
built when `go` is on PATH (the `go` fixture; skipped otherwise — `tests/support/gojson.py`
models Go's writer for the suites that run without it). For each document it answers what Go
holds (every field, args as their raw bytes) and the history as Go writes it again.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from golem import (
    Agent,
    Approval,
    DeferredRequests,
    DeferredResults,
    HistoryError,
    Message,
    PausedRun,
    Result,
    ResumeProgress,
    RunError,
    SealError,
    Tool,
    ToolCall,
    dumps_history,
    loads_history,
)
from golem.agent_tool import PAUSED_MARKER, sub_conversation
from golem.messages import ROLES, Citation, Part, ServerToolBlock, ThinkingBlock
from golem.records import paused_records
from golem.testing import ScriptedModel
from golem.tool import DeferKind, Deferred, call_approved
from tests.support.go import SPACED, Views, go_compact, golem_view, without_args
from tests.support.gojson import go_history, raw_args, same_tokens
from tests.support.histories import damaged, histories
from tests.support.ledger import CONV, KEY, Ledger, turn
from tests.support.nested import EVERY, FINAL, RESULTS, World, janitor, parent_of, pending_ids
from tests.support.seals import nested_parent

BATCH = settings(
    max_examples=int(os.environ.get("GOLEM_GO_EXAMPLES", "25")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
FIXTURE = Path(__file__).parent / "fixtures" / "go_paused_history.json"
HOSTILE = st.text(
    st.characters(codec="utf-8")
    | st.sampled_from(["<", ">", "&", "\u2028", "\u2029", "\ufffd", "\x00", "\x7f", "\U0001f600"]),
    max_size=8,
)
IDS = HOSTILE | st.sampled_from(["conv/call_0", "a%2Fb/c%25d", "01912f4e-8b29-7a10-8c2d-1e5f"])
LONE = st.sampled_from(['{"to":"bob\\ud800"}', '["\\udfff",1e400]', '"\\ud800"', '""'])


def args_of(view: Views) -> list[list[str]]:
    return [[c["args"] for c in m["toolCalls"]] for m in view]


def through_go(go: Any, history: list[Message]) -> list[Message]:
    (answer,) = go(dumps_history(history))
    assert answer["ok"], answer.get("err")
    return loads_history(answer["out"])


def go_pending(view: Views) -> list[str]:
    """The calls Go counts as pending (reference §2.5 step 3): those without a tool message."""
    answered = {m["toolCallId"] for m in view if m["role"] == "tool"}
    return [c["id"] for m in view for c in m["toolCalls"] if c["id"] not in answered]


def as_paused(paused: Result[Any], history: list[Message], *, sealed: bool = True) -> PausedRun:
    """`paused` as kept beside the history Go rewrote; `sealed=False`: only what Go keeps of
    it (the calls, their seals gone)."""
    run = paused.paused_run
    assert run is not None
    if sealed:
        return replace(run, messages=history)
    approvals, external = (
        [replace(p, seal="") for p in c] for c in (run.pending.approvals, run.pending.external)
    )
    return replace(run, messages=history, pending=DeferredRequests(approvals, external))


def literal_values(view: Views) -> list[list[Any]]:
    return [[json.loads(a) if a.startswith('"') else a for a in m] for m in args_of(view)]


def call_ids(m: Message) -> list[tuple[str, str, str]]:
    return [(c.id, c.name, c.signature) for c in m.tool_calls]


# --------------------------------------------------------------------------- golem -> Go -> golem


@BATCH
@example(
    [
        Message(
            role="user",
            content="<b>&</b>\u2028",
            parts=[Part("image", data=b"\xfb\xff", media_type="image/png")],
        )
    ],
    ['{ "a" : [1, 2] }', '{"a":"\\ud800"}', "1e400", "", '"plain"', '"{\\"a\\":1}"'],
)
@example([], ['"0', '""', '"'])  # found here: a 2-character `"0` was embedded as if `""`
@given(histories(), st.lists(LONE, max_size=3))
def test_go_reads_what_golem_writes_and_golem_reads_what_go_writes_back(
    go: Any, history: list[Message], extra: list[str]
) -> None:
    if extra:
        calls = [ToolCall(f"x{i}", "n", a) for i, a in enumerate(extra)]
        history = [*history, Message(role="assistant", tool_calls=calls)]
    ours = dumps_history(history)
    (first,) = go(ours)
    assert first["ok"], first.get("err")
    assert without_args(first["view"]) == golem_view(history)
    assert args_of(first["view"]) == raw_args(ours)  # the very bytes golem wrote
    back = loads_history(first["out"])
    assert golem_view(back) == golem_view(history)
    again, (reread,) = dumps_history(back), go(first["out"])
    (after,) = go(again)
    assert after["ok"], after.get("err")
    assert without_args(after["view"]) == without_args(reread["view"])
    # only a string literal golem reads as its content comes back escaped golem's way
    assert literal_values(after["view"]) == literal_values(reread["view"])
    assert dumps_history(loads_history(again)) == again


@st.composite
def deep(draw: st.DrawFn) -> str:
    depth = draw(st.integers(100, 400))  # beyond MAX_ARGS_DEPTH: written as a JSON string
    return "[" * depth + draw(st.sampled_from(["", "1", '"<&>"'])) + "]" * depth


ARGS = (
    st.sampled_from(
        [
            '{"to": "<bob> & co", "amount": 10}',
            '{"n":123456789012345678901234567890,"x":1e400,"z":-0.0}',
            '{"a":1,"a":2}',
            '{"s":"\\ud800"}',
            '{"u":"\\u2028\\u003c"}',
            '{"a":',
            "",
            '"plain"',
            "[]",
        ]
    )
    | HOSTILE.map(lambda s: json.dumps({"t": s}, ensure_ascii=False))
    | deep()
)
AUDIO = Part(
    "audio",
    data=b"RIFF",
    media_type="audio/wav",
    signature="openai-chat-audio/4102444800/audio_abc",
)


def container(expires: str) -> ServerToolBlock:
    raw = json.dumps({"id": "container_011", "expires_at": expires})
    return ServerToolBlock("anthropic", "container", id="container_011", raw=raw)


PARTS = st.one_of(
    st.builds(Part, kind=st.just("text"), text=HOSTILE.filter(bool)),
    st.builds(
        Part,
        kind=st.sampled_from(["image", "document", "audio", "video"]),
        data=st.binary(min_size=1, max_size=6),
        media_type=st.sampled_from(["image/png", "audio/wav", "application/pdf"]),
        signature=st.just("") | st.just(AUDIO.signature) | HOSTILE,
    ),
    st.builds(Part, kind=st.just("image"), url=HOSTILE.filter(bool)),
)


def record(call_id: str, inner: list[Message]) -> str:
    """A paused sub-agent's record text, as `golem.agent_tool` writes it."""
    state = {"agent": "janitor", "history": dumps_history(inner)}
    text = json.dumps(state, ensure_ascii=False, separators=(",", ":"))
    return f"{PAUSED_MARKER} janitor waits on {call_id}\n{text}"


RECORD = record(
    "s1",
    [
        Message(role="user", content="<clean>", conversation_id="c/p1"),
        Message(
            role="assistant",
            tool_calls=[ToolCall("s1", "delete_file", '{"path": "a&b"}', seal="v1.seal")],
            conversation_id="c/p1",
        ),
    ],
)
CALLS = st.builds(
    ToolCall,
    id=IDS,
    name=HOSTILE,
    args=ARGS,
    signature=st.just("") | HOSTILE,
    seal=st.just("") | st.just("v1.k0.approval.c2VhbA"),
)
THINKING = st.builds(ThinkingBlock, text=HOSTILE, signature=HOSTILE) | st.builds(
    ThinkingBlock, redacted=HOSTILE.filter(bool)
)
CITATIONS = st.builds(
    Citation,
    start=st.integers(0, 2**40),
    end=st.integers(0, 2**40),
    url=HOSTILE,
    raw=st.just('{"type":"char_location","x":1e400}'),
    provider=st.just("anthropic"),
)
SERVER_TOOLS = st.sampled_from(
    [
        container("2099-01-01T00:00:00.123456789+05:30"),
        ServerToolBlock("anthropic", "server_tool_use", id="srvtoolu_1", raw='{"a": "<b>"}'),
    ]
)


@st.composite
def message(draw: st.DrawFn) -> Message:
    role = draw(st.sampled_from(["system", "user", "assistant", "tool"]))
    mine = role == "assistant"
    tool = role == "tool"
    return Message(
        role=role,  # type: ignore[arg-type]
        content=RECORD if tool and draw(st.booleans()) else draw(HOSTILE),
        parts=draw(st.lists(PARTS, max_size=2)),
        tool_calls=draw(st.lists(CALLS, max_size=3)) if mine else [],
        tool_call_id=draw(IDS) if tool else "",
        tool_name=draw(HOSTILE) if tool else "",
        failed=tool and draw(st.booleans()),
        thinking=draw(st.lists(THINKING, max_size=2)) if mine else [],
        run_id=draw(IDS),
        conversation_id=draw(IDS),
        citations=draw(st.lists(CITATIONS, max_size=1)) if mine else [],
        server_tools=draw(st.lists(SERVER_TOOLS, max_size=2)) if mine else [],
    )


def go_visible(m: Message) -> Message:
    """`m` as it comes back from Go: golem's own keys (seals, citations, server tools, part
    text and signatures) dropped, args compared apart."""
    return Message(
        role=m.role,
        content=m.content,
        parts=[Part(p.kind, url=p.url, data=p.data, media_type=p.media_type) for p in m.parts],
        tool_call_id=m.tool_call_id,
        tool_name=m.tool_name,
        failed=m.failed,
        thinking=m.thinking,
        run_id=m.run_id,
        conversation_id=m.conversation_id,
    )


@BATCH
@example(
    [
        [
            Message(
                role="assistant",
                content="<ran code>",
                tool_calls=[ToolCall("c1", "transfer", SPACED, seal="v1.x")],
                server_tools=[container("2099-01-01T00:00:00Z")],
                parts=[AUDIO, Part("text", text="caption")],
                conversation_id=sub_conversation("conv", "call/1"),
            )
        ]
    ]
)
@given(st.lists(st.lists(message(), max_size=4), min_size=1, max_size=12))
def test_go_keeps_golems_fields_drops_its_own_keys_and_its_writing_is_a_fixed_point(
    go: Any, batch: list[list[Message]]
) -> None:
    """Seals, records, provider blocks, citations, media, deep args: Go loads every history;
    what it writes back loads with Go's fields unchanged, args the same JSON (`same_tokens`),
    sub-agent records byte for byte; Go's text is a fixed point through golem's codec."""
    answers = go(*[dumps_history(h) for h in batch])
    for history, first in zip(batch, answers, strict=True):
        assert first["ok"], first.get("err")
        assert without_args(first["view"]) == golem_view(history)
        back = loads_history(first["out"])
        assert [replace(m, tool_calls=[]) for m in back] == list(map(go_visible, history))
        for theirs, mine in zip(back, history, strict=True):
            assert call_ids(theirs) == call_ids(mine)
            assert all(not c.seal for c in theirs.tool_calls)
            for tc, mc in zip(theirs.tool_calls, mine.tool_calls, strict=True):
                assert same_tokens(tc.args, mc.args), (tc.args, mc.args)
        assert paused_records(back) == paused_records(history)
    outs = [a["out"] for a in answers]
    again = go(*[dumps_history(loads_history(o)) for o in outs])
    assert [a["out"] for a in again] == outs


@BATCH
@given(go_history())
def test_golem_loads_go_written_documents_as_go_holds_them(
    go: Any, case: tuple[str, list[Message]]
) -> None:
    document, expected = case
    (answer,) = go(document)
    assert answer["ok"], answer.get("err")  # the modelled Go writer writes what Go reads
    loaded = loads_history(document)
    assert loaded == expected
    assert golem_view(loaded) == without_args(answer["view"])
    written = loads_history(answer["out"])  # the real Go writer's output loads too
    (reread,) = go(answer["out"])
    assert golem_view(written) == without_args(reread["view"])
    for m, calls in zip(written, args_of(reread["view"]), strict=True):
        for c, raw in zip(m.tool_calls, calls, strict=True):
            if raw.startswith('"'):
                assert c.args in (raw, json.loads(raw))  # ADR 0015: a literal or its content
            else:
                assert c.args == ("" if raw == "null" else raw)


def test_the_go_paused_fixture_round_trips_through_go(go: Any) -> None:
    text = FIXTURE.read_text().strip()
    (answer,) = go(text)
    assert answer["ok"]
    assert answer["out"] == text
    assert dumps_history(loads_history(answer["out"])) == text


def test_keys_a_go_golem_may_add_load_and_are_dropped_here(go: Any) -> None:
    """Usage, finish reasons and timestamps live on Go's `Result` (reference §3.1); a later
    Go golem adding them as keys is additive (§3.2)."""
    document = (
        '[{"role":"assistant","content":"\\u003cok\\u003e \\u0026 \\ufffd",'
        '"toolCalls":[{"id":"c1","name":"n","args":{"a":"\\u003c"}}],'
        '"usage":{"inputTokens":18446744073709551615,"cacheReadTokens":0},'
        '"finishReason":"tool_call","createdAt":"2026-12-04T04:20:49.123456789+05:30",'
        '"runId":"r","conversationId":"conv/c%2F1"}]'
    )
    (answer,) = go(document)
    assert answer["ok"]
    (m,) = loads_history(document)
    assert (m.content, m.conversation_id) == ("<ok> & \ufffd", "conv/c%2F1")
    assert m.tool_calls == [ToolCall("c1", "n", '{"a":"\\u003c"}')]
    (reread,) = go(dumps_history([m]))
    assert reread["out"] == answer["out"]


def test_a_container_and_a_chat_audio_id_do_not_survive_go(go: Any) -> None:
    """Go's structs have no place for them: a later Anthropic request starts a new container,
    the Chat audio answer goes back as transcript and audio (ADR 0066's fallback)."""
    reply = Message(
        role="assistant",
        content="the transcript",
        parts=[AUDIO],
        server_tools=[container("2099-01-01T00:00:00Z")],
    )
    history = [Message(role="user", content="run it"), reply]
    back = through_go(go, history)
    assert back[1].server_tools == []
    assert back[1].content == "the transcript"
    assert back[1].parts == [Part("audio", data=b"RIFF", media_type="audio/wav")]


@pytest.mark.parametrize(
    "args",
    [' {"a":1}', '{"a":1}\n', "[" * 129 + "]" * 129, '{"a":', "null"],
    ids=["space before", "newline after", "deeper than 128", "cut off", "null text"],
)
def test_args_golem_keeps_as_text_reach_go_as_a_json_string(go: Any, args: str) -> None:
    """A kept disagreement (ADR 0015, 0075): args golem cannot embed byte for byte go as a JSON
    string of their text, which Go holds literally and writes back as the same text."""
    history = [Message(role="assistant", tool_calls=[ToolCall("c1", "n", args)])]
    (answer,) = go(dumps_history(history))
    assert answer["ok"]
    assert answer["view"][0]["toolCalls"][0]["args"] == json.dumps(args, ensure_ascii=False)
    assert loads_history(answer["out"]) == history


async def test_a_text_part_go_rewrote_is_refused_before_any_model_call(go: Any) -> None:
    """Go's Part has no `text`: the part comes back empty, which no run sends (ADR 0064)."""
    image = Part("image", url="https://x.test/a.png")
    back = through_go(
        go, [Message(role="user", content="see", parts=[Part("text", text="x"), image])]
    )
    assert back[0].parts == [Part("text"), image]
    model = ScriptedModel("ok")
    with pytest.raises(HistoryError, match="a text part needs text"):
        await Agent(model).run("go on", history=back)
    assert model.requests == []


# --------------------------------------------------------------------------- invalid UTF-8

BAD_UTF8 = st.sampled_from(
    [
        b"\xff",
        b"\x80",
        b"\xe2\x82",  # a cut sequence
        b"\xed\xa0\x80",  # a surrogate encoded as UTF-8
        b"\xc0\xaf",  # overlong
        b"\xf4\x90\x80\x80",  # past U+10FFFF
        b"\xf0\x9f\x98",
        b"\xe2\x82\xac",  # valid: the euro sign
    ]
) | st.binary(max_size=6).map(lambda b: bytes(c for c in b if c >= 0x20 and c not in b'"\\'))


def _bytes_doc(text: bytes, name: bytes, arg: bytes) -> bytes:
    return (
        b'[{"role":"user","content":"a' + text + b'<"},{"role":"assistant","toolCalls":'
        b'[{"id":"c1","name":"n' + name + b'","args":{"k' + arg + b'":"v' + arg + b'"}}],'
        b'"x":"' + text + b'"}]'
    )


@settings(BATCH, max_examples=10)
@example([(b"\xe2\x82", b"\xed\xa0\x80", b"\xff")])
@example([(b"<", b"&", b"<\xff>")])
@given(st.lists(st.tuples(BAD_UTF8, BAD_UTF8, BAD_UTF8), min_size=1, max_size=20))
def test_invalid_utf8_loads_as_the_go_golem_reads_it(
    go: Any, cases: list[tuple[bytes, bytes, bytes]]
) -> None:
    """Go reads each invalid byte in a string as U+FFFD and keeps it in args (a `RawMessage`),
    which it writes as they are; golem reads both as Go does (ADR 0075)."""
    documents = [_bytes_doc(*case) for case in cases]
    answers = go(*["b64:" + base64.b64encode(d).decode() for d in documents])
    for document, answer in zip(documents, answers, strict=True):
        assert answer["ok"], answer.get("err")
        for text in (document, base64.b64decode(answer["outB64"])):
            loaded = loads_history(text)
            assert golem_view(loaded) == without_args(answer["view"])
            held = [c.args for m in loaded for c in m.tool_calls]
            viewed = [a for m in args_of(answer["view"]) for a in m]
            if text is document:
                assert held == viewed
            assert all(map(same_tokens, held, viewed)), (held, viewed)
            (again,) = go(dumps_history(loaded))
            assert without_args(again["view"]) == without_args(answer["view"])
            assert all(map(same_tokens, [a for m in args_of(again["view"]) for a in m], viewed))


# --------------------------------------------------------------------------- damaged documents

# golem refuses, Go accepts: recognised from golem's message (ADR 0015, 0047, 0070)
REFUSED_HERE = re.compile(
    r"role must be one of"  # an unknown role (ADR 0015)
    r"|missing required field `role`|role: expected `str`, got `null`"  # no role (ADR 0070)
    r"|holds a lone surrogate"  # in a text field (ADR 0015, 0047)
    r"|expected `object`, got `null`"  # a null array element (ADR 0070)
    r"|citations|serverTools|toolCalls\[\d+\]\.seal|parts\[\d+\]\.(?:text|signature)"  # golem's keys
    r"|parts\[\d+\]\.data: expected `bytes \| null`, got `array`"  # Go: bytes as numbers
)
GO_KEYS = {
    k.casefold(): k
    for k in "role content parts toolCalls toolCallId toolName failed thinking runId "  # noqa: SIM905
    "conversationId kind url data mediaType id name args signature text redacted".split()
}


def _keys(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [*value, *(k for v in value.values() for k in _keys(v))]
    if isinstance(value, list):
        return [k for v in value for k in _keys(v)]
    return []


def _case_folded_key(document: str) -> bool:
    """A key Go would match case-insensitively to one of its fields (golem matches exactly)."""
    try:  # every key kept, duplicates included
        value = json.loads(
            document, object_pairs_hook=lambda p: {(i, k): v for i, (k, v) in enumerate(p)}
        )
    except (ValueError, RecursionError):
        return False
    for _, name in _keys(value):
        known = GO_KEYS.get(name.casefold()) or GO_KEYS.get(
            name.replace("\u017f", "s").replace("\u212a", "k").casefold()
        )
        if known is not None and known != name:
            return True
    return False


def _golem(document: str | bytes) -> str | None:
    try:
        loads_history(document)
    except HistoryError as exc:
        return str(exc)
    return None


@BATCH
@example(b'[{"Role":"user"}]')
@example(b'[{"role":"user","Content":5}]')
@example(b'[{"role":"user","citations":5}]')
@example(b'[{"role":"assistant","toolCalls":[null]}]')
@example(b'[{"role":"user","parts":[{"kind":"image","data":"aGVs\\nbG8=","mediaType":"a/b"}]}]')
@example(
    b'[{"role":"assistant","toolCalls":[{"id":"a","name":"n","args":'
    + b"[" * 1500
    + b"]" * 1500
    + b"}]}]"
)
@example(b'[{"role":"user","content":"\\ud800"}]')
@example(b'[{"role":"user","content":"\xed\xa0\x80","x":"\xff"}]')  # not UTF-8: both load
@example(b'[{"role":"assistant","toolCalls":[{"id":"a","name":"n","args":["\xe2\x82"]}]}]')
@example(b'[{"role":"user","x":' + b"[" * 9998 + b"]" * 9998 + b"}]")  # 10,000 deep: both load
@example(b'[{"role":"user","x":' + b"[" * 9999 + b"]" * 9999 + b"}]")  # 10,001: both refuse
@example(b'[{"role":"user","parts":[{"kind":"image","data":[104,105],"mediaType":"a/b"}]}]')
@given(damaged())
def test_golem_and_go_agree_on_damaged_histories_but_for_the_listed_differences(
    go: Any, document: bytes
) -> None:
    try:
        text = document.decode()
        (theirs,), ours = go(text), _golem(text)
    except UnicodeDecodeError:  # both read each byte that is not UTF-8 as U+FFFD (ADR 0075)
        text = document.decode("utf-8", "golem-go-replace")
        (theirs,), ours = go("b64:" + base64.b64encode(document).decode()), _golem(document)
    if ours is not None and theirs["ok"]:  # golem refuses what Go accepts
        line_breaks = re.search(r'"data"\s*:\s*"[^"]*\\[rn]', text) is not None
        explained = bool(REFUSED_HERE.search(ours)) or _case_folded_key(text)
        assert explained or ("base64" in ours and line_breaks), f"golem refuses: {ours}"
    if ours is None and not theirs["ok"]:  # golem accepts what Go refuses
        assert _case_folded_key(text), f"Go refuses: {theirs['err']}"


@pytest.mark.parametrize("role", sorted(ROLES))
def test_both_accept_every_role_and_an_unknown_key(go: Any, role: str) -> None:
    document = json.dumps([{"role": role, "x": [1e300, {"y": None}]}])
    (theirs,) = go(document)
    assert theirs["ok"]
    assert _golem(document) is None


# --------------------------------------------------------------------------- resumes

OBJECT_ARGS = st.sampled_from(
    [
        SPACED,
        '{"to":"b\\u006fb","amount":1e1}',
        '{"a":1,"a":2}',
        '{"s":"\\ud800 \u2028"}',
        '{"n":123456789012345678901234567890}',
        '{\n  "deep": [[[{"x": "\u00e9"}]]]\n}',
        ' {"padded": true}',
    ]
) | HOSTILE.map(lambda s: json.dumps({"t": s}, ensure_ascii=False, indent=1))


@settings(BATCH, max_examples=15)
@example([(True, [SPACED]), (False, [SPACED])])
@given(
    st.lists(
        st.tuples(st.booleans(), st.lists(OBJECT_ARGS, min_size=1, max_size=3)),
        min_size=1,
        max_size=8,
    )
)
def test_any_pause_go_rewrote_resumes_from_its_paused_run_exactly_as_paused(
    go: Any, scenarios: list[tuple[bool, list[str]]]
) -> None:
    """Go compacts the args and drops the seals: with the `PausedRun` (whose pending calls carry
    both) each paused call runs once with the paused bytes and seal; a keyed agent given only
    what Go kept refuses ("unsealed") before anything runs, the model untouched."""

    async def scenario() -> None:
        paused_runs = []
        for keyed, args in scenarios:
            ledger = Ledger()
            calls = [ToolCall(f"c{i}", "transfer", a) for i, a in enumerate(args)]
            model = ScriptedModel(turn(*calls), "done")
            tools = [ledger.gate("transfer")]
            agent: Agent[None, str] = Agent(model, tools=tools, seal_key=KEY if keyed else None)
            paused = await agent.run("pay", conversation_id=CONV)
            assert paused.pending is not None
            ledger.executions.clear()
            paused_runs.append((keyed, agent, model, paused, ledger))
        answers = go(*[dumps_history(p.messages) for _, _, _, p, _ in paused_runs])
        for (keyed, agent, model, paused, ledger), answer in zip(paused_runs, answers, strict=True):
            assert answer["ok"], answer.get("err")
            rewritten = loads_history(answer["out"])
            written = [c.args for m in rewritten for c in m.tool_calls]
            pending = paused.pending
            assert pending is not None
            pairs = zip(written, pending.calls, strict=True)
            assert all(w == go_compact(SPACED) for w, p in pairs if p.args == SPACED)
            approve = DeferredResults(approvals={p.call_id: True for p in pending.calls})
            if keyed:
                with pytest.raises(SealError) as info:
                    await agent.run_with_deferred_results(
                        as_paused(paused, rewritten, sealed=False), approve
                    )
                assert info.value.problem == "unsealed"
                assert (ledger.executions, len(model.requests)) == ([], 1)
            started: list[tuple[str, str, str]] = []

            async def before(call: ToolCall, started: list[Any] = started) -> None:
                started.append((call.id, call.args, call.seal))

            resume = as_paused(paused, rewritten)
            done = await agent.run_with_deferred_results(
                resume, approve, progress=ResumeProgress(before_approved=before)
            )
            assert done.output == "done"
            assert started == [(p.call_id, p.args, p.seal) for p in pending.calls]
            assert len(ledger.executions) == len(started)

    asyncio.run(scenario())


@pytest.mark.parametrize(
    "own", [None, ToolCall("c1", "transfer", '{"amount": 10, "memo": "<rent> & co"}')]
)
async def test_a_keyed_parent_with_a_paused_sub_agent_go_rewrote_resumes(
    go: Any, own: ToolCall | None
) -> None:
    """The record keeps its seals inside the tool message Go holds as text, so what Go keeps
    is enough for it; the parent's own sealed call loses its seal and bytes in Go, which the
    `PausedRun` restores."""
    log: list[str] = []
    parent = nested_parent("a<&>.log", log, own=own)
    paused = await parent.run("tidy", conversation_id="X")
    assert paused.pending is not None
    rewritten = through_go(go, paused.messages)
    assert paused_records(rewritten)
    approve = DeferredResults(approvals={"p1/s1": Approval(True), **({"c1": True} if own else {})})
    started: list[tuple[str, str]] = []

    async def before(call: ToolCall) -> None:
        started.append((call.id, call.args))

    if own is not None:
        with pytest.raises(SealError):
            await parent.run_with_deferred_results(
                as_paused(paused, rewritten, sealed=False), approve
            )
        assert log == []
    resume = as_paused(paused, rewritten, sealed=own is not None)
    done = await parent.run_with_deferred_results(
        resume, approve, progress=ResumeProgress(before_approved=before)
    )
    assert (done.output, log) == ("ok", ["a<&>.log"])
    assert own is None or (own.id, own.args) in started


async def test_a_failed_resumes_partial_is_a_paused_history_go_reads(go: Any) -> None:
    """ADR 0071: Go reads the partial with the calls that ran answered and the rest pending
    (seals aside), and what Go writes back resumes here, running only what did not run."""
    acted: list[str] = []
    broken = {"c2"}

    def act(ctx: Any, args: dict[str, Any]) -> str:
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, "act?")
        if ctx.call_id in broken:
            raise RuntimeError("down")
        acted.append(ctx.call_id)
        return f"acted {ctx.call_id}"

    batch = turn(*(ToolCall(f"c{i}", "act", f'{{"n":{i}}}') for i in range(1, 4)))
    results = DeferredResults(approvals={"c1": True, "c2": True, "c3": False})

    def agent(key: bytes | None, *script: Any) -> Agent[None, str]:
        tool = Tool("act", "Act.", {"type": "object"}, act)
        return Agent(ScriptedModel(*script), tools=[tool], seal_key=key)

    keyed = agent(KEY, batch)
    paused = await keyed.run("go", conversation_id="conv")
    with pytest.raises(RunError) as info:
        await keyed.run_with_deferred_results(as_paused(paused, paused.messages), results)
    partial = info.value.partial
    assert partial is not None
    assert partial.pending is not None
    (answer,) = go(dumps_history(partial.messages))
    assert answer["ok"], answer.get("err")
    assert without_args(answer["view"]) == golem_view(partial.messages)
    assert go_pending(answer["view"]) == [p.call_id for p in partial.pending.calls] == ["c2", "c3"]
    broken.clear()
    done = await agent(None, "done").run_with_deferred_results(
        loads_history(answer["out"]), results
    )
    assert (done.output, acted) == ("done", ["c1", "c2"])


async def test_a_nested_resumes_partial_crosses_to_go_and_back(go: Any) -> None:
    """ADR 0076: the records are tool results to Go (its `AsTool` never pauses, reference
    §2.12), so its pending calls are the parent's own; what Go writes back resumes here,
    running only what did not run."""
    world = World()
    parent = parent_of(world, janitor(world, "j1"), janitor(world, "j2"))
    paused = await parent.run("go")
    world.fail.add("j2:s2")
    with pytest.raises(RunError) as info:
        await parent.run_with_deferred_results(paused.messages, RESULTS)
    partial = info.value.partial
    assert partial is not None
    assert partial.pending is not None
    (answer,) = go(dumps_history(partial.messages))
    assert answer["ok"], answer.get("err")
    assert without_args(answer["view"]) == golem_view(partial.messages)
    assert go_pending(answer["view"]) == ["a1", "x1"]
    back = loads_history(answer["out"])
    assert pending_ids(back) == pending_ids(partial.messages) == ["a1", "p2/s2", "x1"]
    world.fail.clear()
    done = await parent.run_with_deferred_results(back, RESULTS)
    assert (done.output, world.acted) == (FINAL, EVERY)
