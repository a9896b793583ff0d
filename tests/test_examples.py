"""Every example under examples/ runs offline, exits 0 and prints what its guide shows."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
KEYS = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
)

# A line (or fragment) each example must print; the approvals service example has its own test.
EXPECTED = {
    "quickstart.py": "You rolled a 4.",
    "deferred_tools.py": "tool      call-2  Your tool call was denied: build/ is still needed.",
    "history_json.py": "calls closed:           ['call-9']",
    "mcp_stdio.py": "answer:  Deleted a.log; notes.txt stays.",
    "nested_agents.py": "answer: Freed 2 GB.",
    "otel_console.py": "answer: Deleted a.log.",
    "otel_store.py": "status: completed | paused span:",
    "run_events.py": "answer: Lisbon is sunny; Atlantis has no weather station.",
    "sealed_approvals.py": "rejected  tampered: nothing ran (sent so far: [])",
    "streamed_resume.py": "event  tool_end deploy (approved re-run)",
    "streaming.py": "result 'You asked: is it streaming?'",
    "structured_output.py": "output: Invoice(vendor='ACME Tools', total=129.5, currency='EUR')",
    "tools_and_deps.py": "orders: [('apple', 3)], apples left: 7",
    "typed_agent.py": "after approval: 9 x pear placed: [('pear', 9)]",
    "usage_limits.py": "stage=tool cause is a TimeoutError: True",
    "provider_openai.py": "set OPENAI_API_KEY",
    "provider_fallback.py": "answer: Lisbon is sunny, 24 °C.",
    "provider_anthropic.py": "set ANTHROPIC_API_KEY",
    "provider_gemini.py": "set GEMINI_API_KEY",
}


def run_example(name: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in KEYS}
    return subprocess.run(
        [sys.executable, "-W", "error", str(EXAMPLES / name)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def test_every_example_is_covered() -> None:
    names = {p.name for p in EXAMPLES.glob("*.py")} - {"approvals_service.py"}
    assert names == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_runs_offline(name: str) -> None:
    proc = run_example(name)
    assert proc.returncode == 0, proc.stderr
    assert EXPECTED[name] in proc.stdout, proc.stdout


def test_deferred_tools_example_executes_only_the_approved_command() -> None:
    out = run_example("deferred_tools.py").stdout
    executed = out.split("== executed on the approved pass\n", 1)[1].split("\n\n", 1)[0]
    assert executed.splitlines() == ["rm old.log"]
