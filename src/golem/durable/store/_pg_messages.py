"""The server's refusals of a new connection for want of a slot, in every language
PostgreSQL ships them in (libpq keeps no SQLSTATE for them; ADR 0072)."""

from __future__ import annotations

import re

__all__ = ["no_slot_message"]

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


def no_slot_message(message: str) -> bool:
    """Whether a connection failure's message is the server refusing it for want of a
    connection slot, in any language PostgreSQL ships."""
    return _NO_SLOT.search(" ".join(message.split())) is not None
