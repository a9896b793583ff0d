"""Malformed files and values the `golem` command reads: a one-line error and a non-zero exit,
never a traceback (ADR 0070).

The approvers file ($GOLEM_APPROVERS_FILE, or $GOLEM_APPROVERS), the retired seal keys
($GOLEM_SEAL_OLDER_KEYS), the `--app` module, the `--db` file and a stored conversation that
does not load. Each case marked "was" escaped as a traceback before.
"""

from __future__ import annotations

import contextlib
import sqlite3
import sys
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import golem as golem_package
from golem.cli.commands import build_app
from golem.durable.worker import load_registry
from golem.service.notify import Webhook
from tests.support.cli import seed

pytestmark = pytest.mark.version

N = 100_000
APP = "tests.support.agents:registry"


def golem(*args: str, env: dict[str, str] | None = None) -> Any:
    """The command's result; `uvicorn.run` never starts (a valid configuration just returns)."""
    with mock.patch("uvicorn.run"):
        return CliRunner().invoke(
            build_app(), list(args), env={"COLUMNS": "80", **(env or {})}, catch_exceptions=True
        )


def assert_one_line_error(result: Any, code: int) -> str:
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert result.exit_code == code
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines[-1].startswith("error: ")
    assert "Traceback" not in result.output
    return str(lines[-1])


APPROVERS = {
    "deep arrays": "[" * N + "]" * N,  # was a RecursionError traceback
    "deep objects": '{"t":' * N + "1" + "}" * N,  # was a RecursionError traceback
    "invalid UTF-8": b"\xff\xfe{}",
    "BOM": "\ufeff{}",
    "NUL": '{"t":"\x00"}',
    "10^5-digit number": '{"t":' + "9" * N + "}",
    "NaN": '{"t":NaN}',
    "empty": "",
    "identity not a string": '{"t":{"identity":5}}',
    "truncated": '{"t":{"identity":"al',
}


@pytest.mark.parametrize("content", list(APPROVERS.values()), ids=list(APPROVERS))
def test_a_malformed_approvers_file_is_one_line_and_exit_2(tmp_path: Path, content: Any) -> None:
    path = tmp_path / "approvers.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    db = f"sqlite:///{tmp_path / 'g.db'}"
    line = assert_one_line_error(
        golem("serve", "--app", APP, "--db", db, env={"GOLEM_APPROVERS_FILE": str(path)}), 2
    )
    assert "approvers" in line or "GOLEM_APPROVERS_FILE" in line or "approver" in line


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(b'{"t": "alice"}')
@example(b"[" * 5000)
@example(b'{"\\n": null}')  # a token with a line break: the error was two lines
@given(
    st.binary(max_size=40)
    | st.text(max_size=40).map(str.encode)
    | st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
        ),
        max_leaves=6,
    ).map(lambda v: repr(v).replace("'", '"').replace("None", "null").encode())
)
def test_any_approvers_text_serves_or_is_one_line(tmp_path_factory: Any, content: bytes) -> None:
    where = tmp_path_factory.mktemp("approvers")
    path = where / "approvers.json"
    path.write_bytes(content)
    db = f"sqlite:///{where / 'g.db'}"
    result = golem("serve", "--app", APP, "--db", db, env={"GOLEM_APPROVERS_FILE": str(path)})
    if result.exit_code != 0:
        assert_one_line_error(result, 2)


def test_an_app_module_with_a_syntax_error_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "golem_fuzz_broken_app.py").write_text("def (:\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        result = golem("worker", "--app", "golem_fuzz_broken_app:registry")  # was a traceback
    finally:
        sys.modules.pop("golem_fuzz_broken_app", None)
    assert "golem_fuzz_broken_app" in assert_one_line_error(result, 2)


@pytest.mark.parametrize("history", ["not json", "[" * N, '[{"role":"robot"}]', '{"a":1}'])
def test_show_of_a_run_whose_stored_conversation_does_not_load(
    tmp_path: Path, history: str
) -> None:
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    (run,) = seed(db, "twin")
    with contextlib.closing(sqlite3.connect(tmp_path / "cli.db")) as conn:
        conn.execute("UPDATE golem_histories SET history = ?", (history,))
        conn.commit()
    result = golem("show", run.id, "--db", db)  # was a HistoryError traceback
    line = assert_one_line_error(result, 1)
    assert run.id in line
    assert "conversation cannot be read" in line
    assert "Audit trail" in result.output  # the rest of the run is still shown


def test_show_of_a_run_with_a_corrupt_row_is_one_line(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    (run,) = seed(db, "twin")
    with contextlib.closing(sqlite3.connect(tmp_path / "cli.db")) as conn:
        conn.execute("UPDATE golem_runs SET status = 'bogus'")
        conn.commit()
    line = assert_one_line_error(golem("show", run.id, "--db", db), 1)
    assert "cannot be read" in line


@settings(deadline=None)
@example("https://:\xa0/x")  # was accepted; its shown_url then raised at every delivery
@example("slack+https://h:99999/x")
@example("ops=http://h:-1/")
@given(
    st.text(max_size=30)
    | st.builds(
        "{}://{}:{}/x".format,
        st.sampled_from(["http", "https", "slack+https", "ftp", ""]),
        st.text(max_size=8),
        st.text(max_size=6),
    )
)
def test_any_notify_spec_is_a_webhook_that_shows_its_url_or_a_value_error(spec: str) -> None:
    try:
        hook = Webhook.parse(spec)
    except ValueError:
        return
    assert hook.shown_url.startswith(("http://", "https://"))


@settings(deadline=None)
@example("..:x")  # was a TypeError from importlib (a relative import without a package)
@example(".agents:registry")
@example("a:b:c")
@example("\x00:x")
@given(
    st.builds(
        "{}{}{}".format,
        # module names that import nothing with side effects (never random ones: `antigravity`)
        st.sampled_from(["", ".", "..", ".x", "golem", "\x00", "a b", "nosuch_golem_mod"]),
        st.sampled_from([":", "", "::"]),
        # never a real attribute: calling a factory that wants arguments is the app's TypeError
        st.text(max_size=12).filter(lambda a: not hasattr(golem_package, a.split(".")[0])),
    )
)
def test_any_registry_spec_loads_or_is_a_named_refusal(spec: str) -> None:
    with contextlib.suppress(ImportError, AttributeError, ValueError):
        load_registry(spec)


ALICE = {"GOLEM_APPROVERS": '{"t": "alice"}'}
ONE_LINE = {  # what is run, given a temp folder: (arguments, environment, exit code, a word)
    "approvers-file-a-directory": lambda d: (["serve", "--app", APP],
        {"GOLEM_APPROVERS_FILE": str(d)}, 2, "GOLEM_APPROVERS_FILE"),
    "deeply-nested-retired-seal-keys": lambda d: (["serve", "--app", APP],  # was a traceback
        {**ALICE, "GOLEM_SEAL_KEY": "k" * 40, "GOLEM_SEAL_OLDER_KEYS": "[" * N + "]" * N}, 2,
        "GOLEM_SEAL_OLDER_KEYS"),
    "notify-url-with-a-bad-port": lambda d: (["serve", "--app", APP, "--notify",
        "https://hooks.test:port/x"], ALICE, 2, "webhook URL"),
    "relative-app-module": lambda d: (["worker", "--app", ".x:y"], {}, 2, "want module:attribute"),
    **{f"db-not-a-database-{n}": lambda d, c=c: (["pending", "--db", _write(d / "not.db", c)],
        {}, 1, "not a database")
       for n, c in enumerate([b"hello", b"\x00" * 100, bytes(range(256)) * 16])},
}  # fmt: skip


def _write(path: Path, content: bytes) -> str:
    path.write_bytes(content)
    return str(path)


@pytest.mark.parametrize("case", list(ONE_LINE.values()), ids=list(ONE_LINE))
def test_a_bad_value_or_file_is_one_line(tmp_path: Path, case: Any) -> None:
    args, env, code, word = case(tmp_path)
    assert word in assert_one_line_error(golem(*args, env=env), code)
