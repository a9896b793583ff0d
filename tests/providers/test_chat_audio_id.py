"""An OpenAI Chat Completions audio answer goes back by its `audio.id` on the next turn.

The API keeps an audio answer for multi-turn conversations until its `expires_at`, and the
next request names it in the assistant message (`{"role": "assistant", "audio": {"id":
...}}`). golem kept the audio and its transcript but dropped the ID, so the model got its
own answer back as a user message of media after the turn (or as a note that pcm audio
cannot be sent). The ID and expiry are kept in the audio part's signature
(`openai-chat-audio/<expires_at>/<id>`); an expired one goes back as before.
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import httpx
import pytest

from golem import Agent, dumps_history, loads_history
from golem.messages import Message, Part, ToolCall
from golem.model import ModelRequest
from golem.providers.openai import OpenAIChatModel
from tests.support.adapters import body_of

WAV = b"RIFF$\x00\x00\x00WAVEfmt \x10\x00\x00\x00"
FUTURE = 32_503_680_000  # 3000-01-01
PAST = 1_000_000_000  # 2001


def _answer(audio: dict[str, Any], finish: str = "stop") -> dict[str, Any]:
    message = {"role": "assistant", "content": None, "refusal": None, "audio": audio}
    return {
        "id": "x",
        "object": "chat.completion",
        "model": "gpt-4o-audio-preview",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
    }


def _audio(expires: int) -> dict[str, Any]:
    return {
        "id": "audio_abc",
        "data": base64.b64encode(WAV).decode(),
        "expires_at": expires,
        "transcript": "Golems are made of clay.",
    }


def _chunks(expires: int) -> str:
    data = base64.b64encode(WAV).decode()
    deltas = [
        {"role": "assistant", "audio": {"id": "audio_abc", "transcript": "Golems are "}},
        {"audio": {"data": data[:8]}},
        {"audio": {"data": data[8:], "transcript": "made of clay."}},
        {"audio": {"expires_at": expires}},
    ]
    out = ""
    for i, delta in enumerate(deltas):
        finish = "stop" if i == len(deltas) - 1 else None
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        out += f"data: {json.dumps({'id': 'x', 'model': 'm', 'choices': [choice]})}\n\n"
    return out + "data: [DONE]\n\n"


def _server(expires: int, seen: list[dict[str, Any]]) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append(body)
        if body.get("stream"):
            return httpx.Response(
                200, headers={"content-type": "text/event-stream"}, text=_chunks(expires)
            )
        return httpx.Response(200, json=_answer(_audio(expires)))

    return httpx.MockTransport(handle)


async def _two_turns(expires: int, stream: bool) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    async with httpx.AsyncClient(transport=_server(expires, seen)) as client:
        agent = Agent(OpenAIChatModel("gpt-4o-audio-preview", api_key="k", http_client=client))
        if stream:
            async with agent.run_stream("what are golems made of?") as s:
                async for _ in s:
                    pass
            history = s.result.messages
        else:
            history = (await agent.run("what are golems made of?")).messages
        history = loads_history(dumps_history(history))  # through the history JSON
        await agent.run("and why?", history=history)
    return seen


@pytest.mark.parametrize("stream", [False, True])
async def test_the_next_request_names_the_audio_answer_by_its_id(stream: bool) -> None:
    seen = await _two_turns(FUTURE, stream)
    messages = seen[1]["messages"]
    assert messages[1] == {"role": "assistant", "audio": {"id": "audio_abc"}}
    # the audio is not sent again as media of a user message
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[2] == {"role": "user", "content": "and why?"}


@pytest.mark.parametrize("stream", [False, True])
async def test_an_expired_audio_answer_goes_back_as_its_transcript(stream: bool) -> None:
    seen = await _two_turns(PAST, stream)
    messages = seen[1]["messages"]
    assert messages[1] == {"role": "assistant", "content": "Golems are made of clay."}
    assert "audio" not in json.dumps(messages[1])


def _spoken(signature: str) -> Message:
    return Message(
        "assistant",
        "Golems are made of clay.",
        parts=[Part("audio", data=WAV, media_type="audio/wav", signature=signature)],
    )


@pytest.mark.parametrize(
    ("signature", "now", "expected"),
    [
        ("openai-chat-audio/2000/audio_1", 1999.0, "audio_1"),
        ("openai-chat-audio/2000/audio_1", 2000.0, ""),  # expired at that second
        ("openai-chat-audio//audio_1", 1e12, "audio_1"),  # no expiry given: kept
        ("openai-chat-audio/2000/a/b", 0.0, "a/b"),  # the ID is the rest
        ("gemini-signature", 0.0, ""),
        ("", 0.0, ""),
    ],
)
def test_the_audio_id_sent_is_the_signatures_while_it_lives(
    signature: str, now: float, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(time, "time", lambda: now)
    history = [Message("user", "q"), _spoken(signature), Message("user", "and?")]
    sent = body_of("openai-chat", ModelRequest(history))["messages"][1]
    assert sent.get("audio", {}).get("id", "") == expected


def test_other_providers_never_get_the_audio_id() -> None:
    history = [
        Message("user", "q"),
        _spoken(f"openai-chat-audio/{FUTURE}/audio_abc"),
        Message("user", "and?"),
    ]
    assert "openai-chat-audio" not in json.dumps(body_of("gemini", ModelRequest(history)))
    # a Gemini signature on media still goes back to Gemini
    history[1] = _spoken("c2ln")
    model_turn = body_of("gemini", ModelRequest(history))["contents"][1]
    assert model_turn["parts"][-1]["thoughtSignature"] == "c2ln"


def test_an_audio_answer_with_tool_calls_keeps_its_calls() -> None:
    m = Message(
        "assistant",
        "Let me look.",
        parts=[_spoken(f"openai-chat-audio/{FUTURE}/au").parts[0]],
        tool_calls=[ToolCall("call_1", "look", "{}")],
    )
    body = body_of(
        "openai-chat",
        ModelRequest([Message("user", "q"), m, Message("tool", "seen", tool_call_id="call_1")]),
        "gpt-4o-audio-preview",
    )
    assistant = body["messages"][1]
    assert assistant["audio"] == {"id": "au"}
    assert [c["id"] for c in assistant["tool_calls"]] == ["call_1"]
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "tool"]
