"""History JSON under mutation: every damaged history is a `HistoryError` or a history that
saves to a fixed point and that a resume handles (ADR 0070).

The seeds are valid histories: drawn from the codec's own strategy
(`tests.support.histories.histories`) and the recorded Go paused history. Each is damaged
the ways a stored or submitted file gets damaged — bytes flipped, cut short, a random JSON value
put at a random path, a value swapped for one of another type, a key written twice, a BOM, a
NUL, invalid UTF-8, a lone surrogate, a huge number, a big string — and `loads_history` must
either refuse it with a named `HistoryError` (still a `ValueError`) or return a history that
`dumps_history` writes to a fixed point and that `run_with_deferred_results` pauses, resumes, or
refuses with a `GolemError`. Sizes a property would draw too rarely are explicit cases.
"""

from __future__ import annotations

import contextlib
import json
import random
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from golem import (
    Agent,
    DeferredResults,
    GolemError,
    HistoryError,
    HistoryRepair,
    ResumeError,
    RunContext,
    Tool,
    dumps_history,
    loads_history,
    normalize_history,
    sanitize_history,
)
from golem.deferred import pending_calls
from golem.messages import Message, Part, ThinkingBlock, ToolCall
from golem.testing import ScriptedModel
from golem.tool import DeferKind, Deferred, call_approved
from tests.support.histories import GO_FIXTURE, JSON_VALUES, damaged

FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
BIG = 100_000

# --------------------------------------------------------------------------- what must hold


def _act(ctx: RunContext[None], args: dict[str, Any]) -> str:
    if not call_approved():
        raise Deferred(DeferKind.APPROVAL, "needs sign-off")
    return "done"


def _agent(names: set[str]) -> Agent[None, str]:
    tools = [
        Tool(n, "acts", {"type": "object"}, _act, run_in_thread=False) for n in sorted(names) if n
    ]
    return Agent(ScriptedModel(Message(role="assistant", content="ok")), tools=tools)


def check_loads_or_named(text: bytes | str) -> list[Message] | None:
    """`text` is a `HistoryError`, or a history with a fixed-point dump that a resume handles."""
    try:
        history = loads_history(text)
    except HistoryError as exc:
        message = str(exc)
        assert message, "a HistoryError says what is wrong"
        return None
    written = dumps_history(history)
    assert loads_history(written) == history
    assert dumps_history(loads_history(written)) == written
    _resume_handles(history)
    return history


def _resume_handles(history: list[Message]) -> None:
    try:
        pending = pending_calls(history)
    except GolemError:
        pending = []
    agent = _agent({c.name for c in pending})
    results = DeferredResults(approvals={c.id: True for c in pending})
    with contextlib.suppress(GolemError):  # named: refused (ResumeError) or failed (RunError)
        agent.run_with_deferred_results_sync(history, results)


# --------------------------------------------------------------------------- properties


@FUZZ
@given(damaged())
def test_a_damaged_history_is_a_history_error_or_a_history_that_resumes(text: bytes) -> None:
    check_loads_or_named(text)
    try:
        as_text = text.decode()
    except UnicodeDecodeError:
        return
    check_loads_or_named(as_text)


def _deep(n: int, where: str) -> str:
    nested = "[" * n + "]" * n
    return {
        "top": nested,
        "args": '[{"role":"assistant","toolCalls":[{"id":"a","name":"act","args":'
        + nested
        + "}]}]",
        "unknown": '[{"role":"user","x":' + nested + "}]",
        "content": '[{"role":"user","content":' + nested + "}]",
        "citation": '[{"role":"assistant","citations":[{"raw":' + nested + "}]}]",
    }[where]


def _call(args: str) -> str:
    return '[{"role":"assistant","toolCalls":[{"id":"a","name":"act","args":' + args + "}]}]"


BIG_CASES = {
    "deep 10^5 top": _deep(BIG, "top"),
    "deep 10^5 args": _deep(BIG, "args"),
    "deep 10^5 unknown key": _deep(BIG, "unknown"),
    "deep 10^5 content": _deep(BIG, "content"),
    "deep 10^5 citation raw": _deep(BIG, "citation"),
    "deep objects 10^5": _call('{"a":' * BIG + "1" + "}" * BIG),
    "unclosed 10^5": "[" * BIG,
    "1e999999 args": _call('{"n":1e999999}'),
    "-1e999999 args": _call("-1e999999"),
    "10^5-digit int args": _call("9" * BIG),
    "10^5-digit int start": '[{"role":"assistant","citations":[{"start":' + "9" * BIG + "}]}]",
    "10^5-digit int unknown": '[{"role":"user","x":' + "9" * BIG + "}]",
    "1e999999 at": '[{"role":"assistant","serverTools":[{"provider":"p","type":"t","at":1e999999}]}]',
    "10^5-digit fraction": '[{"role":"user","x":0.' + "1" * BIG + "}]",
    "big content": '[{"role":"user","content":"' + "a" * 10**7 + '"}]',
    "big escaped content": '[{"role":"user","content":"' + "\\u00e9" * BIG + '"}]',
    "many lone surrogates in args": _call(
        "[" + ",".join(f'"\\ud{i % 0x400 + 0x800:03x}"' for i in range(BIG // 10)) + "]"
    ),
    "many lone surrogates in content": '[{"role":"user","content":"' + "\\ud800" * BIG + '"}]',
    "many messages": "[" + ",".join(['{"role":"user","content":"x"}'] * BIG) + "]",
    "many duplicate keys": '[{"role":"user",' + ",".join(['"role":"tool"'] * BIG) + "}]",
    "BOM": '\ufeff[{"role":"user"}]',
    "NUL": '[{"role":"user","content":"a\x00b"}]',
    "escaped NUL": '[{"role":"user","content":"a\\u0000b"}]',
    "lone surrogate content": '[{"role":"user","content":"\\udfff"}]',
    "raw lone surrogate content": '[{"role":"user","content":"\ud800"}]',
    "duplicate role": '[{"role":"user","role":"robot"}]',
    "NaN args": _call("NaN"),
    "Infinity unknown": '[{"role":"user","x":Infinity}]',
}


@pytest.mark.parametrize("text", list(BIG_CASES.values()), ids=list(BIG_CASES))
def test_hostile_sizes_and_spellings_are_named_or_load(text: str) -> None:
    check_loads_or_named(text)
    try:
        data = text.encode()
    except UnicodeEncodeError:
        data = text.encode("utf-8", "surrogatepass")  # invalid UTF-8 bytes
    check_loads_or_named(data)


@pytest.mark.parametrize("data", [b"\xef\xbb\xbf[]", b"[\xff]", b"\x00", b""])
def test_invalid_utf8_bom_and_nul_bytes_are_history_errors(data: bytes) -> None:
    # b"[\xff]" is "[\ufffd]" as Go reads it (ADR 0075): still not JSON
    with pytest.raises(HistoryError):
        loads_history(data)


def test_a_random_walk_of_damage_on_the_go_fixture_never_escapes_unnamed() -> None:
    """Every single-byte change of the recorded Go paused history (a deterministic sample)."""
    text = GO_FIXTURE.read_bytes()
    rng = random.Random(70)
    for _ in range(200):
        i = rng.randrange(len(text))
        check_loads_or_named(text[:i] + bytes([rng.randrange(256)]) + text[i + 1 :])


def test_a_loaded_damaged_history_with_a_pending_call_resumes() -> None:
    """The resume half of the property is not vacuous: a damaged but loadable paused history
    (an unknown key added, a duplicate key) resumes and completes."""
    doc = (
        '[{"role":"user","content":"go","x":[1e999999]},'
        '{"role":"assistant","toolCalls":[{"id":"c1","name":"act","args":{"a":1,"a":2}}],'
        '"role":"assistant"}]'
    )
    history = check_loads_or_named(doc)
    assert history is not None
    assert [c.id for c in pending_calls(history)] == ["c1"]
    result = _agent({"act"}).run_with_deferred_results_sync(
        history, DeferredResults(approvals={"c1": True})
    )
    assert result.output == "ok"
    assert [c.args for c in history[1].tool_calls] == ['{"a":1,"a":2}']


@example(ToolCall("c", "act", '{"a":' * 200 + "1" + "}" * 200))
@given(st.builds(ToolCall, id=st.text(max_size=4), name=st.just("act"), args=st.text(max_size=20)))
@settings(deadline=None)
def test_any_call_args_survive_the_trip_and_the_resume(call: ToolCall) -> None:
    try:
        text = dumps_history([Message(role="assistant", tool_calls=[call])])
    except HistoryError:
        return
    history = check_loads_or_named(text)
    assert history is not None
    assert history[0].tool_calls == [call]


# --------------------------------------------------------------------------- hostile counts


class _CountingCalls(list[ToolCall]):
    """A message's tool calls that count every call visited (iterated or reversed)."""

    visits = 0

    def __iter__(self) -> Iterator[ToolCall]:
        for c in super().__iter__():
            _CountingCalls.visits += 1
            yield c

    def __reversed__(self) -> Iterator[ToolCall]:
        for c in super().__reversed__():
            _CountingCalls.visits += 1
            yield c


@pytest.mark.parametrize("repair", [normalize_history, sanitize_history])
def test_closing_many_unanswered_calls_of_one_message_visits_each_call_a_few_times(
    repair: Any,
) -> None:
    """10,000 unanswered calls in one assistant message: the repair names each synthesized
    result after its call by one pass over the message. It looked each name up by scanning the
    message from the end, once per call: 10^4 calls took ~1 s, 10^5 about two minutes, on
    every run over such a history (counted visits, not time)."""
    n = 10_000
    calls = _CountingCalls(ToolCall(f"c{i}", f"tool{i % 7}", "{}") for i in range(n))
    history = [Message(role="user", content="go"), Message(role="assistant", tool_calls=calls)]
    _CountingCalls.visits = 0
    repaired, report = repair(history)
    assert _CountingCalls.visits <= 5 * n  # was about n * n / 2
    if not isinstance(report, HistoryRepair):
        report = report.repair
    assert report.synthesized == [f"c{i}" for i in range(n)]
    assert [m.tool_name for m in repaired[2:]] == [f"tool{i % 7}" for i in range(n)]


# --------------------------------------------------------------------------- depth, as Go has it


def _args_doc(args: str) -> str:
    return (
        '[{"role":"user","content":"go"},'
        '{"role":"assistant","toolCalls":[{"id":"c1","name":"act","args":' + args + "}]}]"
    )


@pytest.mark.parametrize(
    "args",
    [
        "[" * 1500 + "]" * 1500,  # was "nested too deeply": Go writes and reads it
        '{"a":' * 3000 + " 1 " + "}" * 3000,
        '{"x":[1,{"y":' + "[" * 2000 + '"s\\"]"' + "]" * 2000 + '}],"z":2}',
        '["\\ud800",' + "[" * 2000 + '"\\udfff"' + "]" * 2000 + "]",  # with lone escapes
        "[" * 9996 + "]" * 9996,  # the whole document 10,000 deep: Go's limit
    ],
    ids=["arrays 1500", "objects 3000", "mixed", "lone escapes", "at Go's limit"],
)
def test_args_nested_as_deep_as_go_allows_load_byte_exact_and_resume(args: str) -> None:
    history = check_loads_or_named(_args_doc(args))
    assert history is not None
    assert history[1].tool_calls[0].args == args
    assert loads_history(_args_doc(args).encode()) == history


@pytest.mark.parametrize(
    "text",
    [
        _args_doc("[" * 9997 + "]" * 9997),  # 10,001 deep: Go refuses too
        _args_doc("[" * 2000 + "1,," + "]" * 2000),  # deep and not JSON
        _args_doc("[" * 2000 + "}" + "]" * 1999),
        _args_doc("[" * 2000 + "]" * 2000) + " x",
        '[{"role":"user","content":' + "[" * 3000 + "]" * 3000 + "}]",
        '[{"role":' + "[" * 3000 + "]" * 3000 + "}]",
    ],
    ids=["past Go's limit", "bad inside", "mismatched", "trailing", "deep content", "deep role"],
)
def test_deep_documents_that_are_not_histories_are_history_errors(text: str) -> None:
    with pytest.raises(HistoryError):
        loads_history(text)


def test_deep_args_load_whatever_the_callers_stack_depth() -> None:
    """msgspec's limit is the interpreter's recursion limit minus the caller's depth: args
    900 deep loaded at the top of a stack and not 100 frames down. The slow path does not
    recurse, so the same document loads at any depth."""
    text = _args_doc("[" * 900 + "]" * 900)

    def down(n: int) -> list[Message]:
        return loads_history(text) if n == 0 else down(n - 1)

    assert down(300)[1].tool_calls[0].args == "[" * 900 + "]" * 900


def _strict_json(text: str) -> bool:
    def refuse(name: str) -> object:
        raise ValueError(name)

    try:
        json.loads(text, parse_constant=refuse)
    except (ValueError, RecursionError):
        return False
    return True


_JSONISH = st.text(alphabet='[]{}:,"\\ -+.0123456789eEtrufalsn\t\n\x00\x1fx', max_size=30)


@FUZZ
@example('{"a":[1,2.5e-3,"x\\u00e9\\n",true,false,null],"b":{}}')
@example("[1,]")
@example('{"a" 1}')
@example('"\\x"')
@example("01")
@example("[] []")
@example(" [ ] ")
@example("[]]")
@given(
    _JSONISH
    | JSON_VALUES.map(lambda v: json.dumps(v, indent=None))
    | JSON_VALUES.map(lambda v: json.dumps(v, indent=1))
)
def test_the_depth_scanner_takes_exactly_the_json_the_stdlib_takes(text: str) -> None:
    """The slow path's own JSON check (it never recurses) agrees with `json.loads`."""
    from golem.messages import deep_spans

    assert (deep_spans(text) is not None) == _strict_json(text)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(JSON_VALUES, st.integers(1100, 3000), st.booleans())
def test_any_value_nested_past_the_recursion_limit_in_args_loads_byte_exact(
    value: object, depth: int, indent: bool
) -> None:
    inner = json.dumps(value, indent=1 if indent else None, ensure_ascii=False)
    args = '{"k":' + "[" * depth + inner + "]" * depth + ',"v":"\\ud800"}'
    text = _args_doc(args)
    try:
        text.encode()
    except UnicodeEncodeError:  # a lone surrogate drawn raw: not UTF-8 text
        return
    history = check_loads_or_named(text)
    assert history is not None
    assert history[1].tool_calls[0].args == args


@pytest.mark.parametrize(
    "bad",
    [
        Message(role="system", content="s", parts=[Part("image", url="https://x.test/a.png")]),
        Message(role="user", thinking=[ThinkingBlock(text="why")]),
        Message(role="user", parts=[Part("image")]),  # neither url nor data
    ],
    ids=["parts on system", "thinking on user", "invalid part"],
)
def test_a_run_over_a_history_that_breaks_the_rules_is_a_history_error(bad: Message) -> None:
    """Was a plain ValueError; now the named `HistoryError` (still a `ValueError`), and for a
    resume still a `ResumeError`."""
    agent: Agent[None, str] = Agent(ScriptedModel(Message(role="assistant", content="ok")))
    with pytest.raises(HistoryError, match="history message 0"):
        agent.run_sync("go", history=[bad])
    with pytest.raises(ResumeError, match="history message 0"):
        agent.run_with_deferred_results_sync(
            [bad, Message(role="assistant", tool_calls=[ToolCall("c1", "act")])],
            DeferredResults(approvals={"c1": True}),
        )
