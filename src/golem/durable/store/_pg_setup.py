"""What a PostgreSQL connection is set up with, and how the server's refusals are named:
session timeouts pinned on connect (ADR 0068), no-slot (in every language PostgreSQL ships it)
and read-only errors (ADR 0072), and the store's own options in a URL."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import unquote

from golem.durable.store.records import StoreBusy, StoreReadOnly
from golem.errors import StoreError

try:
    import psycopg
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "PostgresStore needs psycopg 3 and greenlet: pip install 'golem-agents[postgres]'"
    ) from exc


_TEMPLATES = (
    # English; "%s" stands for a name
    "sorry, too many clients already",
    'too many connections for role "%s"',
    'too many connections for database "%s"',
    "remaining connection slots are reserved",  # every wording since 9.x starts so
    # translations (whitespace collapsed)
    '"%s" 데이터베이스 최대 접속수를 초과했습니다',
    '"%s" 롤의 최대 동시 접속수를 초과했습니다',
    "demasiadas conexiones para el rol «%s»",
    "demasiadas conexiones para la base de datos «%s»",
    "die verbleibenden Verbindungen sind für Superuser auf Nicht-Replikationsverbindungen reserviert",
    "désolé, trop de clients sont déjà connectés",
    'för många uppkopplingar för roll "%s"',
    'för många uppkopplingar till databasen "%s"',
    "i rimanenti slot di connessione sono riservati a connessioni di superutenti non di replica",
    "las conexiones restantes están reservadas a superusuarios y no de replicación",
    "ledsen, för många klienter",
    "les emplacements de connexions restants sont réservés pour les connexions superutilisateur non relatif à la réplication",
    "lo siento, ya tenemos demasiados clientes",
    "resterande anslutningsslottar är reserverade för superuser-anslutningar utan replikering",
    "spiacente, troppi client già connessi",
    "trop de connexions pour la base de données « %s »",
    "trop de connexions pour le rôle « %s »",
    'troppe connessioni al database "%s"',
    'troppe connessioni per il ruolo "%s"',
    "tut mir leid, schon zu viele Verbindungen",
    "zu viele Verbindungen für Datenbank »%s«",
    "zu viele Verbindungen von Rolle »%s«",
    "вибачте, вже забагато клієнтів",
    'занадто багато підключень для ролі "%s"',
    'занадто багато підключень до бази даних "%s"',
    "извините, уже слишком много клиентов",
    "оставшиеся слоты подключений зарезервированы для подключений суперпользователя (не для репликации)",
    'слишком много подключений для роли "%s"',
    'слишком много подключений к БД "%s"',
    "слоти підключень, які залишились, зарезервовані для підключень суперкористувача (не для реплікації)",
    'მეტისმეტად ბევრი კავშირი როლისთვის "%s"',
    "უკაცრავად, უკვე მეტისმეტად ბევრი კლიენტია",
    'ძალიან ბევრი კავშირი ბაზისთვის "%s"',
    'データベース"%s"への接続が多すぎます',
    'ロール"%s"からの接続が多すぎます',
    '到数据库 "%s"的连接太多了',
    "对不起, 已经有太多的客户",
    "已保留的连接位置为执行非复制请求的超级用户预留",
    "残りの接続スロットはレプリケーションユーザーではないスーパーユーザー用に予約されています",
    "現在クライアント数が多すぎます",
    '由角色"%s"发起的连接太多了',
    "남은 연결 슬롯은 non-replication 슈퍼유저 연결용으로 남겨 놓았음",
    "최대 동시 접속자 수를 초과했습니다.",
)


def _pattern(template: str) -> str:
    return ".*?".join(re.escape(part) for part in template.split("%s"))


_NO_SLOT = re.compile("|".join(_pattern(t) for t in _TEMPLATES))


SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")

CONNECT_TIMEOUT = 10

IDLE_FLOOR = 10_000

IDLE_SESSION_TIMEOUT = "57P05"

LISTENER_IDLE = 3


def _pin_timeout(name: str, floor_ms: int) -> str:
    """A select-list item that sets the session's `name` to its current value, raised to
    `floor_ms` when it is positive and shorter."""
    current = f"current_setting('{name}')"
    return (
        f", set_config('{name}', CASE WHEN {current}::interval > interval '0' "
        f"AND {current}::interval < interval '{floor_ms} ms' THEN '{floor_ms}ms' "
        f"ELSE {current} END, false)"
    )


SESSION_SETUP_13 = (
    "SELECT extract(epoch FROM clock_timestamp())::text"
    + _pin_timeout("idle_in_transaction_session_timeout", IDLE_FLOOR)
).encode()


def session_setup(idle_session_floor_ms: int) -> bytes:
    """A new connection's first query: the server's clock; whether the server's
    `idle_session_timeout` is positive and below `IDLE_FLOOR` (read before it is pinned:
    the materialized CTE is evaluated first); and both idle timeouts pinned."""
    current = "current_setting('idle_session_timeout')::interval"
    return (
        f"WITH s AS MATERIALIZED (SELECT {current} AS idle) "
        "SELECT extract(epoch FROM clock_timestamp())::text, "
        f"s.idle > interval '0' AND s.idle < interval '{IDLE_FLOOR} ms'"
        + _pin_timeout("idle_in_transaction_session_timeout", IDLE_FLOOR)
        + _pin_timeout("idle_session_timeout", idle_session_floor_ms)
        + " FROM s"
    ).encode()


_TOO_MANY_CONNECTIONS = "53300"

_READ_ONLY = "25006"


def no_slot(exc: psycopg.Error) -> bool:
    """Whether the server refused a new connection for want of a slot: by SQLSTATE when
    the error carries one; else (libpq keeps the code of a connection that failed during
    startup to itself) by the message, in any language PostgreSQL ships (ADR 0072)."""
    if exc.sqlstate is not None:
        return exc.sqlstate == _TOO_MANY_CONNECTIONS
    return _NO_SLOT.search(" ".join(str(exc).split())) is not None


def store_error(exc: psycopg.Error) -> StoreError:
    """The store's error for a server failure, by SQLSTATE."""
    state = exc.sqlstate
    if state == _READ_ONLY:
        return StoreReadOnly(f"postgresql: the database is read-only: {exc}")
    if state == _TOO_MANY_CONNECTIONS:
        return StoreBusy(f"postgresql: no free connection slot: {exc}")
    return StoreError(f"postgresql: {exc}")


_URL_OPTIONS = ("pool_size", "command_timeout", "schema")


def split_url(url: str) -> tuple[str, dict[str, Any]]:
    """The libpq URL and the store's own options (`pool_size`, `command_timeout`, `schema`)."""
    base, sep, query = url.partition("?")
    if not sep:
        return url, {}
    kept: list[str] = []
    options: dict[str, Any] = {}
    for item in query.split("&"):
        key, _, raw = item.partition("=")
        name = unquote(key)
        if name not in _URL_OPTIONS:
            kept.append(item)
            continue
        if name in options:
            raise ValueError(f"store URL: {name} is given twice")
        value = unquote(raw)
        try:
            if name == "pool_size":
                options[name] = int(value)
            elif name == "command_timeout":
                none = value.strip().lower() in ("none", "off")
                options[name] = None if none else float(value)
            else:
                options[name] = value
        except ValueError:
            raise ValueError(f"store URL: {name} must be a number, got {value!r}") from None
    return base + ("?" + "&".join(kept) if kept else ""), options


def redact(dsn: str) -> str:
    """The DSN without its password (for messages and reprs)."""
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", re.sub(r"password=\S+", "password=***", dsn))
