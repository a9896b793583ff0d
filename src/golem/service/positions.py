"""Positions in the audit log as callers are shown them: sealed cursors, entry references
and the cursors a stream or a page may start from."""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import secrets

from starlette.requests import Request

from golem.durable.store import AuditEntry
from golem.service.auth import Credential
from golem.service.errors import ApiError

# Internals of `golem.service.create_app`; nothing here is public API.
__all__: list[str] = []

MAX_CURSOR = 2**63 - 1
"""The largest audit cursor a store can hold (a signed 64-bit integer)."""


def start_cursor(request: Request, *, full_view: bool = True) -> int | None:
    """Where a stream starts: `Last-Event-ID`, else `?cursor=` (None: the newest change).

    Both are checked, so a malformed `?cursor=` is refused even when the header wins. A
    caller without `full_view` (one who does not see every agent) may pass an audit ID only
    as 0, the start of the log: any other would let it locate entries in the whole log
    (ADR 0077); it resumes from the sealed cursors and entry references it was sent.

    Raises:
        ApiError: 422 for either one that is neither an integer in 0 … 2**63-1 (only 0
            without `full_view`), a sealed cursor nor an entry reference of this service.
    """
    secret: bytes = request.app.state.golem.auth.secret
    header = _parse_cursor(request.headers.get("last-event-id"), secret, full_view)
    query = _parse_cursor(request.query_params.get("cursor"), secret, full_view)
    return header if header is not None else query


_SEALED = "s"
"""The first character of a sealed cursor (an integer cursor never starts with it)."""


_NONCE, _TAG = 12, 16


@functools.lru_cache(maxsize=8)
def _cursor_keys(secret: bytes) -> tuple[bytes, bytes]:
    """The keystream key and the MAC key of sealed cursors, derived from the auth secret."""
    return (
        hmac.new(secret, b"golem.cursor.pad", hashlib.sha256).digest(),
        hmac.new(secret, b"golem.cursor.mac", hashlib.sha256).digest(),
    )


def seal_cursor(secret: bytes, cursor: int) -> str:
    """`cursor` as an opaque text only this service reads back (`start_cursor`).

    A fresh random nonce each time, so two sealings of one cursor differ: a caller cannot
    tell whether the audit log moved between two of them, nor by how much.
    """
    pad_key, mac_key = _cursor_keys(secret)
    nonce = secrets.token_bytes(_NONCE)
    pad = hmac.new(pad_key, nonce, hashlib.sha256).digest()[:8]
    body = bytes(a ^ b for a, b in zip(cursor.to_bytes(8, "big"), pad, strict=True))
    tag = hmac.new(mac_key, nonce + body, hashlib.sha256).digest()[:_TAG]
    return _SEALED + base64.urlsafe_b64encode(nonce + body + tag).decode("ascii").rstrip("=")


def _unseal_cursor(secret: bytes, text: str) -> int | None:
    """The cursor sealed in `text` (None: not a sealed cursor of this service)."""
    body64 = text[len(_SEALED) :]
    if len(body64) != 48 or not body64.isascii():
        return None
    try:
        raw = base64.urlsafe_b64decode(body64)
    except ValueError:
        return None
    if base64.urlsafe_b64encode(raw).decode("ascii") != body64:
        return None  # one spelling: not `+` or `/` for `-` or `_`, no stray characters
    nonce, body, tag = raw[:_NONCE], raw[_NONCE:-_TAG], raw[-_TAG:]
    pad_key, mac_key = _cursor_keys(secret)
    want = hmac.new(mac_key, nonce + body, hashlib.sha256).digest()[:_TAG]
    if len(body) != 8 or not hmac.compare_digest(tag, want):
        return None
    pad = hmac.new(pad_key, nonce, hashlib.sha256).digest()[:8]
    value = int.from_bytes(bytes(a ^ b for a, b in zip(body, pad, strict=True)), "big")
    return value if value <= MAX_CURSOR else None


@functools.lru_cache(maxsize=8)
def _entry_keys(secret: bytes) -> tuple[bytes, bytes]:
    """The synthetic-nonce key and the keystream key of entry references."""
    return (
        hmac.new(secret, b"golem.entry.siv", hashlib.sha256).digest(),
        hmac.new(secret, b"golem.entry.pad", hashlib.sha256).digest(),
    )


_ENTRY = "e"
"""The first character of an entry reference."""


_ENTRY_LEN = 27
"""Characters after `_ENTRY`: base64url of a 12-byte synthetic nonce and 8 bytes."""


def _seal_entry(secret: bytes, entry_id: int) -> str:
    """An audit entry's reference for a caller who does not see every agent (ADR 0077).

    The same entry always gets the same reference (so a client can match an entry seen on
    a page, in the stream and in a run's trail), but references are unordered and say
    nothing of the entry's place in the log: their gaps count nothing. Only this service
    reads one back (`read_position`).
    """
    siv_key, pad_key = _entry_keys(secret)
    raw = entry_id.to_bytes(8, "big")
    nonce = hmac.new(siv_key, raw, hashlib.sha256).digest()[:_NONCE]
    pad = hmac.new(pad_key, nonce, hashlib.sha256).digest()[:8]
    body = bytes(a ^ b for a, b in zip(raw, pad, strict=True))
    return _ENTRY + base64.urlsafe_b64encode(nonce + body).decode("ascii").rstrip("=")


def _unseal_entry(secret: bytes, text: str) -> int | None:
    """The audit ID behind an entry reference (None: not one of this service)."""
    body64 = text[len(_ENTRY) :]
    if len(body64) != _ENTRY_LEN or not body64.isascii():
        return None
    try:
        raw = base64.urlsafe_b64decode(body64 + "=")
    except ValueError:
        return None
    if base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=") != body64:
        return None  # one entry, one spelling: no unused bits set, no stray characters
    nonce, body = raw[:_NONCE], raw[_NONCE:]
    siv_key, pad_key = _entry_keys(secret)
    pad = hmac.new(pad_key, nonce, hashlib.sha256).digest()[:8]
    plain = bytes(a ^ b for a, b in zip(body, pad, strict=True))
    want = hmac.new(siv_key, plain, hashlib.sha256).digest()[:_NONCE]
    if not hmac.compare_digest(nonce, want):
        return None
    value = int.from_bytes(plain, "big")
    return value if value <= MAX_CURSOR else None


def read_position(secret: bytes, text: str, *, full_view: bool) -> int | None:
    """The audit ID named by a sealed cursor or an entry reference of this service, or
    (only with `full_view`) by a decimal audit ID; None for anything else."""
    if text.startswith(_SEALED):
        return _unseal_cursor(secret, text)
    if text.startswith(_ENTRY):
        return _unseal_entry(secret, text)
    if full_view and 0 < len(text) <= 19 and text.isascii() and text.isdigit():
        value = int(text)
        return value if value <= MAX_CURSOR else None
    return None


def _parse_cursor(text: str | None, secret: bytes, full_view: bool = True) -> int | None:
    """The event stream's start cursor from `Last-Event-ID` or `?cursor=` (None: newest).

    Raises:
        ApiError: 422 for text that is neither a decimal integer in 0 … 2**63-1 (only 0
            without `full_view`), a sealed cursor nor an entry reference of this service.
    """
    if text is None or text == "":
        return None
    if text.startswith((_SEALED, _ENTRY)):
        value = read_position(secret, text, full_view=full_view)
        if value is None:
            raise ApiError(
                422, "invalid_request", "the cursor is not one this service sent (or it changed)"
            )
        return value
    # an integer, possibly written `5.0` (JSON Schema's integers include it, and so do the
    # service's other integer query parameters)
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
    """The entry's ID as a caller is shown it: its audit ID (`secret` None: a caller who
    sees every agent), else its reference sealed under `secret` (ADR 0077)."""
    if secret is None:
        return e.id
    return _seal_entry(secret, e.id)


def shown_to(cred: Credential, secret: bytes) -> bytes | None:
    """`entry_id`'s `secret` for `cred`: None when it sees every agent."""
    return None if cred.approver.agents is None else secret
