"""Edit on approval (issue 8 §2): `Approval(True, args=...)` re-runs with the approver's
arguments after they pass the tool's schema; the history shows what ran; the model is told."""

from __future__ import annotations

import json
from typing import Any

import pytest

from golem import (
    Agent,
    Approval,
    DeferredResults,
    Message,
    ResumeError,
    RunContext,
    RunEvent,
    Tool,
    ToolCall,
    dumps_history,
    loads_history,
)
from golem._rerun import _edited_text
from golem.model import ModelResponse
from golem.seal import verify_call
from golem.testing import ScriptedModel
from golem.tool import DeferKind, Deferred, call_approved

KEY = b"e" * 32
ORIGINAL = '{"to":"mallory","amount":10000}'


def turn(*calls: ToolCall) -> ModelResponse:
    return ModelResponse(
        Message(role="assistant", tool_calls=list(calls)), finish_reason="tool_call"
    )


class Bank:
    def __init__(self) -> None:
        self.transfers: list[tuple[str, int]] = []

    def agent(self, *, seal_key: bytes | None = None, raw: bool = False) -> Agent[None, str]:
        model = ScriptedModel(turn(ToolCall("c1", "transfer", ORIGINAL)), "sent")
        agent: Agent[None, str] = Agent(model, seal_key=seal_key)
        if raw:
            schema = {
                "type": "object",
                "properties": {"to": {"type": "string"}, "amount": {"type": "integer"}},
                "required": ["to", "amount"],
                "additionalProperties": False,
            }

            def exec(ctx: RunContext[Any], args: dict[str, Any]) -> str:
                return self.transfer(args["to"], args["amount"])

            agent.tools["transfer"] = Tool("transfer", "Send money.", schema, exec)
            agent._specs = None
        else:

            @agent.tool
            def transfer(to: str, amount: int) -> str:
                """Send money."""
                return self.transfer(to, amount)

        return agent

    def transfer(self, to: str, amount: int) -> str:
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, f"send {amount} to {to}?")
        self.transfers.append((to, amount))
        return f"sent {amount} to {to}"


@pytest.mark.parametrize("args", [{"to": "bob", "amount": 100}, '{"to": "bob", "amount": 100}'])
async def test_an_edited_approval_runs_with_the_approvers_arguments(args: Any) -> None:
    bank = Bank()
    agent = bank.agent()
    paused = await agent.run("pay")
    done = await agent.run_with_deferred_results(
        paused.messages, DeferredResults(approvals={"c1": Approval(True, args=args)})
    )
    assert bank.transfers == [("bob", 100)]
    assert done.output == "sent"
    text = args if isinstance(args, str) else '{"to":"bob","amount":100}'
    (call,) = [c for m in done.messages for c in m.tool_calls]
    assert call.args == text  # the history shows what actually ran
    (result,) = [m for m in done.messages if m.role == "tool"]
    assert result.content == _edited_text(ORIGINAL, text, "sent 100 to bob")
    assert result.content == (
        "The approver changed the arguments of this call before approving it: "
        f"you proposed {ORIGINAL}, it ran with {text}.\nsent 100 to bob"
    )


async def test_the_model_sees_the_edited_call_and_the_note() -> None:
    bank = Bank()
    agent = bank.agent()
    paused = await agent.run("pay")
    await agent.run_with_deferred_results(
        paused.messages, {"approvals": {"c1": Approval(True, args={"to": "bob", "amount": 1})}}
    )
    assert isinstance(agent.model, ScriptedModel)
    last = agent.model.requests[-1].messages
    assert [c.args for m in last for c in m.tool_calls] == ['{"to":"bob","amount":1}']
    assert "you proposed " + ORIGINAL in last[-1].content


async def test_edit_events_show_the_arguments_that_ran() -> None:
    bank = Bank()
    agent = bank.agent()
    paused = await agent.run("pay")
    events: list[RunEvent] = []
    await agent.run_with_deferred_results(
        paused.messages,
        DeferredResults(approvals={"c1": Approval(True, args={"to": "bob", "amount": 1})}),
        on_event=events.append,
    )
    assert events[0].args == '{"to":"bob","amount":1}'
    assert events[0].approved


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        ({"to": "bob"}, "amount: Field required"),
        ({"to": "bob", "amount": "lots"}, "amount"),
        ({"to": "bob", "amount": 1, "memo": "x"}, "memo"),
        ("not json", "must be a JSON object"),
        ("[1, 2]", "must be a JSON object"),
        ("", "must be a JSON object"),
        ('{"to": "\ud800", "amount": 1}', "rejected"),
        ({"to": "\ud800", "amount": 1}, "lone surrogate"),
        ({"to": "bob", "amount": float("nan")}, "JSON"),
    ],
)
@pytest.mark.parametrize("raw", [False, True], ids=["function-tool", "raw-tool"])
async def test_invalid_edited_arguments_are_rejected_before_anything_runs(
    args: Any, problem: str, raw: bool
) -> None:
    bank = Bank()
    agent = bank.agent(raw=raw)
    paused = await agent.run("pay")
    assert isinstance(agent.model, ScriptedModel)
    requests = len(agent.model.requests)
    with pytest.raises(
        ResumeError, match=r'edited arguments for tool call "c1" \(transfer\)'
    ) as info:
        await agent.run_with_deferred_results(
            paused.messages, DeferredResults(approvals={"c1": Approval(True, args=args)})
        )
    assert problem in str(info.value)
    assert bank.transfers == []
    assert len(agent.model.requests) == requests


async def test_a_raw_tool_rejects_a_boolean_for_an_integer() -> None:
    bank = Bank()
    agent = bank.agent(raw=True)
    paused = await agent.run("pay")
    with pytest.raises(ResumeError, match="amount: expected integer, got bool"):
        await agent.run_with_deferred_results(
            paused.messages,
            DeferredResults(approvals={"c1": Approval(True, args={"to": "b", "amount": True})}),
        )


def test_args_on_a_denial_or_of_another_type_are_refused_at_construction() -> None:
    with pytest.raises(ValueError, match="a denial takes no args"):
        Approval(False, args={"to": "bob"})
    with pytest.raises(TypeError, match="dict or JSON object text"):
        Approval(True, args=[1, 2])  # type: ignore[arg-type]


async def test_an_edit_on_an_external_kind_call_is_rejected_with_the_key() -> None:
    def fetch(ctx: RunContext[Any], args: dict[str, Any]) -> str:
        raise Deferred(DeferKind.EXTERNAL, "job")

    model = ScriptedModel(turn(ToolCall("c1", "fetch", "{}")))
    agent = Agent(model, tools=[Tool("fetch", "f", {"type": "object"}, fetch)], seal_key=KEY)
    paused = await agent.run("go")
    with pytest.raises(ResumeError, match="waits for an external result"):
        await agent.run_with_deferred_results(
            paused.messages, DeferredResults(approvals={"c1": Approval(True, args={})})
        )


async def test_with_a_key_the_edited_call_is_resealed_and_survives_json() -> None:
    bank = Bank()
    agent = bank.agent(seal_key=KEY)
    paused = await agent.run("pay", conversation_id="conv")
    done = await agent.run_with_deferred_results(
        loads_history(dumps_history(paused.messages)),
        DeferredResults(approvals={"c1": Approval(True, args={"to": "bob", "amount": 5})}),
        conversation_id="conv",
    )
    (call,) = [c for m in done.messages for c in m.tool_calls]
    assert call.args == '{"to":"bob","amount":5}'
    assert verify_call(KEY, "conv", call) is DeferKind.APPROVAL
    reloaded = loads_history(dumps_history(done.messages))
    (again,) = [c for m in reloaded for c in m.tool_calls]
    assert verify_call(KEY, "conv", again) is DeferKind.APPROVAL


async def test_without_a_key_an_edit_drops_the_stale_seal() -> None:
    bank = Bank()
    sealing = bank.agent(seal_key=KEY)
    paused = await sealing.run("pay")
    plain = bank.agent()
    plain.model = ScriptedModel("sent")
    done = await plain.run_with_deferred_results(
        paused.messages,
        DeferredResults(approvals={"c1": Approval(True, args={"to": "bob", "amount": 5})}),
    )
    (call,) = [c for m in done.messages for c in m.tool_calls]
    assert call.seal == ""


async def test_an_unedited_approval_keeps_the_call_and_its_text() -> None:
    bank = Bank()
    agent = bank.agent()
    paused = await agent.run("pay")
    done = await agent.run_with_deferred_results(paused.messages, {"approvals": {"c1": True}})
    (result,) = [m for m in done.messages if m.role == "tool"]
    assert result.content == "sent 10000 to mallory"
    assert [c.args for m in done.messages for c in m.tool_calls] == [ORIGINAL]


def test_edited_text_shortens_long_arguments() -> None:
    long = json.dumps({"blob": "x" * 500})
    text = _edited_text(long, "{}", "ok")
    assert len(text) < 500
    assert "…" in text
    assert text.endswith("it ran with {}.\nok")
    assert _edited_text("{}", "{}", "").endswith("it ran with {}.")
