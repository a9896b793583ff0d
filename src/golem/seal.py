"""Seals on pending calls: `v1.<key ID>.<kind>.<HMAC-SHA256>` over the conversation ID,
call ID, tool name, kind and exact argument bytes (docs/guides/trust-and-integrity.md)."""

from __future__ import annotations

import binascii
import hashlib
import hmac
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType
from typing import TypeAlias

from golem.errors import SealError
from golem.messages import Message, ToolCall
from golem.tool import DeferKind

__all__ = ["SealKey", "SealKeys", "seal_call", "seal_pending", "verify_call"]

_VERSION = "v1"
_MIN_KEY_BYTES = 32
_KEY_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_MAC_TEXT = re.compile(r"[A-Za-z0-9_-]{43}")  # base64url of 32 bytes, without padding
_MAC_LEN = 43
_KINDS: dict[str, DeferKind] = {k.value: k for k in DeferKind}


class SealKeys:
    """The keys an agent seals with (`current`, ≥ 32 bytes, as `key_id`) and still verifies
    (`older`, by ID); `TypeError`/`ValueError` for bad keys or IDs."""

    __slots__ = ("_keys", "_pads", "current", "key_id", "older")

    current: bytes
    key_id: str
    older: Mapping[str, bytes]
    _keys: dict[str, bytes]
    _pads: dict[str, _Pads]

    def __init__(
        self, current: bytes, *, key_id: str = "k1", older: Mapping[str, bytes] | None = None
    ) -> None:
        _check_key(key_id, current)
        retired = dict(older or {})
        for old_id, old_key in retired.items():
            _check_key(old_id, old_key)
            if old_id == key_id:
                raise ValueError(
                    f'seal key ID "{key_id}" is both the current key and an older key; '
                    "give the new key a new ID"
                )
        keys = {old_id: bytes(old_key) for old_id, old_key in retired.items()}
        keys[key_id] = bytes(current)
        object.__setattr__(self, "current", bytes(current))
        object.__setattr__(self, "key_id", key_id)
        object.__setattr__(self, "older", MappingProxyType(dict(retired)))
        object.__setattr__(self, "_keys", keys)
        object.__setattr__(self, "_pads", {kid: _pads(k) for kid, k in keys.items()})

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("SealKeys is immutable; build a new one to rotate keys")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("SealKeys is immutable")

    def __repr__(self) -> str:
        return f"SealKeys(key_id={self.key_id!r}, older={sorted(self.older)!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SealKeys):
            return NotImplemented
        return self.key_id == other.key_id and self._keys == other._keys

    def __hash__(self) -> int:
        return hash((self.key_id, tuple(sorted(self._keys))))

    def key(self, key_id: str) -> bytes | None:
        """The key with this ID (current or older), or None."""
        return self._keys.get(key_id)


_Pads: TypeAlias = "tuple[hashlib._Hash, hashlib._Hash]"


def _pads(key: bytes) -> _Pads:
    """HMAC-SHA256's keyed inner and outer hash states (RFC 2104), computed once per key:
    a MAC then costs two hash copies instead of an OpenSSL digest lookup per call."""
    block = key if len(key) <= 64 else hashlib.sha256(key).digest()
    block = block.ljust(64, b"\0")
    return (
        hashlib.sha256(bytes(b ^ 0x36 for b in block)),
        hashlib.sha256(bytes(b ^ 0x5C for b in block)),
    )


SealKey: TypeAlias = bytes | SealKeys
"""What `Agent(seal_key=...)` accepts: one key (bytes, ID "k1") or a `SealKeys`."""


def _check_key(key_id: object, key: object) -> None:
    if not isinstance(key_id, str) or not _KEY_ID.fullmatch(key_id):
        raise ValueError(f"seal key ID must be 1-64 letters, digits, '_' or '-', got {key_id!r}")
    if not isinstance(key, bytes | bytearray):
        raise TypeError(
            f'seal key "{key_id}" must be bytes, got {type(key).__name__} '
            "(for example secrets.token_bytes(32), or text.encode())"
        )
    if len(key) < _MIN_KEY_BYTES:
        raise ValueError(
            f'seal key "{key_id}" must be at least {_MIN_KEY_BYTES} bytes, got {len(key)} '
            "(use secrets.token_bytes(32))"
        )


def as_seal_keys(key: SealKey) -> SealKeys:
    """`key` as `SealKeys` (bytes: the current key, ID "k1"); `TypeError`/`ValueError`."""
    if isinstance(key, SealKeys):
        return key
    if isinstance(key, bytes | bytearray):
        return SealKeys(bytes(key))
    raise TypeError(f"a seal key is bytes or SealKeys, got {type(key).__name__}")


def _field(data: bytes) -> bytes:
    return len(data).to_bytes(8, "big") + data


_HEAD = _field(b"golem-seal-" + _VERSION.encode())


def _mac(pads: _Pads, conversation_id: str, call: ToolCall, kind: str) -> str:
    """base64url HMAC-SHA256 over the length-prefixed label, conversation, ID, name, kind, args."""
    conv = conversation_id.encode("utf-8", "surrogatepass")
    cid = call.id.encode("utf-8", "surrogatepass")
    name = call.name.encode("utf-8", "surrogatepass")
    kin = kind.encode()
    args = call.args.encode("utf-8", "surrogatepass")
    inner = pads[0].copy()
    inner.update(_HEAD + b"".join(map(_field, (conv, cid, name, kin, args))))
    outer = pads[1].copy()
    outer.update(inner.digest())
    return binascii.b2a_base64(outer.digest(), newline=False)[:-1].translate(_URLSAFE).decode()


_URLSAFE = bytes.maketrans(b"+/", b"-_")


def _kind(kind: DeferKind | str) -> DeferKind:
    found = _KINDS.get(kind) if isinstance(kind, str) else None
    if found is None:
        raise ValueError(f'deferral kind must be "approval" or "external", got {kind!r}')
    return found


def seal_call(keys: SealKey, conversation_id: str, call: ToolCall, kind: DeferKind | str) -> str:
    """The seal for `call` paused with `kind` in `conversation_id` (the current key)."""
    k = as_seal_keys(keys)
    kind = _kind(kind)
    mac = _mac(k._pads[k.key_id], conversation_id, call, kind)
    return f"{_VERSION}.{k.key_id}.{kind.value}.{mac}"


def verify_call(keys: SealKey, conversation_id: str, call: ToolCall) -> DeferKind:
    """Check `call.seal` and return its kind; `SealError` naming the problem otherwise."""
    k = as_seal_keys(keys)

    def fail(problem: str, text: str) -> SealError:
        return SealError(
            call.id, call.name, problem, f'golem: pending tool call "{call.id}" ({call.name}){text}'
        )

    seal = call.seal
    if not seal:
        raise fail(
            "unsealed",
            " has no seal; this agent only resumes calls it sealed when it paused (a forged "
            "call, a history from an agent without seal_key, or one the Go golem re-wrote: it "
            "drops seals, so resume it as a PausedRun)",
        )
    pieces = seal.split(".")
    if len(pieces) != 4 or pieces[0] != _VERSION:
        version = pieces[0] if len(pieces) == 4 else ""
        detail = f'unsupported seal version "{version}"' if version else "not a golem seal"
        raise fail("malformed", f": malformed seal ({detail})")
    _, key_id, kind_text, mac = pieces
    kind = _KINDS.get(kind_text)
    if kind is None or len(mac) != _MAC_LEN or not mac.isascii():
        raise fail("malformed", ": malformed seal (bad kind or MAC)")
    pads = k._pads.get(key_id)
    if pads is None:
        raise fail(
            "unknown_key",
            f': sealed with unknown key ID "{key_id}" (this agent holds '
            f"{sorted([k.key_id, *k.older])})",
        )
    if not hmac.compare_digest(mac, _mac(pads, conversation_id, call, kind)):
        if not _MAC_TEXT.fullmatch(mac):  # checked only on failure: verification is hot
            raise fail("malformed", ": malformed seal (bad kind or MAC)")
        raise fail(
            "tampered",
            f": the seal does not match the call — its tool name, arguments or kind "
            f"({kind.value}) changed since it paused, or it belongs to another conversation; "
            "it was not executed",
        )
    return kind


def seal_pending(
    messages: Sequence[Message],
    keys: SealKey,
    conversation_id: str,
    kinds: Mapping[str, DeferKind | str],
) -> list[Message]:
    """A copy of `messages` whose calls named in `kinds` (ID → kind) carry seals; nothing
    is mutated (`ValueError` for another kind)."""
    k = as_seal_keys(keys)
    sealed: dict[str, ToolCall] = {}
    for m in messages:  # the last call with an ID wins, as in `replace_calls`
        if m.role == "assistant":
            for c in m.tool_calls:
                kind = kinds.get(c.id)
                if kind is not None:
                    sealed[c.id] = replace(c, seal=seal_call(k, conversation_id, c, kind))
    return replace_calls(messages, sealed)


def replace_calls(messages: Sequence[Message], calls: Mapping[str, ToolCall]) -> list[Message]:
    """A copy of `messages` with each call whose ID is in `calls` replaced (the last one)."""
    out = list(messages)
    done: set[str] = set()
    for i in range(len(out) - 1, -1, -1):
        if len(done) == len(calls):
            break
        m = out[i]
        if m.role != "assistant" or not m.tool_calls:
            continue
        new: list[ToolCall] | None = None
        for j in range(len(m.tool_calls) - 1, -1, -1):
            c = m.tool_calls[j]
            found = calls.get(c.id)
            if found is not None and c.id not in done:
                if new is None:
                    new = list(m.tool_calls)
                new[j] = found
                done.add(c.id)
        if new is not None:
            out[i] = replace(m, tool_calls=new)
    return out
