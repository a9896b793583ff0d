"""Store errors are classified by the database's error code, never its message text, which follows
the server's `lc_messages` (ADR 0072)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import shutil
import socket
import sqlite3
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from golem.durable.store import StoreBusy, StoreReadOnly
from golem.durable.store.sqlite import SQLiteStore
from golem.errors import StoreError
from tests.support.durable.runs import make_run

psycopg = pytest.importorskip("psycopg")
from psycopg import errors as pg_errors  # noqa: E402

from golem.durable.store._pg_setup import no_slot, store_error  # noqa: E402
from golem.durable.store.postgres import PostgresStore  # noqa: E402

# --------------------------------------------------------------------------- codes, not text


def _pg(sqlstate: str, message: str) -> Any:
    return pg_errors.lookup(sqlstate)(message)


@pytest.mark.parametrize(
    ("sqlstate", "message", "kind"),
    [
        ("25006", "kann UPDATE nicht in einer Read-only-Transaktion ausführen", StoreReadOnly),
        ("25006", "読み取り専用トランザクションでは UPDATE を実行できません", StoreReadOnly),
        ("53300", "zu viele Verbindungen von Rolle »golem«", StoreBusy),
        # English words of another failure do not make it one
        ("22012", "cannot execute UPDATE in a read-only transaction", StoreError),
        ("57014", "sorry, too many clients already", StoreError),
        ("55P03", "konnte Sperre nicht setzen", StoreError),
        ("40001", "could not serialize access due to concurrent update", StoreError),
    ],
)
def test_postgresql_errors_are_classified_by_sqlstate(
    sqlstate: str, message: str, kind: type[StoreError]
) -> None:
    got = store_error(_pg(sqlstate, message))
    assert type(got) is kind
    assert message in str(got)


@pytest.mark.parametrize(
    "message",
    [
        'connection to server at "db", port 5432 failed: FATAL:  sorry, too many clients already',
        'connection to server at "db" failed: FATAL:  too many connections for role "golem"',
        "FATAL:  remaining connection slots are reserved for roles with the SUPERUSER attribute",
        "connection failed: FATAL:  zu viele Verbindungen von Rolle »golem«",
        "connection failed: FATAL:  tut mir leid, schon zu viele Verbindungen",
        "connection failed: FATAL:  trop de connexions pour la base de données « golem »",
        'connection failed: ВАЖНО:  слишком много подключений для роли "golem"',
        'connection failed: FATAL:  ロール"golem"からの接続が多すぎます',
        "connection failed: 致命错误:  对不起, 已经有太多的客户",
        "connection failed: FATAL:  les emplacements de connexions restants sont réservés pour "
        "les connexions\nsuperutilisateur non relatif à la réplication",
    ],
)
def test_a_startup_refusal_for_want_of_a_slot_is_recognised_in_any_shipped_language(
    message: str,
) -> None:
    assert no_slot(psycopg.OperationalError(message))


def test_a_code_when_there_is_one_wins_over_the_text() -> None:
    assert no_slot(_pg("53300", "Keine Verbindung frei"))
    assert not no_slot(_pg("28P01", "sorry, too many clients already"))
    assert not no_slot(
        psycopg.OperationalError('FATAL:  password authentication failed for user "x"')
    )


def _sqlite_error(code: int, message: str) -> sqlite3.OperationalError:
    exc = sqlite3.OperationalError(message)
    exc.sqlite_errorcode = code  # type: ignore[attr-defined]
    return exc


@pytest.mark.parametrize(
    ("code", "message", "kind"),
    [
        (sqlite3.SQLITE_READONLY, "attempt to write a readonly database", StoreReadOnly),
        (264, "Datenbank ist schreibgeschützt", StoreReadOnly),  # SQLITE_READONLY_RECOVERY
        (1032, "attempt to write a readonly database", StoreError),  # DBMOVED: for good
        (sqlite3.SQLITE_BUSY, "attempt to write a readonly database", StoreError),
        (sqlite3.SQLITE_LOCKED, "database is locked", StoreError),
    ],
)
def test_sqlite_errors_are_classified_by_result_code(
    tmp_path: Path, code: int, message: str, kind: type[StoreError]
) -> None:
    from golem.durable.store.sqlite import _store_error as sqlite_store_error

    got = sqlite_store_error(tmp_path / "x.db", _sqlite_error(code, message))
    assert type(got) is kind


async def test_a_sqlite_database_that_takes_no_writes_raises_store_read_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real SQLITE_READONLY (the writer connection set `query_only`): nothing is saved."""
    connect = SQLiteStore._connect

    def query_only(self: SQLiteStore, slot: Any) -> Any:
        conn = connect(self, slot)
        conn._conn.execute("PRAGMA query_only = ON")
        return conn

    store = await SQLiteStore.open(tmp_path / "ro.db")
    try:
        monkeypatch.setattr(SQLiteStore, "_connect", query_only)
        fresh = SQLiteStore(tmp_path / "ro.db")
        try:
            with pytest.raises(StoreReadOnly, match="read-only"):
                await fresh.save_pending(make_run())
            assert await fresh.list_runs() == []
        finally:
            await fresh.close()
    finally:
        await store.close()


# --------------------------------------------------------------------------- a German server


def _bindir() -> Path | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name))
    return found[-1] if found else None


def _free_port() -> int:
    with contextlib.closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_server_user(args: list[str], env: dict[str, str], log: Path) -> None:
    """Run a PostgreSQL program (as the `postgres` user when we are root: PostgreSQL
    refuses to run as root) with `env` added, its output to `log`."""
    if os.geteuid() == 0:
        line = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        line += f" {shlex.join(args)} >>{shlex.quote(str(log))} 2>&1"
        subprocess.run(["su", "postgres", "-s", "/bin/bash", "-c", line], check=True)
        return
    with log.open("ab") as out:
        subprocess.run(args, check=True, env={**os.environ, **env}, stdout=out, stderr=out)


@pytest.fixture(scope="module")
def german_server() -> Iterator[str]:
    """A throwaway PostgreSQL cluster whose messages are German (`lc_messages`), with the
    locale built into a private directory (`LOCPATH`): skipped where PostgreSQL, its German
    message catalog, `localedef` or the locale's sources are missing."""
    bindir = _bindir()
    if bindir is None:
        pytest.skip("PostgreSQL is not installed")
    major = bindir.parent.name
    if not Path(f"/usr/share/locale/de/LC_MESSAGES/postgres-{major}.mo").exists():
        pytest.skip("PostgreSQL's German message catalog is not installed")
    if shutil.which("localedef") is None or not Path("/usr/share/i18n/locales/de_DE").exists():
        pytest.skip("cannot build the de_DE.UTF-8 locale here")
    root = Path(f"/tmp/golem-pgde-{uuid.uuid4().hex[:8]}")
    root.mkdir()
    try:
        locales = root / "locales"
        locales.mkdir()
        built = subprocess.run(
            ["localedef", "-i", "de_DE", "-f", "UTF-8", str(locales / "de_DE.UTF-8")],
            capture_output=True,
        )  # exit status 1: warnings only, the locale is written
        if built.returncode > 1 or not (locales / "de_DE.UTF-8").exists():
            pytest.skip(f"localedef failed: {built.stderr.decode(errors='replace')[-300:]}")
        if os.geteuid() == 0:
            subprocess.run(["chmod", "-R", "a+rwX", str(root)], check=True)
        port = _free_port()
        data, log = root / "data", root / "pg.log"
        env = {"LOCPATH": str(locales)}
        initdb = [str(bindir / "initdb"), "-D", str(data), "-U", "golem", "--auth=trust"]
        _as_server_user([*initdb, "-E", "UTF8", "--lc-messages=de_DE.UTF-8"], env, log)
        options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off"
        pg_ctl = [str(bindir / "pg_ctl"), "-D", str(data)]
        _as_server_user(
            [*pg_ctl, "-l", str(root / "server.log"), "-w", "-o", options, "start"], env, log
        )
        try:
            yield f"postgresql://golem@127.0.0.1:{port}/postgres"
        finally:
            _as_server_user([*pg_ctl, "-m", "immediate", "stop"], env, log)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.postgres
def test_a_server_answering_in_german_is_classified_the_same(german_server: str) -> None:
    dsn = german_server
    with psycopg.connect(dsn, autocommit=True) as conn:
        try:
            conn.execute("SELECT 1 / 0")
        except pg_errors.DivisionByZero as exc:
            if "Division" not in str(exc):
                pytest.skip(f"the server did not answer in German: {exc}")
        conn.execute("DROP ROLE IF EXISTS golem_full")
        conn.execute("CREATE ROLE golem_full LOGIN CONNECTION LIMIT 0")
        conn.execute("DROP DATABASE IF EXISTS golem_ro")
        conn.execute("CREATE DATABASE golem_ro")

    async def check() -> None:
        # a refused connection for want of a slot (SQLSTATE 53300, text only: German)
        with pytest.raises(StoreBusy, match="zu viele Verbindungen"):
            await PostgresStore.open(dsn.replace("golem@", "golem_full@"))
        # a read-only database refuses a write (SQLSTATE 25006, German text)
        ro = dsn.rsplit("/", 1)[0] + "/golem_ro"
        store = await PostgresStore.open(ro)
        try:
            with psycopg.connect(ro, autocommit=True) as conn:
                conn.execute("ALTER DATABASE golem_ro SET default_transaction_read_only = on")
            fresh = PostgresStore(ro)
            try:
                with pytest.raises(StoreReadOnly, match="the database is read-only"):
                    await fresh.save_pending(make_run())
                assert await fresh.list_runs() == []
            finally:
                await fresh.close()
        finally:
            await store.close()

    asyncio.run(check())


_STATES = ["25006", "53300", "57014", "55P03", "40001", "40P01", "57P01", "57P05", "25P03", "22012"]


@settings(deadline=None)
@given(
    state=st.sampled_from(_STATES),
    message=st.text(max_size=80)
    | st.sampled_from(
        ["sorry, too many clients already", "cannot execute INSERT in a read-only transaction"]
    ),
)
def test_the_code_alone_decides_whatever_the_message(state: str, message: str) -> None:
    """For any message, an error with a SQLSTATE is classified by that code alone."""
    exc = _pg(state, message)
    assert no_slot(exc) is (state == "53300")
    got = store_error(exc)
    expected = {"25006": StoreReadOnly, "53300": StoreBusy}.get(state, StoreError)
    assert type(got) is expected
