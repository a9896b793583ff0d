"""Resuming a paused history after the Go golem re-wrote it (ADR 0075).

The Go golem reads a history into its own structs and writes it again with `encoding/json`:
tool-call args are compacted and `<`, `>`, `&`, U+2028 and U+2029 in them escaped, and the
keys Go does not know (`seal`, `citations`, `serverTools`, a part's `text` and `signature`)
are dropped. These tests need no Go toolchain: `go_compact` re-spells args as Go does
(tests/test_contract_go_interop.py checks it against the real Go program).
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from golem import (
    Agent,
    Approval,
    DeferredRequests,
    DeferredResults,
    Message,
    PausedRun,
    PendingToolCall,
    ResumeError,
    SealError,
    ToolCall,
    dumps_history,
    loads_history,
)
from golem.testing import ScriptedModel
from tests.support.go import RESOLVE, SPACED, go_compact, paused_keyless, with_args
from tests.support.ledger import make_agent
from tests.support.seals import nested_parent


def _go_compacted(history: list[Message]) -> list[Message]:
    return [
        replace(m, tool_calls=[replace(c, args=go_compact(c.args)) for c in m.tool_calls])
        for m in history
    ]


async def test_a_keyless_resume_with_expected_accepts_args_go_compacted() -> None:
    agent, _, ledger, history, pending = await paused_keyless()
    rewritten = _go_compacted(loads_history(dumps_history(history)))
    batch = next(m for m in rewritten if m.tool_calls)
    assert batch.tool_calls[0].args == '{"to":"\\u003cbob\\u003e \\u0026 co","amount":10}'
    done = await agent.run_with_deferred_results(PausedRun(rewritten, pending, ""), RESOLVE)
    assert done.output == "done"
    # the approved call ran once, with the bytes the model wrote and the approvers saw
    (ran,) = [e for e in ledger.executions if e[2]]
    assert ran[0] == "transfer"
    assert ran[3] == {"to": "<bob> & co", "amount": 10}
    # and the resumed history holds them again
    assert next(m for m in done.messages if m.tool_calls).tool_calls[0].args == SPACED


async def test_a_resume_with_expected_still_refuses_changed_args() -> None:
    agent, _, ledger, history, pending = await paused_keyless()
    changed = with_args(history, "c1", '{"to": "<eve> & co", "amount": 10}')
    with pytest.raises(ResumeError, match="arguments differ"):
        await agent.run_with_deferred_results(PausedRun(changed, pending, ""), RESOLVE)
    assert ledger.executions == []


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ('{"a": 1}', '{"a":1}', True),
        ('{"a":"<&>\u2028"}', '{"a":"\\u003c\\u0026\\u003e\\u2028"}', True),
        ('{"\\u0061":1}', '{"a":1}', True),
        ('{"a":1,"a":2}', '{"a":2}', False),  # duplicate keys: parsers differ on which wins
        ('{"a":1,"b":2}', '{"b":2,"a":1}', False),  # order kept
        ('{"a":1}', '{"a":1.0}', False),  # a number as spelled
        ('{"a":1e400}', '{"a":1E400}', False),
        ('{"a":true}', '{"a":1}', False),
        ("[1,2]", '{"0":1,"1":2}', False),
        ('{"a":"1"}', '{"a":1}', False),
        ('{"a":', '{"a":', True),  # equal bytes are the same args, JSON or not
        ('{"a":', '{"a": ', False),  # truncated: only equal bytes
        ('{"a":NaN}', '{"a": NaN}', False),
        ("", "null", False),
    ],
)
def test_a_pending_call_binds_its_args_token_for_token(a: str, b: str, same: bool) -> None:
    assert same_args(a, b) is same
    assert same_args(b, a) is same


def same_args(paused: str, now: str) -> bool:
    """Whether a keyless resume of a call paused with `paused` args accepts the history's
    `now` args (the `PausedRun` binds them) or refuses them as different."""
    history = [
        Message(role="user", content="go"),
        Message(role="assistant", tool_calls=[ToolCall("c1", "t", now)]),
    ]
    run = PausedRun(history, DeferredRequests(approvals=[PendingToolCall("c1", "t", paused)]), "")
    try:
        Agent(ScriptedModel("ok")).run_with_deferred_results_sync(
            run, DeferredResults({"c1": Approval(False)})
        )
    except ResumeError as exc:
        if "arguments differ" not in str(exc):
            raise
        return False
    return True


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=10,
)


@given(_JSON, st.sampled_from([None, 2]))
def test_go_compacting_never_changes_the_args(value: Any, indent: int | None) -> None:
    raw = json.dumps(value, ensure_ascii=False, indent=indent)
    assert same_args(raw, go_compact(raw))
    assert same_args(json.dumps(value), go_compact(raw))  # escapes read as their characters


@given(_JSON, _JSON)
def test_args_of_different_values_are_never_the_same(a: Any, b: Any) -> None:
    ra, rb = json.dumps(a), json.dumps(b)
    if json.loads(ra) != json.loads(rb) or type(a) is not type(b):
        assert not same_args(ra, rb)


async def test_a_nested_keyless_resume_with_expected_accepts_the_parents_args_go_compacted() -> (
    None
):
    log: list[str] = []
    own = ToolCall("c1", "transfer", '{"amount": 10, "memo": "<rent> & co"}')
    parent = nested_parent("a.log", log, seal_key=None, own=own)
    paused = await parent.run("tidy")
    assert paused.pending is not None
    rewritten = _go_compacted(loads_history(dumps_history(paused.messages)))
    assert rewritten != paused.messages  # the parent's own args changed bytes
    done = await parent.run_with_deferred_results(
        PausedRun(rewritten, paused.pending, ""),
        DeferredResults(approvals={"c1": True, "p1/s1": True}),
    )
    assert (done.output, log) == ("ok", ["a.log"])


def _as_go_writes_it(history: list[Message]) -> list[Message]:
    """What the Go golem keeps of a history: no run or conversation ID, no seals."""
    return [
        replace(
            m,
            run_id="",
            conversation_id="",
            tool_calls=[replace(c, args=go_compact(c.args), seal="") for c in m.tool_calls],
        )
        for m in loads_history(dumps_history(history))
    ]


async def test_a_sealed_history_the_go_golem_rewrote_resumes_with_expected_alone() -> None:
    agent, _, ledger = make_agent(answers=2)
    paused = await agent.run("pay bob", conversation_id="conv-1")
    assert paused.pending is not None
    assert paused.paused_run is not None
    ledger.executions.clear()
    rewritten = _as_go_writes_it(paused.messages)
    done = await agent.run_with_deferred_results(PausedRun(rewritten, paused.pending, ""), RESOLVE)
    assert done.output == "done"
    assert done.conversation_id == "conv-1"
    assert [e[0] for e in ledger.executions if e[2]] == ["transfer"]
    again = replace(paused.paused_run, messages=_as_go_writes_it(paused.messages))
    assert (await agent.run_with_deferred_results(again, RESOLVE)).output == "done"


async def test_a_go_rewritten_sealed_history_without_its_conversation_names_the_cause() -> None:
    agent, _, ledger = make_agent()
    paused = await agent.run("pay bob", conversation_id="conv-1")
    assert paused.pending is not None
    ledger.executions.clear()
    kept = DeferredRequests(paused.pending.approvals, paused.pending.external)  # no conversation
    with pytest.raises(SealError, match="nothing named the conversation"):
        await agent.run_with_deferred_results(
            PausedRun(_as_go_writes_it(paused.messages), kept, ""), RESOLVE
        )
    with pytest.raises(SealError, match="the Go golem re-wrote"):
        await agent.run_with_deferred_results(_as_go_writes_it(paused.messages), RESOLVE)
    assert ledger.executions == []


def test_a_text_part_whose_text_the_go_golem_dropped_is_named_and_reported() -> None:
    from golem import Agent, HistoryError, Part, UnsafePart, sanitize_history
    from golem.testing import ScriptedModel

    ours = dumps_history([Message(role="user", content="see", parts=[Part("text", text="x")])])
    as_go_writes_it = ours.replace(',"text":"x"', "")
    assert '{"kind":"text"}' in as_go_writes_it
    back = loads_history(as_go_writes_it)
    with pytest.raises(HistoryError, match=r"text part needs text.*Go golem re-wrote"):
        Agent(ScriptedModel("ok")).run_sync("go on", history=back)
    clean, report = sanitize_history(back)
    assert report.unsafe_parts == [UnsafePart(message_index=0, kind="text", scheme="")]
    assert clean[0].parts == []
    assert Agent(ScriptedModel("ok")).run_sync("go on", history=clean).output == "ok"
