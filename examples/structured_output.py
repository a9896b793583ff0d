"""Structured output, offline: a pydantic type as the output, with one correction round.

The agent's `output_type` is a pydantic model. The scripted model's first answer misses
a field, so the output is rejected and the model is asked, once (`output_retries=1`), to
correct it; its second answer validates. The test-style checks at the end read what the
model was sent from `model.requests`. Run it with `python examples/structured_output.py`.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from golem import Agent, EventKind, RunEvent
from golem.testing import ScriptedModel


class Invoice(BaseModel):
    """The fields extracted from an invoice."""

    vendor: str
    total: float = Field(ge=0)
    currency: str = Field(pattern=r"^[A-Z]{3}$")


model = ScriptedModel(
    '{"vendor": "ACME Tools", "total": 129.5}',
    '```json\n{"vendor": "ACME Tools", "total": 129.5, "currency": "EUR"}\n```',
)
agent: Agent[None, Invoice] = Agent(
    model,
    output_type=Invoice,
    instructions="Extract the invoice fields as JSON.",
    output_retries=1,
)


def on_event(event: RunEvent) -> None:
    if event.kind is EventKind.OUTPUT_REJECTED:
        print(f"rejected (correction round {event.attempt}): {event.error}")


if __name__ == "__main__":
    result = agent.run_sync(
        "ACME Tools, invoice 2024-118: 129.50 EUR due in 30 days.", on_event=on_event
    )
    invoice = result.output
    assert invoice is not None
    print(f"output: {invoice!r}")
    print(f"total + 10%: {invoice.total * 1.1:.2f} {invoice.currency}")

    # What the model was sent: the output schema with every request, and the correction.
    first, second = model.requests
    assert first.output_schema == Invoice.model_json_schema()
    print("schema fields sent:", sorted(first.output_schema["properties"]))
    print("correction sent:   ", second.messages[-1].content)
