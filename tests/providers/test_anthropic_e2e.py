"""End to end: a deferred-tools pause and resume against a local server speaking the Messages API."""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from typing import Any

import pytest

from golem import Agent, Approval, DeferredResults, dumps_history, loads_history
from golem.model import Delta
from golem.providers.anthropic import AnthropicModel
from golem.tool import DeferKind, Deferred, call_approved
from tests.providers.anthropic_fixtures import sse, synthesize_stream
from tests.support.local_server import Headers, local_server

SIGNATURE = "EpICCkYIBxgCKkAbc/golem+test=="
FIRST_TURN = {
    "id": "msg_01",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5-20250929",
    "content": [
        {"type": "thinking", "thinking": "List first, then delete.", "signature": SIGNATURE},
        {"type": "text", "text": "I'll check the files and delete a.txt."},
        {"type": "tool_use", "id": "toolu_01List", "name": "list_files", "input": {}},
        {
            "type": "tool_use",
            "id": "toolu_02Del",
            "name": "delete_file",
            "input": {"path": "a.txt"},
        },
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {"input_tokens": 120, "cache_read_input_tokens": 30, "output_tokens": 60},
}
FINAL_TURN = {
    "id": "msg_02",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5-20250929",
    "content": [{"type": "text", "text": "Deleted a.txt; b.txt is left."}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 200, "output_tokens": 12},
}


class FakeAnthropic:
    """A local HTTP server that answers `POST /v1/messages` with scripted responses."""

    def __init__(self, replies: list[dict[str, Any]], *, keep_alive: bool = False) -> None:
        self.replies = list(replies)
        self.requests: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        self.url = ""
        self._serving = local_server(self._respond, keep_alive=keep_alive)

    def _respond(self, path: str, headers: Headers, raw: bytes) -> tuple[int, str, bytes]:
        body = json.loads(raw)
        self.requests.append((path, dict(headers.items()), body))
        reply = self.replies.pop(0)
        if body.get("stream"):
            return 200, "text/event-stream", sse(*synthesize_stream(reply, size=5)).encode()
        return 200, "application/json", json.dumps(reply).encode()

    def __enter__(self) -> FakeAnthropic:
        self.url = self._serving.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._serving.__exit__(None, None, None)


@pytest.fixture
def server() -> Iterator[FakeAnthropic]:
    with FakeAnthropic([FIRST_TURN, FINAL_TURN]) as fake:
        yield fake


def _agent(url: str, deleted: list[tuple[str, bool]]) -> Agent[None, str]:
    agent: Agent[None, str] = Agent(
        AnthropicModel("claude-sonnet-4-5", api_key="test-key", base_url=url),
        instructions="You manage files.",
    )

    @agent.tool
    def list_files() -> str:
        """List the files."""
        return "a.txt, b.txt"

    @agent.tool
    def delete_file(path: str) -> str:
        """Delete a file (needs approval)."""
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, f"delete {path}?")
        deleted.append((path, call_approved()))
        return f"deleted {path}"

    return agent


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
async def test_pause_json_round_trip_resume(server: FakeAnthropic, streamed: bool) -> None:
    deleted: list[tuple[str, bool]] = []
    first = _agent(server.url, deleted)
    if streamed:
        deltas: list[Delta] = []
        async with first.run_stream("Delete a.txt") as stream:
            async for item in stream:
                if isinstance(item, Delta):
                    deltas.append(item)
        paused = stream.result
        assert "".join(d.content for d in deltas) == "I'll check the files and delete a.txt."
    else:
        paused = await first.run("Delete a.txt")
    assert isinstance(first.model, AnthropicModel)
    await first.model.aclose()

    assert paused.is_paused
    assert paused.pending is not None
    assert [(p.call_id, p.tool_name, p.args, p.reason) for p in paused.pending.approvals] == [
        ("toolu_02Del", "delete_file", '{"path": "a.txt"}', "delete a.txt?")
    ]
    assert paused.finish_reason == "tool_call"
    assert paused.usage.input_tokens == 150
    assert deleted == []

    stored = dumps_history(paused.messages)
    assert "anthropic" not in stored.lower()  # nothing provider-specific beyond the signature

    second = _agent(server.url, deleted)
    result = await second.run_with_deferred_results(
        loads_history(stored), DeferredResults(approvals={"toolu_02Del": Approval(True)})
    )
    assert isinstance(second.model, AnthropicModel)
    await second.model.aclose()

    assert deleted == [("a.txt", True)]
    assert result.pending is None
    assert result.output == "Deleted a.txt; b.txt is left."
    assert result.finish_reason == "stop"

    (path1, _, body1), (path2, headers2, body2) = server.requests
    assert path1 == path2 == "/v1/messages"
    assert headers2["x-api-key"] == "test-key"
    assert headers2["anthropic-version"] == "2023-06-01"
    assert body1["stream"] is streamed
    assert body2["stream"] is False
    assert body2["system"] == "You manage files."
    assert body2["tool_choice"] == {"type": "auto"}
    assert [t["name"] for t in body2["tools"]] == ["list_files", "delete_file"]
    assert body2["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Delete a.txt"}]},
        {"role": "assistant", "content": FIRST_TURN["content"]},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_01List",
                    "content": "a.txt, b.txt",
                    "is_error": False,
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_02Del",
                    "content": "deleted a.txt",
                    "is_error": False,
                },
            ],
        },
    ]


async def test_denied_call_reaches_the_model_as_a_tool_result(server: FakeAnthropic) -> None:
    deleted: list[tuple[str, bool]] = []
    first = _agent(server.url, deleted)
    paused = await first.run("Delete a.txt")
    assert isinstance(first.model, AnthropicModel)
    await first.model.aclose()
    second = _agent(server.url, deleted)
    await second.run_with_deferred_results(
        loads_history(dumps_history(paused.messages)),
        DeferredResults(approvals={"toolu_02Del": Approval(False, "not today")}),
    )
    assert isinstance(second.model, AnthropicModel)
    await second.model.aclose()
    assert deleted == []
    denial = server.requests[1][2]["messages"][2]["content"][1]
    assert denial["tool_use_id"] == "toolu_02Del"
    assert denial["is_error"] is False
    assert "not today" in denial["content"]


def test_run_sync_repeatedly_on_one_model_leaves_no_open_connection() -> None:
    """Each run_sync has its own event loop; the model's client for it closes with it.

    The server keeps connections alive, so a pooled connection left open would surface
    as an "unclosed transport" ResourceWarning, which this suite turns into an error.
    """
    with FakeAnthropic([FINAL_TURN, FINAL_TURN, FINAL_TURN], keep_alive=True) as fake:
        agent: Agent[None, str] = Agent(
            AnthropicModel("claude-sonnet-4-5", api_key="test-key", base_url=fake.url)
        )
        outputs = [agent.run_sync(f"hi {i}").output for i in range(3)]
        del agent
        gc.collect()
    assert outputs == ["Deleted a.txt; b.txt is left."] * 3
    assert [body["messages"][0]["content"][0]["text"] for _, _, body in fake.requests] == [
        "hi 0",
        "hi 1",
        "hi 2",
    ]
