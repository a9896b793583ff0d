"""`FallbackModel`: the next model answers when one fails with a retryable provider error."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable

from golem.errors import ProviderError
from golem.model import (
    Delta,
    Model,
    ModelRequest,
    ModelResponse,
    StreamingModel,
)
from golem.providers._answers import replay_deltas
from golem.usage import Usage

__all__ = ["FallbackModel", "model_label"]


def model_label(model: Model) -> str:
    """A short name for `model`: its `model_name` or `model` attribute, else its class name."""
    for attr in ("model_name", "model"):
        value = getattr(model, attr, None)
        if isinstance(value, str) and value:
            return value
    return type(model).__name__


def _retryable(exc: Exception) -> bool:
    return isinstance(exc, ProviderError) and exc.retryable


class FallbackModel:
    """Tries models in order: the next one answers when one fails with a retryable error.

    Args:
        primary: The model asked first.
        *others: The models asked next, in order.
        fallback_on: Decides which errors move on to the next model; by default a
            `ProviderError` with `retryable` set.

    Raises:
        TypeError: a model is not a `golem.model.Model` (as `Agent` refuses one).
    """

    def __init__(
        self, primary: Model, *others: Model, fallback_on: Callable[[Exception], bool] = _retryable
    ) -> None:
        models = (primary, *others)
        for i, m in enumerate(models):
            if not isinstance(m, Model):
                hint = (
                    f"; build it with golem.providers.infer_model({m!r})"
                    if isinstance(m, str)
                    else ""
                )
                raise TypeError(
                    f"FallbackModel model {i} must be a golem Model (with async generate), "
                    f"got {type(m).__name__}{hint}"
                )
        self.models: tuple[Model, ...] = models
        """The models, in the order they are asked."""
        self.fallback_on = fallback_on
        self.model = self.model_name = model_label(primary)
        """The primary model's name (`model` and `model_name` alike)."""
        provider = getattr(primary, "provider", "")
        self.provider: str = provider if isinstance(provider, str) else ""
        """The primary model's `provider`, "" when it names none."""

    def __repr__(self) -> str:
        return f"FallbackModel({', '.join(model_label(m) for m in self.models)})"

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """Ask each model in turn until one answers.

        Raises:
            Exception: the first error `fallback_on` refuses, else the last model's error.
        """
        failures: list[tuple[Model, Exception]] = []
        for model in self.models:
            try:
                response = await model.generate(request)
            except Exception as exc:
                if not self.fallback_on(exc):
                    raise
                failures.append((model, exc))
                continue
            return _answered_by(model, response, failures)
        raise _exhausted(failures)

    async def generate_stream(self, request: ModelRequest) -> AsyncIterator[Delta | ModelResponse]:
        """Stream from each model in turn until one streams; then its deltas and response.

        Raises:
            Exception: as `generate`, and any error after a stream yielded its first item.
        """
        failures: list[tuple[Model, Exception]] = []
        for model in self.models:
            started = False
            try:
                async for item in _stream_of(model, request):
                    started = True
                    yield (
                        _answered_by(model, item, failures)
                        if isinstance(item, ModelResponse)
                        else item
                    )
            except Exception as exc:
                if started or not self.fallback_on(exc):
                    raise
                failures.append((model, exc))
                continue
            return
        raise _exhausted(failures)


def _answered_by(
    model: Model, response: ModelResponse, failures: list[tuple[Model, Exception]]
) -> ModelResponse:
    spent = _spent(failures)
    if spent is not None:  # what the models that failed first reported using is spent too
        response = dataclasses.replace(response, usage=response.usage + spent)
    if response.model_name:
        return response
    return dataclasses.replace(response, model_name=model_label(model))


def _spent(failures: list[tuple[Model, Exception]]) -> Usage | None:
    """The usage the failed models reported (`ProviderError.usage`), None when none did."""
    usages = [e.usage for _, e in failures if isinstance(e, ProviderError) and e.usage is not None]
    return sum(usages[1:], usages[0]) if usages else None


def _exhausted(failures: list[tuple[Model, Exception]]) -> Exception:
    last = failures[-1][1]
    spent = _spent(failures)
    if spent is not None and isinstance(last, ProviderError):
        last.usage = spent
    for model, exc in failures[:-1]:
        last.add_note(f"FallbackModel: {model_label(model)} failed first: {exc!r}")
    last.add_note(f"FallbackModel: all {len(failures)} models failed")
    return last


async def _stream_of(model: Model, request: ModelRequest) -> AsyncIterator[Delta | ModelResponse]:
    if isinstance(model, StreamingModel):
        async for item in model.generate_stream(request):
            yield item
        return
    response = await model.generate(request)
    for delta in replay_deltas(response):
        yield delta
    yield response
