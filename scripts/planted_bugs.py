"""Plant bugs one at a time and report which ones a test selection catches.

    python scripts/planted_bugs.py scripts/planted_bugs/store.toml [--only ID ...]

Each ``[[bug]]`` in the file names a source ``file``, an ``old`` text that occurs in it exactly
once and the ``new`` text that replaces it. The file's ``[suite]`` lists the test ``paths`` to
run. For every bug the runner plants it, runs the fast selection of those tests with ``-x``
(stop at the first failure), restores the file and prints one line: caught (a test failed),
missed (the selection passed) or broken (pytest could not run, e.g. an import error: the bug
is not a fair plant). The source is always restored, also on Ctrl-C.

Run it in two checkouts of the same source, one with the old suite and one with the new, to
compare what each catches; paths missing from a checkout are left out of its selection.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path

MARKS = "not live and not deep and not serial"


def run_bug(bug: dict[str, str], paths: list[str], timeout: float) -> tuple[str, str]:
    """Plant ``bug``, run ``paths``, restore; return (verdict, first failing test)."""
    source = Path(bug["file"])
    original = source.read_text()
    if original.count(bug["old"]) != 1:
        return "unplantable", f"`old` occurs {original.count(bug['old'])} times in {source}"
    source.write_text(original.replace(bug["old"], bug["new"]))
    try:
        command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
                   "-m", MARKS, "-o", "addopts=", *paths]
        env = {**os.environ, "PYTHONPATH": str(Path("src").resolve())}
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
        except subprocess.TimeoutExpired:
            return "caught", "(timed out: a hang counts as caught)"
    finally:
        source.write_text(original)
    failed = next((line for line in done.stdout.splitlines() if line.startswith("FAILED")), "")
    if done.returncode == 0:
        return "missed", ""
    if done.returncode == 1:
        return "caught", failed.removeprefix("FAILED ").split(" - ")[0]
    tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
    return "broken", " | ".join(tail)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bugs", type=Path)
    parser.add_argument("--only", nargs="*", default=None, help="bug ids to run")
    parser.add_argument("--timeout", type=float, default=900.0)
    args = parser.parse_args()
    spec = tomllib.loads(args.bugs.read_text())
    paths = [p for p in spec["suite"]["paths"] if Path(p).exists()]
    counts: dict[str, int] = {}
    for bug in spec["bug"]:
        if args.only is not None and bug["id"] not in args.only:
            continue
        started = time.monotonic()
        verdict, detail = run_bug(bug, paths, args.timeout)
        counts[verdict] = counts.get(verdict, 0) + 1
        print(f"{verdict:11} {bug['id']:40} {time.monotonic() - started:6.0f}s  {detail}", flush=True)
    print(" ".join(f"{k}={v}" for k, v in sorted(counts.items())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
