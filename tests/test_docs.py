"""Every ```python block of the README and the docs runs offline, with warnings as errors.

A block that cannot run offline (it needs an API key, a server or surrounding code) starts
with a `# fragment: <why>` comment and is skipped.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def blocks() -> list[tuple[str, str]]:
    found = []
    for path in DOCS:
        text = path.read_text()
        for m in BLOCK.finditer(text):
            code = m.group(1)
            if code.lstrip().startswith("# fragment"):
                continue
            line = text[: m.start()].count("\n") + 1
            found.append((f"{path.relative_to(ROOT)}:{line}", code))
    return found


BLOCKS = blocks()


def test_the_docs_have_runnable_blocks() -> None:
    assert len(BLOCKS) >= 10


@pytest.mark.parametrize(("where", "code"), BLOCKS, ids=[w for w, _ in BLOCKS])
def test_block_runs(where: str, code: str, tmp_path: Path) -> None:
    script = tmp_path / "block.py"
    script.write_text(code)
    proc = subprocess.run(
        [sys.executable, "-W", "error", str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert proc.returncode == 0, f"{where}\n{proc.stdout}\n{proc.stderr}"
