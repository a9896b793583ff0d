"""What the sdist and the wheel hold (issue 29), and `golem --version`.

hatchling used to match .gitignore's patterns against the checkout's own path as well, so a
checkout under /tmp/ or build/ shipped .hypothesis/, *.db files and build/: the build is
done here from a copy under `.../build/...`, with that kind of debris beside the sources.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import golem

ROOT = Path(__file__).resolve().parents[1]
SDIST_TOP = {
    "src",
    "tests",
    "docs",
    "examples",
    "scripts",
    "README.md",
    "CONTRIBUTING.md",
    "pyproject.toml",
    ".gitignore",
    "PKG-INFO",
}
DEBRIS = [
    ".hypothesis/examples/0a1b",
    "golem.db",
    "golem.db-wal",
    "build/lib/golem/agent.py",
    "dist/old.tar.gz",
    ".venv/bin/python",
    ".mypy_cache/3.11/golem.json",
    "src/golem/stray.db",
    "src/golem/__pycache__/agent.cpython-311.pyc",
    "tests/__pycache__/conftest.cpython-311.pyc",
    "tests/.hypothesis/examples/0a1b",
]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], list[str]]:
    """The file lists of the sdist and the wheel built from a copy of the checkout."""
    pytest.importorskip("hatchling")
    base = tmp_path_factory.mktemp("pkg")
    checkout = base / "build" / "golem"  # a path .gitignore's `build/` matches
    checkout.mkdir(parents=True)
    skip = shutil.ignore_patterns("__pycache__", ".hypothesis", "*.db", "*.db-*")
    for entry in sorted(SDIST_TOP - {"PKG-INFO"}):
        source = ROOT / entry
        if source.is_dir():
            shutil.copytree(source, checkout / entry, ignore=skip)
        else:
            shutil.copy2(source, checkout / entry)
    for debris in DEBRIS:
        (checkout / debris).parent.mkdir(parents=True, exist_ok=True)
        (checkout / debris).write_text("debris\n", encoding="utf-8")
    out = base / "out"
    subprocess.run(
        [sys.executable, "-m", "hatchling", "build", "-d", str(out)],
        cwd=checkout,
        check=True,
        capture_output=True,
        timeout=300,
    )
    (sdist,) = out.glob("*.tar.gz")
    (wheel,) = out.glob("*.whl")
    with tarfile.open(sdist) as tar:
        sdist_names = [name.split("/", 1)[1] for name in tar.getnames() if "/" in name]
    with zipfile.ZipFile(wheel) as whl:
        wheel_names = whl.namelist()
    return sdist_names, wheel_names


def test_the_sdist_holds_the_sources_tests_and_docs_and_no_debris(
    built: tuple[list[str], list[str]],
) -> None:
    names, _ = built
    assert {name.split("/", 1)[0] for name in names} == SDIST_TOP
    for expected in (
        "src/golem/__init__.py",
        "src/golem/py.typed",
        "src/golem/service/templates/base.html",
        "tests/conftest.py",
        "docs/guides/mcp.md",
        "examples/quickstart.py",
        "scripts/pg_test_cluster.sh",
    ):
        assert expected in names
    debris = [n for n in names if n.endswith((".pyc", ".db", ".db-wal")) or ".hypothesis" in n]
    assert debris == []


def test_the_wheel_holds_the_package_and_no_debris(built: tuple[list[str], list[str]]) -> None:
    _, names = built
    assert {name.split("/", 1)[0] for name in names} == {
        "golem",
        f"golem_agents-{golem.__version__}.dist-info",
    }
    assert "golem/py.typed" in names
    assert "golem/service/static/inbox.js" in names
    assert [n for n in names if n.endswith((".pyc", ".db"))] == []


def test_golem_version_prints_the_package_version() -> None:
    pytest.importorskip("typer")
    from typer.testing import CliRunner

    from golem.cli.commands import build_app

    result = CliRunner().invoke(build_app(), ["--version"])
    assert (result.exit_code, result.output) == (0, f"golem {golem.__version__}\n")
