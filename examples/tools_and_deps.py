"""Tools and dependencies, offline: typed tools, a raw tool, deps, correction and failure.

A shop assistant checks stock and places orders against a `Shop` passed as the run's
`deps`. The scripted model first orders zero apples (pydantic rejects the argument before the
tool runs) and asks about an item the shop does not sell (the tool records a definitive
failure with `Failed`), then orders more apples than there are (the tool asks for a
correction with `ModelRetry`), and finally orders correctly. Run it with
`python examples/tools_and_deps.py`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import Field

from golem import Agent, RunContext
from golem.messages import Message, ToolCall
from golem.testing import ScriptedModel
from golem.tool import Failed, ModelRetry, Tool


@dataclass
class Shop:
    """The dependencies every tool of a run receives as `ctx.deps`."""

    stock: dict[str, int]
    orders: list[tuple[str, int]] = field(default_factory=list)


def check_stock(ctx: RunContext[Shop], item: str) -> str:
    """Tell how many units of an item are in stock.

    Args:
        item: The item's name, singular, lowercase.
    """
    if item not in ctx.deps.stock:
        raise Failed(f"we do not sell {item}")  # recorded as the result; the run goes on
    return f"{ctx.deps.stock[item]} {item}s in stock"


def place_order(ctx: RunContext[Shop], item: str, quantity: Annotated[int, Field(gt=0)]) -> str:
    """Order units of an item.

    Args:
        item: The item's name, singular, lowercase.
        quantity: How many units to order.
    """
    available = ctx.deps.stock.get(item, 0)
    if quantity > available:
        raise ModelRetry(f"only {available} {item}s in stock")  # the model corrects its call
    ctx.deps.stock[item] -= quantity
    ctx.deps.orders.append((item, quantity))
    return f"order {len(ctx.deps.orders)} placed (call {ctx.call_id})"


def opening_hours(ctx: RunContext[Shop], args: dict[str, Any]) -> str:
    """The raw form's `exec`: it receives the decoded arguments object as a dict."""
    return "9:00-17:00" if args.get("day") != "sunday" else "closed"


hours = Tool(
    "opening_hours",
    "Opening hours of the shop on a given day.",
    {"type": "object", "properties": {"day": {"type": "string"}}, "required": ["day"]},
    opening_hours,
)


def call(call_id: str, name: str, args: str) -> ToolCall:
    return ToolCall(id=call_id, name=name, args=args)


model = ScriptedModel(
    Message(
        role="assistant",
        tool_calls=[
            call("call-1", "check_stock", '{"item": "apple"}'),
            call("call-2", "place_order", '{"item": "apple", "quantity": 0}'),
            call("call-3", "check_stock", '{"item": "banana"}'),
        ],
    ),
    Message(
        role="assistant",
        tool_calls=[call("call-4", "place_order", '{"item": "apple", "quantity": 30}')],
    ),
    Message(
        role="assistant",
        tool_calls=[
            call("call-5", "place_order", '{"item": "apple", "quantity": 3}'),
            call("call-6", "opening_hours", '{"day": "saturday"}'),
        ],
    ),
    "I ordered 3 apples; we do not sell bananas. Pick-up on Saturday between 9:00 and 17:00.",
)
agent: Agent[Shop, str] = Agent(
    model,
    instructions="You are the shop's order assistant.",
    tools=[check_stock, place_order, hours],
    tool_retries=2,  # corrections per tool per run (invalid arguments and ModelRetry)
)


if __name__ == "__main__":
    shop = Shop(stock={"apple": 10, "pear": 4})
    result = agent.run_sync("Three apples and a banana for Saturday, please.", deps=shop)

    print("== the schema the model sees for place_order")
    print(json.dumps(agent.tools["place_order"].schema, indent=2))
    print("\n== tool results, as the model read them")
    for m in result.messages:
        if m.role == "tool":
            flag = "  (failed)" if m.failed else ""
            print(f"{m.tool_call_id}  {m.tool_name:<14} {m.content}{flag}")
    print("\n== answer")
    print(result.output)
    print(f"\norders: {shop.orders}, apples left: {shop.stock['apple']}")
    print(f"{result.requests} model calls, {result.tool_calls} tool executions")
