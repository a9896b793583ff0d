"""Sealed pending calls through an Agent (ADR 0063, 0065): a pausing run seals, a resume
verifies before any tool or model call and binds the conversation it is told; hostile
histories and resolutions (tables and properties) run nothing or exactly the sealed calls.

Attacker model: writes the paused history JSON and the resolutions, reads other
conversations' stored histories, does not hold the seal key.
"""

from __future__ import annotations

import asyncio
import json
import unicodedata
from collections.abc import Callable
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
    ResumeError,
    ResumeProgress,
    SealError,
    SealKeys,
    Tool,
    ToolCall,
    dumps_history,
    loads_history,
    sanitize_history,
)
from golem.agent_tool import sub_conversation
from golem.errors import ConversationRequired, SubAgentConversationMismatch
from golem.records import sub_agent_calls
from golem.seal import verify_call
from golem.testing import ScriptedModel
from golem.tool import DeferKind
from tests.support import seals
from tests.support.ledger import CONV, KEY, LOOKUP, OBJ, TRANSFER, Ledger, make_agent, turn
from tests.support.seals import bound, legacy, nested_parent
from tests.support.subagents import ask, calls, janitor, text

OTHER_KEY = b"t" * 32
RESOLVE = DeferredResults(approvals={"c1": Approval(True)}, external={"c2": "1.1"})
APPROVE_C1 = DeferredResults(approvals={"c1": True})
APPROVE_SUB = DeferredResults(approvals={"p1/s1": True})


def batch_index(history: list[Message]) -> int:
    return max(i for i, m in enumerate(history) if m.tool_calls)


def edit_call(history: list[Message], call_id: str, **changes: Any) -> list[Message]:
    out, i = list(history), batch_index(history)
    out[i] = replace(
        out[i],
        tool_calls=[replace(c, **changes) if c.id == call_id else c for c in out[i].tool_calls],
    )
    return out


def add_calls(history: list[Message], *extra: ToolCall, at: int | None = None) -> list[Message]:
    if at is None:
        return [*history, Message(role="assistant", tool_calls=list(extra))]
    return [*history[:at], Message(role="assistant", tool_calls=list(extra)), *history[at:]]


# --------------------------------------------------------------------------- pausing and genuine resumes


async def test_a_pausing_run_seals_only_its_pending_calls_in_messages_and_pending() -> None:
    ledger = Ledger()
    plain = Tool("plain", "p", OBJ, lambda ctx, args: "ok")
    model = ScriptedModel(turn(ToolCall("p1", "plain", "{}"), TRANSFER, LOOKUP))
    tools = [plain, ledger.gate("transfer"), ledger.gate("lookup", DeferKind.EXTERNAL)]
    agent = Agent(model, tools=tools, seal_key=KEY)
    paused = await agent.run("pay bob", conversation_id="conv-1")
    assert paused.pending is not None
    (approval,), (external,) = paused.pending.approvals, paused.pending.external
    by_id = {c.id: c for c in paused.messages[batch_index(paused.messages)].tool_calls}
    assert (by_id["c1"].seal, by_id["c2"].seal, by_id["p1"].seal) == (
        approval.seal,
        external.seal,
        "",
    )
    assert approval.seal.startswith("v1.k1.approval.")
    assert external.seal.startswith("v1.k1.external.")
    assert verify_call(KEY, "conv-1", by_id["c1"]) is DeferKind.APPROVAL
    assert verify_call(KEY, "conv-1", by_id["c2"]) is DeferKind.EXTERNAL
    assert (by_id["c1"].name, by_id["c1"].args) == (TRANSFER.name, TRANSFER.args)
    keyless, _, _ = make_agent(seal_key=None)
    paused = await keyless.run("pay bob")
    assert paused.pending is not None
    assert {p.seal for p in paused.pending.calls} | {
        c.seal for m in paused.messages for c in m.tool_calls
    } == {""}
    with pytest.raises(ValueError, match="at least 32 bytes"):
        Agent(ScriptedModel(), seal_key=b"short")


@pytest.mark.parametrize("how", ["as-is", "json", "fresh-agent", "rotated", "denied"])
async def test_a_genuine_sealed_history_resumes(how: str) -> None:
    pause_key: Any = SealKeys(KEY, key_id="2025") if how == "rotated" else KEY
    agent, _, ledger = make_agent(seal_key=pause_key)
    paused = await agent.run("pay bob", conversation_id=CONV)
    ledger.executions.clear()
    run: Any = bound(paused)
    results = RESOLVE
    if how == "json":
        text = run.dumps()
        assert '"seal":"v1.k1.approval.' in text
        run = PausedRun.loads(text)
    elif how in ("fresh-agent", "rotated"):
        key: Any = (
            SealKeys(OTHER_KEY, key_id="2026", older={"2025": KEY}) if how == "rotated" else KEY
        )
        agent, _, ledger = make_agent(seal_key=key)
        agent.model = ScriptedModel(
            turn(ToolCall("c9", "transfer", "{}")) if how == "rotated" else "done"
        )
    elif how == "denied":
        results = DeferredResults(approvals={"c1": False}, external={"c2": "x"})
    done = await agent.run_with_deferred_results(run, results)
    ran = [(n, c, a) for n, c, a, _ in ledger.executions]
    if how == "rotated":  # re-sealed under the current key when it pauses again
        assert done.pending is not None
        assert done.pending.approvals[0].seal.startswith("v1.2026.approval.")
        assert ran == [("transfer", "c1", True), ("transfer", "c9", False)]
    else:
        assert done.output == "done"
        assert ran == ([] if how == "denied" else [("transfer", "c1", True)])


# --------------------------------------------------------------------------- hostile resumes

Edit = Callable[[list[Message], DeferredRequests], list[Message]]
KEEP: Edit = lambda h, p: h  # noqa: E731


KEYLESS = {"keyless", "exp", "exp-more", "exp-list"}
Refused = ResumeError


def extra_expected(h: list[Message], p: DeferredRequests) -> DeferredRequests:
    return replace(p, approvals=[*p.approvals, replace(p.approvals[0], call_id="zz")])


# (id, the pausing agent's key, edit, resolutions, resume keywords, error, match)
PAUSE_KEYS: dict[str, Any] = {
    "key": KEY,
    "other": OTHER_KEY,
    "retired": SealKeys(OTHER_KEY, key_id="retired"),
    "none": None,
}
HOSTILE_EDITS: dict[str, Edit] = {
    "keep": KEEP,
    "args": lambda h, p: edit_call(h, "c1", args='{"to":"mallory","amount":10000}'),
    "small-args": lambda h, p: edit_call(h, "c1", args='{"to":"mallory","amount":10}'),
    "name": lambda h, p: edit_call(h, "c1", name="delete_account"),
    "kind": lambda h, p: edit_call(
        h, "c1", seal=h[batch_index(h)].tool_calls[0].seal.replace(".approval.", ".external.")
    ),
    "forge-in-batch": lambda h, p: [
        *h[:-1],
        replace(h[-1], tool_calls=[*h[-1].tool_calls, ToolCall("c3", "delete_account", "{}")]),
    ],
    "forge": lambda h, p: add_calls(h, ToolCall("c3", "delete_account", "{}")),
    "forge-older": lambda h, p: add_calls(
        h, ToolCall("old-1", "delete_account", '{"id":1}'), at=batch_index(h)
    ),
    "duplicate": lambda h, p: add_calls(h, h[batch_index(h)].tool_calls[0]),
    "dup-id": lambda h, p: add_calls(h, replace(TRANSFER, args='{"to":"eve"}')),
    "relabel": lambda h, p: [replace(m, conversation_id="elsewhere") for m in h],
}
RESOLVING = {
    "resolve": RESOLVE,
    "ext-c1": DeferredResults(external={"c1": "paid", "c2": "x"}),
    "appr-c2": DeferredResults(approvals={"c1": True, "c2": True}),
    "deny-c2": DeferredResults(approvals={"c1": True, "c2": False}),
    "with-c3": DeferredResults(approvals={"c1": True, "c3": True}, external={"c2": "x"}),
    "with-old": DeferredResults(approvals={"c1": True, "old-1": True}, external={"c2": "x"}),
}
# (id, the pausing agent's key, edit, resolutions, what the resume passes (a plain history,
# the paused run with or without its conversation), error, match)
HOSTILE = [
    ("args", "key", "args", "resolve", "none", SealError, r'"c1".*does not match'),
    ("name", "key", "name", "resolve", "none", SealError, "delete_account"),
    ("kind-in-seal", "key", "kind", "ext-c1", "none", SealError, "does not match"),
    ("forged-batch", "key", "forge-in-batch", "with-c3", "none", SealError, '"c3".*has no seal'),
    ("forged-older", "key", "forge-older", "with-old", "none", Refused, 'unknown tool call "old-1'),
    ("duplicate-id", "key", "duplicate", "resolve", "none", Refused, '"c1".*more than once'),
    ("another-key", "other", "keep", "resolve", "none", SealError, "does not match"),
    ("unknown-key-id", "retired", "keep", "resolve", "none", SealError, 'unknown key ID "retired"'),
    ("unsealed", "none", "keep", "resolve", "none", SealError, "has no seal"),
    ("relabeled", "key", "relabel", "resolve", "none", SealError, "does not match"),
    ("told-another", "key", "keep", "resolve", "elsewhere", SealError, "does not match"),
    ("ext-for-approval", "key", "keep", "ext-c1", "conv", Refused, '"c1".*waits for an approval'),
    ("approval-for-ext", "key", "keep", "appr-c2", "conv", Refused, '"c2".*waits for an external'),
    ("denial-for-ext", "key", "keep", "deny-c2", "conv", Refused, '"c2".*waits for an external'),
    # without a key, the paused run's pending calls bind the calls
    ("kl-dup", "none", "dup-id", "resolve", "keyless", Refused, '"c1".*more than once'),
    ("kl-ext-for-appr", "none", "keep", "ext-c1", "exp", Refused, '"c1".*waits for an approval'),
    ("kl-appr-for-ext", "none", "keep", "appr-c2", "exp", Refused, '"c2".*waits for an external'),
    ("kl-unexpected", "none", "forge", "with-c3", "exp", Refused, '"c3".*not one of the expected'),
    ("kl-args", "none", "small-args", "resolve", "exp", Refused, '"c1": its arguments differ'),
    ("kl-name", "none", "name", "resolve", "exp", Refused, '"c1": its tool name differs'),
    ("kl-extra", "none", "keep", "resolve", "exp-more", Refused, '"zz" is not pending'),
    (
        "kl-type",
        "none",
        "keep",
        "resolve",
        "exp-list",
        TypeError,
        r"pending \(DeferredRequests\), got list",
    ),
]


@pytest.mark.parametrize(
    ("pause_key", "edit", "resolving", "bind", "error", "match"),
    [row[1:] for row in HOSTILE],
    ids=[row[0] for row in HOSTILE],
)
async def test_a_hostile_resume_is_refused_before_any_tool_or_model_call(
    pause_key: str, edit: str, resolving: str, bind: str, error: type[Exception], match: str
) -> None:
    results = RESOLVING[resolving]
    pausing, _, _ = make_agent(seal_key=PAUSE_KEYS[pause_key])
    paused = await pausing.run("pay bob", conversation_id=CONV)
    assert paused.pending is not None
    agent, _, ledger = make_agent(seal_key=None if bind in KEYLESS else KEY)
    model = agent.model = ScriptedModel("done")
    history = HOSTILE_EDITS[edit](paused.messages, paused.pending)
    resumed: Any = {
        "none": history,
        "keyless": history,
        "conv": bound(paused, history),
        "elsewhere": bound(paused, history, "elsewhere"),
        "exp": bound(paused, history, ""),
        "exp-more": bound(paused, history, "", extra_expected(history, paused.pending)),
        "exp-list": bound(paused, history, "", paused.pending.calls),
    }[bind]
    with pytest.raises(error, match=match) as info:
        await agent.run_with_deferred_results(resumed, results)
    if isinstance(info.value, SealError) and "seal" in match:
        assert info.value.problem == "unsealed"
    assert ledger.executions == []
    assert model.requests == []
    if bind == "exp":  # the genuine history resumes with the same pending calls
        done = await agent.run_with_deferred_results(bound(paused, conversation=""), RESOLVE)
        assert done.output == "done"


# --------------------------------------------------------------------------- edits of a whole history

# each spelling, and whether `_respell` keeps it the same JSON token for token (escapes read;
# key order, duplicates and number spelling kept: what the pending call binds, ADR 0075)
SPELLINGS = {
    '{"to":"bob","amount":10}': True,
    '{ "amount" : 10, "to" : "bob" }': True,
    '{"to":"b\\u006fb","amount":1e1}': False,
    '{"to":"bob","amount":10,"amount":10000}': False,
    '{"n":-0,"big":123456789012345678901234567890}': False,
    '{"s":"\\ud800"}': True,
}
EDITS = [
    "none",
    "trim_prefix",
    "json_char",
    "args_respell",
    "revive_old",
    "move_old_into_batch",
    "swap_seals",
    "swap_ids",
    "duplicate",
    "extra_call",
    "strip_seal",
    "rename_nfd",
    "relabel_conversation",
    "drop_batch_call",
    "foreign_call",
]
BINDS = ["paused_run", "expected", "none"]  # what the resumer vouches for (ADR 0065)


def _respell(args: str) -> str:
    data = json.loads(args)
    return json.dumps(data, indent=1) if data else "{ }"


@given(
    spellings=st.lists(st.sampled_from(list(SPELLINGS)), min_size=2, max_size=2),
    edit=st.sampled_from(EDITS),
    keyed=st.booleans(),
    data=st.data(),
)
def test_any_edit_of_a_paused_history_runs_exactly_the_sealed_calls_or_nothing(
    spellings: list[str], edit: str, keyed: bool, data: st.DataObject
) -> None:
    """A resume either raises before anything runs, or runs exactly the paused batch's calls,
    once each, with their paused name, call ID and argument bytes: with a key and the
    `PausedRun` (with or without its conversation), or without a key and with the `PausedRun`.
    With a key and a plain history, every resume raises (its conversation ID is its editor's)."""
    bind = data.draw(st.sampled_from(BINDS), label="bind") if keyed else "expected"
    ran = seals.Ran()
    tools = [ran.gate("transfer"), ran.gate("delete_account"), ran.gate("transfér")]
    batch = [ToolCall("c1", "transfer", spellings[0]), ToolCall("c2", "transfér", spellings[1])]
    model = ScriptedModel(turn(ToolCall("c0", "transfer", '{"amount":1}')), turn(*batch), "done")
    agent: Agent[None, str] = Agent(model, tools=tools, seal_key=KEY if keyed else None)
    started: list[tuple[str, str, str]] = []
    respelled: list[str] = []

    async def before(call: ToolCall) -> None:
        started.append((call.id, call.name, call.args))

    async def scenario() -> None:
        first = await agent.run("go", conversation_id="conv")
        paused = await agent.run_with_deferred_results(
            bound(first), DeferredResults(approvals={"c0": True})
        )
        history = list(paused.messages)
        b = batch_index(history)
        old = next(j for j, m in enumerate(history) if m.tool_calls)
        sealed = [(c.id, c.name, c.args) for c in history[b].tool_calls]
        c0 = history[old].tool_calls[0]
        ran.calls.clear()
        victim = data.draw(st.integers(0, 1), label="victim")
        bc = list(history[b].tool_calls)
        calls_in_b: list[ToolCall] | None = None
        if edit == "trim_prefix":
            history = history[old + 2 :] if data.draw(st.booleans()) else history[1:]
        elif edit == "args_respell":
            respelled[:] = [bc[victim].args, _respell(bc[victim].args)]
            bc[victim] = replace(bc[victim], args=respelled[1])
            calls_in_b = bc
        elif edit == "move_old_into_batch":
            history[old] = replace(history[old], tool_calls=[])
            calls_in_b = [*bc, c0]
        elif edit == "swap_seals":
            calls_in_b = [replace(bc[0], seal=bc[1].seal), replace(bc[1], seal=bc[0].seal)]
        elif edit == "swap_ids":
            calls_in_b = [replace(bc[0], id=bc[1].id), replace(bc[1], id=bc[0].id)]
        elif edit == "duplicate":
            calls_in_b = [*bc, bc[victim]]
        elif edit == "extra_call":
            calls_in_b = [*bc, ToolCall("c9", "delete_account", "{}", seal=bc[victim].seal)]
        elif edit == "strip_seal":
            bc[victim] = replace(bc[victim], seal="")
            calls_in_b = bc
        elif edit == "rename_nfd":
            calls_in_b = [bc[0], replace(bc[1], name="transfe\u0301r")]
        elif edit == "relabel_conversation":
            history = [replace(m, conversation_id="other") for m in history]
        elif edit == "drop_batch_call":
            calls_in_b = [bc[1 - victim]]
        elif edit == "foreign_call":
            elsewhere: Agent[None, str] = Agent(
                ScriptedModel(turn(ToolCall("c1", "delete_account", "{}"))),
                tools=tools,
                seal_key=KEY if keyed else None,
            )
            foreign = next(
                c
                for m in (await elsewhere.run("x", conversation_id="other")).messages
                for c in m.tool_calls
            )
            calls_in_b = [foreign if c.id == "c1" else c for c in bc]
            history = [replace(m, conversation_id="other") for m in history]
        if calls_in_b is not None:
            history[b] = replace(history[b], tool_calls=calls_in_b)
        if edit in ("revive_old", "move_old_into_batch"):
            history = [m for m in history if not (m.role == "tool" and m.tool_call_id == "c0")]
        try:
            if edit == "json_char":
                text = dumps_history(history)
                at = data.draw(st.integers(0, len(text) - 1), label="position")
                char = data.draw(st.sampled_from(' 0"\\{}:,ae\u00e9'), label="char")
                history = loads_history(text[:at] + char + text[at + 1 :])
            answered = {m.tool_call_id for m in history if m.role == "tool"}
            pending = {c.id for m in history for c in m.tool_calls if c.id not in answered}
            target: Any = {
                "paused_run": bound(paused, history),
                "expected": bound(paused, history, ""),
                "none": history,
            }[bind]
            await agent.run_with_deferred_results(
                target,
                DeferredResults(approvals=dict.fromkeys(pending, True)),
                progress=ResumeProgress(before_approved=before),
            )
        except (ResumeError, ValueError):
            assert started == []
            assert ran.calls == []
            return
        assert [(cid, name) for name, cid, _ in ran.calls] == [(i, n) for i, n, _ in started]
        if edit == "move_old_into_batch":
            # the residual: what a replay of the earlier paused history would run; seals cannot
            # tell them apart (stop replays with expected= or a store's claims)
            assert started == [*sealed, (c0.id, c0.name, c0.args)]
        elif edit == "drop_batch_call":  # a dropped call cannot run; the others run as sealed
            assert started == [s for s in sealed if s[0] == sealed[1 - victim][0]]
        else:
            assert started == sealed

    asyncio.run(scenario())
    if bind == "none":  # a key, and nothing the resumer vouches for: nothing runs
        assert started == []
        return
    harmless = {"none", "trim_prefix", "relabel_conversation"}
    if not keyed:
        harmless |= {"strip_seal", "swap_seals"}  # a keyless agent ignores seals
        if respelled and SPELLINGS[respelled[0]]:  # pending calls bind args token for token
            harmless.add("args_respell")
    else:
        harmless.add("strip_seal")  # restored from the pending calls and verified (ADR 0075)
    if edit in harmless:
        assert len(started) == 2
    elif edit != "json_char" and (
        not keyed or edit not in ("move_old_into_batch", "drop_batch_call")
    ):
        assert started == []


@pytest.mark.parametrize("args", list(SPELLINGS))
async def test_every_spelling_resumes_after_a_json_round_trip_with_its_exact_bytes(
    args: str,
) -> None:
    agent, ran = seals.make_agent(turn(ToolCall("c1", "transfer", args)), "done")
    paused = await agent.run("go", conversation_id="conv")
    done = await agent.run_with_deferred_results(PausedRun.loads(bound(paused).dumps()), APPROVE_C1)
    assert (done.output, len(ran.calls)) == ("done", 1)
    assert [c.args for m in done.messages for c in m.tool_calls] == [args]


async def test_an_answered_sealed_call_whose_result_is_removed_does_not_run_again() -> None:
    agent, ran = seals.make_agent(
        turn(ToolCall("c1", "transfer", '{"amount":10}')),
        turn(ToolCall("c3", "transfer", '{"amount":5}')),
        "done",
    )
    first = await agent.run("pay", conversation_id="conv")
    second = await agent.run_with_deferred_results(bound(first), APPROVE_C1)
    assert second.pending is not None
    ran.calls.clear()
    revived = [m for m in second.messages if not (m.role == "tool" and m.tool_call_id == "c1")]
    with pytest.raises(ResumeError, match=r'unknown tool call "c1"'):
        await agent.run_with_deferred_results(
            bound(second, revived), {"approvals": {"c1": True, "c3": True}}
        )
    assert ran.calls == []


# --------------------------------------------------------------------------- the conversation


async def paused_pair() -> tuple[Any, Any, Any, Any]:
    """X paused on transfer(10) as c1; Y on delete_account() under the same call ID
    (positional IDs repeat across conversations)."""
    agent_x, ran = seals.make_agent(turn(ToolCall("c1", "transfer", '{"amount":10}')), "done")
    paused_x = await agent_x.run("x", conversation_id="X")
    agent_y, _ = seals.make_agent(turn(ToolCall("c1", "delete_account", "{}")), "done")
    return agent_x, ran, paused_x, await agent_y.run("y", conversation_id="Y")


@pytest.mark.parametrize("relabel", ["Y", "X"])
async def test_another_conversations_sealed_call_under_the_same_id_runs_nothing(
    relabel: str,
) -> None:
    """Whatever conversation the history names, the paused run's is checked (with or without
    its conversation: the pending calls' seals bind it); a plain keyed resume refuses
    (`ConversationRequired`)."""
    agent_x, ran, paused_x, paused_y = await paused_pair()
    y_call = next(c for m in paused_y.messages for c in m.tool_calls)
    forged = [
        replace(m, tool_calls=[y_call] if m.tool_calls else [], conversation_id=relabel)
        for m in paused_x.messages
    ]
    if relabel == "Y":
        with pytest.raises(ConversationRequired) as info:
            await agent_x.run_with_deferred_results(forged, APPROVE_C1)
        assert (info.value.call_id, info.value.problem) == ("c1", "conversation_required")
        assert isinstance(info.value, SealError)
    for conversation in ("X", ""):
        with pytest.raises(SealError, match="does not match") as tampered:
            await agent_x.run_with_deferred_results(
                bound(paused_x, forged, conversation), APPROVE_C1
            )
        assert tampered.value.problem == "tampered"
    assert ran.calls == []


async def test_expected_binds_the_conversation_through_the_calls_seals() -> None:
    agent_x, ran, paused_x, _ = await paused_pair()
    agent_z, _ = seals.make_agent(turn(ToolCall("c1", "transfer", '{"amount":10}')), "done")
    paused_z = await agent_z.run("z", conversation_id="Z")
    forged = [replace(m, conversation_id="Z") for m in paused_z.messages]
    with pytest.raises(SealError, match=r'"c1".*belongs to another conversation'):
        await agent_x.run_with_deferred_results(bound(paused_x, forged, ""), APPROVE_C1)
    assert ran.calls == []
    done = await agent_x.run_with_deferred_results(bound(paused_x, conversation=""), APPROVE_C1)
    assert (done.output, [c[1] for c in ran.calls]) == ("done", ["c1"])


@pytest.mark.parametrize("entry", ["async", "sync", "stream"])
async def test_a_genuine_keyed_resume_is_told_its_conversation(entry: str) -> None:
    agent, ran = seals.make_agent(turn(ToolCall("c1", "transfer", '{"amount":10}')), "done")
    paused = await agent.run("go")
    stored = dumps_history(paused.messages)

    async def resume(history: Any) -> Any:
        if entry == "sync":
            return await asyncio.to_thread(
                agent.run_with_deferred_results_sync, history, APPROVE_C1
            )
        if entry == "stream":
            async with agent.run_stream_with_deferred_results(history, APPROVE_C1) as s:
                async for _ in s:
                    pass
            return s.result
        return await agent.run_with_deferred_results(history, APPROVE_C1)

    with pytest.raises(ConversationRequired, match=r"a plain history.*PausedRun"):
        await resume(stored)
    assert ran.calls == []
    done = await resume(bound(paused, loads_history(stored)))
    assert (done.output, done.conversation_id, len(ran.calls)) == (
        "done",
        paused.conversation_id,
        1,
    )
    agent, _ = seals.make_agent(turn(ToolCall("c1", "transfer", '{"amount":10}')), "done")
    agent.seal_keys = None  # a keyless agent resumes without being told
    keyless = await agent.run("go")
    done = await agent.run_with_deferred_results(keyless.messages, APPROVE_C1)
    assert (done.output, done.conversation_id) == ("done", keyless.conversation_id)


async def test_other_problems_are_reported_as_themselves_before_the_conversation() -> None:
    agent, ran = seals.make_agent(turn(ToolCall("c1", "transfer", '{"amount":10}')), "done")
    paused = await agent.run("go")
    text = dumps_history(paused.messages).replace('{"amount":10}', '{"amount":99}')
    with pytest.raises(SealError) as info:
        await agent.run_with_deferred_results(text, APPROVE_C1)
    assert info.value.problem == "tampered"
    with pytest.raises(ResumeError, match="waits for an approval"):
        await agent.run_with_deferred_results(paused.messages, {"external": {"c1": "x"}})
    with pytest.raises(ResumeError, match="unknown tool call"):
        await agent.run_with_deferred_results(
            paused.messages, {"approvals": {"c1": True, "c9": True}}
        )
    assert ran.calls == []


# --------------------------------------------------------------------------- sanitize_history


async def test_sanitize_with_the_key_keeps_genuine_calls_open_and_closes_the_rest() -> None:
    agent, _, ledger = make_agent()
    paused = await agent.run("pay bob", conversation_id=CONV)
    history = loads_history(dumps_history(paused.messages))
    ledger.executions.clear()
    clean, report = sanitize_history(history, seal_key=KEY)
    assert (report.kept_open, report.rejected, report.repair.synthesized) == (["c1", "c2"], [], [])
    _, unkeyed = sanitize_history(history)
    assert (unkeyed.repair.synthesized, unkeyed.kept_open, unkeyed.rejected) == (
        ["c1", "c2"],
        [],
        [],
    )
    submitted = add_calls(
        edit_call(history, "c2", args='{"q":"evil"}'),
        ToolCall("f1", "delete_account", '{"id":1}'),
        at=1,
    )
    clean, report = sanitize_history(submitted, seal_key=KEY)
    assert [(r.call_id, r.tool_name, r.problem) for r in report.rejected] == [
        ("f1", "delete_account", "unsealed"),
        ("c2", "lookup", "tampered"),
    ]
    assert (report.kept_open, sorted(report.repair.synthesized)) == (["c1"], ["c2", "f1"])
    assert "f1" in report.rejected[0].message
    done = await agent.run_with_deferred_results(bound(paused, clean), APPROVE_C1)
    assert done.output == "done"
    assert [e[:3] for e in ledger.executions] == [("transfer", "c1", True)]


@pytest.mark.parametrize(
    ("later", "rejected"),
    [
        (
            ToolCall("n1", "lookup", '{"q":"x"}'),
            [("c1", "outside_batch"), ("c2", "outside_batch"), ("n1", "unsealed")],
        ),
        (
            None,
            [("c1", "duplicate"), ("c2", "outside_batch")],
        ),  # a genuine call again: the batch now
    ],
    ids=["answered-elsewhere", "duplicate"],
)
async def test_sanitize_closes_genuine_calls_outside_the_paused_batch(
    later: ToolCall | None, rejected: list[tuple[str, str]]
) -> None:
    """A genuine seal on a call outside the paused batch is no reason to keep it open: a
    resume refuses it (ADR 0063)."""
    agent, _, _ = make_agent()
    history = (await agent.run("pay bob", conversation_id=CONV)).messages
    later = later or history[batch_index(history)].tool_calls[0]
    clean, report = sanitize_history(add_calls(history, later), seal_key=KEY)
    assert {(r.call_id, r.problem) for r in report.rejected} == set(rejected)
    assert report.kept_open == []
    if later.id == "n1":
        assert {"c1", "c2", "n1"} <= {m.tool_call_id for m in clean if m.role == "tool"}
        assert "paused batch" in report.rejected[0].message


# --------------------------------------------------------------------------- sub-agents

NESTED_EDITS = ["none", "args", "swap_record", "strip_seal", "extra_sub_call", "rename"]


async def edit_record(
    paused: Any, edit: str, log: list[str], sub_key: bytes | None
) -> tuple[list[Message], dict[str, bool]]:
    """`paused`'s history with its sub-agent record edited, and approvals for every call the
    edited record waits on."""
    record = paused.messages[-1]
    head, _, body = record.content.partition("\n")
    state = json.loads(body)
    inner = loads_history(state["history"])
    b = batch_index(inner)
    sub_calls = list(inner[b].tool_calls)
    content = record.content
    if edit == "args":
        sub_calls[0] = replace(sub_calls[0], args='{"path":"etc/passwd"}')
    elif edit == "strip_seal":
        sub_calls[0] = replace(sub_calls[0], seal="")
    elif edit == "extra_sub_call":
        sub_calls.append(
            ToolCall("s9", "delete_file", '{"path":"etc/passwd"}', seal=sub_calls[0].seal)
        )
    elif edit == "rename":
        sub_calls[0] = replace(sub_calls[0], name="delete_file ")
    elif edit in ("swap_record", "swap_relabeled_record"):
        other = await nested_parent("etc/passwd", log, seal_key=sub_key).run(
            "t", conversation_id="Y"
        )
        content = other.messages[-1].content
        if edit == "swap_relabeled_record":  # its sub-run relabeled as this conversation's
            content = content.replace('\\"Y/p1\\"', '\\"X/p1\\"')
            assert "Y/p1" not in content
    if edit not in ("none", "swap_record", "swap_relabeled_record"):
        inner[b] = replace(inner[b], tool_calls=sub_calls)
        state["history"] = dumps_history(inner)
        content = head + "\n" + json.dumps(state, ensure_ascii=False, separators=(",", ":"))
    return [*paused.messages[:-1], replace(record, content=content)], {
        f"p1/{c.id}": True for c in sub_calls
    }


@pytest.mark.parametrize("edit", [*NESTED_EDITS, "swap_relabeled_record"])
@pytest.mark.parametrize("sub_key", [KEY, None], ids=["keyed", "keyless"])
async def test_an_edited_sub_agent_record_runs_nothing(edit: str, sub_key: bytes | None) -> None:
    """Resumed from its `PausedRun` (a keyed sub-agent's seals bind `<conversation>/<parent
    call>`, ADR 0065), any edit of a paused sub-agent's record — one swapped in from another
    conversation included — is refused before anything runs; the genuine one runs the call."""
    log: list[str] = []
    parent = nested_parent("a.log", log, seal_key=sub_key)
    paused = await parent.run("tidy", conversation_id="X")
    history, approvals = await edit_record(paused, edit, log, sub_key)
    try:
        await parent.run_with_deferred_results(
            bound(paused, history), DeferredResults(approvals=approvals)
        )
    except ResumeError:
        assert (log, edit != "none") == ([], True)
        return
    # stripping a keyless sub-agent's empty seal is no edit
    assert edit == "none" or (edit, sub_key) == ("strip_seal", None)
    assert log == ["a.log"]


@pytest.mark.parametrize(
    ("other_path", "refusal"), [("etc/passwd", "arguments differ"), ("a.log", "another seal")]
)
async def test_expected_binds_a_paused_sub_agents_calls(other_path: str, refusal: str) -> None:
    """A record swapped in from another conversation (same parent and sub call IDs) is
    refused by the pending calls: another call, or the same call sealed for another one."""
    log: list[str] = []
    mine = nested_parent("a.log", log)
    paused = await mine.run("tidy", conversation_id="X")
    other = await nested_parent(other_path, log).run("tidy", conversation_id="Y")
    swapped = [
        *paused.messages[:-1],
        replace(paused.messages[-1], content=other.messages[-1].content),
    ]
    for conversation in ("X", ""):
        with pytest.raises(ResumeError, match=rf'"p1/s1".*{refusal}'):
            await mine.run_with_deferred_results(bound(paused, swapped, conversation), APPROVE_SUB)
    assert log == []
    done = await mine.run_with_deferred_results(bound(paused), APPROVE_SUB)
    assert (done.output, log) == ("ok", ["a.log"])


async def test_without_a_key_expected_binds_the_parents_own_calls_next_to_a_paused_sub_agent() -> (
    None
):
    log: list[str] = []
    parent = nested_parent(
        "a.log", log, seal_key=None, own=ToolCall("c1", "transfer", '{"amount":10}')
    )
    paused = await parent.run("tidy")
    assert paused.pending is not None
    assert {p.call_id for p in paused.pending.calls} == {"c1", "p1/s1"}
    edited = edit_call(paused.messages, "c1", args='{"amount":10000}')
    with pytest.raises(ResumeError, match=r'"c1".*arguments differ'):
        await parent.run_with_deferred_results(
            bound(paused, edited, ""), {"approvals": {"c1": True, "p1/s1": True}}
        )
    assert log == []


@pytest.mark.parametrize("parent_key", [KEY, None], ids=["keyed-parent", "keyless-parent"])
async def test_a_keyed_sub_agents_calls_need_the_conversation_too(parent_key: Any) -> None:
    log: list[str] = []
    parent = nested_parent("a.log", log)
    parent.seal_keys = None if parent_key is None else parent.seal_keys
    paused = await parent.run("tidy", conversation_id="X")
    inner = loads_history(json.loads(paused.messages[-1].content.split("\n", 1)[1])["history"])
    assert {m.conversation_id for m in inner} == {"X/p1"}  # the parent's conversation and call
    with pytest.raises(ConversationRequired) as info:
        await parent.run_with_deferred_results(paused.messages, APPROVE_SUB)
    assert (info.value.call_id, info.value.tool_name) == ("p1/s1", "janitor/delete_file")
    assert log == []
    done = await parent.run_with_deferred_results(bound(paused), APPROVE_SUB)
    assert (done.output, log) == ("ok", ["a.log"])


async def test_a_sub_agent_record_from_another_conversation_fails_without_expected() -> None:
    log: list[str] = []
    mine = nested_parent("a.log", log)
    paused = await mine.run("tidy", conversation_id="X")
    other = await nested_parent("etc/passwd", log).run("tidy", conversation_id="Y")
    swapped = [
        *paused.messages[:-1],
        replace(paused.messages[-1], content=other.messages[-1].content),
    ]
    with pytest.raises(SubAgentConversationMismatch, match='"Y/p1", not "X/p1"') as info:
        await mine.run_with_deferred_results(swapped, APPROVE_SUB)
    assert (info.value.call_id, info.value.problem) == ("p1/s1", "sub_agent_conversation")
    record = (
        other.messages[-1].content.replace('"Y/p1"', '"X/p1"').replace('\\"Y/p1\\"', '\\"X/p1\\"')
    )
    assert "Y/p1" not in record
    forged = [*paused.messages[:-1], replace(paused.messages[-1], content=record)]
    with pytest.raises(SealError, match="does not match") as tampered:
        await mine.run_with_deferred_results(forged, APPROVE_SUB)
    assert tampered.value.problem == "tampered"
    assert log == []


async def test_a_record_stored_before_the_derivation_resumes_only_with_expected() -> None:
    log: list[str] = []
    parent = nested_parent("a.log", log)
    old_history, old_pending = legacy(await parent.run("tidy", conversation_id="X"))
    with pytest.raises(SubAgentConversationMismatch, match=r"ADR 0065.*PausedRun"):
        await parent.run_with_deferred_results(old_history, APPROVE_SUB)
    unsealed = DeferredRequests(approvals=[replace(p, seal="") for p in old_pending.approvals])
    with pytest.raises(SubAgentConversationMismatch):  # expected without its seals binds nothing
        await parent.run_with_deferred_results(PausedRun(old_history, unsealed, ""), APPROVE_SUB)
    assert log == []
    done = await parent.run_with_deferred_results(
        PausedRun(old_history, old_pending, ""), APPROVE_SUB
    )
    assert (done.output, log) == ("ok", ["a.log"])


@pytest.mark.parametrize("key", [KEY, None], ids=["keyed", "keyless"])
async def test_an_old_sub_agent_record_put_back_in_an_earlier_turn_does_not_run_again(
    key: bytes | None,
) -> None:
    log: list[str] = []
    sub = janitor(
        calls(("s1", "delete_file", {"path": "a.log"})),
        text("Deleted."),
        calls(("s1", "delete_file", {"path": "b.log"})),
        text("Deleted."),
        log=log,
    )
    sub.seal_keys = SealKeys(key) if key else None
    parent: Agent[None, str] = Agent(
        ScriptedModel(ask("a"), ask("b", "p2"), "ok"), tools=[sub.as_tool()], seal_key=key
    )
    first = await parent.run("tidy", conversation_id="X")
    second = await parent.run_with_deferred_results(bound(first), APPROVE_SUB)
    assert second.pending is not None
    assert ([p.call_id for p in second.pending.calls], log) == (["p2/s1"], ["a.log"])
    revived = [
        first.messages[-1] if m.role == "tool" and m.tool_call_id == "p1" else m
        for m in second.messages
    ]
    with pytest.raises(ResumeError, match=r'record of tool call "p1".*not in the paused batch'):
        await parent.run_with_deferred_results(
            revived, {"approvals": {"p1/s1": True, "p2/s1": True}}
        )
    assert log == ["a.log"]
    done = await parent.run_with_deferred_results(bound(second), {"approvals": {"p2/s1": True}})
    assert (done.output, log) == ("ok", ["a.log", "b.log"])


async def test_a_keyed_sub_agent_two_levels_down_binds_the_top_conversation() -> None:
    log: list[str] = []
    inner = janitor(calls(("s1", "delete_file", {"path": "a.log"})), text("Deleted."), log=log)
    inner.seal_keys = SealKeys(KEY)
    middle = Agent(
        ScriptedModel(ask("clean", "m1"), text("Cleaned.")), name="manager", tools=[inner.as_tool()]
    )
    top: Agent[None, str] = Agent(
        ScriptedModel(ask("manage", "t1", "manager"), text("ok")), tools=[middle.as_tool()]
    )
    paused = await top.run("go", conversation_id="T")
    found = sub_agent_calls(paused.messages, "T")["t1/m1/s1"]
    assert (found.conversation_id, found.recorded_conversation_id) == ("T/t1/m1", "T/t1/m1")
    approve = DeferredResults(approvals={"t1/m1/s1": True})
    with pytest.raises(ConversationRequired) as info:
        await top.run_with_deferred_results(paused.messages, approve)
    assert (info.value.call_id, log) == ("t1/m1/s1", [])
    done = await top.run_with_deferred_results(bound(paused), approve)
    assert (done.output, log) == ("ok", ["a.log"])


IDS = st.text(st.sampled_from("ab/%2F5"), max_size=5)


@given(first=st.tuples(IDS, IDS), second=st.tuples(IDS, IDS))
def test_no_two_parent_calls_share_a_sub_run_conversation(
    first: tuple[str, str], second: tuple[str, str]
) -> None:
    (c1, i1), (c2, i2) = first, second
    if c1 and c2:
        assert (sub_conversation(c1, i1) == sub_conversation(c2, i2)) is (first == second)
    assert sub_conversation("", i1) == ""
    assert (sub_conversation("a", "b/p1"), sub_conversation("a/b", "p1")) == ("a/b%2Fp1", "a/b/p1")


# --------------------------------------------------------------------------- Unicode call IDs

FORMS = ("NFC", "NFD", "NFKC", "NFKD")
PIECES = ["e", "\u00e9", "e\u0301", "\u212b", "A\u030a", "\ufb01", "/", "\u1e9b\u0323", "1"]


@given(
    raw=st.lists(st.sampled_from(PIECES), min_size=1, max_size=6).map("".join),
    pending_form=st.sampled_from(FORMS),
    resolution_form=st.sampled_from(FORMS),
)
def test_a_resolution_in_another_unicode_form_of_a_pending_id_is_refused_by_name(
    raw: str, pending_form: str, resolution_form: str
) -> None:
    """Call IDs match exactly (the seal binds their bytes): never applied, never dropped."""
    pending_id = unicodedata.normalize(pending_form, raw)
    other = unicodedata.normalize(resolution_form, raw)
    agent, ran = seals.make_agent(turn(ToolCall(pending_id, "transfer", "{}")), "done")

    async def scenario() -> None:
        paused = await agent.run("go", conversation_id="conv")
        assert paused.pending is not None
        assert [p.call_id for p in paused.pending.calls] == [pending_id]
        for results in (
            DeferredResults(approvals={other: True}),
            DeferredResults(external={other: "paid elsewhere"}),
            DeferredResults(approvals={pending_id: True, other: True}),
        ):
            if (
                set(results.approvals) | set(results.external) == {pending_id}
                and not results.external
            ):
                continue
            with pytest.raises(ResumeError, match=r"unknown tool call|no resolution|waits for"):
                await agent.run_with_deferred_results(bound(paused), results)
            assert ran.calls == []
        done = await agent.run_with_deferred_results(
            bound(paused), {"approvals": {pending_id: True}}
        )
        assert (done.output, [c[1] for c in ran.calls]) == ("done", [pending_id])

    asyncio.run(scenario())


async def test_a_sub_agent_resolution_in_another_unicode_form_is_refused_by_name() -> None:
    nfc, nfd = "s\u00e9", "se\u0301"
    log: list[str] = []
    sub = janitor(calls((nfc, "delete_file", {"path": "a.log"})), text("Deleted."), log=log)
    sub.seal_keys = SealKeys(KEY)
    parent: Agent[None, str] = Agent(
        ScriptedModel(ask("clean"), "ok"), tools=[sub.as_tool()], seal_key=KEY
    )
    paused = await parent.run("tidy", conversation_id="X")
    assert paused.pending is not None
    assert [p.call_id for p in paused.pending.calls] == [f"p1/{nfc}"]
    for results in (
        DeferredResults(approvals={f"p1/{nfd}": True}),
        DeferredResults(approvals={f"p1/{nfc}": True, f"p1/{nfd}": True}),
        DeferredResults(approvals={f"p1/{nfc}": True}, external={f"p1/{nfd}": "done"}),
    ):
        with pytest.raises(ResumeError, match=rf'"p1/({nfd}|{nfc})"'):
            await parent.run_with_deferred_results(bound(paused), results)
        assert log == []
    done = await parent.run_with_deferred_results(bound(paused), {"approvals": {f"p1/{nfc}": True}})
    assert (done.output, log) == ("ok", ["a.log"])
