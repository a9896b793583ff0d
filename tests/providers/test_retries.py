"""A provider failure that ends a run: `RunError.__cause__` is the `ProviderError` itself,
whether the run retried it or not (issue 29; the providers guide promises it)."""

from __future__ import annotations

import httpx
import pytest

from golem import Agent
from golem.errors import Overloaded, ProviderError, RateLimited, Stage
from golem.result import RunError
from tests.support.adapters import MODELS


def _no_wait(attempt: int) -> float:
    return 0.0


ANSWERS = {429: (RateLimited, {"retry-after": "0"}), 503: (Overloaded, {})}


@pytest.mark.parametrize("status", sorted(ANSWERS))
@pytest.mark.parametrize("attempts", [1, 3])
@pytest.mark.parametrize("api", list(MODELS))
async def test_the_cause_of_a_failed_run_is_the_provider_error(
    api: str, attempts: int, status: int
) -> None:
    kind, headers = ANSWERS[status]
    sent: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(status, headers=headers, json={"error": {"message": "busy"}})

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        agent = Agent(MODELS[api](client), max_attempts=attempts, retry_backoff=_no_wait)
        with pytest.raises(RunError) as info:
            await agent.run("hi")
    assert len(sent) == attempts
    assert info.value.stage is Stage.MODEL
    assert type(info.value.__cause__) is kind
    if attempts > 1:  # the count is a note on the provider's error
        assert f"after {attempts} attempts" in " ".join(info.value.__cause__.__notes__)


async def test_a_wait_longer_than_max_retry_wait_keeps_the_provider_error_as_cause() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(429, headers={"retry-after": "3600"}, json={"error": {}})

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        agent = Agent(MODELS["openai-chat"](client), max_attempts=3, max_retry_wait=60.0)
        with pytest.raises(RunError) as info:
            await agent.run("hi")
    cause = info.value.__cause__
    assert isinstance(cause, RateLimited)
    assert cause.retry_after == 3600.0
    assert "max_retry_wait" in " ".join(cause.__notes__)


async def test_a_failure_after_retries_that_is_not_retryable_is_the_cause_as_raised() -> None:
    answers = [httpx.Response(503, json={}), httpx.Response(401, json={})]

    def answer(request: httpx.Request) -> httpx.Response:
        return answers.pop(0)

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        agent = Agent(MODELS["anthropic"](client), max_attempts=3, retry_backoff=_no_wait)
        with pytest.raises(RunError) as info:
            await agent.run("hi")
    assert isinstance(info.value.__cause__, ProviderError)
    assert info.value.__cause__.status_code == 401
    assert "after 2 attempts" in " ".join(info.value.__cause__.__notes__)
