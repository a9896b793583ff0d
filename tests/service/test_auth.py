"""Approvers, token configuration, and the signed session / stream tokens."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from golem.service import Approver, AuthConfig


def test_approver_restrictions() -> None:
    anyone = Approver("root")
    assert anyone.may_see("x")
    assert anyone.may_decide("x", "t")
    assert anyone.may_start("x")
    scoped = Approver("olga", agents={"ops"}, tools={"restart"}, can_start=False)  # type: ignore[arg-type]
    assert scoped.agents == frozenset({"ops"})  # any iterable is frozen
    assert scoped.may_see("ops")
    assert not scoped.may_see("billing")
    assert scoped.may_decide("ops", "restart")
    assert not scoped.may_decide("ops", "delete")
    assert not scoped.may_decide("billing", "restart")
    assert not scoped.may_start("ops")
    viewer = Approver("val", tools=frozenset())  # sees every run, decides no call
    assert viewer.may_see("ops")
    assert viewer.may_start("ops")
    assert not viewer.may_decide("ops", "restart")


def test_approver_needs_an_identity() -> None:
    with pytest.raises(ValueError, match="identity"):
        Approver("  ")


def test_tokens_are_looked_up_by_digest() -> None:
    hashed = "sha256:" + hashlib.sha256(b"s3cret").hexdigest()
    auth = AuthConfig(tokens={"plain": Approver("a"), hashed: Approver("b")})
    assert auth.authenticate("plain").approver.identity == "a"  # type: ignore[union-attr]
    assert auth.authenticate("s3cret").approver.identity == "b"  # type: ignore[union-attr]
    assert auth.authenticate(hashed) is None
    assert auth.authenticate("") is None
    assert auth.authenticate("other") is None
    cred = auth.from_authorization("Bearer plain")
    assert cred is not None
    assert cred.digest == hashlib.sha256(b"plain").hexdigest()
    assert auth.from_authorization("bearer   plain").approver.identity == "a"  # type: ignore[union-attr]
    assert auth.from_authorization("Basic plain") is None
    assert auth.from_authorization(None) is None
    assert sorted(a.identity for a in auth.approvers) == ["a", "b"]


@pytest.mark.parametrize(
    ("tokens", "match"),
    [
        ({}, "at least one token"),
        ({"": Approver("a")}, "must not be empty"),
        ({"sha256:abc": Approver("a")}, "64 hex digits"),
        ({"t": "alice"}, "want an Approver"),
    ],
)
def test_bad_token_tables_are_rejected(tokens: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        AuthConfig(tokens=tokens)  # type: ignore[arg-type]


def test_lifetimes_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        AuthConfig(tokens={"t": Approver("a")}, stream_token_seconds=0)
    with pytest.raises(ValueError, match="secret"):
        AuthConfig(tokens={"t": Approver("a")}, secret=b"")


def test_from_env_reads_json(tmp_path: Path) -> None:
    spec = {
        "tok-a": {"identity": "alice"},
        "tok-o": {"identity": "olga", "agents": ["ops"], "tools": None, "can_start": False},
        "tok-s": "sam",
    }
    key = "k" * 32
    auth = AuthConfig.from_env({"GOLEM_APPROVERS": json.dumps(spec), "GOLEM_SESSION_SECRET": key})
    assert auth.secret == key.encode()
    olga = auth.authenticate("tok-o")
    assert olga is not None
    assert olga.approver == Approver("olga", agents=frozenset({"ops"}), can_start=False)
    assert auth.authenticate("tok-s").approver == Approver("sam")  # type: ignore[union-attr]


def test_from_env_reads_a_file(tmp_path: Path) -> None:
    path = tmp_path / "approvers.json"
    path.write_text(json.dumps({"t": {"identity": "file-user"}}))
    auth = AuthConfig.from_env({"GOLEM_APPROVERS_FILE": str(path)})
    assert auth.authenticate("t").approver.identity == "file-user"  # type: ignore[union-attr]
    # two configs without GOLEM_SESSION_SECRET get different random keys
    other = AuthConfig.from_env({"GOLEM_APPROVERS_FILE": str(path)})
    assert auth.secret != other.secret


@pytest.mark.parametrize(
    ("env", "match"),
    [
        ({}, "no approvers configured"),
        ({"GOLEM_APPROVERS": "{"}, "not valid JSON"),
        ({"GOLEM_APPROVERS": "[]"}, "JSON object"),
        ({"GOLEM_APPROVERS": '{"t": 5}'}, "object or a string"),
        ({"GOLEM_APPROVERS": '{"t": {"identity": 5}}'}, "'identity' must be a string"),
        ({"GOLEM_APPROVERS": '{"t": {"identity": "a", "agents": "ops"}}'}, "list of names"),
        ({"GOLEM_APPROVERS": '{"t": {"identity": "a", "can_start": "yes"}}'}, "true or false"),
        ({"GOLEM_APPROVERS": '{"t": {"identity": "a", "admin": true}}'}, "unknown keys"),
        ({"GOLEM_APPROVERS_FILE": "/nonexistent/approvers.json"}, "GOLEM_APPROVERS_FILE"),
    ],
)
def test_from_env_errors_name_the_problem(env: dict[str, str], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        AuthConfig.from_env(env)


def make() -> AuthConfig:
    return AuthConfig(
        tokens={"tok": Approver("alice"), "tok2": Approver("bob")},
        secret=b"k1" * 16,
        session_seconds=100,
        stream_token_seconds=10,
    )


def test_sessions_verify_until_they_expire() -> None:
    auth = make()
    cred = auth.authenticate("tok")
    assert cred is not None
    value = auth.issue_session(cred, now=1000.0)
    assert auth.verify_session(value, now=1099.0) == cred
    assert auth.verify_session(value, now=1100.0) is None
    assert "tok" not in value  # the cookie holds a digest, never the token


def test_signed_values_resist_tampering_and_other_keys() -> None:
    auth = make()
    cred = auth.authenticate("tok")
    assert cred is not None
    value = auth.issue_session(cred, now=1000.0)
    body, mac = value.split(".")
    bob = auth.authenticate("tok2")
    assert bob is not None
    forged = auth.issue_session(bob, now=1000.0).split(".")[0] + "." + mac
    assert auth.verify_session(forged, now=1001.0) is None
    assert auth.verify_session(body + ".AAAA", now=1001.0) is None
    assert auth.verify_session("garbage", now=1001.0) is None
    assert auth.verify_session("", now=1001.0) is None
    assert auth.verify_session("!!.!!", now=1001.0) is None
    other_key = AuthConfig(tokens={"tok": Approver("alice")}, secret=b"k2" * 16)
    assert other_key.verify_session(value, now=1001.0) is None


def test_stream_tokens_and_sessions_are_not_interchangeable() -> None:
    auth = make()
    cred = auth.authenticate("tok")
    assert cred is not None
    stream, exp = auth.issue_stream_token(cred, now=1000.0)
    assert exp == 1010.0
    assert auth.verify_stream_token(stream, now=1005.0) == cred
    assert auth.verify_stream_token(stream, now=1010.0) is None
    assert auth.verify_session(stream, now=1005.0) is None
    session = auth.issue_session(cred, now=1000.0)
    assert auth.verify_stream_token(session, now=1005.0) is None


def test_removing_a_token_revokes_its_sessions() -> None:
    auth = make()
    cred = auth.authenticate("tok")
    assert cred is not None
    value = auth.issue_session(cred, now=1000.0)
    smaller = AuthConfig(tokens={"tok2": Approver("bob")}, secret=b"k1" * 16)
    assert smaller.verify_session(value, now=1001.0) is None


def test_csrf_tokens_are_bound_to_the_session() -> None:
    auth = make()
    cred = auth.authenticate("tok")
    assert cred is not None
    one = auth.issue_session(cred, now=1.0)
    two = auth.issue_session(cred, now=2.0)
    assert auth.check_csrf(one, auth.csrf_token(one))
    assert not auth.check_csrf(one, auth.csrf_token(two))
    assert not auth.check_csrf(one, "")


@pytest.mark.parametrize("secret", ["short", "x" * 31])
def test_a_session_secret_shorter_than_32_bytes_is_refused(secret: str) -> None:
    env = {"GOLEM_APPROVERS": '{"t": "alice"}', "GOLEM_SESSION_SECRET": secret}
    with pytest.raises(ValueError, match="at least 32 bytes"):
        AuthConfig.from_env(env)
    with pytest.raises(ValueError, match="at least 32 bytes"):
        AuthConfig(tokens={"t": Approver("a")}, secret=secret.encode())


def test_repr_never_shows_tokens_or_the_secret() -> None:
    auth = AuthConfig(tokens={"tok-very-secret": Approver("alice")}, secret=b"s" * 32)
    text = repr(auth) + str(auth)
    assert "tok-very-secret" not in text
    assert "ssss" not in text
    assert "alice" in text


def test_a_revoked_session_is_refused_even_when_replayed() -> None:
    auth = AuthConfig(tokens={"tok": Approver("alice")}, secret=b"r" * 32)
    cred = auth.authenticate("tok")
    assert cred is not None
    one, two = auth.issue_session(cred), auth.issue_session(cred)
    assert auth.verify_session(one) == cred
    assert auth.expiry(one) is not None
    assert auth.revoke_session(one)
    assert auth.verify_session(one) is None
    assert auth.expiry(one) is None
    assert auth.verify_session(two) == cred  # other sessions of the same token live on
    assert not auth.revoke_session("garbage")


@pytest.mark.parametrize(
    ("one", "two"),
    [
        ("ivan", "\u0438\u0432\u0430\u043d"),
        ("alice", "bob"),
        ("\u7530\u4e2d", "tanaka"),
        # operator configuration, not attacker input: look-alikes of other scripts are the
        # operator's choice (ADR 0080)
        ("alice", "\u0430lice"),
    ],
)
def test_identities_that_are_distinct_names_are_kept(one: str, two: str) -> None:
    config = AuthConfig(tokens={"t1": Approver(one), "t2": Approver(two)}, secret=b"s" * 32)
    assert config.authenticate("t2") is not None


@pytest.mark.parametrize(
    "identity", ["ali\u202ece", "al\u200bice", "alice\x1b[2K", "alice\nbob", "\u2066alice"]
)
def test_an_identity_with_hidden_characters_is_refused(identity: str) -> None:
    # Found: an identity is recorded as decided_by and shown in the audit log, its CSV and
    # the webhooks; a bidi override or zero-width character let it read as another's.
    with pytest.raises(ValueError, match="invisible"):
        Approver(identity)


@pytest.mark.parametrize(
    ("one", "two"),
    [("alice", "Alice"), ("zo\u00eb", "zoe\u0308"), ("\uff41lice", "alice")],
)
def test_identities_that_differ_only_in_case_or_unicode_form_are_refused(
    one: str, two: str
) -> None:
    with pytest.raises(ValueError, match="differ only"):
        AuthConfig(tokens={"t1": Approver(one), "t2": Approver(two)}, secret=b"s" * 32)
    # one identity behind two tokens stays allowed
    AuthConfig(tokens={"t1": Approver(one), "t2": Approver(one)}, secret=b"s" * 32)
