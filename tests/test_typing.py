"""What `mypy --strict` says about user code: deps are required when the agent has a deps type,
a tool's RunContext must match it (ADR 0031), a completed result's output is the output type
(ADR 0022).

One mypy run (in-process, through `mypy.api`, with mypy's default error codes and no config) checks
every snippet below, each as its own module, plus `tests/typecheck/wrong_deps.py` (every line with
an `E:` comment refused, nothing else) and `examples/typed_agent.py` (no error); the tests then
read that run's errors per file. With the cache `make test`'s own mypy run
leaves behind, the run takes about a second.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.typecheck

ROOT = Path(__file__).resolve().parents[1]
TYPED_EXAMPLE = "examples/typed_agent.py"

PRELUDE = """\
from golem import Agent, DeferredResults, Result, RunContext, Tool
from golem.testing import ScriptedModel

int_agent: Agent[int, str] = Agent(ScriptedModel("x"), deps_type=int)
plain_agent: Agent[None, str] = Agent(ScriptedModel("x"))
"""

# snippet name -> (code, expected errors as (line in the snippet, regex on the message))
SNIPPETS: dict[str, tuple[str, list[tuple[int, str]]]] = {
    "run_without_deps": (
        """
        int_agent.run_sync("hi")
        async def main() -> None:
            await int_agent.run("hi")
            int_agent.run_stream("hi")
            await int_agent.run_with_deferred_results("", DeferredResults())
        int_agent.run_with_deferred_results_sync("", DeferredResults())
        int_agent.run_stream_with_deferred_results("", DeferredResults())
        """,
        [
            (1, r'Missing named argument "deps" for "run_sync"'),
            (3, r'Missing named argument "deps" for "run"'),
            (4, r'Missing named argument "deps" for "run_stream"'),
            (5, r'Missing named argument "deps" for "run_with_deferred_results"'),
            (6, r'Missing named argument "deps" for "run_with_deferred_results_sync"'),
            (7, r'Missing named argument "deps" for "run_stream_with_deferred_results"'),
        ],
    ),
    "run_with_deps_of_the_wrong_type": (
        """
        int_agent.run_sync("hi", deps="forty-two")
        plain_agent.run_sync("hi", deps=42)
        """,
        [
            (1, r'Argument "deps" to "run_sync" of "Agent" has incompatible type "str"'),
            (2, r'No overload variant of "run_sync" of "Agent" matches argument types "str", "int"'),
        ],
    ),
    "runs_that_type_check": (
        """
        r1: Result[str] = int_agent.run_sync("hi", deps=42)
        r2: Result[str] = plain_agent.run_sync("hi")
        r3: Result[str] = plain_agent.run_sync("hi", deps=None)
        async def main() -> None:
            r4: Result[str] = await int_agent.run("hi", deps=1)
            r5: Result[str] = await plain_agent.run("hi")
        """,
        [],
    ),
    "tool_with_the_wrong_context": (
        """
        @int_agent.tool
        def wrong(ctx: RunContext[str], n: int) -> str:
            return ctx.deps * n
        """,
        [(1, r'Argument 1 to "tool" of "Agent" has incompatible type .*RunContext\[str\]')],
    ),
    "tools_that_type_check": (
        """
        from typing import Any

        @int_agent.tool
        def right(ctx: RunContext[int], n: int) -> int:
            return ctx.deps + n

        @int_agent.tool_plain
        def plain(n: int) -> int:
            return n

        @int_agent.tool(name="right_too", timeout=5)
        async def right_too(ctx: RunContext[int]) -> int:
            return ctx.deps

        @int_agent.tool_plain(name="plain_too")
        async def plain_too() -> str:
            return ""

        def exec_int(ctx: RunContext[int], args: dict[str, Any]) -> str:
            return str(ctx.deps)

        with_tools: Agent[int, str] = Agent(
            ScriptedModel("x"),
            deps_type=int,
            tools=[Tool("raw", "", {"type": "object"}, exec_int), Tool.from_function(plain), right],
        )

        @int_agent.tool
        def loose(ctx: RunContext[Any]) -> str:
            return ""

        @plain_agent.tool
        async def no_deps(ctx: RunContext[None]) -> str:
            return ""

        right(RunContext(3), 4) + 1
        plain(2) + 1
        """,
        [],
    ),
    "completed_output_is_the_output_type": (
        """
        from pydantic import BaseModel

        class Invoice(BaseModel):
            total: float

        agent = Agent(ScriptedModel("x"), output_type=Invoice)
        result = agent.run_sync("hi")
        total: float = result.output.total
        paused: bool = result.is_paused
        reveal_type(result.output)
        """,
        [(10, r'Revealed type is ".*Invoice"')],
    ),
}


def _source(code: str) -> str:
    return PRELUDE + textwrap.dedent(code).lstrip("\n")


@pytest.fixture(scope="module")
def mypy_errors(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[tuple[int, str]]]:
    from mypy import api

    folder = tmp_path_factory.mktemp("typing")
    files = [str(ROOT / "tests" / "typecheck" / "wrong_deps.py"), str(ROOT / TYPED_EXAMPLE)]
    for name, (code, _) in SNIPPETS.items():
        path = folder / f"{name}.py"
        path.write_text(_source(code))
        files.append(str(path))
    stdout, stderr, _ = api.run(
        [
            "--strict",
            "--no-error-summary",
            "--show-error-codes",
            "--cache-dir",
            str(ROOT / ".mypy_cache"),
            "--config-file",
            "",
            *files,
        ]
    )
    assert not stderr, stderr
    prelude_lines = PRELUDE.count("\n")
    found: dict[str, list[tuple[int, str]]] = {
        name: [] for name in [*SNIPPETS, "wrong_deps", "typed_agent"]
    }
    for line in stdout.splitlines():
        match = re.match(r"(?:.*/)?(\w+)\.py:(\d+): (error|note): (.*)", line)
        assert match, line
        name, lineno, kind, message = match.groups()
        if kind == "note" and "Revealed type" not in message:
            continue
        offset = prelude_lines if name in SNIPPETS else 0
        found[name].append((int(lineno) - offset, message))
    return found


@pytest.mark.parametrize("name", list(SNIPPETS))
def test_mypy_reports_exactly_the_expected_errors(
    name: str, mypy_errors: dict[str, list[tuple[int, str]]]
) -> None:
    expected = SNIPPETS[name][1]
    got = mypy_errors[name]
    assert len(got) == len(expected), f"{name}: mypy said {got}"
    for (line, pattern), (got_line, message) in zip(expected, sorted(got), strict=True):
        assert got_line == line, f"{name}: expected line {line}, mypy said {got}"
        assert re.search(pattern, message), f"{name}: {message!r} does not match {pattern!r}"



def test_mypy_refuses_every_tool_with_the_wrong_context(
    mypy_errors: dict[str, list[tuple[int, str]]],
) -> None:
    """tests/typecheck/wrong_deps.py: an error on each line with an `E:` comment, matching it."""
    lines = (ROOT / "tests" / "typecheck" / "wrong_deps.py").read_text().splitlines()
    expected = {
        n: match.group(1)
        for n, line in enumerate(lines, 1)
        if (match := re.search(r"\S  # E: (.*)$", line))
    }
    assert len(expected) >= 4
    got = {line: message for line, message in mypy_errors["wrong_deps"]}
    assert set(got) == set(expected), f"mypy said {mypy_errors['wrong_deps']}"
    for line, pattern in expected.items():
        assert re.search(pattern, got[line]), f"line {line}: {got[line]!r} !~ {pattern!r}"


def test_the_typed_example_passes(mypy_errors: dict[str, list[tuple[int, str]]]) -> None:
    assert mypy_errors["typed_agent"] == []
