"""Reading and writing provider JSON: strict parsing of bodies and stream events (lone
surrogates and integers too long to convert survive), compact raw blocks, tool-call
arguments, usage counts."""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Mapping
from typing import Any

from pydantic_core import from_json

from golem.errors import ResponseFormatError
from golem.usage import Usage

__all__ = [
    "MAX_TOKEN_COUNT",
    "args_json",
    "args_object",
    "base64_bytes",
    "dig",
    "given",
    "int_of",
    "json_object",
    "json_text",
    "lenient_json",
    "object_text",
    "parse_event_data",
    "parse_json_body",
    "raw_json",
    "table",
    "text_of",
    "token_count",
    "usage_of",
]


_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def raw_json(value: Any) -> str:
    """A provider object as the compact JSON text kept in `Citation.raw` / `ServerToolBlock.raw`
    (numbers past a float's range or `int()`'s digit limit written as `args_json` writes them)."""
    return args_json(value)


_HUGE = {"\x00+\x00": "1e999", "\x00-\x00": "-1e999", "\x00n\x00": "null"}


def args_json(value: Any, encoder: json.JSONEncoder = _COMPACT) -> str:
    """Tool-call arguments that arrived as a JSON value, as JSON text (compact by default;
    `encoder` must refuse NaN and infinities: `allow_nan=False`)."""
    try:
        return encoder.encode(value)
    except (ValueError, TypeError):
        longs: list[str] = []
        text = encoder.encode(_mark_huge(value, longs))
        for mark, number in _HUGE.items():
            text = text.replace(encoder.encode(mark), number)
        for i, digits in enumerate(longs):
            text = text.replace(encoder.encode(f"\x00#{i}\x00"), digits, 1)
        return text


def _mark_huge(value: Any, longs: list[str]) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "\x00n\x00" if math.isnan(value) else "\x00+\x00" if value > 0 else "\x00-\x00"
    if isinstance(value, _LongInt):
        longs.append(value.text)
        return f"\x00#{len(longs) - 1}\x00"
    if isinstance(value, list):
        return [_mark_huge(v, longs) for v in value]
    if isinstance(value, dict):
        return {k: _mark_huge(v, longs) for k, v in value.items()}
    return value


def object_text(value: Any) -> str | None:
    """`value` when it is text holding a JSON object (tool-call arguments a proxy sent as a
    string where the API sends an object), else None."""
    if isinstance(value, str) and value.lstrip().startswith("{") and json_object(value):
        return value
    return None


def args_object(raw: str, *, strict: bool = False) -> dict[str, Any]:
    """The arguments object sent for raw tool-call arguments: text that is no JSON object is
    wrapped as `{"truncated_args": raw}`; blank text is `{}` unless `strict` (which also
    refuses NaN and infinities)."""
    if not strict and not raw.strip():
        return {}
    try:
        value = json.loads(raw, parse_constant=_refuse_constant if strict else None)
    except (ValueError, RecursionError):
        value = None
    return value if isinstance(value, dict) else {"truncated_args": raw}


def base64_bytes(text: str, altchars: bytes | None = None) -> bytes | None:
    """The bytes of strict base64 `text` (`altchars`: the two characters for `+/`), or None."""
    try:
        return base64.b64decode(text, altchars, validate=True)
    except (binascii.Error, ValueError):
        return None


def json_object(raw: str) -> dict[str, Any] | None:
    """The JSON object `raw` holds (a kept provider block), or None when it holds none."""
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def json_text(value: Any, *, ensure_ascii: bool = True) -> str:
    """`json.dumps` of a parsed body for an error message or an error's `body`: an integer
    too long to convert (`_LongInt`) is written as its digits (quoted), never a `TypeError`."""
    return json.dumps(value, ensure_ascii=ensure_ascii, default=_long_int_text)


def _long_int_text(value: Any) -> str:
    if isinstance(value, _LongInt):
        return value.text
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def parse_json_body(provider: str, text: str, what: str = "a body") -> dict[str, Any]:
    """Parse a JSON object (a response body, a stream event), else raise `ResponseFormatError`."""
    try:
        data = from_json(text, allow_inf_nan=False)
    except ValueError as exc:
        data = lenient_json(text)
        if data is None:
            if not text.strip():  # nothing came: a transfer cut short, another may be whole
                raise ResponseFormatError(
                    f"{provider} returned {what} that is empty", provider=provider, retryable=True
                ) from exc
            raise ResponseFormatError(
                f"{provider} returned {what} that is not JSON: {text[:200]!r}", provider=provider
            ) from exc
    if not isinstance(data, dict):
        raise ResponseFormatError(
            f"{provider} returned {what} that is not a JSON object: {text[:200]!r}",
            provider=provider,
        )
    return data


def parse_event_data(provider: str, data: str) -> dict[str, Any] | None:
    """A stream event's JSON object (see `parse_json_body`), or None for an event without
    data (`data:` alone, a proxy's keep-alive), which carries nothing."""
    try:
        return parse_json_body(provider, data, "a stream event")
    except ResponseFormatError:
        if not data.strip():
            return None
        raise


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def lenient_json(text: str) -> Any:
    """`text` parsed by `json.loads` when the fast parser refused it for what JSON allows:
    lone surrogate escapes (each replaced by U+FFFD), integers too long for Python's
    conversion limit (kept as `_LongInt`, written back digit for digit by `args_json`).
    None when it is not JSON (or has neither)."""
    escapes = "\\u" in text
    if not escapes and _LONG_DIGITS.search(text) is None:
        return None
    try:
        value = json.loads(text, parse_constant=_refuse_constant, parse_int=_parse_int)
    except (ValueError, RecursionError):
        return None
    return _scrub(value) if escapes else value


_LONG_DIGITS = re.compile(r"[0-9]{4301}")
"""A run of more digits than `int()` converts by default (`sys.get_int_max_str_digits`)."""


class _LongInt:
    """An integer of the JSON text too long to convert, as written."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def _parse_int(text: str) -> int | _LongInt:
    try:
        return int(text)
    except ValueError:
        return _LongInt(text)


def _scrub(value: Any) -> Any:
    if isinstance(value, str):
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    if isinstance(value, dict):
        return {_scrub(k): _scrub(v) for k, v in value.items()}
    return value


def token_count(value: Any) -> int:
    """A usage count as reported: a non-negative int; an integral number written as a float
    or as digits (`12.0`, `"12"`, what some compatible servers send) is read; anything else
    (null, a negative or fractional number, a boolean, text) is 0, so that no count can
    lower a run's totals or pass for a number it is not. A count beyond `MAX_TOKEN_COUNT`
    is that bound: a usage limit still trips, and the totals stay exact as floats and fit
    a 64-bit column."""
    if value.__class__ is int:
        count = value
    elif isinstance(value, float) and value.is_integer():
        count = int(value)
    elif isinstance(value, str) and value.isascii() and value.strip().isdigit():
        digits = value.strip().lstrip("0")  # spaces and leading zeros are no magnitude
        count = int(digits or "0") if len(digits) < 20 else MAX_TOKEN_COUNT
    elif isinstance(value, _LongInt):  # over 4300 digits
        return 0 if value.text.startswith("-") else MAX_TOKEN_COUNT
    else:
        return 0
    return count if 0 <= count <= MAX_TOKEN_COUNT else 0 if count < 0 else MAX_TOKEN_COUNT


MAX_TOKEN_COUNT = 2**53 - 1
"""The largest usage count an adapter reports (JSON's largest exact integer)."""


def usage_of(raw: Any, fields: Mapping[str, tuple[str, ...]]) -> Usage:
    """`Usage` from a provider's usage object: each field sums the counts at its paths ("a.b"
    looks inside "a"; "x|y" reads y when x counts 0), at most `MAX_TOKEN_COUNT`."""
    if not isinstance(raw, Mapping):
        return Usage()

    def count(path: str) -> int:
        for alternative in path.split("|"):
            if found := token_count(dig(raw, *alternative.split("."))):
                return found
        return 0

    return Usage(**{f: min(sum(map(count, paths)), MAX_TOKEN_COUNT) for f, paths in fields.items()})


def text_of(value: Any) -> str:
    """`value` when it is text, else ""."""
    return value if isinstance(value, str) else ""


def int_of(value: Any) -> int:
    """`value` when it is an integer (not a boolean), else 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def table(text: str) -> dict[str, str]:
    """A table written as `"key=value key=value ..."`, in order."""
    return dict(pair.split("=") for pair in text.split())


def given(**fields: Any) -> dict[str, Any]:
    """The `fields` that are not None, in order (the optional settings of a request body)."""
    return {key: value for key, value in fields.items() if value is not None}


def dig(value: Any, *keys: str) -> Any:
    """`value[k1][k2]...` through JSON objects, None where one is missing or no object."""
    for key in keys:
        value = value.get(key) if isinstance(value, Mapping) else None
    return value
