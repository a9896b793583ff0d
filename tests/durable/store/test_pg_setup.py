"""`_pg_setup`: PostgreSQL errors are classified by their SQLSTATE, never their message text,
which follows the server's `lc_messages` (ADR 0072); store options are taken out of a URL."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from golem.durable.store import StoreBusy, StoreReadOnly
from golem.errors import StoreError

psycopg = pytest.importorskip("psycopg")
from psycopg import errors as pg_errors  # noqa: E402

from golem.durable.store._pg_setup import no_slot, split_url, store_error  # noqa: E402


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
        'FATAL:  password authentication failed for user "x"',
    ],
)
def test_a_startup_refusal_for_want_of_a_slot_is_recognised_in_any_shipped_language(
    message: str,
) -> None:
    """A refusal before the session starts has no SQLSTATE: its text, in any language, decides."""
    assert no_slot(psycopg.OperationalError(message)) is ("password" not in message)


_STATES = [
    "28P01",
    "25006",
    "53300",
    "57014",
    "55P03",
    "40001",
    "40P01",
    "57P01",
    "57P05",
    "25P03",
    "22012",
]


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


@pytest.mark.parametrize(
    ("url", "dsn", "options"),
    [
        ("postgresql://u@h/db", "postgresql://u@h/db", {}),
        ("postgresql://u@h/db?sslmode=require", "postgresql://u@h/db?sslmode=require", {}),
        (
            "postgresql://u@h/db?pool_size=8&sslmode=require&command_timeout=2.5&schema=golem",
            "postgresql://u@h/db?sslmode=require",
            {"pool_size": 8, "command_timeout": 2.5, "schema": "golem"},
        ),
        ("postgres://h/db?command_timeout=none", "postgres://h/db", {"command_timeout": None}),
        ("postgres://h/db?command_timeout=OFF", "postgres://h/db", {"command_timeout": None}),
        ("postgres://h/db?sche%6da=a_b", "postgres://h/db", {"schema": "a_b"}),
        (
            "postgresql://u:p%26w@h/db?application_name=a%3Db&pool_size=2",
            "postgresql://u:p%26w@h/db?application_name=a%3Db",
            {"pool_size": 2},
        ),
    ],
)
def test_split_url_takes_the_store_options_out(url: str, dsn: str, options: dict[str, Any]) -> None:
    assert split_url(url) == (dsn, options)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("postgresql://h/db?pool_size=many", "pool_size must be a number, got 'many'"),
        ("postgresql://h/db?command_timeout=", "command_timeout must be a number"),
        ("postgresql://h/db?pool_size=1&pool_size=2", "pool_size is given twice"),
    ],
)
def test_split_url_refuses_bad_options(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        split_url(url)
