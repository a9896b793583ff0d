"""golem.seal: keys, the seal text and its MAC, verification and its failures, rotation."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import re
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from golem import Message, ResumeError, SealError, ToolCall
from golem.seal import SealKeys, as_seal_keys, seal_call, seal_pending, verify_call
from golem.tool import DeferKind

KEY = b"k" * 32
OTHER = b"o" * 32
CALL = ToolCall("c1", "transfer", '{"to":"bob","amount":10}')


def std_mac(key: bytes, conv: str, call: ToolCall, kind: str) -> str:
    fields = [b"golem-seal-v1", conv.encode(), call.id.encode(), call.name.encode()]
    msg = b"".join(
        len(f).to_bytes(8, "big") + f for f in [*fields, kind.encode(), call.args.encode()]
    )
    return (
        base64.urlsafe_b64encode(hmac.new(key, msg, hashlib.sha256).digest()).rstrip(b"=").decode()
    )


@pytest.mark.parametrize("size", [32, 63, 64, 65, 200])
def test_a_seal_is_version_key_id_kind_and_the_hmac_sha256_of_length_prefixed_fields(
    size: int,
) -> None:
    key = bytes(range(256))[:size]
    call = ToolCall("id-é", "näme", '{"x": "\\u00e9 é"}')
    for kind in DeferKind:
        seal = seal_call(key, "cönv", call, kind)
        assert seal == f"v1.k1.{kind.value}.{std_mac(key, 'cönv', call, kind.value)}"
        assert seal == seal_call(SealKeys(key), "cönv", call, kind.value)  # deterministic
        assert verify_call(key, "cönv", replace(call, seal=seal)) is kind


@pytest.mark.parametrize(
    ("conv", "call", "kind", "key"),
    [
        ("conv", replace(CALL, args='{"to":"mallory","amount":10}'), "approval", KEY),
        ("conv", replace(CALL, args='{"to": "bob","amount":10}'), "approval", KEY),
        ("conv", replace(CALL, name="delete_account"), "approval", KEY),
        ("conv", replace(CALL, id="c2"), "approval", KEY),
        ("conv2", CALL, "approval", KEY),
        ("conv", CALL, "external", KEY),
        ("conv", CALL, "approval", OTHER),
    ],
    ids=["args", "args-bytes", "name", "id", "conversation", "kind", "key"],
)
def test_every_bound_field_changes_the_mac(
    conv: str, call: ToolCall, kind: str, key: bytes
) -> None:
    mac = seal_call(KEY, "conv", CALL, "approval").split(".")[3]
    assert seal_call(key, conv, call, kind).split(".")[3] != mac


def problem(call: ToolCall, keys: bytes | SealKeys = KEY, conv: str = "conv") -> SealError:
    with pytest.raises(SealError) as info:
        verify_call(keys, conv, call)
    err = info.value
    assert isinstance(err, ResumeError)
    assert isinstance(err, ValueError)
    assert (err.call_id, err.tool_name) == (call.id, call.name)
    assert f'"{call.id}"' in str(err)
    return err


SEALED = replace(CALL, seal=seal_call(KEY, "conv", CALL, "approval"))
AT_2025 = replace(CALL, seal=seal_call(SealKeys(KEY, key_id="2025"), "conv", CALL, "approval"))
ROTATED = SealKeys(OTHER, key_id="2026", older={"2025": KEY})

HOSTILE_SEALS: list[tuple[str, ToolCall, Any, str, str]] = [
    ("unsealed", CALL, KEY, "unsealed", "has no seal"),
    *[
        (f"malformed-{i}", replace(CALL, seal=seal), KEY, "malformed", "malformed seal")
        for i, seal in enumerate(
            [
                "garbage",
                "v1.k1.approval",
                "v2.k1.approval.AAAA",
                "v1.k1.approve." + "A" * 43,
                "v1.k1.approval." + "A" * 42,
                "v1.k1.approval." + "*" * 43,
                "v1.k1.approval." + "A" * 43 + ".x",
            ]
        )
    ],
    ("unknown-key", AT_2025, SealKeys(OTHER, key_id="2026"), "unknown_key", '"2025".*2026'),
    ("args", replace(SEALED, args='{"to":"mallory"}'), KEY, "tampered", "does not match"),
    ("name", replace(SEALED, name="delete_account"), KEY, "tampered", "does not match"),
    (
        "kind",
        replace(SEALED, seal=SEALED.seal.replace(".approval.", ".external.")),
        KEY,
        "tampered",
        "does not match",
    ),
    ("wrong-key", SEALED, OTHER, "tampered", "does not match"),
    (
        "key-id-reused",  # a seal made by another key under a key ID the verifier holds
        replace(CALL, seal=seal_call(SealKeys(OTHER, key_id="2025"), "conv", CALL, "approval")),
        ROTATED,
        "tampered",
        "does not match",
    ),
]


@pytest.mark.parametrize(
    ("call", "keys", "kind", "match"),
    [row[1:] for row in HOSTILE_SEALS],
    ids=[row[0] for row in HOSTILE_SEALS],
)
def test_verify_refuses_every_hostile_seal_naming_the_problem(
    call: ToolCall, keys: Any, kind: str, match: str
) -> None:
    err = problem(call, keys)
    assert err.problem == kind
    assert re.search(match, str(err))


def test_a_seal_of_another_conversation_is_tampered() -> None:
    assert problem(SEALED, conv="other").problem == "tampered"


def test_rotation_seals_with_the_current_key_and_verifies_older_ones() -> None:
    external = replace(CALL, seal=seal_call(SealKeys(KEY, key_id="2025"), "conv", CALL, "external"))
    assert verify_call(ROTATED, "conv", external) is DeferKind.EXTERNAL
    new = seal_call(ROTATED, "conv", CALL, "approval")
    assert new.startswith("v1.2026.approval.")
    assert verify_call(ROTATED, "conv", replace(CALL, seal=new)) is DeferKind.APPROVAL


FIELD = st.text(st.characters(codec=None, categories=None), max_size=6)  # lone surrogates too
FIELDS = st.tuples(FIELD, FIELD, FIELD, FIELD, st.sampled_from(list(DeferKind)))


@given(sealed=FIELDS, shown=FIELDS, near=st.booleans())
def test_a_seal_verifies_only_the_exact_fields_it_was_made_for(
    sealed: tuple[str, str, str, str, DeferKind],
    shown: tuple[str, str, str, str, DeferKind],
    near: bool,
) -> None:
    """Field boundaries, surrogates and kinds: one (conversation, call ID, tool name,
    argument bytes, kind) and no other."""
    conv, cid, name, args, kind = sealed
    seal = seal_call(KEY, conv, ToolCall(cid, name, args), kind)
    if near:  # one field moved by one character into its neighbour
        shown = (conv + cid[:1], cid[1:], name, args, kind)
    conv2, cid2, name2, args2, kind2 = shown
    claimed = seal.replace(f".{kind.value}.", f".{kind2.value}.", 1)
    call = ToolCall(cid2, name2, args2, seal=claimed)
    if shown == sealed:
        assert verify_call(KEY, conv2, call) is kind
    else:
        with pytest.raises(SealError):
            verify_call(KEY, conv2, call)


@given(at=st.integers(0, 200), char=st.characters(codec="utf-8"))
def test_any_one_character_change_of_a_seal_is_refused(at: int, char: str) -> None:
    keys = SealKeys(KEY, key_id="new", older={"old": OTHER})
    seal = seal_call(keys, "conv", CALL, DeferKind.APPROVAL)
    at %= len(seal)
    changed = seal[:at] + char + seal[at + 1 :]
    if changed != seal:
        with pytest.raises(SealError):
            verify_call(keys, "conv", replace(CALL, seal=changed))


# --------------------------------------------------------------------------- keys


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        *[
            (make, ValueError, "at least 32 bytes")
            for make in (
                lambda: SealKeys(b"x" * 31),
                lambda: SealKeys(KEY, older={"old": b""}),
                lambda: as_seal_keys(b"x" * 16),
            )
        ],
        (lambda: SealKeys("k" * 32), TypeError, "must be bytes"),
        (lambda: as_seal_keys("k" * 32), TypeError, "bytes or SealKeys"),
        *[
            (lambda key_id=key_id: SealKeys(KEY, key_id=key_id), ValueError, "key ID")
            for key_id in ["", "a.b", "with space", "x" * 65]
        ],
        (
            lambda: SealKeys(KEY, older={"k1": OTHER}),
            ValueError,
            "both the current key and an older",
        ),
    ],
)
def test_bad_keys_are_refused(make: Any, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        make()


def test_seal_keys_are_immutable_compare_by_value_and_never_show_their_bytes() -> None:
    keys = SealKeys(KEY, key_id="now", older={"then": OTHER})
    assert "now" in repr(keys)
    assert "then" in str(keys)
    assert "kkkk" not in repr(keys) + str(keys)
    assert "oooo" not in repr(keys)
    with pytest.raises(AttributeError):
        keys.current = OTHER  # type: ignore[misc]
    with pytest.raises(TypeError):
        keys.older["x"] = OTHER  # type: ignore[index]
    plain = SealKeys(KEY)
    assert plain == SealKeys(KEY) != SealKeys(OTHER)
    assert hash(plain) == hash(SealKeys(KEY))
    assert as_seal_keys(plain) is plain
    assert as_seal_keys(KEY) == plain
    assert (plain.key("k1"), plain.key("nope")) == (KEY, None)


# --------------------------------------------------------------------------- seal_pending


def test_seal_pending_seals_only_the_named_calls_and_mutates_nothing() -> None:
    first = Message(role="assistant", tool_calls=[ToolCall("a", "t", "{}")])
    batch = Message(
        role="assistant", tool_calls=[ToolCall("b", "t", '{"x":1}'), ToolCall("c", "u", "{}")]
    )
    result = Message(role="tool", content="ok", tool_call_id="c", tool_name="u")
    history = [first, Message(role="tool", content="r", tool_call_id="a"), batch, result]
    before = list(history)
    sealed = seal_pending(history, KEY, "conv", {"b": DeferKind.APPROVAL})
    assert history == before
    assert batch.tool_calls[0].seal == ""
    assert sealed[0] is first
    assert sealed[3] is result
    assert sealed[2] is not batch
    b, c = sealed[2].tool_calls
    assert verify_call(KEY, "conv", b) is DeferKind.APPROVAL
    assert (b.id, b.name, b.args, c.seal) == ("b", "t", '{"x":1}', "")
    assert seal_pending(before[:1], KEY, "conv", {}) == before[:1]
    with pytest.raises(ValueError, match="deferral kind"):
        seal_pending(history, KEY, "conv", {"a": "approve"})


def test_tool_call_fields_are_the_ones_a_sealed_pause_copies() -> None:
    """`deferred.pause` builds sealed ToolCalls field by field: a new field must go there too."""
    names = [f.name for f in dataclasses.fields(ToolCall)]
    assert names == ["id", "name", "args", "signature", "seal"]
