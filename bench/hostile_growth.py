"""How golem's parsers grow on hostile input sizes (ADR 0070): each case at n and 4n.

    python bench/hostile_growth.py [--n 5000] [--rounds 3]

For each case it prints the best CPU time at n and at 4n and their ratio. Linear work gives a
ratio near 4; a ratio past 10 (generous, for a shared machine) is flagged as superlinear, and
the script exits 1 when any case is. Cases: one assistant message with n unanswered calls
(`normalize_history`, `sanitize_history`, a resume that approves them all), a history of n
messages (`loads_history`), args nested n deep (`loads_history` refuses past the recursion
limit: measured at the limit instead), n distinct lone-surrogate escapes in args, a page
cursor of n bytes, a provider body of n messages' worth of text. Runs in well under a minute.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import functools
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from golem import (
    Agent,
    DeferredResults,
    Message,
    RunContext,
    Tool,
    ToolCall,
    dumps_history,
    loads_history,
    normalize_history,
    sanitize_history,
)
from golem.testing import ScriptedModel


def _best(fn: Callable[[], object], rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best


def _unanswered(n: int) -> list[Message]:
    calls = [ToolCall(f"c{i}", f"t{i % 7}", "{}") for i in range(n)]
    return [Message(role="user", content="go"), Message(role="assistant", tool_calls=calls)]


def _act(ctx: RunContext[None], args: dict[str, object]) -> str:
    return "done"


def _resume(n: int) -> Callable[[], object]:
    history = _unanswered(n)
    names = sorted({c.name for c in history[1].tool_calls})
    results = DeferredResults(approvals={c.id: True for c in history[1].tool_calls})

    def go() -> object:
        tools = [
            Tool(name, "acts", {"type": "object"}, _act, run_in_thread=False) for name in names
        ]
        agent: Agent[None, str] = Agent(
            ScriptedModel(Message(role="assistant", content="ok")), tools=tools
        )
        return agent.run_with_deferred_results_sync(history, results)

    return go


def _messages(n: int) -> str:
    return dumps_history([Message(role="user", content=f"m{i}") for i in range(n)])


def _lone_escapes(n: int) -> str:
    args = "[" + ",".join(f'"\\ud{0x800 + i % 0x400:03x}{i}"' for i in range(n)) + "]"
    return '[{"role":"assistant","toolCalls":[{"id":"a","name":"n","args":' + args + "}]}]"


async def _cursor_pages(n: int, store_dir: Path) -> None:
    from golem.durable.store import InvalidCursor
    from golem.durable.store.sqlite import SQLiteStore

    store = await SQLiteStore.open(store_dir / "g.db")
    try:
        cursor = base64.urlsafe_b64encode(b"[" * n).decode()
        with contextlib.suppress(InvalidCursor):
            await store.list_runs_page(after=cursor)
    finally:
        await store.close()


def _on(
    fn: Callable[[object], object], make: Callable[[int], object]
) -> Callable[[int], Callable[[], object]]:
    """A case: build the input of size n once, then time `fn` on it."""

    def build(n: int) -> Callable[[], object]:
        value = make(n)
        return functools.partial(fn, value)

    return build


def cases(tmp: Path) -> dict[str, Callable[[int], Callable[[], object]]]:
    return {
        "normalize_history, n unanswered calls": _on(normalize_history, _unanswered),  # type: ignore[arg-type]
        "sanitize_history, n unanswered calls": _on(sanitize_history, _unanswered),  # type: ignore[arg-type]
        "resume approving n calls": _resume,
        "loads_history, n messages": _on(loads_history, _messages),  # type: ignore[arg-type]
        "loads_history, n lone-surrogate escapes": _on(loads_history, _lone_escapes),  # type: ignore[arg-type]
        "list_runs_page, n-byte cursor": lambda n: lambda: asyncio.run(_cursor_pages(n * 20, tmp)),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    opts = parser.parse_args()
    flagged = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, build in cases(Path(tmp)).items():
            small = _best(build(opts.n), opts.rounds)
            large = _best(build(4 * opts.n), opts.rounds)
            ratio = large / small if small > 0 else float("nan")
            mark = "  SUPERLINEAR" if ratio > 10 else ""
            flagged += bool(mark)
            print(f"{name:45} {small * 1e3:9.2f} ms {large * 1e3:9.2f} ms  x{ratio:5.1f}{mark}")
    return 1 if flagged else 0


if __name__ == "__main__":
    sys.exit(main())
