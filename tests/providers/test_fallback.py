"""`FallbackModel`: the next model on a retryable provider error, plain and streamed."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from golem import Agent
from golem.errors import (
    AuthenticationError,
    BadRequest,
    Overloaded,
    ProviderConnectionError,
    RateLimited,
)
from golem.messages import Message
from golem.model import Delta, ModelRequest, ModelResponse, StreamingModel
from golem.providers import FallbackModel
from golem.providers.anthropic import AnthropicModel
from golem.providers.openai import OpenAIChatModel
from golem.result import RunError
from golem.testing import ScriptedModel
from golem.usage import Usage

REQUEST = ModelRequest(messages=[Message(role="user", content="Hi")])


def _answer(text: str, model_name: str = "", tokens: int = 0) -> ModelResponse:
    return ModelResponse(
        message=Message(role="assistant", content=text),
        usage=Usage(input_tokens=tokens, output_tokens=tokens),
        finish_reason="stop",
        model_name=model_name,
    )


class _Plain:
    """A model without `generate_stream`."""

    model_name = "plain-1"

    def __init__(self, *outcomes: ModelResponse | Exception) -> None:
        self.outcomes = list(outcomes)
        self.calls = 0

    async def generate(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


async def test_the_primary_answers_when_it_can() -> None:
    primary, backup = _Plain(_answer("one", "gpt-x", 5)), _Plain(_answer("two"))
    response = await FallbackModel(primary, backup).generate(REQUEST)
    assert response.message.content == "one"
    assert response.model_name == "gpt-x"
    assert (primary.calls, backup.calls) == (1, 0)


@pytest.mark.parametrize(
    "error",
    [
        RateLimited("slow down", retry_after=3.0),
        Overloaded("busy", status_code=529),
        ProviderConnectionError("reset", retryable=True),
    ],
)
async def test_a_retryable_error_moves_on_and_records_who_answered(error: Exception) -> None:
    primary, backup = _Plain(error), _Plain(_answer("two", tokens=7))
    response = await FallbackModel(primary, backup).generate(REQUEST)
    assert response.message.content == "two"
    assert response.model_name == "plain-1"  # filled in: the provider reported none
    assert response.usage == Usage(input_tokens=7, output_tokens=7)


@pytest.mark.parametrize(
    "error",
    [BadRequest("bad schema", status_code=400), AuthenticationError("no key"), KeyError("x")],
)
async def test_a_final_error_is_raised_without_asking_the_next_model(error: Exception) -> None:
    backup = _Plain(_answer("two"))
    with pytest.raises(type(error)) as caught:
        await FallbackModel(_Plain(error), backup).generate(REQUEST)
    assert caught.value is error
    assert backup.calls == 0


async def test_when_every_model_fails_the_last_error_is_raised_with_the_others_noted() -> None:
    first, last = RateLimited("first is limited"), Overloaded("second is busy", status_code=503)
    model = FallbackModel(_Plain(first), ScriptedModel(last))
    with pytest.raises(Overloaded) as caught:
        await model.generate(REQUEST)
    assert caught.value is last
    assert caught.value.retryable
    assert caught.value.__notes__ == [
        f"FallbackModel: plain-1 failed first: {first!r}",
        "FallbackModel: all 2 models failed",
    ]


async def test_fallback_on_chooses_which_errors_move_on() -> None:
    model = FallbackModel(
        _Plain(BadRequest("context too long")),
        _Plain(_answer("short")),
        fallback_on=lambda exc: isinstance(exc, BadRequest),
    )
    assert (await model.generate(REQUEST)).message.content == "short"


def test_only_models_are_accepted() -> None:
    with pytest.raises(TypeError, match="FallbackModel model 1 must be a golem Model") as info:
        FallbackModel(_Plain(), "openai:gpt-4.1")  # type: ignore[arg-type]
    assert "golem.providers.infer_model('openai:gpt-4.1')" in str(info.value)
    with pytest.raises(TypeError, match=r"model 0 must be a golem Model .*got NoneType$"):
        FallbackModel(None)  # type: ignore[arg-type]
    model = FallbackModel(ScriptedModel(), _Plain())
    assert isinstance(model, StreamingModel)
    assert repr(model) == "FallbackModel(ScriptedModel, plain-1)"


async def test_streaming_falls_back_before_the_first_delta() -> None:
    primary = ScriptedModel(Overloaded("busy"))
    backup = ScriptedModel(_answer("from the backup", "claude-x", 3))
    items = [item async for item in FallbackModel(primary, backup).generate_stream(REQUEST)]
    final = items[-1]
    assert isinstance(final, ModelResponse)
    assert final.model_name == "claude-x"
    assert "".join(d.content for d in items[:-1] if isinstance(d, Delta)) == "from the backup"


async def test_a_plain_model_streams_its_answer_as_one_delta() -> None:
    items = [
        item
        async for item in FallbackModel(
            _Plain(RateLimited("x")), _Plain(_answer("whole"))
        ).generate_stream(REQUEST)
    ]
    assert items[0] == Delta(content="whole")
    assert isinstance(items[1], ModelResponse)
    assert items[1].model_name == "plain-1"


async def test_a_stream_failing_midway_is_not_retried_elsewhere() -> None:
    class _Breaks:
        model_name = "breaks"

        async def generate(self, request: ModelRequest) -> ModelResponse:
            raise AssertionError("not used")

        async def generate_stream(self, request: ModelRequest) -> Any:
            yield Delta(content="half")
            raise ProviderConnectionError("stream cut", retryable=True)

    backup = _Plain(_answer("never"))
    seen: list[Any] = []
    with pytest.raises(ProviderConnectionError):
        async for item in FallbackModel(_Breaks(), backup).generate_stream(REQUEST):
            seen.append(item)
    assert seen == [Delta(content="half")]
    assert backup.calls == 0


async def test_an_agent_falls_back_from_a_rate_limited_provider_over_http() -> None:
    """A real adapter's 429 falls back to another provider; the run's usage is the answer's."""
    openai_calls: list[httpx.Request] = []

    def openai(request: httpx.Request) -> httpx.Response:
        openai_calls.append(request)
        return httpx.Response(
            429, headers={"retry-after": "20"}, json={"error": {"message": "Rate limit reached"}}
        )

    def anthropic(request: httpx.Request) -> httpx.Response:
        body: dict[str, Any] = json.loads(request.content)
        assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]
        return httpx.Response(
            200,
            json={
                "content": [{"type": "text", "text": "Hello from Claude"}],
                "model": "claude-sonnet-4-5-20250929",
                "stop_reason": "end_turn",
                "usage": {"input_tokens": 8, "output_tokens": 4},
            },
        )

    async with (
        httpx.AsyncClient(transport=httpx.MockTransport(openai)) as c1,
        httpx.AsyncClient(transport=httpx.MockTransport(anthropic)) as c2,
    ):
        model = FallbackModel(
            OpenAIChatModel("gpt-4.1", api_key="k", http_client=c1),
            AnthropicModel("claude-sonnet-4-5", api_key="k", http_client=c2),
        )
        result = await Agent(model).run("Hi")
    assert result.output == "Hello from Claude"
    assert result.usage.input_tokens == 8
    assert result.usage.output_tokens == 4
    assert len(openai_calls) == 1


async def test_when_all_fail_the_agent_retries_the_chain_under_max_attempts() -> None:
    primary = ScriptedModel(RateLimited("a", retry_after=0), "primary answers on the retry")
    backup = ScriptedModel(Overloaded("b", retry_after=0))
    agent = Agent(FallbackModel(primary, backup), max_attempts=2, retry_backoff=lambda n: 0.0)
    result = await agent.run("Hi")
    assert result.output == "primary answers on the retry"
    with pytest.raises(RunError):
        await Agent(
            FallbackModel(ScriptedModel(RateLimited("a")), ScriptedModel(RateLimited("b")))
        ).run("Hi")
