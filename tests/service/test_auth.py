"""Approvers, token configuration, and the signed session / stream tokens."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from golem.service import Approver, AuthConfig


def test_approver_restrictions() -> None:
    anyone = Approver("root")
    assert [anyone.may_see("x"), anyone.may_decide("x", "t"), anyone.may_start("x")] == [True] * 3
    scoped = Approver("olga", agents={"ops"}, tools={"restart"}, can_start=False)  # type: ignore[arg-type]
    assert scoped.agents == frozenset({"ops"})  # any iterable is frozen
    assert scoped.may_see("ops")
    assert not scoped.may_see("billing")
    assert scoped.may_decide("ops", "restart")
    assert not scoped.may_decide("ops", "delete")
    assert not scoped.may_decide("billing", "restart")
    assert not scoped.may_start("ops")
    viewer = Approver("val", tools=frozenset())  # sees every run, decides no call
    assert [viewer.may_see("ops"), viewer.may_start("ops")] == [True, True]
    assert not viewer.may_decide("ops", "restart")


def test_tokens_are_looked_up_by_digest() -> None:
    hashed = "sha256:" + hashlib.sha256(b"s3cret").hexdigest()
    auth = AuthConfig(tokens={"plain": Approver("a"), hashed: Approver("b")})
    assert auth.authenticate("plain").approver.identity == "a"  # type: ignore[union-attr]
    assert auth.authenticate("s3cret").approver.identity == "b"  # type: ignore[union-attr]
    assert [auth.authenticate(t) for t in (hashed, "", "other")] == [None] * 3
    cred = auth.from_authorization("Bearer plain")
    assert cred is not None
    assert cred.digest == hashlib.sha256(b"plain").hexdigest()
    assert auth.from_authorization("bearer   plain").approver.identity == "a"  # type: ignore[union-attr]
    assert auth.from_authorization("Basic plain") is None
    assert auth.from_authorization(None) is None
    assert sorted(a.identity for a in auth.approvers) == ["a", "b"]


S = b"s" * 32


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: Approver("  "), "identity"),
        *(
            (lambda i=i: Approver(i), "invisible")  # read as another's in the audit log
            for i in ("ali\u202ece", "al\u200bice", "alice\x1b[2K", "alice\nbob", "\u2066alice")
        ),
        (lambda: AuthConfig(tokens={}), "at least one token"),
        (lambda: AuthConfig(tokens={"": Approver("a")}), "must not be empty"),
        (lambda: AuthConfig(tokens={"sha256:abc": Approver("a")}), "64 hex digits"),
        (lambda: AuthConfig(tokens={"t": "alice"}), "want an Approver"),  # type: ignore[dict-item]
        (lambda: AuthConfig(tokens={"t": Approver("a")}, stream_token_seconds=0), "positive"),
        (lambda: AuthConfig(tokens={"t": Approver("a")}, secret=b""), "secret"),
        *(
            (lambda s=s: AuthConfig(tokens={"t": Approver("a")}, secret=s.encode()), "32 bytes")
            for s in ("short", "x" * 31)
        ),
        *(
            (lambda a=a, b=b: AuthConfig(tokens={"1": Approver(a), "2": Approver(b)}, secret=S),
             "differ only")
            for a, b in (("alice", "Alice"), ("zo\u00eb", "zoe\u0308"), ("\uff41lice", "alice"))
        ),
    ],
)  # fmt: skip
def test_bad_approvers_and_token_tables_are_rejected(make: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make()


@pytest.mark.parametrize(
    ("one", "two"),
    [
        ("ivan", "\u0438\u0432\u0430\u043d"),
        ("alice", "bob"),
        ("\u7530\u4e2d", "tanaka"),
        # operator configuration, not attacker input: look-alikes of other scripts are the
        # operator's choice (ADR 0080)
        ("alice", "\u0430lice"),
        ("alice", "alice"),  # one identity behind two tokens
    ],
)
def test_identities_that_are_distinct_names_are_kept(one: str, two: str) -> None:
    config = AuthConfig(tokens={"t1": Approver(one), "t2": Approver(two)}, secret=S)
    assert config.authenticate("t2") is not None


def test_from_env_reads_json_or_a_file(tmp_path: Path) -> None:
    spec = {
        "tok-a": {"identity": "alice"},
        "tok-o": {"identity": "olga", "agents": ["ops"], "tools": None, "can_start": False},
        "tok-s": "sam",
    }
    auth = AuthConfig.from_env(
        {"GOLEM_APPROVERS": json.dumps(spec), "GOLEM_SESSION_SECRET": "k" * 32}
    )
    assert auth.secret == b"k" * 32
    olga = auth.authenticate("tok-o")
    assert olga is not None
    assert olga.approver == Approver("olga", agents=frozenset({"ops"}), can_start=False)
    assert auth.authenticate("tok-s").approver == Approver("sam")  # type: ignore[union-attr]
    path = tmp_path / "approvers.json"
    path.write_text(json.dumps({"t": {"identity": "file-user"}}))
    auth = AuthConfig.from_env({"GOLEM_APPROVERS_FILE": str(path)})
    assert auth.authenticate("t").approver.identity == "file-user"  # type: ignore[union-attr]
    # two configs without GOLEM_SESSION_SECRET get different random keys
    assert auth.secret != AuthConfig.from_env({"GOLEM_APPROVERS_FILE": str(path)}).secret


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
        *(
            ({"GOLEM_APPROVERS": '{"t": "alice"}', "GOLEM_SESSION_SECRET": s}, "at least 32 bytes")
            for s in ("short", "x" * 31)
        ),
    ],
)
def test_from_env_errors_name_the_problem(env: dict[str, str], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        AuthConfig.from_env(env)


@pytest.fixture
def auth() -> AuthConfig:
    return AuthConfig(
        tokens={"tok": Approver("alice"), "tok2": Approver("bob")},
        secret=b"k1" * 16,
        session_seconds=100,
        stream_token_seconds=10,
    )


def test_sessions_verify_until_they_expire_or_are_revoked(auth: AuthConfig) -> None:
    cred = auth.authenticate("tok")
    assert cred is not None
    value = auth.issue_session(cred, now=1000.0)
    assert auth.verify_session(value, now=1099.0) == cred
    assert auth.verify_session(value, now=1100.0) is None
    assert "tok" not in value  # the cookie holds a digest, never the token
    one, two = auth.issue_session(cred), auth.issue_session(cred)
    assert auth.verify_session(one) == cred
    assert auth.expiry(one) is not None
    assert auth.revoke_session(one)
    assert auth.verify_session(one) is None  # even replayed
    assert auth.expiry(one) is None
    assert auth.verify_session(two) == cred  # other sessions of the same token live on
    assert not auth.revoke_session("garbage")
    # removing a token revokes its sessions
    smaller = AuthConfig(tokens={"tok2": Approver("bob")}, secret=b"k1" * 16)
    assert smaller.verify_session(value, now=1001.0) is None


def test_signed_values_resist_tampering_and_other_keys(auth: AuthConfig) -> None:
    cred, bob = auth.authenticate("tok"), auth.authenticate("tok2")
    assert cred is not None
    assert bob is not None
    value = auth.issue_session(cred, now=1000.0)
    body, mac = value.split(".")
    forged = auth.issue_session(bob, now=1000.0).split(".")[0] + "." + mac
    for bad in (forged, body + ".AAAA", "garbage", "", "!!.!!"):
        assert auth.verify_session(bad, now=1001.0) is None, bad
    other_key = AuthConfig(tokens={"tok": Approver("alice")}, secret=b"k2" * 16)
    assert other_key.verify_session(value, now=1001.0) is None


def test_stream_tokens_and_sessions_are_not_interchangeable(auth: AuthConfig) -> None:
    cred = auth.authenticate("tok")
    assert cred is not None
    stream, exp = auth.issue_stream_token(cred, now=1000.0)
    assert exp == 1010.0
    assert auth.verify_stream_token(stream, now=1005.0) == cred
    assert auth.verify_stream_token(stream, now=1010.0) is None
    assert auth.verify_session(stream, now=1005.0) is None
    session = auth.issue_session(cred, now=1000.0)
    assert auth.verify_stream_token(session, now=1005.0) is None


def test_csrf_tokens_are_bound_to_the_session(auth: AuthConfig) -> None:
    cred = auth.authenticate("tok")
    assert cred is not None
    one, two = auth.issue_session(cred, now=1.0), auth.issue_session(cred, now=2.0)
    assert auth.check_csrf(one, auth.csrf_token(one))
    assert not auth.check_csrf(one, auth.csrf_token(two))
    assert not auth.check_csrf(one, "")


def test_repr_never_shows_tokens_or_the_secret() -> None:
    auth = AuthConfig(tokens={"tok-very-secret": Approver("alice")}, secret=S)
    text = repr(auth) + str(auth)
    assert "tok-very-secret" not in text
    assert "ssss" not in text
    assert "alice" in text
