"""What binds a sealed resume to its conversation (ADR 0065).

Attacker model: writes the paused history JSON and the resolutions, reads other
conversations' stored histories, does not hold the seal key. A seal binds the
conversation, but the conversation ID a history names is the attacker's to write, so:

- a keyed resume must be told its conversation (`conversation_id=`) or its calls
  (`expected=`): else `ConversationRequired`, even though the relabeled history verifies;
- a sub-agent's sub-run lives in `<parent conversation>/<parent call id>`, so a record
  swapped in from another conversation fails its seal without `expected=`, and a record
  naming another conversation (one from before ADR 0065) is `SubAgentConversationMismatch`
  unless `expected=` carries its seals;
- call IDs are matched exactly: a resolution in another Unicode form of a pending call's
  ID is refused by name, never applied to it and never dropped.
"""

from __future__ import annotations

import json
import unicodedata
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from golem import (
    Agent,
    DeferredResults,
    Message,
    ResumeError,
    SealError,
    ToolCall,
    dumps_history,
    loads_history,
)
from golem.deferred import DeferredRequests
from golem.errors import ConversationRequired, SubAgentConversationMismatch
from golem.model import ModelResponse
from golem.testing import ScriptedModel
from golem.tool import DeferKind, Deferred, call_approved
from tests.support.seals import KEY, legacy, make_agent, nested_parent, turn

APPROVE_C1 = DeferredResults(approvals={"c1": True})


async def paused_pair() -> tuple[Any, Any, Any, Any]:
    """Conversation X paused on transfer(10) as c1; conversation Y paused on
    delete_account() under the same call ID (positional IDs repeat across conversations)."""
    agent_x, ran = make_agent(turn(ToolCall("c1", "transfer", '{"amount":10}')), "done")
    paused_x = await agent_x.run("x", conversation_id="X")
    agent_y, _ = make_agent(turn(ToolCall("c1", "delete_account", "{}")), "done")
    paused_y = await agent_y.run("y", conversation_id="Y")
    return agent_x, ran, paused_x, paused_y


def relabeled(paused_x: Any, paused_y: Any) -> list[Message]:
    """X's history relabeled as Y, with Y's sealed call in place of X's."""
    y_call = next(c for m in paused_y.messages for c in m.tool_calls)
    return [
        replace(m, tool_calls=[y_call] if m.tool_calls else m.tool_calls, conversation_id="Y")
        for m in paused_x.messages
    ]


# --------------------------------------------------------------------------- the conversation


async def test_a_relabeled_history_with_another_conversations_call_runs_nothing() -> None:
    """Before ADR 0065 a keyed resume without `conversation_id=` verified the seals for the
    conversation the history names, so this relabeled history ran delete_account."""
    agent_x, ran, paused_x, paused_y = await paused_pair()
    forged = relabeled(paused_x, paused_y)
    with pytest.raises(ConversationRequired) as info:
        await agent_x.run_with_deferred_results(forged, APPROVE_C1)
    assert (info.value.call_id, info.value.problem) == ("c1", "conversation_required")
    assert isinstance(info.value, SealError)
    with pytest.raises(SealError, match="does not match"):
        await agent_x.run_with_deferred_results(forged, APPROVE_C1, conversation_id="X")
    with pytest.raises(SealError, match="does not match"):  # expected= carries X
        await agent_x.run_with_deferred_results(forged, APPROVE_C1, expected=paused_x.pending)
    assert ran.calls == []


async def test_expected_binds_the_conversation_through_the_calls_seals() -> None:
    """The same call (name, arguments, ID) paused in another conversation: `expected=`
    compares seals too, so the relabeled history is refused though its bytes match."""
    agent_x, ran, paused_x, _ = await paused_pair()
    agent_z, _ = make_agent(turn(ToolCall("c1", "transfer", '{"amount":10}')), "done")
    paused_z = await agent_z.run("z", conversation_id="Z")
    forged = [replace(m, conversation_id="Z") for m in paused_z.messages]
    # expected= names conversation X: Z's seal does not verify there
    with pytest.raises(SealError, match=r'"c1".*belongs to another conversation'):
        await agent_x.run_with_deferred_results(forged, APPROVE_C1, expected=paused_x.pending)
    assert ran.calls == []
    done = await agent_x.run_with_deferred_results(
        paused_x.messages, APPROVE_C1, expected=paused_x.pending
    )
    assert (done.output, [c[1] for c in ran.calls]) == ("done", ["c1"])


@pytest.mark.parametrize("entry", ["async", "sync", "stream"])
async def test_a_genuine_keyed_resume_names_what_to_pass(entry: str) -> None:
    agent, ran = make_agent(turn(ToolCall("c1", "transfer", '{"amount":10}')), "done")
    paused = await agent.run("go")
    stored = dumps_history(paused.messages)

    async def resume(**kw: Any) -> Any:
        if entry == "sync":
            import asyncio

            return await asyncio.to_thread(
                agent.run_with_deferred_results_sync, stored, APPROVE_C1, **kw
            )
        if entry == "stream":
            async with agent.run_stream_with_deferred_results(stored, APPROVE_C1, **kw) as s:
                async for _ in s:
                    pass
            return s.result
        return await agent.run_with_deferred_results(stored, APPROVE_C1, **kw)

    with pytest.raises(ConversationRequired, match=r"conversation_id=.*expected=paused\.pending"):
        await resume()
    assert ran.calls == []
    done = await resume(conversation_id=paused.conversation_id)
    assert done.output == "done"
    assert done.conversation_id == paused.conversation_id
    assert len(ran.calls) == 1


async def test_other_problems_are_reported_as_themselves_before_the_conversation() -> None:
    """`ConversationRequired` comes last: a tampered call is still "tampered", a wrong
    kind or an unknown resolution still says so."""
    agent, ran = make_agent(turn(ToolCall("c1", "transfer", '{"amount":10}')), "done")
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


async def test_a_keyless_agent_resumes_without_a_conversation_as_before() -> None:
    agent, _ = make_agent(turn(ToolCall("c1", "transfer", '{"amount":10}')), "done")
    agent.seal_keys = None
    paused = await agent.run("go")
    done = await agent.run_with_deferred_results(paused.messages, APPROVE_C1)
    assert (done.output, done.conversation_id) == ("done", paused.conversation_id)


# --------------------------------------------------------------------------- sub-agents


@pytest.mark.parametrize("parent_key", [KEY, None], ids=["keyed-parent", "keyless-parent"])
async def test_a_keyed_sub_agents_calls_need_the_conversation_too(parent_key: Any) -> None:
    """A keyless parent over a keyed sub-agent: the sub-agent's seals bind the parent's
    conversation, which the resume must be told (else the history's label decides)."""
    log: list[str] = []
    parent = nested_parent("a.log", log)
    parent.seal_keys = None if parent_key is None else parent.seal_keys
    paused = await parent.run("tidy", conversation_id="X")
    approve = DeferredResults(approvals={"p1/s1": True})
    with pytest.raises(ConversationRequired) as info:
        await parent.run_with_deferred_results(paused.messages, approve)
    assert (info.value.call_id, info.value.tool_name) == ("p1/s1", "janitor/delete_file")
    assert log == []
    done = await parent.run_with_deferred_results(paused.messages, approve, conversation_id="X")
    assert (done.output, log) == ("ok", ["a.log"])


async def test_a_sub_run_lives_in_the_parents_conversation_and_call() -> None:
    log: list[str] = []
    parent = nested_parent("a.log", log)
    paused = await parent.run("tidy", conversation_id="X")
    inner = loads_history(json.loads(paused.messages[-1].content.split("\n", 1)[1])["history"])
    assert {m.conversation_id for m in inner} == {"X/p1"}


async def test_a_sub_agent_record_from_another_conversation_fails_without_expected() -> None:
    """Before ADR 0065 the sub-run had a conversation of its own, named by its record, so a
    record swapped in from conversation Y (same parent and sub call IDs) verified and ran
    Y's call under X's approval unless `expected=` was passed."""
    log: list[str] = []
    mine = nested_parent("a.log", log)
    paused = await mine.run("tidy", conversation_id="X")
    other = await nested_parent("etc/passwd", log).run("tidy", conversation_id="Y")
    swapped = [*paused.messages[:-1], replace(paused.messages[-1], content=other.messages[-1].content)]
    approve = DeferredResults(approvals={"p1/s1": True})
    with pytest.raises(SubAgentConversationMismatch, match='"Y/p1", not "X/p1"') as info:
        await mine.run_with_deferred_results(swapped, approve, conversation_id="X")
    assert (info.value.call_id, info.value.problem) == ("p1/s1", "sub_agent_conversation")
    # relabeling the record's inner history to X/p1 does not help: its seal was made for Y/p1
    relabeled_record = other.messages[-1].content.replace('"Y/p1"', '"X/p1"')
    relabeled_record = relabeled_record.replace('\\"Y/p1\\"', '\\"X/p1\\"')
    assert "Y/p1" not in relabeled_record
    forged = [*paused.messages[:-1], replace(paused.messages[-1], content=relabeled_record)]
    with pytest.raises(SealError, match="does not match") as tampered:
        await mine.run_with_deferred_results(forged, approve, conversation_id="X")
    assert tampered.value.problem == "tampered"
    assert log == []


async def test_a_record_stored_before_the_derivation_resumes_only_with_expected() -> None:
    log: list[str] = []
    parent = nested_parent("a.log", log)
    paused = await parent.run("tidy", conversation_id="X")
    old_history, old_pending = legacy(paused)
    approve = DeferredResults(approvals={"p1/s1": True})
    with pytest.raises(SubAgentConversationMismatch, match=r"ADR 0065.*expected=paused\.pending"):
        await parent.run_with_deferred_results(old_history, approve, conversation_id="X")
    with pytest.raises(SubAgentConversationMismatch):  # expected without its seals binds nothing
        unsealed = DeferredRequests(approvals=[replace(p, seal="") for p in old_pending.approvals])
        await parent.run_with_deferred_results(old_history, approve, expected=unsealed)
    assert log == []
    done = await parent.run_with_deferred_results(old_history, approve, expected=old_pending)
    assert (done.output, log) == ("ok", ["a.log"])


async def test_expected_does_not_let_a_foreign_record_through_as_an_old_one() -> None:
    log: list[str] = []
    mine = nested_parent("a.log", log)
    paused = await mine.run("tidy", conversation_id="X")
    other = await nested_parent("a.log", log).run("tidy", conversation_id="Y")
    swapped = [*paused.messages[:-1], replace(paused.messages[-1], content=other.messages[-1].content)]
    with pytest.raises(ResumeError, match=r'"p1/s1".*another seal'):
        await mine.run_with_deferred_results(
            swapped, DeferredResults(approvals={"p1/s1": True}), expected=paused.pending
        )
    assert log == []


# --------------------------------------------------------------------------- Unicode call IDs

FORMS = ("NFC", "NFD", "NFKC", "NFKD")
PIECES = ["e", "\u00e9", "e\u0301", "\u212b", "A\u030a", "\ufb01", "/", "\u1e9b\u0323", "1"]
ID_TEXT = st.lists(st.sampled_from(PIECES), min_size=1, max_size=6).map("".join)


def gated_agent(call_id: str, ran: list[str]) -> Agent[None, str]:
    ask = ModelResponse(
        Message(role="assistant", tool_calls=[ToolCall(call_id, "pay", "{}")]),
        finish_reason="tool_call",
    )
    agent: Agent[None, str] = Agent(ScriptedModel(ask, "done"), seal_key=KEY)

    @agent.tool_plain
    def pay() -> str:
        """Pay."""
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, "pay?")
        ran.append(call_id)
        return "paid"

    return agent


@settings(deadline=None)
@given(raw=ID_TEXT, pending_form=st.sampled_from(FORMS), resolution_form=st.sampled_from(FORMS))
def test_a_resolution_in_another_unicode_form_of_a_pending_id_is_refused_by_name(
    raw: str, pending_form: str, resolution_form: Any
) -> None:
    """Call IDs are matched exactly (like the seal, which binds their bytes): a resolution
    whose ID is another normalization of the pending call's ID names an unknown call and is
    refused with a `ResumeError` before anything runs; never applied, never dropped."""
    import asyncio

    pending_id = unicodedata.normalize(pending_form, raw)
    resolution_id = unicodedata.normalize(resolution_form, raw)
    ran: list[str] = []
    agent = gated_agent(pending_id, ran)

    async def scenario() -> None:
        paused = await agent.run("go", conversation_id="conv")
        assert paused.pending is not None
        assert [p.call_id for p in paused.pending.calls] == [pending_id]
        for results in (
            DeferredResults(approvals={resolution_id: True}),
            DeferredResults(external={resolution_id: "paid elsewhere"}),
            DeferredResults(approvals={pending_id: True, resolution_id: True}),
        ):
            same = set(results.approvals) | set(results.external) == {pending_id}
            if same and not results.external:
                continue
            with pytest.raises(ResumeError, match=r"unknown tool call|no resolution|waits for"):
                await agent.run_with_deferred_results(
                    paused.messages, results, conversation_id="conv"
                )
            assert ran == []
        done = await agent.run_with_deferred_results(
            paused.messages, DeferredResults(approvals={pending_id: True}), conversation_id="conv"
        )
        assert (done.output, ran) == ("done", [pending_id])

    asyncio.run(scenario())


async def test_a_sub_agent_resolution_in_another_unicode_form_is_refused_by_name() -> None:
    nfc, nfd = "s\u00e9", "se\u0301"
    log: list[str] = []
    sub: Agent[None, str] = Agent(
        ScriptedModel(turn(ToolCall(nfc, "delete_file", '{"path":"a.log"}')), "Deleted."),
        name="janitor",
        seal_key=KEY,
    )

    @sub.tool_plain
    def delete_file(path: str) -> str:
        """Delete a file."""
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, f"delete {path}?")
        log.append(path)
        return "deleted"

    parent: Agent[None, str] = Agent(
        ScriptedModel(turn(ToolCall("p1", "janitor", '{"prompt":"clean"}')), "ok"),
        tools=[sub.as_tool()],
        seal_key=KEY,
    )
    paused = await parent.run("tidy", conversation_id="X")
    assert paused.pending is not None
    assert [p.call_id for p in paused.pending.calls] == [f"p1/{nfc}"]
    for results in (
        DeferredResults(approvals={f"p1/{nfd}": True}),
        DeferredResults(approvals={f"p1/{nfc}": True, f"p1/{nfd}": True}),
        DeferredResults(approvals={f"p1/{nfc}": True}, external={f"p1/{nfd}": "done"}),
    ):
        with pytest.raises(ResumeError, match=rf'"p1/({nfd}|{nfc})".*|"p1/{nfd}"'):
            await parent.run_with_deferred_results(paused.messages, results, conversation_id="X")
        assert log == []
    done = await parent.run_with_deferred_results(
        paused.messages, DeferredResults(approvals={f"p1/{nfc}": True}), conversation_id="X"
    )
    assert (done.output, log) == ("ok", ["a.log"])


IDS = st.text(st.sampled_from("ab/%2F5"), max_size=5)


@settings(deadline=None)
@given(first=st.tuples(IDS, IDS), second=st.tuples(IDS, IDS))
def test_no_two_parent_calls_share_a_sub_run_conversation(
    first: tuple[str, str], second: tuple[str, str]
) -> None:
    """A sub-agent's seal binds `sub_conversation(parent conversation, parent call)`: were two
    pairs to map to one (`a` + `b/p1`, `a/b` + `p1`), a record sealed under one would verify
    under the other."""
    from golem.agent_tool import sub_conversation

    (c1, i1), (c2, i2) = first, second
    if c1 and c2:
        assert (sub_conversation(c1, i1) == sub_conversation(c2, i2)) is (first == second)
    assert sub_conversation("", i1) == ""


async def test_a_parent_call_id_with_a_slash_gets_its_own_sub_run_conversation() -> None:
    from golem.agent_tool import sub_conversation

    assert sub_conversation("a", "b/p1") == "a/b%2Fp1"
    assert sub_conversation("a/b", "p1") == "a/b/p1"
    assert sub_conversation("X", "p1") == "X/p1"


async def test_a_keyed_sub_agent_two_levels_down_binds_the_top_conversation() -> None:
    """Keyless top and middle agents over a keyed janitor: the janitor's sub-run lives in
    `<top conversation>/t1/m1`, its seal binds that, and the top resume must be told its
    conversation (or `expected=`) for the janitor's seal to mean anything."""
    from golem.records import sub_agent_calls
    from golem.seal import SealKeys
    from tests.support.subagents import ask, calls, janitor, text

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
    assert info.value.call_id == "t1/m1/s1"
    assert log == []
    done = await top.run_with_deferred_results(paused.messages, approve, conversation_id="T")
    assert (done.output, log) == ("ok", ["a.log"])
