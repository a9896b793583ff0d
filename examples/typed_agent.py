"""A fully typed agent, offline: what `mypy --strict` knows about deps, tools and results.

`Agent[Shop, Order]` fixes the type of the run's dependencies and of its output. A tool
takes `ctx: RunContext[Shop]`; `run_sync` requires `deps=` of type `Shop`; a completed
result's `output` is an `Order` (not `Order | None`), and a run that may pause is checked
with `result.is_paused` first (docs/adr/0022-result-output-typing.md). `make test` checks
this file with `mypy --strict`; the lines marked "type error" in the comments at the end
are what mypy refuses. Run it with `python examples/typed_agent.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import BaseModel

from golem import (
    Agent,
    Approval,
    DeferKind,
    Deferred,
    DeferredResults,
    Message,
    Result,
    RunContext,
    ToolCall,
    call_approved,
)
from golem.testing import ScriptedModel


@dataclass
class Shop:
    """The run's dependencies: stock per fruit, and the orders placed."""

    stock: dict[str, int]
    placed: list[tuple[str, int]] = field(default_factory=list)


class Order(BaseModel):
    """The structured output: what was ordered."""

    fruit: str
    count: int


def script() -> ScriptedModel:
    return ScriptedModel(
        Message(
            role="assistant",
            tool_calls=[ToolCall("call-1", "place_order", '{"fruit": "pear", "count": 2}')],
        ),
        '{"fruit": "pear", "count": 2}',
    )


agent: Agent[Shop, Order] = Agent(script(), output_type=Order, deps_type=Shop)


@agent.tool
def place_order(ctx: RunContext[Shop], fruit: str, count: int) -> str:
    """Order fruit; large orders need a human's approval.

    Args:
        fruit: The fruit to order.
        count: How many.
    """
    if count > 5 and not call_approved():
        raise Deferred(DeferKind.APPROVAL, f"order {count} {fruit}s?")
    if ctx.deps.stock.get(fruit, 0) < count:
        return f"only {ctx.deps.stock.get(fruit, 0)} {fruit}s left"
    ctx.deps.stock[fruit] -= count
    ctx.deps.placed.append((fruit, count))
    return f"ordered {count} {fruit}s"


def describe(order: Order) -> str:
    return f"{order.count} x {order.fruit}"


def finish(runner: Agent[Shop, Order], result: Result[Order], shop: Shop) -> Order:
    """Resume a paused result (approving every call) until it completes."""
    while result.is_paused:
        pending = result.pending
        assert pending is not None
        approvals = {c.call_id: Approval(True) for c in pending.approvals}
        result = runner.run_with_deferred_results_sync(
            result.messages, DeferredResults(approvals=approvals), deps=shop
        )
    return result.output


shop = Shop(stock={"pear": 3})
result = agent.run_sync("Two pears, please.", deps=shop)
order: Order = result.output  # typed Order: no `is not None` check needed
print("output:", describe(order))
print("placed:", shop.placed, "left:", shop.stock)

big = Agent(
    ScriptedModel(
        Message(
            role="assistant",
            tool_calls=[ToolCall("call-2", "place_order", '{"fruit": "pear", "count": 9}')],
        ),
        '{"fruit": "pear", "count": 9}',
    ),
    output_type=Order,
    deps_type=Shop,
    tools=[place_order],
)
stocked = Shop(stock={"pear": 20})
paused = big.run_sync("Nine pears.", deps=stocked)
print("paused:", paused.is_paused)
print("after approval:", describe(finish(big, paused, stocked)), "placed:", stocked.placed)

# What mypy --strict refuses (uncomment one to see it):
#   agent.run_sync("Two pears, please.")       # deps missing for an Agent[Shop, ...]
#   agent.run_sync("hi", deps=42)              # deps of the wrong type
#   describe(None)                             # an Order is required, not Order | None
#
#   @agent.tool
#   def wrong(ctx: RunContext[int]) -> str: ...   # RunContext[int] on an Agent[Shop, ...]
#
#   @agent.tool
#   def no_context(n: int) -> int: ...           # no ctx: register it with @agent.tool_plain
