"""`examples/approvals_service.py` runs offline and prints the whole cycle."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "approvals_service.py"


def test_the_example_runs_the_whole_cycle() -> None:
    proc = subprocess.run(
        [sys.executable, "-W", "error", str(EXAMPLE)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    expected = [
        "1. POST /api/runs -> 201: run is pending",
        "2. approve without a token -> 401 unauthenticated",
        "3. bob approves the invoice -> 403 forbidden",
        "4. bob answers the VAT lookup -> 200, run pending",
        "5. alice approves the invoice -> 200, run ready",
        "6. alice changes her mind -> 409 run_not_pending",
        "7. GET /api/runs/{id} -> completed: Done: ACME was invoiced 1200.00 EUR (VAT DE123456789).",
        "8. invoices actually sent: 1 (call_inv)",
    ]
    assert [line for line in lines if line[:2] in {f"{n}." for n in range(1, 9)}] == expected
    assert "   - decided   by bob@example.com call_vat" in lines
    assert "   - decided   by alice@example.com call_inv" in lines
