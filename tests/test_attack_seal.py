"""Adversarial round against sealed approvals (ADR 0063): an attacker who can write the
paused history JSON and the resolutions, without the seal key, must not make a tool run
with another name, call ID or argument bytes than were sealed at a pause, nor make an
already answered sealed call run again inside a later resume."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
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
from golem._checks import same_args
from golem.testing import ScriptedModel
from golem.tool import DeferKind, Deferred, call_approved
from tests.support.seals import KEY, Ran, make_agent, nested_parent, turn


async def test_an_answered_sealed_call_whose_result_is_removed_does_not_run_again() -> None:
    agent, ran = make_agent(
        turn(ToolCall("c1", "transfer", '{"amount":10}')),
        turn(ToolCall("c3", "transfer", '{"amount":5}')),
        "done",
    )
    first = await agent.run("pay", conversation_id="conv")
    second = await agent.run_with_deferred_results(
        first.messages, DeferredResults(approvals={"c1": True}), conversation_id="conv"
    )
    assert second.pending is not None
    ran.calls.clear()
    # c1 keeps its (genuine) seal as a record; dropping its result does not make it pending:
    # only the paused batch is
    revived = [m for m in second.messages if not (m.role == "tool" and m.tool_call_id == "c1")]
    with pytest.raises(ResumeError, match=r'unknown tool call "c1"'):
        await agent.run_with_deferred_results(
            revived, DeferredResults(approvals={"c1": True, "c3": True}), conversation_id="conv"
        )
    assert ran.calls == []


async def test_a_sealed_call_of_another_conversation_with_the_same_id_is_rejected() -> None:
    """Providers without call IDs get positional ones (`call_0_0`), so two conversations can
    seal calls under one ID; the conversation the resumer trusts must be the one checked."""
    agent_x, ran = make_agent(turn(ToolCall("c1", "transfer", '{"amount":10}')), "done")
    paused_x = await agent_x.run("x", conversation_id="X")
    agent_y, _ = make_agent(turn(ToolCall("c1", "delete_account", "{}")), "done")
    paused_y = await agent_y.run("y", conversation_id="Y")
    y_call = next(c for m in paused_y.messages for c in m.tool_calls)
    swapped = [
        replace(m, tool_calls=[y_call] if m.tool_calls else m.tool_calls, conversation_id="Y")
        for m in paused_x.messages
    ]
    approve = DeferredResults(approvals={"c1": True})
    with pytest.raises(SealError, match="does not match") as info:
        await agent_x.run_with_deferred_results(swapped, approve, conversation_id="X")
    assert info.value.problem == "tampered"
    # expected= carries the conversation the calls paused in: the seal binds it there
    with pytest.raises(SealError, match="does not match"):
        await agent_x.run_with_deferred_results(swapped, approve, expected=paused_x.pending)
    assert ran.calls == []


# --------------------------------------------------------------------------- property

SPELLINGS = [
    '{"to":"bob","amount":10}',
    '{ "amount" : 10, "to" : "bob" }',
    '{"to":"b\\u006fb","amount":1e1}',
    '{"to":"bob","amount":10,"amount":10000}',
    '{"n":-0,"big":123456789012345678901234567890}',
    '{"s":"\\ud800"}',
]

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
    "foreign_call",  # another conversation's sealed call under the same ID, relabeled (0065)
]

BINDS = ["conversation_id", "expected", "none"]  # what the resumer vouches for (ADR 0065)


def _respell(args: str) -> str:
    data = json.loads(args)
    return json.dumps(data, indent=1) if data else "{ }"


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    spellings=st.lists(st.sampled_from(SPELLINGS), min_size=2, max_size=2),
    edit=st.sampled_from(EDITS),
    keyed=st.booleans(),
    data=st.data(),
)
def test_any_edit_of_a_sealed_history_runs_exactly_the_sealed_calls_or_nothing(
    spellings: list[str], edit: str, keyed: bool, data: st.DataObject
) -> None:
    """For any edit of a paused history (and approvals for whatever is pending after it),
    a resume either raises before anything runs, or runs exactly the paused batch's calls,
    once each, with their paused name, call ID and argument bytes: with a seal key and the
    trusted conversation ID or `expected=paused.pending`, or without a key and with
    `expected=`. With a key and neither, every resume raises (`ConversationRequired` for
    the genuine ones: the history's own conversation ID is its editor's)."""
    bind = data.draw(st.sampled_from(BINDS), label="bind") if keyed else "expected"
    ran = Ran()
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
            first.messages, DeferredResults(approvals={"c0": True}), conversation_id="conv"
        )
        assert paused.pending is not None
        history = list(paused.messages)
        b = max(j for j, m in enumerate(history) if m.tool_calls)
        old = next(j for j, m in enumerate(history) if m.tool_calls)
        sealed = [(c.id, c.name, c.args) for c in history[b].tool_calls]
        ever_sealed = {c.id: (c.id, c.name, c.args) for m in history for c in m.tool_calls}
        ran.calls.clear()

        def calls_at(i: int, calls: list[ToolCall]) -> None:
            nonlocal history
            history[i] = replace(history[i], tool_calls=calls)

        victim = data.draw(st.integers(0, 1), label="victim")
        bc = list(history[b].tool_calls)
        if edit == "trim_prefix":
            history = history[old + 2 :] if data.draw(st.booleans()) else history[1:]
        elif edit == "args_respell":
            respelled[:] = [bc[victim].args, _respell(bc[victim].args)]
            bc[victim] = replace(bc[victim], args=respelled[1])
            calls_at(b, bc)
        elif edit == "revive_old":
            history = [m for m in history if not (m.role == "tool" and m.tool_call_id == "c0")]
        elif edit == "move_old_into_batch":
            c0 = history[old].tool_calls[0]
            calls_at(old, [])
            calls_at(b, [*bc, c0])
            history = [m for m in history if not (m.role == "tool" and m.tool_call_id == "c0")]
        elif edit == "swap_seals":
            bc[0], bc[1] = replace(bc[0], seal=bc[1].seal), replace(bc[1], seal=bc[0].seal)
            calls_at(b, bc)
        elif edit == "swap_ids":
            bc[0], bc[1] = replace(bc[0], id=bc[1].id), replace(bc[1], id=bc[0].id)
            calls_at(b, bc)
        elif edit == "duplicate":
            calls_at(b, [*bc, bc[victim]])
        elif edit == "extra_call":
            calls_at(b, [*bc, ToolCall("c9", "delete_account", "{}", seal=bc[victim].seal)])
        elif edit == "strip_seal":
            bc[victim] = replace(bc[victim], seal="")
            calls_at(b, bc)
        elif edit == "rename_nfd":
            bc[1] = replace(bc[1], name="transfe\u0301r")
            calls_at(b, bc)
        elif edit == "relabel_conversation":
            history = [replace(m, conversation_id="other") for m in history]
        elif edit == "drop_batch_call":
            calls_at(b, [bc[1 - victim]])
        elif edit == "foreign_call":
            elsewhere: Agent[None, str] = Agent(
                ScriptedModel(turn(ToolCall("c1", "delete_account", "{}"))),
                tools=tools,
                seal_key=KEY if keyed else None,
            )
            other = await elsewhere.run("x", conversation_id="other")
            foreign = next(c for m in other.messages for c in m.tool_calls)
            calls_at(b, [foreign if c.id == "c1" else c for c in bc])
            history = [replace(m, conversation_id="other") for m in history]
        try:
            if edit == "json_char":
                text = dumps_history(history)
                at = data.draw(st.integers(0, len(text) - 1), label="position")
                char = data.draw(st.sampled_from(' 0"\\{}:,ae\u00e9'), label="char")
                history = loads_history(text[:at] + char + text[at + 1 :])
            pending = {
                c.id
                for m in history
                for c in m.tool_calls
                if c.id not in {m.tool_call_id for m in history if m.role == "tool"}
            }
            await agent.run_with_deferred_results(
                history,
                DeferredResults(approvals=dict.fromkeys(pending, True)),
                conversation_id="conv" if bind == "conversation_id" else None,
                before_approved=before,
                expected=paused.pending if bind == "expected" else None,
            )
        except (ResumeError, ValueError):
            assert started == []
            assert ran.calls == []
            return
        assert [(cid, name) for name, cid, _ in ran.calls] == [(i, n) for i, n, _ in started]
        if edit == "move_old_into_batch":
            # the residual: an answered sealed call moved into the paused batch is what a
            # replay of the earlier paused history would run; seals cannot tell them apart
            # (stop replays with `expected=` or a store's claims); it still runs only as
            # sealed, once
            assert started == [*sealed, ever_sealed["c0"]]
            return
        if edit == "drop_batch_call":  # a dropped call cannot run; the others run as sealed
            assert started == [s for s in sealed if s[0] == sealed[1 - victim][0]]
            return
        assert started == sealed

    asyncio.run(scenario())
    if bind == "none":  # a key, and nothing the resumer vouches for: nothing runs
        assert started == []
        return
    # the conversation the resumer vouches for (conversation_id=, or the one expected=
    # carries) is the one checked, whatever the history's own label says
    harmless = {"none", "trim_prefix", "relabel_conversation"}
    if not keyed:
        harmless |= {"strip_seal", "swap_seals"}  # a keyless agent ignores seals
        # expected= binds the arguments token for token (ADR 0075: the Go golem writes args
        # compacted); a call respelled so runs with the expected bytes, checked above
        if respelled and same_args(*respelled):
            harmless.add("args_respell")
    elif bind == "expected":
        # expected= carries the seals: a stripped one is restored from it and verified
        # (ADR 0075: the Go golem drops seals when it writes a history)
        harmless.add("strip_seal")
    if edit in harmless:
        assert len(started) == 2
    elif edit != "json_char" and (
        not keyed or edit not in ("move_old_into_batch", "drop_batch_call")
    ):
        assert started == []


# --------------------------------------------------------------------------- nested


@pytest.mark.parametrize(
    ("other_path", "refusal"),
    [
        ("etc/passwd", "arguments differ"),  # another call under the same IDs
        # the same call (name and arguments) paused in another conversation: its seal binds it
        # to that conversation, so it is refused though it would run the same bytes
        ("a.log", "another seal"),
    ],
)
async def test_expected_binds_a_paused_sub_agents_calls(other_path: str, refusal: str) -> None:
    """A paused sub-agent's record swapped for one from another conversation (same parent
    call ID, same sub call ID) ran the other call under this conversation's approval, even
    with `conversation_id=` and `expected=`: `expected` was dropped on the nested path."""
    log: list[str] = []
    mine = nested_parent("a.log", log)
    paused = await mine.run("tidy", conversation_id="X")
    other = await nested_parent(other_path, log).run("tidy", conversation_id="Y")
    assert paused.pending is not None
    assert other.pending is not None
    assert paused.pending.calls[0].seal != other.pending.calls[0].seal
    swapped = [
        *paused.messages[:-1],
        replace(paused.messages[-1], content=other.messages[-1].content),
    ]
    with pytest.raises(ResumeError, match=rf'"p1/s1".*{refusal}'):
        await mine.run_with_deferred_results(
            swapped,
            DeferredResults(approvals={"p1/s1": True}),
            conversation_id="X",
            expected=paused.pending,
        )
    assert log == []
    done = await mine.run_with_deferred_results(
        paused.messages,
        DeferredResults(approvals={"p1/s1": True}),
        conversation_id="X",
        expected=paused.pending,
    )
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
    b = max(i for i, m in enumerate(paused.messages) if m.tool_calls)
    edited = list(paused.messages)
    edited[b] = replace(
        edited[b],
        tool_calls=[
            replace(c, args='{"amount":10000}') if c.id == "c1" else c for c in edited[b].tool_calls
        ],
    )
    with pytest.raises(ResumeError, match=r'"c1".*arguments differ'):
        await parent.run_with_deferred_results(
            edited, DeferredResults(approvals={"c1": True, "p1/s1": True}), expected=paused.pending
        )
    assert log == []


# --------------------------------------------------------------------------- seal text

FIELD = st.text(st.characters(codec=None, categories=None), max_size=6)  # lone surrogates too
SEALED = st.tuples(FIELD, FIELD, FIELD, FIELD, st.sampled_from(list(DeferKind)))


@settings(deadline=None)
@given(sealed=SEALED, shown=SEALED, pick=st.booleans())
def test_a_seal_verifies_only_the_exact_fields_it_was_made_for(
    sealed: tuple[str, str, str, str, DeferKind],
    shown: tuple[str, str, str, str, DeferKind],
    pick: bool,
) -> None:
    """Field boundaries, surrogates and kinds: a seal made for one (conversation, call ID,
    tool name, argument bytes, kind) verifies for no other."""
    from golem.seal import seal_call, verify_call

    conv, cid, name, args, kind = sealed
    seal = seal_call(KEY, conv, ToolCall(cid, name, args), kind)
    if pick:  # a near miss: one field moved by one character into its neighbour
        shown = (conv + cid[:1], cid[1:], name, args, kind)
    conv2, cid2, name2, args2, kind2 = shown
    kind_text = seal.split(".")[2]
    claimed = seal.replace(f".{kind_text}.", f".{kind2.value}.", 1)
    call = ToolCall(cid2, name2, args2, seal=claimed)
    if (conv2, cid2, name2, args2, kind2) == sealed:
        assert verify_call(KEY, conv2, call) is kind
    else:
        with pytest.raises(SealError):
            verify_call(KEY, conv2, call)


@settings(deadline=None)
@given(at=st.integers(0, 200), char=st.characters(codec="ascii"))
def test_any_one_character_change_of_a_seal_is_refused(at: int, char: str) -> None:
    from golem.seal import SealKeys, seal_call, verify_call

    keys = SealKeys(KEY, key_id="new", older={"old": b"o" * 32})
    call = ToolCall("c1", "transfer", '{"amount":10}')
    seal = seal_call(keys, "conv", call, DeferKind.APPROVAL)
    at %= len(seal)
    changed = seal[:at] + char + seal[at + 1 :]
    if changed == seal:
        return
    with pytest.raises(SealError):
        verify_call(keys, "conv", replace(call, seal=changed))
    swapped = seal.replace(".new.", ".old.")  # another key ID the verifier holds
    with pytest.raises(SealError, match="does not match"):
        verify_call(keys, "conv", replace(call, seal=swapped))


@pytest.mark.parametrize("args", SPELLINGS)
async def test_every_spelling_resumes_after_a_json_round_trip_with_its_exact_bytes(
    args: str,
) -> None:
    agent, ran = make_agent(turn(ToolCall("c1", "transfer", args)), "done")
    paused = await agent.run("go", conversation_id="conv")
    started: list[str] = []

    async def before(call: ToolCall) -> None:
        started.append(call.args)

    done = await agent.run_with_deferred_results(
        loads_history(dumps_history(paused.messages)),
        DeferredResults(approvals={"c1": True}),
        conversation_id="conv",
        before_approved=before,
    )
    assert done.output == "done"
    assert started == [args]
    assert len(ran.calls) == 1


NESTED_EDITS = ["none", "args", "swap_record", "strip_seal", "extra_sub_call", "rename"]


async def edit_record(
    paused: Any, edit: str, log: list[str], sub_key: bytes | None
) -> tuple[list[Message], dict[str, bool]]:
    """`paused`'s history with its sub-agent record edited by `edit`, and approvals for
    every call the edited record waits on."""
    record = paused.messages[-1]
    head, _, body = record.content.partition("\n")
    state = json.loads(body)
    inner = loads_history(state["history"])
    b = max(i for i, m in enumerate(inner) if m.tool_calls)
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
    history = [*paused.messages[:-1], replace(record, content=content)]
    return history, {f"p1/{c.id}": True for c in sub_calls}


@pytest.mark.parametrize("sub_key", [KEY, None], ids=["sealed-sub", "keyless-sub"])
@pytest.mark.parametrize("edit", NESTED_EDITS)
async def test_with_expected_an_edited_sub_agent_record_runs_nothing(
    edit: str, sub_key: bytes | None
) -> None:
    """With `expected=paused.pending` (and the trusted conversation), any edit of a paused
    sub-agent's record is refused before anything runs; the genuine record runs exactly
    the sealed sub-agent call."""
    log: list[str] = []
    parent = nested_parent("a.log", log, seal_key=sub_key)
    paused = await parent.run("tidy", conversation_id="X")
    assert paused.pending is not None
    history, approvals = await edit_record(paused, edit, log, sub_key)
    try:
        await parent.run_with_deferred_results(
            history,
            DeferredResults(approvals=approvals),
            conversation_id="X",
            expected=paused.pending,
        )
    except ResumeError:
        assert log == []
        assert edit != "none"
        return
    # only the untouched record runs (stripping a keyless sub-agent's empty seal is no edit)
    assert edit == "none" or (edit == "strip_seal" and sub_key is None)
    assert log == ["a.log"]


@pytest.mark.parametrize("edit", [*NESTED_EDITS, "swap_relabeled_record"])
async def test_with_a_key_an_edited_sub_agent_record_runs_nothing_without_expected(
    edit: str,
) -> None:
    """ADR 0065: a keyed sub-agent's seals bind `<parent conversation>/<parent call>`, so
    with the trusted conversation alone (no `expected=`) any edit of its record — one
    swapped in from another conversation included, relabeled or not — is refused before
    anything runs; before, a swapped record ran the other conversation's call."""
    log: list[str] = []
    parent = nested_parent("a.log", log)
    paused = await parent.run("tidy", conversation_id="X")
    history, approvals = await edit_record(paused, edit, log, KEY)
    try:
        await parent.run_with_deferred_results(
            history, DeferredResults(approvals=approvals), conversation_id="X"
        )
    except ResumeError:
        assert (log, edit != "none") == ([], True)
        return
    assert (edit, log) == ("none", ["a.log"])


@pytest.mark.parametrize("key", [KEY, None], ids=["keyed", "keyless"])
async def test_an_old_sub_agent_record_put_back_in_an_earlier_turn_does_not_run_again(
    key: bytes | None,
) -> None:
    """The nested form of the revived answered call: a sub-agent paused in turn 1, was
    approved and ran; the parent paused again on another sub-run in turn 2. Putting turn
    1's paused record back in place of its answer re-ran the approved delete (its seals
    are genuine for this conversation and call); a record must answer the paused batch."""
    log: list[str] = []
    sub: Agent[None, str] = Agent(
        ScriptedModel(
            turn(ToolCall("s1", "delete_file", '{"path":"a.log"}')),
            "Deleted.",
            turn(ToolCall("s1", "delete_file", '{"path":"b.log"}')),
            "Deleted.",
        ),
        name="janitor",
        seal_key=key,
    )

    @sub.tool_plain
    def delete_file(path: str) -> str:
        """Delete a file."""
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, f"delete {path}?")
        log.append(path)
        return "deleted"

    parent: Agent[None, str] = Agent(
        ScriptedModel(
            turn(ToolCall("p1", "janitor", '{"prompt":"a"}')),
            turn(ToolCall("p2", "janitor", '{"prompt":"b"}')),
            "ok",
        ),
        tools=[sub.as_tool()],
        seal_key=key,
    )
    first = await parent.run("tidy", conversation_id="X")
    second = await parent.run_with_deferred_results(
        first.messages, DeferredResults(approvals={"p1/s1": True}), conversation_id="X"
    )
    assert second.pending is not None
    assert [p.call_id for p in second.pending.calls] == ["p2/s1"]
    assert log == ["a.log"]
    revived = [
        first.messages[-1] if m.role == "tool" and m.tool_call_id == "p1" else m
        for m in second.messages
    ]
    with pytest.raises(ResumeError, match=r'record of tool call "p1".*not in the paused batch'):
        await parent.run_with_deferred_results(
            revived,
            DeferredResults(approvals={"p1/s1": True, "p2/s1": True}),
            conversation_id="X",
        )
    assert log == ["a.log"]
    done = await parent.run_with_deferred_results(
        second.messages, DeferredResults(approvals={"p2/s1": True}), conversation_id="X"
    )
    assert (done.output, log) == ("ok", ["a.log", "b.log"])
