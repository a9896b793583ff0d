"""Audit-log positions as callers see them: sealed cursors, entry references (ADR 0080)."""

from __future__ import annotations

import base64
import functools
import secrets

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, AESSIV
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from starlette.requests import Request

from golem.durable.store import AuditEntry
from golem.service.auth import Credential
from golem.service.errors import ApiError

# Internals of `golem.service.create_app`; nothing here is public API.
__all__: list[str] = []

MAX_CURSOR = 2**63 - 1  # a signed 64-bit integer


def start_cursor(request: Request, *, full_view: bool = True) -> int | None:
    """Where a stream starts: `Last-Event-ID`, else `?cursor=` (None: the newest change);
    both checked (`_parse_cursor`). Without `full_view` an audit ID may only be 0 (ADR 0077)."""
    secret: bytes = request.app.state.golem.auth.secret
    header = _parse_cursor(request.headers.get("last-event-id"), secret, full_view)
    query = _parse_cursor(request.query_params.get("cursor"), secret, full_view)
    return header if header is not None else query


_SEALED = "s"  # a sealed cursor's first character
_ENTRY = "e"  # an entry reference's first character
_NONCE = 12  # bytes of a sealed cursor's AES-GCM nonce


@functools.lru_cache(maxsize=8)
def _ciphers(secret: bytes) -> tuple[AESGCM, AESSIV]:
    """AES-256-GCM (cursors) and AES-256-SIV (entry references), keys by HKDF from `secret`."""

    def key(length: int, purpose: bytes) -> bytes:
        return HKDF(hashes.SHA256(), length, salt=None, info=purpose).derive(secret)

    return AESGCM(key(32, b"golem.service.cursor")), AESSIV(key(64, b"golem.service.entry"))


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii")


def _unb64(text: str, size: int) -> bytes | None:
    """The `size` bytes `text` spells in base64url (None: not exactly that one spelling)."""
    if len(text) != size * 4 // 3 or not text.isascii():
        return None
    try:
        raw = base64.urlsafe_b64decode(text)
    except ValueError:
        return None
    return raw if _b64(raw) == text else None


def seal_cursor(secret: bytes, cursor: int) -> str:
    """`cursor` sealed with AES-GCM under a random nonce (two sealings differ)."""
    nonce = secrets.token_bytes(_NONCE)
    sealed = _ciphers(secret)[0].encrypt(nonce, cursor.to_bytes(8, "big"), _SEALED.encode())
    return _SEALED + _b64(nonce + sealed)


def _seal_entry(secret: bytes, entry_id: int) -> str:
    """An entry's reference (AES-SIV: the same for the same entry, counting nothing)."""
    return _ENTRY + _b64(_ciphers(secret)[1].encrypt(entry_id.to_bytes(8, "big"), [b"entry"]))


def _unseal(secret: bytes, text: str) -> int | None:
    """The audit ID in a sealed cursor or an entry reference (None: not one of this service)."""
    cursor = text.startswith(_SEALED)
    raw = _unb64(text[1:], _NONCE + 8 + 16 if cursor else 16 + 8)
    if raw is None:
        return None
    gcm, siv = _ciphers(secret)
    try:
        if cursor:
            plain = gcm.decrypt(raw[:_NONCE], raw[_NONCE:], _SEALED.encode())
        else:
            plain = siv.decrypt(raw, [b"entry"])
    except InvalidTag:
        return None
    value = int.from_bytes(plain, "big")
    return value if value <= MAX_CURSOR else None


def read_position(secret: bytes, text: str, *, full_view: bool) -> int | None:
    """The audit ID named by a sealed cursor or an entry reference of this service, or
    (only with `full_view`) by a decimal audit ID; None for anything else."""
    if text.startswith((_SEALED, _ENTRY)):
        return _unseal(secret, text)
    if full_view and 0 < len(text) <= 19 and text.isascii() and text.isdigit():
        value = int(text)
        return value if value <= MAX_CURSOR else None
    return None


def _parse_cursor(text: str | None, secret: bytes, full_view: bool = True) -> int | None:
    """A start cursor (None: newest); 422 unless an integer in 0 … 2**63-1 (only 0
    without `full_view`), a sealed cursor or an entry reference of this service."""
    if text is None or text == "":
        return None
    if text.startswith((_SEALED, _ENTRY)):
        value = read_position(secret, text, full_view=full_view)
        if value is None:
            raise ApiError(
                422, "invalid_request", "the cursor is not one this service sent (or it changed)"
            )
        return value
    # an integer, possibly written `5.0` (JSON Schema's integers include it)
    digits = text.removesuffix(".0") if text.endswith(".0") else text
    if len(digits) > 20 or not digits.isascii() or not digits.lstrip("-").isdigit():
        raise ApiError(422, "invalid_request", "the cursor must be an integer")
    value = int(digits)
    if not 0 <= value <= MAX_CURSOR:
        raise ApiError(422, "invalid_request", f"the cursor must be between 0 and {MAX_CURSOR}")
    if value and not full_view:
        raise ApiError(
            422,
            "invalid_request",
            "resume from the sealed cursor (id:) this stream sent; an audit ID cursor other "
            "than 0 needs an approver who sees every agent",
        )
    return value


def entry_id(e: AuditEntry, secret: bytes | None) -> int | str:
    """The entry's audit ID (`secret` None), else its reference sealed under `secret`."""
    if secret is None:
        return e.id
    return _seal_entry(secret, e.id)


def shown_to(cred: Credential, secret: bytes) -> bytes | None:
    """`entry_id`'s `secret` for `cred`: None when it sees every agent."""
    return None if cred.approver.agents is None else secret
