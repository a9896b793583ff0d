"""Shared test setup: no network beyond loopback (tests marked `live` excepted), Hypothesis
profiles (`ci` by default, `deep` with `GOLEM_HYPOTHESIS_PROFILE=deep`, which also raises the
budgets in `KNOBS`), a PostgreSQL database per xdist worker, the heaviest files first, uvloop
with `GOLEM_TEST_LOOP=uvloop`, and the `exporter`, `store` and `go` fixtures.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import os
import shutil
import socket
import subprocess
import urllib.parse
import uuid
import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from golem.durable.store import Store
from golem.durable.store.sqlite import SQLiteStore

settings.register_profile(
    "ci",
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.register_profile("deep", settings.get_profile("ci"), max_examples=400)
settings.load_profile(os.environ.get("GOLEM_HYPOTHESIS_PROFILE", "ci"))

KNOBS: dict[str, dict[str, str]] = {
    "ci": {
        "GOLEM_FUZZ_EXAMPLES": "4",  # Schemathesis, per API operation
        "GOLEM_CANCEL_EXAMPLES": "25",
        "GOLEM_GO_EXAMPLES": "25",
        "GOLEM_SUBRUN_EXAMPLES": "25",
        "GOLEM_BATCH_EXAMPLES": "25",
        "GOLEM_CRASH_SEEDS": "101",  # SIGKILL rounds (tests/durable/store/test_workers_killed_anywhere.py)
        "GOLEM_CRASH_ROUNDS": "3",
    },
    "deep": {
        # more fails the stateful fuzz with FlakyStrategyDefinition (its draws read the store)
        "GOLEM_FUZZ_EXAMPLES": "20",
        "GOLEM_CANCEL_EXAMPLES": "400",
        "GOLEM_GO_EXAMPLES": "200",
        "GOLEM_SUBRUN_EXAMPLES": "400",
        "GOLEM_BATCH_EXAMPLES": "400",
        "GOLEM_CRASH_SEEDS": "101,202",
        "GOLEM_CRASH_ROUNDS": "3",
    },
}
"""Per profile, the defaults of the variables the slower suites read their budgets from."""

BROWSER_TIMEOUT = 300
"""Seconds a browser test may take (the default per-test limit is `timeout` in pyproject.toml)."""

_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex


def _is_loopback(address: Any) -> bool:
    if isinstance(address, str | bytes):  # AF_UNIX path
        return True
    if not isinstance(address, tuple) or not address:
        return False
    host = address[0]
    if isinstance(host, bytes):
        host = host.decode()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def _guarded(real: Any) -> Any:
    def connect(self: socket.socket, address: Any) -> Any:
        if not _is_loopback(address):
            raise RuntimeError(
                f"tests must not reach the network: connect to {address!r} refused "
                "(use golem.testing.ScriptedModel, or httpx.MockTransport for provider tests)"
            )
        return real(self, address)

    return connect


@pytest.fixture(autouse=True)
def _no_network(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Refuse socket connections to anything but loopback (a `live` test is exempt)."""
    if request.node.get_closest_marker("live") is not None:
        return
    monkeypatch.setattr(socket.socket, "connect", _guarded(_real_connect))
    monkeypatch.setattr(socket.socket, "connect_ex", _guarded(_real_connect_ex))


def pytest_configure(config: pytest.Config) -> None:
    """Set the profile's budgets, give an xdist worker its own database, and run every async
    test on uvloop when `GOLEM_TEST_LOOP=uvloop` (see the module doc)."""
    profile = config.getoption("--hypothesis-profile", None) or os.environ.get(
        "GOLEM_HYPOTHESIS_PROFILE", "ci"
    )
    for name, value in KNOBS.get(profile, KNOBS["ci"]).items():
        os.environ.setdefault(name, value)
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker and os.environ.get("GOLEM_TEST_POSTGRES_DSN"):
        _worker_database(config, worker)
    loop = os.environ.get("GOLEM_TEST_LOOP", "asyncio")
    if loop == "uvloop":
        import uvloop

        with warnings.catch_warnings():  # policies are deprecated from Python 3.14 on
            warnings.simplefilter("ignore", DeprecationWarning)
            asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    elif loop != "asyncio":
        raise pytest.UsageError(f"GOLEM_TEST_LOOP must be asyncio or uvloop, got {loop!r}")


def _worker_database(config: pytest.Config, worker: str) -> None:
    """Point `GOLEM_TEST_POSTGRES_DSN` at a database of this worker's in the same cluster,
    dropped when the worker ends (an unreachable cluster is left as it is)."""
    import psycopg
    from psycopg.conninfo import make_conninfo

    dsn = os.environ["GOLEM_TEST_POSTGRES_DSN"]
    name = f"golem_test_{worker}_{uuid.uuid4().hex[:8]}"
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.Error:
        return
    parts = urllib.parse.urlsplit(dsn)
    if parts.scheme in ("postgres", "postgresql"):  # a URL stays a URL (tests append options)
        ours = urllib.parse.urlunsplit(parts._replace(path=f"/{name}"))
    else:
        ours = make_conninfo(dsn, dbname=name)
    os.environ["GOLEM_TEST_POSTGRES_DSN"] = ours

    def drop() -> None:
        os.environ["GOLEM_TEST_POSTGRES_DSN"] = dsn
        with (
            contextlib.suppress(psycopg.Error),
            psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn,
        ):
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    config.add_cleanup(drop)


HEAVY_FIRST = (
    "tests/integrations/test_mcp.py",
    "tests/service/test_api_fuzz.py",
    "tests/test_examples.py",
    "tests/test_docs.py",
    "tests/durable/store/test_workers_killed_anywhere.py",
    "tests/service/browser/",
    "tests/durable/store/test_postgres_chaos.py",
)
"""The slowest files (subprocesses, servers, browsers), run first so that under xdist no worker
is left alone with one of them at the end (`--dist loadscope` hands out files in this order)."""


def _heavy_rank(item: pytest.Item) -> int:
    for rank, prefix in enumerate(HEAVY_FIRST):
        if item.nodeid.startswith(prefix):
            return rank
    return len(HEAVY_FIRST)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The heaviest files first (`HEAVY_FIRST`); browser tests get `BROWSER_TIMEOUT` unless they
    set their own `timeout` mark."""
    items.sort(key=_heavy_rank)
    for item in items:
        if item.get_closest_marker("browser") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(BROWSER_TIMEOUT))


@pytest.fixture
def exporter() -> Any:
    """The spans of `golem.integrations.otel.instrument()` for one test (needs opentelemetry-sdk)."""
    pytest.importorskip("opentelemetry.sdk")
    from tests.otel_support import instrumented

    with instrumented() as exp:
        yield exp


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    """A fresh SQLite store in the test's temporary directory."""
    s = await SQLiteStore.open(tmp_path / "golem.db")
    try:
        yield s
    finally:
        await s.close()


GO_SOURCE = Path(__file__).parent / "fixtures" / "gohistory" / "main.go"


@pytest.fixture(scope="module")
def go(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A function from history documents to Go's answers (built once per module)."""
    toolchain = shutil.which("go")
    if toolchain is None:
        pytest.skip("no Go toolchain on PATH (install golang-go to run the Go interop tests)")
    where = tmp_path_factory.mktemp("gohistory")
    binary = where / "gohistory"
    env = {**os.environ, "GOCACHE": str(where / "cache"), "GOFLAGS": "", "GO111MODULE": "off"}
    built = subprocess.run(
        [toolchain, "build", "-o", str(binary), str(GO_SOURCE)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    if built.returncode != 0:
        pytest.skip(f"the Go stand-in did not build: {built.stderr[-500:]}")

    def run(*documents: str) -> list[dict[str, Any]]:
        done = subprocess.run(
            [str(binary)],
            input=json.dumps(documents),
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        answers: list[dict[str, Any]] = json.loads(done.stdout)
        return answers

    return run
