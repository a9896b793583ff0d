"""golem.seal (issue 8 §1): keys, the seal text, verification and its failures, rotation."""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import replace

import pytest

from golem import Message, ResumeError, SealError, ToolCall
from golem.seal import SealKeys, as_seal_keys, seal_call, seal_pending, verify_call
from golem.tool import DeferKind

KEY = b"k" * 32
OTHER = b"o" * 32
CALL = ToolCall("c1", "transfer", '{"to":"bob","amount":10}')


def test_a_seal_names_version_key_id_and_kind_then_a_base64url_mac() -> None:
    seal = seal_call(KEY, "conv", CALL, DeferKind.APPROVAL)
    version, key_id, kind, mac = seal.split(".")
    assert (version, key_id, kind) == ("v1", "k1", "approval")
    assert len(mac) == 43
    assert base64.urlsafe_b64decode(mac + "=")


def test_the_mac_is_hmac_sha256_over_length_prefixed_fields() -> None:
    def field(b: bytes) -> bytes:
        return len(b).to_bytes(8, "big") + b

    msg = b"".join(
        field(x)
        for x in (
            b"golem-seal-v1",
            b"conv",
            b"c1",
            b"transfer",
            b"external",
            CALL.args.encode(),
        )
    )
    want = base64.urlsafe_b64encode(hmac.new(KEY, msg, hashlib.sha256).digest()).rstrip(b"=")
    assert seal_call(KEY, "conv", CALL, "external").endswith("." + want.decode())


def test_sealing_is_deterministic_and_kind_accepts_plain_strings() -> None:
    assert seal_call(KEY, "conv", CALL, "approval") == seal_call(
        SealKeys(KEY), "conv", CALL, DeferKind.APPROVAL
    )


@pytest.mark.parametrize(
    "change",
    [
        lambda c: replace(c, args='{"to":"mallory","amount":10}'),
        lambda c: replace(c, args='{"to": "bob","amount":10}'),  # one byte of whitespace
        lambda c: replace(c, name="delete_account"),
        lambda c: replace(c, id="c2"),
    ],
    ids=["args", "args-bytes", "name", "id"],
)
def test_every_bound_field_changes_the_seal(change: object) -> None:
    other = change(CALL)  # type: ignore[operator]
    assert seal_call(KEY, "conv", CALL, "approval") != seal_call(KEY, "conv", other, "approval")


def test_conversation_kind_and_key_change_the_seal() -> None:
    base = seal_call(KEY, "conv", CALL, "approval")
    assert base != seal_call(KEY, "conv2", CALL, "approval")
    assert base.split(".")[3] != seal_call(KEY, "conv", CALL, "external").split(".")[3]
    assert base != seal_call(OTHER, "conv", CALL, "approval")


def test_length_prefixing_keeps_field_boundaries() -> None:
    a = ToolCall("c1", "ab", "{}")
    b = ToolCall("c1a", "b", "{}")
    assert (
        seal_call(KEY, "x", a, "approval").split(".")[3]
        != seal_call(KEY, "x", b, "approval").split(".")[3]
    )


def test_verify_returns_the_sealed_kind() -> None:
    for kind in DeferKind:
        sealed = replace(CALL, seal=seal_call(KEY, "conv", CALL, kind))
        assert verify_call(KEY, "conv", sealed) is kind


def _problem(call: ToolCall, keys: bytes | SealKeys = KEY, conv: str = "conv") -> SealError:
    with pytest.raises(SealError) as info:
        verify_call(keys, conv, call)
    assert isinstance(info.value, ResumeError)
    assert isinstance(info.value, ValueError)
    assert info.value.call_id == call.id
    assert info.value.tool_name == call.name
    assert f'"{call.id}"' in str(info.value)
    return info.value


def test_an_unsealed_call_is_rejected_as_unsealed() -> None:
    err = _problem(CALL)
    assert err.problem == "unsealed"
    assert "has no seal" in str(err)


@pytest.mark.parametrize(
    "seal",
    [
        "garbage",
        "v1.k1.approval",
        "v2.k1.approval.AAAA",
        "v1.k1.approve." + "A" * 43,
        "v1.k1.approval." + "A" * 42,
        "v1.k1.approval." + "*" * 43,
        "v1.k1.approval." + "A" * 43 + ".x",
    ],
)
def test_a_malformed_seal_is_rejected_as_malformed(seal: str) -> None:
    err = _problem(replace(CALL, seal=seal))
    assert err.problem == "malformed"
    assert "malformed seal" in str(err)


def test_an_unknown_key_id_is_named() -> None:
    sealed = replace(CALL, seal=seal_call(SealKeys(KEY, key_id="old"), "conv", CALL, "approval"))
    err = _problem(sealed, SealKeys(OTHER, key_id="new"))
    assert err.problem == "unknown_key"
    assert '"old"' in str(err)
    assert "new" in str(err)


@pytest.mark.parametrize(
    "tamper",
    [
        lambda c: replace(c, args='{"to":"mallory","amount":10000}'),
        lambda c: replace(c, name="delete_account"),
        lambda c: replace(c, seal=c.seal.replace(".approval.", ".external.")),
    ],
    ids=["args", "name", "kind"],
)
def test_tampering_is_rejected_as_tampered(tamper: object) -> None:
    sealed = replace(CALL, seal=seal_call(KEY, "conv", CALL, "approval"))
    err = _problem(tamper(sealed))  # type: ignore[operator]
    assert err.problem == "tampered"
    assert "does not match" in str(err)


def test_a_wrong_key_or_conversation_is_tampered() -> None:
    sealed = replace(CALL, seal=seal_call(KEY, "conv", CALL, "approval"))
    assert _problem(sealed, OTHER).problem == "tampered"
    assert _problem(sealed, KEY, conv="other-conv").problem == "tampered"


def test_rotation_seals_with_the_current_key_and_verifies_older_ones() -> None:
    old = SealKeys(KEY, key_id="2025")
    sealed_old = replace(CALL, seal=seal_call(old, "conv", CALL, "external"))
    rotated = SealKeys(OTHER, key_id="2026", older={"2025": KEY})
    assert verify_call(rotated, "conv", sealed_old) is DeferKind.EXTERNAL
    new_seal = seal_call(rotated, "conv", CALL, "approval")
    assert new_seal.split(".")[1] == "2026"
    assert verify_call(rotated, "conv", replace(CALL, seal=new_seal)) is DeferKind.APPROVAL
    # once the old key is dropped, its seals stop verifying
    assert _problem(sealed_old, SealKeys(OTHER, key_id="2026")).problem == "unknown_key"


def test_a_key_id_cannot_hold_two_keys() -> None:
    rotated = SealKeys(OTHER, key_id="2026", older={"2025": KEY})
    forged = seal_call(SealKeys(OTHER, key_id="2025"), "conv", CALL, "approval")
    assert _problem(replace(CALL, seal=forged), rotated).problem == "tampered"


# --------------------------------------------------------------------------- keys


@pytest.mark.parametrize("size", [0, 1, 16, 31])
def test_short_keys_are_refused(size: int) -> None:
    with pytest.raises(ValueError, match="at least 32 bytes"):
        SealKeys(b"x" * size)
    with pytest.raises(ValueError, match="at least 32 bytes"):
        SealKeys(KEY, older={"old": b"x" * size})
    with pytest.raises(ValueError, match="at least 32 bytes"):
        as_seal_keys(b"x" * size)


def test_text_keys_are_a_type_error_with_a_hint() -> None:
    with pytest.raises(TypeError, match="must be bytes"):
        SealKeys("k" * 32)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="bytes or SealKeys"):
        as_seal_keys("k" * 32)  # type: ignore[arg-type]


@pytest.mark.parametrize("key_id", ["", "a.b", "with space", "x" * 65])
def test_key_ids_are_short_plain_tokens(key_id: str) -> None:
    with pytest.raises(ValueError, match="key ID"):
        SealKeys(KEY, key_id=key_id)


def test_an_older_key_cannot_reuse_the_current_id() -> None:
    with pytest.raises(ValueError, match="both the current key and an older key"):
        SealKeys(KEY, key_id="k1", older={"k1": OTHER})


def test_repr_never_shows_key_bytes() -> None:
    keys = SealKeys(KEY, key_id="now", older={"then": OTHER})
    text = repr(keys) + str(keys)
    assert "now" in text
    assert "then" in text
    assert "kkkk" not in text
    assert "oooo" not in text


def test_seal_keys_are_immutable_and_compare_by_value() -> None:
    keys = SealKeys(KEY)
    with pytest.raises(AttributeError):
        keys.current = OTHER  # type: ignore[misc]
    with pytest.raises(TypeError):
        keys.older["x"] = OTHER  # type: ignore[index]
    assert keys == SealKeys(KEY)
    assert keys != SealKeys(OTHER)
    assert hash(keys) == hash(SealKeys(KEY))
    assert as_seal_keys(keys) is keys
    assert as_seal_keys(KEY) == keys
    assert keys.key("k1") == KEY
    assert keys.key("nope") is None


# --------------------------------------------------------------------------- seal_pending


def test_seal_pending_seals_only_the_named_calls_and_mutates_nothing() -> None:
    first = Message(role="assistant", tool_calls=[ToolCall("a", "t", "{}")])
    batch = Message(
        role="assistant",
        tool_calls=[ToolCall("b", "t", '{"x":1}'), ToolCall("c", "u", "{}")],
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
    assert c.seal == ""
    assert (b.id, b.name, b.args) == ("b", "t", '{"x":1}')


def test_seal_pending_with_nothing_to_seal_returns_an_equal_copy() -> None:
    history = [Message(role="user", content="hi")]
    out = seal_pending(history, KEY, "conv", {})
    assert out == history
    assert out is not history


def test_seal_pending_refuses_an_unknown_kind() -> None:
    history = [Message(role="assistant", tool_calls=[ToolCall("a", "t", "{}")])]
    with pytest.raises(ValueError, match="deferral kind"):
        seal_pending(history, KEY, "conv", {"a": "approve"})


@pytest.mark.parametrize("size", [32, 63, 64, 65, 200])
def test_the_mac_matches_the_standard_library_hmac_for_any_key_length(size: int) -> None:
    key = bytes(range(256))[:size] if size <= 256 else b"x" * size
    call = ToolCall("id-é", "näme", '{"x": "\\u00e9 é"}')
    seal = seal_call(key, "cönv", call, "approval")
    fields = [b"golem-seal-v1", "cönv".encode(), "id-é".encode(), "näme".encode(), b"approval"]
    fields.append(call.args.encode())
    msg = b"".join(len(f).to_bytes(8, "big") + f for f in fields)
    want = base64.urlsafe_b64encode(hmac.new(key, msg, hashlib.sha256).digest()).rstrip(b"=")
    assert seal.split(".")[3] == want.decode()
    assert verify_call(key, "cönv", replace(call, seal=seal)) is DeferKind.APPROVAL


def test_tool_call_fields_are_the_ones_a_sealed_pause_copies() -> None:
    """`deferred.pause` builds sealed ToolCalls field by field (it is on the hot path):
    a new ToolCall field must be carried there too."""
    import dataclasses

    assert [f.name for f in dataclasses.fields(ToolCall)] == [
        "id",
        "name",
        "args",
        "signature",
        "seal",
    ]
