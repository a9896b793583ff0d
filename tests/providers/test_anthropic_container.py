"""The code-execution container an Anthropic answer names goes into the next request.

A response of a turn that ran code execution names its container (`"container": {"id",
"expires_at"}`, streamed in `message_start` or `message_delta`). A paused turn
(`pause_turn`) continues in that container only when the continuation names it as the
request's `container`; it used to be dropped, so the continuation started in an empty
container (files gone, or the API refusing the turn). The ID is kept on the assistant message
(a `ServerToolBlock` of type "container", so it survives the history JSON and a resume) and
sent as `container` by the next request while it has not expired.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from golem import Agent, dumps_history, loads_history
from golem.messages import Message, ServerToolBlock
from golem.model import ModelRequest
from tests.support.adapters import body_of
from tests.support.anthropic import model_on, scripted_transport, sse, synthesize_stream

FUTURE = "2999-04-24T11:14:17.825248Z"
PAST = "2001-04-24T11:14:17Z"

CODE_USE = {
    "type": "server_tool_use",
    "id": "srvtoolu_1",
    "name": "bash_code_execution",
    "input": {"command": "echo $((37170 * 12390))"},
}
CODE_RESULT = {
    "type": "bash_code_execution_tool_result",
    "tool_use_id": "srvtoolu_1",
    "content": {
        "type": "bash_code_execution_result",
        "stdout": "460536300\n",
        "stderr": "",
        "return_code": 0,
        "content": [],
    },
}


def _answer(stop: str, text: str, container: str = "container_011A", expires: str = FUTURE):
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
        "container": {"id": container, "expires_at": expires},
        "content": [{"type": "text", "text": text}, CODE_USE, CODE_RESULT],
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 20},
    }


def _late_container_stream(answer: dict[str, Any]) -> str:
    """`answer` streamed with its container in `message_delta` (as the API sends it), not in
    `message_start`."""
    events = synthesize_stream({k: v for k, v in answer.items() if k != "container"})
    for event in events:
        if event["type"] == "message_delta":
            event["delta"]["container"] = answer["container"]
    return sse(*events)


@pytest.mark.parametrize("stream", [False, True])
async def test_a_paused_turn_continues_in_its_container(stream: bool) -> None:
    seen: list[dict[str, Any]] = []
    paused = _answer("pause_turn", "Let me compute.")
    done = _answer("end_turn", "It is 460536300.")
    async with model_on(scripted_transport([paused, done], seen, _late_container_stream)) as model:
        agent = Agent(model)
        if stream:
            async with agent.run_stream("37170 * 12390?") as s:
                async for _ in s:
                    pass
            result = s.result
        else:
            result = await agent.run("37170 * 12390?")
    assert result.output == "It is 460536300."
    assert "container" not in seen[0]
    assert seen[1]["container"] == "container_011A"
    # the container is no content block: the paused blocks go back as they came
    assert seen[1]["messages"][-1]["content"] == paused["content"]
    first = next(m for m in result.messages if m.role == "assistant")
    assert [b.type for b in first.server_tools][-1] == "container"


async def test_the_container_survives_the_history_json() -> None:
    async with model_on(
        scripted_transport([_answer("pause_turn", "Computing.")], [], _late_container_stream)
    ) as model:
        paused = (await model.generate(ModelRequest([Message("user", "q")]))).message
    history = loads_history(dumps_history([Message("user", "q"), paused]))
    body = body_of("anthropic", ModelRequest(history), "claude-x")
    assert body["container"] == "container_011A"
    assert body["messages"][-1]["content"] == [
        {"type": "text", "text": "Computing."},
        CODE_USE,
        CODE_RESULT,
    ]


def _message(*containers: tuple[str, str]) -> Message:
    blocks = [
        ServerToolBlock(
            provider="anthropic",
            type="container",
            id=cid,
            raw=json.dumps({"id": cid, "expires_at": expires}),
        )
        for cid, expires in containers
    ]
    return Message("assistant", "ok", server_tools=blocks)


def test_the_latest_container_is_sent_while_it_lives() -> None:
    history = [
        Message("user", "a"),
        _message(("container_old", FUTURE)),
        Message("user", "b"),
        _message(("container_new", FUTURE)),
        Message("user", "c"),
    ]
    assert body_of("anthropic", ModelRequest(history), "m")["container"] == "container_new"


def test_an_expired_container_is_not_sent() -> None:
    # the API refuses a container past its expiry; a conversation resumed later starts anew
    history = [Message("user", "a"), _message(("container_new", PAST)), Message("user", "b")]
    assert "container" not in body_of("anthropic", ModelRequest(history), "m")
    # an older live one is not reused either: the latest named is the one the turn ran in
    history.insert(1, _message(("container_old", FUTURE)))
    assert "container" not in body_of("anthropic", ModelRequest(history), "m")


@pytest.mark.parametrize("expires", [None, "", "soon", 12, "9999-99-99"])
def test_a_container_without_a_readable_expiry_is_sent(expires: Any) -> None:
    block = ServerToolBlock(
        provider="anthropic",
        type="container",
        id="container_x",
        raw=json.dumps({"id": "container_x", "expires_at": expires}),
    )
    history = [Message("user", "a"), Message("assistant", "ok", server_tools=[block])]
    assert body_of("anthropic", ModelRequest(history)).get("container") == "container_x"


@pytest.mark.parametrize(
    ("expires", "now", "sent"),
    [
        ("2030-01-01T00:00:00Z", 1_800_000_000.0, True),  # 2027
        ("2030-01-01T00:00:00Z", 1_893_456_000.0, False),  # the very second it expires
        ("2030-01-01T00:00:00Z", 1_900_000_000.0, False),  # 2030, after
        ("2030-01-01T00:00:00", 1_893_455_999.0, True),  # no zone: UTC, as the API writes them
        ("2030-01-01T00:00:00", 1_893_456_000.0, False),
    ],
)
def test_expiry_is_judged_at_the_time_of_the_request(
    expires: str, now: float, sent: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(time, "time", lambda: now)
    history = [Message("user", "a"), _message(("c1", expires))]
    assert body_of("anthropic", ModelRequest(history)).get("container", "") == ("c1" if sent else "")


def test_extra_body_skills_join_the_carried_container() -> None:
    history = [Message("user", "a"), _message(("container_new", FUTURE)), Message("user", "b")]
    skills = {"skills": [{"type": "anthropic", "skill_id": "pptx", "version": "latest"}]}
    body = body_of("anthropic", ModelRequest(history), "m", extra_body={"container": skills})
    assert body["container"] == {**skills, "id": "container_new"}
    # an explicit container wins
    body = body_of("anthropic", ModelRequest(history), "m", extra_body={"container": "c9"})
    assert body["container"] == "c9"


def test_other_providers_never_get_the_container() -> None:
    history = [Message("user", "a"), _message(("container_new", FUTURE)), Message("user", "b")]
    responses = body_of("openai-responses", ModelRequest(history), model="gpt-x")
    gemini = body_of("gemini", ModelRequest(history))
    assert "container_new" not in json.dumps(responses)
    assert "container_new" not in json.dumps(gemini)
