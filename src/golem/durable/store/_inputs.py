"""Checks of a store method's arguments, before any transaction."""

from __future__ import annotations

import base64
import json
from collections.abc import Collection
from datetime import UTC, datetime, timedelta
from typing import Any, overload

from golem.durable.store.records import InvalidCursor, check_seconds

__all__ = [
    "aware",
    "decode_cursor",
    "encode_cursor",
    "held",
    "lease_delta",
    "storable",
    "text_arg",
    "texts",
    "utc",
]


def storable(text: str) -> bool:
    """Whether a text column can hold `text` (no NUL, no lone surrogate)."""
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def text_arg(name: str, value: object) -> str:
    """`value` when it is a `str` (an ID or filter a caller passed); else a `TypeError`."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__} {value!r:.80}")
    return value


def held(name: str, value: object) -> bool:
    """Whether the ID `value` can be stored at all: a `str` no text column refuses (else no
    row has it: not found). Raises `TypeError` for a value that is not a `str`."""
    return storable(text_arg(name, value))


def texts(name: str, values: Collection[str]) -> list[str]:
    """The storable ones of `values` (the others match no row); `TypeError` for a non-`str`."""
    return [v for v in values if held(name, v)]


def aware(value: datetime | None, what: str = "now") -> datetime | None:
    if value is None:
        return None
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{what} must be a timezone-aware datetime, got naive {value!r}")
    return value.astimezone(UTC)


@overload
def utc(value: datetime) -> datetime: ...
@overload
def utc(value: None) -> None: ...
def utc(value: datetime | None) -> datetime | None:
    return None if value is None else value.astimezone(UTC)


def lease_delta(seconds: float) -> timedelta:
    return timedelta(seconds=check_seconds("lease_seconds", seconds))


def encode_cursor(*parts: Any) -> str:
    raw = json.dumps(parts, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, shape: tuple[type, ...]) -> list[Any]:
    """The parts of a cursor `encode_cursor` wrote, as `shape` says (`InvalidCursor` else)."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        parts = json.loads(raw)
    except (ValueError, TypeError, RecursionError):
        parts = None
    if (
        not isinstance(parts, list)
        or len(parts) != len(shape)
        or not all(p.__class__ is t for p, t in zip(parts, shape, strict=True))
    ):
        raise InvalidCursor(cursor)
    try:
        created = datetime.fromisoformat(parts[0])
        created.astimezone(UTC)  # an offset that moves it out of datetime's years
        for p in parts:
            if isinstance(p, str) and "\x00" in p.encode("utf-8").decode():
                raise ValueError("NUL")  # a NUL or a lone surrogate: no column holds it
    except (ValueError, OverflowError):
        raise InvalidCursor(cursor) from None
    if created.tzinfo is None or not all(0 <= p < 2**63 for p in parts if isinstance(p, int)):
        raise InvalidCursor(cursor)
    return [created, *parts[1:]]
