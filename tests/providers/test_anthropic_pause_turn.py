"""`stop_reason: "pause_turn"`: the API paused a long turn of its server tools (ADR 0060).

Written from Anthropic's "Server tools" and "Stop reasons" pages: the client sends the
assistant content back as it is (the paused answer is the last message of the next request)
and the model continues the turn. It used to map to finish "other", so the run ended with
the half-finished answer as its output. Now the finish is "pause_turn" and the loop
continues the turn: each continuation is a model request like any other (events, usage,
request and turn limits), streamed or not.
"""

from __future__ import annotations

from typing import Any

import pytest

from golem import Agent, dumps_history, loads_history
from golem.errors import Stage, UsageLimitExceeded
from golem.events import EventKind, RunEvent
from golem.limits import UsageLimits
from golem.messages import Message
from golem.model import Delta, ModelRequest, ModelResponse
from golem.result import RunError
from golem.testing import ScriptedModel
from tests.support.adapters import body_of
from tests.support.anthropic import SEARCH_RESULT, model_on, scripted_transport

SEARCH_USE = {
    "type": "server_tool_use",
    "id": "srvtoolu_1",
    "name": "web_search",
    "input": {"query": "golem history"},
}
PAUSED: dict[str, Any] = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-x",
    "content": [{"type": "text", "text": "Let me search."}, SEARCH_USE, SEARCH_RESULT],
    "stop_reason": "pause_turn",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 10,
        "output_tokens": 20,
        "server_tool_use": {"web_search_requests": 1},
    },
}
DONE: dict[str, Any] = {
    "id": "msg_2",
    "type": "message",
    "role": "assistant",
    "model": "claude-x",
    "content": [{"type": "text", "text": "A golem is a figure of clay."}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 30, "output_tokens": 5},
}


@pytest.mark.parametrize("stream", [False, True])
async def test_a_paused_turn_is_sent_back_and_continued(stream: bool) -> None:
    seen: list[dict[str, Any]] = []
    events: list[RunEvent] = []
    async with model_on(scripted_transport([PAUSED, DONE], seen)) as model:
        agent = Agent(model)
        if stream:
            async with agent.run_stream("what is a golem?", on_event=events.append) as s:
                deltas = [item async for item in s]
            result = s.result
            text = "".join(d.content for d in deltas if isinstance(d, Delta))
            assert text == "Let me search.A golem is a figure of clay."
        else:
            result = await agent.run("what is a golem?", on_event=events.append)
    assert result.output == "A golem is a figure of clay."
    assert result.finish_reason == "stop"
    assert result.requests == 2
    assert result.usage.input_tokens == 40
    assert result.usage.output_tokens == 25
    # the second request ends with the paused answer, its blocks as they came
    assert len(seen) == 2
    last = seen[1]["messages"][-1]
    assert last["role"] == "assistant"
    assert last["content"] == PAUSED["content"]
    assert [e.kind for e in events].count(EventKind.MODEL_END) == 2
    paused, done = (m for m in result.messages if m.role == "assistant")
    assert paused.content == "Let me search."
    assert [b.type for b in paused.server_tools] == ["server_tool_use", "web_search_tool_result"]
    assert done.content == "A golem is a figure of clay."


async def test_a_paused_answer_reports_its_finish_reason() -> None:
    async with model_on(scripted_transport([PAUSED], [])) as model:
        response = await model.generate(ModelRequest([Message("user", "q")]))
    assert response.finish_reason == "pause_turn"


async def test_continuations_count_toward_the_request_limit() -> None:
    async with model_on(scripted_transport([PAUSED, DONE], [])) as model:
        agent = Agent(model, usage_limits=UsageLimits(requests=1))
        with pytest.raises(RunError) as caught:
            await agent.run("q")
    assert caught.value.stage is Stage.USAGE
    assert isinstance(caught.value.__cause__, UsageLimitExceeded)


async def test_a_turn_paused_forever_ends_at_the_turn_limit() -> None:
    seen: list[dict[str, Any]] = []
    async with model_on(scripted_transport([PAUSED], seen)) as model:
        agent = Agent(model, max_iterations=3)
        with pytest.raises(RunError, match="turn limit") as caught:
            await agent.run("q")
    assert caught.value.stage is Stage.LOOP
    assert len(seen) == 3


async def test_the_loop_continues_any_model_that_reports_a_paused_turn() -> None:
    paused = ModelResponse(Message("assistant", "half"), finish_reason="pause_turn")
    model = ScriptedModel(paused, "whole")
    result = await Agent(model).run("q")
    assert result.output == "whole"
    assert model.request_count == 2
    assert model.requests[-1].messages[-1] == result.messages[-2]


async def test_a_paused_turn_and_its_continuation_go_back_as_one_assistant_turn() -> None:
    async with model_on(scripted_transport([PAUSED], [])) as model:
        paused = (await model.generate(ModelRequest([Message("user", "q")]))).message
    history = loads_history(
        dumps_history(
            [
                Message("user", "q"),
                paused,
                Message("assistant", "A golem is a figure of clay."),
                Message("user", "thanks"),
            ]
        )
    )
    body = body_of("anthropic", ModelRequest(history), "claude-x")
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["user", "assistant", "user"]
    assert body["messages"][1]["content"] == [
        *PAUSED["content"],
        {"type": "text", "text": "A golem is a figure of clay."},
    ]


@pytest.mark.parametrize("tail", ["Searching more.\n\n", "Searching more. "])
def test_a_paused_turn_sent_back_ends_without_trailing_whitespace(tail: str) -> None:
    # the API refuses "final assistant content cannot end with trailing whitespace"
    paused = Message("assistant", tail)
    body = body_of("anthropic", ModelRequest([Message("user", "q"), paused]), "claude-x")
    assert body["messages"][-1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": tail.rstrip()}],
    }


def test_a_paused_turn_of_whitespace_only_is_left_out() -> None:
    body = body_of("anthropic", ModelRequest([Message("user", "q"), Message("assistant", " \n")]))
    assert [m["role"] for m in body["messages"]] == ["user"]
