"""Histories exchanged with the Go golem: seals, sub-agent records, provider blocks (ADR 0075).

Seals on pending calls (ADR 0063, 0065), sub-agent records and sub-run conversations
`<parent>/<call id>` (ADR 0064, 0065), an Anthropic container as a `ServerToolBlock` of type
`container` (ADR 0066), Chat audio's `Part.signature` (`openai-chat-audio/<expires>/<id>`),
provider blocks, citations, media and text parts, deep args (ADR 0070).

The Go program is `tests/fixtures/gohistory/main.go` (Go's message model, `encoding/json`),
built as `tests/test_contract_go_interop.py` builds it; many histories go through one Go
process. Invariants: Go loads every history golem writes; what Go writes back loads here with
every field Go has unchanged, args the same JSON token for token (`same_args`), golem's own
keys dropped, and sub-agent records (tool-message content) byte for byte; Go's text is a
fixed point through golem's codec. Then the resumes: a sealed pause re-written by Go is
refused before anything runs (its seals are gone); a keyless one resumes with `expected=`
running the paused bytes; a keyed sub-agent's record still resumes; a container and a Chat
audio ID are lost (the documented fallbacks).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from golem import (
    Agent,
    Approval,
    DeferredResults,
    HistoryError,
    Message,
    PausedRun,
    ResumeProgress,
    SealError,
    ToolCall,
    dumps_history,
    loads_history,
)
from golem._checks import same_args
from golem.agent_tool import PAUSED_MARKER, sub_conversation
from golem.messages import Citation, Part, ServerToolBlock, ThinkingBlock
from golem.providers.anthropic._wire import container_of
from golem.providers.openai._wire import audio_id_of
from golem.records import paused_records
from golem.testing import ScriptedModel
from golem.tool import DeferKind
from tests.support.go import RESOLVE, SPACED, go_compact, golem_view, paused_keyless, without_args
from tests.support.ledger import CONV, KEY, LOOKUP, Ledger, turn
from tests.support.seals import nested_parent

BATCH = settings(
    max_examples=int(os.environ.get("GOLEM_GO_EXAMPLES", "25")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

HOSTILE = st.text(
    st.characters(codec="utf-8")
    | st.sampled_from(["<", ">", "&", "\u2028", "\u2029", "\ufffd", "\x00", "\x7f", "\U0001f600"]),
    max_size=8,
)
IDS = HOSTILE | st.sampled_from(["conv/call_0", "a%2Fb/c%25d", "01912f4e-8b29-7a10-8c2d-1e5f"])


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
        signature=st.just("") | st.just("openai-chat-audio/4102444800/audio_abc") | HOSTILE,
    ),
    st.builds(Part, kind=st.just("image"), url=HOSTILE.filter(bool)),
)


def record(call_id: str, inner: list[Message]) -> str:
    """A paused sub-agent's record text, as `golem.agent_tool` writes it."""
    state = json.dumps(
        {"agent": "janitor", "history": dumps_history(inner)},
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return f"{PAUSED_MARKER} janitor waits on {call_id}\n{state}"


@st.composite
def message(draw: st.DrawFn) -> Message:
    role = draw(st.sampled_from(["system", "user", "assistant", "tool"]))
    calls = []
    if role == "assistant":
        calls = draw(
            st.lists(
                st.builds(
                    ToolCall,
                    id=IDS,
                    name=HOSTILE,
                    args=ARGS,
                    signature=st.just("") | HOSTILE,
                    seal=st.just("") | st.just("v1.k0.approval.c2VhbA"),
                ),
                max_size=3,
            )
        )
    content = draw(HOSTILE)
    if role == "tool" and draw(st.booleans()):
        inner = [
            Message(role="user", content="<clean>", conversation_id="c/p1"),
            Message(
                role="assistant",
                tool_calls=[ToolCall("s1", "delete_file", '{"path": "a&b"}', seal="v1.seal")],
                conversation_id="c/p1",
            ),
        ]
        content = record("s1", inner)
    return Message(
        role=role,  # type: ignore[arg-type]
        content=content,
        parts=draw(st.lists(PARTS, max_size=2)),
        tool_calls=calls,
        tool_call_id=draw(IDS) if role == "tool" else "",
        tool_name=draw(HOSTILE) if role == "tool" else "",
        failed=role == "tool" and draw(st.booleans()),
        thinking=draw(
            st.lists(
                st.builds(ThinkingBlock, text=HOSTILE, signature=HOSTILE)
                | st.builds(ThinkingBlock, redacted=HOSTILE.filter(bool)),
                max_size=2,
            )
        )
        if role == "assistant"
        else [],
        run_id=draw(IDS),
        conversation_id=draw(IDS),
        citations=draw(
            st.lists(
                st.builds(
                    Citation,
                    start=st.integers(0, 2**40),
                    end=st.integers(0, 2**40),
                    url=HOSTILE,
                    raw=st.just('{"type":"char_location","x":1e400}'),
                    provider=st.just("anthropic"),
                ),
                max_size=1,
            )
        )
        if role == "assistant"
        else [],
        server_tools=draw(
            st.lists(
                st.sampled_from(
                    [
                        container("2099-01-01T00:00:00.123456789+05:30"),
                        ServerToolBlock(
                            "anthropic", "server_tool_use", id="srvtoolu_1", raw='{"a": "<b>"}'
                        ),
                    ]
                ),
                max_size=2,
            )
        )
        if role == "assistant"
        else [],
    )


def _go_visible(m: Message) -> Message:
    """`m` as it comes back from Go: golem's own keys dropped."""
    return Message(
        role=m.role,
        content=m.content,
        parts=[Part(p.kind, url=p.url, data=p.data, media_type=p.media_type) for p in m.parts],
        tool_calls=[ToolCall(c.id, c.name, c.args, c.signature) for c in m.tool_calls],
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
                parts=[
                    Part(
                        "audio",
                        data=b"RIFF",
                        media_type="audio/wav",
                        signature="openai-chat-audio/4102444800/audio_abc",
                    )
                ],
                conversation_id=sub_conversation("conv", "call/1"),
            )
        ]
    ]
)
@given(st.lists(st.lists(message(), max_size=4), min_size=1, max_size=12))
def test_go_keeps_what_golem_writes_and_golem_reads_what_go_writes_back(
    go: Any,
    batch: list[list[Message]],
) -> None:
    ours = [dumps_history(h) for h in batch]
    answers = go(*ours)
    outs = []
    for history, first in zip(batch, answers, strict=True):
        # (a) Go loads what golem writes, every field it has as golem holds it
        assert first["ok"], first.get("err")
        assert without_args(first["view"]) == golem_view(history)
        # (b) what Go writes back loads here: Go's fields unchanged, golem's keys dropped
        back = loads_history(first["out"])
        assert len(back) == len(history)
        for theirs, mine in zip(back, history, strict=True):
            expected = _go_visible(mine)
            assert [_no_args(c) for c in theirs.tool_calls] == [
                _no_args(c) for c in expected.tool_calls
            ]
            for tc, mc in zip(theirs.tool_calls, mine.tool_calls, strict=True):
                assert same_args(tc.args, mc.args), (tc.args, mc.args)
            assert _without_calls(theirs) == _without_calls(expected)
        # sub-agent records are tool-message content: byte for byte
        assert paused_records(back) == paused_records(history)
        assert [m.content for m in back] == [m.content for m in history]
        outs.append(first["out"])
    # (c) Go's text is a fixed point through golem's codec
    again = go(*[dumps_history(loads_history(o)) for o in outs])
    assert [a["out"] for a in again] == outs


def _no_args(c: ToolCall) -> tuple[str, str, str, str]:
    return (c.id, c.name, c.signature, c.seal)


def _without_calls(m: Message) -> Message:
    return Message(**{**{k: getattr(m, k) for k in m.__slots__}, "tool_calls": []})


# --------------------------------------------------------------------------- resumes


def through_go(go: Any, history: list[Message]) -> list[Message]:
    (answer,) = go(dumps_history(history))
    assert answer["ok"], answer.get("err")
    return loads_history(answer["out"])


async def test_a_sealed_pause_rewritten_by_go_resumes_only_with_expected(
    go: Any,
) -> None:
    """Go drops the seals: told only the conversation, golem refuses before anything runs
    ("unsealed"); with `expected=paused.pending` (which carries them) the seals and the
    paused argument bytes are restored and verified, and the approved call runs once."""
    ledger = Ledger()
    model = ScriptedModel(turn(ToolCall("c1", "transfer", SPACED), LOOKUP), "done")
    tools = [ledger.gate("transfer"), ledger.gate("lookup", DeferKind.EXTERNAL)]
    agent: Agent[None, str] = Agent(model, tools=tools, seal_key=KEY)
    paused = await agent.run("pay bob", conversation_id=CONV)
    assert paused.pending is not None
    ledger.executions.clear()
    requests = len(model.requests)
    rewritten = through_go(go, paused.messages)
    assert all(not c.seal for m in rewritten for c in m.tool_calls)
    assert rewritten[1].tool_calls[0].args == go_compact(SPACED)
    with pytest.raises(SealError) as info:
        await agent.run_with_deferred_results(rewritten, RESOLVE)
    assert info.value.problem == "unsealed"
    assert ledger.executions == []
    assert len(model.requests) == requests
    started: list[ToolCall] = []

    async def before(call: ToolCall) -> None:
        started.append(call)

    done = await agent.run_with_deferred_results(
        PausedRun(rewritten, paused.pending, paused.conversation_id),
        RESOLVE,
        progress=ResumeProgress(before_approved=before),
    )
    assert done.output == "done"
    (call,) = started
    (kept,) = paused.pending.approvals
    assert (call.id, call.args, call.seal) == (kept.call_id, kept.args, kept.seal)
    assert call.args == SPACED  # the model's bytes, which Go had compacted
    assert len([e for e in ledger.executions if e[2]]) == 1


async def test_a_keyless_pause_rewritten_by_go_resumes_with_expected_running_the_paused_bytes(
    go: Any,
) -> None:
    agent, _, ledger, history, pending = await paused_keyless()
    rewritten = through_go(go, history)
    batch = next(m for m in rewritten if m.tool_calls)
    assert batch.tool_calls[0].args == go_compact(SPACED)  # the Go program agrees with the model
    started: list[str] = []

    async def before(call: ToolCall) -> None:
        started.append(call.args)

    done = await agent.run_with_deferred_results(
        PausedRun(rewritten, pending, ""), RESOLVE, progress=ResumeProgress(before_approved=before)
    )
    assert done.output == "done"
    assert started == [SPACED]
    assert len([e for e in ledger.executions if e[2]]) == 1


async def test_a_keyed_sub_agents_record_rewritten_by_go_still_resumes(
    go: Any,
) -> None:
    log: list[str] = []
    parent = nested_parent("a<&>.log", log)
    paused = await parent.run("tidy", conversation_id="X")
    assert paused.pending is not None
    rewritten = through_go(go, paused.messages)
    assert paused_records(rewritten)
    done = await parent.run_with_deferred_results(
        PausedRun(rewritten, paused.pending, "X"),
        DeferredResults(approvals={"p1/s1": Approval(True)}),
    )
    assert (done.output, log) == ("ok", ["a<&>.log"])


def test_a_container_and_a_chat_audio_id_do_not_survive_go(go: Any) -> None:
    history = [
        Message(role="user", content="run it"),
        Message(
            role="assistant",
            content="the transcript",
            parts=[
                Part(
                    "audio",
                    data=b"RIFF",
                    media_type="audio/wav",
                    signature="openai-chat-audio/4102444800/audio_abc",
                )
            ],
            server_tools=[container("2099-01-01T00:00:00Z")],
        ),
    ]
    assert container_of(history) == "container_011"
    assert audio_id_of(history[1]) == "audio_abc"
    back = through_go(go, history)
    # Go's structs have no place for them: a later Anthropic request starts a new container,
    # and the Chat audio answer goes back as its transcript and its audio (ADR 0066's
    # fallback for an expired one)
    assert container_of(back) == ""
    assert audio_id_of(back[1]) == ""
    assert back[1].content == "the transcript"
    assert back[1].parts == [Part("audio", data=b"RIFF", media_type="audio/wav")]


# --------------------------------------------------------------------------- Go's own writing


def test_keys_a_go_golem_may_add_load_and_are_dropped_here(go: Any) -> None:
    """Usage, finish reasons and timestamps are not in Go's message model (Go reference §3.1:
    they live on `Result`); a later Go golem adding them as keys is additive (§3.2)."""
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
    assert m.content == "<ok> & \ufffd"
    assert m.tool_calls == [ToolCall("c1", "n", '{"a":"\\u003c"}')]
    assert m.conversation_id == "conv/c%2F1"
    (reread,) = go(dumps_history([m]))
    assert reread["out"] == answer["out"]


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
) | st.binary(max_size=6).map(
    # any bytes that may stand in a JSON string as they are
    lambda b: bytes(c for c in b if c >= 0x20 and c not in b'"\\')
)


def _bytes_doc(text: bytes, name: bytes, arg: bytes) -> bytes:
    return (
        b'[{"role":"user","content":"a'
        + text
        + b'<"},{"role":"assistant","toolCalls":[{"id":"c1","name":"n'
        + name
        + b'","args":{"k'
        + arg
        + b'":"v'
        + arg
        + b'"}}],"x":"'
        + text
        + b'"}]'
    )


@settings(BATCH, max_examples=10)
@example([(b"\xe2\x82", b"\xed\xa0\x80", b"\xff")])
@example([(b"<", b"&", b"<\xff>")])
@given(st.lists(st.tuples(BAD_UTF8, BAD_UTF8, BAD_UTF8), min_size=1, max_size=20))
def test_invalid_utf8_loads_as_the_go_golem_reads_it(
    go: Any,
    cases: list[tuple[bytes, bytes, bytes]],
) -> None:
    """Go reads invalid UTF-8 in a string as U+FFFD, one per bad byte, and keeps it in args
    (a `RawMessage`), which it then writes as they are: so a history Go wrote can hold it.
    golem reads both as Go's decoder reads the strings (ADR 0075)."""
    documents = [_bytes_doc(*case) for case in cases]
    answers = go(*["b64:" + base64.b64encode(d).decode() for d in documents])
    for document, answer in zip(documents, answers, strict=True):
        assert answer["ok"], answer.get("err")
        written = base64.b64decode(answer["outB64"])
        for text in (document, written):
            loaded = loads_history(text)
            assert golem_view(loaded) == without_args(answer["view"])
            # the view's args are Go's raw bytes, each bad byte shown as U+FFFD (what Go
            # wrote has them compacted, `<` escaped: the same JSON)
            held = [c.args for m in loaded for c in m.tool_calls]
            viewed = [c["args"] for m in answer["view"] for c in m["toolCalls"]]
            if text is document:
                assert held == viewed
            assert all(map(same_args, held, viewed)), (held, viewed)
            (again,) = go(dumps_history(loaded))
            assert without_args(again["view"]) == without_args(answer["view"])
            again_args = [c["args"] for m in again["view"] for c in m["toolCalls"]]
            assert all(map(same_args, again_args, viewed))


async def test_a_text_part_go_rewrote_is_refused_before_any_model_call(
    go: Any,
) -> None:
    """Go's Part has no `text`: the part comes back empty, which no run sends (ADR 0064)."""
    history = [
        Message(role="user", content="see", parts=[Part("text", text="<caption>"), IMAGE]),
    ]
    back = through_go(go, history)
    assert back[0].parts == [Part("text"), IMAGE]
    model = ScriptedModel("ok")
    with pytest.raises(HistoryError, match="a text part needs text"):
        await Agent(model).run("go on", history=back)
    assert model.requests == []


IMAGE = Part("image", url="https://x.test/a.png")


@pytest.mark.parametrize(
    "args",
    [' {"a":1}', '{"a":1}\n', "[" * 129 + "]" * 129, '{"a":', "null"],
    ids=["space before", "newline after", "deeper than 128", "cut off", "null text"],
)
def test_args_golem_keeps_as_text_reach_go_as_a_json_string(go: Any, args: str) -> None:
    """A kept disagreement (ADR 0015, 0075): args golem cannot embed byte for byte are
    written as a JSON string of their text. Go holds that string literal — its repair calls
    the call truncated, and a Go resume would hand the tool a string — and what Go writes
    back loads here as the same text."""
    history = [Message(role="assistant", tool_calls=[ToolCall("c1", "n", args)])]
    (answer,) = go(dumps_history(history))
    assert answer["ok"]
    assert answer["view"][0]["toolCalls"][0]["args"] == json.dumps(args, ensure_ascii=False)
    assert loads_history(answer["out"]) == history


# --------------------------------------------------------------------------- resumes, property

OBJECT_ARGS = st.sampled_from(
    [
        '{"to": "<bob> & co", "amount": 10}',
        '{"to":"b\\u006fb","amount":1e1}',
        '{"a":1,"a":2}',
        '{"s":"\\ud800 \u2028"}',
        '{"n":123456789012345678901234567890}',
        '{\n  "deep": [[[{"x": "\u00e9"}]]]\n}',
        ' {"padded": true}',
    ]
) | HOSTILE.map(lambda s: json.dumps({"t": s}, ensure_ascii=False, indent=1))


async def _pause(keyed: bool, args: list[str]) -> tuple[Agent[None, str], Any, Ledger]:
    ledger = Ledger()
    calls = [ToolCall(f"c{i}", "transfer", a) for i, a in enumerate(args)]
    model = ScriptedModel(turn(*calls), "done")
    agent: Agent[None, str] = Agent(
        model, tools=[ledger.gate("transfer")], seal_key=KEY if keyed else None
    )
    paused = await agent.run("pay", conversation_id=CONV)
    assert paused.pending is not None
    ledger.executions.clear()
    return agent, paused, ledger


@settings(BATCH, max_examples=15)
@given(
    st.lists(
        st.tuples(st.booleans(), st.lists(OBJECT_ARGS, min_size=1, max_size=3)),
        min_size=1,
        max_size=8,
    )
)
def test_any_pause_go_rewrote_resumes_with_expected_exactly_as_paused(
    go: Any,
    scenarios: list[tuple[bool, list[str]]],
) -> None:
    """Whatever args the model wrote, keyed or not: a paused history Go re-wrote resumes with
    `expected=paused.pending`, running each paused call once with the paused bytes (and seal);
    told only the conversation, a keyed agent refuses before anything runs."""

    async def scenario() -> None:
        paused_runs = [await _pause(keyed, args) for keyed, args in scenarios]
        answers = go(*[dumps_history(p.messages) for _, p, _ in paused_runs])
        for (keyed, _), (agent, paused, ledger), answer in zip(
            scenarios, paused_runs, answers, strict=True
        ):
            assert answer["ok"], answer.get("err")
            rewritten = loads_history(answer["out"])
            approve = DeferredResults(approvals={p.call_id: True for p in paused.pending.calls})
            if keyed:
                with pytest.raises(SealError):
                    await agent.run_with_deferred_results(rewritten, approve)
                assert ledger.executions == []
            started: list[tuple[str, str, str]] = []

            async def before(call: ToolCall, started: list[Any] = started) -> None:
                started.append((call.id, call.args, call.seal))

            done = await agent.run_with_deferred_results(
                PausedRun(rewritten, paused.pending, paused.conversation_id),
                approve,
                progress=ResumeProgress(before_approved=before),
            )
            assert done.output == "done"
            assert started == [(p.call_id, p.args, p.seal) for p in paused.pending.calls]
            assert len(ledger.executions) == len(started)

    asyncio.run(scenario())


async def test_a_keyed_parent_with_a_paused_sub_agent_go_rewrote_resumes_with_expected(
    go: Any,
) -> None:
    """The nested path: the parent's own sealed call loses its seal and its bytes in Go, the
    sub-agent's record keeps both; `expected=` restores the parent's and both calls run once."""
    log: list[str] = []
    own = ToolCall("c1", "transfer", '{"amount": 10, "memo": "<rent> & co"}')
    parent = nested_parent("a.log", log, own=own)
    paused = await parent.run("tidy", conversation_id="X")
    assert paused.pending is not None
    rewritten = through_go(go, paused.messages)
    approve = DeferredResults(approvals={"c1": True, "p1/s1": True})
    with pytest.raises(SealError):
        await parent.run_with_deferred_results(rewritten, approve)
    assert log == []
    started: list[tuple[str, str]] = []

    async def before(call: ToolCall) -> None:
        started.append((call.id, call.args))

    done = await parent.run_with_deferred_results(
        PausedRun(rewritten, paused.pending, "X"),
        approve,
        progress=ResumeProgress(before_approved=before),
    )
    assert (done.output, log) == ("ok", ["a.log"])
    assert ("c1", own.args) in started
